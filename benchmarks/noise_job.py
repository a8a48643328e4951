"""One short training run for benchmarks/compare_noise.py: a custom loop whose step does
WORK passes of a 256x256 matmul block inside a tf.function, over in-memory batches,
profiled by BottleneckProfiler (one window, steps 100-104; the step-time trend every 25
steps). Step time grows with WORK, so WORK x 1.1, 1.25 and 2 are real code changes of
about 10 %, 25 % and 2x (the run prints its own clock to check).

Usage: noise_job.py WORK LOGDIR [STEPS]   (prints ``CLOCK_MS <median period>`` then DONE)
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
work, logdir = int(sys.argv[1]), sys.argv[2]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 300
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

tf.random.set_seed(0)
w = tf.Variable(tf.random.normal([256, 256], stddev=0.05, seed=1))
ds = tf.data.Dataset.from_tensor_slices(tf.random.normal([64 * 32, 256], seed=2)).batch(64).cache().repeat()
ds = ds.prefetch(4)


@tf.function
def train_step(x):
    for _ in tf.range(work):
        x = tf.tanh(x @ w)
    w.assign_sub(1e-6 * tf.reduce_mean(x) * tf.ones_like(w))
    return x


it = iter(ds)
clock = []
with BottleneckProfiler(logdir, profile_steps=(100, 104), step_time_every=25, analyze=False) as profiler:
    for _ in range(steps):
        clock.append(time.perf_counter())
        with profiler.step():
            train_step(next(it))
print(f"CLOCK_MS {np.median(np.diff(clock)) * 1e3:.4f}")
print("DONE")
