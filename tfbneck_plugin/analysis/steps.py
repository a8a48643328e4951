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
4. ``user_step_annotations``: any other annotation with ``step_num`` and no ``_r`` on a
   host thread that encloses training work there (``FunctionRun``, ``EagerKernelExecute``,
   ``SessionRun``): ``tf.profiler.experimental.Trace(<name>, step_num=i)`` as the TensorFlow
   profiler guide shows it for custom loops. Numbered as the user numbered them; one
   annotation around several function calls (gradient accumulation) is one step.
5. ``session_run``: graph-mode programs (``tf.compat.v1.Session``, tf-keras with eager
   execution disabled): each ``SessionRun`` on the training thread is a step, from its start
   to the next run's start (the Python work between runs belongs to the step); XProf also
   takes ``SessionRun`` as an implicit step root (IsImplicitRootEvent in
   xla/tsl/profiler/utils/group_events.cc).
6. ``train_function_calls``: repeated calls of the training tf.function on the Python
   thread (``train_function``, ``multi_step_on_iterator``, ``__inference_train_function_N``);
   step i runs from call i's start to call i+1's start, so the last call is dropped.
7. ``device_steps_line``: a device plane's derived ``Steps`` line.
8. ``iterator_cadence``: the start of each blocking ``IteratorGetNext`` on the consumer
   thread; one step per interval between consecutive starts.

A step that starts before the first or ends after the last recorded host event of the
window is partial (the profiler started or stopped inside it) and is dropped.

Per step the search also measures graph building (tf.function tracing, the instantiation of
a newly traced function, XLA compilation: ``HostView.graph_builds``) and flags warm-up: the
leading steps that paid one-time graph building, as opposed to retracing, where graph
builds recur in many steps (see ``warmup_steps``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from ..trace import timeline
from ..trace.xspace import Space
from . import host as hostmod
from .host import HostView


def _zeros(dtype):
    return lambda: np.zeros(0, dtype=dtype)


@dataclass
class Steps:
    """Steps found. Arrays have shape (n_steps,).

    ``numbers`` (int64): step numbers (the trace's own where it has them, else 0..n-1);
    ``starts``/``ends`` (int64 ps, host clock). ``graph_build_ps`` (int64 ps): time inside
    each step spent tracing tf.functions, instantiating newly traced functions and compiling
    with XLA (union of those intervals clipped to the step). ``warmup`` (bool): the leading
    steps dominated by one-time graph building (``warmup_steps``); ``warmup_reason``: one
    sentence naming the events that marked them and their time, None when no step is warm-up.
    ``fetch_outside``: one sentence when the batch was fetched between marked steps and each
    step was extended to hold its fetch (``fill_fetch_gaps``), else None.
    ``training_line``: index into the host plane's lines of the thread that ran the training
    loop, when the finder saw it (the thread holding the markers or the calls), else None.
    """
    source: str
    numbers: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    dropped_partial: int = 0
    batches_per_step: int = 1
    notes: List[str] = field(default_factory=list)
    graph_build_ps: np.ndarray = field(default_factory=_zeros(np.int64))
    warmup: np.ndarray = field(default_factory=_zeros(bool))
    warmup_reason: Optional[str] = None
    fetch_outside: Optional[str] = None
    training_line: Optional[int] = None

    @property
    def count(self) -> int:
        """Number of steps."""
        return len(self.starts)

    @property
    def durations_ps(self) -> np.ndarray:
        """Each step's duration (ps), shape (n_steps,)."""
        return self.ends - self.starts


@dataclass
class StepSearch:
    """The steps found (or None), for every finder that did not apply why, and the training
    thread (index into the host plane's lines; None without a host plane or a thread)."""
    steps: Optional[Steps]
    tried: List[Tuple[str, str]]  # (finder, why it did not apply)
    training_line: Optional[int] = None


# Marker names preferred when several kinds of root events carry step numbers.
_PREFERRED_MARKERS = (hostmod.TRAIN_MARKER, hostmod.KERAS3_MARKER)
# Markers read by their own finders, never taken for a user's annotation.
_FRAMEWORK_MARKERS = (hostmod.KERAS3_MARKER, hostmod.LEGACY_MARKER)
_NO_EVENTS = "no such events in the trace"


def _marker_events(view: HostView, require_r: bool, names=None):
    """Per distinct event name: lines and indices of events carrying ``step_num``.

    Looks at the stats of the first event of each name only, then reads ``step_num`` for
    every event of the matching names: cheap on traces with millions of events.
    """
    plane = view.plane
    found: Dict[str, List[Tuple[int, np.ndarray]]] = {}
    for li, line in enumerate(plane.lines):
        if hostmod.is_tf_data_line(line.name) or len(line) == 0:
            continue
        uniq, first = line.first_of_each()
        for mid, i in zip(uniq, first, strict=True):
            name = plane.event_names.get(int(mid), "")
            if names is not None and name not in names:
                continue
            if hostmod.is_op_name(name) or name.startswith("Iterator::"):
                continue
            stats = plane.event_stats(line, i)
            if "step_num" not in stats and not (names and hostmod.LEGACY_MARKER in names):
                continue
            if require_r and "_r" not in stats:
                continue
            if not require_r and "_r" in stats:
                continue
            found.setdefault(name, []).append((li, line.where([mid])))
    return found


def _from_markers(view: HostView, found, source: str) -> Optional[Steps]:
    if not found:
        return None
    name = next((n for n in _PREFERRED_MARKERS if n in found), None)
    if name is None:
        name = max(found, key=lambda n: sum(len(idx) for _, idx in found[n]))
    sel = found[name]
    per_line: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (starts, ends, step numbers)
    for li, idx in sel:
        line = view.plane.lines[li]
        values, present = view.stat_ints(li, idx, "step_num")
        per_line.append((line.start_ps[idx], line.start_ps[idx] + line.dur_ps[idx],
                         np.where(present, values.view(np.int64), -1)))
    starts, ends, nums = timeline.outermost(*(np.concatenate([p[k] for p in per_line]) for k in range(3)))
    # The training thread is the one holding most markers.
    steps = Steps(source=f"{source} ('{name}')", numbers=nums, starts=starts, ends=ends,
                  training_line=max(sel, key=lambda x: len(x[1]))[0])
    if (steps.numbers < 0).all():
        steps.numbers = np.arange(steps.count, dtype=np.int64)
    return steps


def _enclosing_work(view: HostView, sel) -> Tuple[int, int]:
    """(annotations enclosing at least one training-work event on their own line, all)."""
    work_ids = view.ids_named(hostmod.TRAINING_WORK_EVENTS)
    n_in = n_all = 0
    for li, idx in sel:
        line = view.plane.lines[li]
        work = np.sort(line.start_ps[line.where(work_ids)])
        inside = np.searchsorted(work, line.ends(idx)) - np.searchsorted(work, line.start_ps[idx])
        n_in += int((inside > 0).sum())
        n_all += len(idx)
    return n_in, n_all


def _user_annotations(view: HostView, found) -> Union[Steps, str, None]:
    """Steps from the user's own annotations with ``step_num`` and no ``_r``.

    A name qualifies when at least half of its annotations enclose training work on their
    thread (a profiling window may cut the first or last one); of several, the one with most
    such annotations wins (a validation loop runs fewer steps than training between them).
    """
    found = {n: sel for n, sel in found.items() if n not in _FRAMEWORK_MARKERS}
    if not found:
        return None
    enclosing = {}
    for name, sel in found.items():
        n_in, n_all = _enclosing_work(view, sel)
        if n_in and 2 * n_in >= n_all:
            enclosing[name] = n_in
    if not enclosing:
        names = ", ".join(f"'{n}'" for n in sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
        return f"annotations with step_num ({names}) enclose no training work (function call, kernel, session run)"
    name = max(enclosing, key=lambda n: enclosing[n])
    steps = _from_markers(view, {name: found[name]}, "user_step_annotations")
    assert steps is not None and steps.training_line is not None  # found[name] holds annotations
    launches = view.select(view.ids_named([hostmod.FUNCTION_RUN]), [steps.training_line])
    if launches:
        s = np.sort(view.plane.lines[launches[0][0]].start_ps[launches[0][1]])
        per_step = np.searchsorted(s, steps.ends) - np.searchsorted(s, steps.starts)
        med = int(np.median(per_step))
        if med > 1:
            steps.notes.append(f"each step holds {med} function launches (median): several training-function "
                               "calls per step, e.g. gradient accumulation")
    return steps


def _call_steps(s: np.ndarray, e: np.ndarray, source: str, what: str, first_what: str) -> Steps:
    """Steps from repeated calls (kept outermost, sorted): step i runs from call i's start to
    call i+1's start, so the Python work between calls belongs to the step."""
    if len(s) == 1:
        # One call in the window: the step is the call itself (the Python work after it,
        # until the next call, was not recorded).
        return Steps(source=source, numbers=np.zeros(1, dtype=np.int64), starts=s, ends=e,
                     notes=[f"one {first_what} in the window: its duration is the step time"])
    return Steps(source=source, numbers=np.arange(len(s) - 1, dtype=np.int64), starts=s[:-1], ends=s[1:],
                 dropped_partial=1,
                 notes=[(f"step i runs from {what} i to {what} i+1; the last {what} was dropped: its step's end "
                         "is not recorded")])


def _session_runs(view: HostView) -> Optional[Steps]:
    sel = view.select(view.ids_named([hostmod.SESSION_RUN]), view.non_data_lines)
    if not sel:
        return None
    li, idx = max(sel, key=lambda x: len(x[1]))
    line = view.plane.lines[li]
    s, e = timeline.outermost(line.start_ps[idx], line.ends(idx))
    return replace(_call_steps(s, e, "session_run", "session run", "session run"), training_line=li)


def _train_function_calls(view: HostView) -> Optional[Steps]:
    plane = view.plane
    ids = view.ids(("trainfn",), lambda n: n in hostmod.TRAIN_FUNCTION_NAMES or
                   bool(hostmod.INFERENCE_FUNCTION_RE.match(n)))
    best = None
    for li, idx in view.select(ids, view.non_data_lines):
        line = plane.lines[li]
        s, e = timeline.outermost(line.start_ps[idx], line.ends(idx))
        if best is None or len(s) > len(best[1]):
            best = (li, s, e)
    if best is None:
        return None
    li, s, e = best
    return replace(_call_steps(s, e, "train_function_calls", "call", "training-function call"), training_line=li)


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
        steps = replace(steps, numbers=steps.numbers[ok], starts=steps.starts[ok], ends=steps.ends[ok],
                        dropped_partial=steps.dropped_partial + dropped)
    return steps


def host_window(view: Optional[HostView]) -> Optional[Tuple[int, int]]:
    """[first event start, last event end] over the host plane, ps; None if empty."""
    if view is None:
        return None
    spans = [b for b in (l.bounds() for l in view.plane.lines) if b is not None]  # None: an empty line
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


def _candidates(space: Space, view: Optional[HostView]):
    """(finder name, finder) in the order tried; a finder returns Steps, None (no such
    events) or a sentence saying why its events are not steps."""
    out = []
    if view is not None:
        unrooted: Dict = {}

        def unrooted_markers():  # read once, shared by the two finders of un-rooted markers
            if "found" not in unrooted:
                unrooted["found"] = _marker_events(view, False)
            return unrooted["found"]

        out = [
            ("step_markers", lambda: _from_markers(view, _marker_events(view, True), "step_markers")),
            ("trace_context", lambda: _from_markers(
                view, _marker_events(view, False, names={hostmod.LEGACY_MARKER}), "trace_context")),
            ("keras_profiled_batch", lambda: _from_markers(
                view, {k: v for k, v in unrooted_markers().items() if k == hostmod.KERAS3_MARKER},
                "keras_profiled_batch")),
            ("user_step_annotations", lambda: _user_annotations(view, unrooted_markers())),
            ("session_run", lambda: _session_runs(view)),
            ("train_function_calls", lambda: _train_function_calls(view)),
        ]
    out.append(("device_steps_line", lambda: _device_steps_line(space)))
    if view is not None:
        out.append(("iterator_cadence", lambda: _iterator_cadence(view)))
    return out


def find_steps(space: Space, view: Optional[HostView]) -> StepSearch:
    """Try the finders in order (module docstring); the first with a complete step wins.

    Args:
        space: the XSpace of one host.
        view: its host plane's view (None when the trace has no host plane); not modified.

    Returns:
        StepSearch: the steps (None when no finder applied) with their graph-building
        facts, (finder, why it did not apply) for each finder tried before, and the training
        thread: the last one a finder saw (one whose steps were then rejected counts too),
        else the guess of :func:`_guess_training_line`.
    """
    tried: List[Tuple[str, str]] = []
    window = host_window(view)
    line: Optional[int] = None
    for name, finder in _candidates(space, view):
        steps = finder()
        if isinstance(steps, Steps) and steps.training_line is not None:
            line = steps.training_line
        if isinstance(steps, str):
            tried.append((name, steps))
            continue
        if steps is None or steps.count == 0:
            tried.append((name, _NO_EVENTS))
            continue
        if window is not None:
            steps = _drop_partial(steps, window)
        if steps.count == 0:
            tried.append((name, "only partial steps (cut by the profiling window)"))
            continue
        line = _training_line(view, line)
        steps = fill_fetch_gaps(view, steps, line)
        _count_batches(view, steps)
        _graph_build_facts(view, steps)
        return StepSearch(replace(steps, training_line=line), tried, line)
    return StepSearch(None, tried, _training_line(view, line))


def _training_line(view: Optional[HostView], seen: Optional[int]) -> Optional[int]:
    if view is None or seen is not None:
        return seen
    return _guess_training_line(view)


#: Marker-based sources: the marker may wrap only part of a loop's iteration. Call-based
#: sources (session runs, function calls, the iterator cadence) already run from one call
#: to the next.
_MARKED_SOURCES = ("step_markers", "keras_profiled_batch", "user_step_annotations")
#: The batch is fetched outside the marked step when at least this share of the gaps between
#: consecutive steps holds a blocking get-next on the training thread (a majority; our choice:
#: with the fetch outside, every gap holds one; with it inside, none does).
FETCH_GAP_SHARE = 0.5


def fill_fetch_gaps(view: Optional[HostView], steps: Steps, training_line: Optional[int]) -> Steps:
    """Count the batch fetched between marked steps in the step that waited for it.

    A custom loop written ``for x, y in ds: with profiler.step(): train_step(x, y)`` fetches
    each batch before its marker opens: the markers then cover less than the loop's period
    and the input wait falls between steps, where no breakdown sees it. When most gaps
    between consecutive steps hold a blocking ``IteratorGetNext`` on the training thread
    (``FETCH_GAP_SHARE``), step i is counted from the end of step i-1 to its own end: its
    period in the loop, fetch included. The first step's fetch came before the trace began,
    so it is dropped as partial (``training_line``: the thread the fetches are looked for on).
    Returns ``steps`` unchanged otherwise, or a new ``Steps``
    with a note saying what was done and how long the fetches took (median, ms).
    """
    if (view is None or training_line is None or steps.count < 3
            or not steps.source.startswith(_MARKED_SOURCES)):
        return steps
    line = view.plane.lines[training_line]
    ids = np.concatenate([view.ids_named(hostmod.GET_NEXT_EVENTS), view.getnext_op_ids()])
    fetch = line.mask(ids)
    if not fetch.any():
        return steps
    fetch_iv = timeline.union(line.start_ps[fetch], line.start_ps[fetch] + line.dur_ps[fetch])
    gap_starts, gap_ends = steps.ends[:-1], steps.starts[1:]
    ok = gap_ends > gap_starts
    waits = np.zeros(len(gap_starts), dtype=np.int64)
    waits[ok] = timeline.overlap_per_window(fetch_iv, gap_starts[ok], gap_ends[ok])
    if (waits > 0).sum() < FETCH_GAP_SHARE * len(waits):
        return steps
    filled = replace(steps, numbers=steps.numbers[1:], starts=np.where(ok, gap_starts, steps.starts[1:]), ends=steps.ends[1:],
                     dropped_partial=steps.dropped_partial + 1, notes=list(steps.notes))
    held = waits[waits > 0]
    filled.fetch_outside = (
        f"The batch is fetched outside the marked step (e.g. `for x, y in ds:` before `with profiler.step():`): "
        f"{len(held)} of {len(waits)} gaps between steps hold the blocking IteratorGetNext on the training thread "
        f"(median {np.median(held) / 1e9:.2f} ms); each step is counted from the previous step's end, so it holds "
        f"its own batch's fetch, and the first step (fetched before the trace began) is dropped.")
    filled.notes.append(filled.fetch_outside)
    return filled


#: Keras' own training functions (host.TRAIN_FUNCTION_NAMES, also as the concrete
#: ``__inference_<name>_<n>``): a trace holding none of them with its steps marked came
#: from a custom loop (``train_step`` of the user's own naming), where no ``compile(...)``
#: option applies.
_KERAS_FUNCTION_RE = re.compile(
    r"^(?:EagerLocalExecute: |EagerExecute: )?(?:__inference_)?(" + "|".join(hostmod.TRAIN_FUNCTION_NAMES)
    + r")(?:_\d+)?$")


def is_custom_loop(view: Optional[HostView], steps: Optional[Steps]) -> bool:
    """True when marked steps (step markers or the user's annotations) ran no Keras training
    function: the user's own loop (``with profiler.step(): train_step(x, y)``)."""
    if view is None or steps is None or not steps.source.startswith(_MARKED_SOURCES):
        return False
    if steps.source.startswith("keras_profiled_batch"):
        return False
    return len(view.ids(("keras-train-fn",), lambda n: bool(_KERAS_FUNCTION_RE.match(n)))) == 0


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


#: A leading step that built a graph is warm-up when graph building took more than this
#: share of it: the step is dominated by one-time work (a majority; our choice) ...
WARMUP_BUILD_SHARE = 0.5
#: ... or when it took more than this many times the median step that built no graph: the
#: first call also pays one-time costs the trace does not label (kernel set-up on the first
#: run, callbacks writing the graph). Measured on a Keras 3 CPU fit profiled from batch 1
#: (TF 2.21): step 0 took 236 ms, 90 ms of it tracing and instantiation, against 1-3 ms for
#: steps 1-3; another measured fit, 1.6 s against 50 ms. Twice the median leaves room for the
#: jitter of steady steps on a busy host.
WARMUP_SLOWDOWN = 2.0
#: Graph builds recur (retracing, not warm-up) when they occur in at least this share of the
#: steps after the leading ones: TensorFlow warns about retracing at 5 tracings within 10
#: calls (FREQUENT_TRACING_WARNING_THRESHOLD, FREQUENT_TRACING_WARNING_MAX_CALL_HISTORY in
#: tensorflow/python/eager/polymorphic_function/polymorphic_function.py).
RETRACE_SHARE = 0.5


def warmup_steps(durations_ps: np.ndarray, graph_build_ps: np.ndarray) -> int:
    """How many leading steps are warm-up (0 when none).

    The leading run: steps from the first on, each of which built a graph and is dominated
    by it (graph building > ``WARMUP_BUILD_SHARE`` of the step, or the step longer than
    ``WARMUP_SLOWDOWN`` x the median step that built none). It is warm-up only when steady
    steps follow it and graph builds recur in fewer than ``RETRACE_SHARE`` of them: one graph
    build at the start is warm-up, graph builds in many steps are retracing.

    Args:
        durations_ps: step durations, int64 ps, shape (n_steps,).
        graph_build_ps: graph-building time inside each step, int64 ps, shape (n_steps,).

    Returns:
        The number k of warm-up steps: steps 0..k-1.
    """
    built = graph_build_ps > 0
    steady = durations_ps[~built]
    median = float(np.median(steady)) if len(steady) else None
    k = 0
    while k < len(durations_ps) and built[k] and (
            graph_build_ps[k] > WARMUP_BUILD_SHARE * durations_ps[k]
            or (median is not None and durations_ps[k] > WARMUP_SLOWDOWN * median)):
        k += 1
    rest = built[k:]
    if k == 0 or len(rest) == 0 or (rest.any() and rest.sum() >= RETRACE_SHARE * len(rest)):
        return 0
    return k


def _ms(ps) -> str:
    return f"{ps / 1e9:.1f} ms" if ps >= 1e9 else f"{ps / 1e9:.3f} ms"


def _graph_build_facts(view: Optional[HostView], steps: Steps) -> None:
    """Fill ``graph_build_ps``, ``warmup`` and ``warmup_reason`` of ``steps``."""
    steps.graph_build_ps = np.zeros(steps.count, dtype=np.int64)
    steps.warmup = np.zeros(steps.count, dtype=bool)
    if view is None:
        return
    builds = view.graph_builds()
    union = builds.union()
    if len(union[0]) == 0:
        return
    steps.graph_build_ps = timeline.overlap_per_window(union, steps.starts, steps.ends)
    k = warmup_steps(steps.durations_ps, steps.graph_build_ps)
    if not k:
        return
    steps.warmup[:k] = True
    steps.warmup_reason = _warmup_reason(steps, builds, k)


def _warmup_reason(steps: Steps, builds: hostmod.GraphBuilds, k: int) -> str:
    """One sentence: which steps, how long graph building took in them and by which events,
    against the median step that built no graph."""
    span = (steps.starts[:1], steps.ends[k - 1:k])
    inside = (builds.traced_starts >= span[0][0]) & (builds.traced_starts < span[1][0])
    traced = list(dict.fromkeys(n for n, i in zip(builds.traced_names, inside, strict=True) if i and n))[:3]
    parts = []
    for label, iv in ((f"tracing (`{hostmod.GRAPH_BUILD_EVENT}`"
                       + (" of " + ", ".join(f"`{n}`" for n in traced) if traced else "") + ")", builds.tracing),
                      ("instantiation of the newly traced function", builds.instantiation),
                      ("XLA compilation", builds.compilation)):
        t = int(timeline.overlap_per_window(iv, *span)[0])
        if t:
            parts.append(f"{label} {_ms(t)}")
    which = f"step {steps.numbers[0]} is" if k == 1 else f"steps {steps.numbers[0]}-{steps.numbers[k - 1]} are"
    built, total = int(steps.graph_build_ps[:k].sum()), int(steps.durations_ps[:k].sum())
    steady = np.median(steps.durations_ps[k:][steps.graph_build_ps[k:] == 0])
    return (f"{which} warm-up: graph building took {_ms(built)} of {_ms(total)} ({100.0 * built / total:.0f}%; "
            f"{', '.join(parts)}), and {'it' if k == 1 else 'each'} took {total / k / steady:.0f}x the median "
            f"step that built no graph ({_ms(steady)}).")
