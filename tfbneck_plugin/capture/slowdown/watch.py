"""The slowdown trigger's state machine: :class:`SlowdownWatch`, fed one step time at a time
by :class:`~tfbneck_plugin.capture.steptime.StepTimer`. Each step's level
(:class:`~.levels.RecentSteps`) is compared with the :class:`~.baseline.Baseline`; beyond its
threshold a :class:`~.stretch.Stretch` opens, goes on until its level has been back for the
span of a level, and meanwhile passes the ordered gates of :mod:`.gates` at every step; an
:class:`~tfbneck_plugin.records.Outcome` ends it, and the baseline is learnt again as
:data:`AFTER` says. Steps that are in no stretch, and those of a stretch that ended before its
confirmation, are the baseline's. Pure Python, no TensorFlow. The design and its measurements:
docs/slowdown_trigger.md."""
from __future__ import annotations

import time
from typing import Dict, List, NamedTuple, Optional

from ...records import MAX_TRIGGER_LOG, Outcome
from ..cpu_taken import CpuTaken
from .baseline import Baseline, ms
from .cpu_reads import CpuReads
from .gates import Hold, decide, long_enough
from .levels import RecentSteps, median, percentile, trimmed_mean
from .stretch import Stretch
from .thresholds import SlowdownTrigger

#: Entries kept in :attr:`SlowdownWatch.log` (the first and the latest).
MAX_LOG = MAX_TRIGGER_LOG


class After(NamedTuple):
    """How the baseline is learnt again after an outcome that ends a slow stretch."""
    why: str              # the ``rebaselined`` entry's ``why``
    from_steps: bool      # from the stretch's steps (a level already seen), else from the next steps
    slowdown: bool        # the new level is a slowdown's: never a usual level, learnt whole
    told: bool            # the user is told once (:attr:`SlowdownWatch.notice`)


#: The baseline after each outcome of a confirmed stretch (docs/slowdown_trigger.md, "Baseline").
AFTER = {
    Outcome.CAPTURED: After("after a capture", False, True, False),
    Outcome.FASTER: After("the steps got faster", True, False, False),
    Outcome.BACK_TO_USUAL: After("back to the usual level", True, False, False),
    Outcome.CPU_TAKEN: After("CPU taken by other processes", True, True, True),
    Outcome.MAX_CAPTURES: After("slower level not captured (max_captures)", False, True, True),
}
#: The outcome of a slow stretch that ended by itself, by what held it (``held_by``).
ENDED = {None: Outcome.TOO_SHORT, Hold.ANALYSIS.value: Outcome.ENDED_IN_ANALYSIS,
         Hold.COOLDOWN.value: Outcome.ENDED_IN_COOLDOWN}


class SlowdownWatch:
    """The baseline, the open stretch and the record of one job's slowdown trigger.

    Args:
      trigger: the thresholds.
      cpu: the CPU samples (:class:`~..cpu_taken.CpuTaken`; None: no CPU check).

    Attributes:
      baseline: the :class:`~.baseline.Baseline`. stretch: the open :class:`~.stretch.Stretch`, or None.
      captures: windows fired so far. next_allowed: the first step the cooldown lets one open at.
      fired: what the last firing saw (:meth:`describe`'s dict).
      notice: the log entry of a slow stretch not captured because other processes took the
        job's CPU, or because ``max_captures`` windows were taken (the callback tells the user
        once per kind, then sets it back to None).
      log: the trigger's record (dicts with ``event``: ``armed``, ``run``, ``rebaselined``).
      short_runs: slow stretches that ended before ``consecutive`` steps (not logged one by one).
      at, now, held: the step beginning now, the job's clock (s), whether an analysis runs
        (what the gates read, :class:`~.gates.TriggerState`).
    """
    def __init__(self, trigger: SlowdownTrigger, cpu: Optional[CpuTaken] = None) -> None:
        self.trigger, self.cpu = trigger, cpu
        self.reads = CpuReads(cpu)
        self.notice: Optional[Dict] = None
        self.captures = 0
        self.fired: Optional[Dict] = None
        self.log: List[Dict] = []
        self.short_runs = 0
        self.next_allowed = 0
        self.at, self.now, self.held = 0, 0.0, False
        self.recent = RecentSteps()
        self.baseline = Baseline(self.trigger, self.recent, lambda: self.reads.machine_busy(self.now), self._add_log)
        self.stretch: Optional[Stretch] = None

    # -- every step -----------------------------------------------------------------------
    def step(self, dt: float, first: int, last: int, start: float, now: float, held: bool, at: int) -> bool:
        """The step ``first..last`` took ``dt`` seconds (began at clock ``start``, ended at
        ``now``, when step ``at`` begins); ``held``: an analysis runs. Returns True when the
        trigger fires now, a window opening at step ``at`` (:attr:`fired` says why)."""
        self.now = self.baseline.now = now
        self.at, self.held = at, held
        cpu, b = self.cpu, self.baseline
        if cpu is not None and now >= cpu.next_at:
            # clean: no slow stretch open (a faster one's steps always become baseline steps)
            cpu.sample(now, at, self.stretch is None or not self.stretch.slow)
        level = self.recent.add(dt, first, now, b.k)
        s, joined = self.stretch, False
        if s is not None and level is not None:
            joined = self._extend(s, dt, last, level)
            s = self.stretch  # None when it ended
        if s is None:
            work = self.reads.work_now(now, b.learnt_from) if b.armed and level is not None and level > b.held_at \
                else None
            if not (b.armed and level is not None and (level > b.slow_at or level < b.fast_at or work)):
                if not joined:  # else a stretch that ended with this step gave it to the baseline
                    b.push(dt, first)
                return False
            s = self.stretch = Stretch.opened(level > b.held_at, self.recent, b, last, start, level)
            s.work = work
        return self._confirm(s)

    def _extend(self, s: Stretch, dt: float, last: int, level: float) -> bool:
        """One more step in the stretch; it ends when its level has been back for the span of a
        level (down to the middle line while its own work per step grew), or at once when the
        level crossed to the other side (a slowdown during a faster stretch is a slow stretch
        of its own). Returns whether the step is in the baseline already: it ended a stretch
        whose steps joined it (:meth:`_end`)."""
        b = self.baseline
        if b.beyond(level, not s.slow):
            self._end(s)
            return False  # not the stretch's step: it begins what comes next
        s.add(dt, last, level, b)
        up = b.held_at if s.slow and self.reads.own_work(s, b.learnt_from) else b.slow_at
        return self._end(s) if s.came_back(dt, level, up, b.fast_at, b.k) else False

    def _confirm(self, s: Stretch) -> bool:
        """The gates' decision for the open stretch (:func:`~.gates.decide`); True when a window opens."""
        decision = decide(s, self)
        if decision is Hold.UNCONFIRMED:
            return False
        if s.slow and s.confirmed_at is None:
            s.confirmed_at = self.at
        if isinstance(decision, Hold):
            if decision in (Hold.ANALYSIS, Hold.COOLDOWN):
                s.held_by = decision.value
            return False
        return self._decided(s, decision)

    def _decided(self, s: Stretch, outcome: Outcome) -> bool:
        """The stretch ends with ``outcome``: recorded, and the baseline learnt again."""
        trig, at, spent = self.trigger, self.at, self.now - s.start
        if outcome is Outcome.CAPTURED:
            self.captures += 1
            self.fired = self.describe(s, at, spent)
            self.next_allowed = at + trig.window_steps + trig.cooldown_steps
        self._log_run(s, at, spent, outcome)
        after = AFTER[outcome]
        if after.told:
            self.notice = self.log[-1]  # the user learns that training slowed, once
        self.stretch = None
        # A faster stretch's CPU samples were clean steps of its level: the own-work test's reference.
        self.baseline.relearn(at, after.why, s.times if after.from_steps else None, after_slowdown=after.slowdown,
                              since=s.start if outcome is Outcome.FASTER else None)
        return outcome is Outcome.CAPTURED

    def _end(self, s: Stretch) -> bool:
        """The level came back before the stretch was decided. Unless it was confirmed (then
        held by an analysis or the cooldown) or its own work grew, its steps join the
        baseline as the job's normal variation. Returns whether they joined."""
        self.stretch = None
        b = self.baseline
        joined = s.confirmed_at is None and not (s.slow and self.reads.own_work(s, b.learnt_from))
        if s.slow:  # logged against the baseline it was judged on, before its steps join it
            if len(s.beyond) >= self.trigger.consecutive or s.held_by:
                self._log_run(s, self.at, sum(s.times), ENDED[s.held_by])
            else:
                self.short_runs += 1
        if joined:
            for dt in s.times[s.pushed:]:  # its first steps joined before it opened
                b.push(dt, self.at)
        return joined

    def unfinished(self, at_step: int, now: Optional[float]) -> Optional[Dict]:
        """Training ends: the slow stretch in progress when it has ``consecutive`` steps and
        half of ``min_seconds`` (or of the quick confirmation); it is logged and dropped."""
        s = self.stretch
        if s is None or not s.slow or not long_enough(s, self, share=0.5):
            return None
        spent = (now - s.start) if now is not None else sum(s.times)
        out = self.describe(s, at_step, spent)
        out.pop("capture")
        self._log_run(s, at_step, spent, Outcome.TRAINING_ENDED)
        self.stretch = None
        return out

    # -- records --------------------------------------------------------------------------
    def describe(self, s: Stretch, at_step: int, spent: float) -> Dict:
        """What the slow stretch shows (the sidecar's ``window.trigger``, records.py)."""
        b, times = self.baseline, sorted(s.times)
        return {"kind": "slowdown", "detected_at_step": at_step, "detected_unix_ns": time.time_ns(),
                "slow_steps": [s.first, s.last], "slow_step_count": len(times),
                "slow_for_s": round(spent, 3), "observed_p50_ms": ms(percentile(times, 0.5)),
                "baseline_p50_ms": ms(b.p50), "baseline_p90_ms": ms(b.p90),
                "baseline_mean_ms": ms(b.mean), "observed_mean_ms": ms(trimmed_mean(times)),
                "baseline_steps": len(b.ring), "threshold_ms": ms(b.slow_at),
                "slower_by": round(trimmed_mean(times) / b.mean, 3) if b.mean else None,
                "held_by": s.held_by, "confirmed_at_step": s.confirmed_at,
                "capture": self.captures, "thresholds": self.trigger.to_dict(), "cpu": s.cpu}

    def _log_run(self, s: Stretch, at_step: int, spent: float, outcome: Outcome) -> None:
        b, times = self.baseline, sorted(s.times)
        self._add_log({"event": "run", "direction": "slower" if s.slow else "faster",
                       "first_step": s.first, "last_step": s.last, "steps": len(times),
                       "seconds": round(spent, 3), "observed_p50_ms": ms(median(times)),
                       "observed_mean_ms": ms(trimmed_mean(times)), "baseline_p50_ms": ms(b.p50),
                       "baseline_mean_ms": ms(b.mean), "peak_level_ms": ms(s.peak),
                       "threshold_ms": ms(b.slow_at if s.slow else b.fast_at),
                       "confirmed_at_step": s.confirmed_at, "usual_level_ms": ms(s.usual),
                       "cpu": s.cpu, "cpu_per_step_ratio": s.work, "held_by": s.held_by,
                       "outcome": outcome.value, "at_step": at_step})

    def _add_log(self, entry: Dict) -> None:
        entry["t_unix_ns"] = time.time_ns()
        log = self.log
        log.append(entry)
        if len(log) > MAX_LOG:
            del log[MAX_LOG // 4]  # keep the first entries (arming) and the latest

    def state(self) -> Dict:
        """The trend file's ``trigger_state``: ``{"armed", "captures", "short_runs", "log"}`` (records.py)."""
        return {"armed": self.baseline.armed, "captures": self.captures, "short_runs": self.short_runs,
                "log": list(self.log)}
