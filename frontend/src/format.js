// Labels, colours and number formats shared by the views. The meaning of a cause code comes
// with each report (`cause_text`); error explanations are in errors.js.

/** Breakdown categories in drawing order (bottom of the stack first). */
export const CATEGORIES = [
  "device_compute", "host_compute", "input", "host_to_device", "device_to_host",
  "collective", "kernel_launch", "idle",
];

export const CATEGORY_COLORS = {
  input: "#e8710a",
  host_compute: "#f6bf26",
  device_compute: "#1a73e8",
  host_to_device: "#12b5cb",
  device_to_host: "#0b8043",
  collective: "#9334e6",
  kernel_launch: "#e52592",
  idle: "#c4c7cc",
};

// The verdicts' and categories' names come from the server, never from this file: a report
// carries its own (`bottleneck_label`, `category_labels`), the session list the vocabulary
// for views that show no single report (tfbneck_plugin/schema.py vocabulary()).
let vocabulary = { bottleneck_labels: {}, category_labels: {} };

/** Keep the names the session list sent (`/sessions` `vocabulary`). */
export function setVocabulary(v) {
  if (v && typeof v === "object") vocabulary = { bottleneck_labels: v.bottleneck_labels || {}, category_labels: v.category_labels || {} };
}

/** A category's name: the report's (`category_labels`, named for its device), else the vocabulary's. */
export function categoryLabel(cat, report) {
  const own = report && report.category_labels;
  return (own && own[cat]) || vocabulary.category_labels[cat] || cat;
}

/** A verdict's name: the report's `bottleneck_label` when given, else the vocabulary's. */
const FRAMEWORK_NAMES = { tensorflow: "TensorFlow", jax: "JAX", pytorch: "PyTorch", torch: "PyTorch" };

/**
 * What ran the training, from a report or a session row: "Keras 3 on JAX" where the callback
 * recorded a Keras backend (`backend`), else the trace's framework ("PyTorch", "JAX",
 * "TensorFlow"); "" when neither is known.
 */
export function frameworkLabel(r) {
  if (!r) return "";
  if (r.backend) return `Keras 3 on ${FRAMEWORK_NAMES[r.backend] || r.backend}`;
  return FRAMEWORK_NAMES[r.framework] || "";
}

export function kindLabel(kind, report) {
  return (report && report.bottleneck_label) || vocabulary.bottleneck_labels[kind] || String(kind || "unknown");
}

export function fmtMs(v, digits = 1) {
  if (v === null || v === undefined || Number.isNaN(Number(v))) return "–";
  const n = Number(v);
  if (Math.abs(n) >= 1000) return `${(n / 1000).toFixed(2)} s`;
  return `${n.toFixed(digits)} ms`;
}

export function fmtPct(v, digits = 1) {
  if (v === null || v === undefined || Number.isNaN(Number(v))) return "–";
  return `${Number(v).toFixed(digits)}%`;
}

export function fmtBytes(n) {
  if (!n && n !== 0) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i += 1; }
  return `${v.toFixed(v >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

export function fmtTime(unixSeconds) {
  if (!unixSeconds) return "";
  const d = new Date(unixSeconds * 1000);
  const pad = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** The run as TensorBoard shows it ("." is the logdir itself). */
export function runLabel(run) {
  return run === "." ? "(logdir root)" : run;
}
