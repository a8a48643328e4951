// The step-time trend of long jobs (GET /trend, docs/http_api.md): per run and training
// process, the step time (p50 and p90 per period) as a line over the steps, the profiling
// windows marked on it (scheduled and triggered by a slowdown), and a table of the windows
// with their verdicts and what changed from one window to the next. Every string from the
// server is inserted as text.
import { makeChart } from "./charts.js";
import { h } from "./dom.js";
import { fmtMs, fmtTime, kindLabel, runLabel } from "./format.js";

export const WINDOW_COLORS = { scheduled: "#1a73e8", triggered: "#d93025" };
/** Background of each interval of the system chart, by the flowchart's triage. */
export const TRIAGE_COLORS = {
  device: "rgba(30,142,62,0.13)", cpu: "rgba(217,48,37,0.13)", io: "rgba(249,171,0,0.18)",
  network: "rgba(161,66,244,0.15)", unclear: "rgba(128,134,139,0.08)",
};
const KIND_NAMES = { scheduled: "Scheduled", triggered: "Triggered by a slowdown" };

/** Draws each window as a translucent band over its steps, with a marker at the top. */
const windowBands = {
  id: "tfbWindowBands",
  beforeDatasetsDraw(chart, _args, opts) {
    const { ctx, chartArea: area, scales: { x } } = chart;
    for (const w of opts.windows || []) {
      if (!w.steps) continue;
      const x0 = x.getPixelForValue(w.steps[0] - 0.5);
      const x1 = x.getPixelForValue(w.steps[1] + 0.5);
      const left = Math.max(area.left, Math.min(x0, x1 - 3));
      const width = Math.max(3, x1 - x0);
      ctx.save();
      ctx.fillStyle = w.kind === "triggered" ? "rgba(217,48,37,0.18)" : "rgba(26,115,232,0.16)";
      ctx.fillRect(left, area.top, width, area.bottom - area.top);
      ctx.fillStyle = WINDOW_COLORS[w.kind] || "#5f6368";
      ctx.fillRect(left, area.top, width, 4);
      ctx.restore();
    }
  },
};

/** Draws each system interval's triage as a band over the steps it covers. */
const triageBands = {
  id: "tfbTriageBands",
  beforeDatasetsDraw(chart, _args, opts) {
    const { ctx, chartArea: area, scales: { x } } = chart;
    let prev = 0; // the first interval began with training
    for (const iv of opts.intervals || []) {
      const end = iv.step;
      const start = prev;
      prev = end;
      if (end === null || end === undefined) continue;
      const x0 = Math.max(area.left, x.getPixelForValue(start));
      const x1 = Math.min(area.right, x.getPixelForValue(end));
      ctx.save();
      ctx.fillStyle = TRIAGE_COLORS[iv.bottleneck] || TRIAGE_COLORS.unclear;
      ctx.fillRect(x0, area.top, Math.max(1, x1 - x0), area.bottom - area.top);
      ctx.restore();
    }
  },
};

function systemChart(job) {
  const sys = job.system;
  const ivs = (sys.intervals || []).filter((iv) => iv.step !== null && iv.step !== undefined);
  const canvas = h("canvas", { class: "tfb-system-canvas", "aria-label": "System metrics over the job, triage as bands" });
  const cores = Number(sys.cpu_count || 1);
  const pct = (label, color, f, dash) => ({
    label, yAxisID: "y", data: ivs.map((iv) => ({ x: iv.step, y: f(iv), iv })),
    borderColor: color, backgroundColor: color, borderDash: dash || [], borderWidth: 2, pointRadius: 1.5, tension: 0,
  });
  const rate = (label, color, f) => ({
    label, yAxisID: "y1", data: ivs.map((iv) => ({ x: iv.step, y: f(iv), iv })),
    borderColor: color, backgroundColor: color, borderDash: [2, 3], borderWidth: 1.5, pointRadius: 1, tension: 0,
  });
  const datasets = [
    pct("Training process, % of the machine's cores", "#d93025", (iv) => (100 * Number(iv.tree_cores || 0)) / cores),
    pct("Machine CPU %", "#5f6368", (iv) => Number(iv.cpu_pct || 0), [5, 4]),
    pct("Busiest thread: running or waiting %", "#e37400", (iv) => Number(iv.busiest_thread_demand_pct || 0)),
    pct("I/O wait %", "#f9ab00", (iv) => Number(iv.iowait_pct || 0), [2, 2]),
    rate("Disk reads MB/s", "#188038", (iv) => Number(iv.disk_read_MBps || 0)),
    rate("Network MB/s (loopback excluded)", "#a142f4", (iv) => Number(iv.net_recv_MBps || 0) + Number(iv.net_sent_MBps || 0)),
  ];
  if (ivs.some((iv) => iv.gpu_util_pct !== null && iv.gpu_util_pct !== undefined)) {
    datasets.unshift(pct("Accelerator utilisation %", "#1e8e3e", (iv) => Number(iv.gpu_util_pct || 0)));
  }
  const windows = (job.windows || []).filter((w) => w.steps);
  // The same steps as the step-time chart above, so that the two read together.
  const last = Math.max(0, ...ivs.map((iv) => iv.step), ...(job.points || []).map((p) => p.step));
  requestAnimationFrame(() => makeChart(canvas, {
    type: "line",
    data: { datasets },
    options: {
      responsive: true,
      interaction: { mode: "nearest", intersect: false },
      scales: {
        x: { type: "linear", min: 0, max: last, title: { display: true, text: "step" } },
        y: { min: 0, max: 105, title: { display: true, text: "%" } },
        y1: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: "MB/s" } },
      },
      plugins: {
        tfbTriageBands: { intervals: ivs },
        tfbWindowBands: { windows },
        legend: { position: "bottom", labels: { boxWidth: 12, boxHeight: 12 } },
        tooltip: {
          callbacks: {
            title: (items) => {
              const iv = items[0].raw && items[0].raw.iv;
              return iv ? `Up to step ${iv.step} — triage: ${iv.bottleneck || "?"}` : "";
            },
            afterTitle: (items) => (items[0].raw && items[0].raw.iv ? items[0].raw.iv.reason || "" : ""),
          },
        },
      },
    },
    plugins: [triageBands, windowBands],
  }));
  canvas.dataset.intervals = String(ivs.length);
  canvas.dataset.triage = ivs.map((iv) => iv.bottleneck || "").join(",");
  const t = sys.triage || {};
  const legend = Object.keys(TRIAGE_COLORS).map((k) => h("span", { class: "tfb-triage-key" },
    h("span", { class: "tfb-swatch", style: { background: TRIAGE_COLORS[k].replace(/0\.\d+\)$/, "0.6)") } }), ` ${k}`));
  return h("div", { class: "tfb-system" },
    h("h3", { text: "System over the whole run" }),
    h("p", { class: "tfb-system-triage" }, h("strong", { text: `Triage from the system metrics: ${t.bottleneck || "?"}` }),
      h("span", { text: t.reason ? ` — ${t.reason}` : "" })),
    t.caveat ? h("p", { class: "tfb-muted-small tfb-system-caveat", text: t.caveat }) : null,
    h("p", { class: "tfb-muted-small", text: `Sampled every ${sys.interval_s} s, ${sys.aggregate_s} s per point; `
      + "bands: the flowchart's first diagnosis of each interval (system metrics only, no trace)." }, legend),
    h("div", { class: "tfb-chart tfb-system-chart" }, canvas));
}

function windowLabel(w) {
  const steps = w.steps ? `steps ${w.steps[0]}-${w.steps[1]}` : `window ${w.index}`;
  const v = w.verdict;
  return `${KIND_NAMES[w.kind] || w.kind}: ${steps}` + (v ? ` — ${kindLabel(v.bottleneck)}${v.cause ? ` (${v.cause})` : ""}` : "");
}

function chart(job) {
  const canvas = h("canvas", { class: "tfb-trend-canvas", "aria-label": "Step time over the job, profiling windows marked" });
  const wrap = h("div", { class: "tfb-chart tfb-trend-chart" }, canvas);
  const points = job.points || [];
  const windows = (job.windows || []).filter((w) => w.steps);
  const top = Math.max(1, ...points.map((p) => Number(p.p90_ms || 0)));
  const line = (key, color, dash) => ({
    label: key === "p50_ms" ? "Step time, median (p50)" : "Step time, 90th percentile (p90)",
    data: points.map((p) => ({ x: p.step, y: Number(p[key]) })),
    borderColor: color, backgroundColor: color, borderDash: dash, borderWidth: 2, pointRadius: 2, tension: 0,
  });
  const marks = (kind) => ({
    label: kind === "triggered" ? "Window triggered by a slowdown" : "Scheduled window",
    data: windows.filter((w) => w.kind === kind).map((w) => ({ x: (w.steps[0] + w.steps[1]) / 2, y: top * 1.06, w })),
    showLine: false, pointStyle: kind === "triggered" ? "triangle" : "rectRot", pointRadius: 7, pointHoverRadius: 9,
    borderColor: WINDOW_COLORS[kind], backgroundColor: WINDOW_COLORS[kind],
  });
  const datasets = [line("p50_ms", "#202124", []), line("p90_ms", "#80868b", [5, 4]), marks("scheduled"), marks("triggered")];
  requestAnimationFrame(() => makeChart(canvas, {
    type: "line",
    data: { datasets },
    options: {
      responsive: true,
      parsing: true,
      interaction: { mode: "nearest", intersect: false },
      scales: {
        x: { type: "linear", min: 0, title: { display: true, text: "step" } },
        y: { beginAtZero: true, suggestedMax: top * 1.12, title: { display: true, text: "ms per step" } },
      },
      plugins: {
        tfbWindowBands: { windows },
        legend: { position: "bottom", labels: { boxWidth: 12, boxHeight: 12 } },
        tooltip: {
          callbacks: {
            title: (items) => (items[0].raw && items[0].raw.w ? windowLabel(items[0].raw.w) : `Steps up to ${items[0].parsed.x}`),
            label: (item) => (item.raw && item.raw.w ? (item.raw.w.change ? item.raw.w.change.text : "")
              : `${item.dataset.label}: ${fmtMs(item.parsed.y, 2)}`),
          },
        },
      },
    },
    plugins: [windowBands],
  }));
  canvas.dataset.windows = String(windows.length);
  return wrap;
}

function why(w) {
  const t = w.trigger;
  if (w.kind !== "triggered" || !t) return "profile_steps";
  const ran = `${fmtMs(t.observed_p50_ms, 2)} per step for ${t.slow_step_count} steps (${Number(t.slow_for_s).toFixed(1)} s) `
    + `from step ${t.slow_steps[0]}, against a baseline of ${fmtMs(t.baseline_p50_ms, 2)}`;
  if (t.outcome === "too_late") return `${ran}; ${t.note || "training ended before it could be profiled"}`;
  return t.outcome === "partial" && t.note ? `${ran}; ${t.note}` : ran;
}

function verdictCell(w) {
  const v = w.verdict;
  if (v) {
    return h("td", {}, h("span", { class: `tfb-chip kind-${v.bottleneck || "unknown"}`, text: kindLabel(v.bottleneck) }),
      v.cause ? h("span", { class: "tfb-trend-cause", text: ` ${v.cause}` }) : null,
      v.step_time_ms !== null && v.step_time_ms !== undefined ? h("div", { class: "tfb-muted-small", text: `${fmtMs(v.step_time_ms, 2)} per step in the trace` }) : null,
      w.overhead && w.overhead.x ? h("div", { class: "tfb-muted-small tfb-trend-overhead", text: `${w.overhead.x.toFixed(1)}x the job's own ${fmtMs(w.overhead.job_step_ms, 2)} around it (unprofiled): the profiler's cost` }) : null);
  }
  if (w.status === "skipped") return h("td", { class: "tfb-muted-small", text: w.reason || "not profiled" });
  if (w.analysis_error) return h("td", { class: "tfb-muted-small", text: `analysis failed: ${w.analysis_error}` });
  return h("td", { class: "tfb-muted-small", text: w.status === "open" ? "being profiled" : "not analysed yet: open the session" });
}

function changeText(w, earlier) {
  if (w.change) return w.change.text;
  if (!w.verdict) return "";
  return earlier ? "same verdict as the window before" : "first window with a verdict";
}

function windowRow(w, run, earlier, onOpen) {
  return h("tr", {
    class: `tfb-trend-window kind-${w.kind}`,
    dataset: {
      index: String(w.index), kind: w.kind, session: w.session || "", status: w.status,
      bottleneck: (w.verdict && w.verdict.bottleneck) || "", cause: (w.verdict && w.verdict.cause) || "",
    },
  },
  h("td", { class: "num", text: String(w.index) }),
  h("td", {}, h("span", { class: "tfb-swatch", style: { background: WINDOW_COLORS[w.kind] || "#5f6368" } }),
    h("span", { text: ` ${KIND_NAMES[w.kind] || w.kind}` })),
  h("td", { class: "num", text: w.steps ? `${w.steps[0]}-${w.steps[1]}` : "–" }),
  h("td", { class: "tfb-trend-why", text: why(w) }),
  verdictCell(w),
  h("td", { class: "tfb-trend-change", text: changeText(w, earlier) }),
  h("td", {}, w.session && w.in_logdir ? h("button", {
    class: "tfb-button tfb-trend-open", type: "button", onclick: () => onOpen(run, w.session),
  }, "Open") : null));
}

function windowTable(job, run, onOpen) {
  const rows = [];
  let earlier = false; // an earlier window has a verdict
  for (const w of job.windows || []) {
    rows.push(windowRow(w, run, earlier, onOpen));
    earlier = earlier || Boolean(w.verdict);
  }
  const head = ["#", "Window", "Steps", "Why it opened", "Verdict", "What changed", ""];
  return h("div", { class: "tfb-table-wrap" }, h("table", { class: "tfb-table tfb-trend-table" },
    h("thead", {}, h("tr", {}, head.map((t) => h("th", { text: t })))), h("tbody", {}, rows)));
}

function jobCard(run, job, onOpen) {
  const started = job.start_unix_ns ? fmtTime(job.start_unix_ns / 1e9) : "";
  const spe = Number(job.steps_per_execution || 1);
  const b = job.baseline;
  const sub = [`host ${job.host || "?"}, pid ${job.pid}`, started ? `started ${started}` : null,
    job.ended ? "ended" : "running", spe > 1 ? `step times per execution of ${spe} batches` : null,
    b ? `baseline ${fmtMs(b.p50_ms, 2)} p50, ${fmtMs(b.p90_ms, 2)} p90` : null,
    job.trigger ? `slowdown trigger: ${job.trigger.factor}x for ${job.trigger.consecutive} steps and ${job.trigger.min_seconds} s`
      : "no slowdown trigger"].filter(Boolean).join(" · ");
  const points = job.points || [];
  return h("section", { class: "tfb-card tfb-trend", dataset: { run, file: job.file || "" } },
    h("div", { class: "tfb-title" }, h("h2", { class: "tfb-title-run", text: runLabel(run) }),
      h("span", { class: "tfb-title-session", text: job.file || "" })),
    h("p", { class: "tfb-muted", text: sub }),
    points.length ? chart(job)
      : h("p", { class: "tfb-muted tfb-trend-empty", text: "No step time recorded yet (the first period has not ended)." }),
    job.system && (job.system.intervals || []).length ? systemChart(job) : null,
    h("h3", { text: "Profiling windows" }),
    (job.windows || []).length ? windowTable(job, run, onOpen) : h("p", { class: "tfb-muted", text: "No window yet." }));
}

/** The trend view: one card per run and training process. `onOpen(run, session)` shows a session. */
export function trendView(body, onOpen) {
  const runs = body.runs || [];
  if (!runs.length) {
    return h("section", { class: "tfb-card tfb-empty tfb-trend-none" },
      h("h2", { text: "No step-time trend yet" }),
      h("p", { text: "BottleneckProfiler times every training step and writes the trend beside the run's sessions "
        + "(plugins/bottleneck/steptimes_*.json). Profile with a current version; with on_slowdown=True a window "
        + "also opens by itself when training slows down:" }),
      h("pre", {}, h("code", { text: "BottleneckProfiler(\"logs\", profile_steps=(10, 14), on_slowdown=True)" })));
  }
  const cards = [];
  for (const r of runs) for (const job of r.jobs || []) cards.push(jobCard(r.run, job, onOpen));
  return h("div", { class: "tfb-trend-view" }, cards,
    (body.problems || []).map((p) => h("p", { class: "tfb-problem", text: p })));
}
