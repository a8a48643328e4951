"""The Bottleneck tab's reports: analyses on background threads, and their cache.

``batch.analyze_one`` (the report of a session's trace; :meth:`ReportService.finished` adds what
its run's trend files say through ``batch.with_run_facts``) runs on a small pool of daemon threads, the newest
request first; background requests (the session list's verdict badges) come after every
request someone waits for, the most recent session first. A request never waits for
another session's analysis: it waits at most a given time for its own, then the route
answers 202 ("analysing") and the frontend polls.
Reports are cached in memory, keyed by the :func:`fingerprint` of the files the analysis
reads; a changed file is a new key. The default analyzer (``batch.analyze_one``) also keeps
them in the persistent report cache the CLI shares, outside the logdir: nothing is written
into the logdir. No TensorFlow here.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections import OrderedDict
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Dict, List, Optional, Tuple, cast

from ..analysis.grouping import CLOCK_TOLERANCE_S, candidate, group_jobs, wall_window
from ..batch import analyze_one, run_mates, with_run_facts
from ..cache import fingerprint  # the same key as the persistent report cache
from ..errors import error_report, first_line
from ..logdir import Session
from ..schema import SessionDict
from .index import SessionIndex, session_time
from .query import RouteError

logger = logging.getLogger(__name__)

#: Threads that run analyses: two sessions are analysed at once, the newest request first.
ANALYSIS_WORKERS = 2
#: Reports kept in memory (least recently used dropped first).
CACHE_ENTRIES = 64
#: Report fields the session list shows for sessions already analysed.
SUMMARY_KEYS = ("status", "bottleneck", "cause", "confidence", "error", "error_kind", "device_kind", "framework",
                "backend")
#: The most sibling sessions one look at the session list queues for analysis (so that a
#: job's workers are grouped without opening each one; see :func:`sibling_sessions`).
SIBLINGS_PER_LIST = 16

Fingerprint = Tuple[object, ...]


def failed_report(session: Session, err: BaseException) -> SessionDict:
    """The report of a session whose analyzer raised (``analyze_session`` never does; an
    injected analyzer might): ``status: error``, ``error_kind`` ``out_of_memory`` for a
    MemoryError, else ``analysis_failed``."""
    if isinstance(err, MemoryError):
        return error_report(session, "out_of_memory", f"{session.path}: out of memory while analysing")
    return error_report(session, "analysis_failed",
                        f"{session.path}: analysis failed ({type(err).__name__}: {first_line(err)})")


class _Analysis(Future):
    """A queued or running analysis, and the (run, session) it is for."""

    def __init__(self, key: Tuple[str, str], background: bool = False):
        super().__init__()
        self.key = key
        self.background = background  # no one waits for it (the list's badges)


class ReportService:
    """Runs ``analyze`` on ``workers`` daemon threads and caches the reports by
    :func:`fingerprint` (the ``max_entries`` most recently used). The newest request is
    analysed first; a session already queued or running is not queued again.

    Args:
      analyze: ``Session -> report dict`` (default ``batch.analyze_one``).
      workers: analysis threads.
      max_entries: reports kept.
    """

    def __init__(self, analyze: Callable[[Session], SessionDict] = analyze_one,
                 workers: int = ANALYSIS_WORKERS, max_entries: int = CACHE_ENTRIES):
        self._analyze = analyze
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._cache: "OrderedDict[Fingerprint, SessionDict]" = OrderedDict()
        self._latest: Dict[Tuple[str, str], Dict] = {}
        self._latest_full: Dict[Tuple[str, str], SessionDict] = {}
        self._inflight: Dict[Fingerprint, _Analysis] = {}
        self._started: set = set()  # fingerprints a worker took (a session may be queued twice)
        # (0, -n) for a request someone waits for (the newest first), (1, -session time) for a
        # background one (the most recent session first); n breaks ties, never the sessions.
        self._queue: "queue.PriorityQueue" = queue.PriorityQueue()
        self._order = itertools.count()
        self.hits = self.misses = self.analyses = 0
        for i in range(max(1, workers)):
            threading.Thread(target=self._work, name=f"tfbneck-analyze-{i}", daemon=True).start()

    def request(self, session: Session, wait_s: float = 0.0,
                background: bool = False) -> Tuple[Optional[SessionDict], str]:
        """The report of ``session``.

        Args:
          session: the session as it is on disk now.
          wait_s: how long to wait for an analysis this request starts or joins (seconds).
          background: no one waits for it (the list's badges): it runs after every other
            request, the most recent session first. A later foreground request for the
            same session moves it ahead.

        Returns:
          ``(report, "hit")`` if cached; else its analysis is started (once) and
          ``(report, "miss")`` if it finished within ``wait_s``, else ``(None, "analysing")``.
          Never raises for a bad session: the report says why.
        """
        fp = fingerprint(session)
        with self._lock:
            cached = self._cache.get(fp)
            if cached is not None:
                self._cache.move_to_end(fp)
                self.hits += 1
                return cached, "hit"
            fut = self._inflight.get(fp)
            n = next(self._order)
            priority = (1, -session_time(session), n) if background else (0, -n, n)
            if fut is None:
                self.misses += 1
                fut = _Analysis(session.key, background)
                self._inflight[fp] = fut
                self._queue.put((priority, fp, session, fut))
            elif fut.background and not background and fp not in self._started:
                fut.background = False
                self._queue.put((priority, fp, session, fut))  # ahead of the background entry
        if wait_s > 0:
            try:
                return fut.result(timeout=wait_s), "miss"
            except FutureTimeout:  # still analysing
                pass
        if fut.done():
            return fut.result(), "miss"
        return None, "analysing"

    def finished(self, sessions: List[Session], index: SessionIndex,
                 wait_s: float) -> Tuple[Optional[List[SessionDict]], str]:
        """The finished reports of ``sessions`` (as they are on disk now), in their order, as
        ``tfbneck analyze LOGDIR`` gives them: their reports here with what their runs' trend
        files say, through the batch driver (``batch.with_run_facts``), given the sessions of
        ``index``'s last scan that decide them (``batch.run_mates``: the newer sessions of a
        run whose trend files record a slow stretch not profiled, which the CLI says on the
        run's newest session only). Every report needed is queued before any is waited for,
        each at most ``wait_s`` seconds.

        Returns:
          ``(reports, source)``, ``source`` ``hit`` when each of ``sessions`` came from the
          cache, else ``miss``; ``(None, "analysing")`` while a report needed is analysed.
        """
        given = {s.key for s in sessions}
        needed: List[Session] = []
        for s in run_mates(sessions, list(index.current(wait_s=0).sessions.values())):
            try:
                needed.append(s if s.key in given else index.fresh(s))
            except RouteError:
                pass  # gone since the scan: `tfbneck analyze` would not see it either
        asked = [(s, *self.request(s, wait_s=0)) for s in needed]  # queue every one before waiting
        analysed: Dict[Tuple[str, str], SessionDict] = {}
        sources = set()
        for s, report, source in asked:
            if report is None:  # analysed for this request: a miss, whatever the cache holds by now
                report, _ = self.request(s, wait_s=wait_s)
                if report is None:
                    return None, "analysing"
                source = "miss"
            analysed[s.key] = report
            if s.key in given:
                sources.add(source)
        shown = with_run_facts([analysed[s.key] for s in needed], needed)
        by_key = {s.key: r for s, r in zip(needed, shown)}
        return [by_key[s.key] for s in sessions], "hit" if sources == {"hit"} else "miss"

    def latest(self, key: Tuple[str, str]) -> Optional[Dict]:
        """The :data:`SUMMARY_KEYS` of the last report made for (run, session), fresh or
        not; None if it was never analysed."""
        with self._lock:
            return self._latest.get(key)

    def analysed(self) -> Dict[Tuple[str, str], SessionDict]:
        """{(run, session): the last full report made for it, fresh or not}."""
        with self._lock:
            return dict(self._latest_full)

    def pending(self, key: Tuple[str, str]) -> bool:
        """Whether an analysis of (run, session) is queued or running."""
        with self._lock:
            return any(not f.done() and f.key == key for f in self._inflight.values())

    def stats(self) -> Dict[str, int]:
        """``{"entries", "hits", "misses", "analyses", "in_progress"}``: counts since start."""
        with self._lock:
            return {"entries": len(self._cache), "hits": self.hits, "misses": self.misses,
                    "analyses": self.analyses, "in_progress": len(self._inflight)}

    def _work(self) -> None:
        while True:
            _priority, fp, session, fut = self._queue.get()
            with self._lock:
                if fut.done() or fp in self._started:
                    continue  # the same session queued twice (moved ahead): the other entry ran it
                self._started.add(fp)
            try:
                report = self._analyze(session)
            except Exception as err:
                logger.exception("tfbneck: analysing %s failed", session.path)
                report = failed_report(session, err)
            with self._lock:
                self.analyses += 1
                self._cache[fp] = report
                self._cache.move_to_end(fp)
                while len(self._cache) > self._max_entries:
                    self._cache.popitem(last=False)
                fields = cast(Dict[str, object], report)
                self._latest[session.key] = {k: fields[k] for k in SUMMARY_KEYS if k in fields}
                self._latest_full[session.key] = report
                self._inflight.pop(fp, None)
                self._started.discard(fp)
            fut.set_result(report)


# -- multi-worker jobs -------------------------------------------------------------------------

Key = Tuple[str, str]


def job_members(job: SessionDict) -> List[Key]:
    """The (run, session) of each worker session of a job report (``kind: "job"``), in
    task order."""
    sessions = cast(List[Dict[str, object]], job["job"]["sessions"])  # set by grouping.job_report
    return [(str(s.get("run")), str(s.get("session"))) for s in sessions]


class JobGrouper:
    """The multi-worker jobs among the analysed sessions (``analysis.grouping.group_jobs``,
    the CLI's grouping), recomputed only when a report changed."""

    def __init__(self):
        self._lock = threading.Lock()
        self._reports: List[SessionDict] = []  # the reports grouped last, kept so that their id()s stay unique
        self._jobs: List[SessionDict] = []

    def jobs(self, analysed: Dict[Key, SessionDict]) -> List[SessionDict]:
        """The job reports formed by ``analysed`` ({(run, session): report}, as
        ``ReportService.analysed``), each with ``kind: "job"``; [] when none."""
        reports = [analysed[k] for k in sorted(analysed)]
        with self._lock:
            if len(reports) == len(self._reports) and all(a is b for a, b in zip(reports, self._reports)):
                return self._jobs
        jobs = [r for r in group_jobs(reports) if r.get("kind") == "job"]
        with self._lock:
            self._reports, self._jobs = reports, jobs
        return jobs

    def job_of(self, key: Key, analysed: Dict[Key, SessionDict]) -> Optional[SessionDict]:
        """The job report whose workers include session ``key``, or None."""
        return next((j for j in self.jobs(analysed) if key in job_members(j)), None)


def regroup(reports: List[SessionDict]) -> Optional[SessionDict]:
    """The one job report of these worker reports (fresh ones, in task order), or None when
    they no longer form exactly one job (a worker's files changed since the list was made)."""
    out = group_jobs(reports)
    return out[0] if len(out) == 1 and out[0].get("kind") == "job" else None


def sibling_sessions(sessions: Dict[Key, Session], analysed: Dict[Key, SessionDict], busy: Callable[[Key], bool],
                     limit: int = SIBLINGS_PER_LIST) -> List[Session]:
    """Sessions not analysed yet that may be other workers of a job one analysed session
    belongs to, so that the tab can group a job once one of its workers was opened.

    A worker is an analysed one-host report that records a job id or names a multi-worker
    task (``analysis.grouping.candidate``); its siblings are the unanalysed sessions whose
    folder time (``index.session_time``, unix s) falls in its wall-clock window widened by
    ``grouping.CLOCK_TOLERANCE_S``, the same tolerance grouping applies.

    Args:
      sessions: {(run, session): Session} of the last scan.
      analysed: {(run, session): report} (``ReportService.analysed``).
      busy: whether (run, session) is queued or being analysed.
      limit: at most this many sessions are returned.
    Returns:
      the sessions to analyse, at most ``limit``.
    """
    windows = []
    for r in analysed.values():
        c = candidate(0, r)
        if c is not None and (c.job_id or (c.task and not c.task.startswith("localhost:"))):
            w = wall_window(r)
            if w:
                windows.append((w[0] - CLOCK_TOLERANCE_S, w[1] + CLOCK_TOLERANCE_S))
    out: List[Session] = []
    for key, s in sorted(sessions.items()):
        if len(out) >= limit or not windows:
            break
        if key in analysed or busy(key):
            continue
        t = session_time(s)
        if any(lo <= t <= hi for lo, hi in windows):
            out.append(s)
    return out
