"""``tfbneck compare`` on real runs of identical and changed code (issue 25 point 3): each
run is benchmarks/noise_job.py (a custom loop, one profiling window, the step-time trend
every 25 steps). Two runs of the same code never fail the 5 % gate (they may be
``no_change`` or ``inconclusive``, with the line saying what is missing); the code made 2x
slower is seen slower on the trend's periods and fails it. The false-alarm and detection
rates over many pairs are benchmarks/compare_noise.py's (docs/compare_noise.md)."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, tfbneck_cmd

pytestmark = [pytest.mark.tf, pytest.mark.serial]  # timing assertions: run alone (tests/run.sh)
JOB = os.path.join(ROOT, "benchmarks", "noise_job.py")


#: Steps per run: 600 (about 3 s here), so a side's periods outlast a hiccup of the machine (a CI
#: run of 300 steps, 1.6 s, of identical code ran 42 % slower by its own clock, CPU time per step
#: too, and failed the gate; a run of minutes is what a user's gate compares).
STEPS = 600


def _run(work, out):
    import importlib.util
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed (pip install 'tfbneck-plugin[tensorflow]')")
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, JOB, str(work), str(out), str(STEPS)], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-3000:]
    return float(next(x.split()[1] for x in r.stdout.splitlines() if x.startswith("CLOCK_MS")))


def _compare(a, b):
    r = subprocess.run(tfbneck_cmd() + ["compare", str(a), str(b), "--format", "json", "--fail-if-slower", "5"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr


def _cpu_per_step(run):
    """The trend's CPU time per step (ms) of each period after the first, which has none."""
    (path,) = glob.glob(os.path.join(str(run), "plugins", "bottleneck", "steptimes_*.json"))
    points = json.load(open(path))["points"]
    assert "cpu_ms" not in points[0] and all(p["cpu_ms"] > 0 for p in points[1:]), points
    return np.array([p["cpu_ms"] for p in points[1:]])


def test_identical_code_never_fails_the_gate_and_2x_does(tmp_path):
    runs = {name: tmp_path / name for name in ("base_a", "base_b", "double")}
    clocks = {name: _run(40 if name == "double" else 20, path) for name, path in runs.items()}
    # The code's own cost: twice the work, more CPU time per step whatever the load, but less than
    # twice: the step's fixed part (the call, the next batch, the loop) does not double (a CI run
    # read 1.396). Above the 20 % run-to-run floor of CPU per step (docs/compare_noise.md).
    ratio = np.median(_cpu_per_step(runs["double"])) / np.median(_cpu_per_step(runs["base_a"]))
    assert 1.25 < ratio < 2.8, ratio
    rc, out, err = _compare(runs["base_a"], runs["base_b"])
    (c,) = out["comparisons"]
    assert rc == 0 and c["verdict"] != "slower", (c["verdict"], c["change_pct"], clocks, err)
    assert c["evidence"]["level"] == "periods" and min(c["evidence"]["units"]) >= 4, c["evidence"]
    if c["verdict"] == "inconclusive":
        assert err.count("\n") == 1 and "inconclusive" in err and c["evidence"]["missing"] in err
    # The doubled work: its own clock says how much slower it really ran; when that is clear
    # of the floor, compare must see it and fail the gate.
    rc, out, err = _compare(runs["base_a"], runs["double"])
    (c,) = out["comparisons"]
    real = clocks["double"] / clocks["base_a"] - 1
    if real > 0.6 and not c["load"]["differs"]:
        assert rc == 1 and c["verdict"] == "slower", (c, clocks)
        assert "slower than" in err


def test_window_overhead_against_the_jobs_own_clock(tmp_path):
    """Issue 25 point 5: a window's traced step time against the job's unprofiled step time
    around it (the trend's periods on each side), on a real run: the figure the trend file
    carries for every analysed window (``windows[i].overhead``)."""
    from tfbneck_plugin.analysis.session import analyze_session
    from tfbneck_plugin.capture.trend import AROUND_MIN_STEPS, verdict_of, window_overhead
    from tfbneck_plugin.logdir import find_sessions
    _run(20, tmp_path / "run")
    (path,) = glob.glob(str(tmp_path / "run" / "plugins" / "bottleneck" / "steptimes_*.json"))
    points = json.load(open(path))["points"]
    (session,) = find_sessions(str(tmp_path / "run")).sessions
    verdict = verdict_of(analyze_session(session))
    got = window_overhead((100, 104), verdict, points)
    # The job's clock is each period's mean step (the time the job really took per step), of
    # the periods the window ran in (25 steps each: 76-100 and 101-125), which leave the
    # window's steps out and between them hold at least AROUND_MIN_STEPS timed steps.
    inside = [p for p in points if p["first_step"] <= 104 and p["step"] >= 100]
    assert [(p["first_step"], p["step"]) for p in inside] == [(76, 100), (101, 125)], points
    assert AROUND_MIN_STEPS <= sum(p["n"] for p in inside) <= 50 - 5, inside
    near = [p["mean_ms"] for p in inside]
    assert got["job_step_ms"] == pytest.approx(float(np.median(near)), abs=1e-3)
    assert got["x"] == pytest.approx(verdict["step_time_ms"] / float(np.median(near)), abs=0.01)
    # (Whether the traced step is slower depends on the machine's load at that moment too: on the
    # busy 2-core machine of docs/compare_noise.md one window read 0.36x, another 5x.)
