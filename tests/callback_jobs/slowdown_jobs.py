"""Real Keras 3 fits for tests/test_slowdown.py (issue 15, issue 16 point 3), one scenario per
process (TensorFlow's profiler is one per process).

    python slowdown_jobs.py SCENARIO OUT_DIR

A scenario writes ``OUT_DIR/result.json``: the window records, what the job measured itself
(/proc readings around the triggered window, its own step clock), and where its logs are.
The test reads the traces, sidecars, trend files and event files itself.

The pipeline: ``Dataset.range(n).map(element, num_parallel_calls=2).batch(4).prefetch(1)``;
``element(i)`` is a few TensorFlow ops (microseconds) until element ``heavy_from``, and from
there on also a ``tf.py_function`` that sorts random arrays with numpy for ``heavy_s`` seconds
(numpy releases the GIL: two parallel calls keep both cores busy): CPU-bound preprocessing
that starts half-way, as an augmentation switched on at a later epoch.
"""
import json
import os
import sys
import time

import numpy as np

SCENARIO, OUT = sys.argv[1], os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

from jobs import meter_result, proc_snapshot, read_scalars, record, seed  # noqa: E402
from tfbneck_plugin import BottleneckProfiler, SlowdownTrigger  # noqa: E402

keras = tf.keras
BATCH = 4
result = {"out": OUT}


def pipeline(n_steps: int, heavy_from_step: int, heavy_s: float):
    """``n_steps`` batches; from batch ``heavy_from_step`` (1-based) on, every element costs
    ``heavy_s`` seconds of numpy work."""
    heavy_from = (heavy_from_step - 1) * BATCH

    def sort_for(i):
        t = time.perf_counter()
        while time.perf_counter() - t < heavy_s:
            np.sort(np.random.rand(100000))
        return np.float32(i.numpy() % 7)

    def element(i):
        v = tf.cond(i >= heavy_from, lambda: tf.py_function(sort_for, [i], tf.float32),
                    lambda: tf.cast(i % 7, tf.float32))
        x = tf.fill((8,), v)
        return x, tf.reduce_sum(x, keepdims=True)

    ds = tf.data.Dataset.range(n_steps * BATCH).map(element, num_parallel_calls=2)
    return ds.batch(BATCH).prefetch(1)


def model():
    m = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile(keras.optimizers.SGD(0.01), "mse")
    return m


class StepClock(keras.callbacks.Callback):
    """The job's own step clock (placed before the profiler): begin time of every step."""

    def __init__(self):
        super().__init__()
        self.t = []

    def on_train_batch_begin(self, batch, logs=None):
        self.t.append(time.perf_counter())


class WindowMeter(keras.callbacks.Callback):
    """Placed after the profiler: reads /proc (jobs.proc_snapshot) at the step a triggered
    window opened and at the step after it closed, so the test knows how busy other
    processes kept the machine meanwhile."""

    def __init__(self, prof):
        super().__init__()
        self.prof, self.step, self.readings, self.opened = prof, 0, {}, None

    def on_train_batch_begin(self, batch, logs=None):
        self.step += 1
        w = self.prof.windows[-1] if self.prof.windows else None
        if w is None or w.kind != "triggered":
            return
        if w.status == "open" and self.opened is None:
            self.opened = self.step
            self.readings[self.step] = proc_snapshot()
        elif w.status != "open" and self.opened is not None and "end" not in result:
            self.readings[self.step] = proc_snapshot()
            result["meter"] = meter_result(self.readings, self.opened, self.step)
            result["end"] = self.step


def trend_file(log_dir):
    folder = os.path.join(log_dir, "plugins", "bottleneck")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [os.path.join(folder, n) for n in names if n.startswith("steptimes_")]  # not the system record


def finish(prof, log_dir, clock):
    prof.close(wait=True, timeout=300)
    result["windows"] = [dict(record(w), kind=w.kind, trigger=w.trigger,
                              change=w.change, cause=(w.report or {}).get("cause")) for w in prof.windows]
    result["log_dir"] = log_dir
    result["trend_files"] = trend_file(log_dir)
    result["scalars"] = read_scalars(log_dir)
    result["step_begin_s"] = clock.t


def slowdown():
    """Acceptance 1: scheduled window (30, 34) early; the map turns heavy at step 400; the
    step-time statistics every 20 steps (one epoch: the trend is a line)."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(30, 34), on_slowdown=True, step_time_every=20)
    clock = StepClock()
    model().fit(pipeline(560, 400, 0.03), epochs=1, verbose=0, callbacks=[clock, prof, WindowMeter(prof)])
    result["heavy_from_step"] = 400
    finish(prof, log, clock)


def steady():
    """Acceptance 2: the same light pipeline all along, 3 epochs of 6,000 steps."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(30, 34), on_slowdown=True)
    clock = StepClock()
    model().fit(pipeline(6000, 10 ** 9, 0.0), epochs=3, verbose=0, callbacks=[clock, prof])
    finish(prof, log, clock)


def too_late():
    """The map turns heavy near the end: slow for about 3 s, the trigger wants 6 s."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(30, 34), analyze=False,
                              on_slowdown=SlowdownTrigger(min_seconds=6.0))
    clock = StepClock()
    model().fit(pipeline(500, 450, 0.03), epochs=1, verbose=0, callbacks=[clock, prof])
    result["heavy_from_step"] = 450
    finish(prof, log, clock)


def display():
    """Issue 16 pt 3: display=True outside a notebook; steps_per_execution=4, two epochs."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(9, 12), display=True)
    m = model()
    m.compile(keras.optimizers.SGD(0.01), "mse", steps_per_execution=4)
    clock = StepClock()
    m.fit(pipeline(200, 10 ** 9, 0.0), epochs=2, verbose=0, callbacks=[clock, prof])
    prof.wait_for_analysis(300)
    w = prof.windows[0]
    result["report_type"] = f"{type(w.report).__module__}.{type(w.report).__name__}"
    result["report_html"] = w.report._repr_html_() if hasattr(w.report, "_repr_html_") else None
    result["report_is_dict"] = isinstance(w.report, dict)
    result["display_flag"] = prof.display
    finish(prof, log, clock)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    globals()[SCENARIO]()
    result["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(OUT, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
