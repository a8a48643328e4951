"""The verdict rules, tried in order by :func:`.verdict.decide`: each is a small function of
the findings that returns a :class:`.verdict.Verdict` or None (does not apply). Every
threshold is a named constant with its source.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from . import sysmetrics
from .evidence import breakdown_sentence, device_word, launch_sentence, system_sentence
from .findings import Findings
from .verdict import Verdict, confidence

#: Input share (%) above which a step is input-bound. XProf uses the same two levels,
#: "HIGHLY input-bound" above 20 % and "MODERATELY" above 5 %
#: (xprof: convert/op_stats_to_input_pipeline_analysis.cc, kHighlyInfeedBoundThresholdInPercent
#: and kModeratelyInfeedBoundThresholdInPercent).
INPUT_BOUND_PCT = 20.0
INPUT_MODERATE_PCT = 5.0
#: Collective share (%) above which a step is network-bound: the same 20 % rule applied
#: to time the devices spend in collectives (our choice, by analogy with the input rule).
COLLECTIVE_BOUND_PCT = 20.0
#: Kernel-launch share (%) above which a GPU step is launch-bound (same 20 % rule).
KERNEL_LAUNCH_BOUND_PCT = 20.0
#: Host-overhead share (%) above which Python/framework overhead limits the step
#: (our choice: a third of the step with neither device nor input active).
HOST_OVERHEAD_PCT = 30.0
#: Transfer share (%) above which host<->device copies limit the step (same 20 % rule).
TRANSFER_BOUND_PCT = 20.0
#: Unrecorded share (%) above which the trace cannot support any verdict.
UNRECORDED_PCT = 50.0
#: Device-compute share (%) from which the confidence of a device-bound verdict rises.
DEVICE_BOUND_PCT = 50.0
#: Confidence lost when the blocking stage runs Python and no system metrics say whether it
#: computed or waited (our choice: such verdicts must stay below 0.7).
PYTHON_STAGE_PENALTY = 0.25

Rule = Callable[[Findings], Optional[Verdict]]


def step_note(f: Findings) -> List[str]:
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


def not_tensorflow(f: Findings) -> Optional[Verdict]:
    if f.framework != "jax":
        return None
    busy = ", ".join(f"{d['device']} busy {d['busy_pct']:.1f}%" for d in f.devices if d["events"])
    evidence = ["This is a JAX (XLA) trace, not TensorFlow: it has no tf.data pipeline and no Keras steps, so "
                "input-pipeline and step analysis do not apply.", f"Device activity: {busy or 'no device events'}."]
    launch = launch_sentence(f)
    return Verdict("unknown", "not_tensorflow", 0.0, evidence + ([launch] if launch else []))


def device_trace_missing(f: Findings) -> Optional[Verdict]:
    p = f.placement
    if p.legacy_state != "trace_missing":
        return None
    kind = p.device_kind
    sentence = (f"{p.device_planes} {kind} plane(s) hold no events although the host "
                + (f"launched {p.launch_calls} kernels" if p.launch_calls else "ran no model ops of its own")
                + ": the device trace was not recorded (CUPTI failed or lacked permission), so no verdict "
                  "about the device or the input can be made.")
    return Verdict("unknown", "device_trace_missing", 0.9, [sentence] + step_note(f))


def model_on_cpu(f: Findings) -> Optional[Verdict]:
    p = f.placement
    if p.legacy_state != "model_on_cpu":
        return None
    kind = p.device_kind
    sentence = (f"The {kind} sat idle for the whole window ({p.device_planes} {kind} plane(s), 0 events) while the "
                f"model's ops executed on host threads for {round(p.model_on_host_ps / 1e9, 3):.1f} ms: the model "
                "ran on the CPU although a GPU was present.")
    return Verdict("cpu", "model_on_cpu", 0.85, [sentence] + step_note(f))


def no_activity(f: Findings) -> Optional[Verdict]:
    recorded = sum(f.share(c) for c in ("device_compute", "input", "kernel_launch", "host_compute", "collective"))
    if f.steps.found or recorded + f.transfer_pct != 0:
        return None
    return Verdict("unknown", "no_activity", 0.0,
                   context(f) + ["The trace holds no activity that can be attributed to training."])


def input_bound(f: Findings) -> Optional[Verdict]:
    inp = f.share("input")
    if inp < INPUT_BOUND_PCT:
        return None
    p = f.pipeline if (f.pipeline and f.pipeline.stages) else None
    st = p.blocking if p else None
    ev = context(f) + [f"The training step waits for input {inp:.1f}% of the time (IteratorGetNext blocking with "
                       f"the device idle; input-bound above {INPUT_BOUND_PCT:.0f}%, as XProf rates it)."]
    if st is not None:
        par = f", parallelism {st.parallelism}" if st.parallelism not in (None, "") else ""
        fn = f" plus {st.function_ps / 1e9:.1f} ms of CPU time in its function" if st.function_ps else ""
        calls = f" over {st.calls} calls" if st.calls else ""
        ev.append(f"The stage that blocks the consumer is the tf.data stage `{st.kind}` ({st.path}): "
                  f"{st.self_ps / 1e9:.1f} ms of self time{fn}{calls}{par}.")
    kind, cause, penalty, why = (_input_from_system(f.system) if f.system else _input_from_stage(p, st))
    ev.append(why)
    return Verdict(kind, cause, confidence(inp, INPUT_BOUND_PCT, penalty), ev)


def _input_from_system(system: dict):
    """(kind, cause, confidence penalty, sentence) from the sampled system metrics."""
    proc = system.get("proc_cpu_cores") or 0.0
    if proc >= sysmetrics.BUSY_PROCESS_CORES:
        return ("cpu", "input_preprocessing", 0.0,
                f"The training process kept {proc:.2f} cores busy while the step waited: the input pipeline is "
                "computing, and the host cannot prepare data fast enough.")
    if system["cpu_mean_pct"] >= 100.0 - sysmetrics.IDLE_HOST_PCT:
        return ("cpu", "cpu_contention", 0.0,
                f"The training process used only {proc:.2f} cores but the machine's CPU was "
                f"{system['cpu_mean_pct']:.0f}% busy: other processes take the cores the input pipeline needs.")
    if system.get("net_recv_MBps", 0) > 10 * max(system.get("disk_read_MBps", 0), 0.1):
        return ("network", "remote_read", 0.0,
                "The CPU was mostly idle while the step waited, and the host was receiving from the network: "
                "remote reads limit the input.")
    return ("io", "file_read", 0.0,
            f"The training process used only {proc:.2f} cores while the step waited: the input pipeline is waiting "
            "on storage (or another slow source), not computing.")


def _input_from_stage(pipeline, st):
    """(kind, cause, confidence penalty, sentence) from the blocking stage alone."""
    category = st.category if st else "compute"
    if category == "file_read":
        return "io", "file_read", 0.0, "The blocking stage reads files: the pipeline waits on storage."
    if category == "remote_read":
        return ("network", "remote_read", 0.0,
                "The blocking stage reads over the network (tf.data service or remote file system).")
    if category == "python" or (pipeline and pipeline.uses_py_function):
        return ("cpu", "input_preprocessing", PYTHON_STAGE_PENALTY,
                "The blocking stage runs Python (from_generator / py_function): the trace cannot tell computing "
                "from waiting inside it. Record system metrics (BottleneckProfiler) to separate CPU-bound from "
                "I/O-bound.")
    return "cpu", "input_preprocessing", 0.0, "The blocking stage computes (map/decode/augment on host threads)."


def gradient_sync(f: Findings) -> Optional[Verdict]:
    coll = f.share("collective")
    if coll < COLLECTIVE_BOUND_PCT:
        return None
    return Verdict("network", "gradient_sync", confidence(coll, COLLECTIVE_BOUND_PCT), context(f) + [
        f"Devices spend {coll:.1f}% of the step in collectives (all-reduce/NCCL): waiting for peers or moving "
        f"gradients (threshold {COLLECTIVE_BOUND_PCT:.0f}%)."])


def host_device_transfer(f: Findings) -> Optional[Verdict]:
    xfer = f.transfer_pct
    if xfer < TRANSFER_BOUND_PCT:
        return None
    return Verdict("device", "host_device_transfer", confidence(xfer, TRANSFER_BOUND_PCT), context(f) + [
        f"{xfer:.1f}% of the step is host<->device copies with no kernel running (threshold "
        f"{TRANSFER_BOUND_PCT:.0f}%)."])


def kernel_launch(f: Findings) -> Optional[Verdict]:
    launch = f.share("kernel_launch")
    if launch < KERNEL_LAUNCH_BOUND_PCT:
        return None
    kernels = launch_sentence(f)
    return Verdict("cpu", "kernel_launch", confidence(launch, KERNEL_LAUNCH_BOUND_PCT), context(f) + (
        [kernels] if kernels else []) + [
        f"The host spends {launch:.1f}% of the step launching kernels while the device idles (threshold "
        f"{KERNEL_LAUNCH_BOUND_PCT:.0f}%)."])


def host_overhead(f: Findings) -> Optional[Verdict]:
    hostc = f.share("host_compute")
    if hostc < HOST_OVERHEAD_PCT:
        return None
    idle_what = "CPU model math" if f.device_kind == "CPU" else "device"
    return Verdict("cpu", "eager_execution" if f.eager else "python_overhead", confidence(hostc, HOST_OVERHEAD_PCT),
                   context(f) + [f"{hostc:.1f}% of the step is host-side overhead (Python, Keras, op dispatch) with "
                                 f"the {idle_what} idle (threshold {HOST_OVERHEAD_PCT:.0f}%)."])


def unrecorded(f: Findings) -> Optional[Verdict]:
    idle = f.share("idle")
    if idle < UNRECORDED_PCT:
        return None
    return Verdict("unknown", "unrecorded", 0.2, context(f) + [
        f"{idle:.1f}% of the step has no recorded activity on the training thread, the tf.data consumer or the "
        "device: the trace cannot say what limited it."])


def model_compute(f: Findings) -> Verdict:
    inp, comp = f.share("input"), f.share("device_compute")
    ev = context(f)
    if inp >= INPUT_MODERATE_PCT:
        ev.append(f"Input wait is {inp:.1f}%: moderate (between {INPUT_MODERATE_PCT:.0f}% and "
                  f"{INPUT_BOUND_PCT:.0f}%), not the limit.")
    word = device_word(f)
    ev.append(f"{word[0].upper() + word[1:]} computes {comp:.1f}% of the step: the model's math is the limit, "
              "which is the desired state.")
    conf = confidence(comp, DEVICE_BOUND_PCT) if comp >= DEVICE_BOUND_PCT else 0.5
    return Verdict("device", "model_compute", conf, ev)


#: The rules in the order they are tried; the last always applies.
RULES: List[Rule] = [not_tensorflow, device_trace_missing, model_on_cpu, no_activity, input_bound, gradient_sync,
                     host_device_transfer, kernel_launch, host_overhead, unrecorded, model_compute]
