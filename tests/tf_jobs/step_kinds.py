"""Tiny real training runs, one per kind of step evidence the step finders must read.

Usage: step_kinds.py KIND LOGDIR

KIND:
  keras3_first_batch   Keras 3 ``fit`` profiled by the stock TensorBoard callback from the first
                       batch (``profile_batch=(1, 4)``): the first step traces the train function.
  grad_accum           custom loop, each step wrapped in ``Trace("batch_step", step_num=100 + i)``
                       without ``_r``, calling the gradient tf.function three times per step.
  graph_mode           tf-keras ``fit`` after ``disable_eager_execution()`` (LOGDIR/fit) and a
                       ``tf.compat.v1.Session`` loop (LOGDIR/session), each profiled with
                       ``tf.profiler.experimental.start``/``stop`` (the test sets
                       TF_USE_LEGACY_KERAS=1, as tf-keras users do).
  retrace              custom loop with ``_r`` markers whose tf.function takes the step index as a
                       Python int (LOGDIR/python_int: a new graph each step) and, in the same
                       process, as a tensor (LOGDIR/tensor: one graph).
Prints DONE when the traces are written.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
kind, logdir = sys.argv[1], sys.argv[2]
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.random.set_seed(0)
X = np.random.default_rng(0).normal(size=(512, 16)).astype("float32")
Y = (X[:, 0] > 0).astype("int32")


def keras3_first_batch():
    import keras
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(X, Y, batch_size=32, epochs=1, steps_per_epoch=8, verbose=0,
              callbacks=[keras.callbacks.TensorBoard(logdir, profile_batch=(1, 4))])


def _dense_model():
    import keras
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(2)])


def grad_accum():
    model = _dense_model()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ds = iter(tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(16).prefetch(2))

    @tf.function
    def grads(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return tape.gradient(loss, model.trainable_variables)

    grads(*next(ds))  # traced before the profiler starts: the steps below hold no tracing
    tf.profiler.experimental.start(logdir)
    for i in range(12):
        with tf.profiler.experimental.Trace("batch_step", step_num=100 + i):
            acc = [tf.zeros_like(v) for v in model.trainable_variables]
            for _ in range(3):  # gradient accumulation: three calls, one optimizer update
                acc = [a + g for a, g in zip(acc, grads(*next(ds)), strict=True)]
            for v, g in zip(model.trainable_variables, acc, strict=True):
                v.assign_sub(0.01 * g / 3.0)
    tf.profiler.experimental.stop()


def graph_mode():
    import tf_keras as keras
    tf.compat.v1.disable_eager_execution()
    model = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(16,)),
                              keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(X[:64], Y[:64], batch_size=32, epochs=1, verbose=0)  # builds the graph, unprofiled
    tf.profiler.experimental.start(os.path.join(logdir, "fit"))
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0)  # 16 steps
    tf.profiler.experimental.stop()

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None, 16))
        y = tf.compat.v1.placeholder(tf.int32, (None,))
        w = tf.compat.v1.get_variable("w", (16, 2))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x @ w))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(train_op, {x: X[:32], y: Y[:32]})
        tf.profiler.experimental.start(os.path.join(logdir, "session"))
        for i in range(16):
            sess.run(train_op, {x: X[32 * i:32 * i + 32], y: Y[32 * i:32 * i + 32]})
        tf.profiler.experimental.stop()


def _retrace_loop(flavour):
    model = _dense_model()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ds = iter(tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(32).prefetch(2))

    @tf.function
    def train_step(x, y, step):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        for v, g in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables), strict=True):
            v.assign_sub(0.01 * g / tf.cast(step + 1, tf.float32))
        return loss

    tf.profiler.experimental.start(os.path.join(logdir, flavour))
    for i in range(12):
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            x, y = next(ds)
            train_step(x, y, i if flavour == "python_int" else tf.constant(i))
    tf.profiler.experimental.stop()


def retrace():
    _retrace_loop("python_int")
    _retrace_loop("tensor")


{"keras3_first_batch": keras3_first_batch, "grad_accum": grad_accum, "graph_mode": graph_mode,
 "retrace": retrace}[kind]()
print("DONE")
