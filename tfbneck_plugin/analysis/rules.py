"""The host verdict: ordered rules over one host's :class:`.findings.Findings`, tried in order
by :func:`decide`. Each rule is a small function of the findings that returns a
:class:`.verdict.Verdict` or None (does not apply); the first that applies gives the
bottleneck, the cause code (:mod:`tfbneck_plugin.causes`), the confidence and the evidence;
the recommendations come from the advice catalogue (:mod:`.advice`), ranked by the what-if
models (:mod:`.whatif`). Every threshold is a named constant with its source.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from ..causes import CAUSES
from . import cpu_share
from . import evidence as ev
from .advice import advice_for
from .evidence import Inferred, context, device_word, launch_sentence, step_note
from .findings import Findings
from .fit_to_run import fit
from .input_rules import (cache_fill_sentence, input_bound, input_load_sentence, input_shares_cores, input_slows_model,
                          input_takes_cores, loader_workers_behind)
from .op_advice import name_ops
from .placement import PLUGGABLE_HOST_ALLOCATOR
from .python_input import holds_the_gil
from .thresholds import (COLLECTIVE_BOUND_PCT, DEVICE_BOUND_PCT, HOST_OVERHEAD_PCT, INPUT_BOUND_PCT,
                         INPUT_MODERATE_PCT, KERNEL_LAUNCH_BOUND_PCT, TRANSFER_BOUND_PCT, UNRECORDED_PCT)
from .verdict import Verdict, confidence, first_verdict

#: Highest confidence of a device verdict while the input's work holds enough of the cores
#: that without it the step would be :data:`.cpu_share.INPUT_DOUBT_GAIN` times faster or more.
INPUT_DOUBT_CONFIDENCE = 0.6
#: Share (%) of the steady step time spent building graphs (tf.function tracing) from which
#: retracing is the cause (same 20 % rule as the other shares).
RETRACING_PCT = 20.0
#: Fraction of the steady steps that must build a graph for retracing (our choice: in most
#: steps; one build at the start is warm-up, excluded before this rule).
RETRACING_STEP_FRACTION = 0.5

Rule = Callable[[Findings], Optional[Verdict]]


def not_tensorflow(f: Findings) -> Optional[Verdict]:
    """A JAX (XLA) trace without step markers: no TensorFlow verdict applies
    (``unknown``/``not_tensorflow``). A Keras fit on JAX profiled by BottleneckProfiler (or any
    JAX loop marking its steps ``train``) is analysed as any run (:mod:`.jax_host`)."""
    if f.framework != "jax" or f.steps.found:
        return None
    busy = ", ".join(f"{d['device']} busy {d['busy_pct']:.1f}%" for d in f.devices if d["events"])
    evidence = ["This is a JAX (XLA) trace, not TensorFlow: it has no tf.data pipeline and no Keras steps, so "
                "input-pipeline and step analysis do not apply.", f"Device activity: {busy or 'no device events'}."]
    launch = launch_sentence(f)
    # Certain when the metadata plane names jax_version; still "unknown": no TensorFlow verdict applies.
    return Verdict("unknown", "not_tensorflow", 0.9, evidence + ([launch] if launch else []))


def device_trace_missing(f: Findings) -> Optional[Verdict]:
    """The GPU ran the model (GPU allocators, launches) but its activity was not recorded:
    ``unknown``/``device_trace_missing``, naming what shows the GPU was used.
    """
    p = f.placement
    if p.state != "trace_missing":
        return None
    seen = []
    if p.device_allocators:
        seen.append(f"tensors were allocated by {', '.join(f'`{n}`' for n in p.device_allocators)} "
                    f"({p.device_allocations} allocations)")
    if p.launch_calls:
        seen.append(f"the host launched {p.launch_calls} kernels")
    if p.device_copies:
        seen.append(f"{p.device_copies} copies to or from the GPU were recorded on the host")
    if p.nccl_calls:
        seen.append(f"the host ran {p.nccl_calls} NCCL collectives (NCCL works on GPU memory only)")
    planes = (f"its {p.device_planes} {p.device_kind} plane(s) hold no events" if p.device_planes
              else "the trace has no GPU plane at all")
    used = ("The GPU ran the model: " + "; ".join(seen)) if seen else "A GPU was present and the host ran no model ops"
    tracer = "Kineto" if f.framework == "pytorch" else "CUPTI"
    return Verdict("unknown", "device_trace_missing", 0.9, [
        used + ".",
        Inferred(f"But {planes}: the device tracer ({tracer}) recorded nothing, so the device's time and the input "
                 "wait cannot be measured and no bottleneck can be named.")] + step_note(f))


def model_on_cpu(f: Findings) -> Optional[Verdict]:
    """An idle GPU plane beside TensorFlow ops run on host threads, with no tensor on the GPU:
    ``cpu``/``model_on_cpu``.
    """
    p = f.placement
    if p.state != "model_on_cpu":
        return None
    kind = p.device_kind
    median = f", median {p.host_op_median_us:.0f} us per op" if p.host_op_median_us is not None else ""
    return Verdict("cpu", "model_on_cpu", 0.85, [
        f"The {kind} sat idle for the whole window ({p.device_planes} {kind} plane(s), 0 events) and no tensor was "
        f"allocated on it, while TensorFlow ops ran on host threads for {p.host_op_ps / 1e9:.1f} ms{median}.",
        Inferred("The model ran on the CPU although a GPU was present.")] + step_note(f))


def untraced_device_sentence(f: Findings) -> Inferred:
    """The inferred-device sentence for an untraced PluggableDevice (placement ``untraced_pluggable``)."""
    return Inferred(f"Tensors were allocated by `{PLUGGABLE_HOST_ALLOCATOR}`: the ops ran on a PluggableDevice "
                    "(such as Apple Metal) whose activity the profiler does not record; the time the training "
                    "function waited on it is counted as device compute, inferred rather than measured.")


def no_activity(f: Findings) -> Optional[Verdict]:
    """No steps and nothing recorded in the window: ``unknown``/``no_activity``."""
    recorded = sum(f.share(c) for c in ("device_compute", "input", "kernel_launch", "host_compute", "collective"))
    if f.steps.found or recorded + f.transfer_pct != 0:
        return None
    return Verdict("unknown", "no_activity", 0.0,
                   context(f) + ["The trace holds no activity that can be attributed to training."])


def retracing(f: Findings) -> Optional[Verdict]:
    """Graph building in most steady steps and >= ``RETRACING_PCT`` of their time (and no less than
    the input wait): ``cpu``/``retracing``.
    """
    st = f.steps
    share = st.graph_build_pct
    if (st.count < 2 or st.graph_build_steps < RETRACING_STEP_FRACTION * st.count or share < RETRACING_PCT
            or share < f.share("input")):
        return None
    return Verdict("cpu", "retracing", confidence(share, RETRACING_PCT), context(f) + [
        f"{st.graph_build_steps} of {st.count} steady steps traced a new graph (`tf.function-graph_building` inside "
        f"the step): {st.graph_build_ms:.1f} ms in all, {share:.1f}% of the step time (threshold "
        f"{RETRACING_PCT:.0f}%). A tf.function called with a new Python value (an int, a float, a list of another "
        "length) is traced again on every call."])


def gradient_sync(f: Findings) -> Optional[Verdict]:
    """Collectives >= ``COLLECTIVE_BOUND_PCT`` of the step: ``network``/``gradient_sync``."""
    coll = f.share("collective")
    if coll < COLLECTIVE_BOUND_PCT:
        return None
    return Verdict("network", "gradient_sync", confidence(coll, COLLECTIVE_BOUND_PCT), context(f) + [
        f"Devices spend {coll:.1f}% of the step in collectives (all-reduce/NCCL): waiting for peers or moving "
        f"gradients (threshold {COLLECTIVE_BOUND_PCT:.0f}%)."])


def host_device_transfer(f: Findings) -> Optional[Verdict]:
    """Host<->device copies >= ``TRANSFER_BOUND_PCT`` with no kernel running:
    ``io``/``host_device_transfer``. The kind is the input side's: the device waits for data
    to be delivered, which XProf files under "Enqueuing data" in its input-bound analysis
    (xprof: convert/op_stats_to_input_pipeline_analysis.cc) and which nvidia-smi's GPU-Util
    does not count as busy; its fixes (prefetch to the device, fewer host round trips) are
    input-pipeline changes, not model changes.
    """
    xfer = f.transfer_pct
    if xfer < TRANSFER_BOUND_PCT:
        return None
    h2d, d2h = f.share("host_to_device"), f.share("device_to_host")
    return Verdict("io", "host_device_transfer", confidence(xfer, TRANSFER_BOUND_PCT), context(f) + [
        f"{xfer:.1f}% of the step is host<->device copies with no kernel running (threshold "
        f"{TRANSFER_BOUND_PCT:.0f}%; {h2d:.1f}% host-to-device, {d2h:.1f}% device-to-host).",
        "The device is not busy but waiting for data to be delivered: copies are the input side's work (XProf "
        "counts them as \"Enqueuing data\" in its input-bound analysis, and nvidia-smi's GPU-Util does not count "
        "them as busy), so the kind is io, not device."])


def kernel_launch(f: Findings) -> Optional[Verdict]:
    """Kernel launch >= ``KERNEL_LAUNCH_BOUND_PCT`` while the device idles: ``cpu``/``kernel_launch``."""
    launch = f.share("kernel_launch")
    if launch < KERNEL_LAUNCH_BOUND_PCT:
        return None
    kernels = launch_sentence(f)
    return Verdict("cpu", "kernel_launch", confidence(launch, KERNEL_LAUNCH_BOUND_PCT), context(f) + (
        [kernels] if kernels else []) + [
        f"The host spends {launch:.1f}% of the step launching kernels while the device idles (threshold "
        f"{KERNEL_LAUNCH_BOUND_PCT:.0f}%)."])


def host_overhead(f: Findings) -> Optional[Verdict]:
    """Host overhead >= ``HOST_OVERHEAD_PCT`` with device and input idle: ``cpu``/``python_overhead``
    (``eager_execution`` when the model runs eagerly).

    In an eager program the training thread runs Python between the ops it dispatches, and
    without the Python tracer that time is recorded as nothing: there, the unrecorded share
    counts as host overhead too (inferred)."""
    hostc = f.share("host_compute")
    gaps = f.share("idle") if f.eager else 0.0
    if hostc + gaps < HOST_OVERHEAD_PCT:
        return None
    idle_what = "CPU model math" if f.device_kind == "CPU" else "device"
    host_words = "Python, op dispatch" if f.framework == "pytorch" else "Python, Keras, op dispatch"
    ev = context(f) + [f"{hostc:.1f}% of the step is host-side overhead ({host_words}) with the "
                       f"{idle_what} idle (threshold {HOST_OVERHEAD_PCT:.0f}%)."]
    if gaps:
        ev.append(Inferred(f"Another {gaps:.1f}% passes between the eagerly dispatched ops with nothing recorded: "
                           f"Python running the model op by op, {hostc + gaps:.1f}% in all."))
    conf = confidence(hostc + gaps, HOST_OVERHEAD_PCT)
    if holds_the_gil(f):
        ev.append(Inferred("The input's Python runs in this process and holds the GIL while it runs: part of this "
                           "host time can be the training thread waiting for it, which removing the input would "
                           "free. Measure the input's cost to tell them apart (tfbneck_plugin.measure_input_cost)."))
        conf = min(conf, INPUT_DOUBT_CONFIDENCE)
    return Verdict("cpu", "eager_execution" if f.eager else "python_overhead", conf, ev)


def unrecorded(f: Findings) -> Optional[Verdict]:
    """Nothing recorded for >= ``UNRECORDED_PCT`` of the step: ``unknown``/``unrecorded``."""
    idle = f.share("idle")
    if idle < UNRECORDED_PCT:
        return None
    return Verdict("unknown", "unrecorded", 0.2, context(f) + [
        f"{idle:.1f}% of the step has no recorded activity on the training thread, the "
        f"{'DataLoader' if f.framework == 'pytorch' else 'tf.data consumer'} or the "
        "device: the trace cannot say what limited it."])


#: How :func:`model_compute`'s compute sentence ends: a verdict that holds its confidence down
#: for a cost the trace cannot see rewords it (:func:`.torch_host.shared_cores_verdict`).
DESIRED_STATE = "the model's math is the limit, which is the desired state."


def model_compute(f: Findings) -> Verdict:
    """The last rule, always applies: the device (or the CPU doing the model math) is the limit,
    the healthy state; confident from ``DEVICE_BOUND_PCT`` of device compute on.
    """
    inp, comp = f.share("input"), f.share("device_compute")
    ev = context(f)
    if inp >= INPUT_MODERATE_PCT:
        ev.append(f"Input wait is {inp:.1f}%: moderate (between {INPUT_MODERATE_PCT:.0f}% and "
                  f"{INPUT_BOUND_PCT:.0f}%), not the limit.")
    word = device_word(f)
    ev.append(f"{word[0].upper() + word[1:]} computes {comp:.1f}% of the step: {DESIRED_STATE}")
    conf = confidence(comp, DEVICE_BOUND_PCT) if comp >= DEVICE_BOUND_PCT else 0.5
    load = cpu_share.input_load(f)
    if load is not None and load.speedup >= cpu_share.INPUT_DOUBT_GAIN:
        ev.append(input_load_sentence(f, load))
        ev.append(Inferred(f"Without the input's work the step would take about {load.after_ms:.3g} ms "
                           f"({load.speedup:.2f}x faster): the input may limit it too, so this verdict is not sure."))
        conf = min(conf, INPUT_DOUBT_CONFIDENCE)
    return Verdict("device", "model_compute", conf, ev)


#: The rules in the order they are tried; the last always applies.
RULES: List[Rule] = [not_tensorflow, device_trace_missing, model_on_cpu, no_activity, retracing, input_bound,
                     gradient_sync, host_device_transfer, kernel_launch, input_takes_cores, input_slows_model,
                     input_shares_cores, loader_workers_behind, host_overhead, unrecorded, model_compute]


#: Highest confidence of a verdict over a window in which no step was found: the breakdown
#: then mixes whatever the window held (our choice; calibrated in README "Confidence").
NO_STEPS_CONFIDENCE = 0.4
#: Highest confidence when the device's time is inferred (an untraced PluggableDevice) or
#: when every step found was warm-up (our choice; calibrated likewise).
INFERRED_DEVICE_CONFIDENCE = 0.6
WARMUP_ONLY_CONFIDENCE = 0.4
#: Confidence lost when the steps were inferred from the iterator cadence (our choice).
INFERRED_STEPS_PENALTY = 0.1


def decide(f: Findings) -> Verdict:
    """The first rule of :data:`RULES` that applies, with its advice, the evidence that
    holds for every verdict (warm-up, why no steps were found, what the devices did) and
    the confidence adjusted for what could not be measured."""
    v = first_verdict(RULES, f)
    assert CAUSES[v.cause].bottleneck == v.bottleneck, (v.cause, v.bottleneck)
    if v.cause == "not_tensorflow":
        return v
    # What fits this run, with `predicted`, the largest gain first.
    v.recommendations = fit(advice_for(v.cause, f), f)
    blocking = f.pipeline.blocking.path if f.pipeline is not None and f.pipeline.blocking else None
    v.recommendations = name_ops(v.cause, v.recommendations, f.ops, blocking, f.device_kind,  # names the measured ops
                                 f.framework)
    if f.steps.odd:
        v.evidence.insert(0, f.steps.odd)
    if f.steps.fetch_outside:
        v.evidence.insert(0, f.steps.fetch_outside)
    if f.steps.warmup_count:
        v.evidence.insert(0, _warmup_sentence(f))
    if not f.steps.found and f.steps.why_none:
        v.evidence.insert(0, f.steps.why_none)
    if f.placement.state == "untraced_pluggable":
        v.evidence.append(untraced_device_sentence(f))
    if v.cause != "device_trace_missing":
        v.evidence.extend(ev.device_sentences(f))
    filling = cache_fill_sentence(f)
    if filling:
        v.evidence.append(Inferred(filling))
    v.confidence = _adjusted(v, f)
    return v


def _warmup_sentence(f: Findings) -> str:
    st = f.steps
    if st.all_warmup:
        return (f"Every step in the window ({st.warmup_count}) was warm-up ({st.warmup_reason}): there is no steady "
                "step to analyse apart; profile later steps.")
    return (f"{st.warmup_count} warm-up step(s) ({st.warmup_ms:.1f} ms) were excluded from the breakdown and the "
            f"verdict: {st.warmup_reason}.")


def _adjusted(v: Verdict, f: Findings) -> float:
    """The rule's confidence, lowered where the facts behind it are partial."""
    c = v.confidence
    if v.bottleneck == "unknown":
        return c
    if not f.steps.found:
        c = min(c, NO_STEPS_CONFIDENCE)
    if f.steps.all_warmup:
        c = min(c, WARMUP_ONLY_CONFIDENCE)
    if f.steps.inferred:
        c -= INFERRED_STEPS_PENALTY
    if f.placement.state == "untraced_pluggable":
        c = min(c, INFERRED_DEVICE_CONFIDENCE)
    return round(max(0.05, c), 2)
