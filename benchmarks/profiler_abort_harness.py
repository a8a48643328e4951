"""Stress harness for TensorFlow's profiler abort (issue 22): many short profiling windows,
counting the processes that die inside them.

    python benchmarks/profiler_abort_harness.py WORKLOAD --windows N [options]

Workloads:

* ``seq_map``: one process runs a custom training loop over a tf.data pipeline whose map is
  sequential and heavy (``--passes`` passes of sin/cos per element), profiled by
  ``BottleneckProfiler`` in windows of ``--window-steps`` steps every ``--every`` steps;
* ``par_map``: the same map with ``num_parallel_calls=AUTOTUNE`` and a prefetch;
* ``multiworker``: 2-worker ``MultiWorkerMirroredStrategy`` jobs on localhost
  (``tests/tf_jobs/multiworker_fit.py``: tf-keras, CPU, worker 1's map sequential and heavy),
  one window per worker per job.

Each child process runs many windows (``--per-child``) so that TensorFlow's start-up is paid
rarely; a child that dies is replaced and counted: the windows it had closed are kept, the
window it died in is counted as a death. With ``--gdb`` each child runs under ``gdb -batch``
and the native backtrace of a death is saved in ``--out``. ``--host-tracer-level`` passes
``profiler_options={"host_tracer_level": n}`` to the callback (single-process workloads).
Prints one JSON line per child and a summary: deaths per 100 windows. What the deaths are
and why no setting of the callback avoids them: ``docs/profiler_abort.md``.

Scale here (2 shared cores): a window of 3 steps with its export takes about a second.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTIWORKER = os.path.join(ROOT, "tests", "tf_jobs", "multiworker_fit.py")
#: glibc's messages when it aborts on a corrupted heap (malloc.c), and TensorFlow's own.
ABORT_LINE = re.compile(r"(free\(\)|double free|corrupted|malloc\(\)|munmap_chunk|Segmentation|Aborted|"
                        r"terminate called|Fatal Python error).*")


# ------------------------------------------------------------------------------------------
# Child: one process, many windows
# ------------------------------------------------------------------------------------------

def child(args) -> None:
    """Run ``args.per_child`` windows in this process; one line ``W <i>`` per closed window."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tfbneck_plugin import BottleneckProfiler, profile_steps

    def heavy(x, y):
        for _ in range(args.passes):
            x = tf.math.sin(x) * 1.0001 + tf.math.cos(x) * 0.0001
        return x, y

    f = tf.random.normal([4096, 64], seed=1)
    labels = tf.random.uniform([4096], 0, 10, tf.int32, seed=2)
    ds = tf.data.Dataset.from_tensor_slices((f, labels)).repeat()
    if args.workload == "seq_map":
        opts = tf.data.Options()
        opts.experimental_optimization.map_parallelization = False
        ds = ds.map(heavy).with_options(opts).batch(32)
    else:
        ds = ds.map(heavy, num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(2)
    w = tf.Variable(tf.random.normal([64, 10], seed=3))

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, x @ w))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return loss

    schedule = profile_steps(every=args.every, length=args.window_steps, start=args.every)
    profiler = BottleneckProfiler(args.log_dir, profile_steps=schedule, analyze=False, system_metrics=False,
                                  max_window_steps=max(100, args.window_steps),
                                  profiler_options={"host_tracer_level": args.host_tracer_level})
    done = 0
    with profiler:
        for x, y in ds:
            with profiler.step():
                train_step(x, y)
            closed = sum(1 for r in profiler.windows if r.status != "open")
            while done < closed:
                print("W", done, profiler.windows[done].status, flush=True)
                done += 1
                shutil.rmtree(os.path.join(args.log_dir, "plugins"), ignore_errors=True)  # keep the disk flat
            if done >= args.per_child:
                break
    print("DONE", flush=True)


# ------------------------------------------------------------------------------------------
# Parent: children in a loop, deaths counted
# ------------------------------------------------------------------------------------------

def gdb_prefix(out_dir: str, tag: str):
    log = os.path.join(out_dir, f"gdb-{tag}.txt")
    return ["gdb", "-batch", "-return-child-result", "-ex", "set pagination off", "-ex", "set confirm off",
            "-ex", "handle SIGPIPE SIGUSR1 SIGUSR2 SIG32 SIG33 SIG34 SIG35 nostop noprint",
            "-ex", f"set logging file {log}", "-ex", "set logging overwrite on", "-ex", "set logging redirect on",
            "-ex", "run", "-ex", "set logging enabled on", "-ex", "bt 40", "-ex", "info threads",
            "-ex", "kill", "--args"], log


def env_for():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)


def run_children(args) -> dict:
    windows = deaths = children = 0
    seen = []
    while windows + deaths < args.windows:
        tag = f"{args.workload}-{children}"
        log_dir = tempfile.mkdtemp(prefix="tfbneck-abort-")
        cmd = [sys.executable, os.path.abspath(__file__), args.workload, "--child", "--log-dir", log_dir,
               "--passes", str(args.passes), "--every", str(args.every), "--window-steps", str(args.window_steps),
               "--per-child", str(min(args.per_child, args.windows - windows - deaths)),
               "--host-tracer-level", str(args.host_tracer_level)]
        gdb_log = None
        if args.gdb:
            prefix, gdb_log = gdb_prefix(args.out, tag)
            cmd = prefix + cmd
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env_for(), timeout=3600)
        shutil.rmtree(log_dir, ignore_errors=True)
        closed = sum(1 for line in proc.stdout.splitlines() if line.startswith("W "))
        finished = "DONE" in proc.stdout
        died = not finished
        children += 1
        windows += closed
        deaths += int(died)
        row = {"child": tag, "windows": closed, "died": died, "rc": proc.returncode,
               "seconds": round(time.monotonic() - t0, 1)}
        if died:
            row["message"] = [m.group(0)[:200] for m in ABORT_LINE.finditer(proc.stderr + proc.stdout)][:3]
            row["stderr_tail"] = proc.stderr[-1500:]
            if gdb_log and os.path.exists(gdb_log):
                row["gdb"] = gdb_log
        elif gdb_log and os.path.exists(gdb_log):
            os.unlink(gdb_log)
        print(json.dumps(row), flush=True)
        seen.append(row)
    return {"workload": args.workload, "host_tracer_level": args.host_tracer_level, "windows": windows, "deaths": deaths,
            "children": children, "deaths_per_100_windows": round(100.0 * deaths / max(1, windows + deaths), 2)}


def run_multiworker(args) -> dict:
    """``args.windows // 2`` 2-worker jobs; a job whose worker dies counts one death per dead worker."""
    sys.path.insert(0, os.path.dirname(MULTIWORKER))
    import multiworker_fit as mw
    jobs = deaths = windows = timeouts = 0
    while windows + deaths < args.windows:
        log_dir = tempfile.mkdtemp(prefix="tfbneck-abort-mw-")
        ports = [str(p) for p in mw.free_ports(2)]
        procs, logs = [], []
        for i in range(2):
            cmd = [sys.executable, MULTIWORKER, log_dir, str(i), *ports, "1", "64", "6", str(5 + args.window_steps)]
            gdb_log = None
            if args.gdb:
                prefix, gdb_log = gdb_prefix(args.out, f"mw-{jobs}-w{i}")
                cmd = prefix + cmd
            out = open(os.path.join(log_dir + f".w{i}.log"), "w")
            env = env_for()
            env.update(TF_USE_LEGACY_KERAS="1")
            env.pop("TF_CONFIG", None)
            procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env))
            logs.append((out, gdb_log))
        codes, killed = [], False
        deadline = time.monotonic() + args.job_timeout
        for p in procs:  # a worker whose peer died waits in its all-reduce: killed at the deadline
            try:
                codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
                killed = True
        texts = []
        for (out, _g), i in zip(logs, range(2)):
            out.close()
            with open(log_dir + f".w{i}.log", errors="replace") as f:
                texts.append(f.read())
        died = [i for i in range(2) if f"DONE {i}" not in texts[i]]
        # The worker killed by a signal (or with glibc's heap message) is the casualty; its
        # peer then fails in its all-reduce. A job killed at the deadline without one is a
        # timeout (a busy machine), counted apart.
        first = [i for i in died if ABORT_LINE.search(texts[i]) or codes[i] in (-6, -11)]
        jobs += 1
        if killed and not first:
            timeouts += 1
        else:
            deaths += len(first) if first else (1 if died else 0)
            windows += 2 - (len(first) if first else (1 if died else 0))
        row = {"job": jobs, "codes": codes, "died": died, "aborted": first, "timed_out": killed and not first,
               "message": [m.group(0)[:200] for i in first for m in ABORT_LINE.finditer(texts[i])][:3]}
        if first and args.gdb:
            row["gdb"] = [logs[i][1] for i in first]
        print(json.dumps(row), flush=True)
        for i in range(2):
            os.unlink(log_dir + f".w{i}.log")
        shutil.rmtree(log_dir, ignore_errors=True)
    return {"workload": "multiworker", "jobs": jobs, "timed_out_jobs": timeouts, "windows": windows,
            "deaths": deaths, "deaths_per_100_windows": round(100.0 * deaths / max(1, windows + deaths), 2)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=["seq_map", "par_map", "multiworker"])
    ap.add_argument("--windows", type=int, default=200, help="windows to run in all (multiworker: 2 per job)")
    ap.add_argument("--per-child", type=int, default=50, help="windows per child process")
    ap.add_argument("--window-steps", type=int, default=3)
    ap.add_argument("--every", type=int, default=6, help="a window every this many steps")
    ap.add_argument("--passes", type=int, default=200, help="sin/cos passes per element of the heavy map")
    ap.add_argument("--job-timeout", type=float, default=900, help="seconds before a multiworker job is killed")
    ap.add_argument("--host-tracer-level", type=int, default=2, help="the callback's profiler_options")
    ap.add_argument("--gdb", action="store_true", help="run children under gdb; keep backtraces of deaths")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "tfbneck-abort"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--log-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return
    os.makedirs(args.out, exist_ok=True)
    summary = run_multiworker(args) if args.workload == "multiworker" else run_children(args)
    print("SUMMARY " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
