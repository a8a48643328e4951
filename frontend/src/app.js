// The tab: a session list (newest first) beside the selected session's report, or the
// comparison of two sessions. Polls the list (new sessions appear without a restart)
// and a report while the server analyses it.
import { ApiError, fetchComparison, fetchFleet, fetchReport, fetchTrend, listSessions } from "./api.js";
import { destroyAll } from "./charts.js";
import { compareView } from "./compare.js";
import { breakable, clear, h } from "./dom.js";
import { explainLogdirError, explainRequestError } from "./errors.js";
import { fleetView } from "./fleet.js";
import { fmtTime, frameworkLabel, kindLabel, runLabel, setVocabulary } from "./format.js";
import { jobView } from "./job.js";
import { sessionView } from "./session.js";
import { trendView } from "./trend.js";

const LIST_POLL_MS = 10000;
/** While sessions still wait for their verdict, the list is asked for this often. */
const LIST_BUSY_POLL_MS = 1000;
const keyOf = (s) => JSON.stringify([s.run, s.session]);
/** A <select>'s chosen option's whole label: its title, as a narrow select cuts the label short. */
const optionLabel = (sel) => (sel.selectedIndex >= 0 ? sel.options[sel.selectedIndex].text : "");
// The tab's state in the page's URL (TensorBoard's own page, so that a reload keeps it and a
// link can be shared): ?tfbneck_view=<session|compare|trend|fleet>&tfbneck_session=<JSON
// [run, session]>&tfbneck_compare=<JSON [before key, after key]>.
const URL_PARAM = "tfbneck_compare";
const VIEW_PARAM = "tfbneck_view";
const SESSION_PARAM = "tfbneck_session";
const MODES = ["session", "compare", "trend", "fleet"];

function topWindow() {
  try {
    return window.parent && window.parent.location.href ? window.parent : window;
  } catch (_) {
    return window;  // another origin: only the frame's own URL
  }
}

function readUrlState() {
  const out = { mode: null, selected: null, compare: null };
  try {
    const params = new URL(topWindow().location.href).searchParams;
    const raw = params.get(URL_PARAM);
    const pair = raw ? JSON.parse(raw) : null;
    if (Array.isArray(pair) && pair.length === 2) out.compare = { before: pair[0], after: pair[1] };
    const view = params.get(VIEW_PARAM);
    if (MODES.includes(view)) out.mode = view;
    else if (out.compare) out.mode = "compare";
    const sel = params.get(SESSION_PARAM);
    const key = sel ? JSON.parse(sel) : null;
    if (Array.isArray(key) && key.length === 2) out.selected = JSON.stringify(key);
  } catch (_) { /* a hand-edited URL: start from the defaults */ }
  return out;
}

/**
 * Write the view's state into TensorBoard's URL. `push`: a choice the user made (a session
 * clicked, a view picked) becomes a history entry of its own, so the browser's Back returns
 * to the view before it; the tab's own updates (the first session chosen for the user, the
 * compare pickers' defaults) replace the current entry.
 */
function writeUrlState(app, push = false) {
  try {
    const w = topWindow();
    const url = new URL(w.location.href);
    url.searchParams.set(VIEW_PARAM, app.mode);
    if (app.selected) url.searchParams.set(SESSION_PARAM, app.selected);
    else url.searchParams.delete(SESSION_PARAM);
    const c = app.compare;
    if (app.mode === "compare" && c.before && c.after) url.searchParams.set(URL_PARAM, JSON.stringify([c.before, c.after]));
    else url.searchParams.delete(URL_PARAM);
    if (url.href === w.location.href) return;
    if (push) w.history.pushState(w.history.state, "", url.href);
    else w.history.replaceState(w.history.state, "", url.href);
  } catch (_) { /* the URL cannot be written here: the view still works */ }
}

export class App {
  constructor(root) {
    this.root = root;
    this.sessions = [];
    this.listInfo = null;
    this.mode = "session";
    this.selected = null; // key
    this.compare = { before: null, after: null };
    this.generation = 0;
    this.filter = "";
  }

  start() {
    const state = readUrlState();
    if (state.mode) this.mode = state.mode;
    if (state.compare) this.compare = state.compare;
    if (state.selected) this.selected = state.selected;
    this.build();
    this.refreshList();
    setInterval(() => { if (!document.hidden) this.refreshList(); }, LIST_POLL_MS);
    this.followHistory();
    // TensorBoard's reload button (and auto-reload) call reload() on the plugin's iframe.
    try {
      if (window.frameElement) window.frameElement.reload = () => this.refreshList(true);
    } catch (_) { /* not same-origin: nothing to hook */ }
  }

  build() {
    this.listEl = h("ul", { class: "tfb-list", role: "listbox", "aria-label": "Profiling sessions" });
    this.countEl = h("span", { class: "tfb-count" });
    this.progressEl = h("div", { class: "tfb-progress", role: "status" });
    this.sideFoot = h("div", { class: "tfb-side-foot" });
    const filter = h("input", {
      class: "tfb-filter", type: "search", placeholder: "Filter runs and sessions", "aria-label": "Filter sessions",
      oninput: (e) => { this.filter = e.target.value.toLowerCase(); this.renderList(); },
    });
    this.tabs = {
      session: h("button", { class: "tfb-tab", type: "button", dataset: { mode: "session" }, onclick: () => this.setMode("session") }, "Session"),
      compare: h("button", { class: "tfb-tab", type: "button", dataset: { mode: "compare" }, onclick: () => this.setMode("compare") }, "Compare two sessions"),
      trend: h("button", { class: "tfb-tab", type: "button", dataset: { mode: "trend" }, onclick: () => this.setMode("trend") }, "Step-time trend"),
      fleet: h("button", { class: "tfb-tab", type: "button", dataset: { mode: "fleet" }, onclick: () => this.setMode("fleet") }, "Fleet"),
    };
    this.fleetGroupBy = "";
    this.toolbar = h("div", { class: "tfb-toolbar" });
    this.view = h("div", { class: "tfb-view", "aria-live": "polite" });
    this.root.append(h("div", { class: "tfb-app" },
      h("aside", { class: "tfb-side" },
        h("div", { class: "tfb-side-head" }, h("span", { text: "Sessions" }), this.countEl),
        this.progressEl, filter, this.listEl, this.sideFoot),
      h("main", { class: "tfb-main" },
        h("nav", { class: "tfb-tabs" }, this.tabs.session, this.tabs.compare, this.tabs.trend, this.tabs.fleet, this.toolbar),
        this.view)));
    this.updateTabs();
  }

  async refreshList(force = false) {
    let info;
    try {
      info = await listSessions();
    } catch (err) {
      this.showListError(err);
      return;
    }
    const before = this.sessions.map(keyOf).join("|");
    this.listInfo = info;
    setVocabulary(info.vocabulary);
    this.sessions = info.sessions || [];
    const changed = before !== this.sessions.map(keyOf).join("|");
    this.renderList();
    this.showProgress(info);
    if (!info.scanned) {
      setTimeout(() => this.refreshList(), 1000);
      if (!this.sessions.length) this.message("Searching the logdir for profiling sessions…", "busy");
      return;
    }
    if (!this.sessions.length) {
      this.showEmpty(info);
      return;
    }
    const gone = this.selected && !this.sessions.some((s) => keyOf(s) === this.selected);
    // A worker session just grouped into its job: keep the job selected in its place.
    const job = gone && this.sessions.find((s) => (s.members || []).some((m) => keyOf(m) === this.selected));
    if (job) {
      this.selected = keyOf(job);
      this.renderList();
      if (this.mode === "session") this.show();
    } else if (!this.selected || gone) {
      this.selected = keyOf(this.sessions[0]);
      this.renderList();
      this.show();
    } else if (force || !this.shown || (changed && (this.mode === "compare" || this.mode === "trend" || this.mode === "fleet"))) {
      this.show();
    }
  }

  /** "Verdicts: 8 of 14", while the server analyses the rest (the most recent first). */
  showProgress(info) {
    const v = info.verdicts || { ready: 0, total: 0 };
    const busy = info.scanned && v.ready < v.total;
    clear(this.progressEl);
    this.progressEl.dataset.ready = String(v.ready);
    this.progressEl.dataset.total = String(v.total);
    this.progressEl.classList.toggle("busy", busy);
    if (busy) {
      this.progressEl.append(h("span", { class: "tfb-spinner" }),
        h("span", { text: `Verdicts: ${v.ready} of ${v.total}, the most recent first…` }));
      clearTimeout(this.progressTimer);
      this.progressTimer = setTimeout(() => { if (!document.hidden) this.refreshList(); }, LIST_BUSY_POLL_MS);
    }
  }

  showListError(err) {
    clear(this.listEl);
    this.listEl.append(h("li", { class: "tfb-list-error", text: err.message }));
  }

  showEmpty(info) {
    destroyAll();
    const problem = explainLogdirError(info.error_kind || (info.error ? "unknown" : null));
    clear(this.view).append(h("section", {
      class: "tfb-card tfb-empty", dataset: { errorKind: info.error_kind || "" },
    },
      h("h2", { text: "No profiling sessions yet" }),
      h("p", {}, "Nothing under ", h("code", { text: info.logdir || "(no logdir)" }), " has a ",
        h("code", { text: "plugins/profile/<session>/<host>.xplane.pb" }), " trace."),
      problem ? h("p", { class: "tfb-error-headline", text: problem.headline }) : null,
      problem && problem.hint ? h("p", { class: "tfb-error-hint", text: problem.hint }) : null,
      info.error ? h("p", {}, h("code", { class: "tfb-error-message", text: info.error })) : null,
      h("p", { text: "Profile a few steps of training, then this tab shows why they are slow:" }),
      h("pre", {}, h("code", { text: "from tfbneck_plugin import BottleneckProfiler\nmodel.fit(ds, callbacks=[BottleneckProfiler(\"logs\", profile_steps=(10, 20))])" }))));
  }

  renderList() {
    const rows = this.sessions.filter((s) => !this.filter
      || `${s.run} ${s.session} ${(s.hosts || []).join(" ")} ${frameworkLabel(s)}`.toLowerCase().includes(this.filter));
    this.countEl.textContent = String(this.sessions.length);
    clear(this.listEl);
    for (const s of rows) {
      const key = keyOf(s);
      const chip = s.state === "ready"
        ? (s.status === "ok"
          ? h("span", { class: `tfb-chip kind-${s.bottleneck || "unknown"}`, text: kindLabel(s.bottleneck) })
          : h("span", { class: "tfb-chip kind-error", text: "error" }))
        : s.state === "analysing" ? h("span", { class: "tfb-chip tfb-chip-busy", text: "analysing" }) : null;
      const selected = this.mode === "session" && key === this.selected;
      const li = h("li", {
        class: "tfb-item" + (selected ? " selected" : ""), role: "option", tabindex: "0",
        "aria-selected": selected ? "true" : "false", dataset: { run: s.run, session: s.session },
        onclick: () => this.select(key),
        onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); this.select(key); } },
      },
      // names wrap after their separators, never mid-word
      h("div", { class: "tfb-item-top" }, h("span", { class: "tfb-item-run" }, breakable(runLabel(s.run), /([_/.-])/)), chip),
      h("div", { class: "tfb-item-meta" },
        h("span", { class: "tfb-item-session" }, breakable(s.session, /(_)/)),
        (s.hosts || []).length ? h("span", { class: "tfb-item-hosts", text: s.hosts.join(", ") }) : null,
        frameworkLabel(s) ? h("span", { class: "tfb-item-framework", text: frameworkLabel(s) }) : null),
      s.time ? h("div", { class: "tfb-item-time", text: fmtTime(s.time) }) : null);
      this.listEl.append(li);
    }
    const info = this.listInfo;
    clear(this.sideFoot);
    if (info) {
      const logdir = info.logdir || "";
      const shown = logdir.length > 44 ? `…${logdir.slice(-43)}` : logdir;
      this.sideFoot.append(h("div", { class: "tfb-logdir", title: logdir, text: shown }));
      for (const p of (info.problems || []).slice(0, 3)) this.sideFoot.append(h("div", { class: "tfb-problem", text: p }));
    }
  }

  select(key) {
    this.selected = key;
    if (this.mode !== "session") this.mode = "session";
    writeUrlState(this, true);
    this.updateTabs();
    this.renderList();
    this.show();
  }

  setMode(mode) {
    this.mode = mode;
    writeUrlState(this, true);
    this.updateTabs();
    this.renderList();
    this.show();
  }

  /** Back and Forward in the browser: show the view the URL now names (TensorBoard's page
   * keeps this frame; the listener goes with the frame when TensorBoard replaces it). */
  followHistory() {
    const w = topWindow();
    const onPop = () => {
      try {
        if (w !== window && !(window.frameElement && window.frameElement.isConnected)) {
          w.removeEventListener("popstate", onPop);
          return;
        }
        const state = readUrlState();
        const mode = state.mode || "session";
        if (state.compare) this.compare = state.compare;
        if (mode === this.mode && (!state.selected || state.selected === this.selected)) return;
        this.mode = mode;
        if (state.selected) this.selected = state.selected;
        this.updateTabs();
        this.renderList();
        this.show();
      } catch (_) { /* a page being torn down: nothing to show */ }
    };
    w.addEventListener("popstate", onPop);
  }

  updateTabs() {
    for (const [m, el] of Object.entries(this.tabs)) {
      el.classList.toggle("active", m === this.mode);
      el.setAttribute("aria-pressed", m === this.mode ? "true" : "false");
    }
  }

  /** Replace the view with a message; returns the element holding its text. */
  message(text, kind = "") {
    destroyAll();
    const span = h("span", { class: "tfb-message-text", text });
    clear(this.view).append(h("div", { class: `tfb-message ${kind}` }, kind === "busy" ? h("span", { class: "tfb-spinner" }) : null, span));
    return span;
  }

  find(key) {
    return this.sessions.find((s) => keyOf(s) === key);
  }

  show() {
    this.shown = true;
    clear(this.toolbar);
    writeUrlState(this);
    if (this.mode === "compare") this.showCompare();
    else if (this.mode === "trend") this.showTrend();
    else if (this.mode === "fleet") this.showFleet();
    else this.showSession();
  }

  async load(s, gen, what) {
    const started = Date.now();
    let text = null;
    const job = s.kind === "job" && (s.members || [])[0];  // a job's report is asked for by one of its workers
    return fetchReport(job ? job.run : s.run, job ? job.session : s.session, {
      job: Boolean(job),
      isCancelled: () => gen !== this.generation,
      onWait: () => {
        const seconds = Math.round((Date.now() - started) / 1000);
        const msg = `Analysing ${what}… large traces take a few seconds${seconds >= 2 ? ` (${seconds} s so far)` : ""}.`;
        if (text === null || !text.isConnected) text = this.message(msg, "busy");
        else text.textContent = msg;
      },
    });
  }

  async showSession() {
    const gen = ++this.generation;
    const s = this.find(this.selected);
    if (!s) return;
    this.message(`Loading ${runLabel(s.run)} / ${s.session}…`, "busy");
    try {
      const report = await this.load(s, gen, `${runLabel(s.run)} / ${s.session}`);
      if (!report || gen !== this.generation) return;
      destroyAll();
      clear(this.view).append(report.kind === "job" ? jobView(report) : sessionView(report));
      this.noteReport(s, report);
    } catch (err) {
      if (gen !== this.generation) return;
      this.showRequestError(err, s);
    }
  }

  async showTrend() {
    const gen = ++this.generation;
    if (!this.view.querySelector(".tfb-trend-view, .tfb-trend-none")) this.message("Loading the step-time trend…", "busy");
    try {
      const body = await fetchTrend();
      if (gen !== this.generation) return;
      destroyAll();
      clear(this.view).append(trendView(body, (run, session) => this.select(JSON.stringify([run, session]))));
    } catch (err) {
      if (gen !== this.generation) return;
      this.showRequestError(err, { run: ".", session: "step-time trend" });
    }
  }

  async showFleet() {
    const gen = ++this.generation;
    const input = h("input", {
      class: "tfb-filter tfb-fleet-groupby", type: "search", value: this.fleetGroupBy, "aria-label": "Group runs by pattern",
      placeholder: "Group by run-name pattern, e.g. exp-(\\w+)-",
      onchange: (e) => { this.fleetGroupBy = e.target.value; this.show(); },
    });
    this.toolbar.append(input);
    if (!this.view.querySelector(".tfb-fleet-view")) this.message("Adding up every session of the logdir…", "busy");
    try {
      const body = await fetchFleet({ group_by: this.fleetGroupBy });
      if (gen !== this.generation) return;
      destroyAll();
      clear(this.view).append(fleetView(body, (run, session) => this.select(JSON.stringify([run, session]))));
      if (body.pending) setTimeout(() => { if (gen === this.generation && this.mode === "fleet") this.show(); }, 2000);
    } catch (err) {
      if (gen !== this.generation) return;
      this.showRequestError(err, { run: ".", session: "fleet" });
    }
  }

  noteReport(s, report) {
    // Keep the list's chip in step with what was just shown.
    Object.assign(s, { state: "ready", status: report.status, bottleneck: report.bottleneck, cause: report.cause,
      framework: report.framework, backend: report.backend });
    this.renderList();
  }

  showRequestError(err, s) {
    destroyAll();
    const kind = err instanceof ApiError ? err.kind : "internal";
    const { headline, hint } = explainRequestError(kind);
    clear(this.view).append(h("section", {
      class: "tfb-card tfb-verdict tfb-error", dataset: { status: "error", errorKind: kind },
    },
    h("div", { class: "tfb-verdict-top" }, h("span", { class: "tfb-kind kind-error", text: "Could not load" }),
      h("span", { class: "tfb-cause-code", text: `${runLabel(s.run)} / ${s.session}` })),
    h("p", { class: "tfb-error-headline", text: headline }),
    hint ? h("p", { class: "tfb-error-hint", text: hint }) : null,
    h("details", { class: "tfb-error-details" }, h("summary", { text: "Exact message" }),
      h("code", { class: "tfb-error-message", text: err.message || String(err) }))));
  }

  /** The pair a user would pick: the selected session after an earlier session of the same run
   * (the list is newest first), else nothing: two unrelated runs compared say nothing true. */
  defaultPair() {
    const sel = this.find(this.selected);
    if (!sel) return { before: null, after: null };
    const i = this.sessions.indexOf(sel);
    const earlier = this.sessions.slice(i + 1).find((s) => s.run === sel.run)
      || this.sessions.slice(0, i).reverse().find((s) => s.run === sel.run);
    if (!earlier) return { before: null, after: null };
    const later = this.sessions.indexOf(earlier) > i;
    return later ? { before: keyOf(earlier), after: keyOf(sel) } : { before: keyOf(sel), after: keyOf(earlier) };
  }

  compareSelect(which) {
    const sel = h("select", {
      class: "tfb-select", dataset: { side: which }, "aria-label": which === "before" ? "Before" : "After",
      onchange: (e) => {
        e.target.title = optionLabel(e.target);
        this.compare[which] = e.target.value || null;
        this.compareChosen = true;
        this.show();
      },
    });
    if (!this.compare[which]) {
      const none = document.createElement("option");
      none.value = "";
      none.text = which === "before" ? "choose the session before…" : "choose the session after…";
      none.selected = true;
      sel.append(none);
    }
    for (const s of this.sessions) {
      const opt = document.createElement("option");
      opt.value = keyOf(s);
      opt.text = `${runLabel(s.run)} / ${s.session}${(s.hosts || []).length ? ` (${s.hosts.join(", ")})` : ""}`;
      opt.selected = keyOf(s) === this.compare[which];
      sel.append(opt);
    }
    sel.title = optionLabel(sel);
    return h("label", { class: "tfb-picker" }, h("span", { text: which === "before" ? "Before" : "After" }), sel);
  }

  async showCompare() {
    const gen = ++this.generation;
    if (this.sessions.length < 2) {
      this.message("Comparing needs two sessions; this logdir has fewer.");
      return;
    }
    const keys = this.sessions.map(keyOf);
    for (const side of ["before", "after"]) if (!keys.includes(this.compare[side])) this.compare[side] = null;
    if (!this.compareChosen && !(this.compare.before && this.compare.after)) this.compare = this.defaultPair();
    this.toolbar.append(h("div", { class: "tfb-pickers" },
      this.compareSelect("before"), h("span", { class: "tfb-arrow", text: "→" }), this.compareSelect("after")));
    writeUrlState(this);
    if (!this.compare.before || !this.compare.after || this.compare.before === this.compare.after) {
      destroyAll();
      clear(this.view).append(h("section", { class: "tfb-card tfb-compare-prompt" },
        h("h3", { text: "Compare two sessions" }),
        h("p", { text: "Pick the session before a change and the one after it, above: the same model and data, "
          + "one change between them. The comparison then says whether the time per batch changed, in ms per batch." }),
        this.compareChosen ? null
          : h("p", { class: "tfb-muted", text: "The selected session's run has no other session to compare it with, so nothing is picked." })));
      return;
    }
    const a = this.find(this.compare.before);
    const b = this.find(this.compare.after);
    this.message("Loading both sessions…", "busy");
    try {
      const [ra, rb] = await Promise.all([
        this.load(a, gen, "the two sessions"), this.load(b, gen, "the two sessions")]);
      if (!ra || !rb || gen !== this.generation) return;
      const cmp = ra.status === "ok" && rb.status === "ok"
        ? await fetchComparison(a, b, { isCancelled: () => gen !== this.generation }) : null;
      if (gen !== this.generation) return;
      destroyAll();
      clear(this.view).append(compareView(ra, rb, cmp));
    } catch (err) {
      if (gen !== this.generation) return;
      this.showRequestError(err, b);
    }
  }
}
