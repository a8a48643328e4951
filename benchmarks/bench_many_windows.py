"""Long jobs stay flat (issue 22, point 4): many short profiling windows in one process, the
process' threads, open files, memory and per-step cost at the start against the end.

    python benchmarks/bench_many_windows.py [--windows 1000] [--every 40] [--analyze process]

One custom training loop (a small ``tf.function`` step) runs under one ``BottleneckProfiler``
with a periodic schedule of 2-step windows (``profile_steps(every=--every, length=2)``) and
the slowdown trigger armed with thresholds a benchmark can meet (``SlowdownTrigger(
consecutive=10, min_seconds=0.02, window_steps=2, cooldown_steps=--every, max_captures=
unlimited)``); every ``--slow-every`` windows, right after a window closed and its analysis
ended (the trigger waits while one runs), the loop slows down (a 20 ms sleep per step for 25
steps), so the trigger opens windows of its own. Each window: the system sampler, the
profiler's start, stop and export, and (``--analyze process``, the default) the analysis in
a child process with its scalars. Session folders are deleted as they are published, so the
disk stays flat too.

Measured after the first ``--settle`` windows (start) and after the last (end), side by
side: threads (``/proc/self/task``), open file descriptors (``/proc/self/fd``), resident
memory (``psutil``), and the per-step cost: ``--pairs`` pairs of steps, one bare
(``step()``) and one wrapped (``with profiler.step(): step()``), in alternation so that the
machine's load hits both alike (pairs whose wrapped step falls in a window are dropped);
the cost is the median of (wrapped - bare) and the step the median bare step. Prints a table
and one JSON line. This is a benchmark, not a test: numbers depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import psutil  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tfbneck_plugin import BottleneckProfiler, SlowdownTrigger, profile_steps  # noqa: E402

#: Per-step sleep while the loop is slowed (s): far above the step (and its noise on a busy
#: machine), so the trigger fires.
SLOW_SLEEP_S = 0.02
SLOW_STEPS = 25


def snapshot(proc: psutil.Process) -> dict:
    """Threads, open file descriptors and RSS (MiB) of this process now."""
    return {"threads": len(os.listdir("/proc/self/task")), "open_fds": len(os.listdir("/proc/self/fd")),
            "rss_mib": round(proc.memory_info().rss / 2 ** 20, 1)}


def step_cost(profiler, step, pairs: int) -> dict:
    """Median bare step and median extra cost of wrapping it in ``profiler.step()`` (us)."""
    bare, extra = [], []
    for _ in range(pairs):
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        before = (profiler._capture, len(profiler.windows))
        with profiler.step():
            step()
        t2 = time.perf_counter()
        if before == (None, len(profiler.windows)) and profiler._capture is None:  # a step outside windows
            bare.append(t1 - t0)
            extra.append((t2 - t1) - (t1 - t0))
    return {"step_us": round(1e6 * statistics.median(bare), 1), "hook_us": round(1e6 * statistics.median(extra), 2),
            "pairs": len(extra)}


def make_step(width: int):
    w = tf.Variable(tf.random.normal([width, width], seed=1) * 0.01)
    x = tf.random.normal([64, width], seed=2)

    @tf.function
    def step():
        y = tf.tanh(x @ w)
        w.assign_sub(0.0001 * tf.reduce_mean(y) * tf.ones_like(w))
        return y

    return step


def run(args) -> dict:
    log_dir = tempfile.mkdtemp(prefix="tfbneck-many-")
    logging.getLogger("tfbneck").setLevel(logging.ERROR)  # one verdict line per window is noise here
    trigger = SlowdownTrigger(consecutive=10, min_seconds=0.02, window_steps=2, cooldown_steps=args.every,
                              max_captures=10 ** 9, warmup_steps=20)
    profiler = BottleneckProfiler(log_dir, profile_steps=profile_steps(every=args.every, length=2, start=args.every),
                                  on_slowdown=trigger, analyze=False if args.analyze == "off" else args.analyze,
                                  verbose=0)
    step = make_step(args.width)
    proc = psutil.Process()
    marks, slow_left, last_slow_at, prev_closed = {}, 0, 0, 0
    t0 = time.monotonic()
    while True:
        n_closed = sum(1 for w in profiler.windows if w.status != "open")
        if n_closed >= args.windows:
            break
        if n_closed >= args.settle and "start" not in marks and profiler._capture is None:
            profiler.wait_for_analysis(120)
            marks["start"] = dict(snapshot(proc), **step_cost(profiler, step, args.pairs))
        if args.slow_every and n_closed - last_slow_at >= args.slow_every and slow_left == 0 \
                and profiler._capture is None and n_closed > prev_closed:
            # Right after a window closed: the trigger waits while an analysis runs, so the
            # slow run begins once they finished, and ends before the next scheduled window.
            profiler.wait_for_analysis(120)
            slow_left, last_slow_at = SLOW_STEPS, n_closed
        prev_closed = n_closed
        with profiler.step():
            step()
            if slow_left:
                time.sleep(SLOW_SLEEP_S)
                slow_left -= 1
        for rec in profiler.windows:  # keep the disk flat: drop published sessions
            if rec.session_dir and rec.status != "open" and (rec.report is not None or args.analyze == "off"
                                                             or rec.analysis_error):
                shutil.rmtree(rec.session_dir, ignore_errors=True)
                rec.session_dir = None
    while profiler._capture is not None:  # let the last window close, then measure as at the start
        with profiler.step():
            step()
    profiler.wait_for_analysis(300)
    marks["end"] = dict(snapshot(proc), **step_cost(profiler, step, args.pairs))
    profiler.close(wait=True, timeout=300)
    elapsed = time.monotonic() - t0
    shutil.rmtree(log_dir, ignore_errors=True)
    kinds = [w.kind for w in profiler.windows]
    return {"windows": len(profiler.windows), "scheduled": kinds.count("scheduled"),
            "triggered": kinds.count("triggered"), "profiled": sum(w.status == "profiled" for w in profiler.windows),
            "skipped": sum(w.status == "skipped" for w in profiler.windows),
            "analysed": sum(w.report is not None for w in profiler.windows), "seconds": round(elapsed, 1),
            "analysis_errors": sorted({str(w.analysis_error)[:120] for w in profiler.windows if w.analysis_error}),
            # windows[i].report is kept by design: what the records hold is part of the RSS growth
            "reports_kib": round(sum(len(json.dumps(w.report)) for w in profiler.windows if w.report) / 1024, 1),
            "start": marks["start"], "end": marks["end"], "analyze": args.analyze, "every": args.every,
            "load_avg": [round(v, 2) for v in os.getloadavg()], "cpus": os.cpu_count()}


def table(r: dict) -> str:
    rows = [("threads", r["start"]["threads"], r["end"]["threads"]),
            ("open files", r["start"]["open_fds"], r["end"]["open_fds"]),
            ("RSS (MiB)", r["start"]["rss_mib"], r["end"]["rss_mib"]),
            ("bare step (us, median)", r["start"]["step_us"], r["end"]["step_us"]),
            ("profiler.step() cost per step (us, median of pairs)", r["start"]["hook_us"], r["end"]["hook_us"])]
    out = [f"{r['windows']} windows ({r['scheduled']} scheduled, {r['triggered']} triggered; {r['profiled']} "
           f"profiled, {r['skipped']} skipped, {r['analysed']} analysed) in {r['seconds']} s, load {r['load_avg']}; "
           f"the window records' reports hold {r['reports_kib']} KiB of JSON",
           "| measure | start | end | end/start |", "|---|---|---|---|"]
    for name, a, b in rows:
        out.append(f"| {name} | {a} | {b} | {b / a:.3f} |" if a else f"| {name} | {a} | {b} | - |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=1000)
    ap.add_argument("--every", type=int, default=60, help="steps between scheduled windows")
    ap.add_argument("--settle", type=int, default=10, help="windows before the start measurement")
    ap.add_argument("--slow-every", type=int, default=10, help="slow the loop down every this many windows (0: never)")
    ap.add_argument("--analyze", default="process", choices=["process", "thread", "off"])
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--pairs", type=int, default=1000, help="bare/wrapped step pairs per measurement")
    args = ap.parse_args(argv)
    r = run(args)
    print(table(r))
    print("RESULT " + json.dumps(r))


if __name__ == "__main__":
    main()
