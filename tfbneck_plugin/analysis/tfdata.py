"""tf.data stage analysis from ``Iterator::`` events.

Each tf.data iterator records a TraceMe per ``GetNext`` call named after its position
in the pipeline, e.g. ``Iterator::Root::Prefetch::ParallelMapV2::TFRecord`` (TF >= 2.5;
older versions write only ``Iterator::ParallelMapV2`` with ``id``/``parent_id`` stats)
(core/data/dataset_utils.cc, core/framework/dataset.h ``TraceMeMetadata``). Nested calls
on one thread are nested events, so a stage's *self time* is its event time minus the
time of iterator events nested inside it. On the consumer thread, an asynchronous stage
(prefetch, parallel map, map-and-batch, parallel interleave) shows its waiting time as
self time: the consumer was blocked on that stage's buffer.

The *blocking stage* is the stage with the most work, skipping pure buffers and wrappers
(``Root``, ``Model``, ``Prefetch``...) whose waiting only passes on the slowness of the
stage upstream of them. A stage's work is one thing counted once: for an asynchronous
stage (parallel map, ``MapAndBatch``...) the CPU time of its user function, which runs on
executor threads, since its self time on the consumer thread is waiting for that work; for
a synchronous stage its self time, which already holds its function when the function runs
inline (or the function's CPU time when larger). XProf's tf.data bottleneck analysis
(xprof: convert/xplane_to_tf_data_stats.cc) ranks iterators by self time alone; counting
the function time keeps a parallel map whose work runs on other threads from looking cheap.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..trace import timeline
from .host import EXECUTOR_EVENT, FUNCTION_RUN, HostView

#: Stages that only buffer or wrap: their self time is waiting for upstream stages.
PASS_THROUGH = {"Root", "Model", "Prefetch", "MaxIntraOpParallelism", "PrivateThreadPool",
                "Options", "ModelDataset", "MemoryCache", "Cache", "Repeat", "ForeverRepeat",
                "FiniteRepeat", "Take", "FiniteTake", "Skip", "Zip", "Concatenate", "Rebatch",
                "AssertCardinality", "Finalize"}
#: Stages whose work is reading records from files (core/kernels/data/*_dataset_op.cc).
FILE_READ = {"TFRecord", "TextLine", "FixedLengthRecord", "ParallelInterleaveV4",
             "ParallelInterleaveV2", "ParallelInterleave", "Interleave", "LegacyParallelInterleaveV2",
             "FlatMap", "SSTable", "ArrayRecord", "LMDB"}
#: Stages that read over the network (tf.data service workers, remote file systems).
REMOTE_READ = {"DataService", "DataServiceDataset"}
#: Stages that run Python code (tf.py_function / Dataset.from_generator use the
#: ``EagerPyFunc``/``PyFunc`` op inside a map or flat-map).
PYTHON = {"Generator", "FromGenerator"}
#: Sources that hold the data in memory (Dataset.from_tensor_slices / from_tensors / range):
#: they never read files.
IN_MEMORY = {"TensorSlice", "FromTensor", "Tensor", "Range", "SparseTensorSlice"}
#: Sources that read files (core/kernels/data/*_dataset_op.cc).
FILE_SOURCES = {"TFRecord", "TextLine", "FixedLengthRecord", "SSTable", "ArrayRecord", "LMDB"}
#: ``Dataset.from_generator`` flat-maps a generator dataset over an id dataset
#: (tensorflow/python/data/ops/from_generator_op.py): its stage path holds ``FlatMap[i]::Generator``.
FROM_GENERATOR_PARENT = "FlatMap["
#: Stages that work on their own threads ahead of the consumer, with a buffer
#: (core/kernels/data/parallel_map_dataset_op.cc, map_and_batch_dataset_op.cc...).
#: ``MapAndBatch`` is what tf.data's map_and_batch_fusion makes of ``.map(f).batch(b)``.
ASYNC = {"ParallelMap", "ParallelMapV2", "MapAndBatch", "ParallelBatch", "ParallelInterleave",
         "ParallelInterleaveV2", "ParallelInterleaveV4", "LegacyParallelInterleaveV2", "ParallelFilter",
         "Prefetch"}
#: Stages that run a user function once per input element (a map before ``batch`` runs it
#: per example; after it, per batch).
MAPS = {"Map", "ParallelMap", "ParallelMapV2", "MapAndBatch"}
#: Stages that cache their input (Dataset.cache: in memory or in files).
CACHES = {"Cache", "MemoryCache", "MemoryCacheImpl", "CacheImpl", "FileCache", "FileCacheImpl"}
BATCHES = {"Batch", "BatchV2", "PaddedBatch", "PaddedBatchV2", "ParallelBatch", "MapAndBatch"}
MAP_LIKE = {"Map", "ParallelMap", "ParallelMapV2", "MapAndBatch", "ParallelBatch", "Batch",
            "PaddedBatch", "Filter", "ParallelFilter", "Unbatch", "Shuffle", "ShuffleAndRepeat"}


@dataclass
class Stage:
    """One tf.data iterator stage over the window: calls, total and self time (ps), the CPU time of
    its user function (ps), its parallelism and autotune stats.
    """
    path: str          # full iterator name, e.g. Iterator::Root::Prefetch::ParallelMapV2
    kind: str          # last component, e.g. ParallelMapV2
    calls: int
    total_ps: int
    self_ps: int
    parallelism: Optional[int]   # threads; None when the trace does not say (or says "unavailable")
    autotune: Optional[object]
    depth: int
    function_ps: int = 0   # CPU time of the stage's user function (map fn) on executor threads

    @property
    def asynchronous(self) -> bool:
        """The stage produces on its own threads ahead of the consumer (:data:`ASYNC`)."""
        return self.kind in ASYNC

    @property
    def work_ps(self) -> int:
        """The stage's own work (ps), counted once: an asynchronous stage's function CPU time
        (its self time is the consumer waiting for that work), else the larger of its self
        time and its function's CPU time. What ranks the blocking stage."""
        if self.asynchronous and self.function_ps:
            return self.function_ps
        return max(self.self_ps, self.function_ps)

    @property
    def threads(self) -> int:
        """Elements it works on at once: its ``parallelism`` stat for an asynchronous stage
        (at least 1), 1 for a synchronous one."""
        try:
            par = int(str(self.parallelism))
        except ValueError:  # None, or a stat that is not a number
            par = 1
        return max(par, 1) if self.asynchronous else 1

    @property
    def category(self) -> str:
        """``remote_read``, ``file_read``, ``python``, ``buffer`` or ``compute`` from the stage's kind."""
        base = self.kind.rstrip("0123456789")
        if self.kind in REMOTE_READ or base in REMOTE_READ:
            return "remote_read"
        if self.kind in FILE_READ or base in FILE_READ:
            return "file_read"
        if self.kind in PYTHON:
            return "python"
        if self.kind in PASS_THROUGH:
            return "buffer"
        return "compute"


#: Events that bracket an asynchronous stage's producer work on tf.data threads
#: (core/kernels/data/*_dataset_op.cc: ``MapAndBatchProduce``, ``ParallelMapProduce``...).
PRODUCE_SUFFIX = "Produce"


@dataclass
class Pipeline:
    """The tf.data stages of one host. ``blocking``: the stage with the most work (self time
    plus the CPU time of its function), skipping buffers; the consumer waits for it."""
    stages: List[Stage]
    blocking: Optional[Stage]
    has_prefetch: bool
    uses_py_function: bool
    links: Optional["FunctionLinks"] = None   # which stage's function each FunctionRun ran
    py_function_ps: Optional[int] = None      # time inside tf.py_function calls (ps); None: not measured
    cache_in_trace: bool = False              # a cache iterator ran somewhere in the trace, even outside the steps

    @property
    def mostly_python(self) -> bool:
        """Python does the input's work: the source or the blocking stage is Python
        (``from_generator``, PyDataset), or ``tf.py_function`` calls take at least half of the
        blocking stage's work (any call counts when their time was not measured). A map of
        TensorFlow ops with a py_function of a few microseconds per element is not Python."""
        if self.source == "generator" or (self.blocking is not None and self.blocking.category == "python"):
            return True
        if not self.uses_py_function:
            return False
        if self.py_function_ps is None or self.blocking is None or not self.blocking.work_ps:
            return True
        return self.py_function_ps >= 0.5 * self.blocking.work_ps

    @property
    def blocking_runs_ahead(self) -> bool:
        """The blocking stage works on threads of its own, beside the consumer: it, or a stage
        that encloses it (a prefetch, a parallel map), is asynchronous (:data:`ASYNC`). Else
        the consumer runs it, inside its wait for input."""
        st = self.blocking
        return st is not None and any(o.asynchronous and st.path.startswith(o.path) for o in self.stages)

    def fills_cache(self, st: Stage) -> bool:
        """``st`` runs under a ``cache()`` stage (:data:`CACHES`): its work is the cache's first
        pass. tf.data's cache iterator calls its input only while writing; once the cache holds
        every element, later passes read it and the stages below do nothing (tensorflow:
        core/kernels/data/cache_dataset_ops.cc, the writer and reader iterators)."""
        return any(o.kind in CACHES and st.path.startswith(o.path + "::") for o in self.stages)

    @property
    def has_cache(self) -> bool:
        """A ``cache()`` stage is in the pipeline: one of the analysed stages, or a cache iterator
        (``Iterator::...::MemoryCache``, ``...::MemoryCacheImpl``, ``FileCache``: :data:`CACHES`)
        anywhere in the trace, such as the first steps of an epoch outside the analysed ones."""
        return self.cache_in_trace or any(st.kind in CACHES for st in self.stages)

    def after_cache(self, st: Stage) -> bool:
        """``st`` consumes a ``cache()`` stage's output (a cache stage's path runs below
        ``st``'s): it runs for every element of every epoch, whatever the cache holds."""
        return any(o.kind in CACHES and o.path.startswith(st.path + "::") for o in self.stages)

    @property
    def unseen_upstream(self) -> Optional[Stage]:
        """The deepest stage the analysed steps recorded when no source stage (:attr:`source`)
        is among them: the stages upstream of it left no call in those steps, so what they
        are (a ``cache()``, a file read) is not in the trace. They made none when a ``shuffle``
        buffer holds the whole epoch: it fills itself up to ``buffer_size`` elements at the
        epoch's start and then calls its input no more (tensorflow:
        core/kernels/data/shuffle_dataset_op.cc); or their iterators recorded none. None when a
        source was recorded, or when the deepest stage is itself a source (a Python generator
        under the root)."""
        if self.source is not None or not self.stages:
            return None
        deepest = max(self.stages, key=lambda st: (st.depth, st.calls))
        sources = PYTHON | REMOTE_READ | FILE_SOURCES | IN_MEMORY
        return None if deepest.kind in sources or deepest.calls == 0 else deepest

    @property
    def map_per_element(self) -> Optional[Stage]:
        """The map stage with the most work when it runs once per element: a ``MapAndBatch``
        (fused ``.map(f).batch(b)``), or a map that a batch stage consumes (the batch stage's
        iterator encloses the map's: ``...::BatchV2::Map``). None when the maps run on whole
        batches (``...::Map::BatchV2``: the pipeline is vectorised) or there is no map."""
        maps = sorted((st for st in self.stages if st.kind in MAPS), key=lambda st: -st.work_ps)
        for st in maps:
            if st.kind == "MapAndBatch":
                return st
            if any(st.path.startswith(o.path + "::") for o in self.stages if o.kind in BATCHES):
                return st
        return None

    @property
    def source(self) -> Optional[str]:
        """Where the elements come from: ``generator`` (``Dataset.from_generator``, which Keras
        uses for ``PyDataset``/``Sequence``/generators), ``files``, ``remote`` (tf.data
        service), ``in_memory`` (tensors), or None when no source stage was recorded.

        ``from_generator`` shows as a ``Generator`` stage under a ``FlatMap``; a ``Generator``
        stage right under the root is tf.distribute's wrapper around the per-worker iterator
        (MultiWorkerMirroredStrategy), not the user's source."""
        kinds = {st.kind for st in self.stages}
        if any(st.kind in PYTHON and FROM_GENERATOR_PARENT in st.path for st in self.stages):
            return "generator"
        if kinds & REMOTE_READ:
            return "remote"
        if kinds & FILE_SOURCES:
            return "files"
        if kinds & IN_MEMORY:
            return "in_memory"
        return None


def _self_times(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Self time of properly nested intervals on one thread: duration minus direct children."""
    dur = (end - start).astype(np.int64)
    parent = timeline.nesting_parents(start, end)
    child = parent >= 0
    nested = np.bincount(parent[child], weights=dur[child], minlength=len(dur)).astype(np.int64)
    return np.maximum(dur - nested, 0)


def _kind_of(path: str) -> str:
    """``Iterator::Root::ParallelInterleaveV4[0]::FlatMap`` -> ``FlatMap``; strips ``[n]``."""
    return path.split("::")[-1].split("[")[0]


@dataclass
class FunctionLinks:
    """Which stage's user function each tf.data ``FunctionRun`` ran for, by its ``_p`` stat.

    ``producers``: the ``_p`` values, sorted (uint64, shape (n,)); ``owner``: for each, an
    index into ``owners`` (int64, shape (n,)); ``owners``: owner keys (an iterator path or
    ``Produce:<Prefix>``); ``paths``: owner key -> the stage path its function time is
    credited to (set by :func:`analyze_pipeline`). Executor events whose ``_c`` equals a
    producer ran that function's ops.
    """
    producers: np.ndarray
    owner: np.ndarray
    owners: List[str]
    paths: Dict[str, str]
    #: The last answers of :meth:`owner_of`: id(consumers) -> (consumers, present, answer).
    _answers: Dict[int, tuple] = field(default_factory=dict, repr=False, compare=False)

    def owner_of(self, consumers: np.ndarray, present: np.ndarray) -> np.ndarray:
        """Index into ``owners`` of each consumer id (``_c``), -1 where none matches; shape (n,),
        read-only. The stage breakdown and the op table ask it of the same executor events'
        ``_c`` column (the array the plane's stat cache hands both, :meth:`.xspace.Plane.stat_ints`):
        the answer is kept for that array (a binary search of each id, ~3 ms per 100,000)."""
        kept = self._answers.get(id(consumers))
        if kept is not None and kept[0] is consumers and np.array_equal(kept[1], present):
            return kept[2]
        out = np.full(len(consumers), -1, dtype=np.int64)
        if len(self.producers):
            pos = np.searchsorted(self.producers, consumers)
            hit = present & (pos < len(self.producers))
            hit[hit] = self.producers[pos[hit]] == consumers[hit]
            out[hit] = self.owner[pos[hit]]
        out.flags.writeable = False
        if len(self._answers) >= 16:
            self._answers.pop(next(iter(self._answers)))
        self._answers[id(consumers)] = (consumers, present, out)
        return out


def function_owner_ids(view: HostView) -> np.ndarray:
    """Metadata ids of the events that can own a function call: ``Iterator::...`` and ``*Produce``."""
    return view.ids(("fn-owners",), lambda n: n.startswith("Iterator::") or
                    (n.endswith(PRODUCE_SUFFIX) and n[:1].isupper() and " " not in n))


def owner_stage(stages: List[Stage], owner: str) -> Optional[str]:
    """The stage path an owner key (an iterator path or ``Produce:<Prefix>``) stands for, None if unknown."""
    if not owner.startswith("Produce:"):
        return owner
    prefix = owner.split(":", 1)[1]
    same = [st for st in stages if st.kind.startswith(prefix)]
    return max(same, key=lambda st: st.calls).path if same else None


def function_links(view: HostView, window=None) -> FunctionLinks:
    """The tf.data ``FunctionRun`` events (inside ``window`` when given) and the stage that owns each.

    A stage runs its function through ``FunctionRun`` on a tf.data thread; the ops then
    execute as ``ExecutorState::Process`` events, on any thread, whose ``_c`` stat equals
    the ``FunctionRun``'s ``_p`` (producer/consumer links, tsl/profiler/lib/
    context_types.h). The owner is the innermost ``*Produce`` or ``Iterator::`` event that
    encloses the ``FunctionRun`` on its thread.
    """
    plane = view.plane
    fr_ids = view.ids_named([FUNCTION_RUN])
    owner_ids = function_owner_ids(view)
    prod_values: List = []
    prod_owner: List = []
    owner_names: List[str] = []
    for li in view.tfdata_lines:
        line = plane.lines[li]
        fr = line.where(fr_ids)
        if window is not None and len(fr):
            fr = fr[(line.start_ps[fr] >= window[0]) & (line.start_ps[fr] < window[1])]
        own = line.where(owner_ids)
        if len(own) == 0 or len(fr) == 0:
            continue
        values, present = view.stat_ints(li, fr, "_p")
        fr, values = fr[present], values[present]
        container = _innermost_container(line.start_ps[own], line.start_ps[own] + line.dur_ps[own],
                                         line.start_ps[fr], line.start_ps[fr] + line.dur_ps[fr])
        ok = container >= 0
        for mid in timeline.distinct(line.name_id[own[container[ok]]]):
            name = plane.event_names[int(mid)]
            key = name if name.startswith("Iterator::") else f"Produce:{name[:-len(PRODUCE_SUFFIX)]}"
            m = ok.copy()
            m[ok] = line.name_id[own[container[ok]]] == mid
            prod_values.append(values[m])
            prod_owner.append(np.full(int(m.sum()), len(owner_names), dtype=np.int64))
            owner_names.append(key)
    if not owner_names:
        return FunctionLinks(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64), [], {})
    pv, po = np.concatenate(prod_values), np.concatenate(prod_owner)
    order = np.argsort(pv)
    return FunctionLinks(pv[order], po[order], owner_names, {})


def _function_work(view: HostView, links: FunctionLinks) -> Dict[str, List[int]]:
    """CPU time (ps) of user functions (map/filter/interleave fns) per owning stage: the
    executor events linked to the stage's ``FunctionRun`` events (:func:`function_links`).
    Returns owner key -> [ps, executor events]."""
    work: Dict[str, List[int]] = {}
    if not links.owners:
        return work
    totals = np.zeros(len(links.owners), dtype=np.int64)
    counts = np.zeros(len(links.owners), dtype=np.int64)
    for li, idx in view.select(view.ids_named([EXECUTOR_EVENT])):
        owners = links.owner_of(*view.stat_ints(li, idx, "_c"))
        hit = owners >= 0
        np.add.at(totals, owners[hit], view.plane.lines[li].dur_ps[idx[hit]])
        np.add.at(counts, owners[hit], 1)
    for k, key in enumerate(links.owners):
        if counts[k]:
            w = work.setdefault(key, [0, 0])
            w[0] += int(totals[k])
            w[1] += int(counts[k])
    return work


def _innermost_container(cs: np.ndarray, ce: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """For each interval [s, e), the index of the innermost container [cs, ce) on the same
    thread that encloses it, or -1. Containers nest properly (one thread's TraceMes)."""
    order = np.lexsort((-ce, cs))
    cs, ce = cs[order], ce[order]
    parent = timeline.nesting_parents(cs, ce)  # already in sorted order: indices into cs
    out = np.full(len(s), -1, dtype=np.int64)
    j = np.searchsorted(cs, s, side="right") - 1
    # The last container starting before s encloses it, or one of its ancestors does:
    # walk up (pipelines nest a handful of stages deep).
    for _ in range(64):
        pending = (out < 0) & (j >= 0)
        if not pending.any():
            break
        fits = pending.copy()
        fits[pending] = ce[j[pending]] >= e[pending]
        out[fits] = j[fits]
        move = pending & ~fits
        j[move] = parent[j[move]]
    valid = out >= 0
    out[valid] = order[out[valid]]
    return out


def analyze_pipeline(view: HostView, window=None) -> Pipeline:
    """Stages over the whole trace (or inside ``window`` = (start_ps, end_ps) when given)."""
    plane = view.plane
    it_ids = view.ids(("iterators",), lambda n: n.startswith("Iterator::"))
    agg: Dict[str, dict] = {}
    for li, idx in view.select(it_ids):
        line = plane.lines[li]
        s = line.start_ps[idx]
        e = s + line.dur_ps[idx]
        selfs = _self_times(s, e)
        if window is not None:
            inside = (s >= window[0]) & (e <= window[1])
            idx, s, e, selfs = idx[inside], s[inside], e[inside], selfs[inside]
        names = line.name_id[idx]
        for mid in timeline.distinct(names):
            m = names == mid
            path = plane.event_names[int(mid)]
            a = agg.setdefault(path, {"calls": 0, "total": 0, "self": 0, "last": None})
            a["calls"] += int(m.sum())
            a["total"] += int((e[m] - s[m]).sum())
            a["self"] += int(selfs[m].sum())
            # Stats of the last call: autotuned parallelism is settled by then.
            a["last"] = (li, idx[m][-1:])
    stages = []
    for path, a in agg.items():
        parallelism = autotune = None
        if a["last"] is not None:
            li, last = a["last"]
            stats = plane.event_stats(plane.lines[li], last[0])
            parallelism = _parallelism(stats.get("parallelism"))
            autotune = stats.get("autotune")
        parts = path.split("::")
        stages.append(Stage(path=path, kind=_kind_of(path), calls=a["calls"], total_ps=a["total"],
                            self_ps=a["self"], parallelism=parallelism, autotune=autotune,
                            depth=len(parts) - 1))
    links = function_links(view, window)
    for owner, (ps, _n) in _function_work(view, links).items():
        links.paths[owner] = _attach_function_work(stages, owner, ps)
    stages.sort(key=lambda st: -st.work_ps)
    working = [st for st in stages if st.category != "buffer"]
    blocking = working[0] if working else (stages[0] if stages else None)
    py_ids = view.ids(("pyfunc",), lambda n: n.endswith(("EagerPyFunc", "PyFunc")) or n in ("EagerPyFunc", "PyFunc"))
    py_calls = view.select(py_ids)
    cache_ids = view.ids(("caches",), lambda n: n.startswith("Iterator::") and _kind_of(n) in CACHES)
    return Pipeline(stages=stages, blocking=blocking,
                    has_prefetch=any(st.kind == "Prefetch" for st in stages), uses_py_function=bool(py_calls),
                    links=links, py_function_ps=_time_inside(view, py_calls, window),
                    cache_in_trace=bool(len(cache_ids)))


def _time_inside(view: HostView, selection, window=None) -> int:
    """Total duration (ps) of the selected events, those inside ``window`` only when given."""
    total = 0
    for li, idx in selection:
        line = view.plane.lines[li]
        s, d = line.start_ps[idx], line.dur_ps[idx]
        if window is not None:
            keep = (s >= window[0]) & (s + d <= window[1])
            d = d[keep]
        total += int(d.sum())
    return total


def _attach_function_work(stages: List[Stage], owner: str, ps: int) -> str:
    """Credit ``ps`` of function time to the stage ``owner`` names; returns that stage's path."""
    if not owner.startswith("Produce:"):
        for st in stages:
            if st.path == owner:
                st.function_ps += ps
                return st.path
        stages.append(Stage(path=owner, kind=_kind_of(owner), calls=0, total_ps=0, self_ps=0,
                            parallelism=None, autotune=None, depth=owner.count("::"), function_ps=ps))
        return owner
    prefix = owner.split(":", 1)[1]
    same = [st for st in stages if st.kind.startswith(prefix)]
    if same:
        best = max(same, key=lambda st: st.calls)
        best.function_ps += ps
        return best.path
    # The stage itself left no Iterator event (it was called from a producer thread without
    # a trace); name it from a descendant's path when one exists.
    path = next((st.path[: st.path.index("::" + prefix) + len(prefix) + 2] for st in stages
                 if ("::" + prefix + "::") in st.path), f"Iterator::{prefix}")
    stages.append(Stage(path=path, kind=prefix, calls=0, total_ps=0, self_ps=0, parallelism=None,
                        autotune=None, depth=path.count("::"), function_ps=ps))
    return path


def stage_rows(p: Pipeline, total_step_ps: int, blocks: bool = True) -> List[dict]:
    """Stages as report rows (times in ms), most work (self + function time) first; the
    busiest stage is marked ``blocking`` only when ``blocks`` (the step waits for input)."""
    rows = []
    for st in p.stages:
        rows.append({
            "name": st.path, "kind": st.kind, "category": st.category, "calls": st.calls,
            "total_ms": round(st.total_ps / 1e9, 3), "self_ms": round(st.self_ps / 1e9, 3),
            "function_ms": round(st.function_ps / 1e9, 3), "work_ms": round(st.work_ps / 1e9, 3),
            "self_per_call_us": round(st.self_ps / max(st.calls, 1) / 1e6, 2),
            "parallelism": _parallelism(st.parallelism), "autotune": _plain(st.autotune),
            "blocking": blocks and st is p.blocking,
        })
    return rows


def _parallelism(v) -> Optional[int]:
    """A stage's ``parallelism`` stat as a number of threads. tf.data writes an integer, or
    the text ``unavailable`` when the iterator cannot tell: that is None, so the report's
    ``parallelism`` is an int or null, never a string."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _plain(v):
    if v is None or isinstance(v, (int, float, str)):
        return v
    return str(v)
