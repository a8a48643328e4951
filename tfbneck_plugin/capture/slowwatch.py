"""The slowdown trigger's state machine: a baseline of the current level of step times, a
slow stretch found by the median of the last few steps, its confirmation, and the record
of what it did. Pure Python, no TensorFlow; fed one step time at a time by
:class:`~tfbneck_plugin.capture.steptime.StepTimer`.

How it decides (each part names the run that needs it):

* **Baseline** = one *level*: the clean steps since the last level change (at most
  ``horizon_steps``). It arms after :data:`MIN_BASELINE_STEPS` of them lasting
  :data:`MIN_BASELINE_SECONDS` (or :data:`LONG_BASELINE_STEPS` lasting
  :data:`LONG_BASELINE_SECONDS`), so a slowdown a few seconds into training is compared with
  the steps before it; on a busy machine, lasting :data:`BUSY_BASELINE_SECONDS` too. When
  its last steps (a level of them) are already beyond ``factor`` x the steps before, a
  slowdown began before it armed: they are left out, and the stretch opens from them
  (:meth:`SlowdownWatch._slow_tail`). The
  steps of a stretch that ended by itself before it was confirmed join it: they are the
  job's normal variation. On a busy machine a job of 1-2 ms steps
  switches between levels 1.5-1.7x apart for fractions of a second; keeping those steps out
  taught the baseline only the fast level, and a one-second switch then fired a window in
  a steady run (``tests/test_slowdown.py``'s steady run under ``under-load -j 1``: in CI,
  and in 2 of 3 runs here; replayed with this rule, in none). A single fast step does not
  end a stretch (the level below), so a slowdown with a fast step inside it does not teach
  the baseline its slow level.
  A confirmed stretch (captured or held) never joins it. After
  a capture, or when a slow stretch was confirmed but could not be captured
  (``max_captures``), the baseline starts again from the next steps: it learns the new level
  instead of mixing two, so a slowdown that returns is seen again; learnt whole, with no slow
  tail left out (the first steps after a window can draw on batches buffered while it ran: a
  custom loop re-armed on 7 such steps, 52 ms in a 90 ms phase, and the same
  slowdown opened a second window). When the steps got
  lastingly *faster* (a slowdown that recovered, a slow first epoch), the baseline is the
  faster stretch's steps, armed at once: learnt from the next steps only, it armed 2 s later
  on a busy machine, and a slowdown that began 23 steps after the speed-up became its level
  (a fit under ``under-load -j 2``: missed in 2 of 3 runs).
* **Slow stretch**: the level of the last ``k`` steps (their :func:`~.steplevel.trimmed_mean`) is above
  ``factor`` x the baseline's, ``k`` about :data:`LEVEL_SECONDS` of baseline steps, odd, between
  :data:`LEVEL_MIN_STEPS` and :data:`LEVEL_MAX_STEPS`, and fewer (not under
  :data:`LEVEL_MIN_STEPS`) when the last ones are long: only those that ended within
  :data:`LEVEL_SECONDS`. A level of several steps ignores a minority of fast steps (a single
  30 ms step among 100 ms ones would end a stretch judged step by step), the trimming one stall, and
  i.i.d. noise averages out, so no separate 90th-percentile guard is needed. A stretch ends
  when the level has stayed back for the span of a level (``k`` steps or
  :data:`LEVEL_SECONDS`), or at once when it crossed to the other side.
* **Back to the usual level**: the baseline follows a faster level, through its horizon
  (2048 steps are 2 s of 1 ms steps) or re-learnt after a lastingly faster stretch. So a job
  that a busy machine ran faster for some seconds, then at its usual level again, looked
  slowed down (CI's steady run under ``under-load -j 1``: armed at 1.44 ms, a 1.05 ms
  interlude, then 1.96 ms for 4 s fired a window). The baseline's levels are kept for
  :data:`USUAL_SECONDS`; a level is *held* when the baseline stayed at it or above for
  ``min_seconds`` (a burst that joined a young baseline lifts it for less). When a stretch
  is confirmed while the baseline is below the highest level it held lately, and the
  stretch is within ``factor`` of that level, it is not captured ("not captured: back to
  the usual level") and the baseline is learnt from its steps; not when the job's own CPU per
  step grew (own work, below), nor on an idle machine, where only the job sets its pace (two
  measured slowdowns after a slow first epoch were refused so). Levels after a capture are
  never held levels, so a slowdown that recovers and returns is still caught twice.
  Replayed on 37 recorded steady runs of that job under load, windows fell from 2 to 1; on the
  corpus, nothing changed.
* **CPU taken by other processes**: at its confirmation a stretch in which the job had
  fewer cores while other processes had more (:mod:`.cpu_taken`: the job's CPU clock and the
  machine's busy time, sampled every 0.25 s) is not captured ("not captured: CPU taken by
  other processes", with the figures in the entry's ``cpu``; :attr:`notice` for the user's
  one line): a profile of the job cannot show another process's work, unless the job kept
  most of its cores and its CPU seconds per step rose with its step time (its own work grew). Under ``under-load
  -j 2`` a job of 1-2 ms steps is held 1.7-2.1x slower for seconds so (two windows in 25
  steady runs of the corpus); replayed with the check, none. The level is learnt as a
  slowdown's (never a usual level), so a later slowdown of the job's own to it is caught.
* **Own work**: a busy machine's stalls lift the trimmed mean of 1 ms steps, so a 2.2x heavier
  map (by medians) under ``under-load -j 2`` read 1.5-1.7x and hovered about the threshold:
  each stretch fell back within a second, joined the baseline, and 5 of 10 repeats were
  missed. While the job's CPU seconds per step are at least ``WORK_HOLD_RATIO`` x those of
  its clean steps before (:meth:`~.cpu_taken.CpuTaken.work_ratio`; other processes taking
  cores leave it about as it was, a heavier map raises it), a level above the middle line
  (``sqrt(factor)`` x the baseline) opens a stretch or holds one open, and such a stretch
  does not join the baseline when it ends. The log entry's ``cpu_per_step_ratio`` says so.
* **Confirmation**: the stretch has ``consecutive`` steps beyond the threshold and lasts
  ``min_seconds`` (its steps' time, each counted at most :data:`~.steplevel.STALL_CAP` x their median,
  so that one stall of seconds is not a slowdown of seconds); or, for short steps, ``quick_steps`` such steps
  lasting ``quick_seconds`` (slow steps under 6.7 ms are confirmed after 2 s instead
  of ``min_seconds``), but not on a busy machine (the baseline's test): it held a steady job
  1.67x slower for 2.0 s with the job's cores unchanged, and that fired a window. While an analysis runs (``holds``) or
  during the cooldown, a confirmed stretch waits and fires at its first slow step after,
  if it still lasts (a window opens after a slow step, never after a fast one).

Every stretch that reached ``consecutive`` steps, and why it ended or was not captured, is
kept in :attr:`SlowdownWatch.log` (the trend file's ``trigger_state.log``).
"""
from __future__ import annotations

import bisect
import time
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from ..records import CPU_TAKEN_OUTCOME, MAX_CAPTURES_OUTCOME, MAX_TRIGGER_LOG
from .cpu_taken import WORK_HOLD_RATIO, WORK_OPEN_SECONDS, CpuTaken
from .steplevel import capped_sum, median, percentile, trimmed_mean

#: Clean steps the baseline needs before the trigger is armed (and again after each reset).
#: Short, so that an early slowdown is compared with the steps before it; the median of 20
#: steps was within 10% of the median of 200 on the corpus's steady runs of steps of 15 ms
#: and more (0.91-1.05x; docs/slowdown_capture.md), but 0.79-1.13x for 1 ms steps ...
MIN_BASELINE_STEPS = 20
#: ... so they must last this long together (a job of 1 ms steps: 250 steps, not 20: on a
#: busy machine its first steps after warm-up can be off its level by 10x).
MIN_BASELINE_SECONDS = 0.25
#: Or this many steps lasting :data:`LONG_BASELINE_SECONDS`: long steps and executions of
#: ``steps_per_execution`` (20 executions of 8 batches of 15 ms take 2.4 s, and the corpus's
#: slowdown 2 s into such a fit was missed; with 8 of them it is caught). On the corpus's
#: steady stretches of steps of 100 ms and more, the level of the first 8 steps was as close
#: to the stretch's median as that of the first 20 (0.89-1.06x against 0.91-1.05x).
LONG_BASELINE_STEPS = 8
LONG_BASELINE_SECONDS = 1.0
#: While other processes (not the profiler's own analysis children) keep at least
#: :data:`BUSY_OTHERS_CORES` cores busy (the CPU check's
#: samples, :class:`~.cpu_taken.CpuTaken`), a baseline must also last this long: a busy
#: machine swings a job of 1-2 ms steps 1.5-2x for 1-1.5 s at a time, and a baseline of
#: 0.25 s taken at a fast moment read the job's usual level as a 2.4x slowdown (a steady run
#: of the corpus under ``under-load -j 2``, other processes at 1.2-1.4 cores;
#: docs/slowdown_capture.md).
BUSY_BASELINE_SECONDS = 2.0
#: Half a core: an idle machine's other processes keep 0-0.1 busy (the corpus's idle runs).
BUSY_OTHERS_CORES = 0.5
#: The baseline's statistics are recomputed every this many clean steps, or every 1/16 of
#: the baseline's steps when more (sorting n values every n/16 steps: about 1 us per step).
RECOMPUTE_EVERY = 16
#: The level is the median of about this many seconds of baseline steps ...
LEVEL_SECONDS = 0.5
#: ... and at least / at most this many steps (odd: a median of whole steps).
LEVEL_MIN_STEPS, LEVEL_MAX_STEPS = 5, 31
#: A slow stretch within ``factor`` of a level the baseline held in the last this many
#: seconds is the job back at its usual level, not a slowdown (module docstring). 30, 60 and
#: 120 s gave the same replay of the corpus and of 37 steady runs under load (the choice
#: is the memory of a job's usual level; its effect needs a faster interlude shorter than it).
USUAL_SECONDS = 60.0
#: Entries kept in :attr:`SlowdownWatch.log` (the first and the latest).
MAX_LOG = MAX_TRIGGER_LOG

_INF = float("inf")


class SlowdownWatch:
    """The baseline, the slow stretch and the log of one job (module docstring).

    Args:
      trigger: a :class:`~tfbneck_plugin.capture.steptime.SlowdownTrigger`.

    Attributes:
      p50, p90, mean: the baseline (seconds; ``mean`` is :func:`~.steplevel.trimmed_mean`), None before it exists.
      captures: windows fired so far.
      fired: what the last firing saw (:meth:`describe`'s dict).
      notice: the log entry of a slow stretch not captured because other processes took the
        job's CPU, or because ``max_captures`` windows were taken (the callback tells the user
        once per kind, then sets it back to None).
      log: the trigger's record (dicts with ``event``: ``armed``, ``run``, ``rebaselined``).
      short_runs: slow stretches that ended before ``consecutive`` steps (not logged one by one).
    """

    def __init__(self, trigger, cpu: Optional[CpuTaken] = None) -> None:
        self.trigger = trigger
        self.cpu = cpu  # the check that other processes took the job's CPU (None: off)
        self.notice: Optional[Dict] = None  # the log entry of a stretch not captured for it, until taken
        self.p50: Optional[float] = None
        self.mean: Optional[float] = None   # trimmed mean: the level the thresholds use
        self.p90: Optional[float] = None
        self.captures = 0
        self.fired: Optional[Dict] = None
        self.log: List[Dict] = []
        self.short_runs = 0
        self.next_allowed = 0          # first step the trigger may fire at (cooldown)
        self._armed_logged = False
        # The baseline's levels of the last USUAL_SECONDS + min_seconds, (clock, trimmed
        # mean) at each recompute, and whether the present baseline is a slow level a
        # capture (or max_captures) left: those are not recorded, never a usual level.
        self._levels: Deque[Tuple[float, float]] = deque()
        self._after_slowdown = False
        self._now = 0.0
        self._busy: Tuple[float, bool] = (float("nan"), False)  # (the CPU sample it was read at, busy)
        self._reset_baseline()
        self._run: Optional[Dict] = None
        self._work_cache: Tuple[float, Optional[float]] = (float("nan"), None)

    # -- baseline -------------------------------------------------------------------------
    def _reset_baseline(self) -> None:
        self._ring: List[float] = []
        self._ring_i = self._since = 0
        self._k = LEVEL_MIN_STEPS
        self._recent: List[float] = []     # the last k step times, in order
        self._recent_first: List[int] = []  # and the first batch of each of those steps
        self._recent_end: List[float] = []  # and the clock when each ended
        self._recent_sorted: List[float] = []
        self._slow_at = self._fast_at = self._held_at = _INF  # level thresholds, armed when finite
        self._learnt_from = self._now  # the clock the baseline began learning at: work_ratio's clean steps are since
        self.armed = False

    def _push(self, dt: float, step: int) -> None:
        ring, horizon = self._ring, self.trigger.horizon_steps
        if len(ring) < horizon:
            ring.append(dt)
        else:
            ring[self._ring_i] = dt
            self._ring_i = (self._ring_i + 1) % horizon
        self._since += 1
        if self._since >= max(RECOMPUTE_EVERY, len(ring) // 16) or (not self.armed and self._enough(ring)):
            self._recompute(step)

    def _recompute(self, step: int) -> None:
        self._since = 0
        values = sorted(self._ring)
        n = len(values)
        if not (self._enough(values) if not self.armed else n >= LONG_BASELINE_STEPS):
            return
        # After a capture the new level is the slowdown's own: its first steps can be faster
        # (batches buffered while the window ran), and slow ones after them are that level.
        tail = 0 if self.armed or self._after_slowdown else self._slow_tail()
        if tail:  # a slowdown begun before arming: the baseline is the steps before it
            del self._ring[-tail:]
            values = sorted(self._ring)
            n = len(values)
        self.p50, self.p90, self.mean = percentile(values, 0.5), percentile(values, 0.9), trimmed_mean(values)
        k = int(LEVEL_SECONDS / self.mean) if self.mean > 0 else LEVEL_MAX_STEPS
        self._k = min(LEVEL_MAX_STEPS, max(LEVEL_MIN_STEPS, k | 1))
        self._slow_at = self.trigger.factor * self.mean
        self._held_at = self.trigger.factor ** 0.5 * self.mean
        self._fast_at = self.mean / self.trigger.factor
        if not self._after_slowdown:
            levels = self._levels
            levels.append((self._now, self.mean))
            while self._now - levels[0][0] > USUAL_SECONDS + self.trigger.min_seconds:
                levels.popleft()
        if not self.armed:
            self.armed = True
            self._add_log({"event": "armed", "step": step, "baseline_p50_ms": _ms(self.p50),
                           "baseline_mean_ms": _ms(self.mean),
                           "baseline_steps": n, "threshold_ms": _ms(self._slow_at), "level_steps": self._k,
                           "busy_machine": self._machine_busy(), "slow_tail_steps": tail})

    def _slow_tail(self) -> int:
        """As the baseline arms: how many of its last steps are a slow stretch begun already,
        each beyond ``factor`` x the level of the steps before them, at least
        :data:`LEVEL_MIN_STEPS` (a level, not a stall); 0 when none. The baseline is then the
        steps before them, and the next step opens the stretch from them
        (:meth:`_open_run` looks back through the recent steps). A fit of 8-batch executions,
        4x slower 2 s in, had 3 clean executions before it (the warm-up and a scheduled
        window took the others): its baseline armed on 3 fast and 5 slow ones, read the
        slow level as its own, and no window opened (the slowdown corpus, docs/slowdown_capture.md)."""
        recent, ring = self._recent, self._ring
        n = len(recent)
        if n < LEVEL_MIN_STEPS or len(ring) <= n or len(ring) >= self.trigger.horizon_steps \
                or ring[-n:] != recent:
            return 0  # (a ring seeded by rebaseline, or one that wrapped, is not in step order)
        slow_at = self.trigger.factor * trimmed_mean(sorted(ring[:-n]))
        tail = 0
        for v in reversed(recent):
            if v <= slow_at:
                break
            tail += 1
        return tail if tail >= LEVEL_MIN_STEPS else 0

    def _enough(self, steps: List[float], share: float = 1.0) -> bool:
        """Enough steps for a baseline: :data:`MIN_BASELINE_STEPS` lasting
        :data:`MIN_BASELINE_SECONDS` (or a full horizon), or :data:`LONG_BASELINE_STEPS`
        lasting :data:`LONG_BASELINE_SECONDS`; on a busy machine (:meth:`_machine_busy`) a
        full horizon or :data:`BUSY_BASELINE_SECONDS`."""
        n = len(steps)
        if n < LONG_BASELINE_STEPS:
            return False
        spent, full = sum(steps), n >= self.trigger.horizon_steps
        enough = spent >= share * LONG_BASELINE_SECONDS or (n >= MIN_BASELINE_STEPS and (
            spent >= share * MIN_BASELINE_SECONDS or full))
        return enough and (full or spent >= share * BUSY_BASELINE_SECONDS or not self._machine_busy())

    def _machine_busy(self) -> bool:
        """Other processes kept :data:`BUSY_OTHERS_CORES` busy over the last
        :data:`BUSY_BASELINE_SECONDS`, read once per CPU sample; until its samples can tell
        (half a second), taken as busy: the baseline waits for them."""
        cpu = self.cpu
        if cpu is None or cpu.off:
            return False
        if self._busy[0] != cpu.next_at:
            others = cpu.others_cores(self._now - BUSY_BASELINE_SECONDS)
            self._busy = (cpu.next_at, others is None or others >= BUSY_OTHERS_CORES)
        return self._busy[1]

    def usual_level(self) -> Optional[float]:
        """The highest level (trimmed mean, seconds) the baseline *held* in the last
        :data:`USUAL_SECONDS` of the job's clock: at each recompute, the lowest of its
        levels over the ``min_seconds`` before (as long as a slowdown must last to count;
        a burst that joined a young baseline lifts it for less); those learnt after a
        slowdown left out. None when no level was held that long."""
        held: Optional[float] = None
        window: Deque[Tuple[float, float]] = deque()  # ascending levels: the lowest first
        hold, first_t = self.trigger.min_seconds, self._levels[0][0] if self._levels else 0.0
        for t, level in self._levels:
            while window and window[-1][1] >= level:
                window.pop()
            window.append((t, level))
            while t - window[0][0] > hold:
                window.popleft()
            if t - first_t >= hold and self._now - t <= USUAL_SECONDS:
                held = window[0][1] if held is None else max(held, window[0][1])
        return held

    def rebaseline(self, step: int, why: str, times: Optional[List[float]] = None,
                   after_slowdown: bool = False, since: Optional[float] = None) -> None:
        """Learn the baseline again: from ``times`` (step times in seconds of a level already
        seen; the last ``horizon_steps`` of them) and the next steps. ``after_slowdown``: the
        new level is a slowdown's (after a capture or ``max_captures``), never recorded as a
        usual level (:meth:`usual_level`). ``since``: the clock ``times`` began at, when their
        CPU samples are clean steps of the new level (:meth:`_own_work`'s reference)."""
        self._reset_baseline()
        self._after_slowdown = after_slowdown
        if since is not None:
            self._learnt_from = since
        self._add_log({"event": "rebaselined", "step": step, "why": why})
        if times:
            self._ring = list(times[-self.trigger.horizon_steps:])  # the ring's order does not matter until it is full
            self._recompute(step)

    # -- every step -----------------------------------------------------------------------
    def step(self, dt: float, first: int, last: int, start: float, now: float, held: bool, at: int) -> bool:
        """The step ``first..last`` took ``dt`` seconds (began at clock ``start``, ended at
        ``now``, when step ``at`` begins). Returns True when the trigger fires now, a window
        opening at step ``at`` (:attr:`fired` says why)."""
        self._now = now
        cpu = self.cpu
        if cpu is not None and now >= cpu.next_at:
            # clean: no slow stretch open (a faster one's steps always become baseline steps)
            cpu.sample(now, at, self._run is None or not self._run["slow"])
        recent, srt = self._recent, self._recent_sorted
        recent.append(dt)
        self._recent_first.append(first)
        self._recent_end.append(now)
        bisect.insort(srt, dt)
        # The last k steps, fewer when they are long: those that ended in the last
        # LEVEL_SECONDS (a 100x slowdown is seen after 3 steps, not after k/2 of them).
        while len(recent) > LEVEL_MIN_STEPS and (len(recent) > self._k
                                                 or now - self._recent_end[0] > LEVEL_SECONDS):
            srt.pop(bisect.bisect_left(srt, recent.pop(0)))
            self._recent_first.pop(0)
            self._recent_end.pop(0)
        level = trimmed_mean(srt) if len(recent) >= LEVEL_MIN_STEPS else None
        run, taken = self._run, False
        if run is not None and level is not None:
            taken = self._extend(run, dt, last, level, at)
            run = self._run  # None when it ended
        if run is None:
            work = self._work_now(now) if self.armed and level is not None and level > self._held_at else None
            if self.armed and level is not None and (level > self._slow_at or level < self._fast_at or work):
                run = self._run = self._open_run(level > self._held_at, first, last, dt, start, level)
                run["work"] = work
            else:
                if not taken:  # else a stretch that ended with this step gave it to the baseline
                    self._push(dt, first)
                return False
        return self._confirm(run, at, now, held)

    def _extend(self, run: Dict, dt: float, last: int, level: float, at: int) -> bool:
        """One more step in the stretch; it ends when the level has been back for the span
        of a level (``k`` steps or :data:`LEVEL_SECONDS`, at least :data:`LEVEL_MIN_STEPS`),
        or at once when the level crossed to the other side (a slowdown during a faster
        stretch is a slow stretch of its own). Returns whether the step is in the baseline
        already: it ended a stretch whose steps joined it (:meth:`_end_run`)."""
        slow, up, down = run["slow"], self._slow_at, self._fast_at
        if (level < down) if slow else (level > up):
            self._end_run(at, "fast_steps" if slow else "slow_steps")
            return False  # not the stretch's step: it begins what comes next
        run["times"].append(dt)
        bisect.insort(run["sorted"], dt)
        run["last"] = last
        run["peak"] = max(run["peak"], level) if slow else min(run["peak"], level)
        if (dt > up) if slow else (dt < down):
            bisect.insort(run["side"], dt)
        if slow and self._own_work(run):
            up = self._held_at  # its own work per step grew: held open down to the middle line
        if (level <= up) if slow else (level >= down):
            run["back"] += 1
            run["back_s"] += dt
        else:
            run["back"], run["back_s"] = 0, 0.0
        if run["back"] >= LEVEL_MIN_STEPS and (run["back"] >= self._k or run["back_s"] >= LEVEL_SECONDS):
            return self._end_run(at, "fast_steps" if slow else "slow_steps")
        return False

    def _own_work(self, run: Dict) -> bool:
        """Whether the unconfirmed slow stretch's CPU seconds per step are at least
        :data:`~.cpu_taken.WORK_HOLD_RATIO` x those of the clean steps before it
        (:meth:`~.cpu_taken.CpuTaken.work_ratio`), read once per CPU sample."""
        cpu = self.cpu
        if cpu is None or run["confirmed_at"] is not None:
            return False
        if run["work_at"] != cpu.next_at:
            run["work_at"], ratio = cpu.next_at, cpu.work_ratio(run["start"], self._learnt_from)
            if ratio is not None:
                run["work"] = round(ratio, 2)
        return run["work"] is not None and run["work"] >= WORK_HOLD_RATIO

    def _work_now(self, now: float) -> Optional[float]:
        """The job's CPU per step over the last :data:`~.cpu_taken.WORK_OPEN_SECONDS` against
        its clean steps' before, when at least :data:`~.cpu_taken.WORK_HOLD_RATIO` (else None),
        read once per CPU sample."""
        cpu = self.cpu
        if cpu is None:
            return None
        if self._work_cache[0] != cpu.next_at:
            ratio = cpu.work_ratio(now - WORK_OPEN_SECONDS, self._learnt_from)
            self._work_cache = (cpu.next_at, round(ratio, 2) if ratio is not None and ratio >= WORK_HOLD_RATIO else None)
        return self._work_cache[1]

    def _open_run(self, slow: bool, first: int, last: int, dt: float, start: float, level: float) -> Dict:
        """The level crossed: the stretch began at the oldest of the recent steps that are
        beyond the threshold in the same direction (about k/2 steps ago)."""
        back = 0
        for v in reversed(self._recent[:-1]):
            if (v > self._slow_at) if slow else (v < self._fast_at):
                back += 1
            else:
                break
        times = self._recent[len(self._recent) - 1 - back:]
        side = sorted(v for v in times if ((v > self._slow_at) if slow else (v < self._fast_at)))
        return {"slow": slow, "first": self._recent_first[len(self._recent) - 1 - back], "last": last,
                "start": start - sum(times[:-1]),
                # "pushed": its first steps, in the baseline already (clean when they came)
                "times": list(times), "pushed": back, "held_by": None, "confirmed_at": None,
                "side": side, "sorted": sorted(times), "back": 0, "back_s": 0.0,
                # the level furthest beyond the threshold: what made it a stretch (the whole
                # stretch's mean, its steps back at the end included, can be under the threshold)
                "peak": level, "usual": None, "cpu": None,
                # the job's CPU per step over its clean steps' before (None: not read yet)
                "work": None, "work_at": None}

    def _confirm(self, run: Dict, first: int, now: float, held: bool) -> bool:
        if not self._long_enough(run):
            return False
        trig, spent = self.trigger, now - run["start"]
        if not run["slow"]:  # lastingly faster: a new level (a slowdown recovered)
            self._log_run(run, first, spent, "faster: new baseline")
            self._run = None
            # Its steps are the new level: the baseline is armed on them at once. Learnt from the
            # next steps only, a slowdown that came before it armed (2 s on a busy machine) read
            # as the level itself (a fit's slowdown 23 steps after a speed-up was missed so).
            self.rebaseline(first, "the steps got faster", run["times"], since=run["start"])
            return False
        if run["confirmed_at"] is None:
            # The baseline lower than a level it held lately (it followed a faster interlude): on a
            # busy machine (or one not sampled) a stretch within factor of that level is the job back
            # at it, unless its own CPU per step grew (its work, not the machine's pace).
            usual = self.usual_level() if self.cpu is None or self.cpu.off or self._machine_busy() else None
            if usual is not None and self.mean is not None and usual > self.mean \
                    and trimmed_mean(run["sorted"]) <= trig.factor * usual and not self._own_work(run):
                run["usual"], run["confirmed_at"] = usual, first  # confirmed, then not captured
                self._log_run(run, first, spent, "not captured: back to the usual level")
                self._run = None
                self.rebaseline(first, "back to the usual level", run["times"])
                return False
            # The job had fewer cores while other processes had more: the machine took them
            # (cpu_taken's docstring); learnt as a level of its own, never a usual level.
            level = trimmed_mean(run["sorted"]) / self.mean if self.mean else 1.0
            cpu = self.cpu if trig.cpu_check else None
            run["cpu"] = (cpu.taken_by_others(run["start"], now, level, trig.factor, run["work"]) if cpu is not None
                          else None)
            if run["cpu"] is not None and run["cpu"]["taken"]:
                run["confirmed_at"] = first
                self._log_run(run, first, spent, CPU_TAKEN_OUTCOME)
                self.notice = self.log[-1]
                self._run = None
                self.rebaseline(first, "CPU taken by other processes", run["times"], after_slowdown=True)
                return False
            run["confirmed_at"] = first
        if run["times"][-1] <= self._slow_at:
            return False  # a window opens after a slow step, not after a fast one inside the stretch
        gate = ("max_captures" if self.captures >= trig.max_captures else "analysis" if held
                else "cooldown" if first < self.next_allowed else None)
        if gate == "max_captures":
            self._log_run(run, first, spent, MAX_CAPTURES_OUTCOME)
            self.notice = self.log[-1]  # the user learns that training slowed again, once
            self._run = None
            self.rebaseline(first, "slower level not captured (max_captures)", after_slowdown=True)
            return False
        if gate is not None:
            run["held_by"] = gate
            return False
        self.captures += 1
        self.fired = self.describe(run, first, spent)
        self.next_allowed = first + trig.window_steps + trig.cooldown_steps
        self._log_run(run, first, spent, "captured")
        self._run = None
        self.rebaseline(first, "after a capture", after_slowdown=True)
        return True

    def _long_enough(self, run: Dict, share: float = 1.0) -> bool:
        """The stretch's confirmation. It needs ``consecutive`` steps beyond the threshold on
        its side. Its time: for a slower stretch, all its steps (those that find a batch
        ready between those that wait belong to the slowdown too), each counted at most
        :data:`~.steplevel.STALL_CAP` x their median (:func:`~.steplevel.capped_sum`). A faster stretch (it only re-learns the
        baseline) is confirmed as a baseline arms: by its fast steps alone (a few slow ones
        inside must not confirm it)."""
        trig, side = self.trigger, run["side"]
        if len(side) < trig.consecutive:
            return False
        if not run["slow"]:  # enough fast steps to be a baseline of their own
            return self._enough(side, share)
        n, level_s = len(run["sorted"]), capped_sum(run["sorted"])
        if level_s >= share * trig.min_seconds:
            return True
        # On a busy machine a job of 1-2 ms steps is held 1.5-1.7x slower for up to 2 s at a
        # time (a steady run of the corpus under under-load -j 1, its cores unchanged): only
        # min_seconds outlasts that.
        return n >= trig.quick_steps and level_s >= share * trig.quick_seconds and not self._machine_busy()

    def _end_run(self, first: int, why: str) -> bool:
        """The level came back before the stretch fired. When it was never confirmed, its
        steps join the baseline as the job's normal variation (module docstring); a
        confirmed one (held by an analysis or the cooldown) stays out. Returns whether its
        steps joined."""
        run, self._run = self._run, None
        if run is None:
            return False
        joined = run["confirmed_at"] is None and not (run["slow"] and self._own_work(run))
        spent = sum(run["times"])
        if run["slow"]:  # logged against the baseline it was judged on, before its steps join it
            reason = f"ended: {why}" + (f" (held by {run['held_by']})" if run["held_by"] else "")
            if len(run["side"]) >= self.trigger.consecutive or run["held_by"]:
                self._log_run(run, first, spent, reason + ("" if run["held_by"] else ": too short"))
            else:
                self.short_runs += 1
        if joined:
            for dt in run["times"][run["pushed"]:]:  # its first steps joined before it opened
                self._push(dt, first)
        return joined

    def unfinished(self, at_step: int, now: Optional[float]) -> Optional[Dict]:
        """Training ends: the slow stretch in progress when it has ``consecutive`` steps and
        half of ``min_seconds`` (or of the quick confirmation); it is logged and dropped."""
        run = self._run
        if run is None or not run["slow"] or not self._long_enough(run, share=0.5):
            return None
        spent = (now - run["start"]) if now is not None else sum(run["times"])
        out = self.describe(run, at_step, spent)
        out.pop("capture")
        self._log_run(run, at_step, spent, "training ended: too late")
        self._run = None
        return out

    # -- records --------------------------------------------------------------------------
    def describe(self, run: Dict, at_step: int, spent: float) -> Dict:
        """What the slow stretch shows (the sidecar's ``window.trigger``, records.py)."""
        times = sorted(run["times"])
        observed = percentile(times, 0.5)
        return {"kind": "slowdown", "detected_at_step": at_step, "detected_unix_ns": time.time_ns(),
                "slow_steps": [run["first"], run["last"]], "slow_step_count": len(times),
                "slow_for_s": round(spent, 3), "observed_p50_ms": _ms(observed),
                "baseline_p50_ms": _ms(self.p50), "baseline_p90_ms": _ms(self.p90),
                "baseline_mean_ms": _ms(self.mean), "observed_mean_ms": _ms(trimmed_mean(times)),
                "baseline_steps": len(self._ring), "threshold_ms": _ms(self._slow_at),
                "slower_by": round(trimmed_mean(times) / self.mean, 3) if self.mean else None,
                "held_by": run["held_by"], "confirmed_at_step": run["confirmed_at"],
                "capture": self.captures, "thresholds": self.trigger.to_dict(), "cpu": run["cpu"]}

    def _log_run(self, run: Dict, at_step: int, spent: float, outcome: str) -> None:
        times = sorted(run["times"])
        self._add_log({"event": "run", "direction": "slower" if run["slow"] else "faster",
                       "first_step": run["first"], "last_step": run["last"], "steps": len(times),
                       "seconds": round(spent, 3), "observed_p50_ms": _ms(median(times)),
                       "observed_mean_ms": _ms(trimmed_mean(times)), "baseline_p50_ms": _ms(self.p50),
                       "baseline_mean_ms": _ms(self.mean), "peak_level_ms": _ms(run["peak"]),
                       "threshold_ms": _ms(self._slow_at if run["slow"] else self._fast_at),
                       "confirmed_at_step": run["confirmed_at"], "usual_level_ms": _ms(run["usual"]),
                       "cpu": run["cpu"], "cpu_per_step_ratio": run["work"], "held_by": run["held_by"],
                       "outcome": outcome, "at_step": at_step})

    def _add_log(self, entry: Dict) -> None:
        entry["t_unix_ns"] = time.time_ns()
        log = self.log
        log.append(entry)
        if len(log) > MAX_LOG:
            del log[MAX_LOG // 4]  # keep the first entries (arming) and the latest


def _ms(seconds: Optional[float]) -> Optional[float]:
    return round(1e3 * seconds, 4) if seconds is not None and seconds != _INF else None
