"""The context manager of one custom-loop step, ``with profiler.step():`` (returned by
:meth:`~tfbneck_plugin.capture.callback.BottleneckProfiler.step`): counts the step, lets the
callback open or close a window and its step marker, notes the loop's frame as the owner of
an open window (:mod:`.interrupts`), and closes the window as interrupted when an exception
leaves the step. No TensorFlow here: the callback does the work.
"""
from __future__ import annotations

import sys

from .interrupts import Owner

#: Custom loops have no epochs: the step-time statistics are written every this many steps.
LOOP_STEP_TIME_EVERY = 1000


class StepContext:
    """Returned by :meth:`BottleneckProfiler.step`; ``with`` it around one training step."""
    __slots__ = ("_p", "_num", "_batches")

    def __init__(self, profiler, step_num, batches):
        self._p, self._num, self._batches = profiler, step_num, batches

    def __enter__(self):
        p = self._p
        if p.tracker.flush_every is None and not p._in_fit:  # first custom-loop step: no epochs
            p.tracker.set_flush_every(LOOP_STEP_TIME_EVERY)
            p._guard(p._start_run_services)
        step = p.tracker.loop_step(self._num, self._batches)
        if step is not None:
            if not p._in_fit:  # the loop's frame owns a window open now (module interrupts)
                p._loop_owner = Owner(sys._getframe(1), "loop")
                if p._capture is not None:
                    p._owner = p._loop_owner
            if p.tracker.flush_due:
                p._guard(p._flush_step_times, step[0] - 1, None)
            p._guard(p._step_begin, *step)
        return self

    def __exit__(self, exc_type, *exc):
        p = self._p
        if exc_type is not None and p._capture is not None:  # the step raised inside a window
            p._guard(p._interrupt, exc_type.__name__, "the exception left profiler.step()")
        elif p._trace is not None:
            p._guard(p._step_end)
        return False
