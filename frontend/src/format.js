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
