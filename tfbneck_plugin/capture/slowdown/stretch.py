"""A slow (or lastingly faster) stretch of steps: :class:`Stretch`, the record the slowdown
trigger keeps from the step its level crossed a threshold to the step it ended or was
decided (docs/slowdown_trigger.md, "Slow stretch")."""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Dict, List, Optional

from .baseline import Baseline
from .levels import LEVEL_MIN_STEPS, LEVEL_SECONDS, RecentSteps, trimmed_mean


@dataclass(eq=False)
class Stretch:
    """Steps whose level is beyond the baseline's threshold on one side.

    Attributes:
      slow: slower (beyond ``factor`` x the baseline's level, or the middle line while the
        job's own work grew), else faster (under 1 / ``factor`` x).
      first, last: its first and last batch. start: the clock (s) its first step began at.
      times: its step times (s), in order; ``ascending``: sorted; ``beyond``: those beyond the
        threshold on its side, sorted (its ``consecutive`` count and a faster one's confirmation).
      pushed: its first steps, in the baseline already (clean when they came).
      peak: its level furthest beyond the threshold (what made it a stretch: the whole
        stretch's mean, its steps back at the end included, can be under the threshold).
      back, back_s: the steps (and their seconds) its level has been back on the baseline's
        side of the threshold, in a row.
      confirmed_at: the step it was confirmed at (its gates first tried; None before).
      held_by: ``"analysis"`` or ``"cooldown"`` while a confirmed stretch waits for them.
      usual: the level it was back at (s), when not captured for that.
      cpu: the CPU check's figures at its confirmation (:meth:`~..cpu_taken.CpuTaken.taken_by_others`).
      work: the job's CPU per step in it over its clean steps' before (None: not read);
        ``work_at``: the CPU sample it was read at.
    """
    slow: bool
    first: int
    last: int
    start: float
    times: List[float]
    pushed: int
    beyond: List[float]
    ascending: List[float]
    peak: float
    back: int = 0
    back_s: float = 0.0
    confirmed_at: Optional[int] = None
    held_by: Optional[str] = None
    usual: Optional[float] = None
    cpu: Optional[Dict] = None
    work: Optional[float] = None
    work_at: Optional[float] = None

    @classmethod
    def opened(cls, slow: bool, recent: RecentSteps, baseline: Baseline, last: int, start: float,
               level: float) -> "Stretch":
        """The level crossed at the step ending now (began at clock ``start``, its last batch
        ``last``): the stretch begins at the oldest of the recent steps that are beyond the
        threshold on the same side (about k/2 steps ago)."""
        back = 0
        for v in reversed(recent.times[:-1]):
            if baseline.beyond(v, slow):
                back += 1
            else:
                break
        i = len(recent.times) - 1 - back
        times = recent.times[i:]
        beyond = sorted(v for v in times if baseline.beyond(v, slow))
        return cls(slow=slow, first=recent.first[i], last=last, start=start - sum(times[:-1]), times=list(times),
                   pushed=back, beyond=beyond, ascending=sorted(times), peak=level)

    def add(self, dt: float, last: int, level: float, baseline: Baseline) -> None:
        """One more step of ``dt`` s (its last batch ``last``), the level now ``level``."""
        self.times.append(dt)
        bisect.insort(self.ascending, dt)
        self.last = last
        self.peak = max(self.peak, level) if self.slow else min(self.peak, level)
        if baseline.beyond(dt, self.slow):
            bisect.insort(self.beyond, dt)

    def came_back(self, dt: float, level: float, up: float, down: float, k: int) -> bool:
        """Counts the step when the level is back on the baseline's side of ``up`` (slower
        stretch) or ``down`` (faster); True when it has been back for the span of a level
        (``k`` steps or :data:`~.levels.LEVEL_SECONDS`, at least :data:`~.levels.LEVEL_MIN_STEPS`)."""
        if (level <= up) if self.slow else (level >= down):
            self.back += 1
            self.back_s += dt
        else:
            self.back, self.back_s = 0, 0.0
        return self.back >= LEVEL_MIN_STEPS and (self.back >= k or self.back_s >= LEVEL_SECONDS)

    def level(self) -> float:
        """Its level: the trimmed mean of all its steps (s)."""
        return trimmed_mean(self.ascending)
