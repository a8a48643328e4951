"""Sentences of the evidence, written from the findings' numbers. Each says what was
measured (in the trace, or by the system sampler) and, where a number is inferred, says so.
"""
from __future__ import annotations

from typing import List, Optional

from ..schema import SystemMetrics
from .findings import Findings, GapFact, LoaderFacts
from .sysmetrics import MACHINE_CPU_MIN_S


class Inferred(str):
    """An evidence sentence whose conclusion is inferred from indirect facts, not measured."""


class Sampled(str):
    """An evidence sentence from the system metrics sampled beside the trace, not the trace."""


def basis(sentence: str) -> str:
    """``inferred``, ``system_metrics`` or ``trace`` (measured in the trace)."""
    if isinstance(sentence, Inferred):
        return "inferred"
    if isinstance(sentence, Sampled):
        return "system_metrics"
    return "trace"


def with_basis(text: str, kind: str) -> str:
    """The sentence ``text`` as the kind of :func:`basis` ``kind`` (a report's
    ``evidence_detail`` read back into a verdict)."""
    if kind == "inferred":
        return Inferred(text)
    if kind == "system_metrics":
        return Sampled(text)
    return str(text)

#: Busy-share spread (percentage points) between devices above which the report calls the
#: work imbalanced (our choice: one device idle a fifth of the step longer than another).
IMBALANCE_POINTS = 20.0


def device_word(f: Findings) -> str:
    """How the device of the breakdown is named in sentences."""
    if f.device_kind == "CPU":
        return "the CPU (the model's math runs on host threads here)"
    return f"the {f.device_kind}"


def breakdown_sentence(f: Findings) -> str:
    """The breakdown of the step time (% per category), as measured in the trace; of a
    worker's time outside its collectives when ``f.own_time`` is set (then without them)."""
    compute = ("model compute on " + device_word(f)) if f.device_kind == "CPU" else f.device_kind + " compute"
    shares = [f"{f.share('device_compute'):.1f}% {compute}", f"{f.share('input'):.1f}% waiting for input",
              f"{f.share('host_compute'):.1f}% host overhead", f"{f.share('kernel_launch'):.1f}% kernel launch"]
    if f.own_time is None:
        shares.append(f"{f.share('collective'):.1f}% collectives")
    shares += [f"{f.transfer_pct:.1f}% host<->device copies", f"{f.share('idle'):.1f}% with nothing recorded"]
    own = f.own_time
    head = "Step time" if own is None else f"Outside its collectives ({own.own_ms:.1f} of {own.step_ms:.1f} ms per step)"
    return f"{head}: {', '.join(shares)}."


def system_sentence(system: SystemMetrics) -> str:
    """The sampled system metrics in one sentence (CPU, the training process tree, I/O, GPU, disk)."""
    tree = system.get("tree_cpu_cores")
    children = system.get("tree_children") or 0
    own = (f"this process and its {children} child process(es) {tree:.2f} cores" if tree is not None and children
           else f"this process {system['proc_cpu_cores']:.2f} cores")
    span = system.get("sampled_s")
    if isinstance(span, (int, float)) and span < MACHINE_CPU_MIN_S:
        # The machine's counters tick every 10 ms: too coarse to show a window this short.
        how = "by its threads' own clocks" if system.get("cpu_exact") else "in 10 ms ticks, coarse"
        return Sampled(f"System while profiling: the window ({span * 1e3:.0f} ms) was too short for the machine's "
                       f"CPU counters (10 ms ticks); {own} over it ({how})"
                       + (f", GPU utilisation {system['gpu_util_pct']:.0f}%" if system.get("gpu_util_pct") is not None
                          else "") + ".")
    return Sampled(f"System while profiling: CPU {system['cpu_mean_pct']:.0f}% on average over {system.get('cpu_count')} cores, "
            f"busiest core {system['busiest_core_mean_pct']:.0f}%, {own}"
            + (f", I/O wait {system['iowait_pct']:.0f}%" if system.get("iowait_pct") is not None else "")
            + (f", GPU utilisation {system['gpu_util_pct']:.0f}%" if system.get("gpu_util_pct") is not None else "")
            + f", disk reads {system['disk_read_MBps']:.1f} MB/s.")


def launch_sentence(f: Findings) -> Optional[str]:
    """Kernel count, median duration (us) and median gap between kernels (us), or None without kernels."""
    k = f.kernels
    if k is None:
        return None
    gap = f", median idle gap between kernels {k.median_gap_us:.1f} us" if k.median_gap_us is not None else ""
    return f"{k.count} kernels on {k.devices} device(s), median {k.median_us:.1f} us each{gap}."


def device_sentences(f: Findings) -> List[str]:
    """Imbalance between devices, and what the host did in the longest device gaps."""
    out = []
    active = [d for d in f.devices if d["kernels"]]
    if len(active) > 1 and not f.shared_clock_only:
        busiest = max(active, key=lambda d: d["busy_pct"])
        idlest = min(active, key=lambda d: d["busy_pct"])
        if busiest["busy_pct"] - idlest["busy_pct"] > IMBALANCE_POINTS:
            out.append(f"Work is imbalanced across devices: {busiest['device']} is busy {busiest['busy_pct']:.1f}% of "
                       f"the step, {idlest['device']} only {idlest['busy_pct']:.1f}%; the step waits for the slowest.")
    for g in f.gaps:
        out.append(f"Longest idle gap on {g.device}: {g.duration_ms:.2f} ms at {g.start_ms:.2f} ms; meanwhile "
                   f"{_host_during(g)}.")
    return out


def _host_during(g: GapFact) -> str:
    if g.host_missing:
        return "the host trace is missing"
    parts = []
    if g.input_wait_pct > 0:
        parts.append(f"the training step waited for input {g.input_wait_pct:.0f}% of the gap")
    if g.training_event is not None:
        parts.append(f"the training thread was in `{g.training_event}` for {g.training_event_pct:.0f}% of it")
    if g.tfdata_busy_pct is not None:
        parts.append(f"the busiest tf.data thread was active {g.tfdata_busy_pct:.0f}% of it")
    return ", ".join(parts) if parts else "no host activity was recorded"


def loader_sentence(loader: LoaderFacts) -> str:
    """What the trace shows of PyTorch's DataLoader: who loads the batches, the wait per step."""
    who = ("worker processes load the batches (num_workers > 0): the wait is how late they are" if loader.workers
           else "it runs in the training process (num_workers=0): the loop loads each batch itself while the step waits")
    return (f"The DataLoader's iterator is `{loader.iterator}`: {who}; {loader.wait_ms_per_step:.1f} ms of wait per "
            f"step over {loader.calls} batches.")


#: Why a PyTorch input wait is called preprocessing without system metrics: loading runs the
#: dataset's Python, which the trace cannot split into computing and reading.
LOADER_INPUT = Inferred("Loading runs the dataset's Python (__getitem__, transforms, collate): the trace cannot tell "
                        "computing from reading inside it. Record system metrics (tfbneck watch --pid) to separate "
                        "CPU-bound from I/O-bound.")


def step_note(f: Findings) -> List[str]:
    """A sentence when the steps were inferred from the iterator cadence, else nothing."""
    if f.steps.inferred:
        return ["Steps were inferred from the IteratorGetNext cadence (no step markers in the trace)."]
    return []


def context(f: Findings) -> List[str]:
    """Sentences that precede every verdict drawn from the breakdown."""
    out = step_note(f)
    if f.eager:
        out.append("The model runs eagerly, op by op from Python (no tf.function): every op pays Python and "
                   "dispatch overhead.")
    out.append(breakdown_sentence(f))
    if f.system:
        out.append(system_sentence(f.system))
    return out
