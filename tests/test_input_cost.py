"""A measurement of the input's cost by ablation (tfbneck_plugin.capture.input_cost), as the
analyzer reads it from a run's folder: shown beside the verdict, and the truth where the two
disagree. The measurement itself, in real Keras fits: tests/test_input_cost_tf.py."""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import DEMO_LOGS as DEMO
from conftest import tfbneck_cmd

from tfbneck_plugin.capture.input_cost import write_input_cost
from tfbneck_plugin.runs import INPUT_COST_FORMAT, INPUT_COST_PREFIX


def _measurement(limit: str, gain: float, when: float) -> dict:
    real = 10.0
    return {"format": INPUT_COST_FORMAT, "version": 1, "time_unix": when, "host": "h", "pid": 7,
            "real_ms_per_batch": real, "cached_ms_per_batch": round(real / gain, 4),
            "input_ms_per_batch": round(real - real / gain, 4), "gain": gain, "limit": limit,
            "input_share": round(1 - 1 / gain, 4), "steps": 30, "repeats": 2, "steps_per_execution": 1,
            "backend": "tensorflow", "input_kind": "tf.data", "real_ms_runs": [real], "cached_ms_runs": [real / gain]}


def _analyze(run: str) -> dict:
    r = subprocess.run(tfbneck_cmd() + ["analyze", run, "--format", "json", "--no-cache"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (s,) = json.loads(r.stdout)["sessions"]
    return s


def test_a_measurement_that_agrees_is_shown_and_keeps_the_confidence(tmp_path):
    run = str(tmp_path / "cpu_bound_input")
    shutil.copytree(os.path.join(DEMO, "cpu_bound_input"), run)
    before = _analyze(run)
    assert before["cause"] == "input_preprocessing" and "input_cost" not in before
    path = write_input_cost(run, _measurement("input", 1.8, time.time()))
    assert os.path.basename(path).startswith(INPUT_COST_PREFIX)
    s = _analyze(run)
    assert s["input_cost"]["gain"] == 1.8 and s["input_cost"]["limit"] == "input"
    assert s["confidence"] == before["confidence"]
    said = [e for e in s["evidence"] if e.startswith("Measured by ablation")]
    assert len(said) == 1 and "1.80x as fast" in said[0] and "10 -> 5.56 ms per batch" in said[0]
    assert "the input pipeline limits the run" in said[0] and "says otherwise" not in said[0]
    assert "during the measurement" not in said[0]  # a measurement without its load compares no loads


def test_a_measurement_is_set_beside_the_trace_model_for_the_load_each_ran_beside(tmp_path):
    """The demo's window ran beside other processes: its modelled gain is shown both for that
    load and without it, beside the measurement's own probed load."""
    run = str(tmp_path / "cpu_bound_input")
    shutil.copytree(os.path.join(DEMO, "cpu_bound_input"), run)
    write_input_cost(run, dict(_measurement("input", 4.5, time.time()), others_cores=0.03))
    s = _analyze(run)
    load = s["input_load"]
    assert load["others_cores"] >= 0.1 and load["speedup_alone"] > load["speedup"] > 1.25, load
    assert s["input_cost"]["others_cores"] == 0.03
    (said,) = [e for e in s["evidence"] if e.startswith("Measured by ablation")]
    assert said.endswith(f" Other processes used 0.03 core(s) during the measurement; the trace modelled "
                         f"{load['speedup']:.2f}x beside other processes' {load['others_cores']:.2f} core(s), "
                         f"{load['speedup_alone']:.2f}x without them."), said
    prefetch = _analyze(os.path.join(DEMO, "pair_map_prefetch"))  # a verdict on the input's share of the cores
    load = prefetch["input_load"]
    assert load["others_cores"] >= 0.1 and load["speedup_alone"] > load["speedup"] + 0.05, load
    (without,) = [e for e in prefetch["evidence"] if e.startswith("Without the input's work")]
    assert (f"({load['speedup']:.2f}x faster, as the same model fed cached batches would run; {load['speedup_alone']:.2f}x "
            f"were the {load['others_cores']:.2f} core(s) other processes used free)") in without, without


def test_a_worker_process_that_ends_during_the_probe_stays_in_the_tree():
    """A fit's PyDataset worker (pid 12) with 3 s of CPU ends and is reaped during the probe, after
    0.05 s more: its lifetime moves into the parent's reaped-children figure (pid 0). The tree spent
    the parent's 0.1 s and the worker's last 0.05 s, not minus or plus its 3 s lifetime."""
    from tfbneck_plugin.capture.input_cost import _tree_spent
    before = {10: 5.0, 12: 3.0, 0: 1.0}
    after = {10: 5.1, 0: 4.05}
    assert _tree_spent(before, after) == pytest.approx(0.15)
    assert _tree_spent(before, {10: 5.1, 12: 3.2, 0: 1.0}) == pytest.approx(0.3)  # still alive: its own delta


def test_the_probe_of_other_processes_sees_a_spinning_process():
    """The load a measurement ran beside: a process spinning on a core while this one sleeps."""
    import sys
    from tfbneck_plugin.capture.input_cost import _others_cores
    # Started through a shell that exits at once: the spinner is not this process's child (the
    # probe rightly counts its own children as its own tree).
    out = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    pid = int(out.stdout.strip())
    try:
        time.sleep(0.3)
        others = _others_cores()
    finally:
        os.kill(pid, 9)
    assert others is not None and 0.8 <= others <= os.cpu_count() + 0.05, others


def test_a_measurement_that_contradicts_the_verdict_is_the_truth(tmp_path):
    run = str(tmp_path / "cpu_bound_input")
    shutil.copytree(os.path.join(DEMO, "cpu_bound_input"), run)
    conf = _analyze(run)["confidence"]
    assert conf > 0.6
    write_input_cost(run, _measurement("model", 1.03, time.time()))
    s = _analyze(run)
    assert s["confidence"] == 0.6
    (said,) = [e for e in s["evidence"] if e.startswith("Measured by ablation")]
    assert ("the model's own steps limit the run, not the input; the trace's verdict (cpu/input_preprocessing) "
            f"says otherwise: trust the measurement, the confidence is held at 0.6 ({conf} without the measurement).") \
        in said


def test_a_confirming_measurement_raises_the_confidence_and_an_unsettled_one_changes_nothing(tmp_path):
    run = str(tmp_path / "cpu_bound_input_fixed")
    shutil.copytree(os.path.join(DEMO, "cpu_bound_input_fixed"), run)
    before = _analyze(run)
    assert before["cause"] == "model_compute" and before["confidence"] < 0.8
    path = write_input_cost(run, dict(_measurement("model", 1.02, time.time()), unsettled=None))
    s = _analyze(run)
    assert s["confidence"] == 0.8
    (said,) = [e for e in s["evidence"] if e.startswith("Measured by ablation")]
    assert said.endswith(f"it confirms the verdict: confidence 0.8 ({before['confidence']} without the measurement).")
    os.unlink(path)
    why = "the repeats disagree (gains 0.42x to 1.58x, on both sides of 1.1x or 1.25x)"
    write_input_cost(run, dict(_measurement("unsettled", 1.0, time.time()), unsettled=why))
    s = _analyze(run)
    assert s["confidence"] == before["confidence"] and s["input_cost"]["unsettled"] == why
    (said,) = [e for e in s["evidence"] if e.startswith("Measured by ablation")]
    assert f"nothing is settled: {why}; measure again" in said


def test_the_newest_readable_measurement_is_used_and_a_broken_one_is_passed_over(tmp_path):
    run = str(tmp_path / "compute_bound")
    shutil.copytree(os.path.join(DEMO, "compute_bound"), run)
    t = time.time()
    write_input_cost(run, _measurement("model", 1.02, t - 7200))  # older
    newer = write_input_cost(run, _measurement("input", 1.5, t - 3600))
    broken = os.path.join(os.path.dirname(newer), os.path.basename(newer).replace(
        time.strftime("%Y_%m_%d_%H", time.localtime(t - 3600)), time.strftime("%Y_%m_%d_%H", time.localtime(t))))
    assert broken != newer
    with open(broken, "w") as f:
        f.write("{not json")
    s = _analyze(run)
    assert s["input_cost"]["gain"] == 1.5  # the broken newest file is passed over, the next newest read
    assert s["cause"] == "model_compute" and s["confidence"] <= 0.6  # and it contradicts the verdict
    with open(broken) as f:
        assert f.read() == "{not json"  # the user's files are left as they were


def test_the_run_sentences_never_reach_the_cached_report(tmp_path):
    """The batch driver adds what a run's files say to a shallow copy of a cached report: the
    cached report's evidence lists stay the trace's own, and so does its input_load (the job-scale
    worth of a window its trend file shows to be unrepresentative belongs to the shown copy)."""
    from support.trend_files import set_window_overhead
    from tfbneck_plugin.batch import analyze_one, find, reports_in_runs
    run = str(tmp_path / "cpu_bound_input")
    shutil.copytree(os.path.join(DEMO, "cpu_bound_input"), run)
    write_input_cost(run, _measurement("model", 1.03, time.time()))
    (session,) = find([run]).sessions
    cached = analyze_one(session)
    set_window_overhead(run, cached["steps"]["step_time_ms"]["mean"], 0.7)
    evidence, detail, load = list(cached["evidence"]), list(cached["evidence_detail"]), dict(cached["input_load"])
    (shown,) = reports_in_runs([session], analyze=lambda _s: cached)
    assert any(e.startswith("Measured by ablation") for e in shown["evidence"])
    assert cached["evidence"] == evidence and cached["evidence_detail"] == detail
    assert cached["confidence"] != shown["confidence"] == 0.6
    assert "speedup_job" in shown["input_load"] and cached["input_load"] == load


def test_a_model_that_is_not_keras_gets_one_line_not_an_import_error():
    """A PyTorch user's nn.Module (here any non-Keras object): InputCostError naming its class
    and what to use instead, before Keras is imported."""
    import tfbneck_plugin
    from tfbneck_plugin.capture.input_cost import InputCostError

    class Net:  # stands for torch.nn.Module: its module is not keras
        pass
    with pytest.raises(InputCostError) as e:
        tfbneck_plugin.measure_input_cost(Net(), [(1, 2), (3, 4)])
    text = str(e.value)
    assert "\n" not in text and text.startswith("Net (") and "not a Keras model" in text and "measure_input" in text
