"""Stand-alone reproduction of TensorFlow's profiler abort (no tfbneck): a 2-worker
``MultiWorkerMirroredStrategy`` job on localhost (CPU) whose workers both open and close
``tf.profiler.experimental`` sessions of a few steps, over and over; worker 1's tf.data map
is sequential and heavy, so worker 0 waits for it in every all-reduce.

    python benchmarks/profiler_abort_repro.py [--windows 30] [--steps 5] [--passes 300] [--jobs 1]
                                              [--host-tracer-level 2]

Each worker prints ``W <n>`` after each window it closed. A worker that dies inside
``tf.profiler.experimental.stop()`` (SIGSEGV, or glibc's ``free(): invalid pointer`` /
``double free or corruption``) ends the job; the other worker then fails in its all-reduce.
The script prints one JSON line per job: windows closed per worker, exit codes, and the
first fatal message. Run a worker under ``gdb -batch -ex run -ex bt --args python
benchmarks/profiler_abort_repro.py --worker ...`` for the native backtrace (docs/profiler_abort.md).
Needs only TensorFlow (tested with 2.21, CPU); ``--driver tfbneck`` opens the same windows
through ``BottleneckProfiler`` instead (this project installed).
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

FATAL = re.compile(r"(free\(\)[^\n]*|double free[^\n]*|corrupted[^\n]*|Segmentation fault[^\n]*|Aborted[^\n]*)")


def worker(args):
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in args.ports]},
                                          "task": {"type": "worker", "index": args.index}})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(2)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def heavy(x, y):
        for _ in range(args.passes):
            x = tf.math.sin(x) * 1.0001 + tf.math.cos(x) * 0.0001
        return x, y

    ds = tf.data.Dataset.from_tensor_slices((tf.random.normal([4096, 64], seed=1),
                                             tf.random.uniform([4096], 0, 10, tf.int32, seed=2))).repeat()
    if args.index == 1:  # the straggler: a sequential heavy map
        opts = tf.data.Options()
        opts.experimental_optimization.map_parallelization = False
        ds = ds.map(heavy).with_options(opts)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.batch(32).with_options(opts)
    with strategy.scope():
        w1 = tf.Variable(tf.random.normal([64, 64], seed=3) * 0.1)
        w2 = tf.Variable(tf.random.normal([64, 10], seed=4) * 0.1)
    it = iter(strategy.experimental_distribute_dataset(ds))

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(x @ w1) @ w2
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, [w1, w2])
        grads = tf.distribute.get_replica_context().all_reduce("SUM", grads)
        for v, g in zip([w1, w2], grads):
            v.assign_sub(0.01 * g)
        return loss

    @tf.function
    def train_step(iterator):
        return strategy.run(step_fn, args=next(iterator))

    for _ in range(3):
        train_step(it)
    if args.driver == "tfbneck":
        return through_callback(args, train_step, it)
    for n in range(args.windows):
        tf.profiler.experimental.start(args.log_dir, options=tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=args.host_tracer_level))
        for s in range(args.steps):
            with tf.profiler.experimental.Trace("train", step_num=s, _r=1):
                train_step(it)
        tf.profiler.experimental.stop()
        print("W", n, flush=True)
    print("DONE", args.index, flush=True)


def through_callback(args, train_step, it):
    """The same windows opened and closed by tfbneck's ``BottleneckProfiler`` (a custom loop,
    one window of ``--steps`` steps every ``--steps`` + 3 steps) instead of TensorFlow's own
    start/stop: what a user of the callback meets."""
    from tfbneck_plugin import BottleneckProfiler, profile_steps

    schedule = profile_steps(every=args.steps + 3, length=args.steps, start=4, count=args.windows)
    profiler = BottleneckProfiler(args.log_dir, profile_steps=schedule, analyze=False, system_metrics=False,
                                  system_interval_s=None, verbose=0)
    closed = 0
    with profiler:
        while closed < args.windows:  # both workers stop after the same step: the schedule is the same
            with profiler.step():
                train_step(it)
            while closed < sum(1 for r in profiler.windows if r.status != "open"):
                print("W", closed, profiler.windows[closed].status, flush=True)
                closed += 1
    print("DONE", args.index, flush=True)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def job(args):
    ports = [str(p) for p in free_ports(2)]
    root = tempfile.mkdtemp(prefix="tf-profiler-abort-")
    procs, logs = [], []
    for i in range(2):
        log = os.path.join(root, f"worker{i}.log")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(i), "--ports", *ports,
               "--windows", str(args.windows), "--steps", str(args.steps), "--passes", str(args.passes),
               "--host-tracer-level", str(args.host_tracer_level), "--driver", args.driver,
               "--log-dir", os.path.join(root, f"logs{i}")]
        with open(log, "w") as out:
            procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT))
        logs.append(log)
    codes = [p.wait(timeout=3600) for p in procs]
    texts = [open(f, errors="replace").read() for f in logs]
    closed = [[line.split() for line in t.splitlines() if line.startswith("W ")] for t in texts]
    windows = [len(lines) for lines in closed]
    fatal = [FATAL.search(t).group(0) if FATAL.search(t) else None for t in texts]
    statuses = sorted({fields[2] for lines in closed for fields in lines if len(fields) > 2})
    subprocess.run(["rm", "-rf", root])
    out = {"codes": codes, "windows": windows, "fatal": fatal}
    if statuses:
        out["statuses"] = statuses  # --driver tfbneck: the callback's window statuses seen
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=30, help="profiling sessions per worker")
    ap.add_argument("--steps", type=int, default=5, help="steps per session")
    ap.add_argument("--passes", type=int, default=300, help="sin/cos passes per element on worker 1")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--host-tracer-level", type=int, default=2,
                    help="ProfilerOptions.host_tracer_level of every session (TensorFlow's default: 2)")
    ap.add_argument("--driver", choices=["tf", "tfbneck"], default="tf",
                    help="who starts and stops the profiler: TensorFlow's API (default) or BottleneckProfiler")
    ap.add_argument("--worker", type=int, dest="index", default=None)
    ap.add_argument("--ports", nargs=2)
    ap.add_argument("--log-dir")
    args = ap.parse_args()
    if args.index is not None:
        worker(args)
        return
    for _ in range(args.jobs):
        t0 = time.monotonic()
        print(json.dumps(dict(job(args), seconds=round(time.monotonic() - t0, 1))), flush=True)


if __name__ == "__main__":
    main()
