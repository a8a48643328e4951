"""PyTorch's host threads, read from a Kineto trace (:mod:`tfbneck_plugin.trace.kineto`):
the same questions :mod:`.host` answers for TensorFlow's host plane, in PyTorch's events.

What each breakdown category is made of here (event names as ``torch.profiler`` records
them; torch/autograd/profiler.py, torch/utils/data/dataloader.py, torch/profiler/profiler.py):

``input``           the DataLoader's ``enumerate(DataLoader)#<iterator>.__next__``
                    annotation: the training loop waiting for its next batch. The iterator
                    is ``_SingleProcessDataLoaderIter`` (``num_workers=0``: the loop loads
                    the batch itself) or ``_MultiProcessingDataLoaderIter`` (worker
                    processes; the wait is how late they are).
model math          ``cpu_op`` events (aten ops) outside the DataLoader's wait: on a host
                    with GPU activity they dispatch kernels (``kernel_launch`` while the
                    device is idle); on a CPU-only host they are the model's compute.
``kernel_launch``   besides, CPU-side runtime/driver calls (``cudaLaunchKernel``,
                    ``hipLaunchKernel``, ``cudaMemcpyAsync``...) other than waits for the
                    device (``*Synchronize``).
``collective``      host-side collectives: ``nccl:<op>`` / ``gloo:<op>`` annotations and
                    ``record_param_comms`` (torch/csrc/distributed/c10d/ParamCommsUtils);
                    on GPU hosts NCCL's kernels (``ncclKernel_*``, ``ncclDevKernel_*``) are
                    the device side (:mod:`.devices`).
steps               ``ProfilerStep#N`` annotations (``prof.step()``), on the training thread.

The op table (:mod:`.ops`' rows, as ``prof.key_averages().table()`` counts them):

``host``    one row per event name on the host threads (aten ops ``cpu_op``, the
            ``record_function`` annotations such as ``Optimizer.step#SGD.step`` or the
            DataLoader's ``enumerate(DataLoader)#...__next__``, runtime calls such as
            ``cudaLaunchKernel``), grouped by name as ``key_averages()`` groups its events.
            Its type is its name (``aten::mm``): a PyTorch op has no name apart from its type.
            Self time is the event's duration less the events nested directly in it on its
            thread, as torch's ``FunctionEvent.self_cpu_time_total`` is (torch/autograd/
            profiler_util.py: ``cpu_time_total`` less its ``cpu_children``). Not rows: the
            ``ProfilerStep#N`` step markers.
``device``  kernels, copies and memsets, each credited to the host event that launched it:
            the innermost row event around the runtime call (``cudaLaunchKernel``...) whose
            ``correlation`` id the kernel carries (kineto writes it on both), as
            ``key_averages()`` credits a kernel's device time to the op around its launch. A kernel
            whose launch is not in the trace is its own row (:data:`.ops.NO_OP_TYPE`).

The Python events ``with_stack=True`` records (``python_function``) are rows too, as
``key_averages()`` lists them; among them, ``nn.Module: <class>_<k>`` around each module's
forward gives the events inside it their layer scope (:func:`_module_scopes`), and rows are
then kept apart by scope; without them a row has no scope.
Times are ps; only events starting inside the windows count (:func:`.ops.host_ops`).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..trace import timeline
from ..trace.kineto import OP_CATEGORIES, RUNTIME_CATEGORIES, KinetoSpace
from . import host as hostmod
from . import ops as opsmod
from . import steps as stepsmod
from .findings import LoaderFacts
from .host_analysis import HostAnalysis
from .placement import Placement
from .rules import DESIRED_STATE

#: ``prof.step()``'s annotation (torch/profiler/profiler.py: ``"ProfilerStep#" + str(step_num)``).
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
#: The DataLoader's wait for a batch (torch/utils/data/dataloader.py ``_BaseDataLoaderIter.__next__``
#: records ``enumerate(DataLoader)#{classname}.__next__``).
DATALOADER_NEXT_RE = re.compile(r"^enumerate\(DataLoader\)#(\w+)\.__next__$")
SINGLE_PROCESS_ITER = "_SingleProcessDataLoaderIter"
#: Host-side collectives: process-group annotations and the c10d parameter-comms op.
COLLECTIVE_RE = re.compile(r"^(nccl|gloo|mpi|ucc|xccl):|^record_param_comms$")
#: Runtime calls in which the host waits for the device rather than launching work.
DEVICE_WAIT_RE = re.compile(r"Synchronize|^(cuda|hip)EventQuery$|^(cuda|hip)StreamQuery$")
#: The training thread's own Python, as the profiler records it with ``with_stack=True``.
PYTHON_CATEGORY = "python_function"


@dataclass
class TorchHostView(hostmod.HostView):
    """The host plane of a Kineto trace, answering :class:`.host.HostView`'s questions with
    PyTorch's events (module docstring). ``categories``: metadata id -> category."""
    categories: Dict[int, str] = field(default_factory=dict)

    def _category_ids(self, key, cats, predicate=None) -> np.ndarray:
        if key not in self._ids_cache:
            names = self.plane.event_names
            self._ids_cache[key] = np.fromiter(
                (i for i, c in self.categories.items() if c in cats and (predicate is None or predicate(names[i]))),
                dtype=np.int64)
        return self._ids_cache[key]

    def loader_ids(self) -> np.ndarray:
        """Metadata ids of the DataLoader's ``__next__`` annotations (any category: older
        traces record them as ops)."""
        return self.ids(("dataloader",), lambda n: bool(DATALOADER_NEXT_RE.match(n)))

    @cached_property
    def loader_iterators(self) -> Dict[str, int]:
        """The DataLoader iterator classes the ``__next__`` calls name (``_SingleProcessDataLoaderIter``...),
        each with its number of calls, read once for :func:`_loader_start_up` and :func:`loader_facts`;
        empty without DataLoader annotations."""
        names = self.plane.event_names
        kinds: Dict[str, int] = {}
        for li, idx in self.select(self.loader_ids()):
            for m in self.plane.lines[li].name_id[idx]:
                k = DATALOADER_NEXT_RE.match(names[int(m)]).group(1)  # type: ignore[union-attr]
                kinds[k] = kinds.get(k, 0) + 1
        return kinds

    def step_ids(self) -> np.ndarray:
        """Metadata ids of the ``ProfilerStep#N`` annotations."""
        return self.ids(("profiler-steps",), lambda n: bool(PROFILER_STEP_RE.match(n)))

    def get_next_intervals(self) -> timeline.Intervals:
        """Time the training loop waited in the DataLoader's ``__next__`` (ps)."""
        return self.intervals(self.select(self.loader_ids()))

    def model_executor_intervals(self) -> timeline.Intervals:
        """The aten ops outside the DataLoader's wait, on every thread (the autograd
        engine runs the backward pass on threads of its own), ps."""
        ops = self.intervals(self.select(self._category_ids(("ops",), OP_CATEGORIES)))
        ops = timeline.union(*ops)
        return timeline.difference(ops, timeline.union(*self.get_next_intervals()))

    def training_function_runs(self):
        """PyTorch has no compiled training function call: none."""
        return []

    def launch_intervals(self) -> timeline.Intervals:
        """Runtime and driver calls that issue work to the device (ps)."""
        ids = self._category_ids(("launch-calls",), RUNTIME_CATEGORIES, lambda n: not DEVICE_WAIT_RE.search(n))
        return self.intervals(self.select(ids))

    def collective_op_intervals(self) -> timeline.Intervals:
        """``nccl:``/``gloo:`` annotations and ``record_param_comms`` on any thread (ps)."""
        ids = self.ids(("collective-ops",), lambda n: bool(COLLECTIVE_RE.match(n)))
        return self.intervals(self.select(ids))

    def marker_ids(self) -> np.ndarray:
        """Step markers: they span whole steps and are not host work."""
        return self.step_ids()


def torch_host_view(space: KinetoSpace) -> Optional[TorchHostView]:
    """The host plane of a Kineto trace as a :class:`TorchHostView`, None without one."""
    plane = space.plane(hostmod.HOST_PLANE)
    if plane is None:
        return None
    return TorchHostView(plane=plane, tfdata_lines=[], categories=space.categories)


def profiler_steps(view: Optional[TorchHostView]) -> stepsmod.StepSearch:
    """The steps ``prof.step()`` marked (``ProfilerStep#N``), on the thread holding most of
    them (the training loop's); the search's reason when there are none."""
    why = "no ProfilerStep#N annotations in the trace (prof.step() was not called in the profiled loop)"
    if view is None:
        return stepsmod.StepSearch(None, [("profiler_step", "the trace has no host threads")])
    sel = view.select(view.step_ids())
    if not sel:
        return stepsmod.StepSearch(None, [("profiler_step", why)], _busiest_line(view))
    li, idx = max(sel, key=lambda s: len(s[1]))
    line = view.plane.lines[li]
    names = view.plane.event_names
    numbers = np.array([int(PROFILER_STEP_RE.match(names[int(m)]).group(1))  # type: ignore[union-attr]
                        for m in line.name_id[idx]], dtype=np.int64)
    starts, ends = line.start_ps[idx], line.ends(idx)
    order = np.argsort(starts, kind="stable")
    steps = stepsmod.Steps(source="profiler_step", numbers=numbers[order], starts=starts[order], ends=ends[order],
                           graph_build_ps=np.zeros(len(idx), dtype=np.int64), training_line=li)
    return stepsmod.StepSearch(_loader_start_up(view, _without_a_cut_last_step(view, steps)), [], li)


#: Steps from the profiler's start (``ProfilerStep#N`` numbers) that may belong to a worker
#: DataLoader's start-up: a new iterator starts its worker processes and asks each for
#: ``prefetch_factor`` batches at once (2 by default; torch/utils/data/dataloader.py,
#: ``_MultiProcessingDataLoaderIter._reset``), which they load flat out (on the model's cores
#: where the model computes on the CPU) until the queue is full; 4 workers, the advice's, ask
#: for 8 batches. Our choice, two steps beyond that: a 2-worker CPU run traced at steps 3-7 took
#: 1.75x its steps from step 20 on. torch.profiler numbers steps from the profiler's creation,
#: so a profiler made after the loop had run reads young: the warm-up sentence says so.
WORKER_START_STEPS = 10


def _loader_start_up(view: TorchHostView, steps: stepsmod.Steps) -> stepsmod.Steps:
    """``steps`` with those numbered under :data:`WORKER_START_STEPS` marked warm-up
    (:attr:`.steps.Steps.warmup`, left out of the breakdown and the verdict, or all kept and
    the confidence capped when every step is one) where the DataLoader loads in worker
    processes (any ``__next__`` of an iterator other than the single-process one)."""
    workers = any(k != SINGLE_PROCESS_ITER for k in view.loader_iterators)
    young = steps.numbers < WORKER_START_STEPS
    if not workers or not young.any() or not young[:int(young.sum())].all():  # leading steps only
        return steps
    k = int(young.sum())
    which = f"step {steps.numbers[0]}" if k == 1 else f"steps {steps.numbers[0]}-{steps.numbers[k - 1]}"
    return dataclasses.replace(steps, warmup=young, warmup_reason=(
        f"{which} of the profiler come before step {WORKER_START_STEPS}, while a DataLoader with worker processes "
        "starts them and fills its prefetch queue (num_workers x prefetch_factor batches loaded at once), not the "
        f"loop's steady state; profile from step {WORKER_START_STEPS} on, e.g. torch.profiler.schedule("
        f"skip_first={WORKER_START_STEPS}, wait=1, warmup=1, active=5), unless the profiler was created after the "
        "loop had run"))


def _without_a_cut_last_step(view: TorchHostView, steps: stepsmod.Steps) -> stepsmod.Steps:
    """``steps`` less its last step where that step ran no op outside the DataLoader's fetch and
    issued no work to a device (no runtime launch call):
    ``prof.step()`` opened it, the loop fetched a batch and ended (or the profiler stopped)
    before any training, and torch.profiler closed it at its stop, so it holds a fetch and
    nothing recorded, not a training step. Counted in ``dropped_partial``. One step, or a last
    step with any op (on any thread) outside the fetch, is kept."""
    if steps.count < 2:
        return steps
    s, e = np.array([steps.starts[-1]]), np.array([steps.ends[-1]])
    for work in (view.model_executor_intervals(), timeline.union(*view.launch_intervals())):
        if timeline.overlap_per_window(work, s, e)[0] > 0:
            return steps
    return dataclasses.replace(steps, numbers=steps.numbers[:-1], starts=steps.starts[:-1], ends=steps.ends[:-1],
                               graph_build_ps=steps.graph_build_ps[:-1], dropped_partial=steps.dropped_partial + 1)


def _busiest_line(view: TorchHostView) -> Optional[int]:
    """The thread with the most op time: the training loop's when no step marks it."""
    best, best_ps = None, 0
    ops = view._category_ids(("ops",), OP_CATEGORIES)
    for li, idx in view.select(ops):
        line = view.plane.lines[li]
        s, e = timeline.union(line.start_ps[idx], line.ends(idx))
        total = int((e - s).sum())
        if total > best_ps:
            best, best_ps = li, total
    return best


def loader_facts(view: Optional[TorchHostView], steps: Optional[stepsmod.Steps]) -> Optional[LoaderFacts]:
    """The DataLoader the training loop read from: its iterator kind and its waits in the
    steady steps; None without DataLoader annotations."""
    if view is None:
        return None
    kinds = view.loader_iterators
    if not kinds:
        return None
    iterator = max(kinds, key=lambda k: kinds[k])
    waits = view.intervals(view.select(view.loader_ids()))
    calls = len(waits[0])
    if steps is not None and steps.count:
        inside = timeline.overlap_per_window(timeline.union(*waits), steps.starts, steps.ends)
        per_step_ms = float(inside.mean()) / 1e9
    else:
        per_step_ms = float((waits[1] - waits[0]).sum()) / 1e9
    return LoaderFacts(iterator=iterator, workers=iterator != SINGLE_PROCESS_ITER, calls=calls,
                       wait_ms_per_step=round(per_step_ms, 3))


class TorchHostAnalysis(HostAnalysis):
    """:class:`.host_analysis.HostAnalysis` of a Kineto trace: its host view, steps and
    DataLoader facts are PyTorch's (this module); devices, breakdown, rules, advice and the
    report are the shared ones."""

    space: KinetoSpace

    @cached_property
    def host_view(self) -> Optional[hostmod.HostView]:
        return torch_host_view(self.space)

    @cached_property
    def framework(self) -> str:
        return "pytorch"

    @cached_property
    def step_search(self) -> stepsmod.StepSearch:
        return profiler_steps(self.host_view)  # type: ignore[arg-type]

    @cached_property
    def pipeline(self):
        """No tf.data in a PyTorch run: the DataLoader's facts are :attr:`loader`."""
        return None

    @cached_property
    def placement(self) -> Placement:
        """The shared placement facts, plus the NCCL collectives on the host: NCCL runs on
        GPUs only, so a trace of them without device activity lost its device side."""
        base, view = super().placement, self.view
        if view is None:
            return base
        calls = sum(len(idx) for _li, idx in view.select(view.ids(("nccl",), lambda n: n.startswith("nccl:"))))
        return dataclasses.replace(base, nccl_calls=calls) if calls else base

    def host_op_rows(self, win_s: np.ndarray, win_e: np.ndarray):
        """Host op rows as ``key_averages()`` counts them (:func:`host_ops`)."""
        return host_ops(self.view, win_s, win_e, self.space.time_quantum_ps)  # type: ignore[arg-type]

    @cached_property
    def op_launchers(self):
        """Kernels credited to the op that launched them, by correlation id (:class:`KinetoLaunchers`)."""
        return KinetoLaunchers(self.space, self.view)

    @property
    def op_scope(self):
        """No layer scopes in PyTorch's op names (:func:`.row_scope`)."""
        return row_scope

    @cached_property
    def loader(self) -> Optional[LoaderFacts]:
        return loader_facts(self.view, self.steps)  # type: ignore[arg-type]

    def report(self):
        """The shared report fields, and ``dataloader``: the DataLoader's iterator class, whether
        worker processes load the batches, and its wait per steady step (ms), when the trace
        holds its ``__next__`` calls (what ``tfbneck compare`` reads to see ``num_workers`` change)."""
        out = super().report()
        if self.loader is not None:
            out["dataloader"] = {"iterator": self.loader.iterator, "workers": self.loader.workers,
                                 "wait_ms_per_step": round(self.loader.wait_ms_per_step, 3)}
        return out

    @cached_property
    def findings(self):
        """The shared findings with the DataLoader's facts and, for a Keras fit on PyTorch, what
        fed it (the callback's record: Keras wraps it in its own DataLoader, whose knobs the user
        does not hold; the advice then speaks Keras', :mod:`.advice`)."""
        kind = (self.keras or {}).get("input") or ("other" if self.keras else None)
        return dataclasses.replace(super().findings, loader=self.loader, keras_input=kind)

    def held(self, v, findings):
        """``v`` less sure where the trace cannot see a cost: the DataLoader's workers on a
        CPU-only host (:func:`shared_cores_verdict`), else other processes' load
        (:func:`unseen_load_verdict`); for the host's verdict and each worker's own."""
        out = shared_cores_verdict(v, findings)  # the workers' doubt includes the unseen load's
        return out if out is not v else unseen_load_verdict(v, findings)


#: The most confidence a verdict other than input-bound keeps on a CPU-only run whose
#: DataLoader loads in worker processes, without system metrics: under 0.7, the confidence at
#: which a wrong verdict is not allowed (the PyTorch acceptance rule). Chosen on the fit half of
#: benchmarks/torch_corpus.py (``workers2_mid``: 18 % input wait in the trace, model_compute at
#: 0.73, while feeding cached batches made the run 2.0x faster, the workers taking the model's
#: cores); the judged half holds no wrong verdict at 0.7 or more with it.
SHARED_CORES_MAX_CONFIDENCE = 0.6


def shared_cores_verdict(v, f):
    """``v`` with its confidence capped at :data:`SHARED_CORES_MAX_CONFIDENCE` and one more
    evidence sentence, where the model computes on the CPU (no accelerator traced), the
    DataLoader runs worker processes and no system metrics say what those did: the workers'
    loading is not in the trace (only the training process is profiled) yet takes the same
    cores as the model's math, so a slow model and slow workers look alike. Input-bound
    verdicts and every other case are returned unchanged."""
    if not f.unseen_workers or v.cause in ("input_preprocessing", "file_read", "remote_read"):
        return v
    note = (f"The DataLoader's worker processes run on the same CPU cores as the model's math, and their work is "
            f"not in this trace (only the training process is profiled): part of the model's time may be the "
            f"workers' loading, so the confidence is at most {SHARED_CORES_MAX_CONFIDENCE}. Feeding the model "
            f"cached batches for a few steps, or system metrics (tfbneck watch --pid), would tell.")
    return _held_down(v, SHARED_CORES_MAX_CONFIDENCE, note,
                      "the training process's own ops, as the trace measures them; how much of these cores the "
                      "DataLoader's workers take is not in the trace, so whether the model's math is the limit is "
                      "not known.")


def _held_down(v, cap: float, note: str, doubt: str):
    """``v`` at confidence ``cap`` at most with ``note`` added to its evidence, and the compute sentence
    of :func:`.rules.model_compute` (ending in :data:`.rules.DESIRED_STATE`) ending in ``doubt``
    instead: a verdict held down for a cost the trace cannot see is not "the desired state".
    Any other sentence (and its kind: :class:`.evidence.Inferred`...) as it is."""
    def reworded(sentence):
        if not (isinstance(sentence, str) and sentence.endswith(DESIRED_STATE)):
            return sentence
        return type(sentence)(sentence[:-len(DESIRED_STATE)] + doubt)
    return dataclasses.replace(v, confidence=min(v.confidence, cap), evidence=[reworded(e) for e in v.evidence] + [note])


#: The most confidence a model_compute verdict keeps on a CPU-only PyTorch run without system
#: metrics: under 0.7, the confidence at which a wrong verdict is not allowed. Not fitted: a
#: bound on what the trace can show. torch.profiler records no system metrics, and the model's
#: ops run on several intra-op threads, which slow far more than a single-threaded loader when
#: other processes hold the cores (a thread that loses its core stalls the others at each op's
#: end), so a busy machine can make a loading-bound run read as compute-bound: a single-process
#: DataLoader run read model_compute at 0.85 beside other work while cached batches made it
#: 4.6x faster.
UNSEEN_LOAD_MAX_CONFIDENCE = 0.65


def unseen_load_verdict(v, f):
    """``v`` with its confidence capped at :data:`UNSEEN_LOAD_MAX_CONFIDENCE` and one more
    evidence sentence, where a ``model_compute`` verdict stands on a CPU-only trace (no
    accelerator traced) with no system metrics beside it: whether other processes took the
    cores is unknown, and their load inflates the model's multi-threaded ops more than the
    input's work. Every other verdict is returned unchanged."""
    if f.device_kind != "CPU" or f.system is not None or v.cause != "model_compute":
        return v
    note = (f"Whether other processes took these cores is not in the trace (torch.profiler records no system "
            f"metrics): on a busy machine the model's ops, spread over several threads, slow down far more than "
            f"the input's work, so the confidence is at most {UNSEEN_LOAD_MAX_CONFIDENCE}. Feeding the model "
            f"cached batches for a few steps, or system metrics during the run (tfbneck watch --pid), would tell.")
    return _held_down(v, UNSEEN_LOAD_MAX_CONFIDENCE, note,
                      "the model's math is the limit in this trace, unless other processes took the cores, which "
                      "the trace does not record.")


def host_ids(view: TorchHostView) -> np.ndarray:
    """Metadata ids of every host event: the tree torch builds holds them all (the
    ``ProfilerStep#N`` markers too, which are not rows)."""
    return view.ids(("torch-host-events",), lambda n: True)


#: The ``python_function`` event ``torch.profiler(with_modules=True)`` (or ``with_stack=True``)
#: records around a module's forward: ``nn.Module: Linear_0`` (the class, then its index).
MODULE_PREFIX = "nn.Module: "
#: How many modules, from the outermost, name a row's layer scope (as :func:`.ops.scope_of`
#: keeps TensorFlow's first two name scopes: the model, then its layer or block).
SCOPE_DEPTH = 2


def _module_scopes(names: Dict[int, str], ids: np.ndarray, parent: np.ndarray, scope_code) -> np.ndarray:
    """The layer scope code of each event of one thread (``ids``: metadata ids, ``parent``:
    :func:`thread_parents`): the ``nn.Module`` events around it, outermost first, the first
    :data:`SCOPE_DEPTH` joined by ``/`` (``Sequential_0/Linear_1``), through
    ``scope_code(text) -> int``; 0 outside any module. Shape (n,)."""
    n = len(ids)
    is_mod = np.fromiter((names.get(int(i), "").startswith(MODULE_PREFIX) for i in ids), dtype=bool, count=n)
    code = np.zeros(n, dtype=np.int64)
    if not is_mod.any():
        return code
    path: Dict[int, List[str]] = {}
    for k in range(n):  # a parent comes before its children in a line's order (by start, enclosing first)
        p = int(parent[k])
        up = path.get(p, []) if p >= 0 else []
        if is_mod[k]:
            path[k] = up + [names[int(ids[k])][len(MODULE_PREFIX):]]
        elif up:
            path[k] = up
        if up:
            code[k] = scope_code("/".join(up[:SCOPE_DEPTH]))
    return code


def thread_parents(s: np.ndarray, e: np.ndarray, quantum_ps: int = 0) -> np.ndarray:
    """The parent of each event [s, e) of one thread (index, -1 at top level), as torch builds
    the tree whose self times ``key_averages()`` reports (torch/autograd/profiler_util.py
    ``EventList._populate_cpu_children``: events by start, longest first, on a stack; an
    arriving event closes for good each open event it starts after or ends after, and is the
    child of the first one left). Properly nested events (the usual case) take
    :func:`.trace.timeline.nesting_parents`; a thread where events overrun their parent (a
    ``record_function`` opened inside Python frames and closed after them, as
    ``Optimizer.step#SGD.step`` is with ``with_stack=True``) takes :func:`_stack_parents`.

    Kineto writes times since the epoch in microseconds as doubles (a quarter microsecond
    apart at 1.7e15 us, ``quantum_ps``: :attr:`.kineto.KinetoSpace.time_quantum_ps`) beside
    exact durations, so an overrun of no more than ``quantum_ps`` is rounding: an event that
    starts that close to its parent's end follows the parent, one that ends that close after
    it is inside it. Shape (n,)."""
    parent = timeline.nesting_parents(s, e)
    kid = np.flatnonzero(parent >= 0)
    up = parent[kid]
    over = e[kid] > e[up]
    if not over.any():
        return parent
    kid, up = kid[over], up[over]
    if (e[kid] - e[up] > quantum_ps).any():
        return _stack_parents(s, e, quantum_ps)
    after = e[up] - s[kid] <= quantum_ps
    if not after.any():
        return parent
    moved = s.copy()
    moved[kid[after]] = e[up[after]]
    return timeline.nesting_parents(moved, e)


def _stack_parents(s: np.ndarray, e: np.ndarray, quantum_ps: int) -> np.ndarray:
    """:func:`thread_parents` by torch's stack, one event at a time (a Python loop: only for
    threads whose events do not nest)."""
    order = np.lexsort((-e, s))
    starts, ends = s.tolist(), e.tolist()
    parent = [-1] * len(starts)
    stack: List[int] = []
    for k in order.tolist():
        sk, ek = starts[k], ends[k]
        while stack:
            p = stack[-1]
            ep = ends[p]
            if sk >= ep or ek > ep + quantum_ps or (ek > ep and ep - sk <= quantum_ps):
                stack.pop()
            else:
                parent[k] = p
                break
        stack.append(k)
    return np.asarray(parent, dtype=np.int64)


def _self_time(s: np.ndarray, e: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Duration less the durations of the direct children (``parent``: :func:`thread_parents`),
    each clipped to its parent's end, ps."""
    child = np.flatnonzero(parent >= 0)
    inner = np.minimum(e[child], e[parent[child]]) - s[child]
    return (e - s) - np.bincount(parent[child], weights=inner, minlength=len(s)).astype(np.int64)


def host_ops(view: TorchHostView, win_s: np.ndarray, win_e: np.ndarray, quantum_ps: int = 0) -> List[opsmod.OpRow]:
    """Host op rows of the sorted windows [win_s, win_e) (ps totals; module docstring):
    one per event name, or per event name and layer scope where the trace holds
    ``nn.Module`` events (:func:`_module_scopes`); ``quantum_ps``: :func:`thread_parents`'."""
    plane = view.plane
    parts = []
    scopes: Dict[str, int] = {"": 0}
    texts: List[Optional[str]] = [None]

    def scope_code(text: str) -> int:
        if text not in scopes:
            scopes[text] = len(texts)
            texts.append(text)
        return scopes[text]

    markers = view.step_ids()
    for li, idx in view.select(host_ids(view)):
        line = plane.lines[li]
        s = line.start_ps[idx]
        e = s + line.dur_ps[idx]
        step = opsmod.window_of(s, win_s, win_e)
        ids = line.name_id[idx].astype(np.int64)
        step[np.isin(ids, markers)] = -1  # in the tree, not rows
        if not (step >= 0).any():
            continue
        parent = thread_parents(s, e, quantum_ps)
        parts.append((ids, _module_scopes(plane.event_names, ids, parent, scope_code), _self_time(s, e, parent), s, e,
                      step))
    if not parts:
        return []
    ids, codes, selfs, s, e, step = (np.concatenate(x) for x in zip(*parts))
    n_codes = len(texts)
    keys = ids * n_codes + codes
    drop = opsmod.key_outside_apart(keys, step)
    rows: Dict = {}

    def make(key: int) -> opsmod.OpRow:
        name_id, code = divmod(key, n_codes)
        name = plane.event_names.get(name_id, "")
        return opsmod.OpRow("host", name, name, scope=texts[code])

    opsmod._aggregate(rows, keys, make, selfs, s, e, step, len(win_s), drop)
    return list(rows.values())


class KinetoLaunchers:
    """:data:`.ops.Launchers` of a Kineto trace: the host row event around the runtime call
    whose ``correlation`` id a device event carries (module docstring)."""

    def __init__(self, space: KinetoSpace, view: Optional[TorchHostView]):
        self.space = space
        self.names = view.plane.event_names if view is not None else {}
        self.corr, self.op = self._launches(view)

    def _launches(self, view: Optional[TorchHostView]) -> Tuple[np.ndarray, np.ndarray]:
        """(sorted correlation ids of the runtime calls, metadata id of the op around each, -1
        for a call outside any op)."""
        empty = np.zeros(0, dtype=np.int64)
        if view is None:
            return empty, empty
        corrs, ops = [], []
        markers = view.step_ids()
        for li, idx in view.select(host_ids(view)):
            corr = self.space.correlations.get((view.plane.name, li))
            if corr is None:
                continue
            c = corr[idx]
            calls = np.flatnonzero(c >= 0)
            if not len(calls):
                continue
            line = view.plane.lines[li]
            s = line.start_ps[idx]
            parent = thread_parents(s, s + line.dur_ps[idx], self.space.time_quantum_ps)[calls]
            op = np.where(parent >= 0, line.name_id[idx][np.maximum(parent, 0)], -1)
            corrs.append(c[calls])
            ops.append(np.where(np.isin(op, markers), -1, op))  # launched by the step itself: no op
        if not corrs:
            return empty, empty
        corr, op = np.concatenate(corrs), np.concatenate(ops)
        order = np.argsort(corr, kind="stable")
        return corr[order], op[order]

    def __call__(self, plane, line, idx: np.ndarray) -> List[Optional[Tuple[str, str]]]:
        out: List[Optional[Tuple[str, str]]] = [None] * len(idx)
        k = next((i for i, l in enumerate(plane.lines) if l is line), None)
        corr = self.space.correlations.get((plane.name, k)) if k is not None else None
        if corr is None or not len(self.corr):
            return out
        c = corr[idx]
        j = np.minimum(np.searchsorted(self.corr, c), len(self.corr) - 1)
        op = np.where((self.corr[j] == c) & (c >= 0), self.op[j], -1)
        for n, m in enumerate(op.tolist()):
            if m >= 0:
                name = self.names.get(m, "")
                out[n] = (name, name)
        return out


def row_scope(row: opsmod.OpRow) -> Optional[str]:
    """A PyTorch op row's layer scope: the ``nn.Module`` events around it (:func:`host_ops`), None without."""
    return row.scope
