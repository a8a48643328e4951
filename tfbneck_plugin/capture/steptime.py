"""Step timing on every step, which feeds the slowdown trigger: pure Python, no TensorFlow,
no profiler.

:class:`StepTimer` is ticked by :class:`~tfbneck_plugin.capture.tracker.StepTracker` at the
beginning of every step (Keras' ``on_train_batch_begin``, once per execution when
``steps_per_execution`` > 1; ``profiler.step()`` in custom loops). The time between two
consecutive ticks (``time.perf_counter``, a monotonic clock) is the duration of the step
that began at the first: its compute *and* its wait for the next batch, since Keras (and a
custom loop's ``for x in ds``) fetches the input inside that interval. It keeps, per period
(an epoch, or every N steps), the step times for the ``p50``/``p90`` scalars and the trend
file, and feeds every timed step to the slowdown trigger
(:class:`~tfbneck_plugin.capture.slowdown.watch.SlowdownWatch`: the baseline, the slow stretch,
its confirmation and the trigger's log).

A step is *not timed* (it is in no statistic) when the callback did work at its beginning
(a profiling window open, a step marker, a window opening or closing: the profiler slows
those steps), when it is the first of an epoch or of a ``fit`` (no earlier tick in the same
epoch: the gap holds validation and epoch-end callbacks), or when it is one of the first
``warmup_steps`` batches of the job (tf.function tracing and compilation, cache and
tf.data autotuner warm-up). While a window's background analysis runs (:attr:`StepTimer.holds`
> 0) the trigger does not fire: the analysis competes with training for the CPU, and a
slowdown it causes is ours; a stretch confirmed meanwhile fires at its first step after.

The trigger's thresholds are :class:`~.slowdown.thresholds.SlowdownTrigger` (imported here
too); how it decides and how its defaults were chosen: docs/slowdown_trigger.md.
"""
from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional

from .cpu_taken import CpuTaken
from .slowdown.levels import percentile
from .slowdown.thresholds import MIN_BASELINE_STEPS, SlowdownTrigger, as_trigger
from .slowdown.watch import SlowdownWatch

__all__ = ["SlowdownTrigger", "StepTimer", "TriggerHold", "as_trigger", "percentile", "MIN_BASELINE_STEPS",
           "NOTHING", "FIRED", "NOTICE"]

#: At most this many step times are kept per period; beyond, every other one is dropped
#: (the percentiles of a long period stay right, memory stays bounded).
MAX_PERIOD_SAMPLES = 100_000

#: :meth:`StepTimer.tick` results.
NOTHING, FIRED, NOTICE = 0, 1, 2  # NOTICE: a slow stretch not captured, for the user (SlowdownWatch.notice)

_clock = time.perf_counter


class StepTimer:
    """Times every step and feeds the slowdown trigger (module docstring).

    Args:
      trigger: the slowdown thresholds, or None to time steps only.
      warmup_steps: steps not timed at the start of the job (default: the trigger's, else 20).
      clock: seconds from a monotonic clock (default ``time.perf_counter``).
      cpu: the check that other processes took the job's CPU during a slow stretch
        (:class:`~.cpu_taken.CpuTaken`); by default on with the default clock, off with
        another (a replay or a test passes its own, fed from the same clock).

    Attributes:
      holds: analyses running now (counted by :class:`TriggerHold` from the analysis threads); while above 0,
        the trigger does not fire.
      watch: the trigger's state (:class:`~.slowdown.watch.SlowdownWatch`), None without a trigger.
    """

    def __init__(self, trigger: Optional[SlowdownTrigger] = None, warmup_steps: Optional[int] = None,
                 clock=_clock, cpu: Optional[CpuTaken] = None):
        self.trigger = trigger
        if cpu is None and clock is _clock:
            cpu = CpuTaken()
        self.watch: Optional[SlowdownWatch] = SlowdownWatch(trigger, cpu) if trigger else None
        self._clock = clock
        self.holds = 0
        self._warm = (trigger.warmup_steps if trigger else 20) if warmup_steps is None else warmup_steps
        self._prev: Optional[float] = None   # clock at the previous tick
        self._prev_first = self._prev_last = 0  # the step that began then
        self._dirty = False                  # the callback worked at the previous tick
        self._period: List[float] = []
        self._told: Optional[Dict] = None    # the watch's notice NOTICE was returned for

    @property
    def captures(self) -> int:
        """Windows the trigger opened so far."""
        return self.watch.captures if self.watch else 0

    @property
    def fired(self) -> Optional[Dict]:
        """What the last firing saw (:meth:`.slowdown.watch.SlowdownWatch.describe`), until the next."""
        return self.watch.fired if self.watch else None

    @property
    def p50(self) -> Optional[float]:
        """The baseline's median step time (s), None before it exists."""
        return self.watch.baseline.p50 if self.watch else None

    @property
    def p90(self) -> Optional[float]:
        """The baseline's 90th percentile step time (s), None before it exists."""
        return self.watch.baseline.p90 if self.watch else None

    # -- every step (hot path) ------------------------------------------------------------
    def tick(self, first: int, last: int) -> int:
        """Step ``first..last`` begins now: time the step that began at the previous tick.

        Returns:
          :data:`FIRED` when the trigger fired on that step (:attr:`fired` says what was
          seen; the caller opens a window at this step), else :data:`NOTHING`.
        """
        now = self._clock()
        prev, pfirst, plast = self._prev, self._prev_first, self._prev_last
        self._prev, self._prev_first, self._prev_last = now, first, last
        if prev is None or self._dirty or self._warm > 0:
            # Untimed steps still sample the CPU: the trigger's baseline asks whether the
            # machine is busy as soon as it could arm (SlowdownWatch._machine_busy).
            if self.watch is not None and self.watch.cpu is not None:
                self.watch.cpu.tick(now)
            if prev is not None and not self._dirty:
                # Warm-up counts batches: with steps_per_execution a step is an execution, and 20
                # executions of 8 batches kept the trigger blind for the first seconds of a fit.
                self._warm -= max(plast - pfirst + 1, 1)
            self._dirty = False
            return NOTHING
        dt = now - prev
        period = self._period
        period.append(dt)
        if len(period) > MAX_PERIOD_SAMPLES:
            del period[::2]
        if self.trigger is None or self.watch is None:
            return NOTHING
        watch = self.watch
        if watch.step(dt, pfirst, plast, prev, now, self.holds > 0, first):
            return FIRED
        if watch.notice is None or watch.notice is self._told:
            return NOTHING
        self._told = watch.notice
        return NOTICE  # once per notice

    def not_timed(self) -> None:
        """The callback works at the step that began at the last tick (a window, a marker, a
        scalar write): that step is not timed."""
        self._dirty = True

    def restart(self) -> None:
        """An epoch or a ``fit`` begins: the next step has no timed predecessor."""
        self._prev = None

    # -- periods ----------------------------------------------------------------------------
    def take_period(self) -> Optional[Dict]:
        """The statistics of the steps timed since the last call, then starts a new period.

        Returns:
          ``{"n": steps timed, "p50_ms", "p90_ms", "mean_ms"}``, or None when no step was
          timed (all were warm-up or inside windows).
        """
        values, self._period = self._period, []
        if not values:
            return None
        values.sort()
        return {"n": len(values), "p50_ms": round(1e3 * percentile(values, 0.5), 4),
                "p90_ms": round(1e3 * percentile(values, 0.9), 4),
                "mean_ms": round(1e3 * sum(values) / len(values), 4)}

    def baseline(self) -> Optional[Dict]:
        """The baseline now: ``{"p50_ms", "p90_ms", "mean_ms", "steps", "threshold_ms"}``
        (``mean_ms``: its trimmed mean, which the threshold multiplies; threshold None while
        the trigger is not armed), or None before it exists."""
        return self.watch.baseline.record() if self.watch is not None else None

    def trigger_state(self) -> Optional[Dict]:
        """The trend file's ``trigger_state``: ``{"armed", "captures", "short_runs", "log"}``
        (records.py), or None without a trigger."""
        return self.watch.state() if self.watch is not None else None

    def unfinished_run(self) -> Optional[Dict]:
        """Training ends: the slow stretch in progress, when it already has ``consecutive``
        steps and half the time its confirmation needs (a slowdown, only not long enough
        yet); then it is dropped. Returns a dict as :attr:`fired` (without ``capture``), or None."""
        if self.trigger is None or self.watch is None:
            return None
        return self.watch.unfinished(self._prev_first, self._prev)


class TriggerHold:
    """Holds the slowdown trigger while analyses run in the training process
    (``analyze="thread"``): such an analysis competes with training for the GIL and the CPU,
    and a slowdown it causes is ours. An analysis in a child process (the default) holds
    nothing: the child runs at ``nice`` 10 and yields the CPU to training, and on a busy machine
    it is starved for tens of seconds, which held the trigger through a whole slowdown (the
    slowdown corpus's steady runs, scheduled window and analysis included, show no capture
    without the hold).

    Args:
      timer: the step clock whose :attr:`StepTimer.holds` this counts (from analysis threads).
    """

    def __init__(self, timer: StepTimer):
        self._timer = timer
        self._lock = threading.Lock()

    def start(self) -> None:
        """An analysis starts."""
        with self._lock:
            self._timer.holds = max(0, self._timer.holds + 1)

    def end(self) -> None:
        """An analysis ended (however it ended)."""
        with self._lock:
            self._timer.holds = max(0, self._timer.holds - 1)
