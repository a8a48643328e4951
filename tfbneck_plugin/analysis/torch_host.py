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
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, Optional

import numpy as np

from ..trace import timeline
from ..trace.kineto import OP_CATEGORIES, RUNTIME_CATEGORIES, KinetoSpace
from . import host as hostmod
from . import steps as stepsmod
from .findings import LoaderFacts
from .host_analysis import HostAnalysis
from .placement import Placement

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
    return stepsmod.StepSearch(steps, [], li)


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
    sel = view.select(view.loader_ids())
    if not sel:
        return None
    names = view.plane.event_names
    kinds: Dict[str, int] = {}
    for li, idx in sel:
        for m in view.plane.lines[li].name_id[idx]:
            k = DATALOADER_NEXT_RE.match(names[int(m)]).group(1)  # type: ignore[union-attr]
            kinds[k] = kinds.get(k, 0) + 1
    iterator = max(kinds, key=lambda k: kinds[k])
    waits = view.intervals(sel)
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

    @cached_property
    def verdict(self):
        """The shared rules' verdict, less sure where the trace cannot see a cost
        (:func:`shared_cores_verdict`)."""
        return shared_cores_verdict(super().verdict, self.findings)


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
    loader = f.loader
    if (f.device_kind != "CPU" or loader is None or not loader.workers or f.system is not None
            or v.cause in ("input_preprocessing", "file_read", "remote_read")
            or v.confidence <= SHARED_CORES_MAX_CONFIDENCE):
        return v
    note = (f"The DataLoader's worker processes run on the same CPU cores as the model's math, and their work is "
            f"not in this trace (only the training process is profiled): part of the model's time may be the "
            f"workers' loading, so the confidence is at most {SHARED_CORES_MAX_CONFIDENCE}. Feeding the model "
            f"cached batches for a few steps, or system metrics (tfbneck watch --pid), would tell.")
    return dataclasses.replace(v, confidence=SHARED_CORES_MAX_CONFIDENCE, evidence=list(v.evidence) + [note])


