// PyTorch's profiler traces (Kineto JSON) open in the Perfetto UI: XProf's Trace Viewer reads
// only XSpace (.xplane.pb), the Perfetto UI reads Chrome-trace JSON, Kineto's included.
//
// The protocol is Perfetto's "Deep linking to the Perfetto UI"
// (https://perfetto.dev/docs/visualization/deep-linking-to-perfetto-ui): open the UI with
// window.open, post the string "PING" to it until it answers "PONG" (its message channel is
// not buffered: a message sent before its listener is registered is lost), then post
// {perfetto: {buffer: ArrayBuffer, title, fileName}}. The UI acts only on messages from the
// window that opened it (window.opener; https://perfetto.dev/docs/visualization/embedding-api-reference).
// The trace's bytes come from the plugin's /kineto_trace route (docs/pytorch.md).

/** Where the Perfetto UI is served. */
export const PERFETTO_ORIGIN = "https://ui.perfetto.dev";
/** How often "PING" is posted until the UI answers (ms), and how long to wait for it (ms). */
const PING_EVERY_MS = 50;
const ANSWER_WITHIN_MS = 60000;

/** The plugin's route serving one host's Kineto trace of a session (relative to the frame's base). */
export function kinetoTraceUrl(run, session, host) {
  const q = new URLSearchParams({ run, session });
  if (host) q.set("host", host);
  return `kineto_trace?${q.toString()}`;
}

/**
 * Opens the Perfetto UI in a new tab and hands it the trace at `url`. Call it from a click
 * handler: browsers allow window.open there only. Resolves once the trace is posted; rejects
 * with an Error saying why not (pop-up blocked, the trace could not be read, no answer).
 */
export function openInPerfetto(url, title, fileName) {
  const win = window.open(`${PERFETTO_ORIGIN}/#!/viewer`);
  if (!win) return Promise.reject(new Error("The browser blocked the new tab: allow pop-ups for TensorBoard."));
  const bytes = fetch(url, { cache: "no-store" }).then(async (r) => {
    if (!r.ok) {
      let why = `HTTP ${r.status}`;
      try { why = (await r.json()).error || why; } catch (_) { /* not JSON */ }
      throw new Error(`The trace could not be read: ${why}`);
    }
    return r.arrayBuffer();
  });
  bytes.catch(() => {}); // reported through the promise below
  return new Promise((resolve, reject) => {
    const ping = setInterval(() => {
      try { win.postMessage("PING", PERFETTO_ORIGIN); } catch (_) { /* not loaded yet */ }
    }, PING_EVERY_MS);
    const giveUp = setTimeout(() => {
      done();
      reject(new Error(`The Perfetto UI (${PERFETTO_ORIGIN}) did not answer: is it reachable from this browser?`));
    }, ANSWER_WITHIN_MS);
    function done() {
      clearInterval(ping);
      clearTimeout(giveUp);
      window.removeEventListener("message", onMessage);
    }
    async function onMessage(event) {
      if (event.source !== win || event.data !== "PONG") return;
      done();
      try {
        const buffer = await bytes;
        win.postMessage({ perfetto: { buffer, title, fileName } }, PERFETTO_ORIGIN, [buffer]);
        resolve();
      } catch (err) {
        reject(err);
      }
    }
    window.addEventListener("message", onMessage);
  });
}
