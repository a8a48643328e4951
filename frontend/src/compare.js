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

/** The time per batch, in ms: a step covers batches_per_step batches with steps_per_execution > 1. */
function perBatch(r) {
  const steps = r.steps || {};
  if (typeof steps.time_per_batch_ms === "number") return steps.time_per_batch_ms;
  const mean = stepMean(r);
  return mean === null ? null : mean / (steps.batches_per_step || 1);
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
  const text = unit === "ms" ? `${d >= 0 ? "+" : "−"}${fmtMs(Math.abs(d), 2)}${rel}`
    : `${d >= 0 ? "+" : "−"}${Math.abs(d).toFixed(1)} pts`;
  return h("td", { class: `num tfb-delta ${cls}`, text });
}

function compositionChart(a, b) {
  const ma = stepMean(a);
  const mb = stepMean(b);
  if (ma === null || mb === null) return null;
  const canvas = h("canvas", { class: "tfb-compare-canvas", "aria-label": "Mean step time by category, before and after" });
  const datasets = CATEGORIES.filter((c) => (a.breakdown_pct || {})[c] > 0 || (b.breakdown_pct || {})[c] > 0).map((c) => ({
    label: categoryLabel(c, b),
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
    ["Verdict", kindLabel(a.bottleneck, a) + (a.cause ? ` (${a.cause})` : ""), kindLabel(b.bottleneck, b) + (b.cause ? ` (${b.cause})` : ""), null],
    ["Steps", String((a.steps || {}).count ?? "–"), String((b.steps || {}).count ?? "–"), null],
  ];
  const ta = perBatch(a);
  const tb = perBatch(b);
  rows.push(["Time per batch", fmtMs(ta, 2), fmtMs(tb, 2), change(ta, tb, { unit: "ms" })]);
  // Each category in ms per batch, as tfbneck compare words it: less time is a faster step,
  // whatever the category. Its share of the step follows, in grey (a share can rise while
  // the step gets faster).
  for (const c of CATEGORIES) {
    const pa = (a.breakdown_pct || {})[c];
    const pb = (b.breakdown_pct || {})[c];
    if (!pa && !pb) continue;
    const ma = ta === null ? null : (ta * (pa || 0)) / 100;
    const mb = tb === null ? null : (tb * (pb || 0)) / 100;
    rows.push([`${categoryLabel(c, b)} (ms per batch)`, `${fmtMs(ma, 2)} · ${fmtPct(pa)}`, `${fmtMs(mb, 2)} · ${fmtPct(pb)}`,
      change(ma, mb, { unit: "ms" })]);
  }
  for (const k of ["mean", "p50", "p90", "max"]) {
    rows.push([`Step time ${k}`, fmtMs(sa[k]), fmtMs(sb[k]), change(sa[k], sb[k], { unit: "ms" })]);
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

const WORDS = { faster: "FASTER", slower: "SLOWER", no_change: "no significant change", inconclusive: "INCONCLUSIVE" };
// Better or worse for the user: faster is better, slower worse; the rest says nothing either way.
const TONE = { faster: "better", slower: "worse", no_change: "same", inconclusive: "unsure" };

/** Python's `{x:.4g}` for the p-values (0 < p <= 1). */
function fmtP(p) {
  const v = Number(p);
  return v >= 1e-4 || v === 0 ? String(Number(v.toPrecision(4))) : v.toExponential(3).replace(/\.?0+e/, "e").replace(/e([+-])(\d)$/, "e$10$2");
}

function signed(x, digits = 1) {
  const v = Number(x);
  return `${v < 0 ? "-" : "+"}${Math.abs(v).toFixed(digits)}`;
}

/** The comparison's title, the same line `tfbneck compare` prints (comparison._title). */
export function comparisonTitle(c) {
  const b = c.baseline;
  const k = c.candidate;
  const names = b.run === k.run ? b.run : `${b.run} -> ${k.run}`;
  const ev = c.evidence || { level: "steps", units: [b.steps, k.steps] };
  return `${names}: ${WORDS[c.verdict] || c.verdict} (${signed(c.change_pct)} % time per batch, p = ${fmtP(c.p_value)}, ` +
    `${ev.units[0]} vs ${ev.units[1]} ${ev.level})`;
}

function predictionLine(p) {
  if (p.predicted_ms === null || p.predicted_ms === undefined) {
    const why = String(p.why_not).replace(/\.$/, "");
    if (p.bound_ms !== null && p.bound_ms !== undefined) {
      return `${p.fix}: best case ${Number(p.bound_ms).toFixed(2)} ms (no model: ${why}), measured ${Number(p.measured_ms).toFixed(2)} ms`;
    }
    return `${p.fix}: no prediction (${why}); measured ${Number(p.measured_ms).toFixed(2)} ms`;
  }
  const [low, high] = p.range_ms;
  return `${p.fix}: predicted ${Number(p.predicted_ms).toFixed(2)} ms (range ${Number(low).toFixed(2)}-${Number(high).toFixed(2)}), ` +
    `measured ${Number(p.measured_ms).toFixed(2)} ms` +
    (p.measured_on === "job clock" ? ` by the job's own clock (the traced window: ${Number(p.traced_ms).toFixed(2)} ms)` : "") +
    `, error ${signed(p.error_pct)} %` + (p.credited ? " (explains the change)" : "");
}

/** The test of `tfbneck compare` for the two sessions: verdict, change, p-value or what is missing, the
 * comparison's `caveat` (why the two sides may not be one change apart) under its title, predictions. */
function testCard(body) {
  if (!body || !body.comparison) {
    return h("section", { class: "tfb-card tfb-compare-test", dataset: { verdict: "" } },
      h("h3", { text: "Did it change?" }), h("p", { class: "tfb-muted", text: (body && body.error) || "No comparison." }));
  }
  const c = body.comparison;
  const ev = c.evidence || {};
  const load = c.load || {};
  const lines = [`Test: ${c.test}; significant below p = ${c.alpha}.`];
  if (ev.ratio_ci) lines.push(`95 % interval of the change: ${signed(100 * (ev.ratio_ci[0] - 1))} % to ${signed(100 * (ev.ratio_ci[1] - 1))} %.`);
  if (load.baseline_contention !== null && load.baseline_contention !== undefined &&
      load.candidate_contention !== null && load.candidate_contention !== undefined) {
    lines.push(`Waiting for a core (run queue): ${(100 * (load.baseline_contention - 1)).toFixed(0)} % -> ` +
      `${(100 * (load.candidate_contention - 1)).toFixed(0)} % of the training's running time` +
      " (its threads' waits summed over its time on the cores: over 100 % when they waited longer than they ran)" +
      `${load.differs ? " (differs)" : ""}.`);
  }
  return h("section", {
    class: `tfb-card tfb-compare-test ${TONE[c.verdict] || ""}`,
    dataset: { verdict: c.verdict, changePct: String(c.change_pct), pValue: String(c.p_value), level: ev.level || "" },
  },
  h("h3", { text: "Did it change?" }),
  h("p", { class: `tfb-compare-headline tfb-delta ${TONE[c.verdict] || ""}`, text: comparisonTitle(c) }),
  c.caveat ? h("p", { class: "tfb-note tfb-compare-caveat", role: "note" }, h("strong", { text: "Caution: " }), c.caveat) : null,
  ev.missing ? h("p", { class: "tfb-compare-missing", text: `Inconclusive: ${ev.missing}` }) : null,
  h("ul", { class: "tfb-compare-lines" }, lines.map((t) => h("li", { text: t }))),
  (c.predictions || []).length ? h("div", { class: "tfb-compare-predictions" },
    h("h4", { text: "Predicted vs measured" }),
    h("ul", {}, c.predictions.map((p) => h("li", { dataset: { fix: p.fix, credited: p.credited ? "true" : "false" }, text: predictionLine(p) })))) : null);
}

/** The comparison of report `a` (before) with report `b` (after); `cmp`: the /compare body. */
export function compareView(a, b, cmp) {
  const both = a.status === "ok" && b.status === "ok";
  return h("div", { class: "tfb-compare-view" },
    both ? testCard(cmp) : null,
    h("div", { class: "tfb-compare-grid" }, column("Before", a), column("After", b)),
    both ? compositionChart(a, b) : null,
    both ? table(a, b) : h("p", { class: "tfb-muted", text: "The numbers can be compared once both sessions are analysed without error." }));
}

export { runLabel };
