"""The host plane: which thread trains, which threads feed it, what the model ran there.

TensorFlow's host tracer writes one XLine per thread of ``/host:CPU``, named after the
thread (``python``/``python3``: the Python training thread; ``tf_Compute/<id>``: the
inter-op pool; ``tf_data_*``: tf.data's consumer, producer and private-pool threads;
``tf_gpu_private``/``tf_GPU_Event_Manager``: GPU streams' host side). Event names are
TraceMe names; the ones used here are listed as constants, each with where TensorFlow
emits it (paths in the tensorflow / tsl repositories).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..trace import timeline
from ..trace.xspace import Plane, Space

HOST_PLANE = "/host:CPU"  # tsl/profiler/utils/xplane_schema.h kHostThreadsPlaneName

#: Consumer side of an input pipeline: the op that blocks the step until a batch is ready.
#: ``IteratorGetNextOp::DoCompute`` (core/kernels/data/iterator_ops.cc) on TF >= 2.3's
#: ``tf_data_iterator_get_next`` thread; the op itself (``IteratorGetNext``,
#: ``IteratorGetNextAsOptional``, ``MultiDeviceIteratorGetNextFromShard``) on executor threads.
GET_NEXT_EVENTS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
GET_NEXT_OPS = ("IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
                "MultiDeviceIteratorGetNextFromShard")
#: Executor activity (core/common_runtime/executor.cc): one event per batch of ops processed.
EXECUTOR_EVENT = "ExecutorState::Process"
#: Function launch (core/common_runtime/process_function_library_runtime.cc); its ``_p``
#: stat is matched by the ``_c`` stat of the executor events it caused.
FUNCTION_RUN = "FunctionRun"
#: Names of the Keras / tf.function training step on the Python thread. ``train_function``
#: (tf-keras, keras/engine/training.py), ``multi_step_on_iterator``/``one_step_on_iterator``
#: /``one_step_on_data`` (Keras 3, keras/src/backend/tensorflow/trainer.py), and the
#: concrete function ``__inference_<name>_<n>`` that eager execution runs.
TRAIN_FUNCTION_NAMES = ("train_function", "multi_step_on_iterator", "one_step_on_iterator",
                        "one_step_on_data_distributed", "one_step_on_data")
INFERENCE_FUNCTION_RE = re.compile(
    r"^(?:EagerLocalExecute: |EagerExecute: )?__inference_(train_function|train_step|"
    r"multi_step_on_iterator|one_step_on_iterator|one_step_on_data\w*|distributed_train_step|"
    r"train_fn)_\d+$")
#: A TensorFlow op TraceMe is ``<op name>:<op type>`` (core/profiler/utils/tf_op_utils.cc).
_OP_RE = re.compile(r"^[^:\s][^:]*:[A-Z_][A-Za-z0-9_]*$")
#: Kernel launches recorded by CUPTI / roctracer on host threads (runtime/driver API names).
LAUNCH_API_RE = re.compile(r"^(cu|cuda|hip|hipExt|hipModule)(Launch\w*|GraphLaunch)")
#: Collective op types (core/kernels/collective_ops.cc, core/kernels/nccl_ops.cc).
COLLECTIVE_OP_RE = re.compile(r"^(Collective(Reduce|Gather|Bcast|AllToAll|Assign)\w*|Nccl\w+)$")
#: Step markers, the one vocabulary of them: tf-keras' ``train``/``test`` TraceMe with ``_r``
#: and ``step_num`` (keras/callbacks.py; also custom loops and BottleneckProfiler), Keras 3's
#: ``Profiled batch`` (keras/src/backend/tensorflow/tensorboard.py) and TF 2.0-2.4's
#: ``TraceContext``. They span whole steps on the training thread: they are not host work.
TRAIN_MARKER = "train"
KERAS3_MARKER = "Profiled batch"
LEGACY_MARKER = "TraceContext"
STEP_MARKER_NAMES = (TRAIN_MARKER, "test", KERAS3_MARKER, LEGACY_MARKER)
#: Eager op dispatch on the Python thread (core/common_runtime/eager/execute.cc).
EAGER_EVENTS = ("EagerKernelExecute", "EagerExecute", "EagerLocalExecute")
#: Where an eager op or a function's kernel starts running (core/common_runtime/eager/
#: execute.cc); what a just-traced function does between its tracing and this event is the
#: instantiation of the new concrete function (graph optimisation passes, Grappler).
EAGER_KERNEL_EVENT = "EagerKernelExecute"
#: One ``Session.run`` of a graph-mode program (core/common_runtime/direct_session.cc; host
#: event type ``kSessionRun`` in tsl/profiler/utils/xplane_schema.cc). It carries ``id`` (the
#: session's run counter) and ``_r`` but no ``step_num``; XProf counts it as an implicit
#: step root (IsImplicitRootEvent in xla/tsl/profiler/utils/group_events.cc).
SESSION_RUN = "SessionRun"
#: Work a user's step annotation encloses on its own thread when it wraps training: a
#: function launch, an eager kernel (op or function), a graph-mode session run or graph run
#: (the latter three are host event types in tsl/profiler/utils/xplane_schema.cc).
TRAINING_WORK_EVENTS = (FUNCTION_RUN, EAGER_KERNEL_EVENT, SESSION_RUN, "RunGraph")
#: tf.function tracing a Python function into a new FuncGraph: ``trace.Trace(
#: "tf.function-graph_building")`` in tensorflow/python/eager/polymorphic_function/
#: tracing_compilation.py (tensorflow/python/eager/function.py before TF 2.12).
GRAPH_BUILD_EVENT = "tf.function-graph_building"
#: XLA compilation (``jit_compile=True``, XLA devices): each HLO pass pipeline is a TraceMe
#: named after the pipeline (xla/hlo/pass/hlo_pass_pipeline.cc; "HLO passes through layout
#: assignment" in xla/service/cpu/cpu_compiler.cc) and the backends trace their compile
#: stages as ``<Backend>Compiler::<stage>`` (``CpuCompiler::RunBackend``,
#: ``GpuCompiler::OptimizeHloModule``, ``JitCompiler::Compile``), as seen in a TF 2.21 CPU
#: trace of a ``jit_compile`` function's first call.
XLA_COMPILE_RE = re.compile(r"^(HLO passes\b|\w*Compiler::\w)")

#: XLA on a CPU host, as TensorFlow 2.21 traces it (Keras ``jit_compile=True``, ``tf.function(
#: jit_compile=True)``): an executable's run on the thread that launched it (TraceMe in
#: xla/service/cpu/cpu_executable.cc), the thunk executor running its HLO ops there and on the
#: Eigen pool's threads (xla/backends/cpu/runtime/thunk_executor.cc), one event per HLO op (a
#: thunk) named by it, with ``hlo_op`` and ``hlo_module`` stats (xla/backends/cpu/runtime/thunk.cc
#: ``Thunk::TraceMeEncode``). No ``XlaLaunch``/``_XlaRun`` op event is recorded there: the call op
#: is ``ExecutorState::ProcessAsync::Start`` (fit) or the function's own op event (an eager call).
XLA_RUN = "CpuExecutable::ExecuteAsyncOnStream"
XLA_THUNKS = "ThunkExecutor::Execute"


def is_tf_data_line(name: str) -> bool:
    """A tf.data thread (``tf_data_*``: consumer, producers, private pools)."""
    return name.startswith("tf_data")


def is_op_name(name: str) -> bool:
    """A TensorFlow op TraceMe (``<op name>:<op type>``), not a tf.data iterator."""
    return bool(_OP_RE.match(name)) and not name.startswith("Iterator::")


def op_type(name: str) -> str:
    """The op type of an op TraceMe (``dense/MatMul:MatMul`` -> ``MatMul``)."""
    return name.rsplit(":", 1)[-1]


@dataclass
class GraphBuilds:
    """Time the host spent building graphs, by kind (each a union of intervals, ps).

    ``tracing``: tf.function tracing (``GRAPH_BUILD_EVENT``). ``instantiation``: from the
    end of a top-level tracing event to the first ``EagerKernelExecute`` inside the event
    enclosing it (the tf.function call): the new concrete function's instantiation before
    its first run. ``compilation``: XLA compilation (``XLA_COMPILE_RE``).
    ``traced_starts`` (ps, shape (n_traces,)) and ``traced_names`` (the enclosing event's
    name: the function traced, or '' at top level) list the top-level tracing events.
    """
    tracing: timeline.Intervals
    instantiation: timeline.Intervals
    compilation: timeline.Intervals
    traced_starts: np.ndarray
    traced_names: List[str]

    def union(self) -> timeline.Intervals:
        return timeline.union(*timeline.concat([self.tracing, self.instantiation, self.compilation]))


@dataclass
class HostView:
    """Classified host threads of one XSpace. Times in ps.

    ``training_line``: index into ``plane.lines`` of the thread running the training
    loop (set by the step finder), ``tfdata_lines``: indices of tf.data threads.
    """
    plane: Plane
    tfdata_lines: List[int]
    training_line: Optional[int] = None
    _ids_cache: Dict[object, np.ndarray] = field(default_factory=dict, repr=False)

    # ---- name lookups ---------------------------------------------------------------
    def ids(self, key, predicate) -> np.ndarray:
        """Metadata ids of the events whose name satisfies ``predicate``, cached under ``key``."""
        if key not in self._ids_cache:
            self._ids_cache[key] = self.plane.ids_where(predicate)
        return self._ids_cache[key]

    def ids_named(self, names: Sequence[str]) -> np.ndarray:
        """Metadata ids of the events named exactly one of ``names``."""
        names = tuple(names)
        return self.ids(("named",) + names, lambda n: n in names)

    def select(self, ids: np.ndarray, lines: Optional[Sequence[int]] = None) -> List[Tuple[int, np.ndarray]]:
        """(line index, event indices) of events whose metadata id is in ``ids``."""
        out: List[Tuple[int, np.ndarray]] = []
        if len(ids) == 0:
            return out
        for li, line in enumerate(self.plane.lines):
            if lines is not None and li not in lines:
                continue
            idx = line.where(ids)
            if len(idx):
                out.append((li, idx))
        return out

    def intervals(self, selection: List[Tuple[int, np.ndarray]]) -> timeline.Intervals:
        """(starts, ends) in ps of the selected events."""
        parts = []
        for li, idx in selection:
            line = self.plane.lines[li]
            parts.append((line.start_ps[idx], line.start_ps[idx] + line.dur_ps[idx]))
        return timeline.concat(parts)

    def stat_column(self, li: int, idx: np.ndarray, stat: str) -> List[object]:
        """Value of one stat for chosen events (None where absent)."""
        return self.plane.stat_column(self.plane.lines[li], idx, stat)

    def stat_ints(self, li: int, idx: np.ndarray, stat: str):
        """(uint64 values, present mask) of an integer stat, decoded in bulk."""
        return self.plane.stat_ints(self.plane.lines[li], idx, stat)

    def marker_ids(self) -> np.ndarray:
        """Metadata ids of the step markers (:data:`STEP_MARKER_NAMES`): they span whole
        steps on the training thread and are not host work."""
        return self.ids(("markers",), lambda n: n in STEP_MARKER_NAMES)

    @property
    def non_data_lines(self) -> List[int]:
        """Indices of the lines that are not tf.data threads."""
        return [i for i in range(len(self.plane.lines)) if i not in self.tfdata_lines]

    # ---- activity used by the breakdown -----------------------------------------------
    def get_next_intervals(self) -> timeline.Intervals:
        """Time the training step was blocked waiting for the input pipeline."""
        sel = self.select(self.ids_named(GET_NEXT_EVENTS)) + self.select(self.getnext_op_ids(), self.non_data_lines)
        return self.intervals(sel)

    def training_function_runs(self) -> List[Tuple[int, np.ndarray]]:
        """The training step's function launches on the training thread: ``FunctionRun`` events,
        and the runs of XLA executables there (:data:`XLA_RUN`: a ``tf.function(jit_compile=True)``
        called from Python runs as one XLA executable on the calling thread, no ``FunctionRun``)."""
        if self.training_line is None:
            return []
        return self.select(self.ids_named([FUNCTION_RUN, XLA_RUN]), [self.training_line])

    def xla_intervals(self) -> Dict[int, timeline.Intervals]:
        """XLA executables' work on the host's non-tf.data threads, per line: each line's executable
        runs and thunk executor runs (:data:`XLA_RUN`, :data:`XLA_THUNKS`; the latter hold the HLO
        ops, on the launching thread and the Eigen pool's), merged. {line index: (starts, ends)} in
        ps; empty without XLA events."""
        sel = self.select(self.ids_named([XLA_RUN, XLA_THUNKS]), self.non_data_lines)
        return {li: timeline.union(*self.intervals([(li, idx)])) for li, idx in sel}

    def model_executor_intervals(self) -> timeline.Intervals:
        """The training function's work on host threads (ps): the executor activity it caused
        (linked by ``_p``/``_c`` stats) and XLA executables' work (:meth:`xla_intervals`), merged
        per thread (a thread's time counts once; threads busy at once count each).

        Falls back to all executor activity off tf.data threads when the trace has no
        producer/consumer stats (TF < 2.4).
        """
        per_line = {li: [iv] for li, iv in self._executor_intervals().items()}
        for li, iv in self.xla_intervals().items():
            per_line.setdefault(li, []).append(iv)
        return timeline.concat([timeline.union(*timeline.concat(parts)) if len(parts) > 1 else parts[0]
                                for parts in per_line.values()])

    def _executor_intervals(self) -> Dict[int, timeline.Intervals]:
        """Executor activity caused by the training function, per line ({line: intervals, ps})."""
        found = []
        for li, idx in self.training_function_runs():
            values, present = self.stat_ints(li, idx, "_p")
            found.append(values[present])
        producers = np.concatenate(found) if found else np.zeros(0, dtype=np.uint64)
        proc_sel = self.select(self.ids_named([EXECUTOR_EVENT]), self.non_data_lines)
        keep = []
        for li, idx in proc_sel:
            if len(producers):
                consumers, present = self.stat_ints(li, idx, "_c")
                idx = idx[present & timeline.member(consumers, producers)]
            if len(idx):
                keep.append((li, idx))
        # An executor thread blocked inside an IteratorGetNext op is waiting, not computing:
        # remove those op intervals from the executor events of the same thread.
        getnext = dict(self.select(self.getnext_op_ids(), self.non_data_lines))
        parts: Dict[int, timeline.Intervals] = {}
        for li, idx in keep:
            iv = self.intervals([(li, idx)])
            if li in getnext:
                iv = timeline.difference(iv, self.intervals([(li, getnext[li])]))
            parts[li] = iv
        return parts

    def getnext_op_ids(self) -> np.ndarray:
        """Metadata ids of the get-next ops (``IteratorGetNext`` and friends)."""
        return self.ids(("getnext-ops",), lambda n: n in GET_NEXT_OPS or
                        (is_op_name(n) and op_type(n) in GET_NEXT_OPS))

    def eager_op_intervals(self) -> timeline.Intervals:
        """Eager ops executed on the training thread (no tf.function): model math on the host."""
        if self.training_line is None:
            return timeline.empty()
        ids = self.ids(("eager-ops",), lambda n: n == "EagerKernelExecute")
        return self.intervals(self.select(ids, [self.training_line]))

    def training_thread_intervals(self, exclude_ids: np.ndarray) -> timeline.Intervals:
        """Events of the training thread (ps), less the events whose ids are in ``exclude_ids``."""
        if self.training_line is None:
            return timeline.empty()
        line = self.plane.lines[self.training_line]
        keep = ~line.mask(exclude_ids)
        return line.start_ps[keep], line.start_ps[keep] + line.dur_ps[keep]

    def collective_op_intervals(self) -> timeline.Intervals:
        """Collective ops run by the host executor (``CollectiveReduceV2``, ``NcclAllReduce``...:
        core/kernels/collective_ops.cc, nccl_ops.cc): on CPU workers the all-reduce itself,
        on GPU workers the host side of it; both include time waiting for peers."""
        ids = self.ids(("collective-ops",), lambda n: (is_op_name(n) and bool(COLLECTIVE_OP_RE.match(op_type(n))))
                       or bool(COLLECTIVE_OP_RE.match(n)))
        return self.intervals(self.select(ids, self.non_data_lines))

    def graph_builds(self) -> GraphBuilds:
        """Tracing, instantiation and compilation on the host's non-tf.data threads.

        Returns:
            GraphBuilds; empty intervals when the trace holds none of these events.
        """
        tracing: List[Tuple[np.ndarray, np.ndarray]] = []
        inst: List[Tuple[np.ndarray, np.ndarray]] = []
        starts: List[np.ndarray] = []
        names: List[str] = []
        eager_kernel = dict(self.select(self.ids_named([EAGER_KERNEL_EVENT]), self.non_data_lines))
        for li, idx in self.select(self.ids_named([GRAPH_BUILD_EVENT]), self.non_data_lines):
            line = self.plane.lines[li]
            s, e = line.start_ps[idx], line.ends(idx)
            tracing.append((s, e))
            # Top-level builds only: an inner function traced inside an outer one's tracing
            # is part of it.
            s, e, idx = timeline.outermost(s, e, idx)
            parent = timeline.nesting_parents(line.start_ps, line.end_ps)[idx]
            starts.append(s)
            names.extend(self.plane.event_names.get(int(line.name_id[p]), "") if p >= 0 else "" for p in parent)
            ek = np.sort(line.start_ps[eager_kernel[li]]) if li in eager_kernel else np.zeros(0, np.int64)
            has = parent >= 0
            if len(ek) and has.any():
                p_end = line.ends(parent[has])
                j = np.searchsorted(ek, e[has], side="left")
                ok = j < len(ek)
                first = np.where(ok, ek[np.minimum(j, len(ek) - 1)], 0)
                ok &= first < p_end
                inst.append((e[has][ok], first[ok]))
        xla = self.ids(("xla-compile",), lambda n: bool(XLA_COMPILE_RE.match(n)))
        compilation = self.intervals(self.select(xla, self.non_data_lines))
        return GraphBuilds(tracing=timeline.union(*timeline.concat(tracing)),
                           instantiation=timeline.union(*timeline.concat(inst)),
                           compilation=timeline.union(*compilation),
                           traced_starts=np.concatenate(starts) if starts else np.zeros(0, np.int64),
                           traced_names=names)

    def launch_intervals(self) -> timeline.Intervals:
        """Kernel-launch API calls on host threads (ps)."""
        ids = self.ids(("launch",), lambda n: bool(LAUNCH_API_RE.match(n)))
        return self.intervals(self.select(ids))


def host_view(space: Space) -> Optional[HostView]:
    """The classified host plane of ``space``, None without a ``/host:CPU`` plane."""
    plane = space.plane(HOST_PLANE)
    if plane is None:
        return None
    tfdata = [i for i, l in enumerate(plane.lines) if is_tf_data_line(l.name)]
    return HostView(plane=plane, tfdata_lines=tfdata)
