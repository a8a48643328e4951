"""Keras 3 fits that each already do something the advice could recommend, profiled by
BottleneckProfiler; one process, one log folder per job under LOG_DIR.
Usage: fit_to_run_jobs.py LOG_DIR JOB[,JOB...]

Jobs:
  pyds_saturated  a PyDataset with workers=2, use_multiprocessing=True, each batch ~25 ms of
                  numpy: the two worker processes keep the cores busy.
  pyds_waiting    a PyDataset with one worker whose batches wait 25 ms (a slow read): the
                  cores sit idle.
  pyds_threads    the same waiting PyDataset with workers=8 threads (use_multiprocessing
                  off): the workers exist, as threads of the training process.
  vectorised      a heavy map on whole batches (.batch(b).map(f)), one call at a time.
  per_element     the same map per element (.map(f).batch(b): tf.data's MapAndBatch).
  jit / nojit     a wide dense model on cached input, compiled with and without jit_compile.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

FEATURES = 256
X = np.random.default_rng(0).normal(size=(64 * 16, FEATURES)).astype("float32")
Y = np.random.default_rng(1).integers(0, 10, size=64 * 16).astype("int32")


class Batches(keras.utils.PyDataset):
    def __init__(self, wait_s=0.0, **kwargs):
        super().__init__(**kwargs)
        self.wait_s = wait_s

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        lo = (i % 16) * 64
        x = X[lo:lo + 64]
        if self.wait_s:
            time.sleep(self.wait_s)
        else:
            y = np.repeat(x[..., None], 8, axis=-1)
            for _ in range(6):
                y = np.sin(y) * 1.0001 + np.cos(y) * 0.0001
            x = y.mean(axis=-1).astype("float32")
        return x, Y[lo:lo + 64]


def heavy(x, y):
    z = tf.repeat(x[..., None], 4, axis=-1)
    for _ in range(16):
        z = tf.math.sin(z) * 1.0001 + tf.math.cos(z) * 0.0001
    return tf.reduce_mean(z, axis=-1), y


def data(job):
    if job == "pyds_saturated":
        return Batches(workers=2, use_multiprocessing=True, max_queue_size=8)
    if job == "pyds_waiting":
        return Batches(wait_s=0.025)
    if job == "pyds_threads":
        return Batches(wait_s=0.025, workers=8, max_queue_size=16)
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).repeat()
    # One map call at a time and no injected prefetch: the map's cost reaches the step.
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    if job == "vectorised":
        return ds.batch(64).map(heavy).with_options(options)
    if job == "per_element":
        return ds.map(heavy).batch(64).with_options(options)
    return ds.batch(64).cache().repeat().prefetch(tf.data.AUTOTUNE)


def run(job, log_dir):
    width, depth = (1024, 3) if job in ("jit", "nojit") else (64, 1)
    layers = [keras.Input((FEATURES,))] + [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
    model = keras.Sequential(layers + [keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=job == "jit")
    profiler = BottleneckProfiler(os.path.join(log_dir, job), profile_steps=(5, 16), analyze=False, verbose=0,
                                  sample_interval_s=0.05)
    model.fit(data(job), epochs=1, steps_per_epoch=20, verbose=0, callbacks=[profiler])


for name in sys.argv[2].split(","):
    run(name, sys.argv[1])
print("DONE")
