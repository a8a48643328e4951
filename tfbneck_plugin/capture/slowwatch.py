"""The slowdown trigger's state machine: a baseline of the current level of step times, a
slow stretch found by the median of the last few steps, its confirmation, and the record
of what it did (issue 24). Pure Python, no TensorFlow; fed one step time at a time by
:class:`~tfbneck_plugin.capture.steptime.StepTimer`.

How it decides (each part fixes a way issue 24's fit was missed):

* **Baseline** = one *level*: the clean steps since the last level change (at most
  ``horizon_steps``). It arms after :data:`MIN_BASELINE_STEPS` of them, so a slowdown a few
  seconds into training is compared with the steps before it. Steps of a slow stretch never
  join it while the stretch lasts. After a capture, or when a slow stretch was confirmed
  but could not be captured (``max_captures``), or when the steps got lastingly *faster*
  (a slowdown that recovered), the baseline starts again from the next steps: it learns the
  new level instead of mixing two, so a slowdown that returns is seen again.
* **Slow stretch**: the median of the last ``k`` steps is above ``factor`` x the baseline's
  median, ``k`` about :data:`LEVEL_SECONDS` of baseline steps, odd, between
  :data:`LEVEL_MIN_STEPS` and :data:`LEVEL_MAX_STEPS`, and fewer (not under
  :data:`LEVEL_MIN_STEPS`) when the last ones are long: only those that ended within
  :data:`LEVEL_SECONDS`. A median ignores a minority of fast
  steps (issue 24's single 30 ms step among 100 ms ones ended the old run) and of noisy
  slow ones, so no separate 90th-percentile guard is needed.
* **Confirmation**: the stretch has ``consecutive`` steps beyond the threshold lasting
  ``min_seconds`` together (counted as their number x their median, so that one stall of
  seconds is not a slowdown of seconds); or, for short steps, ``quick_steps`` such steps
  lasting ``quick_seconds`` (a 2 ms step job is confirmed in
  well under a second instead of ``min_seconds``). While an analysis runs (``holds``) or
  during the cooldown, a confirmed stretch waits and fires at its first slow step after,
  if it still lasts (a window opens after a slow step, never after a fast one).

Every stretch that reached ``consecutive`` steps, and why it ended or was not captured, is
kept in :attr:`SlowdownWatch.log` (the trend file's ``trigger_log``).
"""
from __future__ import annotations

import bisect
import time
from typing import Dict, List, Optional

#: Clean steps the baseline needs before the trigger is armed (and again after each reset).
#: Short, so that an early slowdown is compared with the steps before it; the median of 20
#: steps is within 10% of the median of 200 on every steady run of the corpus
#: (docs/slowdown_capture.md).
MIN_BASELINE_STEPS = 20
#: The baseline's p50/p90 are recomputed every this many clean steps (sorting <= 256
#: values, ~20 us, amortised to about 1 us per step).
RECOMPUTE_EVERY = 16
#: The level is the median of about this many seconds of baseline steps ...
LEVEL_SECONDS = 0.5
#: ... and at least / at most this many steps (odd: a median of whole steps).
LEVEL_MIN_STEPS, LEVEL_MAX_STEPS = 5, 31
#: Entries kept in :attr:`SlowdownWatch.log` (the first and the latest).
MAX_LOG = 40

_INF = float("inf")


def percentile(sorted_values: List[float], q: float) -> float:
    """The ``q`` quantile (0-1) of an ascending list, by linear interpolation between the
    closest ranks (numpy's default method). Raises IndexError on an empty list."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _median(sorted_values: List[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else 0.5 * (sorted_values[mid - 1] + sorted_values[mid])


class SlowdownWatch:
    """The baseline, the slow stretch and the log of one job (module docstring).

    Args:
      trigger: a :class:`~tfbneck_plugin.capture.steptime.SlowdownTrigger`.

    Attributes:
      p50, p90: the baseline (seconds), None before it exists.
      captures: windows fired so far.
      fired: what the last firing saw (:meth:`describe`'s dict).
      log: the trigger's record (dicts with ``event``: ``armed``, ``run``, ``rebaselined``).
      short_runs: slow stretches that ended before ``consecutive`` steps (not logged one by one).
    """

    def __init__(self, trigger):
        self.trigger = trigger
        self.p50: Optional[float] = None
        self.p90: Optional[float] = None
        self.captures = 0
        self.fired: Optional[Dict] = None
        self.log: List[Dict] = []
        self.short_runs = 0
        self.next_allowed = 0          # first step the trigger may fire at (cooldown)
        self._armed_logged = False
        self._reset_baseline()
        self._run: Optional[Dict] = None

    # -- baseline -------------------------------------------------------------------------
    def _reset_baseline(self) -> None:
        self._ring: List[float] = []
        self._ring_i = self._since = 0
        self._k = LEVEL_MIN_STEPS
        self._recent: List[float] = []     # the last k step times, in order
        self._recent_first: List[int] = []  # and the first batch of each of those steps
        self._recent_end: List[float] = []  # and the clock when each ended
        self._recent_sorted: List[float] = []
        self._slow_at = self._fast_at = _INF  # level thresholds, armed when finite
        self.armed = False

    def _push(self, dt: float, step: int) -> None:
        ring, horizon = self._ring, self.trigger.horizon_steps
        if len(ring) < horizon:
            ring.append(dt)
        else:
            ring[self._ring_i] = dt
            self._ring_i = (self._ring_i + 1) % horizon
        self._since += 1
        if self._since >= RECOMPUTE_EVERY or (not self.armed and len(ring) >= MIN_BASELINE_STEPS):
            self._recompute(step)

    def _recompute(self, step: int) -> None:
        self._since = 0
        values = sorted(self._ring)
        n = len(values)
        if n < MIN_BASELINE_STEPS:
            return
        self.p50, self.p90 = percentile(values, 0.5), percentile(values, 0.9)
        k = int(LEVEL_SECONDS / self.p50) if self.p50 > 0 else LEVEL_MAX_STEPS
        self._k = min(LEVEL_MAX_STEPS, max(LEVEL_MIN_STEPS, k | 1))
        self._slow_at = self.trigger.factor * self.p50
        self._fast_at = self.p50 / self.trigger.factor
        if not self.armed:
            self.armed = True
            self._add_log({"event": "armed", "step": step, "baseline_p50_ms": _ms(self.p50),
                           "baseline_steps": n, "threshold_ms": _ms(self._slow_at), "level_steps": self._k})

    def rebaseline(self, step: int, why: str) -> None:
        """Learn the baseline again from the next steps (a new level)."""
        self._reset_baseline()
        self._add_log({"event": "rebaselined", "step": step, "why": why})

    # -- every step -----------------------------------------------------------------------
    def step(self, dt: float, first: int, last: int, start: float, now: float, held: bool, at: int) -> bool:
        """The step ``first..last`` took ``dt`` seconds (began at clock ``start``, ended at
        ``now``, when step ``at`` begins). Returns True when the trigger fires now, a window
        opening at step ``at`` (:attr:`fired` says why)."""
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
        level = _median(srt) if len(recent) >= LEVEL_MIN_STEPS else None
        run = self._run
        if run is None:
            if self.armed and level is not None and (level > self._slow_at or level < self._fast_at):
                run = self._run = self._open_run(level > self._slow_at, first, last, dt, start)
            else:
                self._push(dt, first)
                return False
        else:
            run["times"].append(dt)
            run["last"] = last
            if (dt > self._slow_at) if run["slow"] else (dt < self._fast_at):
                bisect.insort(run["side"], dt)
            if (level <= self._slow_at) if run["slow"] else (level >= self._fast_at):
                self._end_run(at, "fast_steps" if run["slow"] else "slow_steps")
                return False
        return self._confirm(run, at, now, held)

    def _open_run(self, slow: bool, first: int, last: int, dt: float, start: float) -> Dict:
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
                "times": list(times), "pushed": back, "held_by": None, "confirmed_at": None,
                "side": side}

    def _confirm(self, run: Dict, first: int, now: float, held: bool) -> bool:
        if not self._long_enough(run):
            return False
        trig, spent = self.trigger, now - run["start"]
        if not run["slow"]:  # lastingly faster: a new level (a slowdown recovered)
            self._log_run(run, first, spent, "faster: new baseline")
            self._run = None
            self.rebaseline(first, "the steps got faster")
            return False
        if run["confirmed_at"] is None:
            run["confirmed_at"] = first
        if run["times"][-1] <= self._slow_at:
            return False  # a window opens after a slow step, not after a fast one inside the stretch
        gate = ("max_captures" if self.captures >= trig.max_captures else "analysis" if held
                else "cooldown" if first < self.next_allowed else None)
        if gate == "max_captures":
            self._log_run(run, first, spent, "not captured: max_captures reached")
            self._run = None
            self.rebaseline(first, "slower level not captured (max_captures)")
            return False
        if gate is not None:
            run["held_by"] = gate
            return False
        self.captures += 1
        self.fired = self.describe(run, first, spent)
        self.next_allowed = first + trig.window_steps + trig.cooldown_steps
        self._log_run(run, first, spent, "captured")
        self._run = None
        self.rebaseline(first, "after a capture")
        return True

    def _long_enough(self, run: Dict, share: float = 1.0) -> bool:
        """The stretch's confirmation: counted are its steps beyond the threshold on its side
        (a few slow steps inside a faster stretch must not confirm it, nor fast ones a slow
        one), and their time as their number x their median (one stall of seconds among
        them, as a busy machine gives, is not a slowdown of seconds)."""
        trig, side = self.trigger, run["side"]
        n = len(side)
        if n < trig.consecutive:
            return False
        level_s = n * _median(side)
        return level_s >= share * trig.min_seconds or (n >= trig.quick_steps and level_s >= share * trig.quick_seconds)

    def _end_run(self, first: int, why: str) -> None:
        """The level came back before the stretch fired: the steps of jitter (a stretch never
        confirmed) join the baseline; those of a confirmed one held back do not (they were
        not the job's normal level)."""
        run, self._run = self._run, None
        spent = sum(run["times"])
        if run["slow"]:
            reason = f"ended: {why}" + (f" (held by {run['held_by']})" if run["held_by"] else "")
            if len(run["side"]) >= self.trigger.consecutive or run["held_by"]:
                self._log_run(run, first, spent, reason + ("" if run["held_by"] else ": too short"))
            else:
                self.short_runs += 1
        if run["confirmed_at"] is None:
            for dt in run["times"][run["pushed"]:]:  # the first ones joined it before the level crossed
                self._push(dt, first)

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
                "baseline_steps": len(self._ring), "threshold_ms": _ms(self._slow_at),
                "slower_by": round(observed / self.p50, 3) if self.p50 else None,
                "held_by": run["held_by"], "confirmed_at_step": run["confirmed_at"],
                "capture": self.captures, "thresholds": self.trigger.to_dict()}

    def _log_run(self, run: Dict, at_step: int, spent: float, outcome: str) -> None:
        times = sorted(run["times"])
        self._add_log({"event": "run", "direction": "slower" if run["slow"] else "faster",
                       "first_step": run["first"], "last_step": run["last"], "steps": len(times),
                       "seconds": round(spent, 3), "observed_p50_ms": _ms(_median(times)),
                       "baseline_p50_ms": _ms(self.p50), "confirmed_at_step": run["confirmed_at"],
                       "held_by": run["held_by"], "outcome": outcome, "at_step": at_step})

    def _add_log(self, entry: Dict) -> None:
        entry["t_unix_ns"] = time.time_ns()
        log = self.log
        log.append(entry)
        if len(log) > MAX_LOG:
            del log[MAX_LOG // 4]  # keep the first entries (arming) and the latest


def _ms(seconds: Optional[float]) -> Optional[float]:
    return round(1e3 * seconds, 4) if seconds is not None and seconds != _INF else None
