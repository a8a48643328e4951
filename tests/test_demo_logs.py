"""README command 1's input: every shipped demo run gets the verdict it was built for."""
import json
import os
import subprocess

from conftest import DEMO_LOGS, tfbneck_cmd


def test_demo_verdicts_match_how_each_run_was_made():
    expected = json.load(open(os.path.join(DEMO_LOGS, "EXPECTED.json")))
    r = subprocess.run(tfbneck_cmd() + ["analyze", DEMO_LOGS, "--format", "json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = {s["run"]: s for s in json.loads(r.stdout)["sessions"]}
    assert set(got) == set(expected)
    for run, want in expected.items():
        s = got[run]
        assert (s["bottleneck"], s["cause"]) == (want["bottleneck"], want["cause"]), run
        assert s["step_source"] == "step_markers ('train')" and s["steps"]["count"] == want.get("steps", 5)
        assert s["system_metrics"]["samples"] > 0
    assert got["cpu_bound_input"]["input_pipeline"]["bottleneck_stage"].endswith("::Map")
    assert got["slow_file_reads"]["input_pipeline"]["bottleneck_stage"].endswith("::Generator")


def test_demo_logs_stay_small():
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(DEMO_LOGS) for f in fs)
    assert total < 5 * 2 ** 20
