"""Which operations take the time: self time per TensorFlow op over the steady steps.

Three places run ops, each read from the columns the other modules already decode:

* ``host``: TensorFlow ops run by the executor on host threads (the model's math on a
  CPU-only host, the host side of a GPU model). Each op is a TraceMe ``<op name>:<op
  type>`` (core/profiler/utils/tf_op_utils.cc); an op run eagerly is its ``EagerExecute``
  event, named by its ``eager_op`` stat. An XLA executable run on the host (``jit_compile``
  on a CPU) is rows of its own, the executable's and its HLO ops' (:func:`xla_ops`), its time
  left out of the op event that launched it.
* ``input_pipeline``: the ops of a tf.data function (map/filter fns): op events inside an
  ``ExecutorState::Process`` linked to a tf.data ``FunctionRun`` (``_c`` = ``_p``,
  :func:`.tfdata.function_links`), or on a tf.data thread; each is credited to its stage.
* ``device``: GPU/TPU activity (kernels, copies, XLA ops) on the planes' activity lines
  (:mod:`.devices`), grouped by the TensorFlow op that launched them where the trace links
  them: the ``tf_op`` stat (XLA/newer TF), the scoped annotation the launching op left
  (``level 0`` in TF 2.3-2.5, ``annotation``), else the event's own name.

*Self time*: on one host thread, ops nest (a ``PartitionedCall`` runs its function's ops
inside itself), so an op's self time is its duration less the ops nested directly in it.
On a device, streams run concurrently: each instant of device busy time is split equally
among the events active then, so the device rows' self times add up to the busy time.
Only events starting inside the steady steps count (warm-up steps are excluded, as in the
breakdown), and every time is averaged per steady step.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..trace import timeline
from . import devices as devmod
from .host import EXECUTOR_EVENT, FUNCTION_RUN, XLA_RUN, XLA_THUNKS, HostView, is_op_name
from .tfdata import PRODUCE_SUFFIX, Pipeline, _innermost_container, function_owner_ids, owner_stage

WHERE = ("device", "host", "input_pipeline")
#: Scopes that wrap a whole function or the backward pass rather than name a layer
#: (tf.function call ops, ``tf.GradientTape`` scopes as Keras writes them).
_WRAPPER_SCOPES = ("StatefulPartitionedCall", "PartitionedCall", "gradient_tape", "gradients")
#: Name scopes of TensorFlow's control flow (tf.while_loop: ``while/body``, ``while/cond``;
#: tf.cond: ``cond/then``, ``cond/else``; each also numbered, ``cond_1``; ``_87``: a branch
#: function's number), which Keras' ``steps_per_execution`` loop puts before every op of the
#: step: not layers.
_CONTROL_FLOW_SCOPES = frozenset({"while", "body", "cond", "then", "else"})
#: The op type of a device kernel the trace ties to no framework op (a TensorFlow op, an aten
#: op): named by its kernel only.
NO_OP_TYPE = "(no op recorded)"
#: Copies on a device (names CUPTI/roctracer give them; see devices._H2D/_D2H).
_MEMCPY_PREFIX = ("Memcpy", "Memset", "memcpy", "memset")


@dataclass
class OpRow:
    """One op aggregated over the steady steps (ps totals; per step in the report)."""
    where: str
    name: str
    type: str
    stage: Optional[str] = None            # input_pipeline: the tf.data stage whose function ran it
    scope: Optional[str] = None            # a layer scope kept apart from the name (PyTorch's modules)
    self_ps: float = 0.0
    total_ps: float = 0.0
    count: int = 0
    longest_ps: int = 0                    # the longest occurrence: its duration and start
    longest_start_ps: int = 0
    kernels: Dict[str, float] = field(default_factory=dict)   # device: kernel name -> self ps
    per_step: Optional[np.ndarray] = None  # self ps in each window, shape (n_windows,)

    def add(self, self_ps: float, total_ps: float, count: int, longest: int, longest_start: int,
            per_step: np.ndarray) -> None:
        self.per_step = per_step if self.per_step is None else self.per_step + per_step
        self.self_ps += self_ps
        self.total_ps += total_ps
        self.count += count
        if longest > self.longest_ps:
            self.longest_ps, self.longest_start_ps = int(longest), int(longest_start)


def name_scope(row: "OpRow") -> Optional[str]:
    """The layer scope of a TensorFlow op row: :func:`scope_of` its name; an XLA row's, its
    executable's row name (:func:`xla_row_name`)."""
    return row.name.split("/")[0] if row.type.startswith(XLA_OP_PREFIX) else scope_of(row.name)


@dataclass
class OpTable:
    """Every op of one host over the steady steps. ``steps``: how many windows the totals
    cover (steady steps, or 1 for a trace without steps); ``step_ps``: their mean length;
    ``device_busy_ps``: device busy time inside them (all devices); ``scope``: a row's layer
    scope, or None (TensorFlow's: from the op's name, :func:`name_scope`)."""
    rows: List[OpRow]
    steps: int
    step_ps: float
    device_busy_ps: float
    scope: Callable[[OpRow], Optional[str]] = name_scope


def split_op_name(text: str) -> Tuple[str, str]:
    """``dense/MatMul:MatMul`` -> (``dense/MatMul``, ``MatMul``); a name without a type -> (name, "")."""
    if ":" in text and is_op_name(text):
        name, kind = text.rsplit(":", 1)
        return name, kind
    return text, ""


def _is_wrapper(scope: str) -> bool:
    """A function, gradient or control-flow scope (not a layer's)."""
    base = scope.rstrip("0123456789")
    return (scope.startswith(_WRAPPER_SCOPES) or (base[:-1] if base.endswith("_") else scope) in _CONTROL_FLOW_SCOPES
            or base == "_")


def layer_path(name: str) -> List[str]:
    """An op name's scopes without function, gradient and control-flow wrappers, its own name
    last: ``while/body/_1/while/cond/then/_87/while/cond/StatefulPartitionedCall/sequential_1/
    dense_1/Relu`` -> ``[sequential_1, dense_1, Relu]``."""
    *scopes, op = name.split("/")
    return [s for s in scopes if not _is_wrapper(s)] + [op]


def scope_of(name: str) -> Optional[str]:
    """The layer scope of an op name: its first two name scopes after function, gradient and
    control-flow wrappers, as Keras writes them (``StatefulPartitionedCall/gradient_tape/
    sequential/dense_1/MatMul/MatMul`` -> ``sequential/dense_1``; ``adam/Sub_1`` -> ``adam``),
    None for an op outside any scope (``Sin_3``)."""
    scopes = layer_path(name)[:-1]
    return "/".join(scopes[:2]) if scopes else None


def window_of(t: np.ndarray, win_s: np.ndarray, win_e: np.ndarray) -> np.ndarray:
    """Index of the sorted, disjoint window [win_s, win_e) holding each time ``t``, -1 if none."""
    k = np.searchsorted(win_s, t, side="right") - 1
    if len(win_s):
        k[(k < 0) | (t >= win_e[k])] = -1  # before the first window (k = -1 reads the last end: left -1)
    return k


def _in_windows(t: np.ndarray, win_s: np.ndarray, win_e: np.ndarray) -> np.ndarray:
    """Mask of the times ``t`` inside one of the sorted, disjoint windows [win_s, win_e)."""
    return window_of(t, win_s, win_e) >= 0


def key_outside_apart(keys: np.ndarray, step: np.ndarray) -> Optional[int]:
    """Only the ops that start inside a window count: the events whose ``step`` is -1 get one
    key of their own (returned, for :func:`_aggregate` to leave out) and step 0, in place;
    None when every event is inside a window."""
    outside = step < 0
    if not outside.any():
        return None
    drop = int(keys.max()) + 1
    keys[outside] = drop
    step[outside] = 0
    return drop


def _nested_self(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Self time of properly nested intervals on one thread: duration minus direct children."""
    dur = e - s
    parent = timeline.nesting_parents(s, e)
    child = parent >= 0
    return dur - np.bincount(parent[child], weights=dur[child], minlength=len(dur)).astype(np.int64)


def _aggregate(rows: Dict[tuple, OpRow], keys: np.ndarray, make, self_ps: np.ndarray, s: np.ndarray, e: np.ndarray,
               step: np.ndarray, n_steps: int, drop: Optional[int] = None) -> None:
    """Add per-event values to the rows of their keys (``make(key) -> OpRow`` for new ones):
    self time ``self_ps``, total time ``e - s``; ``step``: each event's window. The longest
    event of each key is kept for the Trace Viewer link. Events of key ``drop`` are left out
    (grouped apart, then not added)."""
    if not len(keys):
        return
    # Keys are small ints (name id x code): a dense table ranks them in O(n), no sort.
    count = np.bincount(keys)
    dropped = drop is not None and drop < len(count)
    if dropped:
        count[drop] = 0
    uniq = np.flatnonzero(count)
    n = len(uniq)
    rank = np.zeros(len(count), dtype=np.int64)
    rank[uniq] = np.arange(n)
    groups = n
    if dropped:
        rank[drop], groups = n, n + 1  # one more group, after the kept ones: cut off below
    inv, count = rank[keys], count[uniq]
    # bincount sums its weights as float64, as the totals are kept (int64 ps -> float64, exactly below 2**53)
    cell = inv * n_steps
    cell += step
    per_step = np.bincount(cell, weights=self_ps, minlength=groups * n_steps)[:n * n_steps].reshape(n, n_steps)
    del cell
    self_sum = np.bincount(inv, weights=self_ps, minlength=groups)[:n]
    dur = e - s
    total_sum = np.bincount(inv, weights=dur, minlength=groups)[:n]
    # The longest event of each key, and of equally long ones the last: two scatter-max
    # passes, no sort (and no dependence on how a sort orders ties).
    longest = np.zeros(groups, dtype=dur.dtype)
    np.maximum.at(longest, inv, dur)
    tied = np.flatnonzero(dur == longest[inv])
    last = np.zeros(groups, dtype=np.int64)
    np.maximum.at(last, inv[tied], tied)
    last = last[:n]
    columns = zip(uniq.tolist(), self_sum.tolist(), total_sum.tolist(), count.tolist(), dur[last].tolist(),
                  s[last].tolist(), per_step)  # Python scalars: one conversion per column, not per value
    for key, self_k, total_k, count_k, longest, start, steps in columns:
        row = rows.get(key)
        if row is None:
            row = rows[key] = make(key)
        row.add(self_k, total_k, count_k, longest, start, steps)


def host_ops(view: HostView, pipeline: Optional[Pipeline], win_s: np.ndarray, win_e: np.ndarray) -> List[OpRow]:
    """Host and input-pipeline op rows of the steady windows, XLA's on the host among them (ps totals)."""
    plane = view.plane
    stages = _FunctionStages(view, pipeline)
    n_codes = 2 + len(stages.paths)
    rows: Dict[tuple, OpRow] = {}

    eager = _EagerOps(view, max(plane.event_names, default=0) + 1)
    xla_rows, xla_runs = xla_ops(view, win_s, win_e)

    def make(key):
        name_id, code = divmod(key, n_codes)
        if name_id in eager.types:  # an eager op has no name of its own: its type
            return OpRow("host", f"{eager.types[name_id]} (eager)", eager.types[name_id])
        name, _, kind = plane.event_names.get(name_id, "").rpartition(":")  # an op TraceMe: name:type
        if code == 0:
            return OpRow("host", name, kind)
        return OpRow("input_pipeline", name, kind, stage=stages.paths[code - 2] if code >= 2 else None)

    # One pass over all threads: one row per op, whatever thread ran it. Each line's ops are
    # written straight into columns for all of them (no per-line pieces to concatenate).
    lines = list(view.select(view.ids(("op-events",), is_op_name)))
    eager_ops = list(eager.events())
    total = sum(len(idx) for _, idx in lines) + sum(len(ids) for ids, _, _ in eager_ops)
    keys, selfs, s, e, step = (np.empty(total, dtype=np.int64) for _ in range(5))
    at = 0
    for li, idx in lines:
        line = plane.lines[li]
        n = len(idx)
        ls, le, lstep = s[at:at + n], e[at:at + n], step[at:at + n]
        np.take(line.start_ps, idx, out=ls)
        np.add(ls, line.dur_ps[idx], out=le)
        lstep[:] = window_of(ls, win_s, win_e)
        if not (lstep >= 0).any():
            continue
        keys[at:at + n] = line.name_id[idx] * n_codes + stages.codes(li, ls, le)
        selfs[at:at + n] = _nested_self(ls, le)
        if li in xla_runs:  # an XLA executable's run is its rows' time, not the op's around it
            c = _innermost_container(ls, le, *xla_runs[li])
            np.subtract.at(selfs, at + c[c >= 0], (xla_runs[li][1] - xla_runs[li][0])[c >= 0])
        at += n
    for ids, es, ee in eager_ops:
        n = len(ids)
        keys[at:at + n], s[at:at + n], e[at:at + n] = ids * n_codes, es, ee
        selfs[at:at + n] = ee - es
        step[at:at + n] = window_of(es, win_s, win_e)
        at += n
    if at:
        keys, selfs, s, e, step = keys[:at], selfs[:at], s[:at], e[:at], step[:at]
        _aggregate(rows, keys, make, selfs, s, e, step, len(win_s), key_outside_apart(keys, step))
    return list(rows.values()) + xla_rows


#: An op or function run eagerly (core/common_runtime/eager/execute.cc): its ``eager_op``
#: stat names the op type (or the function), ``is_func`` tells which.
EAGER_EXECUTE = "EagerExecute"


class _EagerOps:
    """The eagerly executed ops (not functions: their ops are op events) on the host's
    non-tf.data threads: an ``EagerExecute`` event per op, its time the op's (dispatch and
    kernel; nothing nests in it but the kernel). ``types``: synthetic id (from ``first_id``
    on, beyond the plane's event names) -> op type."""

    def __init__(self, view: HostView, first_id: int):
        self.view, self.first_id = view, first_id
        self.types: Dict[int, str] = {}

    def events(self):
        """(synthetic op ids, starts, ends) of each line's eager ops."""
        view = self.view
        ids_of: Dict[str, int] = {}
        for li, idx in view.select(view.ids_named([EAGER_EXECUTE]), view.non_data_lines):
            is_func, present = view.stat_ints(li, idx, "is_func")
            idx = idx[~(present & (is_func != 0))]
            if not len(idx):
                continue
            kinds = view.stat_column(li, idx, "eager_op")
            keep = np.array([isinstance(k, str) and bool(k) for k in kinds], dtype=bool)
            codes = np.array([ids_of.setdefault(k, self.first_id + len(ids_of)) if ok else -1
                              for k, ok in zip(kinds, keep)], dtype=np.int64)
            line = view.plane.lines[li]
            yield codes[keep], line.start_ps[idx[keep]], line.ends(idx[keep])
        self.types.update({v: k for k, v in ids_of.items()})


#: A tf.data function call on a tf.data thread (core/data/captured_function.cc
#: ``InstantiatedCapturedFunction::Run``); its ops may run on tf.data's private thread pool
#: without a producer/consumer link, while the call lasts.
FUNCTION_CALL = "InstantiatedCapturedFunction::Run"


class _FunctionStages:
    """Which tf.data stage ran each op: through the executor event around the op and its
    ``_c`` link (:class:`.tfdata.FunctionLinks`), else, for an op on a tf.data thread, the
    stage whose function call was running when the op started, else the one stage whose
    function calls the trace holds, when there is one. ``paths``: the stages;
    an op's code is 0 (host), 1 (input pipeline, stage unknown) or 2 + index in ``paths``."""

    def __init__(self, view: HostView, pipeline: Optional[Pipeline]):
        self.view = view
        self.links = pipeline.links if pipeline is not None else None
        stages = pipeline.stages if pipeline is not None else []
        self.paths: List[str] = []
        self._index: Dict[str, int] = {}
        links = self.links
        self.link_code = np.array([self._code(links.paths.get(o) or owner_stage(stages, o)) for o in links.owners]
                                  if links else [], dtype=np.int64)
        self.call_s, self.call_e, self.call_code = self._calls(stages)
        # One stage runs every function seen: ops whose call began before the trace are its too.
        known = set(self.call_code.tolist()) | set(self.link_code.tolist())
        known.discard(1)
        self.only = known.pop() if len(known) == 1 else 1

    def _code(self, path: Optional[str]) -> int:
        if path is None:
            return 1
        if path not in self._index:
            self._index[path] = len(self.paths)
            self.paths.append(path)
        return 2 + self._index[path]

    def _calls(self, stages):
        """Function calls on tf.data threads, by start, with the code of the stage that made each."""
        view, parts = self.view, []
        call_ids, owner_ids = view.ids_named([FUNCTION_CALL, FUNCTION_RUN]), function_owner_ids(view)
        for li in view.tfdata_lines:
            line = view.plane.lines[li]
            calls = line.where(call_ids)
            own = line.where(owner_ids)
            if not len(calls) or not len(own):
                continue
            c = _innermost_container(line.start_ps[own], line.ends(own), line.start_ps[calls], line.ends(calls))
            owner = np.where(c >= 0, line.name_id[own[np.maximum(c, 0)]], -1)
            code = np.ones(len(calls), dtype=np.int64)
            for mid in timeline.distinct(owner[owner >= 0]).tolist():  # one lookup per owning stage, not per call
                n = view.plane.event_names.get(mid, "")
                key = n if n.startswith("Iterator::") else "Produce:" + n[:-len(PRODUCE_SUFFIX)]
                code[owner == mid] = self._code(owner_stage(stages, key))
            parts.append((line.start_ps[calls], line.ends(calls), code))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        s, e, code = (np.concatenate(x) for x in zip(*parts))
        order = np.argsort(s, kind="stable")
        return s[order], e[order], code[order]

    def codes(self, li: int, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """The code of each op event [s, e) of host line ``li``."""
        on_data = li in self.view.tfdata_lines
        code = np.full(len(s), self.only if on_data else 0, dtype=np.int64)
        if on_data and len(self.call_s):  # the call running when the op started
            j = np.searchsorted(self.call_s, s, side="right") - 1
            ok = j >= 0
            ok[ok] = self.call_e[j[ok]] >= s[ok]
            code[ok] = self.call_code[j[ok]]
        linked = self._linked(li, s, e)
        if linked is not None:
            has = linked >= 0
            code[has] = self.link_code[linked[has]]
        return code

    def _linked(self, li: int, s: np.ndarray, e: np.ndarray) -> Optional[np.ndarray]:
        """Per op: the index of the function link of the executor event around it, -1 if none."""
        links, view = self.links, self.view
        if links is None or not links.owners:
            return None
        line = view.plane.lines[li]
        proc = line.where(view.ids_named([EXECUTOR_EVENT]))
        if not len(proc):
            return None
        owner = links.owner_of(*view.stat_ints(li, proc, "_c"))
        if not (owner >= 0).any():
            return None
        container = _innermost_container(line.start_ps[proc], line.ends(proc), s, e)
        out = np.full(len(s), -1, dtype=np.int64)
        has = container >= 0
        out[has] = owner[container[has]]
        return out


def _fair_share(s: np.ndarray, e: np.ndarray, win_s: np.ndarray, win_e: np.ndarray) -> np.ndarray:
    """Each interval's share (ps) of the union's time inside the windows: every elementary
    segment goes in equal parts to the intervals active then, so the shares add up to the
    busy time inside the windows. Shape (n,), float64."""
    if not len(s):
        return np.zeros(0)
    bounds = timeline.distinct(np.concatenate([s, e, win_s, win_e]))
    seg_s, seg_len = bounds[:-1], np.diff(bounds)
    active = np.searchsorted(np.sort(s), seg_s, side="right") - np.searchsorted(np.sort(e), seg_s, side="right")
    weight = np.where((active > 0) & _in_windows(seg_s, win_s, win_e), seg_len / np.maximum(active, 1), 0.0)
    cum = np.concatenate([[0.0], np.cumsum(weight)])
    return cum[np.searchsorted(bounds, e)] - cum[np.searchsorted(bounds, s)]


def _string_stat(plane, line, idx: np.ndarray, names) -> List[Optional[str]]:
    """The first of the stats ``names`` each event carries, as text (None where none)."""
    out: List[Optional[str]] = [None] * len(idx)
    for stat in names:
        missing = [k for k, v in enumerate(out) if v is None]
        if not missing or plane.stat_id(stat) is None:
            continue
        values = plane.stat_column(line, idx[missing], stat)
        for k, v in zip(missing, values):
            if isinstance(v, str) and v:
                out[k] = v
    return out


#: Stats that name the TensorFlow op behind a device event: ``tf_op`` (XLA and newer TF's
#: device tracers), the outermost scoped annotation ``level 0`` (TF 2.3-2.5's CUPTI tracer),
#: the whole ``annotation`` stack (``outer::inner``, with ``#k=v#`` metadata).
_OP_STATS = ("tf_op", "level 0", "annotation")


def launching_op(text: Optional[str]) -> Optional[str]:
    """The op TraceMe (``name:type``) in an annotation, its innermost level, or None."""
    if not text:
        return None
    inner = text.split("::")[-1].split("#")[0]
    return inner if is_op_name(inner) else None


#: What launched each of some device events: ``(plane, line, event indices) -> [(op name, op
#: type) or None]``, one entry per event (None: no op recorded; the row is the event's name).
Launchers = Callable[[object, object, np.ndarray], Sequence[Optional[Tuple[str, str]]]]


def tf_launchers(plane, line, idx: np.ndarray) -> List[Optional[Tuple[str, str]]]:
    """TensorFlow's :data:`Launchers`: the op the event's stats name (:data:`_OP_STATS`),
    split into name and type (:func:`split_op_name`)."""
    ops = [launching_op(t) for t in _string_stat(plane, line, idx, _OP_STATS)]
    return [split_op_name(o) if o is not None else None for o in ops]


def device_ops(planes, win_s: np.ndarray, win_e: np.ndarray,
               launchers: Launchers = tf_launchers) -> Tuple[List[OpRow], float]:
    """Device op rows (ps totals) and the devices' busy time inside the windows (ps).

    ``planes``: (kind, Plane) of each GPU/TPU plane; ``launchers``: the op behind each
    event (:data:`Launchers`; TensorFlow's stats by default)."""
    rows: Dict[str, OpRow] = {}
    busy = 0.0
    for kind, plane in planes:
        lines = [l for l in devmod._activity_lines(plane, kind) if len(l)]
        if not lines:
            continue
        s = np.concatenate([l.start_ps for l in lines])
        e = np.concatenate([l.end_ps for l in lines])
        share = _fair_share(s, e, win_s, win_e)
        busy += float(share.sum())
        # An event counts in the window it starts in; one that started between windows and
        # runs into the next, in that one.
        step = window_of(s, win_s, win_e)
        late = (step < 0) & (share > 0)
        step[late] = np.minimum(np.searchsorted(win_s, s[late]), len(win_s) - 1)
        offset = 0
        for line in lines:
            n = len(line)
            m = np.flatnonzero(step[offset:offset + n] >= 0)
            _add_device_line(rows, plane, line, m, share[offset:offset + n][m], step[offset:offset + n][m],
                             len(win_s), launchers)
            offset += n
    return list(rows.values()), busy


def _add_device_line(rows: Dict[str, OpRow], plane, line, idx: np.ndarray, share: np.ndarray,
                     step: np.ndarray, n_steps: int, launchers: Launchers = tf_launchers) -> None:
    """Credit the events ``idx`` of one device line (their self time ``share``) to their ops,
    one (op, kernel) pair at a time."""
    if not len(idx):
        return
    ops = launchers(plane, line, idx)
    op_ids: Dict[Optional[Tuple[str, str]], int] = {}
    op_code = np.fromiter((op_ids.setdefault(o, len(op_ids)) for o in ops), dtype=np.int64, count=len(ops))
    name_id = line.name_id[idx].astype(np.int64)
    base = int(name_id.max()) + 1
    keys = op_code * base + name_id
    uniq, inv = np.unique(keys, return_inverse=True)
    n = len(uniq)
    self_sum = np.bincount(inv, weights=share, minlength=n)
    d = line.dur_ps[idx]
    total = np.bincount(inv, weights=d.astype(np.float64), minlength=n)
    count = np.bincount(inv, minlength=n)
    order = np.lexsort((d, inv))
    last = order[np.searchsorted(inv[order], np.arange(n), side="right") - 1]
    per_step = np.bincount(inv * n_steps + step, weights=share, minlength=n * n_steps).reshape(n, n_steps)
    op_of = {v: k for k, v in op_ids.items()}
    for k, key in enumerate(uniq.tolist()):
        op, event = op_of[key // base], plane.event_names.get(key % base, "")
        if op is not None:
            name, kind = op
        else:
            name = event
            kind = event.split()[0] if event.startswith(_MEMCPY_PREFIX) else NO_OP_TYPE
        row = rows.get(name)
        if row is None:
            row = rows[name] = OpRow("device", name, kind)
        j = int(last[k])
        row.add(float(self_sum[k]), float(total[k]), int(count[k]), int(d[j]), int(line.start_ps[idx[j]]),
                per_step[k])
        row.kernels[event] = row.kernels.get(event, 0.0) + float(self_sum[k])


#: The type of an executable's own row; its HLO ops' types are ``XLA <op>`` (``XLA convolution``).
XLA_TYPE = "XLA executable"
XLA_OP_PREFIX = "XLA "
#: A module compiling a tf.function is named after it: ``__inference_<name>_<uid>``
#: (tensorflow/python/eager/polymorphic_function/concrete_function.py) as XLA writes it,
#: ``a_inference_<name>_<uid>__...`` (the traces' ``hlo_module`` stats; the HLO printed in
#: tensorflow/python/types/core.py's ``experimental_get_compiler_ir`` example).
_MODULE_RE = re.compile(r"^a?_*inference_(.+?)_\d+__")
#: An HLO op's instance numbers (``convolution.2``; ``MatMul_1.4``: tf2xla keeps the TF op's name).
_HLO_NUMBER = re.compile(r"(?:[._]\d+)+$")


def xla_row_name(module: Optional[str], hlo_op: Optional[str] = None) -> str:
    """The row of an XLA module (``a_inference_one_step_on_data_1155__.18`` -> ``one_step_on_data
    (XLA)``: the function it compiles; another module, e.g. an auto-cluster, by its name) or of
    one of its HLO ops (``one_step_on_data (XLA)/convolution.2``)."""
    m = _MODULE_RE.match(module or "")
    name = f"{m.group(1) if m else module or 'executable'} (XLA)"
    return f"{name}/{hlo_op}" if hlo_op else name


def _hlo_events(view: HostView):
    """The HLO op events of the host (:data:`.host.XLA_RUN`'s comment): events with ``hlo_module`` and
    ``hlo_op`` stats starting inside an executable's or a thunk executor's run on their thread,
    enclosing no other such event. (starts, ends, module, op): 4 columns, shape (n,) each."""
    plane, containers, parts = view.plane, view.ids_named([XLA_RUN, XLA_THUNKS]), []
    for li, cidx in view.select(containers):
        line = plane.lines[li]
        idx = np.flatnonzero(window_of(line.start_ps, *timeline.union(line.start_ps[cidx], line.ends(cidx))) >= 0)
        idx = idx[~np.isin(line.name_id[idx], containers)]
        mods, ops = (np.array(view.stat_column(li, idx, k), dtype=object) for k in ("hlo_module", "hlo_op"))
        keep = np.flatnonzero([isinstance(m, str) and isinstance(o, str) for m, o in zip(mods, ops)])
        parent = timeline.nesting_parents(line.start_ps[idx[keep]], line.ends(idx[keep]))
        keep = np.delete(keep, parent[parent >= 0])  # an HLO op around others (a loop's thunk): its ops count
        parts.append((line.start_ps[idx[keep]], line.ends(idx[keep]), mods[keep], ops[keep]))
    return tuple(np.concatenate(c) for c in zip(*parts)) if parts else (np.zeros(0, np.int64),) * 2 + (np.zeros(0, object),) * 2


def xla_ops(view: HostView, win_s: np.ndarray, win_e: np.ndarray) -> Tuple[List[OpRow], Dict[int, tuple]]:
    """XLA executables' rows (ps totals) and their runs per host line ({line: (starts, ends)}, for
    the op events around them to leave out of their self time).

    Each run of an executable (:data:`XLA_RUN`) that starts in a window counts there, wholly, as
    a host op does: its wall time is split among its HLO ops, each instant in equal parts among
    the HLO ops running then on any thread (as device rows share a device), and the instants
    with none (the runtime, waiting for the pool) stay on the executable's row (type
    :data:`XLA_TYPE`). The executable's row and its HLO ops' rows so add up to its runs' wall
    time; an HLO row's total is its time on its threads. Empty without XLA runs."""
    runs = view.select(view.ids_named([XLA_RUN]))
    if not runs or view.plane.stat_id("hlo_module") is None:
        return [], {}
    lines = {li: (view.plane.lines[li].start_ps[idx], view.plane.lines[li].ends(idx)) for li, idx in runs}
    rs, re_ = (np.concatenate(x) for x in zip(*lines.values()))
    order = np.argsort(rs, kind="stable")
    rs, re_ = rs[order], re_[order]
    hs, he, mods, ops = _hlo_events(view)
    run = np.searchsorted(rs, hs, side="right") - 1  # the run each HLO op started in
    inside = np.flatnonzero(run >= 0)
    inside = inside[re_[run[inside]] > hs[inside]]
    hs, he, run, mods, ops = hs[inside], he[inside], run[inside], mods[inside], ops[inside]
    share = _fair_share(hs, he, *timeline.union(rs, re_))
    run_mod = dict(zip(run.tolist(), mods))
    rest = np.maximum((re_ - rs) - np.bincount(run, weights=share, minlength=len(rs)), 0.0)
    names = [xla_row_name(run_mod.get(j)) for j in range(len(rs))] + [xla_row_name(m, o) for m, o in zip(mods, ops)]
    ids: Dict[str, int] = {}
    keys = np.array([ids.setdefault(n, len(ids)) for n in names], dtype=np.int64)
    step = window_of(rs, win_s, win_e)
    step = np.concatenate([step, step[run]])
    named = {k: OpRow("host", n, XLA_OP_PREFIX + _HLO_NUMBER.sub("", n.rsplit("/", 1)[1]) if "/" in n else XLA_TYPE)
             for n, k in ids.items()}
    rows: Dict[tuple, OpRow] = {}
    _aggregate(rows, keys, named.get, np.concatenate([rest, share]), np.concatenate([rs, hs]),
               np.concatenate([re_, he]), step, len(win_s), key_outside_apart(keys, step))
    return list(rows.values()), lines
