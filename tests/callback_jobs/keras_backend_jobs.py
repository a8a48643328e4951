"""Real Keras 3 fits on one backend for tests/test_keras_backends_tf.py, all scenarios in one
process (the backend is chosen by ``KERAS_BACKEND`` before Keras is imported):

    KERAS_BACKEND=jax python keras_backend_jobs.py OUT_DIR

Scenarios, in this order (the last one imports TensorFlow, as the README's example does):

``input``      a slow Python generator (50 ms per batch) feeding a tiny model: input-bound.
``compute``    in-memory arrays feeding a model of three 1024-wide layers: compute-bound;
               36 steps, their step times written every 8 steps from step 21.
``interrupt``  a ``KeyboardInterrupt`` raised from a batch callback inside the first window
               of a two-window schedule, then a second ``fit`` with the same callback.
``busy``       the backend's profiler already started by the user's code: the window is
               skipped with the reason, training goes on.
``readme``     the README's callback example (tf.data input, ``profile_steps=(10, 14)``,
               background analysis on).

Writes ``OUT_DIR/result.json``: per scenario its log dir and window records, whether the
profiler still ran after the interrupt, the frameworks imported before the README scenario,
and each scenario's wall time.
"""
import json
import os
import sys
import time

import numpy as np

OUT = os.path.abspath(sys.argv[1])
T0 = time.monotonic()

import keras  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

BACKEND = keras.backend.backend()
result = {"backend": BACKEND, "times": {}}
SLOW_S = 0.05


def windows(cb):
    return [{"status": w.status, "closed_by": w.closed_by, "steps": w.steps, "session_dir": w.session_dir,
             "reason": w.reason} for w in cb.windows]


def tiny():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def slow_batches():
    rng = np.random.default_rng(0)
    while True:
        time.sleep(SLOW_S)  # a Python input that takes 50 ms per batch
        yield rng.random((32, 16), dtype=np.float32), rng.random((32, 1), dtype=np.float32)


def scenario(name):
    def wrap(fn):
        t = time.monotonic()
        result[name] = fn(os.path.join(OUT, name))
        result["times"][name] = round(time.monotonic() - t, 2)
    return wrap


@scenario("input")
def _input(log):
    cb = BottleneckProfiler(log, profile_steps=(4, 8), analyze=False, system_interval_s=None)
    tiny().fit(slow_batches(), steps_per_epoch=10, epochs=1, callbacks=[cb], verbose=0)
    cb.close()
    return {"log": log, "windows": windows(cb)}


class AfterStep(keras.callbacks.Callback):
    """The fit's wall time from batch ``first`` (0-based) beginning to the fit's end (s), by the
    job's own clock: every step after it has run by then, on any backend (``fit`` returns once
    its steps are done), so their mean time is this over their number."""

    def __init__(self, first):
        super().__init__()
        self.first, self.t0, self.seconds = first, None, None

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.first:
            self.t0 = time.perf_counter()

    def on_train_end(self, logs=None):
        self.seconds = time.perf_counter() - self.t0 if self.t0 is not None else None


@scenario("compute")
def _compute(log):
    rng = np.random.default_rng(0)
    x, y = rng.random((36 * 256, 512), dtype=np.float32), rng.random((36 * 256, 1), dtype=np.float32)
    model = keras.Sequential([keras.Input((512,))] + [keras.layers.Dense(1024, activation="relu") for _ in range(3)]
                             + [keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    cb = BottleneckProfiler(log, profile_steps=(4, 8), analyze=False, system_interval_s=None, step_time_every=8)
    clock = AfterStep(20)
    model.fit(x, y, batch_size=256, epochs=1, callbacks=[cb, clock], verbose=0, shuffle=False)
    cb.close()
    return {"log": log, "windows": windows(cb), "after_s": clock.seconds, "after_steps": 36 - 20}


class Interrupt(keras.callbacks.Callback):
    """Raises KeyboardInterrupt as batch ``at`` (0-based) begins, once."""

    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.at:
            self.at = None
            raise KeyboardInterrupt


@scenario("interrupt")
def _interrupt(log):
    from tfbneck_plugin.capture.engines import make_engine
    cb = BottleneckProfiler(log, profile_steps=[(3, 6), (12, 14)], analyze=False, system_interval_s=None)
    model = tiny()
    rng = np.random.default_rng(0)
    x, y = rng.random((320, 16), dtype=np.float32), rng.random((320, 1), dtype=np.float32)
    interrupted = False
    try:
        model.fit(x, y, batch_size=32, epochs=1, callbacks=[cb, Interrupt(3)], verbose=0)  # step 4 of window 3-6
    except KeyboardInterrupt:
        interrupted = True
    deadline = time.monotonic() + 1.0  # the owner watch closes the window within 0.25 s (not on torch)
    while (not cb.windows or cb.windows[0].status == "open") and time.monotonic() < deadline:
        time.sleep(0.05)
    after = {"closed": cb._capture is None, "profiler_running": make_engine(BACKEND).running() is not None,
             "windows": windows(cb)}
    model.fit(x, y, batch_size=32, epochs=1, callbacks=[cb], verbose=0)  # steps 5-14: window 12-14
    cb.close()
    return {"log": log, "interrupted": interrupted, "after_interrupt": after, "windows": windows(cb),
            "profiler_running_at_end": make_engine(BACKEND).running() is not None}


@scenario("busy")
def _busy(log):
    cb = BottleneckProfiler(log, profile_steps=(2, 3), analyze=False, system_interval_s=None)
    if BACKEND == "jax":
        import jax
        jax.profiler.start_trace(os.path.join(OUT, "users_trace"))
        stop = jax.profiler.stop_trace
    elif BACKEND == "tensorflow":
        import tensorflow as tf
        tf.profiler.experimental.start(os.path.join(OUT, "users_trace"))
        stop = tf.profiler.experimental.stop
    else:
        import torch
        users = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        users.start()
        stop = users.stop
    rng = np.random.default_rng(0)
    x, y = rng.random((160, 16), dtype=np.float32), rng.random((160, 1), dtype=np.float32)
    try:
        history = tiny().fit(x, y, batch_size=32, epochs=2, callbacks=[cb], verbose=0)
    finally:
        stop()
    cb.close()
    return {"log": log, "windows": windows(cb), "epochs": len(history.history["loss"])}


result["imported_before_readme"] = sorted(m for m in ("tensorflow", "jax", "torch") if m in sys.modules)


@scenario("readme")
def _readme(log):
    # The README's example as written there (tf.data input: it imports TensorFlow itself).
    import tensorflow as tf
    x = np.random.rand(2048, 64).astype("float32")
    y = np.random.rand(2048, 1).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(tf.data.AUTOTUNE)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    cb = BottleneckProfiler(log, profile_steps=(10, 14))
    model.fit(ds, epochs=2, callbacks=[cb], verbose=0)
    cb.close()  # waits for the background analysis
    return {"log": log, "windows": windows(cb), "reports": [w.report is not None for w in cb.windows]}


result["total_s"] = round(time.monotonic() - T0, 2)
with open(os.path.join(OUT, "result.json"), "w") as f:
    json.dump(result, f, indent=1)
