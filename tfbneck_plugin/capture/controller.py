"""The profiling windows of a run: when the step tracker says a window opens, the
:class:`WindowController` starts its capture, wraps each of its steps in a step marker, closes
it when its steps are done, when training ends inside it or when the training that owned it
went away (:mod:`.interrupts`), and hands a published window to the background analysis. Each
window reached leaves a :class:`WindowRecord` in ``BottleneckProfiler.windows``.

No TensorFlow here: the profiler's side (the capture of one window, the step marker, the skip
record) comes in as a :class:`Profiler` (:class:`.window.TensorFlowProfiler` in the callback).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Tuple

from ..records import Outcome
from .interrupts import Owner, OwnerWatch, TrainingDriver, interruption_record
from .model_info import with_model
from .tracker import ClosedWindow, StepTracker

if TYPE_CHECKING:
    from .display import WindowDisplay
    from .safety import Guard, LogDirState

Range = Tuple[int, int]


@dataclass
class WindowRecord:
    """What happened to one profiling window (``BottleneckProfiler.windows``).

    Attributes:
      index: 0-based, in the order windows were reached.
      requested: the windows asked for (``(start, stop)``, 1-based steps) that it covers.
      status: ``"open"``, ``"profiled"`` or ``"skipped"``.
      reason: why it was skipped (None otherwise).
      session_dir: the session folder (trace + sidecar, or the skipped record); None when
        nothing could be written.
      steps: ``(first, last)`` batch recorded (whole executions when ``steps_per_execution``
        > 1, so it may be wider than ``requested``).
      markers: one ``(first, last)`` batch range per step marker in the trace (grows while
        the window is open).
      closed_by: ``"completed"``, ``"training_ended"``, ``"closed"``, ``"interrupted"``,
        ``"interpreter_exit"``, or ``"skipped"``.
      report: the analyzer's session report once the background analysis finished: a
        :class:`tfbneck_plugin.api.SessionReport` (a dict, see the README "Report", that
        displays as the verdict card in a notebook); None before or without analysis.
      analysis_error: why the analysis failed, when it did.
      kind: ``"scheduled"`` (``profile_steps``) or ``"triggered"`` (``on_slowdown``).
      trigger: for a triggered window, why it opened (the sidecar's ``window.trigger``,
        format in :mod:`tfbneck_plugin.records`); None for a scheduled one.
      change: when this window's verdict differs from the previous analysed window's, what
        changed (:func:`.trend.verdict_change`); else None.
      display: the notebook output reserved for the verdict (``display=True``), or None.
      interrupted: for a window closed as ``"interrupted"`` (training left it with an
        exception or an interrupt), the sidecar's ``window.interrupted``:
        ``{"steps_recorded": batches, "markers_recorded": int, "exception": type name or
        None when unseen, "detected": how}``; else None.
    """
    index: int
    requested: List[Range]
    status: str = "open"
    reason: Optional[str] = None
    session_dir: Optional[str] = None
    steps: Optional[Range] = None
    markers: List[Range] = field(default_factory=list)
    closed_by: Optional[str] = None
    report: Optional[Dict] = None
    analysis_error: Optional[str] = None
    kind: str = "scheduled"
    trigger: Optional[Dict] = None
    change: Optional[Dict] = None
    display: Optional["WindowDisplay"] = field(default=None, repr=False)
    interrupted: Optional[Dict] = None


class Capture(Protocol):
    """One open window's capture (:class:`.window.WindowCapture`)."""
    window: Range
    record: WindowRecord

    def stop(self, unfinished: Any = None) -> Tuple[Optional[str], Optional[Dict]]:
        """Stop the profiler, then end ``unfinished`` (a cut step marker); ``(problem, sidecar)``."""

    def publish(self, closed: ClosedWindow, spe: int, closed_by: str, sysdata: Optional[Dict]) -> Optional[str]:
        """Publish the session; None, or why it failed."""

    def discard(self) -> None:
        """Remove what was staged."""

    def abandon(self) -> None:
        """Stop what runs after an internal error; keep nothing."""


class Profiler(Protocol):
    """The profiler's side of the windows (:class:`.window.TensorFlowProfiler`)."""

    def open(self, record: WindowRecord, window: Range, log_dir_problem: Optional[str],
             filter_legacy: bool) -> Tuple[Optional[Capture], Optional[Tuple[str, str]]]:
        """Start capturing ``window``: ``(capture, None)``, or ``(None, (kind, reason))``."""

    def marker(self, step: int) -> Any:
        """The step marker of the step beginning at batch ``step`` (a context manager)."""

    def record_skip(self, record: WindowRecord, window: Range, reason: str) -> str:
        """Write a skipped window's record; the warning's clause saying where."""

    def can_stop_here(self) -> bool:
        """Whether the calling thread may stop the running profiler (PyTorch's: only the
        thread that started it); optional, True when absent."""


def trigger_outcome(trigger: Dict, closed_by: str, window: Range, markers: List[Range]) -> None:
    """Say in a triggered window's ``trigger`` whether it captured what it was opened for:
    ``captured``, ``partial`` (training ended inside it) or ``too_late`` (no step recorded)."""
    want = window[1] - window[0] + 1
    got = sum(b - a + 1 for a, b in markers)
    if closed_by == "completed":
        trigger["outcome"] = Outcome.CAPTURED.value
    elif markers:
        trigger["outcome"] = Outcome.PARTIAL.value
        trigger["note"] = f"{closed_by.replace('_', ' ')} after {got} of the {want} steps of the window"
    else:
        trigger["outcome"] = Outcome.TOO_LATE.value
        trigger["note"] = f"{closed_by.replace('_', ' ')} before a step of the window was recorded: too late"


class WindowController:
    """Opens and closes the profiling windows the step tracker asks for (module docstring).

    Every method that changes the open window holds :attr:`lock`: the training thread, the
    owner watch's thread (an orphaned window) and the interpreter's exit hook may all close it.

    Args:
      tracker: counts steps and decides when windows open and close (:class:`.tracker.StepTracker`).
      windows: the callback's list of :class:`WindowRecord`, appended to as windows are reached.
      profiler: the profiler's side (:class:`Profiler`).
      driver: what drives training (:class:`.interrupts.TrainingDriver`): the owner a window
        takes, and whether tf-keras' own step markers are filtered.
      log_dir: whether ``log_dir`` can be written (:class:`.safety.LogDirState`).
      watch: the process' owner watch (:data:`.interrupts.WATCH`).
      guard: runs the work started from other threads (:class:`.safety.Guard`).
      warn: ``warn(key, message, repeat=None)``, one warning per kind.
      model_of: returns the Keras model being trained (None outside ``fit``), described in the
        sidecar (:func:`.model_info.with_model`).
      on_published: called with each window's record once its session is published (the
        background analysis); None: not analysed.
      on_change: called after a window was closed and published (the trend file is due then).

    Attributes:
      capture: the open window's capture, None between windows.
      marker: the open step marker, None between steps.
      owner: what drives the open window's training (:class:`.interrupts.Owner`), or None.
      lock: a re-entrant lock around the open window.
    """

    def __init__(self, tracker: StepTracker, windows: List[WindowRecord], profiler: Profiler,
                 driver: TrainingDriver, log_dir: "LogDirState", watch: OwnerWatch, guard: "Guard",
                 warn: Callable[..., None], model_of: Callable[[], Any],
                 on_published: Optional[Callable[[WindowRecord], None]], on_change: Callable[[], None]):
        self._tracker, self._windows, self._profiler, self._driver = tracker, windows, profiler, driver
        self._log_dir, self._watch, self._guard, self._warn = log_dir, watch, guard, warn
        self._model_of, self._on_published, self._on_change = model_of, on_published, on_change
        self.capture: Optional[Capture] = None
        self.marker: Any = None
        self.owner: Optional[Owner] = None
        self.lock = threading.RLock()
        self._cut: Optional[Tuple[Optional[str], str]] = None  # (exception, how it was seen) of an interrupt
        self._exiting = False

    # -- steps ------------------------------------------------------------------------------
    def step_begin(self, first: int, last: int) -> None:
        """Step ``first..last`` begins and the tracker said the callback acts: close a window
        the step jumped past, open the one it begins, and open its step marker."""
        with self.lock:
            if self._tracker.window_passed(first):
                self._close("completed")  # a custom loop jumped past the window's end
            if self.capture is None:
                win = self._tracker.window_to_open(first, last)
                if win is None or not self._open(win):
                    return
            self.marker = self._profiler.marker(first)
            self.marker.__enter__()
            self._tracker.step_began(first, last)

    def step_end(self, close_if_done: bool = True) -> None:
        """End the open step marker (if any); the window closes when that completed it,
        unless ``close_if_done`` is False."""
        with self.lock:
            marker = self.marker
            if marker is None:
                return
            self.marker = None
            marker.__exit__(None, None, None)
            done = self._tracker.step_ended()
            if close_if_done and done:
                self._close("completed")

    def adopt(self, owner: Owner) -> None:
        """A custom loop's new frame drives training: it owns the open window, if any."""
        if self.capture is not None:
            self.owner = owner

    # -- windows ----------------------------------------------------------------------------
    def _open(self, win: Range) -> bool:
        trigger = self._tracker.opening
        rec = WindowRecord(index=len(self._windows), requested=[win], kind="triggered" if trigger else "scheduled",
                           trigger=dict(trigger, outcome=None, note=None) if trigger else None)
        self._windows.append(rec)
        self._watch.reclaim(self)  # an earlier window whose fit was interrupted gives the profiler back
        cap, problem = self._profiler.open(rec, win, self._log_dir.problem, self._driver.filter_legacy)
        if problem is not None or cap is None:
            self._skip(rec, win, *(problem or ("start_failed", "the profiler did not start")))
            return False
        self.capture = cap
        self._tracker.opened(win)
        rec.markers = self._tracker.markers  # the same list: it grows while the window is open
        self.owner = self._driver.owner()
        self._watch.add(self)
        if trigger:
            self._warn(f"slowdown:{rec.index}", f"median step time rose from {trigger['baseline_p50_ms']:.3g} to "
                                                f"{trigger['observed_p50_ms']:.3g} ms over {trigger['slow_step_count']} "
                                                f"steps ({trigger['slow_for_s']:.1f} s) from step "
                                                f"{trigger['slow_steps'][0]}: profiling steps "
                                                f"{win[0]}-{win[1]}")
        return True

    def _skip(self, rec: WindowRecord, win: Range, kind: str, reason: str) -> None:
        rec.status, rec.reason, rec.closed_by = "skipped", reason, rec.closed_by or "skipped"
        if rec.trigger is not None:
            rec.trigger["outcome"] = Outcome.SKIPPED.value
        self._tracker.skip(win)
        where = "" if kind == "log_dir" else self._profiler.record_skip(rec, win, reason)
        self._warn(kind if kind == "log_dir" else "skip:" + kind,
                   f"steps {win[0]}-{win[1]} were not profiled: {reason}. Training continues{where}",
                   repeat=f"steps {win[0]}-{win[1]} were not profiled: {reason}{where}")
        # The trend file is rewritten at the next window, period end or the end of training:
        # not now, when the disk may be what failed (one warning per problem).

    def close(self, closed_by: str) -> None:
        """Close the open window (if any) as ``closed_by`` (:attr:`WindowRecord.closed_by`):
        stop the profiler, publish the session, start its analysis, rewrite the trend file."""
        with self.lock:
            self._close(closed_by)

    def _close(self, closed_by: str) -> None:
        cap = self.capture
        if cap is None:
            return
        unfinished = None
        if self.marker is not None:
            if closed_by == "interrupted":
                # The step was cut by an exception: its marker ends only after the profiler
                # stopped, so that the trace holds complete steps only.
                unfinished, self.marker = self.marker, None
                self._tracker.step_cut()
            else:
                self.step_end(close_if_done=False)
        self.capture, self.owner = None, None
        self._watch.discard(self)
        rec = cap.record
        rec.closed_by = closed_by
        problem, sysdata = cap.stop(unfinished)
        closed = self._tracker.close()
        rec.steps, rec.markers = closed.steps, closed.markers
        rec.requested.extend(closed.also_covered)
        if closed_by == "interrupted":
            exception, how = self._cut or (None, "unknown")
            self._cut = None
            rec.interrupted = interruption_record(closed.markers, exception, how)
        if rec.trigger is not None:
            trigger_outcome(rec.trigger, closed_by, closed.window, closed.markers)
        if problem is not None:
            cap.discard()
        else:
            problem = cap.publish(closed, self._tracker.spe, closed_by, with_model(sysdata, self._model_of()))
        if problem is not None:
            self._skip(rec, closed.window, "save_failed", problem)
            return
        if self._on_published is not None and not self._exiting:
            self._on_published(rec)
        self._on_change()

    def training_ended(self) -> None:
        """``fit`` ended normally: a window still open is saved with the steps it recorded."""
        if self.marker is not None:
            self.step_end(close_if_done=False)
        cap = self.capture
        if cap is None:
            return
        win, got = cap.window, self._tracker.markers
        upto = got[-1][1] if got else win[0]
        self._warn("ended_inside", f"training ended inside the window of steps {win[0]}-{win[1]} "
                                   f"after step {upto}: the session holds the steps recorded so far")
        self.close("training_ended")

    # -- training that went away (module interrupts) ----------------------------------------
    def interrupt(self, exception: Optional[str], how: str) -> None:
        """Close the open window as ``interrupted``: ``exception`` is the exception's type
        name when known, ``how`` says how the interruption was seen (sidecar
        ``window.interrupted.detected``)."""
        with self.lock:
            cap = self.capture
            if cap is None:
                return
            win, got = cap.window, self._tracker.markers
            upto = f"after step {got[-1][1]}" if got else "before a step of it was recorded"
            what = f"with {exception}" if exception else "without finishing (an exception)"
            self._warn("interrupted", f"training ended inside a profiling window of steps {win[0]}-{win[1]} "
                                      f"{upto}, {what}; {how}: the profiler is stopped and the session keeps "
                                      f"the complete steps, marked interrupted")
            self._cut = (exception, how)
            self._close("interrupted")

    def close_orphan(self, strict: bool = False) -> bool:
        """Close the open window when its owner is gone (called by the owner watch's thread,
        and by another controller that needs the profiler). Returns True when it closed one."""
        owner = self.owner
        if self.capture is None or owner is None or not owner.gone(strict):
            return False
        if not getattr(self._profiler, "can_stop_here", lambda: True)():
            return False  # closed by the training thread: the next fit, step() or close(), or the exit
        with self.lock:
            if self.capture is None or self.owner is not owner:
                return False
            left = "fit" if owner.kind == "fit" else "the custom loop"
            self._guard(self.interrupt, None, f"{left} was left without ending the window")
        return True

    def close_at_exit(self) -> None:
        """The interpreter exits with this window open: save it, analyse nothing."""
        self._exiting = True
        self._guard(self.close, "interpreter_exit")

    def abandon(self, reason: str) -> None:
        """After an internal error (``reason``): no window opens any more; the open one stops
        and is recorded as skipped, nothing of it kept."""
        marker, self.marker = self.marker, None
        cap, self.capture = self.capture, None
        self._tracker.stop()
        try:
            if marker is not None:
                marker.__exit__(None, None, None)
        except Exception:  # noqa: BLE001, S110 - the marker's own error: nothing left to end
            pass
        if cap is None:
            return
        self._watch.discard(self)
        cap.abandon()
        cap.record.status, cap.record.reason = "skipped", f"internal error: {reason}"
