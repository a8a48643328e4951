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

:class:`TrainingDriver` says which owner a window takes when it opens; the window controller
(:class:`~.controller.WindowController`) registers with :data:`WATCH` while its window is open
and does the closing. No TensorFlow here.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, List, Optional, Protocol, Tuple

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


class TrainingDriver:
    """What drives training now, for the windows that open: a ``fit`` (its frame, and whether
    its model is a tf-keras one) or a custom loop (the frame of its latest ``step()``).

    Attributes:
      in_fit: True from a ``fit``'s ``on_train_begin`` to its ``on_train_end``.
      tf_keras: the latest ``fit``'s model is a tf-keras (Keras 2) model, whose own per-step
        ``train`` markers are filtered while a window of that ``fit`` is open.
      fit: the running ``fit``'s owner; None outside ``fit`` or when no ``fit`` frame was found.
      loop: the custom loop's owner (the frame that last began a step outside ``fit``), or None.
    """

    def __init__(self) -> None:
        self.in_fit = False
        self.tf_keras = False
        self.fit: Optional[Owner] = None
        self.loop: Optional[Owner] = None

    def fit_began(self, frame, tf_keras: bool) -> None:
        """A ``fit`` began: ``frame`` is its frame (:func:`fit_frame`; None when not found)."""
        self.fit = Owner(frame, "fit") if frame is not None else None
        self.in_fit = True
        self.tf_keras = tf_keras

    def fit_ended(self) -> None:
        """The ``fit`` ended normally (``on_train_end``)."""
        self.in_fit, self.fit = False, None

    def loop_stepped(self, frame) -> Optional[Owner]:
        """A custom loop began a step from ``frame``: returns its new owner (None inside
        ``fit``, where the ``fit`` frame owns the windows)."""
        if self.in_fit:
            return None
        self.loop = Owner(frame, "loop")
        return self.loop

    def owner(self) -> Optional[Owner]:
        """The owner of a window opening now."""
        return self.fit if self.in_fit else self.loop

    @property
    def filter_legacy(self) -> bool:
        """A window opening now filters tf-keras' own step markers (:class:`.window.LegacyKerasMarkerFilter`)."""
        return self.in_fit and self.tf_keras


class Watched(Protocol):
    """What :class:`OwnerWatch` watches: something with an open window (the window controller)."""

    def close_orphan(self, strict: bool = False) -> bool:
        """Close the open window when its owner is gone; True when it closed one."""


class OwnerWatch:
    """The process' watcher of open windows (one daemon thread, started with the first
    window). Window controllers register while a window is open; the thread calls their
    ``close_orphan()`` when their owner is gone."""

    def __init__(self) -> None:
        self._open: set = set()  # strong: a controller with an open window lives until it is closed
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def add(self, watched: Watched) -> None:
        """``watched`` opened a window."""
        with self._lock:
            self._open.add(watched)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tfbneck-window-watch", daemon=True)
                self._thread.start()
        self._wake.set()

    def discard(self, watched: Watched) -> None:
        """``watched``'s window closed."""
        with self._lock:
            self._open.discard(watched)

    def watched(self) -> List[Any]:
        """What has an open window now."""
        with self._lock:
            return list(self._open)

    def reclaim(self, opener: Watched) -> None:
        """Before ``opener`` opens a window: close the windows of the others whose training
        was left (an interrupted fit in a notebook), so that this window gets the profiler."""
        for other in self.watched():
            if other is not opener:
                other.close_orphan(strict=True)

    def _run(self) -> None:  # pragma: no cover - timing-dependent; tests/test_interrupts.py drives it
        while True:
            self._wake.wait()
            time.sleep(CHECK_INTERVAL_S)
            with self._lock:
                if not self._open:
                    self._wake.clear()
                    continue
                watched = list(self._open)
            for w in watched:
                try:
                    w.close_orphan()
                except Exception:  # noqa: BLE001, S112 - the watch must outlive any one window
                    continue


#: The process' one watch (TensorFlow's profiler is one per process too).
WATCH = OwnerWatch()


def interruption_record(markers: List[Tuple[int, int]], exception: Optional[str], how: str) -> dict:
    """The sidecar's ``window.interrupted`` of a window closed as interrupted: the steps and
    markers it recorded (``markers``: one ``(first, last)`` batch range per complete step),
    the exception's type name (None when unseen) and how the interruption was seen."""
    return {"steps_recorded": sum(b - a + 1 for a, b in markers), "markers_recorded": len(markers),
            "exception": exception, "detected": how}
