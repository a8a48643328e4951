"""What the whole-run system view costs (issue 28, point 1): BottleneckProfiler with the
default ``system_interval_s=1.0`` against the same callback with it off, side by side in
one run.

    python benchmarks/bench_system_view.py [--pairs 8] [--seconds 12] [--width 512] [--batch 128]

One model, compiled once, is trained by ``fit`` calls of ``--seconds`` each, alternately:

  off   BottleneckProfiler(profile_steps=<beyond the run>, system_interval_s=None)
  on    BottleneckProfiler(profile_steps=<beyond the run>)  (system sampled every 1 s,
        ``system/*`` scalars and the system record every 10 s)

Throughput = batches per second over the fit. The two run in pairs, order alternating, so
that drift in machine load hits both alike; the ratio is the median over pairs of on/off
throughput (target >= 0.995). A shared machine's pair-to-pair spread is wider than 0.5 %,
so the sampler's own cost is also timed directly: one sample of this process (the reading,
the rescan of the process tree and the difference, per-thread figures included) repeated
200 times; at one sample a
second its CPU time per second is the share of one core it takes from training. This is a
benchmark, not a test: numbers depend on the machine and its load.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tfbneck_plugin import BottleneckProfiler  # noqa: E402
from tfbneck_plugin.system.sampler import SystemSampler  # noqa: E402

FAR = (10 ** 9, 10 ** 9 + 4)  # a window no run reaches


class _StopAfter(tf.keras.callbacks.Callback):
    def __init__(self, seconds):
        super().__init__()
        self.seconds, self.batches = seconds, 0

    def on_train_begin(self, logs=None):
        self.t0, self.batches = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if time.perf_counter() - self.t0 >= self.seconds:
            self.model.stop_training = True


def throughput(model, ds, cb, seconds):
    stop = _StopAfter(seconds)
    model.fit(ds, epochs=1, steps_per_epoch=10 ** 9, callbacks=[cb, stop], verbose=0)
    return stop.batches / (time.perf_counter() - stop.t0)


def sample_cost(n=200):
    """CPU seconds of one sample (read + difference, per-thread figures included)."""
    import psutil
    s = SystemSampler(1.0, thread_detail=True)
    s._proc = psutil.Process()
    s._prev = s._read(psutil, first=True)
    t0 = time.thread_time()
    for _ in range(n):
        s._scanned = -1e9  # at 1 sample/s every sample also rescans the tree (TREE_REFRESH_S = 0.5 s)
        s._take(psutil, s._read(psutil))
    return (time.thread_time() - t0) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="tfb-bench-sys-")
    x = np.random.rand(args.batch * 32, 256).astype("float32")
    y = np.random.rand(args.batch * 32, 1).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch).cache().repeat()
    model = tf.keras.Sequential([tf.keras.Input((256,)), tf.keras.layers.Dense(args.width, activation="relu"),
                                 tf.keras.layers.Dense(args.width, activation="relu"), tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(ds, epochs=1, steps_per_epoch=20, verbose=0)  # compile outside the pairs
    ratios, rows = [], []
    for i in range(args.pairs):
        cbs = {"off": BottleneckProfiler(os.path.join(root, f"off{i}"), profile_steps=FAR, system_interval_s=None,
                                         verbose=0),
               "on": BottleneckProfiler(os.path.join(root, f"on{i}"), profile_steps=FAR, verbose=0)}
        order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
        got = {k: throughput(model, ds, cbs[k], args.seconds) for k in order}
        for cb in cbs.values():
            cb.close()
        ratios.append(got["on"] / got["off"])
        rows.append((i, got["off"], got["on"], ratios[-1]))
    per_sample = sample_cost()
    shutil.rmtree(root, ignore_errors=True)
    print(f"{'pair':>4}  {'off batches/s':>14}  {'on batches/s':>13}  {'on/off':>7}")
    for i, off, on, r in rows:
        print(f"{i:>4}  {off:>14.1f}  {on:>13.1f}  {r:>7.4f}")
    print(f"median on/off throughput over {args.pairs} pairs: {statistics.median(ratios):.4f} "
          f"(spread {min(ratios):.4f}-{max(ratios):.4f})")
    print(f"one sample costs {per_sample * 1e3:.2f} ms of CPU: at 1 sample/s, {per_sample * 100:.3f} % of one core")


if __name__ == "__main__":
    main()
