"""Step timing on every step, and the slowdown trigger: pure Python, no TensorFlow, no
profiler (issue 15).

:class:`StepTimer` is ticked by :class:`~tfbneck_plugin.capture.tracker.StepTracker` at the
beginning of every step (Keras' ``on_train_batch_begin``, once per execution when
``steps_per_execution`` > 1; ``profiler.step()`` in custom loops). The time between two
consecutive ticks (``time.perf_counter``, a monotonic clock) is the duration of the step
that began at the first: its compute *and* its wait for the next batch, since Keras (and a
custom loop's ``for x in ds``) fetches the input inside that interval. It keeps:

* per period (an epoch, or every N steps), the step times for the ``p50``/``p90`` scalars
  and the trend file;
* a **baseline**: the step times of the last :attr:`SlowdownTrigger.horizon_steps` clean
  steps, whose median (p50) and 90th percentile (p90) are recomputed every
  :data:`RECOMPUTE_EVERY` steps;
* the **slow run**: consecutive steps slower than ``max(factor * p50, p90)`` of the
  baseline. The baseline is frozen while a run lasts (so a slowdown cannot teach the
  baseline that it is normal before it is caught); a run of at least ``consecutive`` steps
  lasting at least ``min_seconds`` fires the trigger.

A step is *not timed* (it is in no statistic) when the callback did work at its beginning
(a profiling window open, a step marker, a window opening or closing: the profiler slows
those steps), when it is the first of an epoch or of a ``fit`` (no earlier tick in the same
epoch: the gap holds validation and epoch-end callbacks), or when it is one of the first
``warmup_steps`` timed steps of the job (tf.function tracing and compilation, cache and
tf.data autotuner warm-up). While a window's background analysis runs (:attr:`holds` > 0)
the trigger does not fire: on a small machine the analysis competes with training for the
CPU, and a slowdown it causes is ours. A slow run that qualified meanwhile fires at the
first slow step after the analysis ended; if the steps are fast again by then, the run
ends there as jitter does.

Why these thresholds (measured on this project's 2-core test machine, 3,000 steps of a
small Keras model, under ``shared/tools/under-load -j 1``): the longest run of consecutive
steps above ``max(1.5 * p50, p90)`` of the previous 200 steps was 5 steps (0.8 ms steps)
and 11 steps (11 ms steps), i.e. well under 0.2 s; without the p90 term, runs of 31 steps
above ``1.3 * p50`` occurred. The defaults (20 steps and 5 s) leave a wide margin.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

#: The baseline's p50/p90 are recomputed every this many clean steps (sorting the horizon,
#: ~20 us for 256 values, amortised to well under 1 us per step).
RECOMPUTE_EVERY = 16
#: The baseline needs this many steps before the trigger is armed.
MIN_BASELINE_STEPS = 50
#: At most this many step times are kept per period; beyond, every other one is dropped
#: (the percentiles of a long period stay right, memory stays bounded).
MAX_PERIOD_SAMPLES = 100_000

#: :meth:`StepTimer.tick` results.
NOTHING, FIRED = 0, 1

_clock = time.perf_counter


@dataclass(frozen=True)
class SlowdownTrigger:
    """When ``BottleneckProfiler(on_slowdown=...)`` opens a profiling window by itself.

    Args:
      factor: a step is slow when it takes more than ``factor`` times the baseline's
        median step time (and more than the baseline's 90th percentile, so that a job
        whose step times are noisy needs a larger departure). Default 1.5.
      consecutive: this many consecutive slow steps ... (default 20)
      min_seconds: ... lasting at least this many seconds open a window (default 5.0;
        steps of a few ms are slow together for tens of ms when another process takes the
        CPU: a window opens for a slowdown, not for a scheduling hiccup).
      window_steps: steps profiled by a window it opens (default 5).
      cooldown_steps: after a window opened by the trigger, no other one for this many
        steps (default 500); the baseline meanwhile learns the new normal.
      max_captures: at most this many windows opened by the trigger per profiler (default 3).
      horizon_steps: the baseline holds the last this many timed steps (default 256).
      warmup_steps: the first this many timed steps of the job are not timed (default 20).

    Raises:
      ValueError: a value out of range (the message says what to pass).
    """
    factor: float = 1.5
    consecutive: int = 20
    min_seconds: float = 5.0
    window_steps: int = 5
    cooldown_steps: int = 500
    max_captures: int = 3
    horizon_steps: int = 256
    warmup_steps: int = 20

    def __post_init__(self):
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) or not self.factor > 1:
            raise ValueError(f"SlowdownTrigger(factor={self.factor!r}): pass a number above 1, e.g. 1.5 "
                             f"(steps 50% slower than the baseline)")
        if isinstance(self.min_seconds, bool) or not isinstance(self.min_seconds, (int, float)) \
                or self.min_seconds < 0:
            raise ValueError(f"SlowdownTrigger(min_seconds={self.min_seconds!r}): pass seconds >= 0, e.g. 5.0")
        for name, low in (("consecutive", 1), ("window_steps", 1), ("cooldown_steps", 0), ("max_captures", 1),
                          ("horizon_steps", MIN_BASELINE_STEPS), ("warmup_steps", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"SlowdownTrigger({name}={v!r}): pass an int >= {low}")

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
                     f"SlowdownTrigger(factor=1.5, consecutive=20, ...)")


def percentile(sorted_values: List[float], q: float) -> float:
    """The ``q`` quantile (0-1) of an ascending list, by linear interpolation between the
    closest ranks (numpy's default method). Raises IndexError on an empty list."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class StepTimer:
    """Times every step and watches for a slowdown (module docstring).

    Args:
      trigger: the slowdown thresholds, or None to time steps only.
      warmup_steps: steps not timed at the start of the job (default: the trigger's, else 20).
      clock: seconds from a monotonic clock (default ``time.perf_counter``).

    Attributes:
      holds: analyses running now (set by the callback's analysis threads); while above 0,
        the trigger does not fire.
      captures: windows the trigger opened so far.
      fired: what the last firing saw (:meth:`_fire`'s dict), until the next one.
    """

    def __init__(self, trigger: Optional[SlowdownTrigger] = None, warmup_steps: Optional[int] = None,
                 clock=_clock):
        self.trigger = trigger
        self._clock = clock
        self.holds = 0
        self.captures = 0
        self.fired: Optional[Dict] = None
        self._warm = (trigger.warmup_steps if trigger else 20) if warmup_steps is None else warmup_steps
        self._prev: Optional[float] = None   # clock at the previous tick
        self._prev_first = self._prev_last = 0  # the step that began then
        self._dirty = False                  # the callback worked at the previous tick
        self._period: List[float] = []
        horizon = trigger.horizon_steps if trigger else 0
        self._ring: List[float] = [0.0] * horizon
        self._ring_n = self._ring_i = self._since = 0
        self.p50: Optional[float] = None     # baseline, seconds
        self.p90: Optional[float] = None
        self._threshold = float("inf")       # armed when finite
        self._next_allowed = 0               # first step the trigger may fire at (cooldown)
        self._run: List[float] = []          # the slow run's step times (s)
        self._run_start = 0.0
        self._run_first = self._run_last = 0

    # -- every step (hot path) ------------------------------------------------------------
    def tick(self, first: int, last: int) -> int:
        """Step ``first..last`` begins now: time the step that began at the previous tick.

        Returns:
          :data:`FIRED` when that step completed a slow run (:attr:`fired` says what was
          seen; the caller opens a window at this step), else :data:`NOTHING`.
        """
        now = self._clock()
        prev, pfirst, plast = self._prev, self._prev_first, self._prev_last
        self._prev, self._prev_first, self._prev_last = now, first, last
        if prev is None or self._dirty:
            self._dirty = False
            return NOTHING
        if self._warm:
            self._warm -= 1
            return NOTHING
        dt = now - prev
        period = self._period
        period.append(dt)
        if len(period) > MAX_PERIOD_SAMPLES:
            del period[::2]
        if self.trigger is None:
            return NOTHING
        if dt > self._threshold:
            if not self._run:
                self._run_start, self._run_first = prev, pfirst
            self._run.append(dt)
            self._run_last = plast
            trig = self.trigger
            if len(self._run) >= trig.consecutive and now - self._run_start >= trig.min_seconds and not self.holds:
                return self._fire(now, first)
            return NOTHING
        if self._run:
            self._end_run()
        self._push(dt)
        return NOTHING

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
        """The baseline now: ``{"p50_ms", "p90_ms", "steps", "threshold_ms"}`` (threshold
        None while the trigger is not armed), or None before it exists."""
        p50, p90 = self.p50, self.p90
        if p50 is None or p90 is None:
            return None
        thr = self._threshold if self._threshold != float("inf") else None
        return {"p50_ms": round(1e3 * p50, 4), "p90_ms": round(1e3 * p90, 4),
                "steps": min(self._ring_n, len(self._ring)),
                "threshold_ms": round(1e3 * thr, 4) if thr is not None else None}

    def unfinished_run(self) -> Optional[Dict]:
        """Training ends: the slow run in progress, when it already has ``consecutive``
        steps and at least half of ``min_seconds`` (a slowdown, only not long enough yet);
        then it is dropped. Returns a dict as :attr:`fired` (without ``capture``), or None."""
        trig, run = self.trigger, self._run
        if trig is None or not run or len(run) < trig.consecutive:
            return None
        spent = self._prev - self._run_start if self._prev is not None else sum(run)
        if spent < trig.min_seconds / 2:
            return None
        out = self._describe(self._prev_first, spent)
        out.pop("capture")
        self._end_run()
        return out

    # -- baseline and trigger -------------------------------------------------------------
    def _push(self, dt: float) -> None:
        ring = self._ring
        ring[self._ring_i] = dt
        self._ring_i = (self._ring_i + 1) % len(ring)
        self._ring_n += 1
        self._since += 1
        if self._since >= RECOMPUTE_EVERY:
            self._recompute()

    def _recompute(self) -> None:
        self._since = 0
        n = min(self._ring_n, len(self._ring))
        if n < MIN_BASELINE_STEPS:
            return
        values = sorted(self._ring[:n])
        p50, p90 = percentile(values, 0.5), percentile(values, 0.9)
        self.p50, self.p90 = p50, p90
        trig = self.trigger
        if trig is None:  # no trigger: the ring stays empty and this is never reached
            return
        armed = self.captures < trig.max_captures and self._prev_first >= self._next_allowed
        self._threshold = max(trig.factor * p50, p90) if armed else float("inf")

    def _end_run(self) -> None:
        """A slow run ended before firing (jitter): its steps join the baseline."""
        run, self._run = self._run, []
        for dt in run:
            self._push(dt)

    def _describe(self, at_step: int, spent: float) -> Dict:
        """What the slow run shows (the sidecar's ``window.trigger``, records.py)."""
        run = sorted(self._run)
        observed = percentile(run, 0.5)
        p50, p90 = self.p50 or 0.0, self.p90 or 0.0  # set: the threshold that fired comes from them
        thresholds = self.trigger.to_dict() if self.trigger is not None else None
        return {"kind": "slowdown", "detected_at_step": at_step, "detected_unix_ns": time.time_ns(),
                "slow_steps": [self._run_first, self._run_last], "slow_step_count": len(run),
                "slow_for_s": round(spent, 3), "observed_p50_ms": round(1e3 * observed, 4),
                "baseline_p50_ms": round(1e3 * p50, 4), "baseline_p90_ms": round(1e3 * p90, 4),
                "baseline_steps": min(self._ring_n, len(self._ring)),
                "threshold_ms": round(1e3 * self._threshold, 4),
                "slower_by": round(observed / self.p50, 3) if self.p50 else None,
                "capture": self.captures, "thresholds": thresholds}

    def _fire(self, now: float, first: int) -> int:
        trig = self.trigger
        assert trig is not None  # only a trigger fires
        self.captures += 1
        self.fired = self._describe(first, now - self._run_start)
        self._next_allowed = first + trig.window_steps + trig.cooldown_steps
        self._threshold = float("inf")
        self._end_run()  # the slow steps are the new normal: the baseline learns them
        return FIRED
