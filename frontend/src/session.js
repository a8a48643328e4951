// The view of one session's report: verdict card, breakdown, tf.data stages, system
// metrics and recommendations. Every string from the report is inserted as text.
import { makeChart } from "./charts.js";
import { breakable, h, copyText } from "./dom.js";
import { traceViewerAtUrl, traceViewerUrl } from "./api.js";
import { PERFETTO_ORIGIN, kinetoTraceUrl, openInPerfetto } from "./perfetto.js";
import { opsSection } from "./ops.js";
import { explainReportError } from "./errors.js";
import {
  CATEGORIES, CATEGORY_COLORS, categoryLabel, fmtBytes, fmtMs, fmtPct, frameworkLabel, kindLabel, runLabel,
} from "./format.js";

/** Text with `backticked` parts shown as code, as the analyzer writes stage names. */
export function richText(text) {
  const parts = String(text).split("`");
  return parts.map((p, i) => (i % 2 === 1 ? h("code", {}, breakable(p)) : breakable(p)));
}

export function sessionTitle(report) {
  return h("div", { class: "tfb-title" },
    h("h2", { class: "tfb-title-run", text: runLabel(report.run) }),
    h("span", { class: "tfb-title-session", text: report.session }),
  );
}

function metaLine(report) {
  const steps = report.steps || {};
  const st = steps.step_time_ms;
  const items = [];
  const hosts = report.hosts || [];
  items.push(["Host" + (hosts.length > 1 ? "s" : ""), hosts.join(", ") || "–"]);
  if (report.device_kind) items.push(["Device", report.device_kind]);
  if (report.status === "ok") {
    items.push(["Steps", String(steps.count || 0)]);
    if (st) items.push(["Step time", `${fmtMs(st.mean)} mean · ${fmtMs(st.p50)} p50 · ${fmtMs(st.p90)} p90`]);
    if (report.step_source) items.push(["Steps from", String(report.step_source).split(" (")[0].replace(/_/g, " ")]);
  }
  return h("dl", { class: "tfb-meta" }, items.map(([k, v]) => h("div", {}, h("dt", { text: k }), h("dd", { text: v }))));
}

/** A PyTorch session's link: its trace (Kineto JSON) in the Perfetto UI, which reads it where
 * XProf's Trace Viewer cannot (perfetto.js); a line under the button says what happened. */
function perfettoLinks(report) {
  const tv = report.trace_viewer;
  const host = tv.host || (report.hosts || [])[0] || "";
  const url = kinetoTraceUrl(report.run, report.session, host);
  const status = h("span", { class: "tfb-caption tfb-perfetto-status" }, "");
  const link = h("a", {
    class: "tfb-button tfb-primary tfb-trace-link", href: PERFETTO_ORIGIN, target: "_blank", rel: "opener",
    dataset: { kind: "perfetto", trace: url },
    title: `Opens the Perfetto UI (${PERFETTO_ORIGIN}) in a new tab and sends it this PyTorch trace`
      + `${host ? ` of ${host}` : ""} (XProf's Trace Viewer reads only TensorFlow's traces)`,
    onclick: (e) => {
      e.preventDefault();
      status.textContent = "Opening the Perfetto UI…";
      openInPerfetto(url, `${report.run}/${report.session}${host ? ` (${host})` : ""}`, `${host || "trace"}.pt.trace.json`)
        .then(() => { status.textContent = "Trace sent to the Perfetto UI tab."; })
        .catch((err) => { status.textContent = err.message; });
    },
  }, "Open in Perfetto UI");
  const w = report.worst_step;
  const worst = w ? h("span", { class: "tfb-caption tfb-worst" },
    `Worst stall: step ${w.step}, ${fmtMs(w.duration_ms)} long`
    + (w.input_ms ? `, ${fmtMs(w.input_ms)} of it waiting for input` : "")
    + `, ${fmtMs(w.start_ms)} after the first step began${host ? ` on ${host}` : ""}.`) : null;
  return h("div", { class: "tfb-trace-links" }, link, status, worst);
}

function traceLinks(report) {
  const tv = report.trace_viewer;
  if (!tv || !tv.run) return null;
  if (report.framework === "pytorch") return perfettoLinks(report);
  // A job's hosts are its tasks; its link opens the worker that stands for the job, on its own host.
  const hosts = report.kind === "job" ? (tv.host ? [tv.host] : []) : report.hosts || [];
  const links = [
    h("a", {
      class: "tfb-button tfb-primary tfb-trace-link", href: traceViewerUrl(tv, hosts), target: "_blank", rel: "noopener",
      dataset: { kind: "session" }, title: "Opens the Profile tab's Trace Viewer on this session in a new tab",
    }, "Open in Trace Viewer"),
  ];
  const w = report.worst_step;
  if (w) {
    // Reports from before trace_start_ms: the session's Trace Viewer, with the time given beside the button.
    const at = typeof w.trace_start_ms === "number" && typeof w.trace_end_ms === "number";
    const margin = at ? (w.trace_end_ms - w.trace_start_ms) * 0.1 : 0;
    links.push(h("a", {
      class: "tfb-button tfb-trace-link",
      href: at ? traceViewerAtUrl(tv, Math.max(0, w.trace_start_ms - margin), w.trace_end_ms + margin)
        : traceViewerUrl(tv, tv.host ? [tv.host] : hosts),
      target: "_blank", rel: "noopener",
      dataset: { kind: "worst", step: String(w.step) },
      title: at ? `Opens XProf's Trace Viewer in a new tab on step ${w.step}${tv.host ? ` of host ${tv.host}` : ""}`
        : "Opens the Trace Viewer in a new tab on the host of the worst step; look at the time given beside this button",
    }, "Open the worst stall in Trace Viewer"));
    const input = w.input_ms ? `, ${fmtMs(w.input_ms)} of it waiting for input` : "";
    links.push(h("span", { class: "tfb-caption tfb-worst" },
      `Worst stall: step ${w.step}, ${fmtMs(w.duration_ms)} long${input}, `
      + (at ? `at ${fmtMs(w.trace_start_ms)} on the trace's time axis` : `${fmtMs(w.start_ms)} after the first step began`)
      + `${tv.host ? ` on host ${tv.host}` : ""}.`));
  }
  return h("div", { class: "tfb-trace-links" }, links);
}

function errorCard(report) {
  const { headline, hint } = explainReportError(report);
  return h("section", {
    class: "tfb-card tfb-verdict tfb-error",
    dataset: { status: "error", bottleneck: report.bottleneck || "unknown", errorKind: report.error_kind || "" },
  },
  h("div", { class: "tfb-verdict-top" }, h("span", { class: "tfb-kind kind-error", text: "Could not analyse" })),
  h("p", { class: "tfb-error-headline", text: headline }),
  hint ? h("p", { class: "tfb-error-hint", text: hint }) : null,
  h("details", { class: "tfb-error-details" }, h("summary", { text: "Exact message" }),
    h("code", { class: "tfb-error-message", text: report.error || "" })));
}

export function verdictCard(report, { links = true } = {}) {
  if (report.status !== "ok") return errorCard(report);
  const kind = report.bottleneck || "unknown";
  const conf = Math.round(100 * Number(report.confidence || 0));
  const steps = report.steps || {};
  const notes = [];
  if (report.kind === "system_only") {
    notes.push(h("p", { class: "tfb-note tfb-system-only-note" },
      h("strong", { text: "System metrics only, no trace. " }),
      "This is the first diagnosis the flowchart draws from CPU, accelerator, disk and network use; a profiling window confirms it and finds the cause."));
  } else if (!steps.count) {
    notes.push(h("p", { class: "tfb-note tfb-no-steps" },
      h("strong", { text: "No training steps were found in this trace. " }),
      "The breakdown covers the whole recorded window instead of individual steps."));
  }
  for (const w of report.warnings || []) notes.push(h("p", { class: "tfb-note", text: w }));
  return h("section", {
    class: `tfb-card tfb-verdict kind-${kind}`, dataset: { status: "ok", bottleneck: kind, cause: report.cause || "" },
  },
  h("div", { class: "tfb-verdict-top" },
    h("span", { class: `tfb-kind kind-${kind}`, text: kindLabel(kind, report) }),
    h("span", { class: "tfb-cause-code", text: report.cause || "" }),
    frameworkLabel(report) ? h("span", { class: "tfb-framework", text: frameworkLabel(report) }) : null,
    kind !== "unknown" ? h("span", { class: "tfb-confidence", title: "How strongly the evidence supports the verdict" },
      h("span", { text: `Confidence ${conf}%` }),
      h("span", { class: "tfb-meter" }, h("span", { style: { width: `${conf}%` } }))) : null),
  report.cause_text ? h("p", { class: "tfb-cause", text: report.cause_text }) : null,
  fixFirst(report),
  notes,
  h("h3", { text: "Evidence" }),
  h("ul", { class: "tfb-evidence" }, (report.evidence || []).map((e) => h("li", {}, richText(e)))),
  links ? traceLinks(report) : null);
}

/** A recommendation's code with a Copy button. */
function codeBlock(code) {
  const status = h("span", { class: "tfb-copy-status", role: "status" });
  const button = h("button", {
    class: "tfb-button tfb-copy", type: "button", title: "Copy the code",
    onclick: async () => {
      const ok = await copyText(code);
      status.textContent = ok ? "Copied" : "Select the code and copy it";
      setTimeout(() => { status.textContent = ""; }, 2000);
    },
  }, "Copy");
  return h("div", { class: "tfb-code" }, h("pre", {}, h("code", { text: code })), h("div", { class: "tfb-code-actions" }, status, button));
}

/** The verdict card's first fix: title, the report's worth string (`worth`, never worded
 * here), the fix's code name and its code: what to change, before the evidence. */
function fixFirst(report) {
  const recs = report.recommendations || [];
  const r = recs[0];
  if (!r) return null;
  const more = recs.length > 1 ? h("a", {
    href: "#", class: "tfb-fix-more",
    onclick: (e) => {
      e.preventDefault();
      const el = document.querySelector(".tfb-recs");
      if (el) el.scrollIntoView({ behavior: "smooth", block: "start" });
    },
  }, `${recs.length - 1} more change${recs.length > 2 ? "s" : ""} below`) : null;
  // On a device-bound (healthy) verdict nothing is broken: the first change is an option to
  // try, shown without the alarm colour (its words stay those of every view).
  const healthy = report.bottleneck === "device";
  return h("div", { class: "tfb-fix-first" + (healthy ? " tfb-fix-optional" : ""), dataset: { fix: r.fix || "" } },
    h("div", { class: "tfb-fix-head" },
      h("span", { class: "tfb-fix-label", text: "Fix first" }),
      h("strong", { class: "tfb-fix-title" }, richText(r.title || "")),
      h("code", { class: "tfb-fix-code", title: "The fix's name in the report (recommendations[0].fix)", text: r.fix || "" })),
    r.worth ? h("p", { class: "tfb-fix-worth", title: (r.predicted || {}).basis || r.predicted_why_not || "", text: r.worth }) : null,
    r.code ? codeBlock(r.code) : null,
    more);
}

/** The whole session's breakdown as one 100% bar (the total) with its legend. */
export function totalBar(report, { compact = false } = {}) {
  const pct = report.breakdown_pct || {};
  const cats = CATEGORIES.filter((c) => Number(pct[c] || 0) > 0);
  const bar = h("div", { class: "tfb-totalbar", role: "img", "aria-label": "Share of step time per category" },
    cats.map((c) => h("span", {
      class: "tfb-seg", dataset: { category: c },
      style: { width: `${pct[c]}%`, background: CATEGORY_COLORS[c] },
      title: `${categoryLabel(c, report)}: ${fmtPct(pct[c])}`,
    })));
  const legend = h("ul", { class: "tfb-legend" }, cats.map((c) => h("li", { dataset: { category: c } },
    h("span", { class: "tfb-swatch", style: { background: CATEGORY_COLORS[c] } }),
    h("span", { class: "tfb-legend-label", text: categoryLabel(c, report) }),
    h("span", { class: "tfb-legend-value", text: fmtPct(pct[c]) }))));
  return h("div", { class: compact ? "tfb-total compact" : "tfb-total" }, bar, legend);
}

const TOTAL = "Step time (total)";

function stepChart(report) {
  const items = (report.steps && report.steps.items) || [];
  if (!items.length) {
    const why = report.steps && report.steps.why_none;
    return h("p", { class: "tfb-muted tfb-no-step-chart" }, "No per-step chart: ", why || "this trace has no steps.");
  }
  const canvas = h("canvas", { class: "tfb-steps-canvas", "aria-label": "Time per step by category" });
  const wrap = h("div", { class: "tfb-chart tfb-steps-chart" }, canvas);
  const used = CATEGORIES.filter((c) => items.some((it) => Number((it.breakdown_ms || {})[c] || 0) > 0));
  const labels = items.map((it) => String(it.step));
  const datasets = used.map((c) => ({
    label: categoryLabel(c, report),
    data: items.map((it) => Number((it.breakdown_ms || {})[c] || 0)),
    backgroundColor: CATEGORY_COLORS[c],
    stack: "parts",
    categoryPercentage: 0.85,
    barPercentage: 0.9,
  }));
  datasets.push({
    label: TOTAL,
    data: items.map((it) => Number(it.duration_ms || 0)),
    backgroundColor: "rgba(0,0,0,0)",
    borderColor: "#202124",
    borderWidth: 1,
    stack: "total",
    grouped: false,
    categoryPercentage: 0.85,
    barPercentage: 0.9,
    order: -1,
  });
  // Draw after the element is in the document (Chart.js measures its container).
  requestAnimationFrame(() => makeChart(canvas, {
    type: "bar",
    data: { labels, datasets },
    options: {
      responsive: true,
      interaction: { mode: "index", intersect: false },
      scales: {
        x: { stacked: true, title: { display: true, text: "step" }, grid: { display: false } },
        y: { stacked: true, beginAtZero: true, title: { display: true, text: "ms" } },
      },
      plugins: {
        legend: {
          position: "bottom",
          // The total last, after the categories it adds up.
          labels: { boxWidth: 12, boxHeight: 12, sort: (a, b) => (a.text === TOTAL) - (b.text === TOTAL) },
        },
        tooltip: {
          itemSort: (a, b) => (a.dataset.label === TOTAL) - (b.dataset.label === TOTAL),
          callbacks: {
            title: (ctx) => `Step ${ctx[0].label}`,
            label: (ctx) => `${ctx.dataset.label}: ${fmtMs(ctx.parsed.y, 2)}`,
          },
        },
      },
    },
  }));
  return wrap;
}

function breakdownSection(report) {
  if (report.status !== "ok") return null;
  const steps = report.steps || {};
  const subtitle = steps.count
    ? `${steps.count} step${steps.count === 1 ? "" : "s"}; each bar is one step, outlined at its total time.`
    : "The whole recorded window.";
  return h("section", { class: "tfb-card tfb-breakdown" },
    h("h3", { text: "Where the step time goes" }),
    h("p", { class: "tfb-muted", text: "All steps together:" }),
    totalBar(report),
    h("p", { class: "tfb-muted", text: subtitle }),
    stepChart(report));
}

const CATEGORY_NAMES = { compute: "compute", file_read: "file read", remote_read: "remote read", python: "Python", buffer: "buffer" };

function stagesSection(report) {
  if (report.status !== "ok") return null;
  const pipe = report.input_pipeline || {};
  const stages = pipe.stages || [];
  if (report.framework === "pytorch") {
    // A PyTorch run's input is its DataLoader: its waits are the breakdown's input time, its kind
    // (single process or worker processes) is in the evidence.
    return h("section", { class: "tfb-card tfb-stages tfb-loader" }, h("h3", { text: "Input pipeline" }),
      h("p", { class: "tfb-muted", text: "A PyTorch run: the training loop's waits in the DataLoader's __next__ are "
        + "the step's input time above, and the evidence says whether it loads in the training process "
        + "(num_workers=0) or in worker processes. tf.data stages do not apply." }));
  }
  const section = h("section", { class: "tfb-card tfb-stages" }, h("h3", { text: "tf.data pipeline" }));
  if (!stages.length) {
    section.append(h("p", { class: "tfb-muted",
      text: "No tf.data iterators were recorded in this trace (the input is not a tf.data pipeline, or it ran outside the profiled window)." }));
    return section;
  }
  const blocking = stages.find((s) => s.blocking);
  section.append(h("p", { class: "tfb-muted" },
    blocking ? ["The stage marked ", h("span", { class: "tfb-badge", text: "blocking" }),
      " is the one the training step waits on: the most work (self time plus function time) among stages that do work, not buffers."]
      : "No stage blocks the consumer noticeably."));
  const head = h("tr", {}, ["Stage", "Kind", "Calls", "Self time", "Function time", "Parallelism", "Autotune"]
    .map((t, i) => h("th", { class: i >= 2 && i <= 4 ? "num" : "", text: t })));
  const rows = stages.map((s) => h("tr", { class: s.blocking ? "blocking" : "", dataset: { stage: s.kind || "" } },
    h("td", { class: "tfb-stage-name" },
      h("div", {}, h("strong", { text: s.kind || "" }), s.blocking ? h("span", { class: "tfb-badge", text: "blocking" }) : null),
      h("div", { class: "tfb-stage-path", text: s.name || "" })),
    h("td", { text: CATEGORY_NAMES[s.category] || s.category || "" }),
    h("td", { class: "num", text: String(s.calls ?? "") }),
    h("td", { class: "num", text: fmtMs(s.self_ms, 2) }),
    h("td", { class: "num", text: s.function_ms ? fmtMs(s.function_ms, 2) : "–" }),
    h("td", { text: s.parallelism === null || s.parallelism === undefined ? "–" : String(s.parallelism) }),
    h("td", { text: s.autotune === null || s.autotune === undefined ? "–" : String(s.autotune) })));
  section.append(h("div", { class: "tfb-table-wrap" },
    h("table", { class: "tfb-table" }, h("thead", {}, head), h("tbody", {}, rows))));
  return section;
}

function lineChart(title, canvasClass, labels, datasets, yTitle, yMax, xTitle = "seconds into the window") {
  const canvas = h("canvas", { class: canvasClass, "aria-label": title });
  const many = datasets.length > 8;
  requestAnimationFrame(() => makeChart(canvas, {
    type: "line",
    data: { labels, datasets },
    options: {
      responsive: true,
      elements: { point: { radius: 0 }, line: { borderWidth: 1.5, tension: 0.2 } },
      interaction: { mode: "index", intersect: false },
      scales: {
        x: { title: { display: true, text: xTitle }, ticks: { maxTicksLimit: 8 } },
        y: { beginAtZero: true, max: yMax, title: { display: true, text: yTitle } },
      },
      plugins: {
        legend: { display: !many, position: "bottom", labels: { boxWidth: 10, boxHeight: 10 } },
        tooltip: { enabled: !many },
      },
    },
  }));
  return h("figure", { class: "tfb-sys-fig" }, h("figcaption", { text: title }), h("div", { class: "tfb-chart tfb-sys-chart" }, canvas));
}

const PALETTE = ["#1a73e8", "#e8710a", "#0b8043", "#9334e6", "#e52592", "#12b5cb", "#f6bf26", "#5f6368"];

/** Fewer samples than this are listed as values: a line through two points says nothing. */
const MIN_CHART_SAMPLES = 5;

function sampleTable(s) {
  const mean = (row) => (row && row.length ? row.reduce((a, b) => a + b, 0) / row.length : null);
  const pct = (v) => (v === null || v === undefined ? "–" : fmtPct(v));
  const mbps = (v) => (v === null || v === undefined ? "–" : `${(Number(v) / 1e6).toFixed(1)} MB/s`);
  const gpu = (row) => (row && row.length ? row.map((v) => pct(v)).join(", ") : "–");
  const busiest = (row) => (row && row.length ? Math.max(...row) : null);
  // The process tree's CPU is in % of one core: written as cores.
  const cores = (v) => (v === null || v === undefined ? "–" : `${(Number(v) / 100).toFixed(2)} cores`);
  const head = h("tr", {}, ["Time", "CPU (all cores)", "Busiest core", "Training process", "Disk read", "Network in",
    "Accelerator"].map((t) => h("th", { text: t })));
  const rows = (s.t_ms || []).map((t, i) => h("tr", { class: "tfb-sample" },
    h("td", { text: `${(Number(t) / 1000).toFixed(2)} s` }),
    h("td", { class: "num", text: pct(mean((s.cpu_pct || [])[i])) }),
    h("td", { class: "num", text: pct(busiest((s.cpu_pct || [])[i])) }),
    h("td", { class: "num", text: cores((s.tree_cpu_pct || [])[i] ?? (s.proc_cpu_pct || [])[i]) }),
    h("td", { class: "num", text: mbps((s.disk_read_Bps || [])[i]) }),
    h("td", { class: "num", text: mbps((s.net_recv_Bps || [])[i]) }),
    h("td", { text: gpu((s.gpu_util_pct || [])[i]) })));
  return h("div", { class: "tfb-table-wrap tfb-sys-samples" },
    h("table", { class: "tfb-table" }, h("thead", {}, head), h("tbody", {}, rows)));
}

function systemSection(report) {
  if (report.status !== "ok") return null;
  const sm = report.system_metrics;
  const section = h("section", { class: "tfb-card tfb-system" }, h("h3", { text: "System during the profiled window" }));
  if (!sm) {
    section.append(report.framework === "pytorch" && !report.backend
      ? h("p", { class: "tfb-muted" }, "Not recorded: torch.profiler records no system metrics. Run the training "
        + "under ", h("code", { text: "tfbneck watch" }), " to see CPU per core, accelerator utilisation, disk and network.")
      : h("p", { class: "tfb-muted" },
        "Not recorded for this session. Profile with ", h("code", { text: "BottleneckProfiler" }),
        " to record CPU per core, accelerator utilisation, disk and network beside the trace."));
    return section;
  }
  const chips = [
    ["CPU (all cores)", fmtPct(sm.cpu_mean_pct)],
    ["Busiest core", fmtPct(sm.busiest_core_mean_pct)],
    ["Saturated cores", sm.saturated_cores_mean ?? "–"],
    ["I/O wait", sm.iowait_pct === null || sm.iowait_pct === undefined ? "–" : fmtPct(sm.iowait_pct)],
    ["Disk read", `${Number(sm.disk_read_MBps || 0).toFixed(1)} MB/s`],
    ["Network in", `${Number(sm.net_recv_MBps || 0).toFixed(1)} MB/s`],
    ["Accelerator", sm.gpu_util_pct === null || sm.gpu_util_pct === undefined ? "not recorded" : fmtPct(sm.gpu_util_pct)],
  ];
  section.append(h("dl", { class: "tfb-chips" }, chips.map(([k, v]) => h("div", {}, h("dt", { text: k }), h("dd", { text: String(v) })))));
  const s = sm.series || {};
  const n = sm.samples ?? (s.t_ms || []).length;
  const over = typeof sm.sampled_s === "number" ? ` over ${sm.sampled_s.toFixed(2)} s` : "";
  section.append(h("p", { class: "tfb-muted tfb-sys-basis", dataset: { samples: String(n) },
    text: `These figures rest on ${n} sample${n === 1 ? "" : "s"}${over} (one about every 0.1 s while the window ran).` }));
  if (n < MIN_CHART_SAMPLES) {
    section.append(sampleTable(s));
    return section;
  }
  const t = (s.t_ms || []).map((x) => (Number(x) / 1000).toFixed(1));
  const grid = h("div", { class: "tfb-sys-grid" });
  const perCore = s.cpu_pct || [];
  const cores = perCore.reduce((n, row) => Math.max(n, (row || []).length), 0);
  if (t.length && cores) {
    const ds = [];
    for (let c = 0; c < cores; c += 1) {
      ds.push({ label: `core ${c}`, data: perCore.map((row) => (row || [])[c] ?? null),
        borderColor: PALETTE[c % PALETTE.length] + "99", borderWidth: 1 });
    }
    ds.push({ label: "mean", data: perCore.map((row) => (row && row.length ? row.reduce((a, b) => a + b, 0) / row.length : null)),
      borderColor: "#202124", borderWidth: 2 });
    grid.append(lineChart(`CPU per core (${cores} core${cores === 1 ? "" : "s"})`, "tfb-cpu-canvas", t, ds, "%", 100));
  }
  const gpu = s.gpu_util_pct || [];
  const gpus = gpu.reduce((n, row) => Math.max(n, (row || []).length), 0);
  if (t.length && gpus) {
    const ds = [];
    for (let g = 0; g < gpus; g += 1) {
      ds.push({ label: `GPU ${g}`, data: gpu.map((row) => (row || [])[g] ?? null), borderColor: PALETTE[g % PALETTE.length] });
    }
    grid.append(lineChart("Accelerator utilisation", "tfb-gpu-canvas", t, ds, "%", 100));
  } else {
    grid.append(h("figure", { class: "tfb-sys-fig tfb-sys-empty" }, h("figcaption", { text: "Accelerator utilisation" }),
      h("p", { class: "tfb-muted", text: "No accelerator utilisation recorded (no NVIDIA GPU, or NVML was not available)." })));
  }
  if (t.length) {
    const mb = (arr) => (arr || []).map((v) => (v === null || v === undefined ? null : Number(v) / 1e6));
    grid.append(lineChart("Disk and network", "tfb-io-canvas", t, [
      { label: "disk read MB/s", data: mb(s.disk_read_Bps), borderColor: "#795548" },
      { label: "network in MB/s", data: mb(s.net_recv_Bps), borderColor: "#9334e6" },
    ], "MB/s"));
  }
  section.append(grid);
  return section;
}

function recommendationsSection(report) {
  if (report.status !== "ok") return null;
  const recs = report.recommendations || [];
  const section = h("section", { class: "tfb-card tfb-recs" }, h("h3", { text: "What to change" }));
  if (!recs.length) {
    section.append(h("p", { class: "tfb-muted", text: "No change to recommend from this trace." }));
    return section;
  }
  section.append(h("ol", { class: "tfb-rec-list" }, recs.map((r, i) => {
    const li = h("li", { class: "tfb-rec" },
      h("div", { class: "tfb-rec-title" }, h("span", { class: "tfb-rec-num", text: String(i + 1) }), h("strong", {}, richText(r.title || ""))));
    if (r.worth) li.append(h("p", { class: "tfb-rec-worth", title: (r.predicted || {}).basis || r.predicted_why_not || "", text: r.worth }));
    if (r.why_here) li.append(h("p", { class: "tfb-rec-why" }, h("em", { text: "Why here: " }), richText(r.why_here)));
    li.append(h("p", { class: "tfb-rec-detail" }, richText(r.detail || "")));
    if (r.code) li.append(codeBlock(r.code));
    return li;
  })));
  return section;
}

/** A system-only session's record, interval by interval: the cores the process tree and the
 *  machine used, each interval labelled with its triage. */
function systemOnlySection(report) {
  const ivs = report.system_intervals || [];
  const section = h("section", {
    class: "tfb-card tfb-system-only",
    dataset: { intervals: String(ivs.length), triage: ivs.map((iv) => iv.bottleneck || "").join(",") },
  }, h("h3", { text: "System over the record" }));
  if (!ivs.length) return section;
  const labels = ivs.map((iv) => `${Number(iv.t_s).toFixed(0)} s (${iv.bottleneck || "?"})`);
  const datasets = [
    { label: "training process tree (cores)", data: ivs.map((iv) => iv.tree_cores), borderColor: PALETTE[0] },
    { label: "machine, busy cores", data: ivs.map((iv) => iv.cores_busy), borderColor: PALETTE[1] },
  ];
  if (ivs.some((iv) => iv.gpu_util_pct !== null && iv.gpu_util_pct !== undefined)) {
    datasets.push({ label: "busiest accelerator (% / 100)", data: ivs.map((iv) => (iv.gpu_util_pct ?? 0) / 100),
      borderColor: PALETTE[2] });
  }
  const cpus = (report.system_record || {}).cpu_count;
  section.append(lineChart("CPU in cores, by interval (the triage in brackets)", "tfb-system-only-canvas", labels,
    datasets, "cores", cpus ? Number(cpus) : undefined, "seconds into the record"));
  return section;
}

/** The full view of one report. */
export function sessionView(report) {
  if (report.kind === "system_only") {
    return h("div", { class: "tfb-session", dataset: { run: report.run, session: report.session } },
      h("header", { class: "tfb-session-head" }, sessionTitle(report)),
      verdictCard(report, { links: false }),
      recommendationsSection(report),
      systemOnlySection(report));
  }
  return h("div", { class: "tfb-session", dataset: { run: report.run, session: report.session } },
    h("header", { class: "tfb-session-head" }, sessionTitle(report), metaLine(report)),
    verdictCard(report),
    recommendationsSection(report),
    breakdownSection(report),
    stagesSection(report),
    systemSection(report),
    opsSection(report));
}

export { fmtBytes };
