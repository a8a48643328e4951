"""The Bottleneck tab's Fleet view: the fleet report (:func:`tfbneck_plugin.fleet_view.report.build`)
of every session the logdir's index knows, answered from summaries so that 10,000 sessions
cost one request of well under two seconds once their reports are cached.

A session's summary comes from, in order: this process's memory (keyed by the report
cache's key, so a changed trace is a new key), the persistent report cache
(:mod:`tfbneck_plugin.cache`), the tab's own in-memory reports; else its analysis is queued
on the tab's analysis threads and the session is counted as ``pending`` (the frontend asks
again). A run's trend files are read again only when their listing (names, sizes, times)
changes. Nothing is written into the logdir. No TensorFlow here.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .. import cache
from ..fleet_view.report import attach_context, build
from ..logdir import Session
from ..runs import RunContext, list_trend_files, read_run, run_dir_of, session_time
from ..summary import summarize

#: Fields of each run the route sends (the CLI's JSON has more: paths, per-run category times).
#: ``fix_worth`` is the Worth column, ``error`` the one line that says why a run has no report.
RUN_FIELDS = ("run", "group", "session", "session_time", "status", "bottleneck", "cause", "fix", "fix_title",
              "fix_worth", "fix_basis", "speedup", "time_per_batch_ms", "predicted_time_per_batch_ms", "batches",
              "length_known", "recoverable_ms", "sessions", "errors", "error", "fix_first")
#: Sessions without a report the route names (``failed``; the view shows the first 20, the
#: headline counts them all): a logdir of 10,000 broken sessions stays one small answer.
FAILED_SENT = 200
#: How long a view is answered again for the same scan and parameters (seconds; the index
#: rescans after 5 s).
REUSE_S = 5.0
#: Summaries kept in memory; beyond, the map is cleared and refilled from the disk cache.
MAX_SUMMARIES = 200_000


class FleetService:
    """Summaries and run contexts for the Fleet view, cached in memory.

    Args:
      report_of: ``(Session, cache key) -> report or None``: a report the tab already holds.
      request: ``Session -> None``: queue the session's analysis (never waits).
    """

    def __init__(self, report_of: Callable[[Session], Optional[Mapping[str, Any]]],
                 request: Callable[[Session], object]):
        self._report_of = report_of
        self._request = request
        self._summaries: Dict[tuple, Dict] = {}
        self._runs: Dict[str, Tuple[tuple, RunContext]] = {}
        self._lock = threading.Lock()
        self._memo: Optional[Tuple[tuple, float, Dict]] = None

    def _summary(self, session: Session) -> Optional[Dict]:
        fp = cache.fingerprint(session)  # the files' sizes and times: a changed trace is a new entry
        mem_key = (session.run, session.name, fp)
        with self._lock:
            hit = self._summaries.get(mem_key)
        if hit is not None:
            return dict(hit)
        key = cache.key_of(session, fp)
        if key is not None:
            hit = cache.get_summary(session, key)
            if hit is not None:
                with self._lock:
                    if len(self._summaries) >= MAX_SUMMARIES:
                        self._summaries.clear()
                    self._summaries[mem_key] = hit
                return dict(hit)
        report = self._report_of(session)
        if report is not None:
            # report_of may give only the fields the session list shows (ReportService.latest):
            # the session's identity comes from the session, so a run without a report is
            # named, with its error, as the CLI names it.
            return summarize(report) | {"run": session.run, "session": session.name, "path": session.path}
        self._request(session)
        return None

    def _context(self, run_dir: str) -> RunContext:
        listing: tuple
        try:
            listing = tuple(list_trend_files(run_dir))
        except Exception:  # noqa: BLE001 - read_run says why, once
            listing = ("unlistable",)
        with self._lock:
            hit = self._runs.get(run_dir)
        if hit is not None and hit[0] == listing:
            return hit[1]
        ctx = read_run(run_dir)
        with self._lock:
            self._runs[run_dir] = (listing, ctx)
        return ctx

    def view(self, sessions: Dict[Tuple[str, str], Session], group_by: Optional[str] = None, group_level: int = 1,
             since: Optional[float] = None, scan: Optional[int] = None) -> Dict:
        """The fleet report of ``sessions`` (the index's ``{(run, name): Session}``), with
        ``runs`` reduced to :data:`RUN_FIELDS` and ``failed`` to its first :data:`FAILED_SENT`,
        plus ``pending`` (sessions whose analysis
        is queued or running, not counted yet). ``scan``: the index's scan count; the same
        scan and parameters within :data:`REUSE_S` seconds, with nothing pending, get the
        view made for the first request (the view polls; a rescan is a new view). Raises
        ValueError for a bad ``group_by``."""
        memo_key = (scan, group_by, group_level, since)
        with self._lock:
            memo = self._memo
        if scan is not None and memo and memo[0] == memo_key and time.monotonic() - memo[1] < REUSE_S:
            return memo[2]
        out = self._view(sessions, group_by, group_level, since)
        if scan is not None and not out["pending"]:
            with self._lock:
                self._memo = (memo_key, time.monotonic(), out)
        return out

    def _view(self, sessions, group_by, group_level, since) -> Dict:
        items: List[Dict] = []
        contexts: Dict[str, RunContext] = {}
        problems: List[str] = []
        pending = 0
        for s in sessions.values():
            t = session_time(s)
            if since is not None and not (t and t >= since):
                continue
            summ = self._summary(s)
            if summ is None:
                pending += 1
                continue
            d = run_dir_of(s)
            if d not in contexts:
                contexts[d] = self._context(d)
                problems.extend(contexts[d].problems)
            items.append(attach_context(summ, d, t, contexts[d]))
        out = build(items, contexts, group_by, group_level, problems[:100])
        out["runs"] = [{k: r.get(k) for k in RUN_FIELDS} | {"window_kind": (r.get("window") or {}).get("kind")}
                       for r in out["runs"]]
        out["failed"] = out["failed"][:FAILED_SENT]
        out["pending"] = pending
        return out
