"""Windows whose training went away without saying so: a ``fit`` left by an exception or a
``KeyboardInterrupt`` (Keras calls ``on_train_end`` only when ``fit`` ends normally), a
custom loop interrupted between two steps, or an interpreter that exits with a window open.

A window left open keeps TensorFlow's profiler tracing every op of the process (memory
grows for as long as a notebook kernel lives) and keeps the profiler, one per process, from
any later window. So each open window has an *owner*: the Python frame that drives its
training (the ``fit`` frame that called ``on_train_begin``, or the frame of a custom loop
that entered ``profiler.step()``) and its thread. One daemon thread per process, the
:class:`OwnerWatch`, looks every :data:`CHECK_INTERVAL_S` at the stacks of the threads that
own open windows (``sys._current_frames``, a snapshot under the GIL, no tracing hook): a
``fit`` frame no longer on its thread's stack means ``fit`` was left without
``on_train_end``; the window is then closed as ``interrupted``, with the steps recorded so
far. It sleeps on an event while no window is open, so it costs nothing outside windows and
one thread for the life of the process however many windows a job opens.

No TensorFlow here: the callback does the closing (``BottleneckProfiler._close_orphan``).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Optional, Tuple

#: Seconds between two looks at the owners' stacks while a window is open: an interrupted
#: notebook cell stops the profiler within this time (a stack walk costs microseconds).
CHECK_INTERVAL_S = 0.25
#: A custom loop's owner (the frame that entered ``step()``) may be a helper function that
#: returns after each step: such a window is closed only when, in addition, no step began
#: for this long (a loop that still runs keeps stepping).
LOOP_IDLE_S = 2.0
#: Frames searched above ``on_train_begin`` for Keras' ``fit`` (Keras 3 and tf-keras call
#: it 2-3 frames below; wrappers such as ``filter_traceback`` add one each).
FIT_SEARCH_DEPTH = 40


def fit_frame(start) -> Optional[object]:
    """The nearest frame named ``fit`` at or above ``start`` (a frame object), or None."""
    f, depth = start, 0
    while f is not None and depth < FIT_SEARCH_DEPTH:
        if f.f_code.co_name == "fit":
            return f
        f, depth = f.f_back, depth + 1
    return None


class Owner:
    """What drives an open window's training: a frame on a thread.

    Args:
      frame: the ``fit`` frame, or the custom loop's frame that entered ``step()``.
      kind: ``"fit"`` or ``"loop"``.
    """
    __slots__ = ("frame", "thread_id", "kind", "last_step")

    def __init__(self, frame, kind: str):
        self.frame, self.kind = frame, kind
        self.thread_id = threading.get_ident()
        self.last_step = time.monotonic()

    def on_stack(self) -> bool:
        """True while the owner frame is on its thread's current stack."""
        top = sys._current_frames().get(self.thread_id)
        while top is not None:
            if top is self.frame:
                return True
            top = top.f_back
        return False

    def gone(self, strict: bool = False) -> bool:
        """True when the training this owner drove was left: its frame is off the stack
        (for a loop, also no step for :data:`LOOP_IDLE_S`, unless ``strict``: asked from
        the owner's own thread, which is elsewhere now, so the loop cannot be running)."""
        if self.on_stack():
            return False
        if self.kind == "fit" or (strict and self.thread_id == threading.get_ident()):
            return True
        return time.monotonic() - self.last_step > LOOP_IDLE_S

    def describe(self) -> str:
        """``fit`` or ``custom loop``, for messages."""
        return "fit" if self.kind == "fit" else "custom loop"


class OwnerWatch:
    """The process' watcher of open windows (one daemon thread, started with the first
    window). Profilers register while a window is open; the thread calls their
    ``_close_orphan()`` when their owner is gone."""

    def __init__(self) -> None:
        self._open: set = set()  # strong: a profiler with an open window lives until it is closed
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def add(self, profiler) -> None:
        """``profiler`` opened a window."""
        with self._lock:
            self._open.add(profiler)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tfbneck-window-watch", daemon=True)
                self._thread.start()
        self._wake.set()

    def discard(self, profiler) -> None:
        """``profiler``'s window closed."""
        with self._lock:
            self._open.discard(profiler)

    def profilers(self) -> list:
        """The profilers with an open window now."""
        with self._lock:
            return list(self._open)

    def _run(self) -> None:  # pragma: no cover - timing-dependent; tests/test_interrupts.py drives it
        while True:
            self._wake.wait()
            time.sleep(CHECK_INTERVAL_S)
            with self._lock:
                if not self._open:
                    self._wake.clear()
                    continue
                watched = list(self._open)
            for p in watched:
                try:
                    p._close_orphan()
                except Exception:  # noqa: BLE001, S112 - the watch must outlive any one window
                    continue


#: The process' one watch (TensorFlow's profiler is one per process too).
WATCH = OwnerWatch()


class InterruptMixin:
    """Methods of ``BottleneckProfiler`` that close a window its training left abnormally
    (module docstring)."""

    # What the methods read of the callback, set in BottleneckProfiler.__init__ (annotations
    # only: they tell the type checker, they create nothing).
    tracker: Any
    _capture: Any
    _owner: Optional[Owner]
    _cut: Optional[Tuple[Optional[str], str]]
    _window_lock: Any
    _warn: Callable[..., None]
    _guard: Callable[..., Any]
    _close_window: Callable[[str], None]

    def _interrupt(self, exception: Optional[str], how: str) -> None:
        """Close the open window as ``interrupted``: ``exception`` is the exception's type
        name when known, ``how`` says how the interruption was seen (sidecar
        ``window.interrupted.detected``)."""
        with self._window_lock:
            cap = self._capture
            if cap is None:
                return
            win, got = cap.window, self.tracker.markers
            upto = f"after step {got[-1][1]}" if got else "before a step of it was recorded"
            what = f"with {exception}" if exception else "without finishing (an exception)"
            self._warn("interrupted", f"training ended inside a profiling window of steps {win[0]}-{win[1]} "
                                      f"{upto}, {what}; {how}: the profiler is stopped and the session keeps "
                                      f"the complete steps, marked interrupted")
            self._cut = (exception, how)
            self._close_window("interrupted")

    def _close_orphan(self, strict: bool = False) -> bool:
        """Close the open window when its owner is gone (called by :data:`WATCH`'s thread,
        and by another profiler that needs the profiler). Returns True when it closed one."""
        owner = self._owner
        if self._capture is None or owner is None or not owner.gone(strict):
            return False
        with self._window_lock:
            if self._capture is None or self._owner is not owner:
                return False
            left = "fit" if owner.kind == "fit" else "the custom loop"
            self._guard(self._interrupt, None, f"{left} was left without ending the window")
        return True

    def _reclaim_profiler(self) -> None:
        """Before opening a window: close the windows of other profilers whose training was
        left (an interrupted fit in a notebook), so that this window gets the profiler."""
        for other in WATCH.profilers():
            if other is not self:
                other._close_orphan(strict=True)

    def _interruption_record(self, markers) -> Optional[dict]:
        """The sidecar's ``window.interrupted`` of a window being closed as interrupted."""
        exception, how = self._cut or (None, "unknown")
        self._cut = None
        return {"steps_recorded": sum(b - a + 1 for a, b in markers), "markers_recorded": len(markers),
                "exception": exception, "detected": how}
