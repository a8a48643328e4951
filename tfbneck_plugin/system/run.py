"""The whole run's system record: the system sampler running at a low rate for as long as
a process runs, its samples rolled into intervals, each with the flowchart's triage.

Used by ``BottleneckProfiler`` (all run long, ``system_interval_s``) and by ``tfbneck
watch`` (any process). No TensorFlow here; the record's format is in
:mod:`tfbneck_plugin.records` (``SYSTEM_RUN_FORMAT``).
"""
from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional

from ..records import FORMAT as SIDECAR_FORMAT
from ..records import SYSTEM_RUN_FORMAT
from ..records import VERSION as SIDECAR_VERSION
from .sampler import SystemSampler
from .triage import aggregate, triage_interval, triage_run

#: Intervals kept at most (about 5.8 days at 10 s): the record stays a few MB.
MAX_INTERVALS = 50_000
#: Raw samples kept for :meth:`SystemRun.recent` (the watch panel's last seconds).
RECENT_SAMPLES = 600


def usable_cores(pid: Optional[int] = None) -> int:
    """Cores the process may run on (its CPU affinity, as ``taskset`` sets it), else the
    machine's."""
    try:
        return len(os.sched_getaffinity(pid or 0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class SystemRun:
    """Samples a process tree every ``interval_s`` and keeps ``aggregate_s`` intervals.

    ``start()`` begins sampling (and, with ``background=True``, a thread that calls
    :meth:`poll` every ``interval_s`` and hands each new interval to ``on_interval``);
    ``poll()`` turns the samples taken since into intervals; ``stop()`` ends and returns
    the record. Nothing here raises into the caller after ``start()``: a failing sampler
    or callback is kept in ``error``.

    Args:
      interval_s: seconds between samples (>= 0.05).
      aggregate_s: seconds per interval (>= interval_s).
      pid: the process to watch (default: this one).
      source: ``"callback"`` or ``"watch"`` (written into the record).
      command: the command line watched, if any.
    """

    def __init__(self, interval_s: float = 1.0, aggregate_s: float = 10.0, pid: Optional[int] = None,
                 source: str = "callback", command: Optional[List[str]] = None):
        self.interval_s = max(float(interval_s), 0.05)
        self.aggregate_s = max(float(aggregate_s), self.interval_s)
        self.pid, self.source, self.command = pid, source, command
        self.cpu_count = usable_cores(pid)
        self.intervals: List[Dict] = []
        self.truncated = False
        self.error: Optional[str] = None
        self._pending: List[Dict] = []
        self._recent: Deque[Dict] = deque(maxlen=RECENT_SAMPLES)
        self._sampler = SystemSampler(self.interval_s, pid=pid, thread_detail=True)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._start_ns = 0

    def start(self, background: bool = False, on_interval: Optional[Callable[[Dict], None]] = None) -> "SystemRun":
        """Start sampling; see the class. Returns ``self``."""
        self._start_ns = time.time_ns()
        self._sampler.start()
        if background:
            self._thread = threading.Thread(target=self._run, args=(on_interval,), name="tfbneck-system-run",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self, on_interval) -> None:
        while not self._stop.wait(self.interval_s):  # an interval is handed on within a sample of its end
            try:
                for iv in self.poll():
                    if on_interval is not None:
                        on_interval(iv)
            except Exception as err:  # noqa: BLE001 - never reach the training loop
                self.error = f"{type(err).__name__}: {err}"
                return

    def poll(self, final: bool = False) -> List[Dict]:
        """Roll the samples taken since the last call into intervals of ``aggregate_s``;
        returns the new intervals (each with its ``triage``). With ``final`` the
        remainder becomes an interval too."""
        new: List[Dict] = []
        with self._lock:
            fresh = self._sampler.drain()
            self._recent.extend(fresh)
            self._pending.extend(fresh)
            while self._pending:
                # Samples end a little after each interval_s: half a sample's slack keeps
                # intervals at aggregate_s / interval_s samples rather than one more.
                full = self.aggregate_s - 0.5 * self.interval_s
                covered = sum(float(s.get("dt_s") or 0.0) for s in self._pending)
                if covered < full and not final:
                    break
                take, acc = 0, 0.0
                while take < len(self._pending) and acc < full:
                    acc += float(self._pending[take].get("dt_s") or 0.0)
                    take += 1
                iv = aggregate(self._pending[:take])
                del self._pending[:take]
                if iv is not None:
                    iv["triage"] = triage_interval(iv, self.cpu_count)
                    new.append(iv)
            room = MAX_INTERVALS - len(self.intervals)
            self.truncated = self.truncated or len(new) > room
            self.intervals.extend(new[:max(room, 0)])
        return new

    def recent(self, seconds: float) -> Optional[Dict]:
        """The last ``seconds`` of samples as one interval with its triage (None before
        the first sample), plus ``per_core_pct``: each core's busy % over them."""
        self.poll()
        with self._lock:
            picked, acc = [], 0.0
            for s in reversed(self._recent):
                if acc >= seconds:
                    break
                picked.append(s)
                acc += float(s.get("dt_s") or 0.0)
        picked.reverse()
        iv = aggregate(picked)
        if iv is None:
            return None
        iv["triage"] = triage_interval(iv, self.cpu_count)
        ncores = len(picked[-1].get("cpu_pct") or [])
        iv["per_core_pct"] = [round(sum(float(s["cpu_pct"][i]) * float(s.get("dt_s") or 0) for s in picked
                                        if len(s.get("cpu_pct") or []) > i) / (acc or 1e-9), 1) for i in range(ncores)]
        return iv

    def stop(self) -> Dict:
        """Stop sampling; returns :meth:`record` with the last, partial interval."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sampler.stop()
        if self._sampler.error and not self.error and not self._target_ended():
            self.error = self._sampler.error
        self.poll(final=True)
        return self.record()

    def _target_ended(self) -> bool:
        """The watched process is gone (its sampler then stops by itself: not an error)."""
        import psutil
        try:
            return psutil.Process(self.pid or os.getpid()).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    def samples_between(self, start_unix_ns: int, end_unix_ns: int) -> List[Dict]:
        """The recent samples (the last :data:`RECENT_SAMPLES`) that overlap the span."""
        self.poll()
        with self._lock:
            return [dict(s) for s in self._recent
                    if s["t_unix_ns"] >= start_unix_ns and s["t_unix_ns"] - s["dt_s"] * 1e9 <= end_unix_ns]

    def sidecar(self, start_unix_ns: int, end_unix_ns: int) -> Dict:
        """A system-metrics sidecar (format in :mod:`tfbneck_plugin.records`) of the samples
        overlapping the span: what a captured session holds beside its trace."""
        return {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "host": socket.gethostname(),
                "pid": self.pid or os.getpid(), "cpu_count": os.cpu_count() or self.cpu_count,
                "cpu_affinity": self.cpu_count, "interval_s": self.interval_s, "start_unix_ns": start_unix_ns,
                "end_unix_ns": end_unix_ns, "sampler_error": None, "source": "tfbneck watch",
                "samples": self.samples_between(start_unix_ns, end_unix_ns)}

    @property
    def start_unix_ns(self) -> int:
        return self._start_ns

    def record(self) -> Dict:
        """The system record (``records.SYSTEM_RUN_FORMAT``) of what was sampled so far."""
        with self._lock:
            intervals = list(self.intervals)
        return make_record(intervals, source=self.source, pid=self.pid or os.getpid(), command=self.command,
                           cpu_count=self.cpu_count, interval_s=self.interval_s, aggregate_s=self.aggregate_s,
                           start_unix_ns=self._start_ns, truncated=self.truncated, error=self.error)


def make_record(intervals: List[Dict], *, source: str, pid: int, command: Optional[List[str]], cpu_count: int,
                interval_s: float, aggregate_s: float, start_unix_ns: int, truncated: bool = False,
                error: Optional[str] = None) -> Dict:
    """A system record (format in :mod:`tfbneck_plugin.records`) over ``intervals``, with
    the run's triage (the intervals are copied, not changed)."""
    return {"format": SYSTEM_RUN_FORMAT, "version": 1, "source": source, "host": socket.gethostname(),
            "pid": pid, "command": command, "cpu_count": cpu_count, "interval_s": interval_s,
            "aggregate_s": aggregate_s, "start_unix_ns": start_unix_ns, "end_unix_ns": time.time_ns(),
            "truncated": truncated, "error": error, "intervals": intervals,
            "triage": triage_run([dict(iv) for iv in intervals], cpu_count)}
