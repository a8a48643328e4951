"""Levels of step times: the statistics the slowdown trigger reads a run of steps by, and
:class:`RecentSteps`, the level of the last steps. Pure Python on step times in seconds, no
numpy: they run at every step of the job being trained. Why a trimmed mean and a capped sum:
docs/slowdown_trigger.md, "How the defaults were chosen"."""
from __future__ import annotations

import bisect
from typing import List, Optional

#: A step of a stretch counts at most this many times the stretch's median (:func:`capped_sum`):
#: one stall of seconds among steps of 30 ms, as a busy machine gives, is not a slowdown of seconds.
STALL_CAP = 4.0
#: The level is read over about this many seconds of steps (at the baseline's step time) ...
LEVEL_SECONDS = 0.5
#: ... and at least / at most this many steps (odd: a median of whole steps).
LEVEL_MIN_STEPS, LEVEL_MAX_STEPS = 5, 31


def percentile(sorted_values: List[float], q: float) -> float:
    """The ``q`` quantile (0-1) of an ascending list, by linear interpolation between the
    closest ranks (numpy's default method). Raises IndexError on an empty list."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def trimmed_mean(sorted_values: List[float]) -> float:
    """The mean of an ascending list without its largest tenth (at least its largest value
    from 5 values on): a step time level that one stall does not move, yet that follows an
    input-bound slowdown whose steps alternate between waiting and finding a batch ready
    (a median of such steps can stay at the fast ones). Raises ZeroDivisionError on []."""
    n = len(sorted_values)
    keep = n - (max(1, n // 10) if n >= 5 else 0)
    return sum(sorted_values[:keep]) / keep


def capped_sum(sorted_values: List[float]) -> float:
    """The time of a stretch: the sum of its step times, each counted at most
    :data:`STALL_CAP` x their median (skewed slow steps still count in full)."""
    cap = STALL_CAP * median(sorted_values)
    i = bisect.bisect_right(sorted_values, cap)
    return sum(sorted_values[:i]) + cap * (len(sorted_values) - i)


def median(sorted_values: List[float]) -> float:
    """The median of an ascending list (the mean of the middle two of an even one). Raises
    IndexError on []."""
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else 0.5 * (sorted_values[mid - 1] + sorted_values[mid])


def level_steps(mean: float) -> int:
    """How many steps a level is read over for a baseline whose level is ``mean`` seconds:
    :data:`LEVEL_SECONDS` of them, odd, between :data:`LEVEL_MIN_STEPS` and :data:`LEVEL_MAX_STEPS`."""
    k = int(LEVEL_SECONDS / mean) if mean > 0 else LEVEL_MAX_STEPS
    return min(LEVEL_MAX_STEPS, max(LEVEL_MIN_STEPS, k | 1))


class RecentSteps:
    """The last steps and their level: the last ``k`` (:func:`level_steps`), fewer when the
    last ones are long (those that ended within :data:`LEVEL_SECONDS`, at least
    :data:`LEVEL_MIN_STEPS`: a 100x slowdown is seen after 3 steps, not after k/2 of them).
    Their :func:`trimmed_mean` is the level: a minority of fast steps inside a slowdown does
    not end it, the trimming ignores one stall, and i.i.d. noise averages out.

    Attributes:
      times: their step times (s), in order; ``first``: each one's first batch; ``end``: the
        clock (s) when each ended; ``ascending``: their times sorted.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget them (the baseline is learnt again)."""
        self.times: List[float] = []
        self.first: List[int] = []
        self.end: List[float] = []
        self.ascending: List[float] = []

    def add(self, dt: float, first: int, now: float, k: int) -> Optional[float]:
        """The step beginning at batch ``first`` took ``dt`` s and ended at clock ``now``.
        Returns the level now, None while fewer than :data:`LEVEL_MIN_STEPS` steps are kept."""
        times, ascending = self.times, self.ascending
        times.append(dt)
        self.first.append(first)
        self.end.append(now)
        bisect.insort(ascending, dt)
        while len(times) > LEVEL_MIN_STEPS and (len(times) > k or now - self.end[0] > LEVEL_SECONDS):
            ascending.pop(bisect.bisect_left(ascending, times.pop(0)))
            self.first.pop(0)
            self.end.pop(0)
        return trimmed_mean(ascending) if len(times) >= LEVEL_MIN_STEPS else None
