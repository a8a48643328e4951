// Two sessions side by side (before/after a fix): verdicts, the composition of the mean
// step time, and the change of each number.
import { makeChart } from "./charts.js";
import { h } from "./dom.js";
import { CATEGORIES, CATEGORY_COLORS, categoryLabel, fmtMs, fmtPct, kindLabel, runLabel } from "./format.js";
import { sessionTitle, totalBar, verdictCard } from "./session.js";

function stepMean(r) {
  const st = r.steps && r.steps.step_time_ms;
  return st ? Number(st.mean) : null;
}

function column(label, r) {
  return h("div", { class: "tfb-compare-col", dataset: { side: label.toLowerCase() } },
    h("div", { class: "tfb-compare-label", text: label }),
    sessionTitle(r),
    verdictCard(r, { links: true }),
    r.status === "ok" ? h("section", { class: "tfb-card" }, h("h3", { text: "Where the step time goes" }), totalBar(r, { compact: true })) : null);
}

function change(a, b, { lowerIsBetter = true, unit = "" } = {}) {
  if (a === null || b === null || a === undefined || b === undefined) return h("td", { class: "num", text: "–" });
  const d = b - a;
  let rel = "";
  if (a !== 0) rel = ` (${d >= 0 ? "+" : "−"}${Math.abs((100 * d) / a).toFixed(0)}%)`;
  const better = lowerIsBetter ? d < 0 : d > 0;
  const cls = Math.abs(d) < 1e-9 ? "same" : better ? "better" : "worse";
  const text = unit === "ms" ? `${d >= 0 ? "+" : "−"}${fmtMs(Math.abs(d))}${rel}`
    : `${d >= 0 ? "+" : "−"}${Math.abs(d).toFixed(1)} pts`;
  return h("td", { class: `num tfb-delta ${cls}`, text });
}

function compositionChart(a, b) {
  const ma = stepMean(a);
  const mb = stepMean(b);
  if (ma === null || mb === null) return null;
  const canvas = h("canvas", { class: "tfb-compare-canvas", "aria-label": "Mean step time by category, before and after" });
  const datasets = CATEGORIES.filter((c) => (a.breakdown_pct || {})[c] > 0 || (b.breakdown_pct || {})[c] > 0).map((c) => ({
    label: categoryLabel(c, b.device_kind),
    data: [ma * ((a.breakdown_pct || {})[c] || 0) / 100, mb * ((b.breakdown_pct || {})[c] || 0) / 100],
    backgroundColor: CATEGORY_COLORS[c],
    barPercentage: 0.6,
  }));
  requestAnimationFrame(() => makeChart(canvas, {
    type: "bar",
    data: { labels: ["Before", "After"], datasets },
    options: {
      indexAxis: "y",
      responsive: true,
      scales: { x: { stacked: true, beginAtZero: true, title: { display: true, text: "mean step time, ms" } }, y: { stacked: true } },
      plugins: {
        legend: { position: "bottom", labels: { boxWidth: 12, boxHeight: 12 } },
        tooltip: { callbacks: { label: (ctx) => `${ctx.dataset.label}: ${fmtMs(ctx.parsed.x, 2)}` } },
      },
    },
  }));
  return h("section", { class: "tfb-card" },
    h("h3", { text: "Mean step time, by category" }),
    h("div", { class: "tfb-chart tfb-compare-chart" }, canvas));
}

function table(a, b) {
  const sa = (a.steps && a.steps.step_time_ms) || {};
  const sb = (b.steps && b.steps.step_time_ms) || {};
  const rows = [
    ["Verdict", kindLabel(a.bottleneck) + (a.cause ? ` (${a.cause})` : ""), kindLabel(b.bottleneck) + (b.cause ? ` (${b.cause})` : ""), null],
    ["Steps", String((a.steps || {}).count ?? "–"), String((b.steps || {}).count ?? "–"), null],
  ];
  for (const k of ["mean", "p50", "p90", "max"]) {
    rows.push([`Step time ${k}`, fmtMs(sa[k]), fmtMs(sb[k]), change(sa[k], sb[k], { unit: "ms" })]);
  }
  for (const c of CATEGORIES) {
    const pa = (a.breakdown_pct || {})[c];
    const pb = (b.breakdown_pct || {})[c];
    if (!pa && !pb) continue;
    const lower = c !== "device_compute";
    rows.push([categoryLabel(c, b.device_kind), fmtPct(pa), fmtPct(pb), change(pa, pb, { lowerIsBetter: lower })]);
  }
  const stage = (r) => {
    const s = (r.input_pipeline || {}).bottleneck_stage;
    return s ? s.split("::").pop() : "–";
  };
  rows.push(["Blocking tf.data stage", stage(a), stage(b), null]);
  return h("section", { class: "tfb-card" }, h("h3", { text: "What changed" }),
    h("div", { class: "tfb-table-wrap" }, h("table", { class: "tfb-table tfb-compare-table" },
      h("thead", {}, h("tr", {}, h("th", { text: "" }), h("th", { text: "Before" }), h("th", { text: "After" }), h("th", { class: "num", text: "Change" }))),
      h("tbody", {}, rows.map(([k, va, vb, d]) => h("tr", { dataset: { metric: k } },
        h("th", { scope: "row", text: k }), h("td", { text: va }), h("td", { text: vb }), d || h("td", { text: "" })))))));
}

/** The comparison of report `a` (before) with report `b` (after). */
export function compareView(a, b) {
  const both = a.status === "ok" && b.status === "ok";
  return h("div", { class: "tfb-compare-view" },
    h("div", { class: "tfb-compare-grid" }, column("Before", a), column("After", b)),
    both ? compositionChart(a, b) : null,
    both ? table(a, b) : h("p", { class: "tfb-muted", text: "The numbers can be compared once both sessions are analysed without error." }));
}

export { runLabel };
