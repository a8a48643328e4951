"""The long-job half of ``BottleneckProfiler``: step-time statistics per period (scalars and
the trend file), the trend file's updates, the slowdown that came too late, and holding the
slowdown trigger while an analysis runs. A mixin of
:class:`~tfbneck_plugin.capture.callback.BottleneckProfiler` (it uses the callback's
``tracker``, ``trend``, ``windows``, ``_analysis``, ``_warn``...), kept apart so that each
module stays readable. Imports no TensorFlow itself (the scalars go through
:meth:`.background.BackgroundAnalysis.write_values`).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from ..records import Outcome
from .arguments import logger
from .background import BackgroundAnalysis
from .summaries import period_scalars
from .tracker import StepTracker
from .trend import JobTrend
from .window import WindowRecord


class LongJobMixin:
    """Methods of ``BottleneckProfiler`` about step times and slowdowns (module docstring)."""

    #: The process's CPU time (s) at the current period's start; None before the first period ends.
    _period_cpu_s: Optional[float] = None

    # What the methods read of the callback, set in BottleneckProfiler.__init__ (annotations
    # only: they tell the type checker, they create nothing).
    tracker: StepTracker
    trend: JobTrend
    windows: List[WindowRecord]
    write_step_times: bool
    _period_first: int
    _log_dir_problem: Optional[str]
    _disabled: Optional[str]
    _analysis: BackgroundAnalysis
    _hold_lock: threading.Lock
    analyze: object  # False, "process" or "thread"
    _warn: Callable[..., None]

    def _flush_step_times(self, upto: int, epoch: Optional[int]) -> None:
        """The period ending at step ``upto`` is over: its p50/p90 go to the scalars and
        the trend file (nothing when no step of it was timed)."""
        tr = self.tracker
        tr.flush_due = False
        stats = tr.timer.take_period()
        first, self._period_first = self._period_first, upto + 1
        # The process's CPU time per step over the period: the code's own cost, which a busy
        # machine changes far less than the wall time (compare tells load from code with it).
        cpu_s, self._period_cpu_s = self._period_cpu_s, time.process_time()
        if stats is None or self._log_dir_problem is not None or upto < first:
            return
        point = {"step": upto, "first_step": first, "epoch": epoch, **stats, "t_unix_ns": time.time_ns()}
        if cpu_s is not None:
            point["cpu_ms"] = round(1e3 * (self._period_cpu_s - cpu_s) / (upto - first + 1), 4)
        self.trend.spe, self.trend.baseline = tr.spe, tr.timer.baseline()
        self.trend.add_point(point)
        if self.write_step_times:
            self._analysis.write_values(period_scalars(stats), step=upto)

    def _slowdowns_at_end(self, why: str) -> None:
        """Training ended (``why``): what the slowdown trigger saw and did not capture is told
        once more (:meth:`_cpu_taken_summary`, :meth:`_slowdown_too_late`)."""
        self._cpu_taken_summary()
        self._slowdown_too_late(why)

    def _slowdown_too_late(self, why: str) -> None:
        """Training ends while the steps are slow, before the trigger's thresholds were all
        met: recorded as a triggered window that came too late (``windows``, the trend file
        and one warning), so the slowdown is not silently lost."""
        run = self.tracker.timer.unfinished_run()
        if run is None or self._disabled is not None:
            return
        span = tuple(run["slow_steps"])
        note = (f"{why} while the steps were slow ({run['observed_p50_ms']:.3g} ms/step against a baseline of "
                f"{run['baseline_p50_ms']:.3g} ms for {run['slow_step_count']} steps, {run['slow_for_s']:.3g} s, "
                f"from step {span[0]}) before the slowdown trigger's thresholds were met: too late to profile it")
        rec = WindowRecord(index=len(self.windows), requested=[span], status="skipped", reason=note,
                           closed_by="too_late", steps=span, kind="triggered",
                           trigger=dict(run, outcome=Outcome.TOO_LATE.value, note=note))
        self.windows.append(rec)
        self._warn("too_late", note)
        self._write_trend()

    def _cpu_taken_summary(self) -> None:
        """One line at the end for all the slow stretches left uncaptured because other
        processes took the CPU, when there were several: only the first had its own warning
        (one per kind), and the user who expected a capture should not have to open the
        trend file to learn that more were refused."""
        state = self.tracker.timer.trigger_state()
        refused = [e for e in (state or {}).get("log", [])
                   if e.get("outcome") == Outcome.CPU_TAKEN]
        if len(refused) < 2:
            return
        spans = ", ".join(f"{e['first_step']}-{e['last_step']}" for e in refused[:8])
        more = f" and {len(refused) - 8} more" if len(refused) > 8 else ""
        self._warn("slowdown:cpu_taken_all", f"{len(refused)} slow stretches were not profiled because other "
                                             f"processes took the CPU (steps {spans}{more}); each one's figures are "
                                             f"in trigger_state.log of {self.trend.path}. To capture them anyway: "
                                             f"on_slowdown=SlowdownTrigger(cpu_check=False)")

    def _write_trend(self) -> None:
        if self._log_dir_problem is None:
            self.trend.write()

    def _hold(self, delta: int) -> None:
        """An analysis starts (+1) or ends (-1): while one runs in a thread of the training
        process (``analyze="thread"``), the slowdown trigger waits: it competes with training
        for the GIL and the CPU, and a slowdown it causes is ours. An analysis in a child
        process (the default) holds nothing: the child runs at ``nice`` 10 and yields the CPU
        to training, and on a busy machine it is starved for tens of seconds, which held the
        trigger through a whole slowdown (the slowdown corpus's steady runs, scheduled window
        and analysis included, show no capture without the hold)."""
        if self.analyze != "thread":
            return
        with self._hold_lock:
            self.tracker.timer.holds = max(0, self.tracker.timer.holds + delta)

    def _on_report(self, rec: WindowRecord) -> None:
        """Analysis thread: ``rec.report`` is set; what changed since the previous window."""
        try:
            self.trend.changes()
        except Exception:  # noqa: BLE001 - the trend is a convenience: never disturb the analysis
            logger.debug("tfbneck: computing the verdict change failed", exc_info=True)

    def _on_analysis_done(self, rec: WindowRecord) -> None:
        """Analysis thread: the window's analysis ended (however it ended)."""
        self._hold(-1)
        try:
            self._write_trend()
        except Exception:  # noqa: BLE001
            logger.debug("tfbneck: writing the trend failed", exc_info=True)

def trigger_outcome(trigger: Dict, closed_by: str, window: Tuple[int, int], markers) -> None:
    """Say in a triggered window's ``trigger`` whether it captured what it was opened for:
    ``captured``, ``partial`` (training ended inside it) or ``too_late`` (no step recorded)."""
    want = window[1] - window[0] + 1
    got = sum(b - a + 1 for a, b in markers)
    if closed_by == "completed":
        trigger["outcome"] = Outcome.CAPTURED.value
    elif markers:
        trigger["outcome"] = Outcome.PARTIAL.value
        trigger["note"] = f"{closed_by.replace('_', ' ')} after {got} of the {want} steps of the window"
    else:
        trigger["outcome"] = Outcome.TOO_LATE.value
        trigger["note"] = f"{closed_by.replace('_', ' ')} before a step of the window was recorded: too late"
