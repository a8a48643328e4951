"""The TensorBoard tab "Bottleneck": the analyzer's report, served to a frontend.

Registered through the ``tensorboard_plugins`` entry point (``setup.py``), so a plain
``tensorboard --logdir LOGDIR`` shows the tab when LOGDIR holds profiling sessions.

This module holds only the routes, in the shape of TensorBoard's own plugins
(``tensorboard/plugins/hparams``): each WSGI route is a thin wrapper over a pure
``*_impl`` method that returns ``(status, body)`` and is tested without a server. The work
is elsewhere: :mod:`.index` finds the sessions (a background scan of the logdir),
:mod:`.reports` analyses them on background threads and caches the reports,
:mod:`.query` reads query parameters strictly. The routes are documented in
``docs/http_api.md``. Nothing is ever written into the logdir. This module never imports
TensorFlow.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from ..render import report as report_mod
from ..batch import analyze_one, with_run_facts
from ..logdir import Session, find_sessions, is_remote, open_any
from ..trace.kineto import is_kineto_file
from ..trace.tracefile import read_bytes
from ..trace.xspace import TraceReadError
from ..schema import SessionDict, vocabulary
from ..version import __version__
from .index import RESCAN_INTERVAL_S, SCAN_WAIT_S, SessionIndex, job_rows, session_row
from .metadata import PLUGIN_NAME, TAB_NAME
from .query import RouteError, check_run_name, check_session_name, parse_query, required
from .reports import ANALYSIS_WORKERS, SUMMARY_KEYS, JobGrouper, ReportService, job_members, regroup, sibling_sessions
from .fleet import FleetService
from .trend import TrendService

logger = logging.getLogger(__name__)

__all__ = ["BottleneckPlugin", "BottleneckPluginLoader", "RouteError", "parse_query", "REPORT_WAIT_S",
           "RETRY_AFTER_MS", "RESCAN_INTERVAL_S", "SCAN_WAIT_S"]

#: The longest ``/report`` waits for its own session's analysis before answering 202 (seconds).
REPORT_WAIT_S = 0.3
#: How long the frontend should wait before polling a report that is being analysed (ms).
RETRY_AFTER_MS = 400
#: Response header saying where a report came from: ``hit``, ``miss`` or ``analysing``.
CACHE_HEADER = "X-Tfbneck-Cache"
_STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


def plugin_logdir(context: base_plugin.TBContext) -> Optional[str]:
    """The logdir the tab searches: ``--bottleneck_logdir`` if given (a logdir TensorBoard
    itself cannot read, such as ``s3://`` without tensorflow-io, still gets a tab), else
    TensorBoard's ``--logdir``; local paths made absolute. None when there is neither."""
    flags = getattr(context, "flags", None)
    logdir = getattr(flags, "bottleneck_logdir", None) or getattr(context, "logdir", None) or None
    if logdir and not is_remote(logdir):
        logdir = os.path.abspath(os.path.expanduser(logdir))
    return logdir


class BottleneckPlugin(base_plugin.TBPlugin):
    """The "Bottleneck" tab.

    Args:
      context: TensorBoard's context; ``logdir`` (or ``flags.bottleneck_logdir``) is searched.
      analyze: ``Session -> report`` (default ``batch.analyze_one``: through the persistent
        report cache the CLI shares); tests inject their own.
      find: ``logdir -> Discovery`` (default ``logdir.find_sessions``).
      workers: analysis threads.
      rescan_interval_s: age (seconds) after which the session list rescans the logdir.
      report_wait_s: how long ``/report`` waits for an analysis before answering 202 (seconds).
    """

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext,
                 analyze: Callable[[Session], SessionDict] = analyze_one, find: Callable = find_sessions,
                 workers: int = ANALYSIS_WORKERS,
                 rescan_interval_s: float = RESCAN_INTERVAL_S, report_wait_s: float = REPORT_WAIT_S):
        self._logdir = plugin_logdir(context)
        self._index = SessionIndex(self._logdir, find=find, max_age_s=rescan_interval_s)
        self._reports = ReportService(analyze, workers=workers)
        self._jobs = JobGrouper()
        self._trends = TrendService(self._index.inside_logdir)
        self._fleet = FleetService(lambda s: self._reports.latest(s.key),
                                   lambda s: self._reports.request(s, wait_s=0))
        self._report_wait_s = report_wait_s
        self._active = False
        self._index.current(wait_s=0)  # start the first scan now, in the background

    # -- TBPlugin -------------------------------------------------------------------------

    def get_plugin_apps(self):
        return {
            "/index.js": self._serve_index_js,
            "/sessions": self._serve_sessions,
            "/report": self._serve_report,
            "/job": self._serve_job,
            "/trend": self._serve_trend,
            "/compare": self._serve_compare,
            "/fleet": self._serve_fleet,
            "/kineto_trace": kineto_trace_app(self._index),
        }

    def is_active(self) -> bool:
        """True once a scan found a session (then stays True). Waits at most
        :data:`SCAN_WAIT_S` seconds for a running scan; never analyses anything."""
        if not self._active:
            self._active = bool(self._index.current(wait_s=SCAN_WAIT_S).sessions)
        return self._active

    def data_plugin_names(self):
        return ()  # this plugin reads profiler traces, not summaries in event files

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME)

    # -- pure route implementations --------------------------------------------------------

    def index_js_impl(self) -> Tuple[int, bytes]:
        """``/index.js``: the frontend bundle, ``(200, bytes)``.

        Raises:
          RouteError: 404 when the bundle is missing from the package.
        """
        try:
            with open(os.path.join(_STATIC_DIR, "index.js"), "rb") as f:
                return 200, f.read()
        except OSError:
            raise RouteError(404, "the frontend bundle is missing from the package "
                                  "(build it: cd frontend && npm ci && npm run build)") from None

    def sessions_impl(self, params: Optional[Mapping[str, str]] = None) -> Tuple[int, Dict]:
        """``/sessions``: every session under the logdir, newest first.

        Args:
          params: the query parameters. ``analyze=all``: queue every session not analysed
            yet for a background analysis (the most recent first, after any report someone
            waits for), so that each row gets its verdict without being opened.

        Returns:
          ``(200, body)``; body keys ``version``, ``logdir``, ``scanned``, ``scanning``,
          ``error`` and ``error_kind`` (None unless the logdir cannot be searched),
          ``problems`` (at most 100 lines), ``sessions`` (rows of :func:`.index.session_row`;
          the analysed workers of a multi-worker job as one row, :func:`.index.job_rows`)
          ``cache`` (``ReportService.stats``) and ``verdicts`` (``{"ready", "total"}``: rows
          with a report, rows in all), ``vocabulary`` (the verdicts' and categories' names,
          :func:`tfbneck_plugin.schema.vocabulary`, for views that show no single report).
          Sessions that may be other workers of an analysed
          worker's job are queued for analysis (:func:`.reports.sibling_sessions`).

        Raises:
          RouteError: 400 for an ``analyze`` value other than ``all``.
        """
        params = params or {}
        if "analyze" in params and params["analyze"] != "all":
            raise RouteError(400, f"analyze={params['analyze']!r}: the only value is 'all'")
        snap = self._index.current(wait_s=SCAN_WAIT_S)
        if params.get("analyze") == "all":
            self._analyze_all(snap.sessions)
        analysed = self._reports.analysed()
        for s in sibling_sessions(snap.sessions, analysed, self._reports.pending):
            try:
                self._reports.request(self._index.fresh(s), wait_s=0)
            except RouteError:
                pass  # gone since the scan
        rows = [session_row(s, self._reports.latest(key), self._reports.pending(key))
                for key, s in snap.sessions.items()]
        rows.sort(key=lambda r: (-r["time"], r["run"], r["session"]))
        rows = job_rows(rows, self._jobs.jobs(analysed), SUMMARY_KEYS)
        ready = sum(1 for r in rows if r["state"] == "ready")
        return 200, {"version": __version__, "logdir": self._logdir, "scanned": snap.scanned,
                     "scanning": snap.scanning, "error": snap.error, "error_kind": snap.error_kind,
                     "problems": snap.problems[:100], "sessions": rows, "cache": self._reports.stats(),
                     "verdicts": {"ready": ready, "total": len(rows)}, "vocabulary": vocabulary()}

    def _analyze_all(self, sessions: Dict) -> None:
        """Queue a background analysis of every listed session that has no report and none
        running (the ReportService orders them, the most recent first)."""
        for key, s in sessions.items():
            if self._reports.latest(key) is None and not self._reports.pending(key):
                try:
                    self._reports.request(self._index.fresh(s), wait_s=0, background=True)
                except RouteError:
                    pass  # gone since the scan

    def report_impl(self, params: Mapping[str, str], wait_s: Optional[float] = None) -> Tuple[int, Dict, str]:
        """``/report?run=R&session=S``: one session's report.

        Args:
          params: the query parameters (``run``, ``session``; others are ignored).
          wait_s: how long to wait for the analysis (seconds; default ``report_wait_s``).

        Returns:
          ``(200, {"version", "sessions": [report]}, source)`` in the CLI's JSON contract, the
          report ``tfbneck analyze LOGDIR`` gives the session (:meth:`.ReportService.finished`), or
          ``(202, {"status": "analysing", "run", "session", "retry_after_ms"}, "analysing")``
          while it (or a newer session of its run that decides it) is being analysed.
          ``source``: ``hit`` (cache) or ``miss`` (analysed for this request).

        Raises:
          RouteError: 400 for a missing, malformed or escaping parameter; 404 for a run or
            session that is not in the logdir; 503 while the first scan has not finished.
        """
        run, name = required(params, "run"), required(params, "session")
        check_run_name(run)
        check_session_name(name)
        session = self._index.fresh(self._index.lookup(run, name))
        wait = self._report_wait_s if wait_s is None else wait_s
        shown, source = self._reports.finished([session], self._index, wait)
        if shown is None:
            return 202, {"status": "analysing", "run": run, "session": name,
                         "retry_after_ms": RETRY_AFTER_MS}, source
        return 200, report_mod.build_report(shown), source

    def job_impl(self, params: Mapping[str, str], wait_s: Optional[float] = None) -> Tuple[int, Dict, str]:
        """``/job?run=R&session=S``: the one report of the multi-worker job whose worker
        session is (R, S) (any of its workers; ``members`` of the job's ``/sessions`` row).

        Args:
          params: the query parameters (``run``, ``session``; others are ignored).
          wait_s: how long to wait for each worker's analysis (seconds; default ``report_wait_s``).

        Returns:
          ``(200, {"version", "sessions": [job report]}, source)`` (``kind: "job"``,
          ``analysis.grouping.job_report``), its workers re-read as they are on disk now and
          finished with their runs' facts (:meth:`.ReportService.finished`): the job report
          ``tfbneck analyze LOGDIR`` gives; or ``(202, {"status": "analysing", ...},
          "analysing")`` while a worker (or a newer session of its run that decides it) is analysed.
          ``source``: ``hit`` when every worker's report came from the cache, else ``miss``.

        Raises:
          RouteError: 400 for a bad parameter; 404 for a session that is not in the logdir or
            is not (or no longer) a worker of a job among the analysed sessions; 503 while
            the first scan has not finished.
        """
        run, name = required(params, "run"), required(params, "session")
        check_run_name(run)
        check_session_name(name)
        self._index.lookup(run, name)
        job = self._jobs.job_of((run, name), self._reports.analysed())
        if job is None:
            raise RouteError(404, f"session {run}/{name} is not a worker of a multi-worker job "
                                  "(or its job's other workers are not analysed yet)")
        wait = self._report_wait_s if wait_s is None else wait_s
        workers = [self._index.fresh(self._index.lookup(*key)) for key in job_members(job)]
        reports, source = self._reports.finished(workers, self._index, wait)
        if reports is None:
            return 202, {"status": "analysing", "run": run, "session": name,
                         "retry_after_ms": RETRY_AFTER_MS}, source
        fresh = regroup(reports)  # the workers with their runs' facts, grouped as `tfbneck analyze` groups them
        if fresh is None:
            raise RouteError(404, f"the workers of {job['session']} no longer form one job (their files changed); "
                                  "reload the session list")
        return 200, report_mod.build_report([fresh]), source

    def trend_impl(self, params: Mapping[str, str]) -> Tuple[int, Dict, str]:
        """``/trend`` or ``/trend?run=R``: the step-time trend of every run (or of run R).

        Returns:
          ``(200, {"version", "runs": [{"run", "jobs": [...]}], "problems": [...]}, "")``
          (docs/http_api.md); runs without a trend file are left out.

        Raises:
          RouteError: 400 for a malformed ``run``; 404 for a run that is not in the logdir;
            503 while the first scan has not finished.
        """
        run = required(params, "run") if "run" in params else None
        if run is not None:
            check_run_name(run)
        snap = self._index.current(wait_s=SCAN_WAIT_S)
        if not snap.scanned:
            raise RouteError(503, "the logdir is still being scanned for sessions; try again in a moment")
        if run is not None and not any(r == run for r, _ in snap.sessions):
            raise RouteError(404, f"unknown run {run!r}: no profiling session under it in the logdir")
        runs, problems = self._trends.runs(snap.sessions, run)
        return 200, {"version": __version__, "runs": runs, "problems": problems[:100]}, ""

    def compare_impl(self, params: Mapping[str, str], wait_s: Optional[float] = None) -> Tuple[int, Dict, str]:
        """``/compare?before_run=&before_session=&after_run=&after_session=``: the comparison
        of two sessions, the one ``tfbneck compare`` makes (:func:`tfbneck_plugin.comparison.compare.
        compare_reports`, with each run's trend and windows as evidence).

        Returns:
          ``(200, {"version", "comparison": {...}, "before": [run, session], "after": [...]}, source)``,
          ``(202, {"status": "analysing", ...}, "analysing")`` while a side is analysed, or
          ``(200, {"version", "comparison": None, "error": str}, ...)`` when the two sessions
          cannot be compared (a side failed or has no steps).

        Raises:
          RouteError: 400 for a bad parameter; 404 for a session not in the logdir; 503
            while the first scan has not finished.
        """
        from ..comparison import compare as comparison
        keys = []
        for side in ("before", "after"):
            run, name = required(params, f"{side}_run"), required(params, f"{side}_session")
            check_run_name(run)
            check_session_name(name)
            keys.append((run, name))
        sessions = [self._index.fresh(self._index.lookup(*k)) for k in keys]
        wait = self._report_wait_s if wait_s is None else wait_s
        reports = []
        for s in sessions:
            report, source = self._reports.request(s, wait_s=wait)
            if report is None:
                return 202, {"status": "analysing", "run": s.run, "session": s.name,
                             "retry_after_ms": RETRY_AFTER_MS}, source
            reports.append(report)
        snap = self._index.current(wait_s=0)

        def analyze(other: Session):
            return self._reports.request(self._index.fresh(other), wait_s=wait)[0]

        body: Dict[str, Any] = {"version": __version__, "before": list(keys[0]), "after": list(keys[1])}
        # the jobs' own clocks around the windows, as `tfbneck compare` reads them
        before, after = (dict(r) for r in with_run_facts(reports, sessions))
        try:
            timings = None
            if before.get("status") == "ok" and after.get("status") == "ok":
                def timing_of(s: Session, r: Dict[str, Any]):
                    run_sessions = sorted((x for k, x in snap.sessions.items() if k[0] == s.run), key=lambda x: x.name)
                    return comparison.side_timings(run_sessions, s, r, analyze=analyze)
                timings = (timing_of(sessions[0], before), timing_of(sessions[1], after))
            body["comparison"] = comparison.compare_reports(before, after, timings=timings)
        except comparison.CompareError as err:
            body.update(comparison=None, error=str(err))
        return 200, body, source

    def fleet_impl(self, params: Mapping[str, str]) -> Tuple[int, Dict, str]:
        """``/fleet[?group_by=REGEX][&group_level=N][&since=DATE]``: the fleet report of every
        session in the logdir (:func:`tfbneck_plugin.fleet_view.report.build`; runs reduced to
        :data:`.fleet.RUN_FIELDS`), plus ``pending``: sessions still being analysed.

        Raises:
          RouteError: 400 for a pattern, level or date that cannot be read; 503 while the
            first scan has not finished.
        """
        from ..fleet_view.report import parse_since
        level = params.get("group_level", "1")
        if not level.isdigit() or not 1 <= int(level) <= 64:
            raise RouteError(400, f"group_level={level!r}: pass a whole number from 1 to 64")
        try:
            since = parse_since(params.get("since"))
            snap = self._index.current(wait_s=SCAN_WAIT_S)
            if not snap.scanned:
                raise RouteError(503, "the logdir is still being scanned for sessions; try again in a moment")
            body = self._fleet.view(snap.sessions, params.get("group_by") or None, int(level), since, snap.scans)
        except ValueError as err:
            raise RouteError(400, str(err).replace("--group-by", "group_by").replace("--since", "since")) from None
        return 200, body, ""

    # -- WSGI wrappers ---------------------------------------------------------------------

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub types functions, not methods
    def _serve_index_js(self, request):
        try:
            _, body = self.index_js_impl()
        except RouteError as err:
            return _json(request, err.status, err.body())
        return http_util.Respond(request, body, "text/javascript")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub types functions, not methods
    def _serve_sessions(self, request):
        return self._dispatch(request, lambda params: self.sessions_impl(params) + ("",))

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub types functions, not methods
    def _serve_report(self, request):
        return self._dispatch(request, self.report_impl)

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub types functions, not methods
    def _serve_job(self, request):
        return self._dispatch(request, self.job_impl)

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub types functions, not methods
    def _serve_trend(self, request):
        return self._dispatch(request, self.trend_impl)

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub types functions, not methods
    def _serve_compare(self, request):
        return self._dispatch(request, self.compare_impl)

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub types functions, not methods
    def _serve_fleet(self, request):
        return self._dispatch(request, self.fleet_impl)

    def _dispatch(self, request, impl):
        if request.method not in ("GET", "HEAD"):
            return _json(request, 405, RouteError(405, f"method {request.method} not allowed; use GET").body())
        try:
            code, body, source = impl(parse_query(request.environ.get("QUERY_STRING", "")))
        except RouteError as err:
            return _json(request, err.status, err.body())
        except Exception as err:  # never a traceback to the browser
            logger.exception("tfbneck: %s failed", request.path)
            return _json(request, 500, RouteError(500, f"internal error ({type(err).__name__}); "
                                                       "see the TensorBoard log").body())
        return _json(request, code, body, [(CACHE_HEADER, source)] if source else [])


def _json(request, code: int, body: Dict, headers=None):
    return http_util.Respond(request, body, "application/json", code=code, headers=headers)


# -- /kineto_trace: a PyTorch session's trace for the Perfetto UI --------------------------------
# XProf's Trace Viewer reads only XSpace (.xplane.pb); the Perfetto UI reads Chrome-trace JSON,
# PyTorch's Kineto traces included. The tab fetches a host's trace here and posts its bytes to
# a Perfetto UI tab (frontend/src/perfetto.js; docs/pytorch.md). Outside the plugin's class,
# which holds the routes of reports.

def kineto_trace_impl(index: SessionIndex, params: Mapping[str, str]) -> Tuple[int, bytes]:
    """``/kineto_trace?run=R&session=S&host=H``: host H's PyTorch profiler trace (Kineto JSON,
    decompressed when stored as ``.pt.trace.json.gz``). ``host`` defaults to the session's
    first.

    Raises:
      RouteError: 400 for a missing, malformed or escaping parameter, or a host whose trace is
        not a Kineto trace (an XSpace session opens in XProf's Trace Viewer instead); 404 for
        an unknown run, session or host; 500 when the file cannot be read or is over the
        reader's size limit (``TFBNECK_MAX_TRACE_BYTES``; the message says which).
    """
    run, name = required(params, "run"), required(params, "session")
    check_run_name(run)
    check_session_name(name)
    session = index.fresh(index.lookup(run, name))
    host = params.get("host") or (session.hosts[0] if session.hosts else "")
    files = [f for f, h in zip(session.files, session.hosts) if h == host]
    if not files:
        raise RouteError(404, f"session {run}/{name} has no host {host!r}")
    if not is_kineto_file(files[0]):
        raise RouteError(400, f"{os.path.basename(files[0])} is not a PyTorch profiler (Kineto) trace; "
                              "open it in the Profile tab's Trace Viewer")
    try:
        return 200, read_bytes(files[0], open_any)
    except TraceReadError as err:
        raise RouteError(500, str(err)) from None


def kineto_trace_app(index: SessionIndex):
    """The route's WSGI application over the plugin's session index."""

    @wrappers.Request.application
    def serve(request):
        if request.method not in ("GET", "HEAD"):
            err = RouteError(405, f"method {request.method} not allowed; use GET")
            return http_util.Respond(request, err.body(), "application/json", code=405)
        try:
            _, body = kineto_trace_impl(index, parse_query(request.environ.get("QUERY_STRING", "")))
        except RouteError as err:
            return http_util.Respond(request, err.body(), "application/json", code=err.status)
        return http_util.Respond(request, body, "application/json")

    return serve


class BottleneckPluginLoader(base_plugin.TBLoader):
    """Loads :class:`BottleneckPlugin` (the ``tensorboard_plugins`` entry point) and adds
    the flag ``--bottleneck_logdir``."""

    def define_flags(self, parser):
        parser.add_argument(
            "--bottleneck_logdir", metavar="PATH", default="",
            help="Bottleneck tab: search this logdir (local path or fsspec URL such as s3://bucket/logs) "
                 "instead of --logdir. Useful for storage TensorBoard itself cannot read.")

    def fix_flags(self, flags):
        pass

    def load(self, context):
        return BottleneckPlugin(context)
