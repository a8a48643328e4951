"""What the slowdown trigger reads of the CPU (:class:`~tfbneck_plugin.capture.cpu_taken.CpuTaken`'s
samples, every 0.25 s): whether other processes keep the machine busy, whether the job's own
work per step grew, whether other processes took its cores. Each read is made once per CPU
sample. The rules and their sources: docs/slowdown_trigger.md ("CPU taken by other processes",
"Own work")."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Tuple

from ..cpu_taken import WORK_HOLD_RATIO, WORK_OPEN_SECONDS, CpuTaken
from .baseline import BUSY_BASELINE_SECONDS, BUSY_OTHERS_CORES

if TYPE_CHECKING:
    from .stretch import Stretch

_NAN = float("nan")


class CpuReads:
    """The trigger's reads of ``cpu`` (None: no CPU check; nothing is read)."""

    def __init__(self, cpu: Optional[CpuTaken]) -> None:
        self.cpu = cpu
        self._busy: Tuple[float, bool] = (_NAN, False)             # (the sample it was read at, busy)
        self._work: Tuple[float, Optional[float]] = (_NAN, None)   # (the sample, the ratio when high)

    def unsampled_or_busy(self, now: float) -> bool:
        """No CPU samples come (no check, or the platform does not say), or :meth:`machine_busy`."""
        return self.cpu is None or self.cpu.off or self.machine_busy(now)

    def machine_busy(self, now: float) -> bool:
        """Other processes kept :data:`~.baseline.BUSY_OTHERS_CORES` busy over the :data:`~.baseline.BUSY_BASELINE_SECONDS`
        before clock ``now``; until the samples can tell (half a second), taken as busy."""
        cpu = self.cpu
        if cpu is None or cpu.off:
            return False
        if self._busy[0] != cpu.next_at:
            others = cpu.others_cores(now - BUSY_BASELINE_SECONDS)
            self._busy = (cpu.next_at, others is None or others >= BUSY_OTHERS_CORES)
        return self._busy[1]

    def work_now(self, now: float, clean_since: float) -> Optional[float]:
        """The job's CPU per step over the last :data:`~..cpu_taken.WORK_OPEN_SECONDS` against its
        clean steps' since clock ``clean_since``, when at least :data:`~..cpu_taken.WORK_HOLD_RATIO`
        (else None)."""
        cpu = self.cpu
        if cpu is None:
            return None
        if self._work[0] != cpu.next_at:
            ratio = cpu.work_ratio(now - WORK_OPEN_SECONDS, clean_since)
            self._work = (cpu.next_at, round(ratio, 2) if ratio is not None and ratio >= WORK_HOLD_RATIO else None)
        return self._work[1]

    def own_work(self, stretch: "Stretch", clean_since: float) -> bool:
        """Whether an unconfirmed slow stretch's CPU seconds per step are at least
        :data:`~..cpu_taken.WORK_HOLD_RATIO` x those of the clean steps since clock ``clean_since``
        before it (:meth:`~..cpu_taken.CpuTaken.work_ratio`, kept in ``stretch.work``)."""
        cpu = self.cpu
        if cpu is None or stretch.confirmed_at is not None:
            return False
        if stretch.work_at != cpu.next_at:
            stretch.work_at, ratio = cpu.next_at, cpu.work_ratio(stretch.start, clean_since)
            if ratio is not None:
                stretch.work = round(ratio, 2)
        return stretch.work is not None and stretch.work >= WORK_HOLD_RATIO

    def taken(self, stretch: "Stretch", now: float, slowdown: float, factor: float, check: bool) -> Optional[Dict]:
        """:meth:`~..cpu_taken.CpuTaken.taken_by_others` over the stretch until clock ``now``
        (``slowdown``: its level over the baseline's), or None when ``check`` is off or unread."""
        cpu = self.cpu if check else None
        return cpu.taken_by_others(stretch.start, now, slowdown, factor, stretch.work) if cpu is not None else None
