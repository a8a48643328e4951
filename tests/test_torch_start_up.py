"""A PyTorch window traced while its DataLoader's worker processes start (steps numbered under
torch_host.WORKER_START_STEPS): those steps are warm-up, left out where later steps remain, else
the whole window is warm-up, its confidence capped and compare's verdict inconclusive. Traces
written as Kineto writes them (the event spellings of tests/test_kineto.py), read by the real
reader and the real CLI."""
import json
import subprocess
import sys

import pytest

from tfbneck_plugin.analysis.rules import WARMUP_ONLY_CONFIDENCE
from tfbneck_plugin.analysis.session import analyze_space
from tfbneck_plugin.analysis.torch_host import WORKER_START_STEPS
from tfbneck_plugin.trace.kineto import read_kineto

from support.kineto_loop import SINGLE, WORKERS, cpu_loop

def test_a_window_of_start_up_steps_is_all_warm_up_and_held_down(tmp_path):
    r = analyze_space(read_kineto(str(cpu_loop(tmp_path / "w.1.pt.trace.json", WORKERS, first=3, steps=5))))
    warm = r["steps"]["warmup"]
    assert warm["steps"] == [3, 4, 5, 6, 7] and warm["excluded"] is False
    assert f"skip_first={WORKER_START_STEPS}" in warm["reason"]
    assert r["confidence"] <= WARMUP_ONLY_CONFIDENCE
    assert r["evidence"][0].startswith("Every step in the window (5) was warm-up (steps 3-7 of the profiler")
    # held down for the workers too, and the compute sentence says so rather than "the desired state"
    assert any("worker processes run on the same CPU cores" in e for e in r["evidence"])
    assert not any("desired state" in e for e in r["evidence"])


def test_start_up_steps_are_left_out_where_later_steps_remain(tmp_path):
    """Steps 5-14, the first five twice as long (workers loading flat out on the model's
    cores): steps 5-9 are warm-up, the step time is that of steps 10-14."""
    path = cpu_loop(tmp_path / "w.1.pt.trace.json", WORKERS, first=5, steps=10,
                 step_us=lambda n: 20_000.0 if n < WORKER_START_STEPS else 10_000.0)
    r = analyze_space(read_kineto(str(path)))
    assert r["steps"]["warmup"]["steps"] == [5, 6, 7, 8, 9] and r["steps"]["warmup"]["excluded"] is True
    assert [i["step"] for i in r["steps"]["items"]] == [10, 11, 12, 13, 14]
    assert r["steps"]["step_time_ms"]["mean"] == pytest.approx(10.0, abs=0.05)


@pytest.mark.parametrize("iterator, first", [(SINGLE, 3), (WORKERS, WORKER_START_STEPS)])
def test_no_warm_up_without_workers_or_from_the_tenth_step(tmp_path, iterator, first):
    r = analyze_space(read_kineto(str(cpu_loop(tmp_path / "w.1.pt.trace.json", iterator, first=first, steps=5))))
    assert "warmup" not in r["steps"]


def _compare(base, cand, *extra):
    return subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "compare", str(base), str(cand), *extra],
                          capture_output=True, text=True, timeout=120)


def test_compare_of_a_start_up_window_is_inconclusive_and_fails_no_gate(tmp_path):
    """Identical code, the baseline traced at steps 3-7 (start-up, 5 ms steps: batches the
    workers made ahead), the candidate at steps 12-16 (12.5 ms): 2.5x "slower" is the windows'
    phases, not the code. The gate does not fail, and the line says which side and what to do."""
    cpu_loop(tmp_path / "a" / "w.1.pt.trace.json", WORKERS, first=3, steps=5, step_us=lambda n: 5_000.0)
    cpu_loop(tmp_path / "b" / "w.2.pt.trace.json", WORKERS, first=12, steps=5, step_us=lambda n: 12_500.0)
    out = _compare(tmp_path / "a", tmp_path / "b", "--fail-if-slower", "5", "--format", "json")
    assert out.returncode == 0, out.stderr
    [c] = json.loads(out.stdout)["comparisons"]
    assert c["verdict"] == "inconclusive" and c["change_pct"] == pytest.approx(150.0, abs=0.5)
    assert c["evidence"]["missing"].startswith("every traced step of the baseline was warm-up (steps 3-7")
    # steady windows on both sides: the same 2.5x is a slower verdict and fails the gate
    cpu_loop(tmp_path / "c" / "w.3.pt.trace.json", WORKERS, first=12, steps=5, step_us=lambda n: 5_000.0)
    out = _compare(tmp_path / "c", tmp_path / "b", "--fail-if-slower", "5", "--format", "json")
    [c] = json.loads(out.stdout)["comparisons"]
    assert out.returncode == 1 and c["verdict"] == "slower"
    # no system metrics beside PyTorch traces: the gate's line says the load was not weighed
    assert c["load"]["unknown_on"] == ["baseline", "candidate"]
    assert "the machine's load is unknown on the baseline and the candidate" in out.stderr


def test_pytorch_op_types_are_not_listed_again(tmp_path):
    """A PyTorch op's type is its name: compare lists the ops once, not again as op types."""
    cpu_loop(tmp_path / "a" / "w.1.pt.trace.json", SINGLE, first=3, steps=6)
    cpu_loop(tmp_path / "b" / "w.2.pt.trace.json", SINGLE, first=3, steps=6, wait_us=3_000.0)
    out = _compare(tmp_path / "a", tmp_path / "b")
    assert out.returncode == 0, out.stderr
    assert "ops that changed most" in out.stdout and "op types that changed most" not in out.stdout
    [c] = json.loads(_compare(tmp_path / "a", tmp_path / "b", "--format", "json").stdout)["comparisons"]
    assert c["op_changes"]["ops"] and c["op_changes"]["types"] == []


def test_a_fix_that_changed_nothing_is_not_credited(tmp_path):
    """num_workers=0 waiting 60 % of a 10 ms step, then workers with the same 10 ms steps: the
    baseline predicted the fix; no change was measured, so it explains nothing."""
    cpu_loop(tmp_path / "a" / "w.1.pt.trace.json", SINGLE, first=12, steps=6, wait_us=6_000.0)
    cpu_loop(tmp_path / "b" / "w.2.pt.trace.json", WORKERS, first=12, steps=6)
    out = _compare(tmp_path / "a", tmp_path / "b", "--format", "json")
    [c] = json.loads(out.stdout)["comparisons"]
    assert c["verdict"] == "no_change", c["verdict"]
    [p] = c["predictions"]
    assert p["fix"] == "num_workers" and p["predicted_ms"] < 10.0 and p["credited"] is False
