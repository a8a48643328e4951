"""The slowdown trigger's baseline: the job's current level of step times, learnt from its
clean steps, and the thresholds a slow (or faster) stretch is judged by. Its rules and their
sources: docs/slowdown_trigger.md ("Baseline", "Back to the usual level")."""
from __future__ import annotations

from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

from .levels import LEVEL_MIN_STEPS, RecentSteps, level_steps, percentile, trimmed_mean
from .thresholds import MIN_BASELINE_STEPS, SlowdownTrigger

#: :data:`MIN_BASELINE_STEPS` steps must last this long together (a job of 1 ms steps arms on
#: 250 steps, not 20: on a busy machine its first steps after warm-up can be off its level by 10x).
MIN_BASELINE_SECONDS = 0.25
#: Or this many steps lasting :data:`LONG_BASELINE_SECONDS`: long steps and executions of
#: ``steps_per_execution`` (on the corpus's steady stretches of 100 ms steps and more, the level
#: of the first 8 steps was as close to the stretch's median as that of the first 20).
LONG_BASELINE_STEPS = 8
LONG_BASELINE_SECONDS = 1.0
#: While other processes (not the profiler's own analysis children) keep at least
#: :data:`BUSY_OTHERS_CORES` busy, a baseline must also last this long: a busy machine swings a
#: job of 1-2 ms steps 1.5-2x for 1-1.5 s at a time (docs/slowdown_capture.md).
BUSY_BASELINE_SECONDS = 2.0
#: Half a core: an idle machine's other processes keep 0-0.1 busy (the corpus's idle runs).
BUSY_OTHERS_CORES = 0.5

#: The statistics are recomputed every this many clean steps, or every 1/16 of the baseline's
#: steps when more (sorting n values every n/16 steps: about 1 us per step).
RECOMPUTE_EVERY = 16
#: A slow stretch within ``factor`` of a level the baseline held in the last this many seconds
#: is the job back at its usual level (30, 60 and 120 s replayed the same on the corpus).
USUAL_SECONDS = 60.0

INF = float("inf")


def ms(seconds: Optional[float]) -> Optional[float]:
    """Seconds as the records' milliseconds (4 decimals); None for None or an unset threshold."""
    return round(1e3 * seconds, 4) if seconds is not None and seconds != INF else None


class Baseline:
    """The clean steps since the last change of level (at most ``horizon_steps``), their level
    and the thresholds, and the levels it held lately.

    Args:
      trigger: the thresholds. recent: the last steps (cleared with the baseline: the slow
        tail of :meth:`_slow_tail` is read from them). busy: () -> whether other processes keep
        the machine busy now. log: adds an entry to the trigger's record (``armed``, ``rebaselined``).

    Attributes:
      p50, p90, mean: its median, 90th percentile and trimmed mean (s); None before it first
        armed, then kept while it is learnt again.
      armed: whether the thresholds hold (``slow_at``, ``fast_at``: ``factor`` x and 1 / ``factor`` x
        ``mean``; ``held_at``: the middle line, sqrt(``factor``) x ``mean``; infinite while not armed).
      k: the steps a level is read over (:func:`~.levels.level_steps`).
      now: the job's clock (s) at the last step (set by the trigger).
      learnt_from: the clock it began learning at (the own-work test's clean steps are since).
    """

    def __init__(self, trigger: SlowdownTrigger, recent: RecentSteps, busy: Callable[[], bool],
                 log: Callable[[Dict], None]) -> None:
        self.trigger, self.recent, self._busy, self._log = trigger, recent, busy, log
        self.p50: Optional[float] = None
        self.mean: Optional[float] = None
        self.p90: Optional[float] = None
        self.now = 0.0
        # (clock, trimmed mean) at each recompute over the last USUAL_SECONDS + min_seconds,
        # but for a slow level a capture (or max_captures) left: never a usual level.
        self.levels: Deque[Tuple[float, float]] = deque()
        self.after_slowdown = False
        self.reset()

    def reset(self) -> None:
        """Forget the steps (and the recent ones); the thresholds are off until it arms again."""
        self.ring: List[float] = []
        self._ring_i = self._since = 0
        self.k = LEVEL_MIN_STEPS
        self.recent.clear()
        self.slow_at = self.fast_at = self.held_at = INF
        self.learnt_from = self.now
        self.armed = False

    def beyond(self, step_s: float, slow: bool) -> bool:
        """Whether a step time (or a level) is beyond the threshold on a stretch's side."""
        return step_s > self.slow_at if slow else step_s < self.fast_at

    def push(self, dt: float, step: int) -> None:
        """A clean step of ``dt`` s, beginning at batch ``step``."""
        ring, horizon = self.ring, self.trigger.horizon_steps
        if len(ring) < horizon:
            ring.append(dt)
        else:
            ring[self._ring_i] = dt
            self._ring_i = (self._ring_i + 1) % horizon
        self._since += 1
        if self._since >= max(RECOMPUTE_EVERY, len(ring) // 16) or (not self.armed and self.enough(ring)):
            self._recompute(step)

    def relearn(self, step: int, why: str, times: Optional[List[float]] = None,
                after_slowdown: bool = False, since: Optional[float] = None) -> None:
        """Learn it again: from ``times`` (step times in seconds of a level already seen; the
        last ``horizon_steps`` of them) and the next steps. ``after_slowdown``: the new level is
        a slowdown's (after a capture or ``max_captures``), never a usual level. ``since``: the
        clock ``times`` began at, when their CPU samples are clean steps of the new level."""
        self.reset()
        self.after_slowdown = after_slowdown
        if since is not None:
            self.learnt_from = since
        self._log({"event": "rebaselined", "step": step, "why": why})
        if times:
            self.ring = list(times[-self.trigger.horizon_steps:])  # its order does not matter until it is full
            self._recompute(step)

    def _recompute(self, step: int) -> None:
        self._since = 0
        values = sorted(self.ring)
        n = len(values)
        if not (self.enough(values) if not self.armed else n >= LONG_BASELINE_STEPS):
            return
        # After a capture the new level is the slowdown's own: its first steps can be faster
        # (batches buffered while the window ran), and slow ones after them are that level.
        tail = 0 if self.armed or self.after_slowdown else self._slow_tail()
        if tail:  # a slowdown begun before arming: the baseline is the steps before it
            del self.ring[-tail:]
            values = sorted(self.ring)
            n = len(values)
        self.p50, self.p90, self.mean = percentile(values, 0.5), percentile(values, 0.9), trimmed_mean(values)
        factor = self.trigger.factor
        self.k = level_steps(self.mean)
        self.slow_at, self.held_at, self.fast_at = factor * self.mean, factor ** 0.5 * self.mean, self.mean / factor
        if not self.after_slowdown:
            levels = self.levels
            levels.append((self.now, self.mean))
            while self.now - levels[0][0] > USUAL_SECONDS + self.trigger.min_seconds:
                levels.popleft()
        if not self.armed:
            self.armed = True
            self._log({"event": "armed", "step": step, "baseline_p50_ms": ms(self.p50),
                       "baseline_mean_ms": ms(self.mean), "baseline_steps": n, "threshold_ms": ms(self.slow_at),
                       "level_steps": self.k, "busy_machine": self._busy(), "slow_tail_steps": tail})

    def _slow_tail(self) -> int:
        """As it arms: how many of its last steps are a slow stretch begun already, each beyond
        ``factor`` x the level of the steps before them, at least :data:`~.levels.LEVEL_MIN_STEPS`
        (a level, not a stall); 0 when none. The baseline is then the steps before them, and the
        next step opens the stretch from them (the stretch looks back through the recent steps)."""
        recent, ring = self.recent.times, self.ring
        n = len(recent)
        if n < LEVEL_MIN_STEPS or len(ring) <= n or len(ring) >= self.trigger.horizon_steps \
                or ring[-n:] != recent:
            return 0  # (a ring seeded by relearn, or one that wrapped, is not in step order)
        slow_at = self.trigger.factor * trimmed_mean(sorted(ring[:-n]))
        tail = 0
        for v in reversed(recent):
            if v <= slow_at:
                break
            tail += 1
        return tail if tail >= LEVEL_MIN_STEPS else 0

    def enough(self, steps: List[float], share: float = 1.0) -> bool:
        """Enough steps for a baseline: :data:`~.thresholds.MIN_BASELINE_STEPS` lasting
        :data:`MIN_BASELINE_SECONDS` (or a full horizon), or :data:`LONG_BASELINE_STEPS` lasting
        :data:`LONG_BASELINE_SECONDS`; on a busy machine a full horizon or
        :data:`BUSY_BASELINE_SECONDS`. ``share``: of those seconds."""
        n = len(steps)
        if n < LONG_BASELINE_STEPS:
            return False
        spent, full = sum(steps), n >= self.trigger.horizon_steps
        enough = spent >= share * LONG_BASELINE_SECONDS or (n >= MIN_BASELINE_STEPS and (
            spent >= share * MIN_BASELINE_SECONDS or full))
        return enough and (full or spent >= share * BUSY_BASELINE_SECONDS or not self._busy())

    def usual_level(self) -> Optional[float]:
        """The highest level (trimmed mean, s) it *held* in the last :data:`USUAL_SECONDS` of the
        job's clock: at each recompute, the lowest of its levels over the ``min_seconds`` before
        (a burst that joined a young baseline lifts it for less); those learnt after a slowdown
        left out. None when no level was held that long."""
        held: Optional[float] = None
        window: Deque[Tuple[float, float]] = deque()  # ascending levels: the lowest first
        hold, first_t = self.trigger.min_seconds, self.levels[0][0] if self.levels else 0.0
        for t, level in self.levels:
            while window and window[-1][1] >= level:
                window.pop()
            window.append((t, level))
            while t - window[0][0] > hold:
                window.popleft()
            if t - first_t >= hold and self.now - t <= USUAL_SECONDS:
                held = window[0][1] if held is None else max(held, window[0][1])
        return held

    def record(self) -> Optional[Dict]:
        """``{"p50_ms", "p90_ms", "mean_ms", "steps", "threshold_ms"}`` (threshold None while
        not armed), or None before it first armed: the trend file's ``baseline``."""
        if self.p50 is None or self.p90 is None or self.mean is None:
            return None
        return {"p50_ms": round(1e3 * self.p50, 4), "p90_ms": round(1e3 * self.p90, 4),
                "mean_ms": round(1e3 * self.mean, 4), "steps": len(self.ring),
                "threshold_ms": round(1e3 * self.slow_at, 4) if self.armed else None}
