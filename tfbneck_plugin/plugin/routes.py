"""The TensorBoard tab "Bottleneck": the analyzer's report, served to a frontend.

Registered through the ``tensorboard_plugins`` entry point (``setup.py``), so a plain
``tensorboard --logdir LOGDIR`` shows the tab when LOGDIR holds profiling sessions.

How it works:

* **Finding sessions.** The plugin walks the logdir itself (``logdir.find_sessions``: any
  depth, both Keras layouts; a local folder, or a ``gs://``, ``s3://``... URL through
  fsspec) on a background thread, never through TensorBoard's event multiplexer (absent
  with the fast data loader, TensorBoard's default). A scan older than
  :data:`RESCAN_INTERVAL_S` is redone when the list is asked for, so new sessions appear
  without a restart. ``is_active`` reads the last scan; it waits at most
  :data:`SCAN_WAIT_S` for the first one.
* **Analysing.** ``analyze.analyze_session`` runs on a small pool of daemon threads. A
  request never waits for another session's analysis: ``/report`` waits at most
  :data:`REPORT_WAIT_S` for its own, then answers 202 ("analysing") and the frontend polls.
* **Caching.** Reports are cached in memory, keyed by the (path, size, modification time)
  of every file the analysis reads; a changed file is a new key. Nothing is written into
  the logdir, ever.
* **Requests.** Sessions are looked up by (run, session) in the scan's index; no path is
  built from a query parameter, so no request can reach a file outside the logdir. Bad
  parameters get 400 or 404 with ``{"error": "<one line>"}`` (503 while the first scan
  runs).

The routes are documented in ``docs/http_api.md``. Each is a thin WSGI wrapper over a
``*_impl`` method that returns ``(status, body)`` and is tested without a server.
This module never imports TensorFlow.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import queue
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import unquote_to_bytes

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from .. import __version__
from .. import report as report_mod
from ..analysis.session import analyze_session
from ..logdir import DiscoveryError, Session, find_sessions, is_remote
from .metadata import PLUGIN_NAME, TAB_NAME

logger = logging.getLogger(__name__)

#: A scan of the logdir older than this (seconds) is redone when the session list is asked for.
RESCAN_INTERVAL_S = 5.0
#: The longest a request (or ``is_active``) waits for a running logdir scan (seconds); after
#: that it answers with the previous scan and the frontend asks again.
SCAN_WAIT_S = 1.0
#: The longest ``/report`` waits for its own session's analysis before answering 202 (seconds).
REPORT_WAIT_S = 0.3
#: Threads that run analyses: two sessions are analysed at once, the newest request first.
ANALYSIS_WORKERS = 2
#: Reports kept in memory (least recently used dropped first).
CACHE_ENTRIES = 64
#: How long the frontend should wait before polling a report that is being analysed (ms).
RETRY_AFTER_MS = 400
#: Longest accepted query parameter value (characters).
MAX_PARAM_CHARS = 1024
#: Session folders named by the profiler's clock, e.g. ``2021_02_02_13_14_02``.
_SESSION_TIME_RE = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})")
_CACHE_HEADER = "X-Tfbneck-Cache"
_STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


class RouteError(Exception):
    """A request the plugin refuses: ``status`` (400, 404 or 503) and a one-line ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# ----------------------------------------------------------------------------------------
# Query parameters
# ----------------------------------------------------------------------------------------

def parse_query(query_string: str) -> Dict[str, str]:
    """Decode a WSGI ``QUERY_STRING`` strictly.

    Returns ``{name: value}``. Raises :class:`RouteError` (400) when a name or value is not
    valid UTF-8 after percent-decoding, holds control characters, is longer than
    :data:`MAX_PARAM_CHARS`, or a name is given twice. (werkzeug would silently replace
    invalid bytes with U+FFFD, which could then match nothing, or the wrong thing.)
    """
    # PEP 3333: QUERY_STRING is the raw bytes of the URL, decoded as latin-1.
    raw = query_string.encode("latin-1", errors="replace")
    out: Dict[str, str] = {}
    for part in raw.split(b"&"):
        if not part:
            continue
        name_b, _, value_b = part.partition(b"=")
        try:
            name = unquote_to_bytes(name_b.replace(b"+", b" ")).decode("utf-8")
            value = unquote_to_bytes(value_b.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            raise RouteError(400, "query parameters must be UTF-8 text (percent-encoded in the URL)") from None
        if any(ord(c) < 32 or ord(c) == 127 for c in name + value):
            raise RouteError(400, f"query parameter {name[:40]!r} holds control characters")
        if len(value) > MAX_PARAM_CHARS or len(name) > 64:
            raise RouteError(400, f"query parameter {name[:40]!r} is longer than {MAX_PARAM_CHARS} characters")
        if name in out:
            raise RouteError(400, f"query parameter {name!r} is given more than once")
        out[name] = value
    return out


def _required(params: Mapping[str, str], name: str) -> str:
    value = params.get(name)
    if value is None or value == "":
        raise RouteError(400, f"missing query parameter {name!r}")
    return value


def check_run_name(run: str) -> None:
    """Refuse run names that are not a relative path inside the logdir.

    Raises :class:`RouteError` (400) for absolute paths, drive letters, ``..`` segments
    and backslashes. Run names are TensorBoard's: the run folder relative to the logdir,
    ``/``-separated, ``.`` for the logdir itself.
    """
    if run.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", run):
        raise RouteError(400, "run must be a path relative to the logdir; absolute paths are refused")
    if "\\" in run:
        raise RouteError(400, "run must use '/' between folders; backslashes are refused")
    if ".." in run.split("/"):
        raise RouteError(400, "run must stay inside the logdir; '..' is refused")


def check_session_name(session: str) -> None:
    """Refuse a session parameter that is not one folder name (RouteError 400)."""
    if "/" in session or "\\" in session:
        raise RouteError(400, "session must be one folder name, without '/' or '\\'")
    if session in (".", ".."):
        raise RouteError(400, "session must be a session folder name; '.' and '..' are refused")


# ----------------------------------------------------------------------------------------
# The session index: a background scan of the logdir
# ----------------------------------------------------------------------------------------

@dataclasses.dataclass
class Snapshot:
    """One view of the index. ``scanned`` is False until the first scan finished."""
    sessions: Dict[Tuple[str, str], Session]
    problems: List[str]
    error: Optional[str]
    scanning: bool
    scanned: bool
    scans: int


class SessionIndex:
    """Sessions under ``logdir``, found by ``find`` (``logdir.find_sessions``) on a daemon
    thread. One scan runs at a time; :meth:`current` starts one when the last is older
    than ``max_age_s`` and waits for it at most ``wait_s`` seconds."""

    def __init__(self, logdir: Optional[str], find: Callable = find_sessions,
                 max_age_s: float = RESCAN_INTERVAL_S):
        self.logdir = logdir
        self._find = find
        self._max_age_s = max_age_s
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._scanning = False
        self._scanned_at: Optional[float] = None
        self._sessions: Dict[Tuple[str, str], Session] = {}
        self._problems: List[str] = []
        self._error: Optional[str] = None
        self._scans = 0

    def current(self, wait_s: float = SCAN_WAIT_S, max_age_s: Optional[float] = None) -> Snapshot:
        """The latest scan; starts a new one if the latest is older than ``max_age_s``
        (default: the index's) and waits up to ``wait_s`` seconds for a running one."""
        max_age = self._max_age_s if max_age_s is None else max_age_s
        with self._lock:
            stale = self._scanned_at is None or time.monotonic() - self._scanned_at > max_age
            if stale and not self._scanning:
                self._start_locked()
            done = self._done if self._scanning else None
        if done is not None and wait_s > 0:
            done.wait(wait_s)
        with self._lock:
            return Snapshot(dict(self._sessions), list(self._problems), self._error, self._scanning,
                            self._scanned_at is not None, self._scans)

    def _start_locked(self) -> None:
        self._scanning = True
        self._done = threading.Event()
        threading.Thread(target=self._scan, args=(self._done,), name="tfbneck-scan", daemon=True).start()

    def _scan(self, done: threading.Event) -> None:
        sessions: Dict[Tuple[str, str], Session] = {}
        problems: List[str] = []
        error = None
        try:
            if not self.logdir:
                error = "TensorBoard was started without --logdir"
            else:
                disc = self._find(self.logdir)
                sessions = {s.key: s for s in disc.sessions}
                problems = list(disc.problems)
        except DiscoveryError as err:
            error = str(err)
        except Exception as err:  # a scan must never take down the server
            logger.exception("tfbneck: scanning %s failed", self.logdir)
            error = f"scanning the logdir failed ({type(err).__name__}: {err})"
        with self._lock:
            if error is None or not self._sessions:
                self._sessions = sessions
            self._problems, self._error = problems, error
            self._scanned_at = time.monotonic()
            self._scanning = False
            self._scans += 1
        done.set()


# ----------------------------------------------------------------------------------------
# Reports: background analysis and the cache
# ----------------------------------------------------------------------------------------

Fingerprint = Tuple[object, ...]
#: Report fields the session list shows for sessions already analysed.
_SUMMARY_KEYS = ("status", "bottleneck", "cause", "confidence", "error", "device_kind")


def fingerprint(session: Session) -> Fingerprint:
    """The cache key of a session's report: its folder, whether it is an incomplete window,
    and (path, size in bytes, modification time) of every file the analysis reads, sorted.
    Local files: mtime in ns (``os.stat``); remote ones (fsspec URLs): the time or version
    the store reports. A file that cannot be stat'ed appears with size and mtime -1, so it
    is analysed again once it can be."""
    paths = list(session.files) + list(session.legacy_files)
    paths += [p for p in (session.sidecar, session.skipped) if p]
    out: list = [session.path, bool(getattr(session, "incomplete", False))]
    for p in sorted(paths):
        try:
            out.append((p,) + (_remote_stat(p) if is_remote(p) else _local_stat(p)))
        except (OSError, ValueError):
            out.append((p, -1, -1))
    return tuple(out)


def _local_stat(path: str) -> Tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _remote_stat(url: str) -> Tuple[int, str]:
    import fsspec  # only for remote logdirs
    fs, path = fsspec.core.url_to_fs(url)
    info = fs.info(path)
    # The modification time or version, under the name this store gives it.
    stamp = next((info[k] for k in ("mtime", "LastModified", "updated", "last_modified", "generation", "ETag",
                                    "etag", "created") if info.get(k) is not None), None)
    return int(info.get("size") or 0), str(stamp)


class ReportService:
    """Runs ``analyze`` (``analyze.analyze_session``) on ``workers`` daemon threads and
    caches the reports by :func:`fingerprint`. The newest request is analysed first; a
    session already queued or running is not queued again."""

    def __init__(self, analyze: Callable[[Session], Dict] = analyze_session,
                 workers: int = ANALYSIS_WORKERS, max_entries: int = CACHE_ENTRIES):
        self._analyze = analyze
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._cache: "OrderedDict[Fingerprint, Dict]" = OrderedDict()
        self._latest: Dict[Tuple[str, str], Dict] = {}
        self._inflight: Dict[Fingerprint, Future] = {}
        self._queue: "queue.LifoQueue" = queue.LifoQueue()
        self.hits = self.misses = self.analyses = 0
        for i in range(max(1, workers)):
            threading.Thread(target=self._work, name=f"tfbneck-analyze-{i}", daemon=True).start()

    def request(self, session: Session, wait_s: float = 0.0) -> Tuple[Optional[Dict], str]:
        """The report of ``session`` if cached (``(report, "hit")``); else start its analysis
        (once) and wait up to ``wait_s`` seconds: ``(report, "miss")`` if it finished, else
        ``(None, "analysing")``. Never raises for a bad session (the report says why)."""
        fp = fingerprint(session)
        with self._lock:
            cached = self._cache.get(fp)
            if cached is not None:
                self._cache.move_to_end(fp)
                self.hits += 1
                return cached, "hit"
            fut = self._inflight.get(fp)
            if fut is None:
                self.misses += 1
                fut = Future()
                fut.key = session.key
                self._inflight[fp] = fut
                self._queue.put((fp, session, fut))
        if wait_s > 0:
            try:
                return fut.result(timeout=wait_s), "miss"
            except FutureTimeout:  # still analysing
                pass
        if fut.done():
            return fut.result(), "miss"
        return None, "analysing"

    def latest(self, key: Tuple[str, str]) -> Optional[Dict]:
        """The verdict of the last report made for (run, session), fresh or not (the keys
        in _SUMMARY_KEYS); None if never analysed."""
        with self._lock:
            return self._latest.get(key)

    def pending(self, key: Tuple[str, str]) -> bool:
        with self._lock:
            return any(not f.done() and getattr(f, "key", None) == key for f in self._inflight.values())

    def stats(self) -> Dict[str, int]:
        with self._lock:
            return {"entries": len(self._cache), "hits": self.hits, "misses": self.misses,
                    "analyses": self.analyses, "in_progress": len(self._inflight)}

    def _work(self) -> None:
        while True:
            fp, session, fut = self._queue.get()
            try:
                report = self._analyze(session)
            except Exception as err:  # analyze_session does not raise; an injected analyzer might
                logger.exception("tfbneck: analysing %s failed", session.path)
                report = {"version": __version__, "run": session.run, "session": session.name,
                          "hosts": session.hosts, "path": session.path, "status": "error",
                          "bottleneck": "unknown", "step_source": "none",
                          "error": f"{session.path}: analysis failed ({type(err).__name__}: {err})"}
            with self._lock:
                self.analyses += 1
                self._cache[fp] = report
                self._cache.move_to_end(fp)
                while len(self._cache) > self._max_entries:
                    self._cache.popitem(last=False)
                self._latest[session.key] = {k: report[k] for k in _SUMMARY_KEYS if k in report}
                self._inflight.pop(fp, None)
            fut.set_result(report)


# ----------------------------------------------------------------------------------------
# The plugin
# ----------------------------------------------------------------------------------------

class BottleneckPlugin(base_plugin.TBPlugin):
    """The "Bottleneck" tab. ``context.logdir`` is the logdir to search.

    ``analyze`` and ``find`` replace the analyzer and the session finder (tests).
    """

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext, analyze: Callable[[Session], Dict] = analyze_session,
                 find: Callable = find_sessions, workers: int = ANALYSIS_WORKERS,
                 rescan_interval_s: float = RESCAN_INTERVAL_S):
        flags = getattr(context, "flags", None)
        # --bottleneck_logdir overrides --logdir for this tab: a logdir TensorBoard itself
        # cannot read (s3:// without tensorflow-io) still gets a Bottleneck tab.
        logdir = getattr(flags, "bottleneck_logdir", None) or getattr(context, "logdir", None) or None
        if logdir and not is_remote(logdir):
            logdir = os.path.abspath(os.path.expanduser(logdir))
        self._logdir = logdir
        self._real_logdir = os.path.realpath(logdir) if logdir and not is_remote(logdir) else None
        self._index = SessionIndex(logdir, find=find, max_age_s=rescan_interval_s)
        self._reports = ReportService(analyze, workers=workers)
        self._active = False
        self._index.current(wait_s=0)  # start the first scan now, in the background

    # -- TBPlugin -------------------------------------------------------------------------

    def get_plugin_apps(self):
        return {
            "/index.js": self._serve_index_js,
            "/sessions": self._serve_sessions,
            "/report": self._serve_report,
        }

    def is_active(self) -> bool:
        """True once a scan found a session (then stays True). Waits at most
        :data:`SCAN_WAIT_S` for a running scan; never analyses anything."""
        if not self._active:
            self._active = bool(self._index.current(wait_s=SCAN_WAIT_S).sessions)
        return self._active

    def data_plugin_names(self):
        return ()  # this plugin reads profiler traces, not summaries in event files

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME)

    # -- pure route implementations --------------------------------------------------------

    def sessions_impl(self) -> Tuple[int, Dict]:
        """``/sessions``: every session under the logdir, newest first (200).

        Each row: run, session, hosts, time (unix seconds: the session folder's timestamp,
        else the newest file's mtime), files, size_bytes, state ("ready", "analysing",
        "new"), and when analysed: status, bottleneck, cause, confidence, error.
        """
        snap = self._index.current(wait_s=SCAN_WAIT_S)
        rows = []
        for key, s in snap.sessions.items():
            last = self._reports.latest(key)
            row = {"run": s.run, "session": s.name, "hosts": s.hosts, "time": _session_time(s),
                   "files": len(s.files), "size_bytes": _size(s),
                   "state": "ready" if last is not None else ("analysing" if self._reports.pending(key) else "new")}
            if last is not None:
                row.update(last)
            rows.append(row)
        rows.sort(key=lambda r: (-r["time"], r["run"], r["session"]))
        return 200, {"version": __version__, "logdir": self._logdir, "scanned": snap.scanned,
                     "scanning": snap.scanning, "error": snap.error, "problems": snap.problems[:100],
                     "sessions": rows, "cache": self._reports.stats()}

    def report_impl(self, params: Mapping[str, str], wait_s: Optional[float] = None) -> Tuple[int, Dict, str]:
        """``/report?run=R&session=S``: the session's report in the CLI's JSON contract,
        ``{"version", "sessions": [report]}`` (200), or ``{"status": "analysing", ...}``
        (202) while it is being analysed. The third element says where the report came
        from: "hit" (cache), "miss" (analysed for this request) or "analysing". ``wait_s``:
        how long to wait for the analysis (seconds; default :data:`REPORT_WAIT_S`).

        Raises RouteError: 400 for a missing, malformed or escaping parameter; 404 for a
        run or session that is not in the logdir; 503 while the first scan of the logdir
        has not finished.
        """
        run = _required(params, "run")
        name = _required(params, "session")
        check_run_name(run)
        check_session_name(name)
        session = self._fresh(self._lookup(run, name))
        report, source = self._reports.request(session, wait_s=REPORT_WAIT_S if wait_s is None else wait_s)
        if report is None:
            return 202, {"status": "analysing", "run": run, "session": name,
                         "retry_after_ms": RETRY_AFTER_MS}, source
        return 200, report_mod.build_report([report]), source

    # -- helpers ---------------------------------------------------------------------------

    def _lookup(self, run: str, name: str) -> Session:
        snap = self._index.current(wait_s=0)
        s = snap.sessions.get((run, name))
        if s is None:
            # Maybe it appeared since the last scan: rescan (at most once a second).
            snap = self._index.current(wait_s=SCAN_WAIT_S, max_age_s=1.0)
            s = snap.sessions.get((run, name))
        if s is None:
            if not snap.scanned:
                raise RouteError(503, "the logdir is still being scanned for sessions; try again in a moment")
            if not any(r == run for r, _ in snap.sessions):
                raise RouteError(404, f"unknown run {run!r}: no profiling session under it in the logdir")
            raise RouteError(404, f"run {run!r} has no session {name!r}")
        return s

    def _fresh(self, s: Session) -> Session:
        """The session as it is on disk now (files may have been added or removed since the
        scan), holding only files that resolve inside the logdir. RouteError 404 if gone.
        (Remote sessions are taken from the last scan, at most RESCAN_INTERVAL_S old: listing
        a bucket on every request would be slow.)"""
        try:
            found = [s] if is_remote(s.path) else find_sessions(s.path).sessions
        except DiscoveryError:
            found = []
        if not found:
            raise RouteError(404, f"session {s.run}/{s.name} no longer exists in the logdir")
        fresh = dataclasses.replace(found[0], run=s.run, name=s.name)
        inside = self._inside_logdir
        fresh.files = [f for f in fresh.files if inside(f)]
        fresh.legacy_files = [f for f in fresh.legacy_files if inside(f)]
        fresh.sidecar = fresh.sidecar if fresh.sidecar and inside(fresh.sidecar) else None
        fresh.skipped = fresh.skipped if fresh.skipped and inside(fresh.skipped) else None
        if not (fresh.files or fresh.legacy_files or fresh.skipped or getattr(fresh, "incomplete", False)):
            raise RouteError(404, f"session {s.run}/{s.name} has no trace file inside the logdir "
                                  "(links to files elsewhere are not followed)")
        return fresh

    def _inside_logdir(self, path: str) -> bool:
        if self._logdir and is_remote(self._logdir):  # object stores have no links
            norm = _norm_url(self._logdir).rstrip("/") + "/"
            return is_remote(path) and _norm_url(path).startswith(norm) and "/../" not in _norm_url(path)
        if self._real_logdir is None:
            return False
        real = os.path.realpath(path)
        return real == self._real_logdir or real.startswith(self._real_logdir.rstrip(os.sep) + os.sep)

    # -- WSGI wrappers ---------------------------------------------------------------------

    @wrappers.Request.application
    def _serve_index_js(self, request):
        path = os.path.join(_STATIC_DIR, "index.js")
        try:
            with open(path, "rb") as f:
                body = f.read()
        except OSError:
            return _json(request, 404, {"error": "the frontend bundle is missing from the package "
                                                 "(build it: cd frontend && npm ci && npm run build)"})
        return http_util.Respond(request, body, "text/javascript")

    @wrappers.Request.application
    def _serve_sessions(self, request):
        def impl(_params):  # takes no parameters (unknown ones are ignored)
            code, body = self.sessions_impl()
            return code, body, ""
        return self._dispatch(request, impl)

    @wrappers.Request.application
    def _serve_report(self, request):
        return self._dispatch(request, self.report_impl)

    def _dispatch(self, request, impl):
        if request.method not in ("GET", "HEAD"):
            return _json(request, 405, {"error": f"method {request.method} not allowed; use GET"})
        try:
            params = parse_query(request.environ.get("QUERY_STRING", ""))
            code, body, source = impl(params)
        except RouteError as err:
            return _json(request, err.status, {"error": err.message})
        except Exception as err:  # never a traceback to the browser
            logger.exception("tfbneck: %s failed", request.path)
            return _json(request, 500, {"error": f"internal error ({type(err).__name__}); see the TensorBoard log"})
        headers = [(_CACHE_HEADER, source)] if source else []
        return _json(request, code, body, headers)


def _norm_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.lstrip('/')}"


def _json(request, code: int, body: Dict, headers=None):
    return http_util.Respond(request, body, "application/json", code=code, headers=headers)


def _session_time(s: Session) -> float:
    m = _SESSION_TIME_RE.match(s.name)
    if m:
        try:
            return time.mktime(tuple(int(g) for g in m.groups()) + (0, 0, -1))
        except (OverflowError, ValueError):
            pass
    newest = 0.0
    for p in list(s.files) + list(s.legacy_files) + [x for x in (s.skipped,) if x]:
        try:
            newest = max(newest, os.stat(p).st_mtime)
        except OSError:
            pass
    return newest


def _size(s: Session) -> int:
    total = 0
    for p in s.files:
        try:
            total += os.stat(p).st_size
        except OSError:
            pass
    return total


class BottleneckPluginLoader(base_plugin.TBLoader):
    """Loads :class:`BottleneckPlugin` (the ``tensorboard_plugins`` entry point)."""

    def define_flags(self, parser):
        parser.add_argument(
            "--bottleneck_logdir", metavar="PATH", default="",
            help="Bottleneck tab: search this logdir (local path or fsspec URL such as s3://bucket/logs) "
                 "instead of --logdir. Useful for storage TensorBoard itself cannot read.")

    def fix_flags(self, flags):
        pass

    def load(self, context):
        return BottleneckPlugin(context)
