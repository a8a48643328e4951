"""Which training step we are at, and when a profiling window opens and closes: the
step-counting state machine of :class:`~tfbneck_plugin.capture.callback.BottleneckProfiler`,
kept apart from TensorFlow so that it is tested in microseconds (``tests/test_tracker.py``).

Steps are counted in batches from 1, across ``fit`` calls and custom loops, the way
Keras' ``TensorBoard(profile_batch=...)`` counts them. Keras calls batch hooks once per
*execution* when ``steps_per_execution`` (``spe``) > 1: one step then covers the batches
``first..last`` of that execution, and a window covers the whole executions that touch
it. The tracker only decides; the callback's window controller (:mod:`.controller`) acts
(starts the profiler, writes the step marker) and reports back with :meth:`StepTracker.opened`, :meth:`StepTracker.step_began`,
:meth:`StepTracker.step_ended`, :meth:`StepTracker.close` or :meth:`StepTracker.skip`.

Every training step, profiled or not, enters through :meth:`StepTracker.fit_batch` (Keras
hooks) or :meth:`StepTracker.loop_step` (custom loops), which tick the step clock
(:class:`~tfbneck_plugin.capture.steptime.StepTimer`). When the clock sees a
slowdown, the tracker opens a *triggered* window at the step beginning now (merged with a
scheduled window that would begin inside it, so windows never overlap). Outside windows
both cost a clock read and a few comparisons, and return None.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from .cpu_taken import notice_lines
from .schedule import MAX_WINDOW_STEPS, StepSchedule
from .steptime import FIRED, NOTICE, SlowdownTrigger, StepTimer

#: "No window left": compares greater than any step number.
NEVER = float("inf")
#: Larger than any step a job reaches: the end of an open-ended search in the schedule.
_FAR = 1 << 62

Range = Tuple[int, int]


@dataclass
class ClosedWindow:
    """What a window recorded, returned by :meth:`StepTracker.close`.

    Attributes:
      window: the window that was open, ``(start, stop)`` 1-based batches.
      steps: ``(first, last)`` batch recorded; the window itself when no step was
        recorded. Wider than ``window`` when executions of several batches straddle it.
      markers: one ``(first, last)`` batch range per complete step recorded (the list
        the tracker filled while the window was open).
      also_covered: later requested windows that lie entirely inside ``steps`` (whole
        executions recorded them), in order; they will not open windows of their own.
      trigger: for a window the slowdown trigger opened, what it saw
        (:attr:`.steptime.StepTimer.fired`); None for a scheduled window.
    """
    window: Range
    steps: Range
    markers: List[Range] = field(default_factory=list)
    also_covered: List[Range] = field(default_factory=list)
    trigger: Optional[Dict] = None


class StepTracker:
    """Counts steps and decides when windows of the schedule open and close.

    Attributes (read by the callback; written only through the methods):
      seen: last batch begun (0 before the first step).
      spe: batches per Keras execution (``steps_per_execution``), 1 in custom loops.
      next_start: first batch at which a window may open (``NEVER`` when none is left).
      window: the open window ``(start, stop)``, or None.
      step: the open step ``(first, last)`` whose marker is being recorded, or None.
      markers: the complete steps recorded in the open window.
      timer: the step clock (:class:`~tfbneck_plugin.capture.steptime.StepTimer`).
      opening: after :meth:`window_to_open` returned a window the trigger asked for, what
        the trigger saw (else None); ``trigger`` of the open window likewise.
      flush_every: write the step-time statistics every this many batches (None: the
        callback does it at each epoch's end); ``flush_due`` is True when a step after
        ``next_flush`` begins: the period of steps up to ``first - 1`` is over.
      max_steps: a window closes once it has recorded this many steps, counted as the
        profiler marks them (executions when ``spe`` > 1), whatever its end.

    Args:
      schedule: the windows to profile (:func:`~tfbneck_plugin.capture.schedule.profile_steps`).
      trigger: slowdown thresholds (None: no triggered windows; steps are timed anyway).
      flush_every: see the attribute.
      warn: ``warn(kind, line, repeat line)`` tells the user of a slow stretch the trigger
        confirmed but did not capture (:func:`.cpu_taken.notice_lines`).
    """

    def __init__(self, schedule: StepSchedule, trigger: Optional[SlowdownTrigger] = None,
                 flush_every: Optional[int] = None, max_steps: int = MAX_WINDOW_STEPS,
                 warn: Optional[Callable[[str, str, Optional[str]], None]] = None):
        self.schedule = schedule
        self.warn = warn  # (key, message, repeat): the callback's one-warning-per-kind
        self.max_steps = max_steps
        self.stopped = False  # stop(): no window opens any more
        self.timer = StepTimer(trigger)
        self.opening: Optional[Dict] = None
        self.trigger: Optional[Dict] = None
        self._pending: Optional[Range] = None  # the window the trigger asked for, not open yet
        self.flush_every = flush_every
        self.next_flush = flush_every if flush_every else NEVER
        self.flush_due = False
        self.seen = 0
        self.spe = 1
        self.epoch_offset = 0                # batches before the current epoch
        self.epoch_end: Optional[int] = None  # last batch of the current epoch, when Keras knows it
        self.consumed = 0                    # last batch covered by a window already handled
        first = schedule.first_start()
        self.next_start = first if first is not None else NEVER
        self.window: Optional[Range] = None
        self.step: Optional[Range] = None
        self.markers: List[Range] = []

    # -- every step (hot path) ------------------------------------------------------------
    def fit_batch(self, batch: int) -> Optional[Range]:
        """Keras began batch ``batch`` (0-based in the epoch; with ``spe`` > 1 the first
        batch of an execution). Returns the step ``(first, last)`` (1-based batches) when
        the callback has something to do (a window may open, a marker is open or must
        be written), else None."""
        first = self.epoch_offset + batch + 1
        last = first + self.spe - 1
        end = self.epoch_end
        if end is not None and last > end >= first:
            last = end  # the epoch's last execution is shorter
        self.seen = last
        return self._counted(first, last)

    def loop_step(self, step_num: Optional[int] = None, batches: int = 1) -> Optional[Range]:
        """A custom loop begins a step of ``batches`` batches, numbered ``step_num`` (None:
        the batch after the last one seen). Returns ``(first, last)`` as :meth:`fit_batch`."""
        first = self.seen + 1 if step_num is None else step_num
        last = first + batches - 1
        if last > self.seen:
            self.seen = last
        return self._counted(first, last)

    def _counted(self, first: int, last: int) -> Optional[Range]:
        """After a step is counted: time it (the slowdown trigger may fire), then None when
        the callback has nothing to do at this step (the fast path), else ``(first, last)``."""
        ticked = self.timer.tick(first, last)
        if ticked == FIRED:
            self._triggered(first)
        elif ticked == NOTICE and self.warn is not None:
            self.warn(*notice_lines(self.take_notice()))  # one line per kind, not a window
        if self.step is None and self.window is None and last < self.next_start and first <= self.next_flush:
            return None
        return self._acting(first, last)

    def _acting(self, first: int, last: int) -> Range:
        """The callback acts at this step: it is not timed; a flush may be due."""
        self.timer.not_timed()
        if first > self.next_flush and self.flush_every:  # the steps up to next_flush are over
            self.flush_due = True
            self.next_flush = ((first - 1) // self.flush_every + 1) * self.flush_every
        return first, last

    def take_notice(self) -> Optional[Dict]:
        """The trigger's log entry of a slow stretch it confirmed but did not capture (other
        processes took the job's CPU, or ``max_captures`` was reached), once; else None."""
        watch = self.timer.watch
        if watch is None or watch.notice is None:
            return None
        notice, watch.notice = watch.notice, None
        return notice

    def _triggered(self, first: int) -> None:
        """The step clock saw a slowdown: a window opens at step ``first`` (merged with a
        scheduled window beginning inside it)."""
        if self.window is not None or self._pending is not None:
            return  # cannot happen: steps inside windows are not timed
        trig = self.timer.trigger
        if trig is None:
            return  # cannot happen: only a trigger fires
        length = max(trig.window_steps, self._steps_lasting(trig.window_seconds) * self.spe)
        lo = max(first, self.consumed + 1)
        win = (lo, lo + length - 1)
        sched = self.schedule.window_for(lo, win[1])
        if sched is not None:
            win = (lo, max(win[1], sched[1]))
        self._pending = win
        self.next_start = min(self.next_start, lo)

    def _steps_lasting(self, seconds: float) -> int:
        """Marked steps (executions when ``spe`` > 1) that last ``seconds`` at the median
        step time of the slow stretch that fired, at most ``max_steps``."""
        fired = self.timer.watch.fired if self.timer.watch is not None else None
        step_ms = (fired or {}).get("observed_p50_ms")
        if not step_ms or seconds <= 0:
            return 0
        return min(self.max_steps, math.ceil(seconds * 1e3 / step_ms))

    def set_flush_every(self, every: Optional[int]) -> None:
        """Write the step-time statistics every ``every`` batches from now on (None: never)."""
        self.flush_every = every
        self.next_flush = (self.seen // every + 1) * every if every else NEVER  # the period's last step

    def begin_epoch(self, steps: Optional[int], epoch: Optional[int] = None) -> None:
        """A Keras epoch begins; ``steps``: its number of batches when known; ``epoch``:
        Keras' 0-based epoch index, for a schedule in epochs (``every_epochs``)."""
        self.timer.restart()
        self.epoch_offset = self.seen
        count = steps if isinstance(steps, int) and steps > 0 else None
        self.epoch_end = self.epoch_offset + count if count is not None else None
        if epoch is not None and not self.stopped:
            win = self.schedule.epoch_began(epoch + 1, self.epoch_offset + 1, count)
            if win is not None and win[0] > self.consumed:
                self.next_start = min(self.next_start, win[0])

    # -- windows --------------------------------------------------------------------------
    def window_passed(self, first: int) -> bool:
        """True when a window is open and step ``first`` lies after its end (a custom loop
        jumped past it): the window must close before this step."""
        return self.window is not None and first > self.window[1]

    def window_to_open(self, first: int, last: int) -> Optional[Range]:
        """With no window open: the window that step ``first..last`` opens, clipped to
        start at or after ``first`` (and after what earlier windows covered), or None;
        when None, ``next_start`` moves to the next window's first batch."""
        self.opening = None
        if last < self.next_start:
            return None
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self.opening = self.timer.fired
            return (max(pending[0], first), max(pending[1], first))
        lo = max(first, self.consumed + 1)
        win = self.schedule.window_for(lo, last) if lo <= last else None
        if win is None:
            nxt = self.schedule.next_start(max(last, self.consumed))
            self.next_start = nxt if nxt is not None else NEVER
        return win

    def opened(self, window: Range) -> None:
        """The callback opened ``window`` (the profiler runs)."""
        self.window, self.markers = window, []
        self.trigger, self.opening = self.opening, None

    def skip(self, window: Range) -> None:
        """``window`` could not be captured: go on with the next one."""
        self.opening = None
        self._advance_past(window[1])

    def step_began(self, first: int, last: int) -> None:
        """The callback opened the step marker of ``first..last``."""
        self.step = (first, last)

    def step_ended(self) -> bool:
        """The open step marker was closed. Records the step in the open window; returns
        True when that completed the window (it must close now)."""
        step, self.step = self.step, None
        if step is None or self.window is None:
            return False
        self.markers.append(step)
        return step[1] >= self.window[1] or len(self.markers) >= self.max_steps

    def step_cut(self) -> Optional[Range]:
        """The open step was cut by an exception: it is not recorded. Returns it."""
        step, self.step = self.step, None
        return step

    def close(self) -> ClosedWindow:
        """Close the open window; returns what it recorded and moves past it.

        Raises:
          RuntimeError: no window is open.
        """
        if self.window is None:
            raise RuntimeError("StepTracker.close(): no window is open")
        win, markers = self.window, self.markers
        steps = (markers[0][0], markers[-1][1]) if markers else win
        covered = []
        # Later windows recorded by the same executions; for a triggered window, also the
        # scheduled windows it was merged with.
        lo = win[0] if self.trigger is not None else win[1] + 1
        while lo <= steps[1]:
            w = self.schedule.window_for(lo, steps[1])
            if w is None or w[1] > steps[1]:
                break
            covered.append(w)
            lo = w[1] + 1
        trigger, self.trigger = self.trigger, None
        self.window, self.step, self.markers = None, None, []
        self._advance_past(max(win[1], steps[1]))
        return ClosedWindow(window=win, steps=steps, markers=markers, also_covered=covered, trigger=trigger)

    def stop(self) -> None:
        """No window will open any more (profiling turned off)."""
        self.stopped = True
        self.next_start = NEVER
        self.window, self.step, self.markers = None, None, []
        self._pending = self.trigger = self.opening = None
        self.timer.trigger = None  # the trigger is off
        self.next_flush = NEVER    # and no step-time statistics are written any more

    def first_window(self) -> Optional[Range]:
        """The schedule's first window, or None."""
        return self.schedule.window_for(1, _FAR)

    def _advance_past(self, upto: int) -> None:
        self.consumed = max(self.consumed, upto)
        nxt = self.schedule.next_start(self.consumed)
        self.next_start = nxt if nxt is not None else NEVER
