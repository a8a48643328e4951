// The plugin's HTTP routes (docs/http_api.md). URLs are relative to the iframe's
// <base href="plugin/bottleneck/">, so TensorBoard's --path_prefix is kept.

/** A refused or failed request: HTTP `status` (0: no answer), the backend's one-line
 * `message` and its machine-readable `kind` (`error_kind`, docs/http_api.md). */
export class ApiError extends Error {
  constructor(status, message, kind) {
    super(message);
    this.status = status;
    this.kind = kind || (status === 0 ? "unreachable" : status === 404 ? "not_found" : "internal");
  }
}

async function getJson(url) {
  let response;
  try {
    response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  } catch (err) {
    throw new ApiError(0, "TensorBoard is not reachable (is the server still running?)", "unreachable");
  }
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    throw new ApiError(response.status, (body && body.error) || `HTTP ${response.status}`, body && body.error_kind);
  }
  return { status: response.status, body, cache: response.headers.get("X-Tfbneck-Cache") };
}

/** The session list; every session without a verdict is queued for a background analysis. */
export function listSessions() {
  return getJson("sessions?analyze=all").then((r) => r.body);
}

/** The step-time trend of every run (GET /trend). */
export function fetchTrend() {
  return getJson("trend").then((r) => r.body);
}

/** The fleet report of the whole logdir (GET /fleet); params: group_by, group_level, since. */
export function fetchFleet(params = {}) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined));
  return getJson("fleet" + (q.toString() ? `?${q.toString()}` : "")).then((r) => r.body);
}

export function reportUrl(run, session) {
  return "report?" + new URLSearchParams({ run, session }).toString();
}

/** The report of the multi-worker job whose worker session is (run, session) (GET /job). */
export function jobUrl(run, session) {
  return "job?" + new URLSearchParams({ run, session }).toString();
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The comparison of two sessions, the one `tfbneck compare` makes (GET /compare): resolves to
 * the route's body ({comparison, error}), polling while a side is analysed; null if cancelled. */
export async function fetchComparison(before, after, { isCancelled = () => false } = {}) {
  const url = "compare?" + new URLSearchParams({
    before_run: before.run, before_session: before.session, after_run: after.run, after_session: after.session,
  }).toString();
  for (;;) {
    const r = await getJson(url);
    if (isCancelled()) return null;
    if (r.status === 200) return r.body;
    await sleep(Math.min(Math.max((r.body && r.body.retry_after_ms) || 400, 100), 3000));
    if (isCancelled()) return null;
  }
}

/**
 * The report of one session (with job: of the job that worker session belongs to). While the server analyses it (202) calls onWait() and polls.
 * Resolves to null if isCancelled() turns true while waiting.
 */
export async function fetchReport(run, session, { onWait = () => {}, isCancelled = () => false, job = false } = {}) {
  for (;;) {
    const r = await getJson(job ? jobUrl(run, session) : reportUrl(run, session));
    if (isCancelled()) return null;
    if (r.status === 200) return r.body.sessions[0];
    onWait();
    await sleep(Math.min(Math.max((r.body && r.body.retry_after_ms) || 400, 100), 3000));
    if (isCancelled()) return null;
  }
}

/**
 * The Profile plugin's Trace Viewer for a session, as a URL of the TensorBoard page:
 * <TensorBoard root>?run=<run>/<session>&tool=trace_viewer&host=<host>&hosts=<hosts>#profile
 * The root is derived from this frame's own URL (<root>data/plugin_entry.html), so a
 * --path_prefix or a proxy path is kept.
 */
export function traceViewerUrl(traceViewer, hosts) {
  const root = new URL("../", window.location.href);
  const params = new URLSearchParams();
  params.set("run", traceViewer.run);
  params.set("tool", "trace_viewer");
  const host = traceViewer.host || (hosts && hosts[0]) || "";
  if (host) params.set("host", host);
  const all = hosts && hosts.length ? hosts : host ? [host] : [];
  if (all.length) params.set("hosts", all.join(","));
  return `${root.origin}${root.pathname}?${params.toString()}#profile`;
}

/**
 * XProf's Trace Viewer page itself (the document the Profile tab shows in a frame), opened
 * on one time range of one host:
 * <root>data/plugin/profile/trace_viewer_index.html?is_streaming=true&is_oss=true
 *   &trace_data_url=<root path>data/plugin/profile/data?run=<run>/<session>&tag=trace_viewer@&host=<host>
 *   &view_start=<ms>&view_end=<ms>
 * view_start / view_end set its first viewport, in ms on the trace's time axis (read by
 * XProf 2.24's trace_viewer_index.js); the Profile tab's own page takes no viewport, so a
 * link to it cannot land on a step.
 */
export function traceViewerAtUrl(traceViewer, fromMs, toMs) {
  const root = new URL("../", window.location.href);
  const data = new URLSearchParams({ run: traceViewer.run, tag: "trace_viewer@", host: traceViewer.host || "" });
  const params = new URLSearchParams({
    is_streaming: "true", is_oss: "true", trace_data_url: `${root.pathname}data/plugin/profile/data?${data}`,
    view_start: String(fromMs), view_end: String(toMs),
  });
  return `${root.origin}${root.pathname}data/plugin/profile/trace_viewer_index.html?${params}`;
}
