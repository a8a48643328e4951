"""The Bottleneck tab's session index: the logdir's profiling sessions, found on a
background thread and looked up by (run, session).

The plugin walks the logdir itself (``logdir.find_sessions``: any depth, both Keras
layouts; a local folder, or a ``gs://``, ``s3://``... URL through fsspec), never through
TensorBoard's event multiplexer (absent with the fast data loader, TensorBoard's default).
A scan older than :data:`RESCAN_INTERVAL_S` is redone when the list is asked for, so new
sessions appear without a restart.

Requests never name a path: a session is looked up by (run, session) in the last scan, and
only its files that resolve inside the logdir are handed to the analyzer. No TensorFlow here.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..logdir import DiscoveryError, Session, find_sessions, is_remote, session_folder_time
from .query import RouteError

logger = logging.getLogger(__name__)

#: A scan of the logdir older than this (seconds) is redone when the session list is asked for.
RESCAN_INTERVAL_S = 5.0
#: The longest a request (or ``is_active``) waits for a running logdir scan (seconds); after
#: that it answers with the previous scan and the frontend asks again.
SCAN_WAIT_S = 1.0
#: A session asked for that the last scan does not hold triggers a rescan when that scan is
#: older than this (seconds): a session written since shows up, a flood of bad names does not
#: turn into a flood of scans.
LOOKUP_RESCAN_S = 1.0
#: ``error_kind`` of a logdir that cannot be searched (``/sessions``, docs/http_api.md).
SCAN_ERROR_KINDS = ("no_logdir", "not_found", "unreadable", "unreachable", "internal")


@dataclasses.dataclass
class Snapshot:
    """One view of the index.

    Attributes:
      sessions: {(run, session name): Session} of the last successful scan.
      problems: folders below the logdir that could not be read, one line each.
      error: one line when the logdir itself cannot be searched, else None.
      error_kind: machine-readable kind of ``error`` (docs/http_api.md), else None.
      scanning: a scan is running now.
      scanned: False until the first scan finished.
      scans: scans finished so far.
    """
    sessions: Dict[Tuple[str, str], Session]
    problems: List[str]
    error: Optional[str]
    error_kind: Optional[str]
    scanning: bool
    scanned: bool
    scans: int


def scan_error_kind(logdir: str, err: Exception) -> str:
    """The ``error_kind`` of a logdir that cannot be searched.

    Args:
      logdir: the logdir searched (local path or fsspec URL).
      err: what ``find_sessions`` raised.

    Returns:
      the error's own ``kind`` when it has one. Else, for a local path: ``not_found`` when
      it does not exist, ``unreadable`` when it does. For remote storage, from the store's
      exception that the error was raised while handling (``__context__``): none or
      FileNotFoundError, ``not_found``; ImportError or ValueError (a URL scheme fsspec
      cannot read), ``unreadable``; anything else (network, credentials), ``unreachable``.
    """
    kind = getattr(err, "kind", None)
    if isinstance(kind, str) and kind:
        return kind
    if not is_remote(logdir):
        return "unreadable" if os.path.exists(logdir) else "not_found"
    cause = err.__context__
    if cause is None or isinstance(cause, FileNotFoundError):
        return "not_found"
    if isinstance(cause, (ImportError, ValueError)):
        return "unreadable"
    return "unreachable"


class SessionIndex:
    """Sessions under ``logdir``, found by ``find`` (default ``logdir.find_sessions``) on a
    daemon thread. One scan runs at a time; :meth:`current` starts one when the last is
    older than ``max_age_s`` seconds and waits for it at most ``wait_s`` seconds."""

    def __init__(self, logdir: Optional[str], find: Callable = find_sessions,
                 max_age_s: float = RESCAN_INTERVAL_S):
        self.logdir = logdir
        self._real_logdir = os.path.realpath(logdir) if logdir and not is_remote(logdir) else None
        self._find = find
        self._max_age_s = max_age_s
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._scanning = False
        self._scanned_at: Optional[float] = None
        self._sessions: Dict[Tuple[str, str], Session] = {}
        self._problems: List[str] = []
        self._error: Optional[Tuple[str, str]] = None  # (message, kind)
        self._scans = 0

    def current(self, wait_s: float = SCAN_WAIT_S, max_age_s: Optional[float] = None) -> Snapshot:
        """The latest scan; starts a new one if the latest is older than ``max_age_s``
        seconds (default: the index's) and waits up to ``wait_s`` seconds for a running one."""
        max_age = self._max_age_s if max_age_s is None else max_age_s
        with self._lock:
            stale = self._scanned_at is None or time.monotonic() - self._scanned_at > max_age
            if stale and not self._scanning:
                self._start_locked()
            done = self._done if self._scanning else None
        if done is not None and wait_s > 0:
            done.wait(wait_s)
        with self._lock:
            message, kind = self._error or (None, None)
            return Snapshot(dict(self._sessions), list(self._problems), message, kind, self._scanning,
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
                error = ("TensorBoard was started without --logdir", "no_logdir")
            else:
                disc = self._find(self.logdir)
                sessions = {s.key: s for s in disc.sessions}
                problems = list(disc.problems)
        except DiscoveryError as err:
            error = (str(err), scan_error_kind(self.logdir or "", err))  # set: the scan ran
        except Exception as err:  # a scan must never take down the server
            logger.exception("tfbneck: scanning %s failed", self.logdir)
            error = (f"scanning the logdir failed ({type(err).__name__}: {err})", "internal")
        with self._lock:
            if error is None or not self._sessions:  # a failed rescan keeps the sessions known
                self._sessions = sessions
            self._problems, self._error = problems, error
            self._scanned_at = time.monotonic()
            self._scanning = False
            self._scans += 1
        done.set()

    # -- looking a session up ------------------------------------------------------------

    def lookup(self, run: str, name: str) -> Session:
        """The session (run, name) of the last scan, rescanning once if it is not there.

        Raises:
          RouteError: 503 while the first scan has not finished; 404 for an unknown run or
            a run without that session.
        """
        snap = self.current(wait_s=0)
        s = snap.sessions.get((run, name))
        if s is None:  # maybe it appeared since the last scan
            snap = self.current(wait_s=SCAN_WAIT_S, max_age_s=LOOKUP_RESCAN_S)
            s = snap.sessions.get((run, name))
        if s is None:
            if not snap.scanned:
                raise RouteError(503, "the logdir is still being scanned for sessions; try again in a moment")
            if not any(r == run for r, _ in snap.sessions):
                raise RouteError(404, f"unknown run {run!r}: no profiling session under it in the logdir")
            raise RouteError(404, f"run {run!r} has no session {name!r}")
        return s

    def fresh(self, s: Session) -> Session:
        """The session as it is on disk now (files may have been added or removed since the
        scan), holding only files that resolve inside the logdir. Remote sessions are taken
        from the last scan, at most :data:`RESCAN_INTERVAL_S` old: listing a bucket on every
        request would be slow.

        Raises:
          RouteError: 404 when the folder is gone or holds no trace file inside the logdir.
        """
        try:
            found = [s] if is_remote(s.path) else find_sessions(s.path).sessions
        except DiscoveryError:
            found = []
        if len(found) > 1:  # a folder of PyTorch traces holds several sessions: this one by name
            found = [f for f in found if f.name == s.name]
        if not found:
            raise RouteError(404, f"session {s.run}/{s.name} no longer exists in the logdir")
        fresh = dataclasses.replace(found[0], run=s.run, name=s.name)
        inside = self.inside_logdir
        fresh.files = [f for f in fresh.files if inside(f)]
        fresh.legacy_files = [f for f in fresh.legacy_files if inside(f)]
        fresh.sidecar = fresh.sidecar if fresh.sidecar and inside(fresh.sidecar) else None
        fresh.skipped = fresh.skipped if fresh.skipped and inside(fresh.skipped) else None
        fresh.system_record = fresh.system_record if fresh.system_record and inside(fresh.system_record) else None
        if not (fresh.files or fresh.legacy_files or fresh.skipped or fresh.incomplete or fresh.system_record):
            raise RouteError(404, f"session {s.run}/{s.name} has no trace file inside the logdir "
                                  "(links to files elsewhere are not followed)")
        return fresh

    def inside_logdir(self, path: str) -> bool:
        """Whether ``path`` resolves (links followed) to a file inside the logdir."""
        if self.logdir and is_remote(self.logdir):  # object stores have no links
            norm = _norm_url(self.logdir).rstrip("/") + "/"
            return is_remote(path) and _norm_url(path).startswith(norm) and "/../" not in _norm_url(path)
        if self._real_logdir is None:
            return False
        real = os.path.realpath(path)
        return real == self._real_logdir or real.startswith(self._real_logdir.rstrip(os.sep) + os.sep)


def _norm_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.lstrip('/')}"


# -- the session list's rows ---------------------------------------------------------------

def session_row(s: Session, last: Optional[Dict], pending: bool) -> Dict:
    """One row of ``/sessions`` (docs/http_api.md).

    Args:
      s: the session, from the index.
      last: the summary of its last report (``ReportService.latest``), or None.
      pending: its analysis is queued or running.

    Returns:
      ``{"run", "session", "hosts", "time" (unix seconds), "files", "size_bytes", "state"}``
      plus the keys of ``last``; ``state`` is ``ready``, ``analysing`` or ``new``.
    """
    row = {"run": s.run, "session": s.name, "hosts": s.hosts, "time": session_time(s),
           "files": len(s.files) + (1 if s.system_record else 0), "size_bytes": _size(s),
           "state": "ready" if last is not None else ("analysing" if pending else "new")}
    if last is not None:
        row.update(last)
    return row


def job_rows(rows: List[Dict], jobs: Sequence[Mapping[str, Any]], summary_keys) -> List[Dict]:
    """The session list's rows with the worker sessions of each multi-worker job replaced
    by one row for the job (docs/http_api.md, ``/sessions``).

    Args:
      rows: rows of :func:`session_row`.
      jobs: job reports (``kind: "job"``, ``analysis.grouping.job_report``) of analysed sessions.
      summary_keys: the report fields a row shows (``reports.SUMMARY_KEYS``).

    Returns:
      a new list: rows of sessions in no job as they were; for each job whose worker
      sessions are all in ``rows``, one row ``{"kind": "job", "run", "session" ("job:<id>"),
      "hosts" (tasks, e.g. ``worker:0``), "time" (newest worker's, unix s), "files",
      "size_bytes" (sums), "state", "straggler" (task or None), "members": [{"task", "run",
      "session"}]}`` plus the job report's summary keys, in place of its first worker's row.
    """
    by_key = {(r["run"], r["session"]): r for r in rows}
    first: Dict[Tuple[str, str], Dict] = {}
    grouped: set = set()
    for j in jobs:
        members = [(s["task"], (str(s.get("run")), str(s.get("session")))) for s in j["job"]["sessions"]]
        if not all(k in by_key for _, k in members):
            continue  # a worker's session is gone from the logdir: show what is left as sessions
        mine = [by_key[k] for _, k in members]
        row = {"kind": "job", "run": j["run"], "session": j["session"], "hosts": list(j["hosts"]),
               "time": max(r["time"] for r in mine), "files": sum(r["files"] for r in mine),
               "size_bytes": sum(r["size_bytes"] for r in mine),
               "state": "analysing" if any(r["state"] == "analysing" for r in mine) else "ready",
               "straggler": j["job"].get("straggler"),
               "members": [{"task": t, "run": k[0], "session": k[1]} for t, k in members]}
        row.update({k: j[k] for k in summary_keys if k in j})
        first[min((k for _, k in members), key=lambda k: rows.index(by_key[k]))] = row
        grouped.update(k for _, k in members)
    out = []
    for r in rows:
        key = (r["run"], r["session"])
        if key in first:
            out.append(first[key])
        elif key not in grouped:
            out.append(r)
    return out


def session_time(s: Session) -> float:
    """When the session was recorded (unix seconds): the time its folder is named after
    (local time, as the profiler names it), else its newest file's modification time, else 0."""
    named = session_folder_time(s.name)
    if named is not None:
        return named
    newest = 0.0
    for p in list(s.files) + list(s.legacy_files) + [x for x in (s.skipped, s.system_record) if x]:
        try:
            newest = max(newest, os.stat(p).st_mtime)
        except (OSError, ValueError):
            pass
    return newest


def _size(s: Session) -> int:
    total = 0
    for p in list(s.files) + [x for x in (s.system_record,) if x]:
        try:
            total += os.stat(p).st_size
        except (OSError, ValueError):
            pass
    return total
