"""Real training jobs for tests/test_interrupts.py: training interrupted inside a window.

    python interrupt_jobs.py SCENARIO OUT_DIR        (TF_USE_LEGACY_KERAS=1 for tf-keras)

Scenarios (each writes ``OUT_DIR/result.json``):

* ``fit_sigint``: a ``fit`` profiling steps 5-30 gets a real SIGINT (``os.kill``, so Python
  raises ``KeyboardInterrupt``) at the beginning of step 10; the job then waits 2 s without
  calling anything (a notebook kernel after an interrupted cell) and notes whether
  TensorFlow's profiler still runs; then a second ``fit`` with a new ``BottleneckProfiler``
  (steps 3-5) in the same process.
* ``loop_sigint``: the same in a custom loop: the SIGINT arrives inside ``profiler.step()``
  at step 10 of the window 5-30; then a new profiler's custom loop profiles steps 3-5.
* ``cut_close``: the interrupt lands inside the callback's own close of a window, between
  letting go of it and stopping the profiler (``WindowCapture.stop`` raises
  ``KeyboardInterrupt`` once); then a new profiler's ``fit``.
* ``own_holder``: two profilers in one ``fit`` whose windows overlap (steps 3-8 and 5-6):
  the second window is skipped, its reason names the first profiler's window.
"""
import json
import logging
import os
import signal
import time

from jobs import OUT, SCENARIO, keras, model, record, seed, slow_dataset, tf  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

# A shell that starts a command in the background ignores SIGINT for it, and Python then leaves it
# ignored: these jobs test Ctrl-C's KeyboardInterrupt, so Python's own handler is put back.
signal.signal(signal.SIGINT, signal.default_int_handler)

try:
    from tensorflow.python.profiler import profiler_v2
except ImportError:  # pragma: no cover
    profiler_v2 = None

result = {"out": OUT, "keras": "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else "keras3"}
#: Seconds the job waits after the interrupt before looking at the profiler (the watch
#: looks every 0.25 s); JOB_QUIET_S=0: the next fit begins at once (it takes the profiler back itself).
QUIET_S = float(os.environ.get("JOB_QUIET_S", "2"))


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, rec):
        self.messages.append(rec.getMessage())


WARNINGS = Warnings()
logging.getLogger("tfbneck").addHandler(WARNINGS)


def profiler_running():
    return profiler_v2 is not None and profiler_v2._profiler is not None


class SigintAt(keras.callbacks.Callback):
    """Sends this process a real SIGINT at the beginning of global step ``at`` (1-based)."""

    def __init__(self, at):
        super().__init__()
        self.at, self.step = at, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.step += 1
        if self.step == self.at:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler raises KeyboardInterrupt here, in the main thread


def after_interrupt(first):
    """What a notebook would see once the interrupted cell returned."""
    t0 = time.monotonic()
    result["profiler_running_at_once"] = profiler_running()
    time.sleep(QUIET_S)
    result["profiler_running_after_quiet"] = profiler_running()
    result["quiet_s"] = round(time.monotonic() - t0, 2)


def fit_sigint():
    seed()
    first = BottleneckProfiler(os.path.join(OUT, "first"), profile_steps=(5, 30), analyze=False)
    try:
        model().fit(slow_dataset(40, delay_s=0.03), epochs=1, verbose=0, callbacks=[first, SigintAt(10)])
        result["raised"] = None
    except KeyboardInterrupt:
        result["raised"] = "KeyboardInterrupt"
    after_interrupt(first)
    second = BottleneckProfiler(os.path.join(OUT, "second"), profile_steps=(3, 5), analyze=False)
    model().fit(slow_dataset(8, delay_s=0.01), epochs=1, verbose=0, callbacks=[second])
    second.close()
    result["second"] = [record(w) for w in second.windows]
    result["first"] = [record(w) | {"interrupted": w.interrupted} for w in first.windows]


def loop(profiler, steps, sigint_at=None):
    m = model()
    opt = keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(x) - y) ** 2)
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))
        return loss

    for i, (x, y) in enumerate(slow_dataset(steps, delay_s=0.02), start=1):
        with profiler.step():
            train_step(x, y)
            if i == sigint_at:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)


def loop_sigint():
    seed()
    first = BottleneckProfiler(os.path.join(OUT, "first"), profile_steps=(5, 30), analyze=False)
    try:
        loop(first, 40, sigint_at=10)
        result["raised"] = None
    except KeyboardInterrupt:
        result["raised"] = "KeyboardInterrupt"
    after_interrupt(first)
    second = BottleneckProfiler(os.path.join(OUT, "second"), profile_steps=(3, 5), analyze=False)
    loop(second, 8)
    second.close()
    result["second"] = [record(w) for w in second.windows]
    result["first"] = [record(w) | {"interrupted": w.interrupted} for w in first.windows]


def cut_close():
    from tfbneck_plugin.capture import window as winmod
    real_stop = winmod.WindowCapture.stop

    def cut(self, unfinished=None):
        winmod.WindowCapture.stop = real_stop
        raise KeyboardInterrupt

    seed()
    first = BottleneckProfiler(os.path.join(OUT, "first"), profile_steps=(3, 5), analyze=False)
    winmod.WindowCapture.stop = cut
    try:
        model().fit(slow_dataset(8, delay_s=0.01), epochs=1, verbose=0, callbacks=[first])
        result["raised"] = None
    except KeyboardInterrupt:
        result["raised"] = "KeyboardInterrupt"
    result["profiler_running_after_cut"] = profiler_running()
    second = BottleneckProfiler(os.path.join(OUT, "second"), profile_steps=(3, 5), analyze=False)
    model().fit(slow_dataset(8, delay_s=0.01), epochs=1, verbose=0, callbacks=[second])
    second.close()
    result["second"] = [record(w) for w in second.windows]
    result["first"] = [record(w) for w in first.windows]


def own_holder():
    seed()
    a = BottleneckProfiler(os.path.join(OUT, "a"), profile_steps=(3, 8), analyze=False)
    b = BottleneckProfiler(os.path.join(OUT, "b"), profile_steps=(5, 6), analyze=False)
    model().fit(slow_dataset(10, delay_s=0.01), epochs=1, verbose=0, callbacks=[a, b])
    a.close()
    b.close()
    result["a"] = [record(w) for w in a.windows]
    result["b"] = [record(w) for w in b.windows]


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    globals()[SCENARIO]()
    result["warnings"] = WARNINGS.messages
    with open(os.path.join(OUT, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
