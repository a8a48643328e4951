"""Makes the XLA traces of tests/data/xla_jit/ (tests/test_xla_ops.py), each a real TensorFlow
2.21 / Keras 3 run on this CPU host profiled by ``BottleneckProfiler(logdir, profile_steps=(10, 14))``:

============  ======================================================================================
folder        run
============  ======================================================================================
fit_jit_off   ``model.fit`` of a 64-128-128-4 Dense MLP (batch 32, Adam), ``jit_compile=False``
fit_jit_on    the same with ``jit_compile=True``: XLA:CPU runs ``one_step_on_data``
loop_jit_on   a custom loop calling ``tf.function(jit_compile=True)`` ``train_step`` (tanh(x @ w),
              SGD by hand), batch 32, its steps marked with ``profiler.step()``
============  ======================================================================================

Usage (repository root, the project's virtual environment): ``python tests/data/xla_jit/make.py
KIND JIT LOGDIR`` with KIND ``mlp`` or ``loop``, JIT ``0`` or ``1``; then copy LOGDIR here. A
remade trace changes the numbers the tests compute from it, not the tests.
"""
import sys

import numpy as np


def main(kind: str, jit: bool, logdir: str) -> None:
    import keras
    import tensorflow as tf
    from tfbneck_plugin import BottleneckProfiler

    tf.random.set_seed(0)
    x = np.random.RandomState(0).rand(32 * 20, 64).astype("float32")
    y = np.random.RandomState(1).randint(0, 4, 32 * 20)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    if kind == "mlp":
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(128, activation="relu"), keras.layers.Dense(4)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
        model.fit(ds, epochs=1, verbose=0, callbacks=[BottleneckProfiler(logdir, profile_steps=(10, 14))])
        return
    w = tf.Variable(tf.random.normal([64, 4]))

    @tf.function(jit_compile=jit)
    def train_step(a, b):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(b, tf.tanh(a @ w)))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return loss

    with BottleneckProfiler(logdir, profile_steps=(10, 14)) as profiler:
        for a, b in ds:
            with profiler.step():
                train_step(a, b)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1", sys.argv[3])
