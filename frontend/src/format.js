// Labels, colours and number formats shared by the views.

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

export function categoryLabel(cat, deviceKind) {
  const device = deviceKind === "CPU" ? "Model compute (on CPU)" : `Device compute (${deviceKind || "device"})`;
  return {
    input: "Waiting for input",
    host_compute: "Host compute",
    device_compute: device,
    host_to_device: "Host → device copies",
    device_to_host: "Device → host copies",
    collective: "Collectives",
    kernel_launch: "Kernel launch",
    idle: "Idle / unrecorded",
  }[cat] || cat;
}

export const KIND_LABELS = {
  cpu: "CPU-bound",
  device: "Device-bound",
  io: "I/O-bound",
  network: "Network-bound",
  unknown: "No verdict",
};

export function kindLabel(kind) {
  return KIND_LABELS[kind] || String(kind || "unknown");
}

const CAUSES = {
  input_preprocessing: "The tf.data preprocessing (map, decode, augment) cannot keep up with training.",
  python_overhead: "Python and Keras overhead on the host between steps.",
  eager_execution: "Ops run eagerly, one by one from Python.",
  kernel_launch: "The host launches many small kernels and the device waits for them.",
  cpu_contention: "Other processes on the machine take the CPU cores the input pipeline needs.",
  file_read: "Reading the input files is too slow (storage).",
  remote_read: "Reading input over the network is too slow.",
  gradient_sync: "Devices wait on gradient synchronisation (collectives).",
  host_device_transfer: "Copies between host and device take a large share of the step.",
  model_compute: "The model's own math: the healthy state.",
  model_on_cpu: "The model ran on the CPU although an accelerator was present.",
  device_trace_missing: "The device trace was not recorded, so no verdict can be made.",
  no_activity: "The trace holds no training activity.",
  unrecorded: "Most of the step has no recorded activity; the trace cannot say what limited it.",
  not_tensorflow: "This is not a TensorFlow trace (JAX/XLA): input-pipeline and step analysis do not apply.",
};

export function causeText(cause) {
  return CAUSES[cause] || String(cause || "").replace(/_/g, " ");
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

/**
 * Turn an analyzer error (one line naming the file) into words a user understands.
 * Returns {headline, hint}; the exact message is shown beside it.
 */
export function explainError(message) {
  const m = String(message || "");
  const rules = [
    [/incomplete profiling window: (.*)$/, (x) => {
      // The analyzer's reason may restate the headline: keep what it adds.
      const rest = x[1].replace(/^the training process stopped inside this profiling window[^;]*;?\s*/i, "");
      return {
        headline: "The training process stopped inside this profiling window, before its trace was saved.",
        hint: rest ? `${rest.charAt(0).toUpperCase()}${rest.slice(1)}${/[.!?]$/.test(rest) ? "" : "."}` : "Capture the profile again.",
      };
    }],
    [/profiling window was skipped: (.*)$/, (x) => ({
      headline: "The profiler did not record this window.",
      hint: `Reason given when it was skipped: ${x[1]}`,
    })],
    [/no \.xplane\.pb in this session/, () => ({
      headline: "This session only holds files written by TensorFlow 2.10 or older, which tfbneck cannot read.",
      hint: "Profile again with a recent TensorFlow, or open this session in the Profile tab.",
    })],
    [/file is empty/, () => ({
      headline: "The trace file is empty.",
      hint: "The profiler may still be writing it, or it stopped before writing. Wait a moment, or capture the profile again.",
    })],
    [/not a valid XSpace protobuf|truncated or corrupt/, () => ({
      headline: "The trace file is damaged (truncated or corrupt) and cannot be read.",
      hint: "Capture the profile again; if the job was killed while profiling, the file was cut short.",
    })],
    [/not an XSpace trace/, () => ({
      headline: "This file is not a profiler trace.",
      hint: "Only .xplane.pb files written by the TensorFlow profiler (or XProf) can be analysed.",
    })],
    [/not a valid gzip file/, () => ({
      headline: "The compressed trace file is damaged.",
      hint: "Capture the profile again.",
    })],
    [/byte limit/, () => ({
      headline: "The trace file is larger than tfbneck reads by default.",
      hint: "Set TFBNECK_MAX_TRACE_BYTES before starting TensorBoard to raise the limit, or profile fewer steps.",
    })],
    [/cannot read file/, () => ({
      headline: "The trace file cannot be read.",
      hint: "Check that the TensorBoard process may read this file.",
    })],
    [/out of memory/, () => ({
      headline: "The trace is too large to analyse in this TensorBoard process's memory.",
      hint: "Profile fewer steps, or use `tfbneck analyze` on a machine with more memory.",
    })],
    [/analysis failed/, () => ({
      headline: "tfbneck hit a problem while analysing this trace.",
      hint: "This is a bug in tfbneck; please report it with the message below.",
    })],
  ];
  for (const [re, f] of rules) {
    const x = m.match(re);
    if (x) return f(x);
  }
  return { headline: "This session could not be analysed.", hint: "" };
}
