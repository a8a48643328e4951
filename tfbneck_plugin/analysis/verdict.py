"""The verdict: which link limits the step, why, how sure, and what to change.

Rules, applied in order to the breakdown percentages (``breakdown.CATEGORIES``) of the
analysed steps; each threshold is a named constant with its source.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import sysmetrics
from .tfdata import Pipeline

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


@dataclass
class Verdict:
    bottleneck: str
    cause: str
    confidence: float
    evidence: List[str] = field(default_factory=list)
    recommendations: List[Dict] = field(default_factory=list)


def _conf(share: float, threshold: float, penalty: float = 0.0) -> float:
    """0.5 at the threshold, rising linearly to 0.95 at 100 %, minus ``penalty``."""
    span = max(100.0 - threshold, 1e-9)
    value = 0.5 + 0.45 * min(max((share - threshold) / span, 0.0), 1.0)
    return round(max(0.05, min(0.95, value - penalty)), 2)


def rec(title: str, detail: str, code: Optional[str] = None) -> Dict:
    return {"title": title, "detail": detail, "code": code}


def _stage_label(pipeline: Optional[Pipeline]) -> str:
    if pipeline is None or pipeline.blocking is None:
        return "the input pipeline"
    return f"the tf.data stage `{pipeline.blocking.kind}` ({pipeline.blocking.path})"


def input_recommendations(pipeline: Optional[Pipeline], kind: str) -> List[Dict]:
    out = []
    st = pipeline.blocking if pipeline else None
    stage_kind = st.kind if st else ""
    # Stages without num_parallel_calls run one element at a time; parallel ones record
    # their parallelism (1 = sequential).
    sequential = st is not None and (st.kind in ("Map", "Interleave", "FlatMap") or st.parallelism in (1, "1"))
    if kind == "cpu":
        if st is not None and st.category == "python" or (pipeline and pipeline.uses_py_function):
            out.append(rec("Replace Python in the input pipeline with TensorFlow ops",
                           "tf.py_function / Dataset.from_generator run Python under the GIL on one "
                           "core; TensorFlow ops in a map run in parallel and without Python.",
                           "ds = tf.data.Dataset.from_tensor_slices(filenames)\n"
                           "ds = ds.map(parse_fn, num_parallel_calls=tf.data.AUTOTUNE)  # tf ops, not py_function"))
        if sequential or stage_kind in ("Map",):
            out.append(rec(f"Parallelise the `{stage_kind or 'map'}` stage",
                           "This stage runs one element at a time. Let tf.data run it on all cores.",
                           "ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)"))
        out.append(rec("Vectorise: batch before the map",
                       "One map call per batch instead of per element amortises per-call overhead; "
                       "most image and tensor ops accept a batch dimension.",
                       "ds = ds.batch(batch_size).map(preprocess_batch, num_parallel_calls=tf.data.AUTOTUNE)"))
        out.append(rec("Cache deterministic preprocessing",
                       "If the expensive work is the same every epoch, do it once and cache the result "
                       "(in memory, or on local disk with a filename).",
                       "ds = ds.map(decode_and_resize, num_parallel_calls=tf.data.AUTOTUNE).cache()\n"
                       "ds = ds.shuffle(10_000).map(random_augment, num_parallel_calls=tf.data.AUTOTUNE)"))
        out.append(rec("Move augmentation onto the accelerator",
                       "Keras preprocessing layers inside the model run on the GPU/TPU with the model.",
                       "model = keras.Sequential([keras.layers.RandomFlip(), keras.layers.RandomRotation(0.1), base_model])"))
    elif kind == "io":
        out.append(rec("Read files in parallel with interleave",
                       "Many small files or a slow file system: overlap reads of several files.",
                       "files = tf.data.Dataset.list_files(pattern, shuffle=True)\n"
                       "ds = files.interleave(tf.data.TFRecordDataset, cycle_length=16,\n"
                       "                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)"))
        out.append(rec("Use fewer, larger files",
                       "Pack small files into TFRecord shards of 100-200 MB: one open per shard instead of per example.",
                       None))
        out.append(rec("Cache after the read",
                       "If the data fits in memory or on local disk, read it from slow storage once.",
                       "ds = ds.cache('/local_ssd/cache')  # or .cache() for memory"))
    elif kind == "network":
        out.append(rec("Prefetch remote reads deeper and in parallel",
                       "Remote storage has high latency per request: keep many reads in flight.",
                       "ds = files.interleave(tf.data.TFRecordDataset, cycle_length=32, block_length=1,\n"
                       "                      num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)"))
        out.append(rec("Stage data on local disk", "Copy the shards to local SSD before training, or cache after the first epoch.",
                       "ds = ds.cache('/local_ssd/cache')"))
    if pipeline is not None and not pipeline.has_prefetch:
        out.insert(0, rec("Add prefetch at the end of the pipeline",
                          "Without prefetch the model waits while the next batch is prepared; with it, "
                          "preparation overlaps the training step.",
                          "ds = ds.prefetch(tf.data.AUTOTUNE)"))
    return out


def decide(pct: Dict[str, float], *, device_kind: str, has_steps: bool, pipeline: Optional[Pipeline],
           system: Optional[Dict], device_trace_missing: Optional[str] = None,
           model_on_cpu: Optional[str] = None, launch_evidence: Optional[str] = None,
           eager: bool = False, step_note: Optional[str] = None) -> Verdict:
    """Apply the rules. ``pct``: breakdown percentages summing to 100."""
    ev: List[str] = []
    if step_note:
        ev.append(step_note)
    if device_trace_missing:
        return Verdict("unknown", "device_trace_missing", 0.9, [device_trace_missing] + ev, [
            rec("Fix the device trace capture",
                "The profiler could not record GPU activity (CUPTI). Check that libcupti from your CUDA "
                "version is on LD_LIBRARY_PATH and that profiling is permitted for non-root users "
                "(NVIDIA driver option NVreg_RestrictProfilingToAdminUsers=0, or run in a container with "
                "--cap-add SYS_ADMIN). The profiler logs a CUPTI error at start when this fails.",
                "import tensorflow as tf\ntf.debugging.set_log_device_placement(True)  # then profile again")])
    if model_on_cpu:
        return Verdict("cpu", "model_on_cpu", 0.85, [model_on_cpu] + ev, [
            rec("Put the model on the GPU",
                "TensorFlow saw a GPU but the model's ops executed on host threads. Check placement and "
                "that the CUDA libraries TensorFlow needs are found.",
                "import tensorflow as tf\nprint(tf.config.list_physical_devices('GPU'))\n"
                "tf.debugging.set_log_device_placement(True)")])

    inp, coll = pct.get("input", 0.0), pct.get("collective", 0.0)
    comp, launch = pct.get("device_compute", 0.0), pct.get("kernel_launch", 0.0)
    hostc, idle = pct.get("host_compute", 0.0), pct.get("idle", 0.0)
    xfer = pct.get("host_to_device", 0.0) + pct.get("device_to_host", 0.0)
    dev_word = "the CPU (the model's math runs on host threads here)" if device_kind == "CPU" else f"the {device_kind}"
    if eager:
        ev.append("The model runs eagerly, op by op from Python (no tf.function): every op pays Python and "
                  "dispatch overhead.")
    ev.append(f"Step time: {comp:.1f}% {'model compute on ' + dev_word if device_kind == 'CPU' else device_kind + ' compute'}, "
              f"{inp:.1f}% waiting for input, {hostc:.1f}% host overhead, {launch:.1f}% kernel launch, "
              f"{coll:.1f}% collectives, {xfer:.1f}% host<->device copies, {idle:.1f}% with nothing recorded.")
    if system:
        ev.append(f"System while profiling: CPU {system['cpu_mean_pct']:.0f}% on average over {system.get('cpu_count')} cores, "
                  f"busiest core {system['busiest_core_mean_pct']:.0f}%, this process {system['proc_cpu_cores']:.2f} cores"
                  + (f", I/O wait {system['iowait_pct']:.0f}%" if system.get("iowait_pct") is not None else "")
                  + (f", GPU utilisation {system['gpu_util_pct']:.0f}%" if system.get("gpu_util_pct") is not None else "")
                  + f", disk reads {system['disk_read_MBps']:.1f} MB/s.")

    if not has_steps and comp + inp + launch + hostc + coll + xfer == 0:
        return Verdict("unknown", "no_activity", 0.0, ev + ["The trace holds no activity that can be attributed to training."], [])

    if inp >= INPUT_BOUND_PCT:
        return _input_bound(inp, pipeline, system, ev)
    if coll >= COLLECTIVE_BOUND_PCT:
        ev.append(f"Devices spend {coll:.1f}% of the step in collectives (all-reduce/NCCL): waiting for peers "
                  f"or moving gradients (threshold {COLLECTIVE_BOUND_PCT:.0f}%).")
        return Verdict("network", "gradient_sync", _conf(coll, COLLECTIVE_BOUND_PCT), ev, [
            rec("Overlap and shrink gradient synchronisation",
                "Larger batches per replica (fewer syncs per example), gradient compression (fp16 all-reduce), "
                "and a faster interconnect or fewer hosts per all-reduce group.",
                "strategy = tf.distribute.MultiWorkerMirroredStrategy(\n"
                "    communication_options=tf.distribute.experimental.CommunicationOptions(\n"
                "        bytes_per_pack=50 * 1024 * 1024, implementation=tf.distribute.experimental.CommunicationImplementation.NCCL))")])
    if xfer >= TRANSFER_BOUND_PCT:
        ev.append(f"{xfer:.1f}% of the step is host<->device copies with no kernel running (threshold {TRANSFER_BOUND_PCT:.0f}%).")
        return Verdict("device", "host_device_transfer", _conf(xfer, TRANSFER_BOUND_PCT), ev, [
            rec("Keep data on the device", "Prefetch batches to the GPU and avoid values going back to the host every step.",
                "ds = ds.apply(tf.data.experimental.prefetch_to_device('/gpu:0'))")])
    if launch >= KERNEL_LAUNCH_BOUND_PCT:
        if launch_evidence:
            ev.append(launch_evidence)
        ev.append(f"The host spends {launch:.1f}% of the step launching kernels while the device idles "
                  f"(threshold {KERNEL_LAUNCH_BOUND_PCT:.0f}%).")
        return Verdict("cpu", "kernel_launch", _conf(launch, KERNEL_LAUNCH_BOUND_PCT), ev, [
            rec("Launch fewer, bigger kernels", "Compile the step with XLA to fuse small ops, and raise the batch size so each kernel does more work.",
                "model.compile(optimizer, loss, jit_compile=True)  # or @tf.function(jit_compile=True)"),
            rec("Run several steps per call", "Fewer Python round trips per batch.",
                "model.compile(optimizer, loss, steps_per_execution=32)")])
    if hostc >= HOST_OVERHEAD_PCT:
        cause = "eager_execution" if eager else "python_overhead"
        ev.append(f"{hostc:.1f}% of the step is host-side overhead (Python, Keras, op dispatch) with the "
                  f"{'CPU model math' if device_kind == 'CPU' else 'device'} idle (threshold {HOST_OVERHEAD_PCT:.0f}%).")
        recs = [rec("Compile the step with tf.function", "Eager op-by-op execution pays Python and dispatch cost on every op.",
                    "@tf.function(jit_compile=True)\ndef train_step(x, y):\n    ...") if eager else
                rec("Run several steps per call", "Amortise Python and callback overhead over many batches.",
                    "model.compile(optimizer, loss, steps_per_execution=32)")]
        return Verdict("cpu", cause, _conf(hostc, HOST_OVERHEAD_PCT), ev, recs)
    if idle >= UNRECORDED_PCT:
        ev.append(f"{idle:.1f}% of the step has no recorded activity on the training thread, the tf.data consumer "
                  "or the device: the trace cannot say what limited it.")
        return Verdict("unknown", "unrecorded", 0.2, ev, [
            rec("Profile with the step markers", "BottleneckProfiler wraps each profiled step in a step marker and records system metrics.",
                "from tfbneck_plugin import BottleneckProfiler\nmodel.fit(ds, callbacks=[BottleneckProfiler('logs', profile_steps=(10, 20))])")])
    # Device-bound: the healthy state.
    if inp >= INPUT_MODERATE_PCT:
        ev.append(f"Input wait is {inp:.1f}%: moderate (between {INPUT_MODERATE_PCT:.0f}% and {INPUT_BOUND_PCT:.0f}%), not the limit.")
    ev.append(f"{dev_word[0].upper() + dev_word[1:]} computes {comp:.1f}% of the step: the model's math is the limit, "
              "which is the desired state.")
    recs = ([rec("Speed up the model math on the CPU",
                 "Use a GPU if you can. On the CPU: XLA compilation, and oneDNN's bf16 paths on CPUs that support them.",
                 "model.compile(optimizer, loss, jit_compile=True)")]
            if device_kind == "CPU" and not eager else
            [rec("Compile the model call with tf.function", "Eager execution dispatches each op from Python; "
                 "a tf.function runs the whole graph in C++ and can fuse ops with XLA.",
                 "@tf.function(jit_compile=True)\ndef predict(x):\n    return model(x, training=False)")]
            if eager else
            [rec("Use mixed precision", "Tensor cores run fp16/bf16 math several times faster than fp32.",
                 "keras.mixed_precision.set_global_policy('mixed_float16')"),
             rec("Compile with XLA", "Fuses ops, fewer kernels and memory round trips.",
                 "model.compile(optimizer, loss, jit_compile=True)")])
    return Verdict("device", "model_compute", _conf(comp, 50.0) if comp >= 50 else 0.5, ev, recs)


def _input_bound(inp: float, pipeline: Optional[Pipeline], system: Optional[Dict], ev: List[str]) -> Verdict:
    st = pipeline.blocking if pipeline else None
    where = _stage_label(pipeline)
    ev.append(f"The training step waits for input {inp:.1f}% of the time (IteratorGetNext blocking with the "
              f"device idle; input-bound above {INPUT_BOUND_PCT:.0f}%, as XProf rates it).")
    if st is not None:
        par = f", parallelism {st.parallelism}" if st.parallelism not in (None, "") else ""
        fn = f" plus {st.function_ps / 1e9:.1f} ms of CPU time in its function" if st.function_ps else ""
        calls = f" over {st.calls} calls" if st.calls else ""
        ev.append(f"The stage that blocks the consumer is {where}: {st.self_ps / 1e9:.1f} ms of self time{fn}"
                  f"{calls}{par}.")
    penalty = 0.0
    if system:
        proc = system.get("proc_cpu_cores") or 0.0
        if proc >= sysmetrics.BUSY_PROCESS_CORES:
            kind, cause = "cpu", "input_preprocessing"
            ev.append(f"The training process kept {proc:.2f} cores busy while the step waited: the input pipeline "
                      "is computing, and the host cannot prepare data fast enough.")
        elif system["cpu_mean_pct"] >= 100.0 - sysmetrics.IDLE_HOST_PCT:
            kind, cause = "cpu", "cpu_contention"
            ev.append(f"The training process used only {proc:.2f} cores but the machine's CPU was "
                      f"{system['cpu_mean_pct']:.0f}% busy: other processes take the cores the input pipeline needs.")
        elif system.get("net_recv_MBps", 0) > 10 * max(system.get("disk_read_MBps", 0), 0.1):
            kind, cause = "network", "remote_read"
            ev.append("The CPU was mostly idle while the step waited, and the host was receiving from the network: "
                      "remote reads limit the input.")
        else:
            kind, cause = "io", "file_read"
            ev.append(f"The training process used only {proc:.2f} cores while the step waited: the input pipeline "
                      "is waiting on storage (or another slow source), not computing.")
    else:
        category = st.category if st else "compute"
        if category == "file_read":
            kind, cause = "io", "file_read"
            ev.append("The blocking stage reads files: the pipeline waits on storage.")
        elif category == "remote_read":
            kind, cause = "network", "remote_read"
            ev.append("The blocking stage reads over the network (tf.data service or remote file system).")
        else:
            kind, cause = "cpu", "input_preprocessing"
            if category == "python" or (pipeline and pipeline.uses_py_function):
                penalty = 0.25
                ev.append("The blocking stage runs Python (from_generator / py_function): the trace cannot tell "
                          "computing from waiting inside it. Record system metrics (BottleneckProfiler) to separate "
                          "CPU-bound from I/O-bound.")
            else:
                ev.append("The blocking stage computes (map/decode/augment on host threads).")
    return Verdict(kind, cause, _conf(inp, INPUT_BOUND_PCT, penalty), ev, input_recommendations(pipeline, kind))
