"""Whether other processes took the job's CPU during a slow stretch: the slowdown
trigger's check before it captures a stretch. Pure Python (psutil), no TensorFlow.

:class:`CpuTaken` samples the process's CPU clock and the machine's busy time every
:data:`SAMPLE_SECONDS`. A job slowed by its own work keeps the cores it had or takes more; a
job slowed because other processes took its cores gets fewer while they get more. So a stretch
in which the job had at most :data:`OWN_CORES_RATIO` of its cores of the :data:`BEFORE_SECONDS`
before while other processes took at least :data:`OTHERS_RISE_CORES` more is CPU taken by
other processes, not captured (a profile of the job cannot show the other processes' work):
unless the job kept more than ``1 / factor`` of its cores and its CPU seconds per step rose
:data:`OWN_WORK_RATIO` x (against the span before, or against its clean steps:
:meth:`CpuTaken.work_ratio`): then it is the job's own slowdown. Each stretch is also compared
with the seconds before other processes first took the cores while they hold them, and with
the quietest span of the samples kept (contention in short bursts joins the baseline unnamed).
The same CPU per step against the clean steps holds a stretch of the job's own work open
(:data:`WORK_HOLD_RATIO`).

What it cannot tell: a job that *waits* (storage, network) on a machine whose cores are all
busy frees cores the others then take, which reads the same. The job's child processes
(PyDataset or multiprocessing workers) would count as other processes, so with children the
check is off; the profiler's own analysis children are other processes to it (a slowdown
they cause is not training's). The measurements behind each threshold: docs/slowdown_trigger.md
("CPU taken by other processes", "Own work") and docs/slowdown_capture.md.
"""
from __future__ import annotations

import os
import time
from collections import deque
from typing import Callable, Deque, Dict, Optional, Tuple

from ..records import Outcome
from ..system.sampler import NOT_TRAINING_PIDS, cpu_total

#: The job's cores during the stretch over those of the span before it, at most (the corpus:
#: 0.71-0.83 in the busy machine's holds, 0.88 and more in input slowdowns).
OWN_CORES_RATIO = 0.85
#: Other processes' cores during the stretch less those before it, at least (the corpus:
#: 0.12-0.43 when they took the job's cores; at most 0.01 in input slowdowns).
OTHERS_RISE_CORES = 0.1
#: The job's CPU seconds per step in the stretch over those before it, at least, for a
#: stretch in which it kept more than 1 / factor of its cores to be its own slowdown (the
#: corpus: 1.2-1.7x when other processes held a steady job slower and it kept 0.71-0.83x
#: its cores; 5-8x for a heavier map; 2x is also the smallest slowdown the trigger is
#: measured on).
OWN_WORK_RATIO = 2.0
#: The span before the stretch it is compared with (the corpus's measure: the 3 s before).
BEFORE_SECONDS = 3.0
#: At least this much of it (a shorter span says little: the scheduler's quanta are ms).
MIN_SPAN_SECONDS = 1.0
#: A sample every this many seconds of the job's clock, at most (each ~30 us: /proc/stat
#: and the process's CPU clock), kept for :data:`KEEP_SECONDS`.
SAMPLE_SECONDS = 0.25
KEEP_SECONDS = 60.0

#: The job's CPU seconds per step over those of its clean steps before (:meth:`CpuTaken.work_ratio`),
#: at least, for a level above the middle line (the geometric middle of the baseline and the
#: threshold) to open a slow stretch or hold one open: its own work per step grew
#: (docs/slowdown_trigger.md, "Own work"). Chosen on 58 runs repeated under under-load (fit:
#: ``benchmarks/slowdown_table.py`` hold_choice): no steady run opened a window even at 1.0,
#: every required phase was captured up to 2.02; the geometric middle of 1.0 and 2.02. The
#: corpus's report judges it (docs/slowdown_capture.md, "Own work").
WORK_HOLD_RATIO = 1.4
#: The stretch's span (and the clean span before it) the ratio needs, at least: two samples apart.
WORK_SPAN_SECONDS = 0.5
#: A level between the middle line and the threshold opens a stretch when the job's CPU per
#: step over this many last seconds is :data:`WORK_HOLD_RATIO` x that of its clean steps.
WORK_OPEN_SECONDS = 0.75

#: (clock, the job's CPU seconds, the machine's busy CPU seconds, the profiler's analysis
#: children's, the step about to begin (-1: not a timed step), clean: no slow stretch was
#: open when it was taken (the trigger's own flag))
Sample = Tuple[float, float, float, float, int, bool]
#: pid -> the CPU seconds last read of each of the profiler's own analysis children (kept after
#: they end: the sum only grows).
_PROFILER_CHILDREN_CPU: Dict[int, float] = {}


def read_cpu() -> Optional[Tuple[float, float, float]]:
    """(this process's CPU seconds, all threads; the machine's busy CPU seconds, all cores:
    all time but idle and iowait, as ``psutil.cpu_percent`` counts it, guest time inside
    user; the CPU seconds of the profiler's own analysis children so far,
    :data:`tfbneck_plugin.system.sampler.NOT_TRAINING_PIDS`), or None when the platform does not say."""
    try:
        import psutil
        t = psutil.cpu_times()
        busy = cpu_total(t) - t.idle - getattr(t, "iowait", 0.0)
        for pid in list(NOT_TRAINING_PIDS):
            try:
                c = psutil.Process(pid).cpu_times()
                _PROFILER_CHILDREN_CPU[pid] = c.user + c.system
            except psutil.Error:
                pass  # ended: its last reading stays
        return time.process_time(), busy, sum(_PROFILER_CHILDREN_CPU.values())
    except Exception:  # noqa: BLE001 - a check of the trigger's, never an error of training's
        return None


def has_children() -> bool:
    """Whether this process has child processes other than the profiler's own analysis
    children (:data:`tfbneck_plugin.system.sampler.NOT_TRAINING_PIDS`, which are other processes' CPU to the
    check: a slowdown they cause is not training's). psutil; ~1 ms: called at a confirmation
    only."""
    try:
        import psutil
        return any(c.pid not in NOT_TRAINING_PIDS for c in psutil.Process(os.getpid()).children())
    except Exception:  # noqa: BLE001
        return True  # unknown: the check is off


def notice_lines(entry: Optional[Dict]) -> Tuple[str, str, Optional[str]]:
    """(the warning's kind, the user's line, the line for repeats) for the trigger's log entry
    of a stretch it confirmed but did not capture: other processes took the CPU (``entry["cpu"]``
    from :meth:`CpuTaken.taken_by_others`), or ``max_captures`` windows were taken already."""
    if entry and entry.get("outcome") == Outcome.MAX_CAPTURES:
        return ("slowdown:max_captures",
                f"median step time rose again from {entry['baseline_p50_ms']:.3g} to {entry['observed_p50_ms']:.3g} ms "
                f"over {entry['steps']} steps ({entry['seconds']:.1f} s) from step {entry['first_step']}: not profiled, "
                "max_captures reached (SlowdownTrigger(max_captures=...)); tfbneck trigger on the logdir lists each such "
                "stretch",
                f"median step time rose again from step {entry['first_step']}: max_captures reached")
    if not entry or not entry.get("cpu"):
        return "slowdown:cpu_taken", "a slow stretch was not profiled: other processes took the CPU", None
    cpu = entry["cpu"]
    return ("slowdown:cpu_taken",
            f"median step time rose from {entry['baseline_p50_ms']:.3g} to {entry['observed_p50_ms']:.3g} ms over "
            f"{entry['steps']} steps ({entry['seconds']:.1f} s) from step {entry['first_step']}: not profiled, other "
            f"processes took the CPU "
            f"(this process {cpu['own_cores_before']:.2f} -> {cpu['own_cores_during']:.2f} cores, others "
            f"{cpu['others_cores_before']:.2f} -> {cpu['others_cores_during']:.2f}); the trend file's "
            "trigger_state has each such stretch",
            f"median step time rose again from step {entry['first_step']}: other processes took the CPU")


class CpuTaken:
    """Samples the job's and the machine's CPU as steps go, and tells whether other
    processes took the job's cores during a stretch (module docstring).

    Args:
      read: () -> (job CPU s, machine busy CPU s[, the profiler's analysis children's CPU s]) or None
        (default :func:`read_cpu`).
      children: () -> whether the job has child processes (default :func:`has_children`).
    """

    def __init__(self, read: Callable[[], Optional[Tuple[float, ...]]] = read_cpu,
                 children: Callable[[], bool] = has_children) -> None:
        self._read, self._children = read, children
        self._samples: Deque[Sample] = deque()
        self._off = False
        self.next_at = -float("inf")  # the clock of the next sample (the caller compares: no call per step)
        self._calm: Optional[Tuple[float, float]] = None  # (own, others) before the cores were taken

    def tick(self, now: float) -> None:
        """A step ended at the job's clock ``now``: a sample when :data:`SAMPLE_SECONDS`
        passed (the slowdown watch compares ``next_at`` itself, saving a call per step)."""
        if now >= self.next_at:
            self.sample(now)

    def sample(self, now: float, step: int = -1, clean: bool = False) -> None:
        """Reads the CPU at the job's clock ``now``; ``step``: the step about to begin (for
        :meth:`work_ratio`; -1 when not a timed step), ``clean``: no slow stretch was open."""
        got = self._read()
        if got is None:
            self._off, self.next_at = True, float("inf")
            return
        self.next_at = now + SAMPLE_SECONDS
        s = self._samples
        s.append((now, got[0], got[1], got[2] if len(got) > 2 else 0.0, step, clean))
        while now - s[0][0] > KEEP_SECONDS:
            s.popleft()

    def _at(self, t: float) -> Optional[Sample]:
        """The last sample at or before clock ``t``."""
        found = None
        for smp in self._samples:
            if smp[0] > t:
                break
            found = smp
        return found

    @property
    def off(self) -> bool:
        """The process's or the machine's CPU cannot be read here (no samples will come)."""
        return self._off

    def others_cores(self, since: float) -> Optional[float]:
        """Cores processes other than the job and the profiler's analysis children kept
        busy from clock ``since`` (the oldest sample when later) to the latest sample; None
        when off or over less than two sample intervals."""
        if self._off or not self._samples:
            return None
        begin, last = self._at(since) or self._samples[0], self._samples[-1]
        if last[0] - begin[0] < 2 * SAMPLE_SECONDS:
            return None
        return max(0.0, self._cores(begin, last)[1] - (last[3] - begin[3]) / (last[0] - begin[0]))

    def work_ratio(self, since: float, not_before: float = -float("inf")) -> Optional[float]:
        """The job's CPU seconds per step from clock ``since`` (a slow stretch's start) to the
        latest timed sample, over those of the clean spans before it (between two samples
        taken while no slow stretch was open: the steps the baseline learnt, without the
        stretches that joined it), the :data:`BEFORE_SECONDS` of them nearest ``since`` and
        none before clock ``not_before`` (when the baseline began learning: after a capture
        its reference is the new level, not the steps before the slowdown).
        A heavier map or a bigger batch raises it; other processes taking the job's cores
        leave it about as it was (module docstring). None when off, or when either side
        spans less than :data:`WORK_SPAN_SECONDS` or holds no step."""
        smp = list(self._samples)
        if self._off or not smp:
            return None
        stepped = [i for i, a in enumerate(smp) if a[4] >= 0]
        first = next((i for i in stepped if smp[i][0] >= since), None)
        if first is None:
            return None
        a, b = smp[first], smp[stepped[-1]]
        if b[0] - a[0] < WORK_SPAN_SECONDS or b[4] <= a[4]:
            return None
        during = (b[1] - a[1]) / (b[4] - a[4])
        cpu = wall = 0.0
        steps = 0
        for j in range(first - 1, 0, -1):
            x, y = smp[j - 1], smp[j]
            if x[0] < not_before:
                break
            if x[5] and y[5] and x[4] >= 0 and y[4] > x[4]:
                cpu, steps, wall = cpu + y[1] - x[1], steps + y[4] - x[4], wall + y[0] - x[0]
                if wall >= BEFORE_SECONDS:
                    break
        if wall < WORK_SPAN_SECONDS or cpu <= 0:
            return None
        return during / (cpu / steps)

    def _quietest(self, until: float) -> Optional[Tuple[float, float]]:
        """(the job's cores, other processes' cores) over the span of :data:`BEFORE_SECONDS`
        ending by clock ``until`` in which other processes had the fewest cores (the samples
        kept): contention that came in bursts shorter than a confirmation joined the baseline,
        so the seconds just before a stretch can be contended already (a CI run: 0.98x the
        job's cores against them, 0.71 cores against 1.29 for the others)."""
        best, smp, j = None, self._samples, 0
        for a in smp:
            if a[0] + BEFORE_SECONDS > until:
                break
            while j < len(smp) and smp[j][0] < a[0] + BEFORE_SECONDS:
                j += 1
            if j == len(smp) or smp[j][0] > until:
                break
            cores = self._cores(a, smp[j])
            if best is None or cores[1] < best[1]:
                best = cores
        return best

    @staticmethod
    def _cores(a: Sample, b: Sample) -> Tuple[float, float]:
        """(the job's cores, other processes' cores) between two samples."""
        wall = b[0] - a[0]
        own = (b[1] - a[1]) / wall
        return own, max(0.0, (b[2] - a[2]) / wall - own)

    def taken_by_others(self, start: float, now: float, slowdown: float = 1.0, factor: float = 1.5,
                        clean_ratio: Optional[float] = None) -> Optional[Dict]:
        """The stretch from clock ``start`` to ``now`` against the :data:`BEFORE_SECONDS`
        before it; ``slowdown``: its step time over the baseline's (the trigger's levels);
        ``factor``: the trigger's (a job that kept more than 1 / factor of its cores and
        whose CPU per step grew is slowed by its own work: module docstring); ``clean_ratio``:
        the stretch's CPU seconds per step over its clean steps' (:meth:`work_ratio`), when
        read: the job's own work grew when either ratio reaches :data:`OWN_WORK_RATIO`.
        Returns None when it cannot tell (too few samples, child processes), else
        ``{"taken": bool, "own_cores_before", "own_cores_during", "others_cores_before",
        "others_cores_during", "own_cpu_per_step_ratio", "own_work"}`` (cores: CPU seconds per
        second; the ratio: the job's CPU seconds per step during over before, its cores' ratio
        x ``slowdown``; ``own_work``: other processes took cores, but that ratio or ``clean_ratio``
        is at least :data:`OWN_WORK_RATIO` with the cores kept, so ``taken`` is False)."""
        if self._off:
            return None
        self.sample(now)
        if self._off:
            return None
        begin, first, last = self._at(start - BEFORE_SECONDS), self._at(start), self._samples[-1]
        if begin is None:  # fewer than BEFORE_SECONDS of samples: the oldest one
            begin = self._samples[0]
        if first is None or first[0] - begin[0] < MIN_SPAN_SECONDS or last[0] - first[0] < MIN_SPAN_SECONDS:
            return None
        own0, others0 = self._cores(begin, first)
        own1, others1 = self._cores(first, last)
        calm = self._calm
        if calm is not None and others0 < calm[1] + OTHERS_RISE_CORES:
            calm = self._calm = None  # the other processes gave the cores back
        quiet = self._quietest(begin[0])
        taken = False
        for own_ref, others_ref in ((own0, others0),) + ((calm,) if calm else ()) + ((quiet,) if quiet else ()):
            if own_ref > 0 and own1 <= OWN_CORES_RATIO * own_ref and others1 >= others_ref + OTHERS_RISE_CORES:
                taken, own0, others0 = True, own_ref, others_ref
                break
        work = own1 / own0 * slowdown if own0 > 0 else None
        grew = max((r for r in (work, clean_ratio) if r is not None), default=None)
        own_work = bool(taken and grew is not None and grew >= OWN_WORK_RATIO and own1 * factor > own0)
        if own_work:
            taken = False  # the job's own work per step grew: its slowdown, whoever took cores
        if taken and self._children():
            return None
        if taken and self._calm is None:
            self._calm = (own0, others0)
        return {"taken": taken, "own_cores_before": round(own0, 3), "own_cores_during": round(own1, 3),
                "others_cores_before": round(others0, 3), "others_cores_during": round(others1, 3),
                "own_cpu_per_step_ratio": None if work is None else round(work, 2), "own_work": own_work}
