"""A custom loop's steps, ``with profiler.step():`` (returned by
:meth:`~tfbneck_plugin.capture.callback.BottleneckProfiler.step`): :class:`StepContext` is the
context manager, :class:`LoopSteps` what it does for the callback: count the step, write the
step-time statistics every :data:`LOOP_STEP_TIME_EVERY` steps (a loop has no epochs), note the
loop's frame as the owner of an open window (:mod:`.interrupts`), let the window controller
open or close a window and its step marker, and close the window as interrupted when an
exception leaves the step. No TensorFlow here.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, Optional, Tuple

if TYPE_CHECKING:
    from .controller import WindowController
    from .interrupts import TrainingDriver
    from .safety import Guard
    from .tracker import StepTracker

#: Custom loops have no epochs: the step-time statistics are written every this many steps.
LOOP_STEP_TIME_EVERY = 1000
#: Said once when a profiler is closed without having seen a step: neither ``fit`` nor
#: ``step()`` drove it.
NO_STEP_WARNING = ("BottleneckProfiler was closed without seeing a training step, so nothing was profiled: pass it "
                   "to model.fit(..., callbacks=[profiler]), or wrap each step of a custom loop (including a loop "
                   "over model.train_on_batch, which calls no callbacks) in `with profiler.step():`")


class LoopSteps:
    """The custom loop's side of the callback.

    Args:
      tracker: counts steps (:class:`.tracker.StepTracker`).
      driver: what drives training (:class:`.interrupts.TrainingDriver`).
      windows: opens and closes windows (:class:`.controller.WindowController`).
      guard: runs the callback's work; an error never reaches the loop (:class:`.safety.Guard`).
      start_services: starts the run services (the system view) at the loop's first step.
      end_period: ``end_period(last step, epoch)``: the step-time period ending there is written
        (:meth:`.longjob.StepTimeReporter.end_period`).
    """

    def __init__(self, tracker: "StepTracker", driver: "TrainingDriver", windows: "WindowController",
                 guard: "Guard", start_services: Callable[[], None],
                 end_period: Callable[[int, Optional[int]], None]):
        self._tracker, self._driver, self._windows, self._guard = tracker, driver, windows, guard
        self._start_services, self._end_period = start_services, end_period

    def count(self, step_num: Optional[int], batches: int) -> Optional[Tuple[int, int]]:
        """A step begins: count it. Returns ``(first, last)`` batch when the callback acts at it
        (:meth:`act`), None otherwise (a clock read and a few comparisons)."""
        tr = self._tracker
        if tr.flush_every is None and not self._driver.in_fit:  # first custom-loop step: no epochs
            tr.set_flush_every(LOOP_STEP_TIME_EVERY)
            self._guard(self._start_services)
        return tr.loop_step(step_num, batches)

    def act(self, step: Tuple[int, int], frame) -> None:
        """The callback acts at ``step``, begun from ``frame`` (the loop's frame)."""
        owner = self._driver.loop_stepped(frame)
        if owner is not None:  # the loop's frame owns a window open now (module interrupts)
            self._windows.adopt(owner)
        if self._tracker.flush_due:
            self._guard(self._end_period, step[0] - 1, None)
        self._guard(self._windows.step_begin, *step)

    def left(self, exc_type) -> None:
        """The step ended; ``exc_type``: the exception that left it, or None."""
        windows = self._windows
        if exc_type is not None and windows.capture is not None:  # the step raised inside a window
            self._guard(windows.interrupt, exc_type.__name__, "the exception left profiler.step()")
        elif windows.marker is not None:
            self._guard(windows.step_end)


class StepContext:
    """Returned by :meth:`BottleneckProfiler.step`; ``with`` it around one training step."""
    __slots__ = ("_loop", "_num", "_batches")

    def __init__(self, loop: LoopSteps, step_num: Optional[int], batches: int):
        self._loop, self._num, self._batches = loop, step_num, batches

    def __enter__(self):
        step = self._loop.count(self._num, self._batches)
        if step is not None:
            self._loop.act(step, sys._getframe(1))
        return self

    def __exit__(self, exc_type, *exc):
        self._loop.left(exc_type)
        return False
