// The Fleet view (GET /fleet, docs/http_api.md): across every session of the logdir, the
// time per breakdown category per group (a stacked bar), the runs ranked by the time the
// best fix would recover (sortable, filterable by cause, each run opening its session), and
// the category shares per day. One request; the table draws at most ROWS_SHOWN rows at a time
// so that 10,000 runs stay responsive. Every string from the server is inserted as text.
import { makeChart } from "./charts.js";
import { h } from "./dom.js";
import { CATEGORIES, CATEGORY_COLORS, categoryLabel, fmtMs, fmtPct, fmtTime, kindLabel, runLabel } from "./format.js";

const ROWS_SHOWN = 200;
/** Sessions without a report named below the table (the headline counts them all). */
const FAILED_SHOWN = 20;
/** A run whose first fix has no predicted worth: its recoverable time is unknown, not 0. */
const NO_MODEL = "no model";

/** A duration in ms in the unit that reads best (as the CLI's fmt_duration). */
export function fmtDuration(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "–";
  if (ms < 1000) return `${ms.toFixed(0)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${(ms / 60000).toFixed(1)} min`;
  return `${(ms / 3600000).toFixed(2)} h`;
}

/** A run's recoverable time as the CLI's table shows it (fmt_recoverable): `~` where it counts a
 * change with no model halfway to its bound, "no model" where the first fix has no predicted worth,
 * "–" for a run with no report. */
export function fmtRecoverable(r) {
  const rec = r.recoverable_ms;
  if (typeof rec === "number" && Number.isFinite(rec)) return (r.fix_basis === "bound" && rec > 0 ? "~" : "") + fmtDuration(rec);
  return r.status === "ok" ? NO_MODEL : "–";
}

/** `f`: the fleet report, whose `category_labels` name the categories as `tfbneck analyze` does
 * for its one device kind ("Model compute on the CPU"). */
function groupChart(groups, f) {
  const canvas = h("canvas", { class: "tfb-fleet-groups-canvas", "aria-label": "Time by category per group" });
  const labels = groups.map((g) => g.group);
  const datasets = CATEGORIES.map((c) => ({
    label: categoryLabel(c, f), backgroundColor: CATEGORY_COLORS[c], stack: "t",
    data: groups.map((g) => Number((g.categories_pct || {})[c] || 0)),
  }));
  requestAnimationFrame(() => makeChart(canvas, {
    type: "bar",
    data: { labels, datasets },
    options: {
      indexAxis: "y", responsive: true,
      scales: { x: { stacked: true, max: 100, title: { display: true, text: "% of the profiled steps' time" } },
        y: { stacked: true } },
      plugins: { legend: { position: "bottom", labels: { boxWidth: 12, boxHeight: 12 } },
        tooltip: { callbacks: { label: (i) => `${i.dataset.label}: ${fmtPct(i.parsed.x)}` } } },
    },
  }));
  canvas.dataset.groups = String(groups.length);
  return h("div", { class: "tfb-chart tfb-fleet-groups", style: { height: `${Math.min(600, 80 + 28 * groups.length)}px` } }, canvas);
}

function trendChart(days, f) {
  const canvas = h("canvas", { class: "tfb-fleet-trend-canvas", "aria-label": "Category shares per day" });
  const dated = days.filter((d) => d.date !== "unknown");
  const datasets = CATEGORIES.map((c) => ({
    label: categoryLabel(c, f), backgroundColor: CATEGORY_COLORS[c], borderColor: CATEGORY_COLORS[c], fill: true,
    data: dated.map((d) => Number((d.categories_pct || {})[c] || 0)), pointRadius: 2, stack: "t",
  }));
  requestAnimationFrame(() => makeChart(canvas, {
    type: "line",
    data: { labels: dated.map((d) => d.date), datasets },
    options: {
      responsive: true,
      scales: { y: { stacked: true, min: 0, max: 100, title: { display: true, text: "% of the day's profiled time" } } },
      plugins: { legend: { display: false },
        tooltip: { mode: "index", intersect: false, callbacks: { label: (i) => `${i.dataset.label}: ${fmtPct(i.parsed.y)}` } } },
    },
  }));
  canvas.dataset.days = String(dated.length);
  return h("div", { class: "tfb-chart tfb-fleet-trend" }, canvas);
}

const COLUMNS = [
  { key: "rank", title: "#", num: true },
  { key: "run", title: "Run" },
  { key: "verdict", title: "Verdict" },
  { key: "fix", title: "Fix first" },
  { key: "speedup", title: "Worth" },
  { key: "recoverable_ms", title: "Recoverable", num: true },
  { key: "batches", title: "Batches", num: true },
  { key: "session_time", title: "Latest session", num: true },
];

function sortValue(r, key) {
  if (key === "verdict") return `${r.bottleneck}/${r.cause || ""}`;
  if (key === "fix") return r.fix || "";
  const v = r[key];
  return v === null || v === undefined ? -Infinity : v;
}

function runRow(r, onOpen) {
  const open = () => onOpen(r.run, r.session);
  return h("tr", { class: "tfb-fleet-run", dataset: { run: r.run, cause: r.cause || "", fix: r.fix || "", rank: String(r.rank) } },
    h("td", { class: "num", text: String(r.rank) }),
    h("td", {}, h("a", { href: "#", class: "tfb-fleet-open", onclick: (e) => { e.preventDefault(); open(); } }, runLabel(r.run)),
      r.sessions > 1 ? h("span", { class: "tfb-muted-small", text: ` ${r.sessions} sessions` }) : null),
    h("td", {}, h("span", { class: `tfb-chip kind-${r.status === "ok" ? r.bottleneck || "unknown" : "error"}`,
      text: r.status === "ok" ? kindLabel(r.bottleneck) : "error" }), r.cause ? h("span", { text: ` ${r.cause}` }) : null),
    r.status === "ok"
      ? h("td", { class: "tfb-fleet-fix", title: r.fix || "" }, h("span", { text: r.fix_title || r.fix || "–" }),
        r.fix ? h("code", { class: "tfb-fix-code", text: r.fix }) : null)
      // No report: the one line that says which file and what is wrong, as `tfbneck analyze` says it.
      : h("td", { class: "tfb-fleet-fix tfb-fleet-error", text: r.error || "no report" }),
    // The session report's own words for the fix's worth (its `worth`), sorted by the speedup that ranks it.
    h("td", { class: "tfb-fleet-worth", text: r.fix_worth || "–" }),
    h("td", { class: "num tfb-fleet-recoverable",
      text: fmtRecoverable(r) + (typeof r.recoverable_ms === "number" && !r.length_known ? " (profiled)" : ""),
      title: typeof r.recoverable_ms !== "number"
        ? (r.status === "ok" ? "unknown: the first fix has no predicted worth (no model, no bound); not 0" : "no report")
        : r.length_known ? "over the whole run (its step-time trend file)" : "over the profiled batches only (no trend file)" }),
    h("td", { class: "num", text: r.batches === null || r.batches === undefined ? "–" : String(r.batches) }),
    h("td", { class: "num", text: r.session_time ? fmtTime(r.session_time) : "–" }));
}

function runTable(runs, onOpen) {
  const state = { key: "rank", desc: false, cause: "" };
  const ranked = runs.map((r, i) => Object.assign({ rank: i + 1 }, r));
  const body = h("tbody", {});
  const count = h("span", { class: "tfb-muted-small tfb-fleet-count" });
  const causes = [...new Set(ranked.map((r) => r.cause || ""))].filter(Boolean).sort();
  const select = h("select", { class: "tfb-select tfb-fleet-cause", "aria-label": "Filter by cause",
    onchange: (e) => { state.cause = e.target.value; draw(); } },
  h("option", { value: "", text: "every cause" }), causes.map((c) => h("option", { value: c, text: c })));
  const heads = COLUMNS.map((c) => h("th", { class: `tfb-sortable${c.num ? " num" : ""}`, dataset: { key: c.key }, text: c.title,
    onclick: () => { state.desc = state.key === c.key ? !state.desc : c.key !== "rank" && c.key !== "run" && c.key !== "verdict" && c.key !== "fix"; state.key = c.key; draw(); } }));
  function draw() {
    const rows = ranked.filter((r) => !state.cause || r.cause === state.cause);
    rows.sort((a, b) => {
      const x = sortValue(a, state.key);
      const y = sortValue(b, state.key);
      const cmp = x < y ? -1 : x > y ? 1 : a.rank - b.rank;
      return state.desc ? -cmp : cmp;
    });
    body.replaceChildren(...rows.slice(0, ROWS_SHOWN).map((r) => runRow(r, onOpen)));
    for (const th of heads) th.dataset.sort = th.dataset.key === state.key ? (state.desc ? "desc" : "asc") : "";
    count.textContent = rows.length > ROWS_SHOWN ? `first ${ROWS_SHOWN} of ${rows.length} runs` : `${rows.length} runs`;
  }
  draw();
  return h("div", {}, h("div", { class: "tfb-fleet-filter" }, h("label", {}, "Cause ", select), count),
    h("div", { class: "tfb-table-wrap" }, h("table", { class: "tfb-table tfb-fleet-table" },
      h("thead", {}, h("tr", {}, heads)), body)));
}

/** The sessions without a report, each with its one-line error (the first FAILED_SHOWN). */
function failedList(f) {
  const failed = f.failed || [];
  if (!failed.length) return null;
  const total = (f.errors || {}).sessions || failed.length;
  return h("div", { class: "tfb-fleet-failed" },
    h("h3", { text: `Sessions without a report (${Math.min(FAILED_SHOWN, failed.length)} of ${total})` }),
    h("ul", {}, failed.slice(0, FAILED_SHOWN).map((x) => h("li", { class: "tfb-fleet-failed-item", dataset: { run: x.run } },
      h("code", { text: `${runLabel(x.run)}/${x.session}` }), h("span", { text: `: ${x.error}` })))));
}

function headline(f) {
  const hours = f.accelerator_hours || {};
  const err = f.errors || {};
  const kinds = Object.entries(err.by_kind || {}).map(([k, n]) => `${k} ${n}`).join(", ");
  return [
    `${f.sessions} sessions in ${f.runs_total} runs`,
    `${err.sessions || 0} without a report${kinds ? ` (${kinds})` : ""}`,
    `skipped windows: ${(f.skipped_windows || {}).sessions || 0} sessions, ${(f.skipped_windows || {}).in_trend_files || 0} in trend files`,
    `${Number(hours.total || 0).toFixed(2)} accelerator-hours over the ${hours.runs_with_length || 0} runs whose length a trend file gives`,
    f.pending ? `${f.pending} sessions still being analysed` : null,
  ].filter(Boolean).join(" · ");
}

/** The Fleet view of a /fleet body. `onOpen(run, session)` shows a session's report. */
export function fleetView(f, onOpen) {
  const top = (f.runs || [])[0];
  return h("div", { class: "tfb-fleet-view", dataset: { sessions: String(f.sessions), pending: String(f.pending || 0) } },
    h("section", { class: "tfb-card tfb-fleet-summary" },
      h("h2", { text: "Where the time goes across runs" }),
      h("p", { class: "tfb-muted tfb-fleet-headline", text: headline(f) }),
      top && top.recoverable_ms > 0 ? h("p", { class: "tfb-fleet-top" }, "Fix first: ", h("strong", { text: runLabel(top.run) }),
        ` — ${top.fix_title || top.fix}${top.fix_worth ? ` (${top.fix_worth})` : ""}, ${fmtDuration(top.recoverable_ms)} to recover`) : null,
      h("h3", { text: "Time by category per group" }), groupChart(f.groups || [], f)),
    h("section", { class: "tfb-card tfb-fleet-runs" },
      h("h2", { text: "Runs ranked by recoverable time" }),
      h("p", { class: "tfb-muted-small", text: "(time per batch now − the best fix's predicted time per batch) × the run's "
        + "batches: over the whole run where its step-time trend file gives the length, else over the profiled batches. "
        + `"${NO_MODEL}": the first fix has no predicted worth, so its time is unknown (not 0); those runs rank after `
        + "the runs with time to recover, the most time at stake first."
        + (top ? ` Top run: ${fmtMs(top.time_per_batch_ms, 2)} per batch now.` : "") }),
      runTable(f.runs || [], onOpen),
      failedList(f)),
    h("section", { class: "tfb-card tfb-fleet-trend-card" },
      h("h2", { text: "Trend over the sessions' dates" }), trendChart(f.trend || [], f)),
    (f.basis || []).map((p) => h("p", { class: "tfb-muted-small tfb-fleet-basis", text: p })),
    (f.problems || []).map((p) => h("p", { class: "tfb-problem", text: p })));
}
