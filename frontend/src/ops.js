// The top-ops table under the breakdown: the report's `top_ops` rows (self time per steady
// step), sortable by clicking a column head, each op a link into the Trace Viewer on the
// session's host with the time of its longest occurrence beside it (XProf's Trace Viewer URL
// takes a run, a tool and hosts, not a time: the row says where to look).
import { h } from "./dom.js";
import { traceViewerUrl } from "./api.js";

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

function opRow(row, report) {
  const tv = report.trace_viewer;
  const hosts = report.hosts || [];
  const at = row.longest || {};
  const when = `longest run ${Number(at.duration_ms || 0).toFixed(3)} ms, at ${Number(at.start_ms || 0).toFixed(3)} ms`;
  const name = tv && tv.run
    ? h("a", {
      class: "tfb-op-link", href: traceViewerUrl(tv, tv.host ? [tv.host] : hosts), target: "_parent",
      title: `Opens the Trace Viewer on this session; this op's ${when} after the start of the trace`,
    }, row.name || "")
    : h("span", { text: row.name || "" });
  const kernels = (row.kernels || []).join(", ");
  const cells = COLUMNS.map((c) => (c.key === "name"
    ? h("td", { class: "tfb-op-name" }, h("code", {}, name),
      kernels ? h("div", { class: "tfb-stage-path", text: kernels }) : null,
      h("div", { class: "tfb-op-when", text: when }))
    : h("td", { class: c.num ? "num" : "", text: opCell(row, c.key) })));
  return h("tr", { dataset: { where: row.where || "", op: row.name || "" } }, cells);
}

export function opsSection(report) {
  if (report.status !== "ok") return null;
  const all = report.top_ops || [];
  const section = h("section", { class: "tfb-card tfb-ops" }, h("h3", { text: "Which operations take the time" }));
  if (!all.length) {
    section.append(h("p", { class: "tfb-muted", text: "No TensorFlow ops were recorded in the steady steps." }));
    return section;
  }
  const summary = report.op_summary || {};
  section.append(h("p", { class: "tfb-muted" },
    `Self time per steady step, over ${summary.steps ?? "?"} steps (nested ops not counted twice); % of the step, `
    + "device ops: of the device's busy time. Click a column to sort."));
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
    tbody.replaceChildren(...rows.map((r) => opRow(r, report)));
    for (const th of heads) th.dataset.sorted = th.dataset.key === sortKey ? (descending ? "desc" : "asc") : "";
  }
  render();
  section.append(h("div", { class: "tfb-table-wrap" },
    h("table", { class: "tfb-table tfb-ops-table" }, h("thead", {}, h("tr", {}, heads)), tbody)));
  for (const [where, ms] of Object.entries(summary.self_ms_per_step || {})) {
    const types = (summary.by_type || []).filter((g) => g.where === where).slice(0, 3);
    section.append(h("p", { class: "tfb-muted tfb-op-types", dataset: { where } },
      `${WHERE_LABEL[where] || where} ops: ${Number(ms).toFixed(3)} ms per step; top 10 ops `
      + `${Number((summary.top10_pct || {})[where] || 0).toFixed(1)} % of it; by type: `
      + types.map((g) => `${g.type} ${Number(g.self_ms_per_step).toFixed(3)} ms (${Number(g.pct).toFixed(1)} %)`).join(", ")));
  }
  return section;
}
