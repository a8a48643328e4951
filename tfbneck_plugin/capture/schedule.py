"""Which training steps to profile: fixed ranges, a periodic schedule, or both.

Steps are counted from 1 (the first batch of training is step 1), in batches, the way
Keras' ``TensorBoard(profile_batch=(start, stop))`` counts them; a window ``(3, 5)``
covers steps 3, 4 and 5. This module is pure Python (no TensorFlow): the callback
(:mod:`tfbneck_plugin.capture.callback`, through :mod:`.tracker`) asks it, at each step, whether a window begins.

Example::

    from tfbneck_plugin import BottleneckProfiler, profile_steps

    profile_steps((10, 14))                                 # one window
    profile_steps((10, 14), (500, 504))                     # two windows
    profile_steps(every=1000, length=5, start=100)          # 100-104, 1100-1104, 2100-2104, ...
    profile_steps((10, 14), every=5000, length=5, start=5000, count=10)
    profile_steps(every_epochs=5, length=5)                 # steps 10-14 of epochs 1, 6, 11, ...

Epoch windows are placed when Keras begins an epoch (``fit`` only: a custom loop has no
epochs), because the number of steps in an epoch is known only then.

Errors: :class:`ValueError` with a message that says what to pass instead.
"""
from __future__ import annotations

import math
import numbers
from typing import Iterable, List, Optional, Sequence, Tuple, Union

#: Default window: steps 10-14. Step 1 traces and compiles the tf.function (often
#: seconds), and the first steps after it still warm caches, the tf.data autotuner and
#: allocators; both distort step time.
DEFAULT_WINDOW = (10, 14)
#: Windows starting at or before this step include tracing/warm-up: warned about.
WARMUP_STEPS = 2
#: Windows longer than this (steps) are warned about: the trace grows with every step
#: profiled (a few MB per step for a real model on a GPU; traces of 1 GB exist and stall
#: TensorBoard, XProf and this analyzer alike).
LONG_WINDOW_STEPS = 20
#: Default hard cap on one window's length; ``max_window_steps`` changes it.
#: BottleneckProfiler counts it in the steps the profiler marks: executions when
#: ``steps_per_execution`` > 1 (six executions of 32 batches are 6, not 193).
MAX_WINDOW_STEPS = 100
#: Epoch schedules: the window begins at this step of the epoch (1-based), past its
#: start-up (the first batches of an epoch refill tf.data buffers).
EPOCH_STEP = 10

Range = Tuple[int, int]


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _check_range(r, what: str) -> Range:
    if isinstance(r, str):
        parts = [p.strip() for p in r.split(",")]
        try:
            r = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(f"{what}={r!r}: a string must be 'START,STOP' with whole numbers, "
                             f"e.g. '10,14'") from None
        if len(r) == 1:
            r = (r[0], r[0])
    if _is_int(r):
        r = (int(r), int(r))
    if not isinstance(r, (tuple, list)) or len(r) != 2:
        raise ValueError(f"{what}={r!r}: pass one step as an int (7), a range as a pair (START, STOP) "
                         f"with both ends included, e.g. (10, 14), or several pairs [(10, 14), (500, 504)]")
    start, stop = r
    if not (_is_int(start) and _is_int(stop)):
        raise ValueError(f"{what}={tuple(r)!r}: step numbers must be whole numbers (int), "
                         f"e.g. (10, 14), got {type(start).__name__} and {type(stop).__name__}")
    start, stop = int(start), int(stop)
    if start < 1:
        raise ValueError(
            f"{what}=({start}, {stop}): steps are counted from 1 (the first batch is step 1), so step "
            f"{start} never happens; the stock TensorBoard callback silently never profiles such a range. "
            f"Pass (1, {max(stop, 1)}) to start at the first batch, "
            f"or better {DEFAULT_WINDOW} to skip tf.function tracing and warm-up.")
    if stop < start:
        raise ValueError(f"{what}=({start}, {stop}): the window stops before it starts; "
                         f"pass ({stop}, {start}) (both ends are included)")
    return (start, stop)


class StepSchedule:
    """The steps to profile: fixed windows plus, optionally, one window every N steps.

    Build it with :func:`profile_steps`. ``windows`` is the sorted tuple of fixed
    windows; ``every``/``length``/``start``/``count`` describe the periodic part
    (``every`` is None when there is none). Immutable; cheap to query at every step.
    """

    def __init__(self, windows: Sequence[Range] = (), every: Optional[int] = None, length: int = 5,
                 start: Optional[int] = None, count: Optional[int] = None, every_epochs: Optional[int] = None,
                 epoch_step: int = EPOCH_STEP, start_epoch: int = 1):
        self.windows: Tuple[Range, ...] = tuple(sorted(windows))
        self.every = every
        self.length = length
        self.start = start
        self.count = count
        #: One window of ``length`` steps from step ``epoch_step`` of epochs ``start_epoch``,
        #: ``start_epoch + every_epochs``... (1-based, as Keras' progress bar counts them);
        #: None: no epoch windows. The windows themselves are added by :meth:`epoch_began`.
        self.every_epochs = every_epochs
        self.epoch_step = epoch_step
        self.start_epoch = start_epoch
        self.epoch_windows: List[Range] = []  # placed so far (the only state that changes)

    # -- description -------------------------------------------------------------------
    def __repr__(self) -> str:
        parts = [repr(w) for w in self.windows]
        if self.every is not None:
            parts.append(f"every={self.every}, length={self.length}, start={self.start}"
                         + (f", count={self.count}" if self.count is not None else ""))
        if self.every_epochs is not None:
            parts.append(f"every_epochs={self.every_epochs}, length={self.length}, epoch_step={self.epoch_step}, "
                         f"start_epoch={self.start_epoch}" + (f", count={self.count}" if self.count is not None else ""))
        return f"profile_steps({', '.join(parts)})"

    def describe(self) -> str:
        """Human wording, e.g. ``steps 10-14 and 500-504, then 5 steps every 1000 from 1000``."""
        parts = [f"{a}-{b}" if a != b else f"{a}" for a, b in self.windows]
        text = ("steps " + ", ".join(parts)) if parts else ""
        if self.every is not None:
            per = f"{self.length} step{'s' if self.length != 1 else ''} every {self.every} from step {self.start}"
            if self.count is not None:
                per += f" ({self.count} window{'s' if self.count != 1 else ''})"
            text = f"{text}, then {per}" if text else per
        if self.every_epochs is not None:
            per = (f"{self.length} step{'s' if self.length != 1 else ''} from step {self.epoch_step} of every "
                   f"{self.every_epochs} epoch{'s' if self.every_epochs != 1 else ''} from epoch {self.start_epoch}")
            text = f"{text}, then {per}" if text else per
        return text or "no steps"

    def longest(self) -> int:
        lens = [b - a + 1 for a, b in self.windows]
        if self.every is not None or self.every_epochs is not None:
            lens.append(self.length)
        return max(lens) if lens else 0

    def first_start(self) -> Optional[int]:
        w = self.window_for(1, 1 << 62)
        return w[0] if w else None

    def iter_windows(self, limit: int = 1000) -> Iterable[Range]:
        """The windows in order (at most ``limit``; a periodic schedule is endless)."""
        lo = 1
        for _ in range(limit):
            w = self.window_for(lo, 1 << 62)
            if w is None:
                return
            yield w
            lo = w[1] + 1

    # -- queries (hot path: called at the steps where a window may begin) -------------
    def window_for(self, first: int, last: int) -> Optional[Range]:
        """The earliest window that has a step in ``[first, last]``, clipped to start at
        ``first`` or later: ``(max(start, first), stop)``; None when no window touches it."""
        best: Optional[Range] = None
        for fixed in (self.windows, self.epoch_windows):  # a handful at most each
            for a, b in fixed:
                if b >= first:
                    if a <= last and (best is None or max(a, first) < best[0]):
                        best = (max(a, first), b)
                    break
        if self.every is not None:
            start = self.start or 0  # profile_steps sets it with every
            i = max(0, math.ceil((first - start - self.length + 1) / self.every))
            if self.count is None or i < self.count:
                a = start + i * self.every
                b = a + self.length - 1
                cand = (max(a, first), b)
                if a <= last and (best is None or cand[0] < best[0] or (cand[0] == best[0] and b > best[1])):
                    best = cand
        return best

    def epoch_began(self, epoch: int, first_step: int, steps: Optional[int] = None) -> Optional[Range]:
        """Keras began epoch ``epoch`` (1-based) at step ``first_step``; ``steps``: its number
        of steps when known. Adds and returns this epoch's window when the epoch schedule
        has one: ``length`` steps from step ``epoch_step`` of the epoch, moved earlier when
        the epoch is too short to hold it; None otherwise (or when it would overlap a window
        already scheduled)."""
        if self.every_epochs is None or epoch < self.start_epoch or (epoch - self.start_epoch) % self.every_epochs:
            return None
        if self.count is not None and len(self.epoch_windows) >= self.count:
            return None
        at = self.epoch_step
        if steps is not None and at + self.length - 1 > steps:
            at = max(1, steps - self.length + 1)
        win = (first_step + at - 1, first_step + at + self.length - 2)
        if self.epoch_windows and self.epoch_windows[-1][1] >= win[0]:
            return None
        if self.window_for(win[0], win[1]) is not None:
            return None  # a fixed window is there already
        self.epoch_windows.append(win)
        return win

    def next_start(self, after: int) -> Optional[int]:
        """First step > ``after`` at which some window has a step; None when none is left."""
        w = self.window_for(after + 1, 1 << 62)
        return w[0] if w else None


ScheduleLike = Union[int, str, Range, Sequence[Range], StepSchedule]


def profile_steps(*ranges, every: Optional[int] = None, length: int = 5, start: Optional[int] = None,
                  count: Optional[int] = None, every_epochs: Optional[int] = None, epoch_step: int = EPOCH_STEP,
                  start_epoch: int = 1, max_window_steps: Optional[int] = None) -> StepSchedule:
    """Build a :class:`StepSchedule`: fixed windows, one window every ``every`` steps, one
    every ``every_epochs`` epochs, or several of these.

    Args:
      *ranges: windows ``(start, stop)``, 1-based, both ends included (``(3, 5)`` = steps
        3, 4, 5); an int ``n`` is the window ``(n, n)``; a string ``"10,14"`` is read as
        ``(10, 14)``. Windows must not overlap.
      every: profile one window of ``length`` steps every ``every`` steps (long jobs: a
        slowdown that appears after hours is caught). None: no periodic windows.
      length: steps per periodic window (default 5).
      start: first step of the first periodic window (default ``every``, so that the
        first periodic window comes after warm-up).
      count: number of periodic (or epoch) windows (default: endless).
      every_epochs: profile one window of ``length`` steps every ``every_epochs`` epochs of
        ``fit``, from step ``epoch_step`` (default 10) of epochs ``start_epoch`` (default
        1, the first), ``start_epoch + every_epochs``... (epochs counted from 1, as Keras'
        progress bar shows them). None: no epoch windows.
      max_window_steps: when given, a cap on any window's length in batches, checked here.
        Default None: BottleneckProfiler enforces its own ``max_window_steps`` (default
        100) in executions once it knows ``steps_per_execution``.

    Returns:
      A StepSchedule to pass as ``BottleneckProfiler(profile_steps=...)``.

    Raises:
      ValueError: a step below 1, a window that stops before it starts, overlapping
        windows, a window longer than ``max_window_steps``, ``every < length``
        (periodic windows would overlap), non-integer values, or nothing to profile.

    Example::

        profile_steps(every=1000, length=5, start=100)   # 100-104, 1100-1104, ...
        profile_steps(every_epochs=5, length=5)          # steps 10-14 of epochs 1, 6, 11, ...
    """
    if max_window_steps is not None and (not _is_int(max_window_steps) or max_window_steps < 1):
        raise ValueError(f"max_window_steps={max_window_steps!r}: pass a positive int, e.g. {MAX_WINDOW_STEPS}")
    cap = max_window_steps if max_window_steps is not None else 1 << 62
    windows: List[Range] = []
    flat = []
    for r in ranges:
        # profile_steps([(3, 5), (8, 9)]) is accepted like profile_steps((3, 5), (8, 9)).
        if isinstance(r, list) and r and all(isinstance(x, (tuple, list)) for x in r):
            flat.extend(r)
        else:
            flat.append(r)
    for r in flat:
        windows.append(_check_range(r, "profile_steps"))
    windows.sort()
    for (a1, b1), (a2, b2) in zip(windows, windows[1:]):
        if a2 <= b1:
            raise ValueError(f"profile_steps: windows ({a1}, {b1}) and ({a2}, {b2}) overlap; "
                             f"merge them into ({a1}, {max(b1, b2)}) or separate them")
    for a, b in windows:
        if b - a + 1 > cap:
            raise ValueError(
                f"profile_steps: window ({a}, {b}) is {b - a + 1} steps long, above max_window_steps="
                f"{max_window_steps}. Traces grow with every step profiled (traces of 1 GB exist and stall "
                f"every tool); a few steps show the bottleneck. Profile a short window such as ({a}, {a + 4}), "
                f"several short windows with profile_steps(every=...), or raise max_window_steps.")
    if every is not None:
        if not _is_int(every) or every < 1:
            raise ValueError(f"profile_steps(every={every!r}): pass a positive int number of steps, e.g. every=1000")
        if not _is_int(length) or length < 1:
            raise ValueError(f"profile_steps(length={length!r}): pass a positive int number of steps per window, "
                             f"e.g. length=5")
        if length > every:
            raise ValueError(f"profile_steps(every={every}, length={length}): windows of {length} steps every "
                             f"{every} steps would overlap; pass length <= every (e.g. length=5)")
        _check_length(length, cap)
        if start is None:
            start = every
        if not _is_int(start) or start < 1:
            raise ValueError(f"profile_steps(start={start!r}): steps are counted from 1; pass start >= 1, "
                             f"e.g. start={every}")
        if count is not None and (not _is_int(count) or count < 1):
            raise ValueError(f"profile_steps(count={count!r}): pass a positive int, or None for endless")
        every, length, start = int(every), int(length), int(start)
    elif every_epochs is None:
        for name, value in (("start", start), ("count", count)):
            if value is not None:
                raise ValueError(f"profile_steps({name}={value!r}) only applies to a periodic schedule; "
                                 f"pass every=N as well, e.g. profile_steps(every=1000, length=5, {name}={value!r})")
        if not windows:
            raise ValueError(f"profile_steps(): nothing to profile; pass a window such as {DEFAULT_WINDOW}, "
                             f"a period such as every=1000, or every_epochs=5")
    if every_epochs is not None:
        _check_epochs(every_epochs, length, epoch_step, start_epoch, count, every, cap)
    return StepSchedule(windows, every=every, length=length, start=start, count=count, every_epochs=every_epochs,
                        epoch_step=epoch_step, start_epoch=start_epoch)


def _check_length(length, cap: int) -> None:
    if not _is_int(length) or length < 1:
        raise ValueError(f"profile_steps(length={length!r}): pass a positive int number of steps per window, "
                         f"e.g. length=5")
    if length > cap:
        raise ValueError(f"profile_steps(length={length}): above max_window_steps={cap}; "
                         f"pass a shorter length (e.g. 5) or raise max_window_steps")


def _check_epochs(every_epochs, length, epoch_step, start_epoch, count, every, cap: int) -> None:
    """The epoch schedule's arguments. Raises ValueError saying what to pass."""
    if every is not None:
        raise ValueError("profile_steps: pass every=N (steps) or every_epochs=N, not both")
    for name, value in (("every_epochs", every_epochs), ("epoch_step", epoch_step), ("start_epoch", start_epoch)):
        if not _is_int(value) or value < 1:
            raise ValueError(f"profile_steps({name}={value!r}): pass a positive int (epochs and steps are "
                             f"counted from 1), e.g. profile_steps(every_epochs=5, length=5)")
    _check_length(length, cap)
    if count is not None and (not _is_int(count) or count < 1):
        raise ValueError(f"profile_steps(count={count!r}): pass a positive int, or None for endless")


def as_schedule(spec: ScheduleLike, max_window_steps: Optional[int] = None) -> StepSchedule:
    """Turn what ``BottleneckProfiler(profile_steps=...)`` accepts into a StepSchedule;
    ``max_window_steps``: a cap on window lengths in batches, checked here when given."""
    if isinstance(spec, StepSchedule):
        if spec.every_epochs is not None:  # its epoch windows are each callback's own
            spec = StepSchedule(spec.windows, spec.every, spec.length, spec.start, spec.count, spec.every_epochs,
                                spec.epoch_step, spec.start_epoch)
        if max_window_steps is None:
            return spec
        for a, b in spec.windows:
            if b - a + 1 > max_window_steps:
                raise ValueError(f"profile_steps: window ({a}, {b}) is {b - a + 1} steps long, above "
                                 f"max_window_steps={max_window_steps}; profile fewer steps or raise max_window_steps")
        if spec.every is not None and spec.length > max_window_steps:
            raise ValueError(f"profile_steps: periodic windows of {spec.length} steps are above "
                             f"max_window_steps={max_window_steps}")
        return spec
    if spec is None:
        raise ValueError(f"profile_steps=None: pass a window such as {DEFAULT_WINDOW}, several windows "
                         f"[(10, 14), (500, 504)], or profile_steps(every=1000, length=5)")
    if isinstance(spec, (list, tuple)) and len(spec) == 2 and all(_is_int(x) for x in spec):
        return profile_steps(tuple(spec), max_window_steps=max_window_steps)  # [3, 5] is a range, as in Keras
    if isinstance(spec, list) or (isinstance(spec, tuple) and spec
                                  and all(isinstance(x, (tuple, list, str)) for x in spec)):
        return profile_steps(*spec, max_window_steps=max_window_steps)
    return profile_steps(spec, max_window_steps=max_window_steps)


def warnings_for(schedule: StepSchedule) -> List[str]:
    """Caveats worth one warning at construction (warm-up steps, long windows)."""
    out = []
    first = schedule.first_start()
    if first is not None and first <= WARMUP_STEPS:
        out.append(f"profile_steps: the window starting at step {first} includes warm-up: step 1 traces and "
                   f"compiles the tf.function and the next steps still warm caches and the tf.data autotuner, "
                   f"so their step times mislead. Start at step 3 or later, e.g. {DEFAULT_WINDOW}.")
    longest = schedule.longest()
    if longest > LONG_WINDOW_STEPS:
        out.append(f"profile_steps: a window of {longest} steps is long; the trace grows with every step "
                   f"(traces of 1 GB stall TensorBoard and every tool). {LONG_WINDOW_STEPS} steps or fewer "
                   f"show a bottleneck as well.")
    return out


def long_window_warnings(schedule: StepSchedule, spe: int, max_steps: int) -> List[str]:
    """One sentence per window that spans more than ``max_steps`` steps as the profiler marks
    them (executions of ``spe`` batches each; a window not aligned on executions touches one
    more): BottleneckProfiler cuts such a window after ``max_steps`` of them."""
    spe = max(int(spe or 1), 1)
    lengths = [(f"({a}, {b})", b - a + 1) for a, b in schedule.windows]
    if schedule.every is not None or schedule.every_epochs is not None:
        lengths.append((f"of {schedule.length} steps every "
                        f"{schedule.every or schedule.every_epochs}{'' if schedule.every else ' epochs'}",
                        schedule.length))
    out = []
    for name, length in lengths:
        marked = -(-length // spe) + (1 if spe > 1 else 0)
        if -(-length // spe) > max_steps:
            unit = f"executions of {spe} batches" if spe > 1 else "steps"
            out.append(f"profile_steps: the window {name} spans {marked if spe > 1 else length} {unit}, above "
                       f"max_window_steps={max_steps}: it is cut after {max_steps} (traces grow with every step; "
                       f"raise max_window_steps to keep it whole)")
    return out


def not_reached_warning(seen: int, first: Tuple[int, int]) -> str:
    """The warning of a ``fit`` that ended at step ``seen`` before the schedule's first window
    ``first`` (1-based steps, both ends included) opened, with an earlier window to pass."""
    hint = "(3, 5)" if seen >= 5 else f"(1, {seen})"
    return (f"training stopped at step {seen}, before the first profiling window ({first[0]}-{first[1]}): "
            f"nothing was profiled yet (steps count on across fit calls with this callback). For a shorter "
            f"run pass an earlier window, e.g. profile_steps={hint}")
