"""Custom training loops as users write them, profiled by BottleneckProfiler.

Usage: custom_loop.py INPUT PLACEMENT LOGDIR

INPUT: ``slow`` (a tf.data map doing far more CPU work per batch than the model, no
parallelism), ``fast`` (in-memory batches, prefetched) or ``outlier`` (in-memory batches,
not prefetched, batch 23 (step 24) sleeping 100 ms: one odd step among quiet ones). PLACEMENT: ``outside`` (the
batch is fetched by ``for x, y in ds`` before ``with profiler.step():``, the loop as most
people write it) or ``inside`` (``next(it)`` inside the step). The loop runs 40 steps of a
``tf.function`` train step and profiles steps 20-27; it times every step with its own
clock (``time.perf_counter`` at each step's start, so the period covers fetch and train)
and prints ``PERIODS <step>:<ms> ...`` for the window's steps 20-27 (step n's period: from
its start to step n+1's start; step 20's holds the profiler's start, step 27's its stop)
and ``ENDS <step>:<ms> ...`` (the clock at the end of each step's body, from step 1's)
then ``DONE``.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
kind, placement, logdir = sys.argv[1], sys.argv[2], sys.argv[3]
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

tf.random.set_seed(0)
features = tf.random.normal([4096, 256], seed=1)
labels = tf.random.uniform([4096], 0, 10, tf.int32, seed=2)


def heavy(x, y):
    for _ in range(60):  # elementwise passes: the map costs far more than the model's step
        x = tf.math.sin(x) * 1.0001 + tf.math.cos(x) * 0.0001
    return x, y


def one_slow_batch(i, batch):
    # Batch 23 (step 24) sleeps 100 ms in Python: one odd step among quiet ones.
    late = tf.cond(i == 23, lambda: tf.py_function(lambda: time.sleep(0.1) or 0, [], tf.int32),
                   lambda: tf.constant(0))
    return tf.nest.map_structure(lambda t: t + tf.cast(late, t.dtype), batch)


ds = tf.data.Dataset.from_tensor_slices((features, labels))
if kind == "slow":
    ds = ds.map(heavy).batch(32).repeat()
elif kind == "outlier":
    ds = ds.batch(32).enumerate().map(one_slow_batch)
else:
    ds = ds.batch(32).cache().repeat().prefetch(4).repeat()
options = tf.data.Options()
options.experimental_optimization.inject_prefetch = False  # each fetch computes its batch: a steady slow input
# One map call at a time, as written: TensorFlow's default map_parallelization would run the
# "slow" map on both cores and leave its input share near the 20 % threshold (a CI run read 16 %).
options.experimental_optimization.map_parallelization = False
# Nor fused into MapAndBatch, whose runner thread computes the next batch while the model
# trains on this one: a CI run's slow loop then waited 8 % of the step (the input took the
# cores instead, which the verdict named); unfused, each fetch computes its batch in the
# consumer's GetNext and every step waits for it.
options.experimental_optimization.map_and_batch_fusion = False
ds = ds.with_options(options)
model = tf.keras.Sequential([tf.keras.Input((256,)), tf.keras.layers.Dense(256, activation="relu"),
                             tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(10)])
opt = tf.keras.optimizers.SGD(0.01)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


starts, ends = [], []
with BottleneckProfiler(logdir, profile_steps=(20, 27), analyze=False) as profiler:
    if placement == "outside":
        for i, (x, y) in enumerate(ds.take(40)):
            starts.append(time.perf_counter())
            with profiler.step():
                train_step(x, y)
                ends.append(time.perf_counter())
    else:
        it = iter(ds)
        for i in range(40):
            starts.append(time.perf_counter())
            with profiler.step():
                x, y = next(it)
                train_step(x, y)
                ends.append(time.perf_counter())
starts.append(time.perf_counter())
periods = np.diff(starts) * 1e3
print("PERIODS " + " ".join(f"{n}:{periods[n - 1]:.4f}" for n in range(20, 28)))
print("ENDS " + " ".join(f"{n}:{(ends[n - 1] - ends[0]) * 1e3:.4f}" for n in range(20, 28)))
print("DONE")
