"""The whole run's system view from inside the training process.

While ``fit`` runs (or a custom loop steps), a :class:`tfbneck_plugin.system.run.SystemRun`
samples the system every ``system_interval_s`` (default 1 s) and rolls the samples into
``aggregate_s`` intervals (10 s). Each interval becomes a few TensorBoard scalars in
``<log_dir>`` (the machine's CPU, this process's and other processes' cores, the busiest
accelerator: :func:`.summaries.system_scalars`; TensorBoard's Scalars / Time Series
dashboards show them like any other metric, x = the training step) and a line of the system
record ``<log_dir>/plugins/bottleneck/system_<stamp>_<host>_<pid>.json``, with every figure
of the interval (busiest core and thread, run-queue wait, iowait, disk, network, each
accelerator) and the flowchart's triage, which the tab's trend view draws beside the step time.

Between ``fit`` calls sampling pauses (an idle notebook is not a bottleneck). The sampler
runs on its own daemon thread; scalars are written through the callback's existing event
writer (primed on the training thread); every error is kept and warned once, never raised
into training. :class:`RunServices` resumes and pauses it, and starts TensorFlow's profiler
server once (through a callable: no TensorFlow here).
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from ..records import STEP_TIMES_DIR, system_run_name, write_sidecar
from ..system.run import SystemRun, make_record, usable_cores
from .summaries import system_scalars

if TYPE_CHECKING:
    from .safety import Guard, LogDirState

#: Seconds per interval (one point per system scalar): event files stay small
#: (a day is 8,640 points per tag) and a 10 s mean hides the sampler's 10 ms tick noise.
AGGREGATE_S = 10.0
#: The record is rewritten at every interval during the first hour, then every this many
#: seconds (rewriting a multi-MB JSON every 10 s would cost more than the sampling).
REWRITE_EVERY_S_LATER = 300.0


class RunSystemView:
    """Samples the system while training runs; see the module.

    Args:
      log_dir: the callback's log_dir.
      interval_s: seconds between samples.
      write_values: ``(scalars, step)`` -> None, the callback's scalar writer (None: no scalars).
      current_step: returns the training step the scalars are plotted at.
      warn: ``(key, message)`` -> None, warns once per key.
    """

    def __init__(self, log_dir: str, interval_s: float, write_values: Optional[Callable[[Dict, int], None]],
                 current_step: Callable[[], int], warn: Callable[[str, str], None]):
        self.log_dir, self.interval_s = log_dir, float(interval_s)
        self._write_values, self._current_step, self._warn = write_values, current_step, warn
        self.intervals: List[Dict] = []
        self._run: Optional[SystemRun] = None
        self._lock = threading.Lock()
        self._start_ns = 0
        self._last_write = 0.0
        self._path: Optional[str] = None

    @property
    def running(self) -> bool:
        return self._run is not None

    def resume(self) -> None:
        """Start sampling (a fit began, or a custom loop's first step); no-op if running."""
        if self._run is not None:
            return
        try:
            self._run = SystemRun(self.interval_s, AGGREGATE_S, source="callback")
            self._run.start(background=True, on_interval=self._on_interval)
            self._start_ns = self._start_ns or self._run.start_unix_ns
        except Exception as err:  # noqa: BLE001 - no system view, training goes on
            self._run = None
            self._warn("system_view", f"the whole-run system sampler could not start ({type(err).__name__}: {err})")

    def pause(self) -> None:
        """Stop sampling (fit ended, or close()) and write the record."""
        run, self._run = self._run, None
        if run is None:
            return
        try:
            record = run.stop()
            with self._lock:
                known = {iv["t_unix_ns"] for iv in self.intervals}
                last = [dict(iv, step=int(self._current_step())) for iv in record["intervals"]
                        if iv["t_unix_ns"] not in known]
                self.intervals.extend(last)
            if self._write_values is not None:  # the partial interval at the end gets its scalars too
                for iv in last:
                    self._write_values(system_scalars(iv), int(self._current_step()))
            if run.error:
                self._warn("system_view", f"the whole-run system sampler stopped: {run.error}")
            self.write_record(force=True)
        except Exception as err:  # noqa: BLE001 - never reach training
            self._warn("system_view", f"the whole-run system record could not be written ({type(err).__name__}: {err})")

    def _on_interval(self, iv: Dict) -> None:
        iv["step"] = int(self._current_step())  # where the tab's trend view draws it
        with self._lock:
            self.intervals.append(iv)
        if self._write_values is not None:
            self._write_values(system_scalars(iv), int(self._current_step()))
        self.write_record()

    def write_record(self, force: bool = False) -> Optional[str]:
        """Rewrite the system record (atomically); returns its path, None if not due."""
        now = time.monotonic()
        hour = len(self.intervals) * AGGREGATE_S <= 3600
        if not force and not hour and now - self._last_write < REWRITE_EVERY_S_LATER:
            return None
        self._last_write = now
        with self._lock:
            intervals = [dict(iv) for iv in self.intervals]
        record = make_record(intervals, source="callback", pid=os.getpid(), command=None, cpu_count=usable_cores(),
                             interval_s=self.interval_s, aggregate_s=AGGREGATE_S, start_unix_ns=self._start_ns)
        folder = os.path.join(self.log_dir, STEP_TIMES_DIR)
        os.makedirs(folder, exist_ok=True)
        name = system_run_name(self._start_ns or time.time_ns(), socket.gethostname(), os.getpid())
        self._path = write_sidecar(folder, record, name=name)
        return self._path


class RunServices:
    """What the callback runs all training long besides step timing: the whole run's system
    view (resumed when training begins, paused when it ends) and TensorFlow's profiler server
    (started once: one server per process, never retried).

    Args:
      system_view: the whole run's system view, or None (``system_interval_s`` off).
      prime_writer: creates the event writer on the training thread before the system view's
        thread writes scalars (None: no scalars).
      server_port: the profiler server's port, or None (no server).
      start_server: ``start_server(port)`` starts the profiler server
        (``tf.profiler.experimental.server.start``); may raise.
      guard: nothing resumes once profiling was turned off (:attr:`.safety.Guard.disabled`).
      log_dir: nothing resumes while ``log_dir`` cannot be written (:class:`.safety.LogDirState`;
        said once already).
      warn: ``warn(key, message)``, one warning per kind.
    """

    def __init__(self, system_view: Optional[RunSystemView], prime_writer: Optional[Callable[[], None]],
                 server_port: Optional[int], start_server: Callable[[int], None], guard: "Guard",
                 log_dir: "LogDirState", warn: Callable[[str, str], None]):
        self.system_view, self._prime_writer = system_view, prime_writer
        self.server_port, self._start_server = server_port, start_server
        self._guard, self._log_dir, self._warn = guard, log_dir, warn
        self.server_started = False

    def start(self) -> None:
        """Training begins (a ``fit``, or a custom loop's first step)."""
        view = self.system_view
        if view is not None and not view.running and self._guard.disabled is None and self._log_dir.problem is None:
            if self._prime_writer is not None:
                self._prime_writer()
            view.resume()
        if self.server_port is not None and not self.server_started:
            self.server_started = True
            try:
                self._start_server(self.server_port)
            except Exception as err:  # noqa: BLE001 - on-demand capture is optional; training goes on
                self._warn("profiler_server", f"the profiler server could not start on port "
                                              f"{self.server_port} ({type(err).__name__}: {err})")

    def pause(self) -> None:
        """Training ended (``fit`` ended, or ``close()``): the system view pauses and writes its record."""
        if self.system_view is not None:
            self.system_view.pause()
