"""A Keras 3 fit whose tf.data map calls a tf.py_function on every element: with ``tiny`` the
py_function only returns its argument (microseconds) and TensorFlow matrix products do the
element's work (~3 ms); with ``heavy`` the py_function does the work (~3 ms of numpy sorting)
and the TensorFlow part is small. Profiled by BottleneckProfiler (steps 6-10, system metrics
on). Usage: py_function_share.py LOG_DIR tiny|heavy"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

LOG_DIR, MODE = sys.argv[1], sys.argv[2]
HEAVY_PY = MODE == "heavy"
RNG = np.random.default_rng(0)


def python_part(i):
    if not HEAVY_PY:
        return np.float32(i.numpy())
    end = time.perf_counter() + 0.003  # ~3 ms of Python-side numpy work per element
    while time.perf_counter() < end:
        np.sort(RNG.standard_normal(4096))
    return np.float32(i.numpy())


def element(i):
    v = tf.reshape(tf.py_function(python_part, [i], tf.float32), [])
    m = tf.random.stateless_normal([64 if HEAVY_PY else 192, 192], seed=tf.stack([i, i]))
    for _ in range(1 if HEAVY_PY else 12):  # the TensorFlow part: ~3 ms when tiny
        m = tf.tanh(tf.matmul(m, m, transpose_b=True)[:, :192] * 0.01)
    x = tf.reduce_mean(m, axis=0)[:64] + v * 0.0
    return x, tf.cast(i % 10, tf.int32)


ds = tf.data.Dataset.range(4 * 40).map(element).batch(4).prefetch(1)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1, verbose=0, callbacks=[BottleneckProfiler(LOG_DIR, profile_steps=(6, 10), analyze=False)])
print("DONE")
