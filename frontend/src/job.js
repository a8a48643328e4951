// A multi-worker job's report (kind "job", /job route): the job-wide verdict as for one
// session, plus a table with one row per worker: its share in keeping the others waiting
// at the collectives, the straggler marked, and a Trace Viewer link that opens that
// worker's own run and host. Every string from the report is inserted as text.
import { traceViewerUrl } from "./api.js";
import { h } from "./dom.js";
import { fmtMs, fmtPct, kindLabel, runLabel } from "./format.js";
import { sessionView } from "./session.js";

function limitText(row) {
  const own = row.own_limit || {};
  const kind = own.bottleneck || row.bottleneck;
  const cause = own.cause || row.cause;
  return kind ? `${kindLabel(kind)}${cause ? ` · ${String(cause).replace(/_/g, " ")}` : ""}` : "–";
}

function workerRow(row, straggler) {
  const isStraggler = row.straggler === true || (straggler && row.host === straggler);
  const tv = row.trace_viewer;
  const last = Number.isFinite(row.last_in_steps) && Number.isFinite(row.matched_steps)
    ? `${row.last_in_steps} of ${row.matched_steps}` : "–";
  return h("tr", { class: "tfb-job-worker" + (isStraggler ? " tfb-straggler" : ""), dataset: { host: row.host || "" } },
    h("th", { scope: "row" }, h("span", { text: row.host || "–" }),
      isStraggler ? h("span", { class: "tfb-chip tfb-straggler-chip", text: "straggler" }) : null),
    h("td", {}, h("span", { class: "tfb-job-run", text: runLabel(row.run) }), " / ",
      h("span", { class: "tfb-job-session", text: row.session || "" })),
    h("td", { class: "num", text: fmtMs(row.step_time_ms) }),
    h("td", { text: limitText(row) }),
    h("td", { class: "num", text: fmtPct(row.kept_others_waiting_pct) }),
    h("td", { class: "num", text: last }),
    h("td", {}, tv && tv.run ? h("a", {
      class: "tfb-button tfb-trace-link tfb-worker-trace", href: traceViewerUrl(tv, tv.host ? [tv.host] : []),
      target: "_parent", dataset: { kind: "worker", host: row.host || "" },
      title: `Opens the Trace Viewer on ${row.host}'s own session`,
    }, "Trace Viewer") : "–"));
}

/** The per-worker table of a job report. */
export function jobSection(report) {
  const job = report.job || {};
  const straggler = job.straggler || null;
  const headline = straggler
    ? `${straggler} kept the other workers waiting at the collectives (${fmtPct(job.lateness_pct)} of their step time).`
    : "No worker kept the others waiting: the workers reach the collectives together.";
  return h("section", { class: "tfb-card tfb-job", dataset: { straggler: straggler || "" } },
    h("h3", { text: `Workers (${(report.per_host || []).length})` }),
    h("p", { class: "tfb-job-headline", text: headline }),
    h("div", { class: "tfb-table-wrap" }, h("table", { class: "tfb-table tfb-job-table" },
      h("thead", {}, h("tr", {},
        ["Worker", "Session", "Step time", "Own limit", "Kept others waiting", "Last in (steps)", ""]
          .map((t, i) => h("th", { class: i === 2 || i === 4 || i === 5 ? "num" : null, text: t })))),
      h("tbody", {}, (report.per_host || []).map((row) => workerRow(row, straggler))))),
    job.grouping ? h("p", { class: "tfb-caption tfb-job-grouping", text: job.grouping }) : null);
}

/** The full view of a job report: the session view with the workers' table after the verdict. */
export function jobView(report) {
  const view = sessionView(report);
  const verdict = view.querySelector(".tfb-verdict");
  const section = jobSection(report);
  if (verdict) verdict.after(section);
  else view.append(section);
  view.classList.add("tfb-job-view");
  return view;
}
