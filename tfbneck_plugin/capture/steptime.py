"""Step timing on every step, and the slowdown trigger's thresholds: pure Python, no
TensorFlow, no profiler.

:class:`StepTimer` is ticked by :class:`~tfbneck_plugin.capture.tracker.StepTracker` at the
beginning of every step (Keras' ``on_train_batch_begin``, once per execution when
``steps_per_execution`` > 1; ``profiler.step()`` in custom loops). The time between two
consecutive ticks (``time.perf_counter``, a monotonic clock) is the duration of the step
that began at the first: its compute *and* its wait for the next batch, since Keras (and a
custom loop's ``for x in ds``) fetches the input inside that interval. It keeps, per period
(an epoch, or every N steps), the step times for the ``p50``/``p90`` scalars and the trend
file, and feeds every timed step to the slowdown trigger
(:class:`~tfbneck_plugin.capture.slowwatch.SlowdownWatch`: the baseline, the slow stretch,
its confirmation and the trigger's log).

A step is *not timed* (it is in no statistic) when the callback did work at its beginning
(a profiling window open, a step marker, a window opening or closing: the profiler slows
those steps), when it is the first of an epoch or of a ``fit`` (no earlier tick in the same
epoch: the gap holds validation and epoch-end callbacks), or when it is one of the first
``warmup_steps`` batches of the job (tf.function tracing and compilation, cache and
tf.data autotuner warm-up). While a window's background analysis runs (:attr:`StepTimer.holds`
> 0) the trigger does not fire: the analysis competes with training for the CPU, and a
slowdown it causes is ours; a stretch confirmed meanwhile fires at its first step after.

The defaults of :class:`SlowdownTrigger` were chosen on the fit half of the scenario corpus
(``benchmarks/slowdown_corpus.py``, real Keras 3, tf-keras and custom-loop fits on a 2-core
machine, idle and under ``benchmarks/under_load.sh``) and judged on the other half; the table
and the limits are in ``docs/slowdown_capture.md``.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from .cpu_taken import CpuTaken
from .slowwatch import MIN_BASELINE_STEPS, SlowdownWatch
from .steplevel import percentile

__all__ = ["SlowdownTrigger", "StepTimer", "as_trigger", "percentile", "MIN_BASELINE_STEPS", "NOTHING", "FIRED", "NOTICE"]

#: At most this many step times are kept per period; beyond, every other one is dropped
#: (the percentiles of a long period stay right, memory stays bounded).
MAX_PERIOD_SAMPLES = 100_000

#: :meth:`StepTimer.tick` results.
NOTHING, FIRED, NOTICE = 0, 1, 2  # NOTICE: a slow stretch not captured, for the user (SlowdownWatch.notice)

_clock = time.perf_counter


@dataclass(frozen=True)
class SlowdownTrigger:
    """When ``BottleneckProfiler(on_slowdown=...)`` opens a profiling window by itself.

    A *slow stretch* begins when the level of the last few steps (about 0.5 s of them, 5 to
    31 steps; their mean without the largest tenth) rises above ``factor`` times the
    baseline's level; a few fast steps inside it do not end it. It is *confirmed* (a window opens) when it has lasted
    ``consecutive`` steps and ``min_seconds``, or ``quick_steps`` steps and
    ``quick_seconds`` (jobs of short steps are confirmed sooner).

    Args:
      factor: how much slower than the baseline's level (its trimmed mean,
        :func:`~tfbneck_plugin.capture.steplevel.trimmed_mean`) a stretch must be (default 1.5:
        between the highest factor at which a busy machine alone held a steady run of the
        slowdown corpus long enough to open a window, about 1.13, and the factor up to which
        every required phase was still captured, 1.75 on the judge half and 2.0 on the fit half,
        whose choice between them is 1.5: docs/slowdown_capture.md, "Choosing the factor").
      consecutive: the fewest steps a stretch needs, fast ones inside it included (default 5).
      min_seconds: ... and how long it must last (default 3 s). quick_steps, quick_seconds:
        or this many steps lasting this long (defaults 300 steps, 2.0 s: a stretch of slow steps
        under 6.7 ms is confirmed after 2 s; 300 steps of 10 ms take min_seconds), except on a
        machine other processes keep busy (min_seconds then: slowwatch's docstring). The three
        are chosen together by replaying the recorded step times of the fit half of the
        slowdown corpus (docs/slowdown_capture.md): the best recall, then the shortest delay,
        with no capture in its steady runs even at half these seconds; on the next pass's judge
        half they captured every required phase with no capture in a steady run. (On a machine
        kept busy by other processes a job of 1-2 ms steps runs 1.5-2x slower for 1-2 s at a
        time; the earlier 1.5 s and 300 steps fired on that in steady runs.)
      window_steps: steps profiled by a window it opens (default 5) ...
      window_seconds: ... and at least this long at the slow stretch's median step time
        (default 0.1 s; capped by the profiler's ``max_window_steps``). A window of 5 steps
        of a job of 1-2 ms steps lasts 5-10 ms, less than the input pipeline's prefetch
        buffers hold: its steps are served from the buffer and read as Python overhead (4
        of the 5 input slowdowns of 1 ms steps in the slowdown corpus did so with 5-step
        windows; docs/slowdown_capture.md). For steps of 20 ms or more it changes nothing.
      cooldown_steps: after a window opened by the trigger, a confirmed stretch waits this
        many steps more (default 100); the baseline meanwhile learns the new level.
      max_captures: at most this many windows opened by the trigger per profiler (default 3).
      horizon_steps: the baseline holds at most the last this many clean steps (default 2048:
        2 s of a job of 1 ms steps, whose step time follows the machine's load from second
        to second; 256 steps, a quarter second, made a quiet moment its baseline).
      warmup_steps: the first this many batches of the job are not timed (default 20; with
        ``steps_per_execution`` k, the first ceil(20 / k) executions).
      cpu_check: whether a stretch during which other processes took the job's cores is left
        uncaptured (default True: :mod:`~tfbneck_plugin.capture.cpu_taken`; a profile of the
        job cannot show another process's work). False captures it like any other: for a
        job whose slowdowns are waits (storage, network) on a machine others keep busy,
        which the check cannot tell from cores taken (its docstring).

    Raises:
      ValueError: a value out of range (the message says what to pass).
    """
    factor: float = 1.5
    consecutive: int = 5
    min_seconds: float = 3.0
    window_steps: int = 5
    window_seconds: float = 0.1
    cooldown_steps: int = 100
    max_captures: int = 3
    horizon_steps: int = 2048
    warmup_steps: int = 20
    quick_steps: int = 300
    quick_seconds: float = 2.0
    cpu_check: bool = True

    def __post_init__(self):
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) or not self.factor > 1:
            raise ValueError(f"SlowdownTrigger(factor={self.factor!r}): pass a number above 1, e.g. 1.5 "
                             f"(steps 50% slower than the baseline)")
        for name in ("min_seconds", "quick_seconds", "window_seconds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"SlowdownTrigger({name}={v!r}): pass seconds >= 0, e.g. 1.5")
        for name, low in (("consecutive", 1), ("window_steps", 1), ("cooldown_steps", 0), ("max_captures", 1),
                          ("horizon_steps", MIN_BASELINE_STEPS), ("warmup_steps", 0), ("quick_steps", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"SlowdownTrigger({name}={v!r}): pass an int >= {low}")
        if not isinstance(self.cpu_check, bool):
            raise ValueError(f"SlowdownTrigger(cpu_check={self.cpu_check!r}): pass True or False")

    def to_dict(self) -> Dict:
        """The thresholds, as recorded in the sidecar and the trend file."""
        return asdict(self)


def as_trigger(on_slowdown) -> Optional[SlowdownTrigger]:
    """``BottleneckProfiler(on_slowdown=...)``: False/None (off), True (defaults) or a
    :class:`SlowdownTrigger`.

    Raises:
      ValueError: anything else.
    """
    if on_slowdown is None or on_slowdown is False:
        return None
    if on_slowdown is True:
        return SlowdownTrigger()
    if isinstance(on_slowdown, SlowdownTrigger):
        return on_slowdown
    raise ValueError(f"on_slowdown={on_slowdown!r}: pass True (default thresholds), False, or "
                     f"SlowdownTrigger(factor=1.5, min_seconds=1.5, ...)")


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
      holds: analyses running now (set by the callback's analysis threads); while above 0,
        the trigger does not fire.
      watch: the trigger's state (:class:`~.slowwatch.SlowdownWatch`), None without a trigger.
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
        """What the last firing saw (:meth:`.slowwatch.SlowdownWatch.describe`), until the next."""
        return self.watch.fired if self.watch else None

    @property
    def p50(self) -> Optional[float]:
        return self.watch.p50 if self.watch else None

    @property
    def p90(self) -> Optional[float]:
        return self.watch.p90 if self.watch else None

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
        w = self.watch
        if w is None or w.p50 is None or w.p90 is None or w.mean is None:
            return None
        return {"p50_ms": round(1e3 * w.p50, 4), "p90_ms": round(1e3 * w.p90, 4), "mean_ms": round(1e3 * w.mean, 4),
                "steps": len(w._ring),
                "threshold_ms": round(1e3 * w._slow_at, 4) if w.armed else None}

    def trigger_state(self) -> Optional[Dict]:
        """The trend file's ``trigger_state``: ``{"armed", "captures", "short_runs", "log"}``
        (records.py), or None without a trigger."""
        w = self.watch
        if w is None:
            return None
        return {"armed": w.armed, "captures": w.captures, "short_runs": w.short_runs, "log": list(w.log)}

    def unfinished_run(self) -> Optional[Dict]:
        """Training ends: the slow stretch in progress, when it already has ``consecutive``
        steps and half the time its confirmation needs (a slowdown, only not long enough
        yet); then it is dropped. Returns a dict as :attr:`fired` (without ``capture``), or None."""
        if self.trigger is None or self.watch is None:
            return None
        return self.watch.unfinished(self._prev_first, self._prev)
