// The top-ops table under the breakdown: the report's `top_ops` rows (self time per steady
// step), sortable by clicking a column head, each op a link into the Trace Viewer on the
// session's host with the time of its longest occurrence beside it (XProf's Trace Viewer URL
// takes a run, a tool and hosts, not a time: the row says where to look).
import { breakable, h } from "./dom.js";
import { traceViewerAtUrl, traceViewerUrl } from "./api.js";

const WHERE_LABEL = { device: "device", host: "host", input_pipeline: "tf.data" };
const COLUMNS = [
  { key: "name", label: "Op", num: false },
  { key: "type", label: "Type", num: false },
  { key: "where", label: "Where", num: false },
  { key: "self_ms_per_step", label: "Self ms/step", num: true },
  { key: "pct", label: "%", num: true },
  { key: "count_per_step", label: "Calls/step", num: true },
  { key: "total_ms_per_step", label: "Total ms/step", num: true },
];

/** A number of the report as the table shows it: as the JSON rounds it (3 decimals for ms, 2 for %). */
export function opCell(row, key) {
  const v = row[key];
  if (key === "self_ms_per_step" || key === "total_ms_per_step") return Number(v || 0).toFixed(3);
  if (key === "pct") return Number(v || 0).toFixed(2);
  if (key === "count_per_step") return String(Number(v || 0));
  if (key === "where") return WHERE_LABEL[v] || String(v || "");
  return String(v ?? "");
}

/** Where a long op name may wrap: after each scope (`/`) and each `_` of its parts. */
const OP_NAME_BREAKS = /([/_])/;

/** Rows shown before "Show all", as profilers' op tables start. */
const ROWS_SHOWN = 10;

/** tf.data runs a function's ops as numbered instances (`Sin_12`, `Sin_13`); folded here into
 * one row per op of each stage's function (`Sin`), their times summed and `instances` counted.
 * Other rows stay as they are. Input rows keep the report's order of costliest first. */
export function foldInstances(rows) {
  const out = [];
  const folded = new Map();
  for (const r of rows) {
    const m = r.where === "input_pipeline" ? /^(.*?)_\d+$/.exec(r.name || "") : null;
    if (!m) { out.push(r); continue; }
    const key = JSON.stringify([r.stage || "", m[1], r.type || ""]);
    let f = folded.get(key);
    if (!f) {
      f = Object.assign({}, r, { name: m[1], instances: 0, self_ms_per_step: 0, total_ms_per_step: 0, pct: 0, count_per_step: 0 });
      folded.set(key, f);
      out.push(f);
    }
    f.instances += 1;
    for (const k of ["self_ms_per_step", "total_ms_per_step", "pct", "count_per_step"]) f[k] += Number(r[k] || 0);
    if (Number((r.longest || {}).duration_ms || 0) > Number((f.longest || {}).duration_ms || 0)) f.longest = r.longest;
  }
  for (const f of folded.values()) {
    for (const [k, d] of [["self_ms_per_step", 3], ["total_ms_per_step", 3], ["pct", 2], ["count_per_step", 1]]) f[k] = Number(f[k].toFixed(d));
  }
  return out;
}

/** The Trace Viewer zoomed on an op's longest run: its start in the host window is moved onto
 * the trace's time axis by the worst step's two positions (`start_ms` in the window,
 * `trace_start_ms` on the axis); without them, the session's Trace Viewer. */
function opLink(row, report) {
  const tv = report.trace_viewer;
  const at = row.longest || {};
  const w = report.worst_step || {};
  if (typeof w.trace_start_ms === "number" && typeof w.start_ms === "number" && typeof at.start_ms === "number") {
    const start = Number(at.start_ms) + (w.trace_start_ms - w.start_ms);
    const len = Math.max(Number(at.duration_ms || 0), 0.001);
    return { href: traceViewerAtUrl(tv, Math.max(0, start - len), start + 2 * len), zoomed: true };
  }
  return { href: traceViewerUrl(tv, tv.host ? [tv.host] : report.hosts || []), zoomed: false };
}

function opRow(row, report) {
  const tv = report.trace_viewer;
  const at = row.longest || {};
  const when = `longest run ${Number(at.duration_ms || 0).toFixed(3)} ms, at ${Number(at.start_ms || 0).toFixed(3)} ms`;
  let name;
  // XProf's Trace Viewer cannot open a PyTorch (Kineto) trace: its ops are named without a link
  // (the session's "Open in Perfetto UI" opens the whole trace).
  if (tv && tv.run && report.framework !== "pytorch") {
    const link = opLink(row, report);
    name = h("a", {
      class: "tfb-op-link", href: link.href, target: "_blank", rel: "noopener", dataset: { zoomed: String(link.zoomed) },
      title: link.zoomed ? `Opens the Trace Viewer in a new tab on this op's longest run (${when} after the start of the window)`
        : `Opens the Trace Viewer in a new tab on this session; this op's ${when} after the start of the trace`,
    }, breakable(row.name || "", OP_NAME_BREAKS));
  } else {
    name = h("span", {}, breakable(row.name || "", OP_NAME_BREAKS));
  }
  const kernels = (row.kernels || []).join(", ");
  const cells = COLUMNS.map((c) => (c.key === "name"
    ? h("td", { class: "tfb-op-name" }, h("code", {}, name),
      row.instances > 1 ? h("span", { class: "tfb-op-instances", text: ` × ${row.instances} instances` }) : null,
      row.stage ? h("div", { class: "tfb-stage-path", text: `in ${String(row.stage).split("::").pop()}'s function` }) : null,
      kernels ? h("div", { class: "tfb-stage-path", text: kernels }) : null,
      h("div", { class: "tfb-op-when", text: when }))
    : h("td", { class: c.num ? "num" : "", text: opCell(row, c.key) })));
  return h("tr", { dataset: { where: row.where || "", op: row.name || "", instances: String(row.instances || 1) } }, cells);
}

export function opsSection(report) {
  if (report.status !== "ok") return null;
  const all = foldInstances(report.top_ops || []);
  const section = h("section", { class: "tfb-card tfb-ops" }, h("h3", { text: "Which operations take the time" }));
  if (!all.length) {
    const ops = { pytorch: "PyTorch ops", jax: "XLA ops" }[report.framework] || "TensorFlow ops";
    section.append(h("p", { class: "tfb-muted", text: `No ${ops} were recorded in the steady steps.` }));
    return section;
  }
  const summary = report.op_summary || {};
  section.append(h("p", { class: "tfb-muted" },
    `Self time per steady step, over ${summary.steps ?? "?"} steps (nested ops not counted twice); % of the step, `
    + "device ops: of the device's busy time; a tf.data function's numbered instances of one op are one row. "
    + "Click a column to sort."));
  let showAll = false;
  const more = h("button", {
    class: "tfb-button tfb-ops-more", type: "button",
    onclick: () => { showAll = !showAll; render(); },
  });
  let sortKey = "self_ms_per_step";
  let descending = true;
  const tbody = h("tbody", {});
  const heads = COLUMNS.map((c) => h("th", {
    class: `${c.num ? "num " : ""}tfb-sortable`, dataset: { key: c.key }, text: c.label, role: "button",
    onclick: () => {
      descending = sortKey === c.key ? !descending : c.num;
      sortKey = c.key;
      render();
    },
  }));
  function render() {
    const col = COLUMNS.find((c) => c.key === sortKey);
    const rows = [...all].sort((a, b) => {
      const x = col.num ? Number(a[sortKey] || 0) - Number(b[sortKey] || 0) : String(a[sortKey] ?? "").localeCompare(String(b[sortKey] ?? ""));
      return descending ? -x : x;
    });
    tbody.replaceChildren(...rows.slice(0, showAll ? rows.length : ROWS_SHOWN).map((r) => opRow(r, report)));
    more.hidden = rows.length <= ROWS_SHOWN;
    more.textContent = showAll ? `Show the top ${ROWS_SHOWN}` : `Show all ${rows.length} ops`;
    for (const th of heads) th.dataset.sorted = th.dataset.key === sortKey ? (descending ? "desc" : "asc") : "";
  }
  render();
  section.append(h("div", { class: "tfb-table-wrap" },
    h("table", { class: "tfb-table tfb-ops-table" }, h("thead", {}, h("tr", {}, heads)), tbody)), more);
  for (const [where, ms] of Object.entries(summary.self_ms_per_step || {})) {
    const types = (summary.by_type || []).filter((g) => g.where === where).slice(0, 3);
    section.append(h("p", { class: "tfb-muted tfb-op-types", dataset: { where } },
      `${WHERE_LABEL[where] || where} ops: ${Number(ms).toFixed(3)} ms per step; top 10 ops `
      + `${Number((summary.top10_pct || {})[where] || 0).toFixed(1)} % of it; by type: `
      + types.map((g) => `${g.type} ${Number(g.self_ms_per_step).toFixed(3)} ms (${Number(g.pct).toFixed(1)} %)`).join(", ")));
  }
  return section;
}
