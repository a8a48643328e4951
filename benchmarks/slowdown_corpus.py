"""The slowdown trigger's scenario corpus (issue 24): real fits that slow down, and steady
ones, each run once with ``BottleneckProfiler(on_slowdown=True)``; a table of what the
trigger captured.

    python benchmarks/slowdown_corpus.py run [--only NAME,...] [--out DIR] [--jobs N]  # real runs (slow)
    python benchmarks/slowdown_corpus.py table [--out DIR] [--md FILE]       # the table from them
    python benchmarks/slowdown_corpus.py replay [--out DIR]                  # defaults, fit/judge halves
    python benchmarks/slowdown_corpus.py report --md docs/slowdown_capture.md --readme docs/accuracy.md  # all of it
    python benchmarks/slowdown_corpus.py all --md docs/slowdown_capture.md --readme docs/accuracy.md  # run, report

``run`` runs every scenario of :data:`SCENARIOS` in its own interpreter
(``tests/callback_jobs/slowdown_jobs.py corpus``, one profiler per process), under
``benchmarks/under_load.sh -j N`` for those marked ``load`` (N = 2, or the number given:
one spinner on two cores leaves the job switching between a fast and a slow level, the
noisiest kind of busy machine), and keeps each one's
``result.json`` (the windows, their verdicts, the job's own step clock, its CPU seconds
at every step and the machine's busy jiffies every 16, when its input really was slow)
under ``--out`` (default ``benchmarks/out/slowdown_corpus``).

``table`` reads them back: per scenario, the slow phase by the job's own clock (its steps,
seconds and the measured slowdown against the steps before it), whether a triggered window
opened inside it, the delay from the onset to the window (steps and seconds) and the
window's verdict; then the totals the issue asks for: recall over the phases slowed by 2x
or more for 8 s or more, and triggered windows in steady runs. ``--md`` writes it as
Markdown (``docs/slowdown_capture.md`` is this output); ``--readme`` rewrites the copy in that page (docs/accuracy.md)
of the table and its totals (its ``slowdown-corpus`` block).

``replay`` feeds the recorded step times through :class:`~tfbneck_plugin.capture.steptime.StepTimer`
offline (pure Python, no TensorFlow) for a grid of confirmation times, with the scenarios
split in two halves by name: the fit half picks the shortest confirmation with no capture
in any steady run, the judge half reports its recall and false captures; then the factor
(how far apart steady runs and required phases are), and the trigger's check that other
processes took the job's CPU, on and off.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from slowdown_table import load_jobs  # beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOB = os.path.join(ROOT, "tests", "callback_jobs", "slowdown_jobs.py")
UNDER_LOAD = os.path.join(HERE, "under_load.sh")  # spinners and a loopback stream
DEFAULT_OUT = os.path.join(HERE, "out", "slowdown_corpus")

#: Models by their step time on an idle 2-core machine (measured): batch, features, width, depth.
MODELS = {"1ms": (4, 8, 32, 1), "15ms": (256, 512, 1024, 2), "100ms": (512, 1024, 2048, 1),
          "250ms": (512, 1024, 2048, 2)}
NOMINAL_MS = {"1ms": 1.0, "15ms": 15.0, "100ms": 100.0, "250ms": 250.0}


def scenario(name, api="keras3", model="1ms", factor=2.0, onset_s=5.0, slow_s=10.0, tail_s=3.0,
             sched=True, spe=1, epochs=1, load=False, phases=None, steady_s=None, spinners=None, prelude=None):
    """One scenario: the input turns ``factor`` times slower than the steps before it
    ``onset_s`` seconds into training (the job's clock, from its third step), for ``slow_s``
    seconds, then ``tail_s`` seconds more of training (0: training ends while slow).
    ``phases``: several ``(onset_s, slow_s)``; ``steady_s``: no slowdown, that long.
    ``epochs`` > 1: epochs of about 5 s each at the model's nominal step time (the fit
    stops when the scenario is over), so the slow phase spans epochs. ``spinners``: ``(at_s,
    for_s)``, two other processes spin from ``at_s`` seconds for ``for_s`` (the job's own
    work does not change: a steady run whose CPU others take). ``prelude``: ``(factor, until_s)``:
    the input is about ``factor`` x slower from the start until ``until_s`` (a slower first
    epoch), then the job speeds up; the slowdown is measured against the steps after it."""
    b, f, w, d = MODELS[model]
    ph = [] if steady_s is not None else [[on, s] for on, s in (phases or [(onset_s, slow_s)])]
    per_epoch = max(int(5e3 / NOMINAL_MS[model]) // spe * spe, 8 * spe) if epochs > 1 else 10 ** 7 // spe * spe
    return {"name": name, "api": api, "model": model, "batch": b, "features": f, "width": w, "depth": d,
            "factor": factor, "phases": ph, "tail_s": tail_s, "steady_s": steady_s, "spe": spe,
            "epochs": 50 if epochs > 1 else 1, "steps_per_epoch": per_epoch,
            "profile_steps": [40, 44] if sched else [10 ** 8, 10 ** 8 + 4], "load": load, "trigger": None,
            "spinners": spinners, "prelude": [prelude[0], prelude[1], NOMINAL_MS[model]] if prelude else None}


#: The corpus. Onsets: "early" is soon after the trigger can arm (20 warm-up steps, then a
#: baseline of 20 steps and 0.25 s), "middle" after a steady stretch, "late" ends training
#: inside the slow phase.
SCENARIOS = [
    # Slowdowns on an idle machine (as idle as a shared one is).
    scenario("k3-1ms-x2-early", onset_s=2, slow_s=10),
    scenario("k3-1ms-x4-middle-nosched", factor=4, onset_s=6, slow_s=8, sched=False),
    scenario("k3-1ms-x10-late", factor=10, onset_s=6, slow_s=9, tail_s=0),
    scenario("k3-1ms-x1.5-middle", factor=1.5, onset_s=6, slow_s=10),
    scenario("k3-1ms-x2-middle-spe8", onset_s=6, slow_s=10, spe=8),
    scenario("tfk-1ms-x4-early", api="tf_keras", factor=4, onset_s=2, slow_s=10),
    scenario("tfk-15ms-x2-middle-epochs", api="tf_keras", model="15ms", onset_s=8, slow_s=10, epochs=2),
    scenario("tfk-15ms-x4-early-spe8", api="tf_keras", model="15ms", factor=4, onset_s=2, slow_s=8, spe=8),
    scenario("loop-1ms-x2-middle", api="loop", onset_s=6, slow_s=10),
    scenario("loop-15ms-x4-middle", api="loop", model="15ms", factor=4, onset_s=6, slow_s=8),
    scenario("k3-15ms-x2-recovers-returns", model="15ms", phases=[(5, 8), (20, 8)]),
    scenario("k3-15ms-x10-short-3s", model="15ms", factor=10, onset_s=6, slow_s=3),
    scenario("k3-100ms-x2-middle", model="100ms", onset_s=10, slow_s=10),
    scenario("k3-100ms-x4-early-nosched", model="100ms", factor=4, onset_s=6, slow_s=10, sched=False),
    scenario("k3-250ms-x2-middle", model="250ms", onset_s=16, slow_s=12),
    scenario("k3-250ms-x4-middle-epochs", model="250ms", factor=4, onset_s=16, slow_s=14, epochs=2),
    scenario("k3-15ms-x1.5-middle", model="15ms", factor=1.5, onset_s=6, slow_s=15),
    scenario("k3-15ms-x2-long-60s", model="15ms", onset_s=6, slow_s=60),
    # Slowdowns under benchmarks/under_load.sh -j 2 (both cores spinning, a TCP stream).
    scenario("k3-1ms-x2-middle-load", onset_s=6, slow_s=10, load=True),
    scenario("tfk-15ms-x4-middle-load", api="tf_keras", model="15ms", factor=4, onset_s=6, slow_s=8, load=True),
    scenario("loop-1ms-x4-middle-load", api="loop", factor=4, onset_s=6, slow_s=8, load=True),
    scenario("k3-100ms-x2-middle-load", model="100ms", onset_s=10, slow_s=10, load=True),
    # Steady runs (no slowdown), under load.
    scenario("steady-k3-1ms-load", steady_s=20, load=True),
    scenario("steady-k3-1ms-spe8-load", steady_s=20, spe=8, load=True),
    scenario("steady-k3-1ms-epochs-load", steady_s=20, epochs=2, load=True),
    scenario("steady-tfk-1ms-load", api="tf_keras", steady_s=20, load=True),
    scenario("steady-loop-1ms-load", api="loop", steady_s=20, load=True),
    scenario("steady-k3-15ms-load", model="15ms", steady_s=20, load=True),
    scenario("steady-tfk-15ms-epochs-load", api="tf_keras", model="15ms", steady_s=20, epochs=2, load=True),
    scenario("steady-loop-15ms-load", api="loop", model="15ms", steady_s=20, load=True),
    scenario("steady-k3-100ms-load", model="100ms", steady_s=25, load=True),
    scenario("steady-k3-250ms-load", model="250ms", steady_s=30, load=True),
    scenario("steady-k3-15ms-nosched-load", model="15ms", steady_s=20, sched=False, load=True),
    scenario("steady-k3-1ms-idle", steady_s=20),
    # Under benchmarks/under_load.sh -j 1: one spinner on two cores. A job of 1-2 ms steps then
    # switches between levels 1.5-1.7x apart for fractions of a second (tests/test_slowdown.py's
    # steady run fired a window this way in CI).
    scenario("steady-k3-1ms-load1", steady_s=30, load=1),
    scenario("steady-k3-1ms-epochs-load1", steady_s=30, epochs=2, load=1),
    scenario("steady-loop-1ms-load1", api="loop", steady_s=30, load=1),
    scenario("steady-tfk-1ms-load1", api="tf_keras", steady_s=30, load=1),
    scenario("steady-k3-15ms-load1", model="15ms", steady_s=30, load=1),
    scenario("k3-1ms-x2-middle-load1", onset_s=8, slow_s=10, load=1),
    # At the acceptance's edge: steered to 2.3x, so that the job's clock measures them just above
    # 2x (those steered to 2x measure 1.85-1.99x: none of them is a required phase).
    scenario("edge-k3-1ms-x2.3-middle", factor=2.3, onset_s=6, slow_s=10),
    scenario("edge-k3-15ms-x2.3-middle", model="15ms", factor=2.3, onset_s=6, slow_s=10),
    scenario("edge-loop-15ms-x2.3-middle", api="loop", model="15ms", factor=2.3, onset_s=6, slow_s=10),
    scenario("edge-k3-100ms-x2.3-middle", model="100ms", factor=2.3, onset_s=10, slow_s=10),
    scenario("edge-k3-1ms-x2.3-middle-load", factor=2.3, onset_s=6, slow_s=10, load=True),
    scenario("edge-tfk-15ms-x2.3-middle-load", api="tf_keras", model="15ms", factor=2.3, onset_s=6, slow_s=10,
             load=True),
    scenario("edge-k3-1ms-x2.3-middle-load1", factor=2.3, onset_s=8, slow_s=10, load=1),
    # The same steady run again: how often a busy machine alone makes a window (CI's steady run
    # under load fired once more after the fix above: a faster interlude, then the usual level).
] + [scenario(f"steady-k3-1ms-load1-r{i}", steady_s=30, load=1) for i in range(2, 10)] + [
    # The edge under -j 2 again (pass 8 missed it; 5 of 10 repeats were missed before the
    # trigger held open a stretch whose CPU per step grew), and the steady run whose hold
    # raised its CPU per step most in those repeats (1.59x): the "own work" rule's two sides.
] + [scenario(f"edge-k3-1ms-x2.3-middle-load-r{i}", factor=2.3, onset_s=6, slow_s=10, load=True)
     for i in range(2, 6)] + [
    scenario(f"steady-loop-1ms-load1-r{i}", api="loop", steady_s=30, load=1) for i in range(2, 5)
] + [
    # Other processes take the CPU of a steady job from 8 s on, for 12 s (not its children; no
    # scheduled window, whose analysis child would turn the trigger's CPU check off).
    scenario("steady-k3-1ms-spinners", steady_s=24, sched=False, spinners=(8.0, 12)),
    scenario("steady-k3-15ms-spinners", model="15ms", steady_s=24, sched=False, spinners=(8.0, 12)),
    # A slowdown right after a speed-up (a newcomer's fit: a slower first epoch, then its map
    # turned heavier 23 steps after the trigger took the faster steps for a new level, missed in
    # 2 of 3 runs under -j 2): the input 2.3x slower until 8 s, fast, then 2.3x slower again
    # (back at the first level) from the onset. The faster stretch is confirmed about 0.3 s
    # after the speed-up on an idle machine and 2 s on a busy one: the onsets fall just after.
    scenario("speedup-k3-1ms-x2.3-idle", factor=2.3, prelude=(2.3, 8), onset_s=8.4, slow_s=10),
    scenario("speedup-k3-15ms-x2.3-idle", model="15ms", factor=2.3, prelude=(2.3, 8), onset_s=8.6, slow_s=10),
    scenario("speedup-k3-1ms-x2.3-load", factor=2.3, prelude=(2.3, 8), onset_s=11, slow_s=10, load=True),
    scenario("speedup-k3-1ms-x2.3-load-r2", factor=2.3, prelude=(2.3, 8), onset_s=10.5, slow_s=10, load=True),
    scenario("speedup-k3-1ms-x2.3-load-r3", factor=2.3, prelude=(2.3, 8), onset_s=12, slow_s=10, load=True),
    scenario("speedup-tfk-15ms-x2.3-load", api="tf_keras", model="15ms", factor=2.3, prelude=(2.3, 8), onset_s=11,
             slow_s=10, load=True),
    scenario("speedup-loop-1ms-x2.3-load", api="loop", factor=2.3, prelude=(2.3, 8), onset_s=11, slow_s=10, load=True),
    scenario("speedup-k3-1ms-x2.3-load1", factor=2.3, prelude=(2.3, 8), onset_s=11, slow_s=10, load=1),
    # ... and the same speed-up with no slowdown after it.
    scenario("steady-speedup-k3-1ms-load", prelude=(2.3, 8), steady_s=25, load=True),
    scenario("steady-speedup-k3-1ms-load1", prelude=(2.3, 8), steady_s=25, load=1),
    scenario("steady-speedup-tfk-15ms-load", api="tf_keras", model="15ms", prelude=(2.3, 8), steady_s=25, load=True),
]


def run_one(spec, out):
    folder = os.path.join(out, spec["name"])
    os.makedirs(folder, exist_ok=True)
    env = dict(os.environ, SLOWDOWN_SPEC=json.dumps(spec), TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TF_USE_LEGACY_KERAS", None)
    if spec["api"] == "tf_keras":
        env["TF_USE_LEGACY_KERAS"] = "1"
    cmd = [sys.executable, JOB, "corpus", folder]
    if spec["load"]:
        cmd = [UNDER_LOAD, "-j", str(load_jobs(spec))] + cmd
    t = time.time()
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[0]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[0]
    with open(os.path.join(folder, "job.log"), "w") as f:
        f.write(f"load average before {load_before}, after {load_after}\n")
        f.write(proc.stdout[-20000:] + proc.stderr[-20000:])
    print(f"{spec['name']}: exit {proc.returncode}, {time.time() - t:.0f} s, load average {load_before} -> "
          f"{load_after}", flush=True)


def run(names, out, jobs=1):
    """Runs the scenarios (``jobs`` at a time: each one's timing is in seconds of its own
    clock, so running several at once only adds load, as other processes do)."""
    from concurrent.futures import ThreadPoolExecutor
    todo = [s for s in SCENARIOS if (s["name"] in names if names else
                                     not os.path.exists(os.path.join(out, s["name"], "result.json")))]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda spec: run_one(spec, out), todo))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["run", "table", "replay", "report", "all"])
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--md", default=None, help="write the table as Markdown to this file")
    ap.add_argument("--jobs", type=int, default=1, help="scenarios run at once (default 1)")
    ap.add_argument("--readme", default=None, help="also rewrite the captures table and totals in this README's "
                    "slowdown-corpus block")
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n]
    if a.what in ("run", "all"):
        run(names, a.out, a.jobs)
    if a.what != "run":
        from slowdown_table import full_report, replay_report, table_report  # noqa: E402 - beside this file
        text = {"table": table_report, "replay": replay_report, "report": full_report,
                "all": full_report}[a.what](a.out)
        print(text)
        if a.md:
            with open(a.md, "w") as f:
                f.write(text)
        if a.readme:
            from slowdown_table import write_readme_block  # noqa: E402
            write_readme_block(a.out, a.readme)


if __name__ == "__main__":
    main()
