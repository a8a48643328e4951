"""Finding training steps in a trace: one small finder per kind of evidence, tried in order.

A step is a half-open interval [start_ps, end_ps) on the host clock. The finders, in the
order tried (the first that yields at least one complete step wins and is reported as
``step_source``):

1. ``step_markers``: TraceMe events with the ``_r`` (root) and ``step_num`` stats:
   tf-keras' ``train``/``test`` (keras/callbacks.py), ``tf.profiler.experimental.Trace(
   'train', step_num=..., _r=1)`` in custom loops and in BottleneckProfiler. The same
   convention XProf uses to find steps (xprof: convert/xplane_to_step_events.cc).
2. ``trace_context``: legacy ``TraceContext`` events (TF 2.0-2.4 Keras ``fit``).
3. ``keras_profiled_batch``: Keras 3's ``Profiled batch`` events with ``step_num`` and no
   ``_r`` (keras/src/backend/tensorflow/tensorboard.py). XProf ignores them, which is why
   it reports "No step time measured" for a plain Keras 3 ``fit``.
4. ``train_function_calls``: repeated calls of the training tf.function on the Python
   thread (``train_function``, ``multi_step_on_iterator``, ``__inference_train_function_N``);
   step i runs from call i's start to call i+1's start, so the last call is dropped.
5. ``device_steps_line``: a device plane's derived ``Steps`` line.
6. ``iterator_cadence``: the start of each blocking ``IteratorGetNext`` on the consumer
   thread; one step per interval between consecutive starts.

A step that starts before the first or ends after the last recorded host event of the
window is partial (the profiler started or stopped inside it) and is dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from . import host as hostmod
from .host import HostView
from ..trace.xspace import Space


@dataclass
class Steps:
    """Steps found, arrays of shape (n_steps,): ``numbers`` (int), ``starts``/``ends`` (ps)."""
    source: str
    numbers: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    dropped_partial: int = 0
    batches_per_step: int = 1
    notes: List[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.starts)

    @property
    def durations_ps(self) -> np.ndarray:
        return self.ends - self.starts


@dataclass
class StepSearch:
    steps: Optional[Steps]
    tried: List[Tuple[str, str]]  # (finder, why it did not apply)


# Marker names preferred when several kinds of root events carry step numbers.
_PREFERRED_MARKERS = ("train", "Profiled batch")


def _marker_events(view: HostView, require_r: bool, names=None):
    """Per distinct event name: lines and indices of events carrying ``step_num``.

    Looks at the stats of the first event of each name only, then reads ``step_num`` for
    every event of the matching names: cheap on traces with millions of events.
    """
    plane = view.plane
    found = {}
    for li, line in enumerate(plane.lines):
        if hostmod.is_tf_data_line(line.name) or len(line) == 0:
            continue
        uniq, first = np.unique(line.name_id, return_index=True)
        for mid, i in zip(uniq, first):
            name = plane.event_names.get(int(mid), "")
            if names is not None and name not in names:
                continue
            if hostmod.is_op_name(name) or name.startswith("Iterator::"):
                continue
            stats = plane.event_stats(line, i)
            if "step_num" not in stats and not (names and "TraceContext" in names):
                continue
            if require_r and "_r" not in stats:
                continue
            if not require_r and "_r" in stats:
                continue
            found.setdefault(name, []).append((li, np.flatnonzero(line.name_id == mid)))
    return found


def _from_markers(view: HostView, found, source: str) -> Optional[Steps]:
    if not found:
        return None
    name = next((n for n in _PREFERRED_MARKERS if n in found), None)
    if name is None:
        name = max(found, key=lambda n: sum(len(idx) for _, idx in found[n]))
    sel = found[name]
    starts, ends, nums = [], [], []
    for li, idx in sel:
        line = view.plane.lines[li]
        starts.append(line.start_ps[idx])
        ends.append(line.start_ps[idx] + line.dur_ps[idx])
        values, present = view.stat_ints(li, idx, "step_num")
        nums.append(np.where(present, values.view(np.int64), -1))
    starts, ends, nums = np.concatenate(starts), np.concatenate(ends), np.concatenate(nums)
    # A marker inside another one (a user's own Trace('train') around Keras' marker) is
    # the same step: keep the outermost.
    order = np.lexsort((-ends, starts))
    starts, ends, nums = starts[order], ends[order], nums[order]
    outer = np.ones(len(starts), dtype=bool)
    outer[1:] = starts[1:] >= np.maximum.accumulate(ends)[:-1]
    starts, ends, nums = starts[outer], ends[outer], nums[outer]
    order = np.argsort(starts, kind="stable")
    # The training thread is the one holding most markers.
    view.training_line = max(sel, key=lambda x: len(x[1]))[0]
    steps = Steps(source=f"{source} ('{name}')", numbers=nums[order], starts=starts[order],
                  ends=ends[order])
    if (steps.numbers < 0).all():
        steps.numbers = np.arange(steps.count, dtype=np.int64)
    return steps


def _train_function_calls(view: HostView) -> Optional[Steps]:
    plane = view.plane
    ids = view.ids(("trainfn",), lambda n: n in hostmod.TRAIN_FUNCTION_NAMES or
                   bool(hostmod._INFERENCE_RE.match(n)))
    best = None
    for li, idx in view.select(ids, view.non_data_lines):
        line = plane.lines[li]
        # Keep the outermost call: drop events nested in an earlier kept one.
        s, e = line.start_ps[idx], line.start_ps[idx] + line.dur_ps[idx]
        order = np.lexsort((-e, s))
        s, e = s[order], e[order]
        outer = np.ones(len(s), dtype=bool)
        outer[1:] = s[1:] >= np.maximum.accumulate(e)[:-1]
        s, e = s[outer], e[outer]
        if best is None or len(s) > len(best[1]):
            best = (li, s, e)
    if best is None:
        return None
    li, s, e = best
    view.training_line = li
    if len(s) == 1:
        # One call in the window: the step is the call itself (the Python work after it,
        # until the next call, was not recorded).
        return Steps(source="train_function_calls", numbers=np.zeros(1, dtype=np.int64), starts=s, ends=e,
                     notes=["one training-function call in the window: its duration is the step time"])
    starts, ends = s[:-1], s[1:]
    return Steps(source="train_function_calls", numbers=np.arange(len(starts), dtype=np.int64),
                 starts=starts, ends=ends, dropped_partial=1,
                 notes=["step i runs from call i to call i+1; the last call was dropped: its step's end is not recorded"])


def _device_steps_line(space: Space) -> Optional[Steps]:
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            if line.name == "Steps" and len(line) > 0:
                nums = []
                for i in range(len(line)):
                    try:
                        nums.append(int(plane.event_names.get(int(line.name_id[i]), "")))
                    except ValueError:
                        nums.append(i)
                return Steps(source=f"device_steps_line ({plane.name})",
                             numbers=np.array(nums, dtype=np.int64), starts=line.start_ps.copy(),
                             ends=line.start_ps + line.dur_ps)
    return None


def _iterator_cadence(view: HostView) -> Optional[Steps]:
    sel = view.select(view.ids_named(hostmod.GET_NEXT_EVENTS))
    if not sel:
        sel = view.select(view.getnext_op_ids(), view.non_data_lines)
    if not sel:
        return None
    starts = np.sort(np.concatenate([view.plane.lines[li].start_ps[idx] for li, idx in sel]))
    if len(starts) < 3:
        return None
    return Steps(source="iterator_cadence", numbers=np.arange(len(starts) - 1, dtype=np.int64),
                 starts=starts[:-1], ends=starts[1:], dropped_partial=1,
                 notes=["steps inferred from the cadence of IteratorGetNext: each step runs "
                        "from one batch request to the next"])


def _drop_partial(steps: Steps, window: Tuple[int, int]) -> Steps:
    lo, hi = window
    ok = (steps.starts >= lo) & (steps.ends <= hi) & (steps.ends > steps.starts)
    dropped = int((~ok).sum())
    if dropped:
        steps = Steps(source=steps.source, numbers=steps.numbers[ok], starts=steps.starts[ok],
                      ends=steps.ends[ok], dropped_partial=steps.dropped_partial + dropped,
                      batches_per_step=steps.batches_per_step, notes=steps.notes)
    return steps


def host_window(view: Optional[HostView]) -> Optional[Tuple[int, int]]:
    """[first event start, last event end] over the host plane, ps; None if empty."""
    if view is None:
        return None
    lines = [l for l in view.plane.lines if len(l)]
    if not lines:
        return None
    return (int(min(l.start_ps.min() for l in lines)), int(max((l.start_ps + l.dur_ps).max() for l in lines)))


def find_steps(space: Space, view: Optional[HostView]) -> StepSearch:
    tried: List[Tuple[str, str]] = []
    window = host_window(view)
    candidates = []
    if view is not None:
        candidates = [
            ("step_markers", lambda: _from_markers(view, _marker_events(view, True), "step_markers")),
            ("trace_context", lambda: _from_markers(
                view, _marker_events(view, False, names={"TraceContext"}), "trace_context")),
            ("keras_profiled_batch", lambda: _from_markers(
                view, _marker_events(view, False, names={"Profiled batch"}), "keras_profiled_batch")),
            ("train_function_calls", lambda: _train_function_calls(view)),
        ]
    candidates.append(("device_steps_line", lambda: _device_steps_line(space)))
    if view is not None:
        candidates.append(("iterator_cadence", lambda: _iterator_cadence(view)))
    for name, finder in candidates:
        steps = finder()
        if steps is None or steps.count == 0:
            tried.append((name, "no such events in the trace"))
            continue
        if window is not None:
            steps = _drop_partial(steps, window)
        if steps.count == 0:
            tried.append((name, "only partial steps (cut by the profiling window)"))
            continue
        if view is not None and view.training_line is None:
            view.training_line = _guess_training_line(view)
        _count_batches(view, steps)
        return StepSearch(steps, tried)
    if view is not None and view.training_line is None:
        view.training_line = _guess_training_line(view)
    return StepSearch(None, tried)


def _guess_training_line(view: HostView) -> Optional[int]:
    """The Python thread: named python*, else the non-tf.data line with most events."""
    lines = view.plane.lines
    named = [i for i, l in enumerate(lines) if l.name.lower().startswith("python") and len(l)]
    if named:
        return max(named, key=lambda i: len(lines[i]))
    others = [i for i in view.non_data_lines if len(lines[i]) and not lines[i].name.startswith("tf_")]
    return max(others, key=lambda i: len(lines[i])) if others else None


def _count_batches(view: Optional[HostView], steps: Steps) -> None:
    """Batches per step = median number of blocking get-next calls per step
    (``steps_per_execution`` > 1 makes one step fetch several batches)."""
    if view is None or steps.source.startswith("iterator_cadence"):
        return
    sel = view.select(view.ids_named(hostmod.GET_NEXT_EVENTS))
    if not sel:
        return
    starts = np.sort(np.concatenate([view.plane.lines[li].start_ps[idx] for li, idx in sel]))
    counts = np.searchsorted(starts, steps.ends) - np.searchsorted(starts, steps.starts)
    med = int(np.median(counts)) if len(counts) else 1
    if med > 1:
        steps.batches_per_step = med
