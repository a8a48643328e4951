"""The Bottleneck tab's step-time trend: the trend files ``BottleneckProfiler`` writes beside
a run's sessions (``<run>/plugins/bottleneck/steptimes_*.json``, format in
:mod:`tfbneck_plugin.records`), found in the runs the session index knows, read and cached
by (path, size, modification time). No TensorFlow here; nothing is written.

A request never names a path: the runs come from the last scan of the logdir, their trend
files from listing ``plugins/bottleneck/`` in each, and only files that resolve inside the
logdir are read.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..logdir import Session, open_any
from ..records import SidecarError, read_step_times, read_system_run
from ..runs import list_trend_files, run_dir_of
from ..system.triage import busiest_gpu_util_pct

#: Parsed trend files kept in memory (the least recently read dropped first).
CACHE_ENTRIES = 64
#: Trend files shown per run, newest first (one per training process that used the run's folder).
MAX_JOBS_PER_RUN = 8
_SYSTEM_PREFIX = "system_"
#: Keys of a system record's interval passed on to the tab's system chart.
_INTERVAL_KEYS = ("step", "t_unix_ns", "dt_s", "cpu_pct", "busiest_core_pct", "tree_cores", "other_cores",
                  "busiest_thread_demand_pct", "iowait_pct", "disk_read_MBps", "net_recv_MBps", "net_sent_MBps")
#: Keys of a trend file passed on to the tab (the rest of the file is the callback's own).
_JOB_KEYS = ("host", "pid", "start_unix_ns", "updated_unix_ns", "ended", "steps_per_execution", "trigger",
             "baseline", "points", "windows")


class TrendService:
    """Reads trend files, caching the parsed ones by (path, size, mtime).

    Args:
      inside_logdir: ``path -> bool``; files outside the logdir (links) are not read.
    """

    def __init__(self, inside_logdir: Callable[[str], bool]):
        self._inside = inside_logdir
        self._cache: Dict[str, Tuple[Tuple[int, float], Dict]] = {}
        self._lock = threading.Lock()

    def runs(self, sessions: Dict[Tuple[str, str], Session], only_run: Optional[str] = None) -> Tuple[List, List]:
        """The trend of every run (or of ``only_run``) that has trend files.

        Args:
          sessions: the index's ``{(run, session name): Session}``.
          only_run: one run's name, or None for all.

        Returns:
          ``(runs, problems)``: runs ``[{"run", "jobs": [job]}]`` sorted by run name, each job
          the trend file's keys (:data:`_JOB_KEYS`) plus ``file`` (its name) and, in each
          window, ``in_logdir`` (its session is in the index); problems: one line per trend
          file that could not be read.
        """
        by_run: Dict[str, str] = {}
        for (run, _), s in sessions.items():
            if only_run is None or run == only_run:
                by_run.setdefault(run, run_dir_of(s))
        out, problems = [], []
        for run in sorted(by_run):
            jobs = []
            try:
                files = list_trend_files(by_run[run])
            except Exception as err:  # noqa: BLE001 - one unreadable run must not hide the others
                problems.append(f"{by_run[run]}: trend files cannot be listed ({type(err).__name__})")
                continue
            systems = self._system_records(by_run[run], problems)
            for path, size, mtime in files[:MAX_JOBS_PER_RUN]:
                if not self._inside(path):
                    continue
                try:
                    data = self._read(path, (size, mtime))
                except SidecarError as err:
                    problems.append(str(err))
                    continue
                job = _job_view(data, path, run, sessions)
                job["system"] = systems.get((data.get("host"), data.get("pid")))
                jobs.append(job)
            if jobs:
                out.append({"run": run, "jobs": jobs})
        return out, problems

    def _system_records(self, run_dir: str, problems: List[str]) -> Dict[Tuple[Any, Any], Dict]:
        """The run's system records (the callback's whole-run system view) by (host, pid)."""
        out: Dict[Tuple[Any, Any], Dict] = {}
        try:
            files = list_trend_files(run_dir, _SYSTEM_PREFIX)
        except Exception:  # noqa: BLE001 - the step-time trend is shown without it
            return out
        for path, size, mtime in files[:MAX_JOBS_PER_RUN]:
            if not self._inside(path):
                continue
            try:
                data = self._read(path, (size, mtime), read_system_run)
            except SidecarError as err:
                problems.append(str(err))
                continue
            out.setdefault((data.get("host"), data.get("pid")), system_view(data))
        return out

    def _read(self, path: str, key: Tuple[int, float], reader=read_step_times) -> Dict:
        with self._lock:
            hit = self._cache.get(path)
            if hit is not None and hit[0] == key:
                self._cache[path] = self._cache.pop(path)  # most recently used last
                return hit[1]
        data = reader(path, open_any)
        with self._lock:
            self._cache[path] = (key, data)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.pop(next(iter(self._cache)))
        return data


def _job_view(data: Dict, path: str, run: str, sessions: Dict) -> Dict:
    job = {k: data.get(k) for k in _JOB_KEYS}
    job["file"] = path.replace("\\", "/").rsplit("/", 1)[-1]
    job["windows"] = [dict(w, in_logdir=(run, w.get("session")) in sessions) for w in data.get("windows") or []]
    return job


def system_view(record: Dict) -> Dict:
    """What the tab's system chart needs of a system record: the run's triage and each
    interval's figures (:data:`_INTERVAL_KEYS`), its accelerators' peak utilisation
    ``gpu_util_pct`` (None without accelerators) and its triage ``bottleneck``/``reason``."""
    intervals = []
    for iv in record.get("intervals") or []:
        item = {k: iv.get(k) for k in _INTERVAL_KEYS}
        item["gpu_util_pct"] = busiest_gpu_util_pct(iv)
        t = iv.get("triage") or {}
        item["bottleneck"], item["reason"] = t.get("bottleneck"), t.get("reason")
        intervals.append(item)
    return {"triage": record.get("triage"), "cpu_count": record.get("cpu_count"),
            "interval_s": record.get("interval_s"), "aggregate_s": record.get("aggregate_s"), "intervals": intervals}
