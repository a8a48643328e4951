"""What always-on step timing costs (issue 15): BottleneckProfiler with ``on_slowdown=True``
and no window in reach, against no callback, side by side in one run.

    python benchmarks/bench_steptime.py [--pairs 60] [--steps 300] [--width 320] [--batch 128]
    TF_USE_LEGACY_KERAS=1 python benchmarks/bench_steptime.py     # the same with tf-keras

One model, compiled once, is trained by short ``fit`` calls, alternately:

  none     no callback
  timing   BottleneckProfiler(profile_steps=<beyond the run>, on_slowdown=True): every step
           timed, the baseline kept, the trigger armed; the step-time statistics written
           at the end of each fit (one scalar pair and the trend file, outside the steps)

Step time = time between consecutive ``on_train_batch_begin`` calls of a timing callback
placed first in both configurations, steps 6..end of each fit. The two configurations run
in pairs, order alternating, so that drift in machine load hits both alike; the ratio is
the median over pairs of the ratio of the two fits' median step times (target <= 1.005 on
a step of about 2 ms; ``--width``/``--batch`` set the step time).

On a shared or busy machine the spread of the per-pair ratios is wider than the 0.5 % to
resolve, so the hook's own cost is also timed directly: the batch hook as ``fit`` calls it,
200,000 times in a row with the trigger armed (every step timed, the baseline recomputed
every 16 steps). Its share of the measured step is the overhead, from below the noise.
This is a benchmark, not a test: numbers depend on the machine and its load.
"""
import argparse
import logging
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_callback import Timer  # noqa: E402

from tfbneck_plugin import BottleneckProfiler  # noqa: E402

keras = tf.keras
FAR = (10 ** 9, 10 ** 9 + 4)  # a window no run reaches


def build(width):
    m = keras.Sequential([keras.layers.Input((64,)), keras.layers.Dense(width, activation="relu"),
                          keras.layers.Dense(width, activation="relu"), keras.layers.Dense(1)])
    m.compile(keras.optimizers.SGD(0.001), "mse")
    return m


def hook_cost(model, root, n=200_000):
    """Seconds per call of the batch hook, trigger armed, timing every call."""
    cb = BottleneckProfiler(os.path.join(root, "hook"), profile_steps=FAR, on_slowdown=True, write_scalars=False)
    cb.set_model(model)
    cb.set_params({"steps": None, "epochs": 1})
    cb.on_epoch_begin(0)
    hook = cb.on_train_batch_begin
    for i in range(1000):  # past the warm-up, the baseline filled (20 steps lasting 0.25 s): armed
        time.sleep(0.002)
        hook(i)
    assert cb.tracker.timer.baseline()["threshold_ms"] is not None, "the trigger is not armed"
    t0 = time.perf_counter()
    for i in range(1000, 1000 + n):
        hook(i)
    return (time.perf_counter() - t0) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=60, help="none/timing pairs")
    ap.add_argument("--steps", type=int, default=300, help="batches per fit")
    ap.add_argument("--width", type=int, default=320, help="hidden width: sets the step time")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--no-system", action="store_true",
                    help="BottleneckProfiler(system_interval_s=None): without the whole-run system sampling")
    args = ap.parse_args()
    rng = np.random.RandomState(0)
    x = rng.rand(args.steps * args.batch, 64).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1].copy())).batch(args.batch).cache().prefetch(tf.data.AUTOTUNE)
    for _ in ds:  # fill the cache once
        pass
    root = tempfile.mkdtemp(prefix="tfbneck-bench-steptime-")
    logging.getLogger("tfbneck").setLevel(logging.ERROR)  # "window never reached", by design
    model = build(args.width)
    model.fit(ds, epochs=1, verbose=0)  # trace and compile once for both configurations
    per = {"none": [], "timing": []}

    def run(config, i):
        timer = Timer()
        cbs = [timer]
        if config == "timing":
            extra = {"system_interval_s": None} if args.no_system else {}
            cbs.append(BottleneckProfiler(os.path.join(root, f"t{i}"), profile_steps=FAR, on_slowdown=True, **extra))
        model.fit(ds, epochs=1, verbose=0, callbacks=cbs)
        return np.diff(np.array(timer.t))[5:]  # steps 6..end

    for i in range(args.pairs):
        for c in (("none", "timing") if i % 2 == 0 else ("timing", "none")):
            per[c].append(run(c, i))
    ratios = np.array([np.median(t) / np.median(n) for t, n in zip(per["timing"], per["none"])])
    step = float(np.median(np.concatenate(per["none"])))
    cost = hook_cost(model, root)
    kind = "tf-keras" if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else f"Keras {keras.__version__}"
    q1, q3 = np.percentile(ratios, [25, 75])
    print(f"\nAlways-on step timing ({kind}, TensorFlow {tf.__version__}, {os.cpu_count()} CPUs; {args.pairs} pairs "
          f"of {args.steps}-step fits; median step {1e3 * step:.3f} ms without callback, "
          f"{1e3 * float(np.median(np.concatenate(per['timing']))):.3f} ms with timing)")
    verdict = "OK" if np.median(ratios) <= 1.005 else "ABOVE TARGET"
    print(f"timing / no callback (median of pair ratios): {np.median(ratios):.4f}   [{q1:.3f}-{q3:.3f}]   "
          f"(target <= 1.005) {verdict}")
    print(f"hook cost, trigger armed: {cost * 1e6:.2f} us per step = {100 * cost / step:.3f}% of the median step "
          f"({1e3 * step:.2f} ms): timing / none = {1 + cost / step:.5f} from the hook alone")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
