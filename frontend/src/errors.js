// What went wrong, in words a user understands: each explanation is chosen by the
// machine-readable `error_kind` the backend sends (tfbneck_plugin/errors.py for session
// reports; docs/http_api.md for the plugin's own refusals and logdir errors), never by
// matching the backend's English. The backend's one-line `error` is shown beside it.

/** Capitalise and end with a full stop: a reason written mid-sentence, shown as a hint. */
function sentence(text) {
  const t = String(text || "").trim();
  if (!t) return "";
  return `${t.charAt(0).toUpperCase()}${t.slice(1)}${/[.!?]$/.test(t) ? "" : "."}`;
}

/** Session reports with `status: "error"`, by `error_kind`. A function gets the report. */
const REPORT_ERRORS = {
  empty_file: {
    headline: "The trace file is empty.",
    hint: "The profiler may still be writing it, or it stopped before writing. Wait a moment, or capture the profile again.",
  },
  corrupt: {
    headline: "The trace file is damaged (truncated or corrupt) and cannot be read.",
    hint: "Capture the profile again; if the job was killed while profiling, the file was cut short.",
  },
  not_xspace: {
    headline: "This file is not a profiler trace.",
    hint: "Only .xplane.pb files written by the TensorFlow profiler (or XProf) can be analysed.",
  },
  too_large: {
    headline: "The trace file is larger than tfbneck reads by default.",
    hint: "Set TFBNECK_MAX_TRACE_BYTES before starting TensorBoard to raise the limit, or profile fewer steps.",
  },
  unreadable: {
    headline: "The trace file cannot be read.",
    hint: "Check that the TensorBoard process may read this file (permissions, storage credentials).",
  },
  legacy_only: {
    headline: "This session only holds files written by TensorFlow 2.10 or older, which tfbneck cannot read.",
    hint: "Profile again with a recent TensorFlow, or open this session in the Profile tab.",
  },
  skipped: (r) => ({
    headline: "The profiler did not record this window.",
    hint: r.skipped ? `Reason given when it was skipped: ${r.skipped}` : "No reason was recorded.",
  }),
  incomplete: (r) => {
    // The recorded reason may restate the headline: keep what it adds.
    const rest = String(r.incomplete || "")
      .replace(/^the training process stopped inside this profiling window[^;]*;?\s*/i, "");
    return {
      headline: "The training process stopped inside this profiling window, before its trace was saved.",
      hint: sentence(rest) || "Capture the profile again.",
    };
  },
  analysis_failed: {
    headline: "tfbneck hit a problem while analysing this trace.",
    hint: "This is a bug in tfbneck; please report it with the message below.",
  },
  out_of_memory: {
    headline: "The trace is too large to analyse in this TensorBoard process's memory.",
    hint: "Profile fewer steps, or use `tfbneck analyze` on a machine with more memory.",
  },
  not_found: {
    headline: "This session's files are no longer where the logdir scan found them.",
    hint: "They were moved or deleted; the session list updates on its own.",
  },
  unreachable: {
    headline: "The storage holding this session cannot be reached.",
    hint: "Check the network and the storage credentials of the TensorBoard process, then reload.",
  },
  bad_system_record: {
    headline: "This system record (tfbneck watch --output) cannot be read.",
    hint: "It is truncated, not JSON, or not a tfbneck system record; record the process again with tfbneck watch --output.",
  },
};

/** The whole logdir cannot be searched (`/sessions` `error_kind`). */
const LOGDIR_ERRORS = {
  no_logdir: { headline: "TensorBoard was started without a logdir.", hint: "Start it with --logdir (or --bottleneck_logdir)." },
  not_found: { headline: "The logdir does not exist.", hint: "Check the path given to --logdir; sessions appear here once training writes them." },
  unreadable: { headline: "The logdir cannot be read.", hint: "Check that the TensorBoard process may list it, and that its URL scheme is installed (pip install '.[remote]' in the tfbneck clone)." },
  unreachable: { headline: "The storage holding the logdir cannot be reached.", hint: "Check the network and the storage credentials of the TensorBoard process; the tab tries again on its own." },
  internal: { headline: "Searching the logdir failed.", hint: "This is a bug in tfbneck; the TensorBoard log has the details." },
};

/** The plugin refused a request (`{"error", "error_kind"}` with an HTTP status). */
const REQUEST_ERRORS = {
  not_found: { headline: "This session is no longer in the logdir.", hint: "It was moved or deleted since the list was made; the list updates on its own." },
  scanning: { headline: "The logdir is still being searched for sessions.", hint: "Try again in a moment." },
  bad_request: { headline: "The plugin refused the request for this session.", hint: "Reload the tab; if it happens again, please report it with the message below." },
  method_not_allowed: { headline: "The plugin only answers GET requests.", hint: "Reload the tab; an extension or proxy may have changed the request." },
  internal: { headline: "The plugin hit an internal error.", hint: "This is a bug in tfbneck; the TensorBoard log has the details." },
  unreachable: { headline: "TensorBoard is not reachable.", hint: "Is the server still running? Reload the page once it is." },
};

const FALLBACK = { headline: "This session could not be analysed.", hint: "" };

function pick(table, kind, arg) {
  const e = Object.prototype.hasOwnProperty.call(table, kind) ? table[kind] : null;
  if (!e) return null;
  return typeof e === "function" ? e(arg) : { ...e };
}

/** {headline, hint} for a session report with `status: "error"`, chosen by its `error_kind`. */
export function explainReportError(report) {
  return pick(REPORT_ERRORS, report && report.error_kind, report || {}) || { ...FALLBACK };
}

/** {headline, hint} for the `/sessions` answer's `error_kind`, or null when there is none. */
export function explainLogdirError(kind) {
  if (!kind) return null;
  return pick(LOGDIR_ERRORS, kind) || { headline: "The logdir cannot be searched.", hint: "" };
}

/** {headline, hint} for a refused request (an ApiError's `kind`). */
export function explainRequestError(kind) {
  return pick(REQUEST_ERRORS, kind) || { headline: "The report could not be loaded.", hint: "" };
}

/** The kinds each table explains (checked against the backend's lists by the tests). */
export const EXPLAINED_KINDS = {
  report: Object.keys(REPORT_ERRORS),
  logdir: Object.keys(LOGDIR_ERRORS),
  request: Object.keys(REQUEST_ERRORS),
};
