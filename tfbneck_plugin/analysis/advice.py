"""The advice catalogue: for each cause code, the changes that help, specific to the input
pipeline and the device the findings describe.

A recommendation is ``{"fix": <id>, "title", "detail", "code": <snippet or None>}``; ``fix``
names the kind of change (``parallel_map``, ``prefetch``, ``steps_per_execution``...) so
that scripts and the what-if model can refer to it.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from ..schema import Recommendation
from .cpu_share import INPUT_DOUBT_GAIN, input_cores_ms, input_load
from . import torch_advice
from .findings import Findings
from .tfdata import Stage

Rec = Recommendation


def rec(fix: str, title: str, detail: str, code: Optional[str] = None) -> Rec:
    """One recommendation: ``fix`` (kind of change), ``title``, ``detail``, ``code`` (snippet or None)."""
    return {"fix": fix, "title": title, "detail": detail, "code": code}


def _sequential(st: Optional[Stage]) -> bool:
    # Stages without num_parallel_calls run one element at a time; parallel ones record
    # their parallelism (1 = sequential).
    return st is not None and (st.kind in ("Map", "Interleave", "FlatMap") or st.parallelism in (1, "1"))


def _generator_input() -> List[Rec]:
    return [
        rec("pydataset_workers", "Let the Python input run in several workers",
            "The batches come from Python (a Keras PyDataset / Sequence or a generator, read through "
            "Dataset.from_generator): one thread under the GIL. A PyDataset can prepare batches in several "
            "workers, several batches ahead: processes for Python that computes, threads for Python that "
            "waits (reads, sleeps).",
            "class Batches(keras.utils.PyDataset):\n"
            "    def __init__(self, ..., **kwargs):\n"
            "        super().__init__(workers=8, use_multiprocessing=True, max_queue_size=16, **kwargs)"),
        rec("tfdata_ops", "Convert the Python input to tf.data ops",
            "tf.data ops run in parallel outside the GIL; from_tensor_slices / list_files + a map of "
            "TensorFlow ops replaces the Python loop.",
            "ds = tf.data.Dataset.from_tensor_slices((paths, labels))\n"
            "ds = ds.map(load_fn, num_parallel_calls=tf.data.AUTOTUNE).batch(bs).prefetch(tf.data.AUTOTUNE)"),
    ]


def _compute_input(f: Findings) -> List[Rec]:
    p = f.pipeline
    st = p.blocking if p else None
    out = []
    if p is not None and p.mostly_python:
        out.append(rec("no_py_function", "Replace Python in the input pipeline with TensorFlow ops",
                       "tf.py_function / Dataset.from_generator run Python under the GIL on one core; "
                       "TensorFlow ops in a map run in parallel and without Python.",
                       "ds = ds.map(parse_fn, num_parallel_calls=tf.data.AUTOTUNE)  # tf ops, not py_function"))
    if st is not None and _sequential(st):
        out.append(rec("parallel_map", f"Parallelise the `{st.kind}` stage",
                       "This stage runs one element at a time. Let tf.data run it on all cores.",
                       "ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)\n"
                       "# deterministic=False is faster still, but elements may then come out of order"))
    out += [rec("vectorise_map", "Vectorise: batch before the map",
                "One map call per batch instead of per element amortises per-call overhead; most image "
                "and tensor ops accept a batch dimension.",
                "ds = ds.batch(batch_size).map(preprocess_batch, num_parallel_calls=tf.data.AUTOTUNE)"),
            rec("cache", "Cache deterministic preprocessing",
                "If the expensive work is the same every epoch, do it once and cache the result (in "
                "memory, or on local disk with a filename), right after the loading and decoding and before "
                "any random augmentation. The first epoch fills the cache: the gain starts with the second.",
                "ds = load_and_decode(...)  # e.g. keras.utils.image_dataset_from_directory(...), or a decode map\n"
                "ds = ds.cache()            # or ds.cache('/local/disk/file') when it does not fit in memory\n"
                "ds = ds.shuffle(buffer).map(random_augment)  # what must differ each epoch stays after it")]
    if f.device_kind in ("GPU", "TPU"):
        out.append(rec("augment_on_device", "Move augmentation onto the accelerator",
                       "Keras preprocessing layers inside the model run on the GPU/TPU with the model.",
                       "model = keras.Sequential([keras.layers.RandomFlip(), keras.layers.RandomRotation(0.1), "
                       "base_model])"))
    return out


def _read_input(kind: str) -> List[Rec]:
    if kind == "network":
        return [rec("parallel_reads", "Prefetch remote reads deeper and in parallel",
                    "Remote storage has high latency per request: keep many reads in flight.",
                    "ds = files.interleave(tf.data.TFRecordDataset, cycle_length=32, block_length=1,\n"
                    "                      num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)"),
                rec("local_copy", "Stage data on local disk",
                    "Copy the shards to local SSD before training, or cache after the first epoch.",
                    "ds = ds.cache('/local_ssd/cache')")]
    return [rec("parallel_reads", "Read files in parallel with interleave",
                "Many small files or a slow file system: overlap reads of several files.",
                "files = tf.data.Dataset.list_files(pattern, shuffle=True)\n"
                "ds = files.interleave(tf.data.TFRecordDataset, cycle_length=16,\n"
                "                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)\n"
                "# deterministic=False: records of different files interleave in whatever order they arrive"),
            rec("larger_files", "Use fewer, larger files",
                "Pack small files into TFRecord shards of 100-200 MB: one open per shard instead of per example."),
            rec("cache", "Cache after the read",
                "If the data fits in memory or on local disk, read it from slow storage once.",
                "ds = ds.cache('/local_ssd/cache')  # or .cache() for memory")]


def more_cores() -> Rec:
    """The change left when the input's work already fills the cores it can have."""
    return rec("more_cores", "Give training more cores",
               "The training process tree already keeps the cores it can use busy: a machine (or container "
               "limit, or taskset) with more cores, or preprocessing done once ahead of training, is what "
               "shortens the step.", None)


def input_advice(f: Findings, kind: str) -> List[Rec]:
    """Recommendations for an input-bound step; ``kind`` is the verdict's bottleneck kind.

    Fitted to the input the user wrote: a Python source (PyDataset, Sequence, generator)
    gets its own knobs, never "add prefetch", which such a pipeline cannot take; an
    in-memory source never gets file-read advice. The change to the stage that limits
    comes before prefetch (on a 2-core host, parallelising a sequential heavy map gained
    45 %, prefetch alone 10 %, measured)."""
    source = f.pipeline.source if f.pipeline else None
    if source == "generator":
        return _generator_input()
    out = _read_input(kind) if kind in ("io", "network") and source != "in_memory" else _compute_input(f)
    if kind == "cpu" and input_cores_ms(f) is not None:
        # Its work holds cores the model's math needs: less work, or more cores, shortens the step.
        out.append(more_cores())
    if f.pipeline is not None and not f.pipeline.has_prefetch:
        out.insert(min(1, len(out)), rec(
            "prefetch", "Add prefetch at the end of the pipeline",
            "Without prefetch the model waits while the next batch is prepared; with it, preparation overlaps "
            "the training step.", "ds = ds.prefetch(tf.data.AUTOTUNE)"))
    return out


def _contention(f: Findings) -> List[Rec]:
    return [rec("free_cores", "Give the input pipeline its cores back",
                "Other processes kept the CPU busy while the step waited for input. Run training where it does "
                "not share cores, stop or renice the other work, or bound tf.data's threads to the cores you own.",
                "options = tf.data.Options()\noptions.threading.private_threadpool_size = 4\n"
                "ds = ds.with_options(options)")] + input_advice(f, "cpu")


def _sync(_f: Findings) -> List[Rec]:
    return [rec("fewer_syncs", "Overlap and shrink gradient synchronisation",
                "Larger batches per replica (fewer syncs per example), gradient compression (fp16 all-reduce), and "
                "a faster interconnect or fewer hosts per all-reduce group.",
                "strategy = tf.distribute.MultiWorkerMirroredStrategy(\n"
                "    communication_options=tf.distribute.experimental.CommunicationOptions(\n"
                "        bytes_per_pack=50 * 1024 * 1024, "
                "implementation=tf.distribute.experimental.CommunicationImplementation.NCCL))")]


def _transfer(_f: Findings) -> List[Rec]:
    return [rec("prefetch_to_device", "Keep data on the device",
                "Prefetch batches to the GPU and avoid values going back to the host every step.",
                "ds = ds.apply(tf.data.experimental.prefetch_to_device('/gpu:0'))")]


#: A custom loop's "several steps per call": a loop over batches inside one tf.function
#: (what Keras' steps_per_execution does inside ``fit``), counted as 32 batches per step.
_LOOP_IN_FUNCTION = ("@tf.function\ndef train_steps(iterator, n):\n    for _ in tf.range(n):  # a graph loop, "
                     "one Python call\n        x, y = next(iterator)\n        train_step(x, y)\n\n"
                     "it = iter(ds)\nfor _ in range(num_batches // 32):\n    with profiler.step(batches=32):\n"
                     "        train_steps(it, tf.constant(32))")


def _several_steps(f: Findings, why: str) -> Rec:
    if f.steps.custom_loop:
        return rec("steps_per_execution", "Run several steps per tf.function call",
                   why + " In a custom loop: keep the step in a tf.function and loop over several batches inside "
                   "it (a graph loop with tf.range), one Python call per group of batches.", _LOOP_IN_FUNCTION)
    return rec("steps_per_execution", "Run several steps per call", why,
               "model.compile(optimizer, loss, steps_per_execution=32)")


def _launch(f: Findings) -> List[Rec]:
    xla = ("@tf.function(jit_compile=True)\ndef train_step(x, y):\n    ..." if f.steps.custom_loop else
           "model.compile(optimizer, loss, jit_compile=True)  # or @tf.function(jit_compile=True)")
    return [rec("xla", "Launch fewer, bigger kernels",
                "Compile the step with XLA to fuse small ops, and raise the batch size so each kernel does more work.",
                xla),
            _several_steps(f, "Fewer Python round trips per batch.")]


def _python(f: Findings) -> List[Rec]:
    return [_several_steps(f, "Amortise Python and callback overhead over many batches.")]


def _eager(_f: Findings) -> List[Rec]:
    # The trace looks the same for fit(run_eagerly=True) and an eager custom loop: both are
    # named. No jit_compile: the prediction (whatif._tf_function) models TensorFlow's graph
    # executor, and XLA is a further, separate change.
    return [rec("tf_function", "Compile the step: drop run_eagerly=True, or wrap the loop's step in tf.function",
                "Eager op-by-op execution pays Python and dispatch cost on every op. With model.fit, compile "
                "without run_eagerly=True (fit then runs one compiled function per step); in a custom loop, "
                "decorate the step with tf.function.",
                "model.compile(optimizer, loss)   # model.fit: not run_eagerly=True\n"
                "# a custom training loop:\n@tf.function\ndef train_step(x, y):\n    ...")]


def _retracing(_f: Findings) -> List[Rec]:
    return [rec("tensor_arguments", "Pass tensors, not Python values, to the tf.function",
                "Every new Python int, float or list length is a new trace; a tensor of the same shape and dtype "
                "reuses the graph.",
                "step = tf.constant(0)\nfor x, y in ds:\n    train_step(x, y, step)  # not train_step(x, y, i)\n"
                "    step += 1"),
            rec("input_signature", "Fix the signature",
                "An input_signature makes tf.function trace once for every value of that shape and dtype.",
                "@tf.function(input_signature=[tf.TensorSpec([None, 32], tf.float32), tf.TensorSpec([], tf.int64)])\n"
                "def train_step(x, step):\n    ..."),
            rec("reduce_retracing", "Let tf.function generalise shapes",
                "reduce_retracing=True traces a shape-generic graph after the first few shapes.",
                "@tf.function(reduce_retracing=True)\ndef train_step(x, y):\n    ...")]


def _compute(f: Findings) -> List[Rec]:
    if f.eager:
        return [rec("tf_function", "Compile the model call with tf.function",
                    "Eager execution dispatches each op from Python; a tf.function runs the whole graph in C++ "
                    "and can fuse ops with XLA.",
                    "@tf.function(jit_compile=True)\ndef predict(x):\n    return model(x, training=False)")]
    xla = ("@tf.function(jit_compile=True)\ndef train_step(x, y):\n    ..." if f.steps.custom_loop
           else "model.compile(optimizer, loss, jit_compile=True)")
    if f.device_kind == "CPU":
        if f.xla:  # the step is compiled already: what limits it now, and whether XLA paid
            return [_measure_xla(f), _use_gpu()]
        # A GPU first, as on Keras' other backends: XLA on the CPU is a gamble (XLA_ON_CPU_WARNING),
        # and two held-out tutorial scripts given it first ran 3.1x and 9x slower (docs/accuracy.md).
        out = [_use_gpu(), rec("xla", "Try XLA on the model math, and measure it",
                               "On the CPU, XLA compilation may help or hurt: " + XLA_ON_CPU_WARNING
                               + " Keep it only if the job's own step time falls.", xla + "\n" + _MEASURE_IT)]
        return input_first_if_it_holds_the_cores(f, out, input_advice)
    return [rec("mixed_precision", "Use mixed precision",
                "Tensor cores run fp16/bf16 math several times faster than fp32.",
                "keras.mixed_precision.set_global_policy('mixed_float16')"),
            rec("xla", "Compile with XLA", "Fuses ops, fewer kernels and memory round trips.", xla)]


#: What XLA did on a CPU-only host: benchmarks/xla_pairs.py's 11 pairs (the same model and
#: input with jit_compile off and on, 9 through model.compile and 2 custom loops through
#: tf.function; a shared 2-core machine; the fastest of 7 interleaved rounds a side, in
#: docs/accuracy.md): 5 faster (up to 2.04x, a TextVectorization GRU), 5 slower (every CNN,
#: down to 0.30x the speed, and a 1x128 MLP), 1 unclear. No model predicts which
#: (whatif.WHY_NOT["xla"]): hence "measure it".
XLA_ON_CPU_WARNING = ("of 11 models measured with jit_compile off and on on a 2-core CPU host, XLA slowed five "
                      "(every CNN among them, down to 0.30x the speed) and sped five up (up to 2.04x).")
#: The "measure it" step that comes with a change whose worth the trace cannot predict.
_MEASURE_IT = ("# measure it: the job's own step time with and without the change, over the same steps\n"
               "# (tfbneck compare logs_before logs_after), before keeping it")


def _measure_xla(f: Findings) -> Rec:
    code = ("@tf.function(jit_compile=False)\ndef train_step(x, y):\n    ..." if f.steps.custom_loop
            else "model.compile(optimizer, loss, jit_compile=False)")
    return rec("measure_xla", "Check that XLA pays here: run the same steps without it",
               "The step already runs XLA executables. On the CPU XLA may help or hurt: " + XLA_ON_CPU_WARNING
               + " Time the job's steps with jit_compile=False and keep the faster.", code + "\n" + _MEASURE_IT)


def input_first_if_it_holds_the_cores(f: Findings, out: List[Rec],
                                      input_recs: Callable[[Findings, str], List[Rec]]) -> List[Rec]:
    """A CPU-computed model's recommendations ``out``, after the input's (``input_recs(f, "cpu")``)
    when the input's work holds enough of the cores to be worth more than the math's fixes
    (:func:`.cpu_share.input_load`'s speedup at least :data:`.cpu_share.INPUT_DOUBT_GAIN`)."""
    load = input_load(f)
    return input_recs(f, "cpu") + out if load is not None and load.speedup >= INPUT_DOUBT_GAIN else out


def _use_gpu(gpu: str = "a GPU (or a CPU with more cores, or oneDNN's bf16 paths on CPUs that have them)",
             check: str = "import tensorflow as tf\nprint(tf.config.list_physical_devices('GPU'))") -> Rec:
    """Move the model's math off the CPU: ``gpu`` names what shortens the step in the
    framework's words, ``check`` is the code that shows whether one is there."""
    return rec("use_gpu", "Run the model math on a GPU",
               f"The CPU does the model's math, which is the limit: {gpu} shortens the step; a smaller model or batch "
               "does less work per step.", check)


def _capture(_f: Findings) -> List[Rec]:
    return [rec("fix_device_trace", "Fix the device trace capture",
                "The profiler could not record GPU activity (CUPTI). Check that libcupti from your CUDA "
                "version is on LD_LIBRARY_PATH and that profiling is permitted for non-root users "
                "(NVIDIA driver option NVreg_RestrictProfilingToAdminUsers=0, or run in a container with "
                "--cap-add SYS_ADMIN). The profiler logs a CUPTI error at start when this fails.",
                "import tensorflow as tf\ntf.debugging.set_log_device_placement(True)  # then profile again")]


def _placement(_f: Findings) -> List[Rec]:
    return [rec("use_gpu", "Put the model on the GPU",
                "TensorFlow saw a GPU but the model's ops executed on host threads. Check placement and that the "
                "CUDA libraries TensorFlow needs are found.",
                "import tensorflow as tf\nprint(tf.config.list_physical_devices('GPU'))\n"
                "tf.debugging.set_log_device_placement(True)")]


def _markers(f: Findings) -> List[Rec]:
    if f.steps.found and not f.steps.inferred:
        # The steps are marked: what the trace lacks is the Python that ran inside them.
        return [rec("python_tracer", "Trace the Python inside the steps (profiler_options python_tracer_level=1)",
                    "The steps are marked, but most of each one passed with nothing recorded on the training "
                    "thread, the input pipeline or the device: Python the profiler does not trace by default (a "
                    "Keras callback such as on_train_batch_end, a custom loop's own code, a sleep, a lock). "
                    "Profile again with the Python tracer on: the Trace Viewer then names the functions.",
                    "BottleneckProfiler('logs', profile_steps=(10, 14), profiler_options={'python_tracer_level': 1})")]
    return [rec("step_markers", "Profile with the step markers",
                "BottleneckProfiler wraps each profiled step in a step marker and records system metrics.",
                "from tfbneck_plugin import BottleneckProfiler\n"
                "model.fit(ds, callbacks=[BottleneckProfiler('logs', profile_steps=(10, 20))])")]


#: How to profile a few steps of a model.fit (two recommendations give it).
_PROFILE_FIT_CODE = ("from tfbneck_plugin import BottleneckProfiler\n"
                     "model.fit(ds, epochs=3, callbacks=[BottleneckProfiler('logs', profile_steps=(10, 14))])")


def _idle_window(_f: Findings) -> List[Rec]:
    return [rec("profile_training_steps", "Profile steps in which training runs",
                "Nothing ran in this window: the profiler started before the first batch, after the last one, "
                "or in a process that does not train. Choose steps well inside training (after the first "
                "epoch's start-up), and profile the process that runs fit or the training loop.",
                _PROFILE_FIT_CODE)]


def _other_framework(_f: Findings) -> List[Rec]:
    return [rec("use_xprof", "Read this trace with a tool for its framework",
                "tfbneck diagnoses TensorFlow training; this trace comes from JAX/XLA, whose input pipeline and "
                "steps it cannot read. XProf (TensorBoard's Profile tab) opens any XSpace: its overview and "
                "Trace Viewer apply here.",
                "pip install tensorboard-plugin-profile\ntensorboard --logdir logs   # then the Profile tab")]


#: What a profiling window would show after each first diagnosis of the system metrics.
_PROFILE_SHOWS = {
    "cpu": "split the CPU's time between input preparation (tf.data, Python) and the model's math",
    "device": "see which operations fill the accelerator (mixed precision, XLA and kernels are the gains)",
    "io": "find which reads the input pipeline waits on",
    "network": "see whether gradient synchronisation or remote reads take the time",
    "unclear": "see what limits the step, which the system metrics alone cannot",
}


def profile_window(kind: str, pid: Optional[int] = None) -> List[Rec]:
    """The next step after a system-only session's triage ``kind`` (``cpu``, ``device``,
    ``io``, ``network``, ``unclear``): profile a window, from the code or from outside."""
    return [rec("profile_window", "Profile a few steps where the triage points",
                f"The system metrics give a first diagnosis only; a profiling window's trace would "
                f"{_PROFILE_SHOWS[kind]}. Add BottleneckProfiler to the training, or capture from the running "
                "process when it runs TensorFlow's profiler server.",
                _PROFILE_FIT_CODE + "\n"
                "# or, without changing the code, when the process runs a profiler server on port 6009:\n"
                f"# tfbneck watch --pid {pid or 'PID'} --capture-port 6009 --logdir logs")]


#: cause code -> recommendations for it.
ADVICE: Dict[str, Callable[[Findings], List[Rec]]] = {
    "input_preprocessing": lambda f: input_advice(f, "cpu"),
    "cpu_contention": _contention,
    "file_read": lambda f: input_advice(f, "io"),
    "remote_read": lambda f: input_advice(f, "network"),
    "gradient_sync": _sync,
    "host_device_transfer": _transfer,
    "kernel_launch": _launch,
    "python_overhead": _python,
    "eager_execution": _eager,
    "retracing": _retracing,
    "model_compute": _compute,
    "device_trace_missing": _capture,
    "model_on_cpu": _placement,
    "unrecorded": _markers,
    "no_activity": _idle_window,
    "not_tensorflow": _other_framework,
    "triage_cpu": lambda _f: profile_window("cpu"),
    "triage_device": lambda _f: profile_window("device"),
    "triage_io": lambda _f: profile_window("io"),
    "triage_network": lambda _f: profile_window("network"),
    "triage_unclear": lambda _f: profile_window("unclear"),
}


# -- Keras on JAX ---------------------------------------------------------------------------
# A Keras fit on JAX (analysis.jax_host) has Keras' knobs and JAX's, not TensorFlow's: its step
# is one jax.jit-compiled XLA executable (Keras' JAX trainer jit-compiles unless run_eagerly=True
# or a layer lacks XLA support: keras/src/backend/jax/trainer.py, :func:`_jax_jit`), its input is whatever Keras iterates
# (keras/src/trainers/data_adapters/), and a tf.data pipeline fed to it is still tf.data.

#: Input causes: what the step waits on is the input, whose knobs depend on what feeds the fit.
_INPUT_CAUSES = ("input_preprocessing", "file_read", "remote_read", "cpu_contention")


def _keras_workers(f: Findings) -> List[Rec]:
    """A Python input (generator, PyDataset...) in a fit that is not on TensorFlow: Keras'
    own worker knobs (``keras.utils.PyDataset(workers, use_multiprocessing, max_queue_size)``)."""
    what = {"generator": "a Python generator, which Keras reads on the training thread",
            "PyDataset": "a keras.utils.PyDataset", "arrays": "in-memory arrays"}.get(
        f.keras_input or "", "Python code Keras iterates")
    return [rec("pydataset_workers", "Load batches ahead in worker processes: a keras.utils.PyDataset with workers",
                f"The step waits for its batch, which comes from {what}. A PyDataset with workers loads batches "
                "ahead of the step, in parallel (processes with use_multiprocessing=True, outside the GIL), and "
                "works on every Keras backend; raise workers while the step still waits and cores are free.",
                "class Batches(keras.utils.PyDataset):\n"
                "    def __init__(self, **kwargs):\n"
                "        super().__init__(workers=4, use_multiprocessing=True, max_queue_size=16, **kwargs)\n"
                "    def __len__(self):\n        return num_batches\n"
                "    def __getitem__(self, i):\n        return load_batch(i)   # one batch per index\n\n"
                "model.fit(Batches(), epochs=3)")]


def _jax_several_steps(why: str) -> Rec:
    return rec("steps_per_execution", "Run several steps per call", why + " On JAX, Keras then runs the "
               "batches of one call from a single Python round trip.",
               "model.compile(optimizer, loss, steps_per_execution=32)")


def _jax_jit(f: Findings) -> str:
    """How Keras runs the step on JAX: with ``jax.jit``, unless the model holds layers without
    XLA support (``f.keras_no_xla``): ``jit_compile="auto"`` then resolves to False
    (keras/src/trainers/trainer.py, ``model_supports_jit``) and the step's ops run one by one."""
    if not f.keras_no_xla:
        return "Keras already compiles the step with jax.jit"
    return (f"Keras runs this step without jax.jit, op by op, since the model holds {', '.join(f.keras_no_xla)}, "
            "which do not support XLA: move them into the input pipeline (a tf.data map) so Keras can jit the step")


def _jax_compute(f: Findings) -> List[Rec]:
    if f.device_kind == "CPU":
        out = [_use_gpu("a GPU (JAX's CUDA wheels), or a CPU with more cores,",
                        "pip install -U 'jax[cuda12]'   # then, in Python:\nimport jax\nprint(jax.devices())"),
               rec("xla_cpu_threads", "Let XLA use every core for the model math",
                   f"{_jax_jit(f)}; on the CPU, XLA's own threads run it. Check that the process may use every "
                   "core (no taskset or container limit below the machine's) and that nothing else holds them.",
                   "import os\nprint(len(os.sched_getaffinity(0)), 'cores available')")]
        return input_first_if_it_holds_the_cores(f, out, _jax_input)
    return [rec("mixed_precision", "Use mixed precision",
                "bfloat16/float16 math runs several times faster than float32 on GPUs and TPUs.",
                "keras.mixed_precision.set_global_policy('mixed_bfloat16')"),
            rec("xla_flags", "Tune XLA for the device",
                f"{_jax_jit(f)}: XLA's flags tune what it emits (e.g. latency-hiding scheduling on GPUs); "
                "measure each.",
                "XLA_FLAGS='--xla_gpu_enable_latency_hiding_scheduler=true' python train.py\n" + _MEASURE_IT)]


def _unseen_tf_data() -> Rec:
    """A tf.data pipeline feeding a fit on JAX or PyTorch: TensorFlow's profiler did not run, so
    its stages are not in the trace; what to do is time it alone, then change its slow stage."""
    return rec("time_tf_data", "Time the tf.data pipeline alone, then parallelise or cache its slow stage",
               "The step waits for batches from a tf.data pipeline, whose stages are not in this trace (TensorFlow's "
               "profiler does not run beside JAX's or PyTorch's). Iterate it without the model: if that alone is "
               "as slow as a step, run its maps with num_parallel_calls=tf.data.AUTOTUNE, cache() what does not "
               "change between epochs, and end it with prefetch.",
               "import time\nt0 = time.perf_counter()\nfor _ in ds.take(100):\n    pass\n"
               "print((time.perf_counter() - t0) / 100 * 1000, 'ms per batch, the pipeline alone')\n"
               "ds = ds.map(f, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)")


def _jax_input(f: Findings, kind: str) -> List[Rec]:
    if f.keras_input == "tf.data":  # the pipeline is tf.data whatever model it feeds
        return input_advice(f, kind) if f.pipeline is not None else [_unseen_tf_data()]
    return _keras_workers(f)


def _jax_transfer(_f: Findings) -> List[Rec]:
    return [rec("smaller_inputs", "Send fewer bytes to the device per batch",
                "Copies to the device hold the step: feed compact dtypes (uint8 images, int32 token ids) and cast "
                "or normalise inside the model, on the device.",
                "x = x.astype('uint8')   # in the input; then in the model:\n"
                "inputs = keras.Input(shape, dtype='uint8'); h = keras.layers.Rescaling(1 / 255)(inputs)")]


#: cause code -> recommendations for a Keras fit on JAX; causes not listed use :data:`ADVICE`,
#: less the recommendations whose code is TensorFlow's (:func:`_without_tensorflow`).
JAX_ADVICE: Dict[str, Callable[[Findings], List[Rec]]] = {
    "input_preprocessing": lambda f: _jax_input(f, "cpu"),
    "file_read": lambda f: _jax_input(f, "io"),
    "remote_read": lambda f: _jax_input(f, "network"),
    "cpu_contention": lambda f: ([_contention(f)[0]] if f.keras_input == "tf.data" else []) + _jax_input(f, "cpu"),
    "kernel_launch": lambda f: [_jax_several_steps("Fewer Python round trips and launches per batch.")],
    "python_overhead": lambda f: [_jax_several_steps("Amortise Python and callback overhead over many batches.")],
    "model_compute": _jax_compute,
    "host_device_transfer": _jax_transfer,
}


# -- Keras on PyTorch -------------------------------------------------------------------------
# A Keras fit on PyTorch feeds the step through Keras' own DataLoader wrapper around what the
# user passed (keras/src/trainers/data_adapters/), so DataLoader(num_workers=...) is not the
# user's knob; jit_compile=True compiles the train step with torch.compile, and
# steps_per_execution must stay 1 (keras/src/backend/torch/trainer.py).

def _keras_torch_compile(why: str) -> Rec:
    return rec("torch_compile", "Compile the train step: model.compile(..., jit_compile=True)",
               why + " On Keras' PyTorch backend jit_compile=True compiles the train step with torch.compile "
               "(steps_per_execution must stay 1 there); measure it, compilation takes time and does not always pay.",
               "model.compile(optimizer, loss, jit_compile=True)")


def _keras_torch_input(f: Findings, kind: str) -> List[Rec]:
    return _jax_input(f, kind)  # the same knobs: Keras' own, or tf.data's for a tf.data input


def _keras_torch_compute(f: Findings) -> List[Rec]:
    if f.device_kind == "CPU":
        out = [_use_gpu("a GPU (a CUDA build of PyTorch) or more cores",
                        "import torch\nprint(torch.cuda.is_available())   # Keras' PyTorch backend uses the GPU when True"),
               _keras_torch_compile("On the CPU, torch.compile fuses and vectorises the step's ops.")]
        return input_first_if_it_holds_the_cores(f, out, _keras_torch_input)
    return [rec("mixed_precision", "Use mixed precision",
                "bfloat16/float16 math runs several times faster than float32 on GPUs.",
                "keras.mixed_precision.set_global_policy('mixed_bfloat16')"),
            _keras_torch_compile("Fuses ops: fewer kernels and fewer round trips to GPU memory.")]


def _keras_torch_overhead(_f: Findings) -> List[Rec]:
    return [_keras_torch_compile("Python and op-by-op dispatch take the step's time."),
            rec("larger_batch", "Raise the batch size",
                "Each step's fixed Python and dispatch cost is then shared by more examples.", None)]


def _keras_torch_unrecorded(_f: Findings) -> List[Rec]:
    """Most of the step unrecorded in a Keras fit on PyTorch: Keras' own Python between
    PyTorch's ops, which torch.profiler records only with stacks, which the callback does not
    turn on there (it slowed that step 5x: docs/keras_backends.md)."""
    return [_keras_torch_compile("Most of each step passed with nothing recorded: Keras' own Python between "
                                 "PyTorch's ops, which PyTorch's profiler does not record by default. Compiling "
                                 "the step removes most of it."),
            rec("keras_other_backend", "See the step's Python on another Keras backend",
                "The same script with KERAS_BACKEND=tensorflow or jax is profiled with every op and Python's share "
                "recorded: if its verdict is python_overhead there, the Python around the step is the limit here "
                "too.", "KERAS_BACKEND=jax python train.py   # the same BottleneckProfiler, another backend")]


#: cause code -> recommendations for a Keras fit on PyTorch (a Kineto trace whose sidecar
#: records the Keras backend); causes not listed use PyTorch's own (:mod:`.torch_advice`).
KERAS_TORCH_ADVICE: Dict[str, Callable[[Findings], List[Rec]]] = {
    "input_preprocessing": lambda f: _keras_torch_input(f, "cpu"),
    "file_read": lambda f: _keras_torch_input(f, "io"),
    "remote_read": lambda f: _keras_torch_input(f, "network"),
    "cpu_contention": lambda f: _keras_torch_input(f, "cpu"),
    "python_overhead": _keras_torch_overhead,
    "eager_execution": _keras_torch_overhead,
    "kernel_launch": _keras_torch_overhead,
    "model_compute": _keras_torch_compute,
    "unrecorded": _keras_torch_unrecorded,
}


def _without_tensorflow(recs: List[Rec]) -> List[Rec]:
    """The recommendations whose code uses no TensorFlow API."""
    return [r for r in recs if "tf." not in (r.get("code") or "") and "tensorflow" not in (r.get("code") or "")]


def advice_for(cause: str, f: Findings) -> List[Rec]:
    """The recommendations for ``cause`` (a key of ``tfbneck_plugin.causes.CAUSES``), in
    PyTorch's words for a PyTorch run (:mod:`.torch_advice`), in Keras' for a Keras fit on
    PyTorch (:data:`KERAS_TORCH_ADVICE`), in Keras' and JAX's for a Keras fit on JAX
    (:data:`JAX_ADVICE`); a tf.data input keeps tf.data's advice. A Keras model that holds
    layers without XLA support gets its compiler fix with those layers moved out first
    (:func:`_layers_out_first`)."""
    return [_layers_out_first(r, f) for r in _advice(cause, f)]


def _advice(cause: str, f: Findings) -> List[Rec]:
    if f.framework == "pytorch":
        if f.keras_input is not None and cause in KERAS_TORCH_ADVICE:
            return KERAS_TORCH_ADVICE[cause](f)
        return torch_advice.advice_for(cause, f)
    if f.framework == "jax" and f.steps.found:
        if cause in JAX_ADVICE:
            return JAX_ADVICE[cause](f)
        recs = ADVICE[cause](f)
        return recs if (f.keras_input == "tf.data" and cause in _INPUT_CAUSES) else _without_tensorflow(recs)
    return ADVICE[cause](f)


#: The fixes Keras' ``jit_compile=True`` makes (XLA on TensorFlow, torch.compile on PyTorch).
_JIT_COMPILE_FIXES = ("xla", "torch_compile")


def _layers_out_first(r: Rec, f: Findings) -> Rec:
    """``r`` unchanged, or, for a ``jit_compile`` fix of a Keras 3 model holding layers without
    XLA support (``f.keras_no_xla``, recorded by the callback: :mod:`tfbneck_plugin.capture.model_info`),
    the same fix with those layers taken out of the model first: with them Keras compiles the
    model without it whatever ``jit_compile`` says (keras/src/trainers/trainer.py,
    ``model_supports_jit``: it warns and proceeds with ``jit_compile=False``). Keras' preprocessing
    layers run in a tf.data ``map`` on every backend (its TFDataLayer)."""
    if r.get("fix") not in _JIT_COMPILE_FIXES or not f.keras_no_xla:
        return r
    names = ", ".join(f.keras_no_xla)
    move = (f"# Keras compiles the model without jit_compile while it holds {names}: move them into the input\n"
            "preprocess = keras.Sequential([...])   # those layers, taken out of the model\n"
            "ds = ds.map(lambda x, y: (preprocess(x, training=True), y), num_parallel_calls=tf.data.AUTOTUNE)\n")
    return {**r, "title": f"Take {names} out of the model, then: {r['title']}",
            "detail": (f"The model holds {names}, which do not support XLA: Keras then compiles it without "
                       "jit_compile=True (it warns and proceeds without), so the switch alone changes nothing. "
                       "Run those layers in the input pipeline instead. " + r["detail"]),
            "code": move + (r.get("code") or "")}
