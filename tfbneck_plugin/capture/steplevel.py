"""Levels of step times: the statistics the slowdown trigger reads a stretch of steps by
(:mod:`.slowwatch`). Pure Python on ascending lists of step times in seconds, no numpy:
they run at every step of the job being trained."""
from __future__ import annotations

import bisect
from typing import List

#: A step of a stretch counts at most this many times the stretch's median (:func:`capped_sum`).
STALL_CAP = 4.0


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
    :data:`STALL_CAP` x their median (one stall of seconds among steps of 30 ms, as a busy
    machine gives, is not a slowdown of seconds; skewed slow steps still count in full)."""
    cap = STALL_CAP * median(sorted_values)
    i = bisect.bisect_right(sorted_values, cap)
    return sum(sorted_values[:i]) + cap * (len(sorted_values) - i)


def median(sorted_values: List[float]) -> float:
    """The median of an ascending list (the mean of the middle two of an even one). Raises
    IndexError on []."""
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else 0.5 * (sorted_values[mid - 1] + sorted_values[mid])
