"""Make the demo logdirs: four small, real TensorFlow training jobs on the CPU, each
profiled for steps 6-10 by ``BottleneckProfiler`` (trace + system metrics).

Usage (needs ``pip install '.[tensorflow]'``):

    python demo_logs/make_demo_logs.py [OUTDIR]        # default: demo_logs/

Each job runs in its own Python process (TensorFlow's profiler is one per process) and
writes ``OUTDIR/<job>/plugins/profile/<session>/``. ``EXPECTED.json`` records the verdict
each job is built to produce; the tests check ``tfbneck analyze`` against it.

The jobs (Keras 3, batch 32, a dense model on 512 features):

``cpu_bound_input``     a tf.data map doing heavy math per batch (200 passes of sin/cos),
                        sequential (no ``num_parallel_calls``, and tf.data's automatic
                        map parallelisation turned off), no prefetch: the model waits for
                        the host to prepare each batch.                -> cpu / input_preprocessing
``cpu_bound_input_fixed`` the same map with ``num_parallel_calls=AUTOTUNE``, ``cache()`` of
                        the deterministic part and ``prefetch``: preparation overlaps the
                        step, the model's math is the limit.          -> device / model_compute
``compute_bound``       cheap, cached input and a wide model (4 x 2048 units): the CPU does
                        the model's math all step long.              -> device / model_compute
``slow_file_reads``     2,000 small files (2 KB each) read one by one by a Python generator,
                        each open delayed 3 ms to stand for a network file system's latency
                        (the trace shows the generator blocking the step; the system
                        metrics show the CPU idle meanwhile).        -> io / file_read
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = {
    "cpu_bound_input": {"bottleneck": "cpu", "cause": "input_preprocessing"},
    "cpu_bound_input_fixed": {"bottleneck": "device", "cause": "model_compute"},
    "compute_bound": {"bottleneck": "device", "cause": "model_compute"},
    "slow_file_reads": {"bottleneck": "io", "cause": "file_read"},
}
PROFILE_STEPS = (6, 10)
BATCH = 32
FEATURES = 512


def heavy(x):
    import tensorflow as tf
    for _ in range(200):
        x = tf.math.sin(x) * 1.0001 + tf.math.cos(x) * 0.0001
    return x


def job(name: str, outdir: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfbneck_plugin import BottleneckProfiler

    tf.random.set_seed(0)
    n = BATCH * 24
    x = np.random.default_rng(0).normal(size=(n, FEATURES)).astype("float32")
    y = np.random.default_rng(1).integers(0, 10, size=n).astype("int32")
    width, depth = 256, 2
    if name == "cpu_bound_input":
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).map(lambda a, b: (heavy(a), b))
        options = tf.data.Options()
        options.experimental_optimization.map_parallelization = False  # keep the map sequential
        ds = ds.with_options(options)
    elif name == "cpu_bound_input_fixed":
        width, depth = 1024, 3
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
              .map(lambda a, b: (heavy(a), b), num_parallel_calls=tf.data.AUTOTUNE)
              .cache().repeat().prefetch(tf.data.AUTOTUNE))
    elif name == "compute_bound":
        width, depth = 2048, 4
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).cache().repeat().prefetch(tf.data.AUTOTUNE)
    elif name == "slow_file_reads":
        ds = _slow_file_dataset(outdir, x, y, tf)
    else:
        raise SystemExit(f"unknown job {name}")
    layers = [keras.Input((FEATURES,))] + [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
    model = keras.Sequential(layers + [keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    profiler = BottleneckProfiler(os.path.join(outdir, name), profile_steps=PROFILE_STEPS, analyze=False)
    model.fit(ds, epochs=1, steps_per_epoch=PROFILE_STEPS[1] + 4, verbose=0, callbacks=[profiler])
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


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--job":
        job(sys.argv[2], sys.argv[3])
        return
    outdir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else HERE)
    for name in JOBS:
        target = os.path.join(outdir, name)
        if os.path.exists(target):
            raise SystemExit(f"{target} exists: remove it first (this script never overwrites runs)")
    for name in JOBS:
        print(f"running {name} ...", flush=True)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--job", name, outdir], check=True)
    with open(os.path.join(outdir, "EXPECTED.json"), "w") as f:
        json.dump(JOBS, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(JOBS)} runs and EXPECTED.json to {outdir}")


if __name__ == "__main__":
    main()
