"""Run folders built from the shipped demo runs for the tests of a run's own facts (its trend
file's slow stretches, its several windows)."""
import json
import os
import shutil

from support.paths import DEMO_LOGS


def run_with_two_windows(root) -> str:
    """``<root>/cpu_bound_input``: a copy of the shipped cpu_bound_input run with a second,
    later session of the same trace, and a slow stretch (steps 20-31) its trend file records
    as not captured. Returns the run folder."""
    run = os.path.join(str(root), "cpu_bound_input")
    shutil.copytree(os.path.join(DEMO_LOGS, "cpu_bound_input"), run)
    profile = os.path.join(run, "plugins", "profile")
    (first,) = os.listdir(profile)
    shutil.copytree(os.path.join(profile, first), os.path.join(profile, "2026_11_30_12_25_00_steps40-44"))
    folder = os.path.join(run, "plugins", "bottleneck")
    (trend,) = [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("steptimes_")]
    with open(trend) as f:
        t = json.load(f)
    t["trigger_state"] = {"log": [{"first_step": 20, "last_step": 31, "baseline_p50_ms": 12.0,
                                   "observed_p50_ms": 30.0, "outcome": "not captured: max_captures reached"}]}
    with open(trend, "w") as f:
        json.dump(t, f)
    return run
