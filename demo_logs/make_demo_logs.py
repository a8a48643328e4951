"""Make the demo logdirs: small, real TensorFlow training jobs on the CPU, each profiled for
five steps (unless said) by ``BottleneckProfiler`` (trace + system metrics).

Usage (needs ``pip install '.[tensorflow]'``):

    python demo_logs/make_demo_logs.py [OUTDIR] [--only JOB,JOB...]   # default: demo_logs/, every job
    python demo_logs/make_demo_logs.py --pairs-table [LOGDIR]         # docs/accuracy.md's predicted-vs-measured table

Each job runs in its own Python process (TensorFlow's profiler is one per process) and
writes ``OUTDIR/<job>/plugins/profile/<session>/``. ``EXPECTED.json`` records the verdict
each job is built to produce; the tests check ``tfbneck analyze`` against it.
``PAIRS.json`` names the before/after pairs (below): the tests check that the before-run's
recommendation for the change made predicts the after-run's time per batch.

The committed runs were made on a 2-core VM shared with other jobs (load 5-8), each job's
session raised to autogroup nice -19 so that training had the cores, as on a machine of its own.

The jobs (Keras 3, batch 32 unless said, a dense model on 512 features):

``cpu_bound_input``     a tf.data map doing heavy math per batch (200 passes of sin/cos),
                        sequential (no ``num_parallel_calls``, and tf.data's automatic
                        map parallelisation turned off), no prefetch of its own (tf.data
                        injects one): the model waits for the host to prepare each batch.
                                                                      -> cpu / input_preprocessing
``cpu_bound_input_fixed`` the same model and batch, the input fixed: the same map with
                        ``num_parallel_calls=AUTOTUNE``, ``cache()`` of the deterministic
                        part, ``repeat()`` and ``prefetch``; profiled in the second pass over
                        the data (steps 30-34 of 24 batches a pass), when every batch comes
                        from the full cache, as in the rest of a longer run.
                                                                      -> device / model_compute
``compute_bound``       cheap, cached input and a wide model (4 x 2048 units): the CPU does
                        the model's math all step long.              -> device / model_compute
``slow_file_reads``     2,000 small files (2 KB each) read one by one by a Python generator,
                        each open delayed 3 ms to stand for a network file system's latency
                        (the trace shows the generator blocking the step; the system
                        metrics show the CPU idle meanwhile).        -> io / file_read

The before/after pairs, each changing ONE thing (made one after the other, so that both
runs of a pair see the same machine; system metrics sampled every 50 ms):

``pair_map_sequential``  a heavy map (7 passes of sin/cos over the batch widened 4 times),
                         batch 128, a 2 x 512-unit model; sequential, each call on one core
                         (intra-op parallelism 1), and tf.data's automatic prefetch injection
                         and map parallelisation turned off.
                                                                      -> cpu / input_preprocessing
``pair_map_parallel``    the same map with ``num_parallel_calls=AUTOTUNE`` and
                         ``prefetch(AUTOTUNE)``                  (fix ``parallel_map``)
``pair_map_prefetch``    the sequential map followed by ``prefetch(AUTOTUNE)`` (fix ``prefetch``)
                         Both fixes end the wait for input, yet on a 2-core host the map
                         still runs on the cores the model's math needs (the same model fed
                         its cached batches runs 1.37x and 1.41x faster).
                                                                      -> cpu / input_preprocessing
``pair_spe1``            a tiny model (one 16-unit layer, SGD) on cached input, one batch per
                         call, 20 steps profiled: Keras' per-call overhead dominates.
                                                                      -> cpu / python_overhead
``pair_spe32``           the same with ``steps_per_execution=32``, the value the advice's code
                         gives (fix ``steps_per_execution``); 3 executions profiled. The
                         per-call overhead is amortised: the ops' math is the limit, with the
                         executor's gaps between the tiny ops as host overhead (15 % here; on
                         a machine busy with other work those gaps grow, and past 30 % the
                         verdict reads python_overhead).          -> device / model_compute
``pair_eager``           a 2 x 1024-unit model, batch 128, trained with ``run_eagerly=True``:
                         Python dispatching the ops one by one (host overhead and the
                         unrecorded gaps between the ops) takes half the step.
                                                                      -> cpu / eager_execution
``pair_compiled``        the same compiled (tf.function, no XLA)      (fix ``tf_function``)
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_INPUT = {"bottleneck": "cpu", "cause": "input_preprocessing"}
_COMPUTE = {"bottleneck": "device", "cause": "model_compute"}
JOBS = {
    "cpu_bound_input": _INPUT,
    "cpu_bound_input_fixed": _COMPUTE,
    "compute_bound": _COMPUTE,
    "slow_file_reads": {"bottleneck": "io", "cause": "file_read"},
    "pair_map_sequential": _INPUT,
    "pair_map_parallel": _INPUT,
    "pair_map_prefetch": _INPUT,
    "pair_spe1": {"bottleneck": "cpu", "cause": "python_overhead", "steps": 20},
    "pair_spe32": dict(_COMPUTE, steps=3),
    "pair_eager": {"bottleneck": "cpu", "cause": "eager_execution"},
    "pair_compiled": _COMPUTE,
}
#: Before/after pairs: the change made is the fix id of the before-run's recommendation.
PAIRS = {
    "parallel_map": {"before": "pair_map_sequential", "after": "pair_map_parallel"},
    "prefetch": {"before": "pair_map_sequential", "after": "pair_map_prefetch"},
    "steps_per_execution": {"before": "pair_spe1", "after": "pair_spe32"},
    "tf_function": {"before": "pair_eager", "after": "pair_compiled"},
}
PROFILE_STEPS = (6, 10)
#: Batches in one pass over each job's data (the map and cache jobs repeat it).
PASS_BATCHES = 24
#: cpu_bound_input_fixed's window: the same steps of the second pass, after the first pass
#: has filled the cache (in the first pass the parallel map still runs beside the step).
FIXED_PROFILE_STEPS = (PASS_BATCHES + PROFILE_STEPS[0], PASS_BATCHES + PROFILE_STEPS[1])
#: steps_per_execution of pair_spe32, and the windows of the pair: 20 steps of one batch
#: (steps of about a millisecond: more of them, for the comparison's test), and batches
#: 81-128, executions 6-8 of 16 batches.
SPE = 32
SPE1_PROFILE_STEPS = (6, 25)
SPE_PROFILE_STEPS = (SPE * 5 + 1, SPE * 8)
BATCH = 32
#: The pairs' windows last a few tenths of a second: sample the system often enough to see
#: each several times (the what-if models read the process tree's CPU use).
PAIR_SAMPLE_INTERVAL_S = 0.05
#: The map and eager pairs use larger batches: longer steps, so that the system sampler
#: (every 0.1 s) sees each window several times and the scheduler's noise averages out.
PAIR_BATCH = 128
FEATURES = 512


def batch_size(name: str) -> int:
    return PAIR_BATCH if name.startswith(("pair_map_", "pair_eager", "pair_compiled")) else BATCH


def heavy(x):
    import tensorflow as tf
    for _ in range(200):
        x = tf.math.sin(x) * 1.0001 + tf.math.cos(x) * 0.0001
    return x


def wide_heavy(x):
    """The pairs' map: the same kind of work as :func:`heavy` in fewer, larger ops (a
    smaller trace): 7 passes over a copy of the batch widened 4 times, about two thirds of
    the model's step on one core."""
    import tensorflow as tf
    y = tf.tile(x[:, :, None], [1, 1, 4])
    for _ in range(7):
        y = tf.math.sin(y) * 1.0001 + tf.math.cos(y) * 0.0001
    return tf.reduce_mean(y, axis=-1)


def _options(tf, prefetch_injection=True, one_thread_per_op=False):
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False  # keep the map sequential
    if not prefetch_injection:
        options.experimental_optimization.inject_prefetch = False  # no prefetch unless written
    if one_thread_per_op:  # each map call on one core: parallelism comes from num_parallel_calls only
        options.threading.max_intra_op_parallelism = 1
    return options


def _dataset(name, outdir, x, y, tf):
    """The job's input pipeline and (width, depth) of its dense model."""
    tensors = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size(name))
    if name == "cpu_bound_input":
        return tensors.map(lambda a, b: (heavy(a), b)).with_options(_options(tf)), (256, 2)
    if name == "cpu_bound_input_fixed":
        return (tensors.map(lambda a, b: (heavy(a), b), num_parallel_calls=tf.data.AUTOTUNE)
                .cache().repeat().prefetch(tf.data.AUTOTUNE)), (256, 2)
    if name == "compute_bound":
        return tensors.cache().repeat().prefetch(tf.data.AUTOTUNE), (2048, 4)
    if name == "slow_file_reads":
        return _slow_file_dataset(outdir, x, y, tf), (256, 2)
    if name.startswith("pair_map_"):
        seq = tensors.repeat()
        if name == "pair_map_parallel":
            ds = seq.map(lambda a, b: (wide_heavy(a), b), num_parallel_calls=tf.data.AUTOTUNE)
        else:
            ds = seq.map(lambda a, b: (wide_heavy(a), b))
        if name != "pair_map_sequential":
            ds = ds.prefetch(tf.data.AUTOTUNE)
        return ds.with_options(_options(tf, prefetch_injection=False, one_thread_per_op=True)), (512, 2)
    if name in ("pair_spe1", "pair_spe32"):
        return tensors.cache().repeat().prefetch(tf.data.AUTOTUNE), (16, 1)
    if name in ("pair_eager", "pair_compiled"):
        return tensors.cache().repeat().prefetch(tf.data.AUTOTUNE), (1024, 2)
    raise SystemExit(f"unknown job {name}")


def job(name: str, outdir: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfbneck_plugin import BottleneckProfiler

    tf.random.set_seed(0)
    n = batch_size(name) * PASS_BATCHES
    x = np.random.default_rng(0).normal(size=(n, FEATURES)).astype("float32")
    y = np.random.default_rng(1).integers(0, 10, size=n).astype("int32")
    ds, (width, depth) = _dataset(name, outdir, x, y, tf)
    layers = [keras.Input((FEATURES,))] + [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
    model = keras.Sequential(layers + [keras.layers.Dense(10)])
    spe = SPE if name == "pair_spe32" else 1
    optimizer = "sgd" if name.startswith("pair_spe") else "adam"  # fewer ops per step: a smaller trace
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=spe,
                  run_eagerly=name == "pair_eager", jit_compile=False)
    steps = {"pair_spe32": SPE_PROFILE_STEPS, "pair_spe1": SPE1_PROFILE_STEPS,
             "cpu_bound_input_fixed": FIXED_PROFILE_STEPS}.get(name, PROFILE_STEPS)
    interval = PAIR_SAMPLE_INTERVAL_S if name.startswith("pair_") else 0.1
    profiler = BottleneckProfiler(os.path.join(outdir, name), profile_steps=steps, analyze=False,
                                  sample_interval_s=interval)
    model.fit(ds, epochs=1, steps_per_epoch=steps[1] + 4 * spe, verbose=0, callbacks=[profiler])
    bad = [w for w in profiler.windows if w.status != "profiled"]
    if bad:
        raise SystemExit(f"{name}: window not captured: {bad[0].reason}")


def _slow_file_dataset(outdir, x, y, tf):
    import tempfile
    import time
    files_dir = tempfile.mkdtemp(prefix="tfbneck-demo-files-")
    for i in range(2000):
        with open(os.path.join(files_dir, f"{i:05d}.bin"), "wb") as f:
            f.write(x[i % len(x)].tobytes())  # one feature row: 512 float32 = 2 KB
    names = sorted(os.listdir(files_dir))
    import numpy as np

    def read_files():
        for i, fn in enumerate(names):
            time.sleep(0.003)  # per-file open latency of a network file system (stand-in)
            with open(os.path.join(files_dir, fn), "rb") as f:
                row = np.frombuffer(f.read(), dtype="float32")
            yield row, y[i % len(y)]

    spec = (tf.TensorSpec((FEATURES,), tf.float32), tf.TensorSpec((), tf.int32))
    return tf.data.Dataset.from_generator(read_files, output_signature=spec).batch(BATCH).repeat()


def pair_rows(logdir: str = HERE):
    """For each before/after pair: (fix, before run, after run, before ms, predicted ms,
    [low, high], measured ms, error %), times per batch, from the runs under ``logdir``
    (analysed here; no TensorFlow)."""
    from tfbneck_plugin.analysis.session import analyze_session
    from tfbneck_plugin.logdir import find_sessions
    with open(os.path.join(logdir, "PAIRS.json")) as f:
        pairs = json.load(f)
    reports = {s.run: analyze_session(s) for s in find_sessions(logdir).sessions}
    rows = []
    for fix, pair in pairs.items():
        before, after = reports[pair["before"]], reports[pair["after"]]
        rec = next((r for r in before["recommendations"] if r["fix"] == fix), None)
        if rec is None or not rec.get("predicted"):
            raise SystemExit(f"{pair['before']}: no prediction for `{fix}` (not recommended, or no model)")
        pred, measured = rec["predicted"], after["steps"]["time_per_batch_ms"]
        rows.append((fix, pair["before"], pair["after"], before["steps"]["time_per_batch_ms"],
                     pred["time_per_batch_ms"], pred["range_ms"], measured,
                     100.0 * (pred["time_per_batch_ms"] - measured) / measured))
    return rows


def pairs_table(logdir: str = HERE) -> str:
    """The table of predicted against measured times (Markdown)."""
    out = ["| change (fix) | before run | ms per batch before | predicted after (range) | measured after | error |",
           "|---|---|---|---|---|---|"]
    for fix, before, after, was, pred, (low, high), measured, err in pair_rows(logdir):
        out.append(f"| `{fix}` | `{before}` -> `{after}` | {was:.2f} | {pred:.2f} ({low:.2f}-{high:.2f}) | "
                   f"{measured:.2f} | {err:+.0f} % |")
    return "\n".join(out) + "\n"


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--job":
        job(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) >= 2 and sys.argv[1] == "--pairs-table":
        sys.stdout.write(pairs_table(sys.argv[2] if len(sys.argv) > 2 else HERE))
        return
    args = sys.argv[1:]
    only = list(JOBS)
    if "--only" in args:
        at = args.index("--only")
        only = args[at + 1].split(",")
        del args[at:at + 2]
        unknown = [n for n in only if n not in JOBS]
        if unknown:
            raise SystemExit(f"unknown job(s): {', '.join(unknown)}; jobs: {', '.join(JOBS)}")
    outdir = os.path.abspath(args[0] if args else HERE)
    for name in only:
        target = os.path.join(outdir, name)
        if os.path.exists(target):
            raise SystemExit(f"{target} exists: remove it first (this script never overwrites runs)")
    for name in only:
        print(f"running {name} ...", flush=True)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--job", name, outdir], check=True)
    for fname, content in (("EXPECTED.json", JOBS), ("PAIRS.json", PAIRS)):
        with open(os.path.join(outdir, fname), "w") as f:
            json.dump(content, f, indent=2, sort_keys=True)
            f.write("\n")
    print(f"wrote {len(only)} runs, EXPECTED.json and PAIRS.json to {outdir}")


if __name__ == "__main__":
    main()
