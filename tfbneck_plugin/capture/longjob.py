"""A long job's account beside its windows, kept in the step-time trend file
(:class:`.trend.JobTrend`) that the TensorBoard tab draws:

* :class:`StepTimeReporter`: the job's own step time per period (an epoch, or every
  ``step_time_every`` steps): its median and 90th percentile to the trend file and the scalars,
  and the file rewritten as windows close and their analyses end;
* :class:`UncapturedSlowdowns`: when training ends, the slowdowns the trigger saw and did not
  capture (a slow stretch still unconfirmed, stretches refused because other processes took the
  CPU), told once.

No TensorFlow here (the scalars go through a ``write_values`` callable).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from ..records import Outcome
from .controller import WindowRecord
from .safety import logger
from .summaries import period_scalars

if TYPE_CHECKING:
    from .safety import Guard, LogDirState
    from .steptime import StepTimer
    from .tracker import StepTracker
    from .trend import JobTrend


class StepTimeReporter:
    """Writes the step-time statistics of each period and keeps the trend file current.

    Args:
      tracker: the step tracker; its clock (``tracker.timer``) holds the period's step times.
      trend: the trend file.
      log_dir: whether ``log_dir`` can be written (:class:`.safety.LogDirState`): nothing is
        written while it cannot.
      write_values: ``(scalars, step)``: writes TensorBoard scalars (None: no scalars).

    Attributes:
      first: the first step of the current period (1-based batches).
    """

    def __init__(self, tracker: "StepTracker", trend: "JobTrend", log_dir: "LogDirState",
                 write_values: Optional[Callable[[Dict[str, float], int], None]]):
        self._tracker, self._trend, self._log_dir, self._write_values = tracker, trend, log_dir, write_values
        self.first = 1
        self._cpu_s: Optional[float] = None  # the process's CPU time (s) at the period's start

    def end_period(self, upto: int, epoch: Optional[int]) -> None:
        """The period ending at step ``upto`` (of Keras' 0-based ``epoch``, None in custom loops)
        is over: its p50/p90 (ms) go to the trend file and the scalars ``bottleneck/step_time_ms/*``
        at step ``upto``; nothing when no step of it was timed or ``log_dir`` cannot be written."""
        tr = self._tracker
        tr.flush_due = False
        stats = tr.timer.take_period()
        first, self.first = self.first, upto + 1
        # The process's CPU time per step over the period: the code's own cost, which a busy
        # machine changes far less than the wall time (compare tells load from code with it).
        cpu_s, self._cpu_s = self._cpu_s, time.process_time()
        if stats is None or self._log_dir.problem is not None or upto < first:
            return
        point = {"step": upto, "first_step": first, "epoch": epoch, **stats, "t_unix_ns": time.time_ns()}
        if cpu_s is not None:
            point["cpu_ms"] = round(1e3 * (self._cpu_s - cpu_s) / (upto - first + 1), 4)
        self._trend.spe, self._trend.baseline = tr.spe, tr.timer.baseline()
        self._trend.add_point(point)
        if self._write_values is not None:
            self._write_values(period_scalars(stats), upto)

    def write_trend(self) -> None:
        """Rewrite the trend file, unless ``log_dir`` cannot be written."""
        if self._log_dir.problem is None:
            self._trend.write()

    def window_analysed(self, rec: WindowRecord) -> None:
        """Analysis thread: ``rec.report`` is set; what changed since the previous window
        (:meth:`.trend.JobTrend.changes`). Never raises."""
        try:
            self._trend.changes()
        except Exception:  # noqa: BLE001 - the trend is a convenience: never disturb the analysis
            logger.debug("tfbneck: computing the verdict change failed", exc_info=True)

    def analysis_ended(self, rec: WindowRecord) -> None:
        """Analysis thread: the window's analysis ended (however it ended): the trend file
        gets its verdict. Never raises."""
        try:
            self.write_trend()
        except Exception:  # noqa: BLE001
            logger.debug("tfbneck: writing the trend failed", exc_info=True)


class UncapturedSlowdowns:
    """What the slowdown trigger saw and did not capture, told when training ends.

    Args:
      timer: the step clock (:class:`.steptime.StepTimer`) whose trigger is asked.
      windows: the callback's list of :class:`.controller.WindowRecord`: a slowdown that came
        too late is recorded there as a skipped triggered window.
      trend_path: the trend file's path, named in the message about refused stretches.
      guard: nothing is recorded once profiling was turned off (:attr:`.safety.Guard.disabled`).
      warn: ``warn(key, message)``, one warning per kind.
      write_trend: rewrites the trend file (:meth:`StepTimeReporter.write_trend`).
    """

    def __init__(self, timer: "StepTimer", windows: List[WindowRecord], trend_path: str, guard: "Guard",
                 warn: Callable[[str, str], None], write_trend: Callable[[], None]):
        self._timer, self._windows, self._trend_path = timer, windows, trend_path
        self._guard, self._warn, self._write_trend = guard, warn, write_trend

    def at_end(self, why: str) -> None:
        """Training ended (``why``, e.g. ``"training ended"``): the stretches refused for the
        CPU (:meth:`cpu_taken_summary`), then a slowdown in progress (:meth:`too_late`)."""
        self.cpu_taken_summary()
        self.too_late(why)

    def too_late(self, why: str) -> None:
        """Training ends while the steps are slow, before the trigger's thresholds were all
        met: recorded as a triggered window that came too late (``windows``, the trend file
        and one warning), so the slowdown is not silently lost."""
        run = self._timer.unfinished_run()
        if run is None or self._guard.disabled is not None:
            return
        span = tuple(run["slow_steps"])
        note = (f"{why} while the steps were slow ({run['observed_p50_ms']:.3g} ms/step against a baseline of "
                f"{run['baseline_p50_ms']:.3g} ms for {run['slow_step_count']} steps, {run['slow_for_s']:.3g} s, "
                f"from step {span[0]}) before the slowdown trigger's thresholds were met: too late to profile it")
        rec = WindowRecord(index=len(self._windows), requested=[span], status="skipped", reason=note,
                           closed_by="too_late", steps=span, kind="triggered",
                           trigger=dict(run, outcome=Outcome.TOO_LATE.value, note=note))
        self._windows.append(rec)
        self._warn("too_late", note)
        self._write_trend()

    def cpu_taken_summary(self) -> None:
        """One line at the end for all the slow stretches left uncaptured because other
        processes took the CPU, when there were several: only the first had its own warning
        (one per kind), and the user who expected a capture should not have to open the
        trend file to learn that more were refused."""
        state = self._timer.trigger_state()
        refused = [e for e in (state or {}).get("log", [])
                   if e.get("outcome") == Outcome.CPU_TAKEN]
        if len(refused) < 2:
            return
        spans = ", ".join(f"{e['first_step']}-{e['last_step']}" for e in refused[:8])
        more = f" and {len(refused) - 8} more" if len(refused) > 8 else ""
        self._warn("slowdown:cpu_taken_all", f"{len(refused)} slow stretches were not profiled because other "
                                             f"processes took the CPU (steps {spans}{more}); each one's figures are "
                                             f"in trigger_state.log of {self._trend_path}. To capture them anyway: "
                                             f"on_slowdown=SlowdownTrigger(cpu_check=False)")
