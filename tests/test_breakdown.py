"""Exact breakdowns of synthetic traces with known timings (tests/support/xspace_builder.py)."""
import numpy as np
import pytest

from tfbneck_plugin.analysis import breakdown
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions
from support.traces import STEP_US, cpu_input_bound
from support.xspace_builder import SpaceBuilder, session_path


def iv(*pairs):
    """An interval set (ps) from (start, end) pairs."""
    return np.array([a for a, _ in pairs], dtype=np.int64), np.array([b for _, b in pairs], dtype=np.int64)


def test_priority_order_splits_each_instant_once():
    """breakdown.per_step on hand-made activity: compute hides the input wait under it, the
    rest of the wait counts, host overhead fills what remains, the gap is idle."""
    none = iv()
    act = breakdown.Activity(collective=none, device_compute=iv((0, 40)), host_to_device=none,
                             device_to_host=none, input=iv((20, 70)), kernel_launch=none,
                             host_compute=iv((60, 90)))
    parts = breakdown.per_step(act, np.array([0, 100]), np.array([100, 200]))
    assert {c: parts[c].tolist() for c in breakdown.CATEGORIES} == {
        "collective": [0, 0], "device_compute": [40, 0], "host_to_device": [0, 0], "device_to_host": [0, 0],
        "input": [30, 0], "kernel_launch": [0, 0], "host_compute": [20, 0], "idle": [10, 100]}
    pct = breakdown.percentages(parts)
    assert pct["idle"] == 55.0 and pct["device_compute"] == 20.0 and sum(pct.values()) == pytest.approx(100.0)
    assert breakdown.percentages({c: np.zeros(0, dtype=np.int64) for c in breakdown.CATEGORIES})["idle"] == 0.0


def analyze_one(root):
    sessions = find_sessions(str(root)).sessions
    assert len(sessions) == 1
    return analyze_session(sessions[0])


def test_cpu_input_bound_exact_percentages(tmp_path):
    b = SpaceBuilder()
    cpu_input_bound(b)
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["status"] == "ok"
    assert r["step_source"] == "step_markers ('train')"
    assert r["steps"]["count"] == 3
    assert [i["step"] for i in r["steps"]["items"]] == [1, 2, 3]
    assert r["steps"]["step_time_ms"]["mean"] == pytest.approx(10.0)
    pct = r["breakdown_pct"]
    assert pct["input"] == pytest.approx(60.0, abs=0.1)
    assert pct["device_compute"] == pytest.approx(20.0, abs=0.1)
    assert pct["host_compute"] == pytest.approx(5.0, abs=0.1)
    assert pct["idle"] == pytest.approx(15.0, abs=0.1)
    assert sum(pct.values()) == pytest.approx(100.0, abs=0.5)
    assert r["device_kind"] == "CPU"
    assert r["bottleneck"] == "cpu" and r["cause"] == "input_preprocessing"
    assert r["input_pipeline"]["bottleneck_stage"] == "Iterator::Root::Map"
    titles = [x["title"] for x in r["recommendations"]]
    assert any("Parallelise" in t for t in titles) and any("prefetch" in t.lower() for t in titles)


def test_cpu_compute_bound_is_device_on_cpu(tmp_path):
    b = SpaceBuilder()
    cpu_input_bound(b, input_us=500, compute_us=7500)
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["breakdown_pct"]["input"] == pytest.approx(5.0, abs=0.1)
    assert r["breakdown_pct"]["device_compute"] == pytest.approx(75.0, abs=0.1)
    assert r["bottleneck"] == "device" and r["cause"] == "model_compute"


def test_input_hidden_behind_compute_is_not_counted(tmp_path):
    """Input wait that overlaps model compute costs nothing: only exposed wait counts."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, gn, cp = host.line("python"), host.line("tf_data_iterator_get_next/1"), host.line("tf_Compute/2")
    for k in range(2):
        t = k * STEP_US
        py.event("train", t, STEP_US, step_num=k, _r=1)
        py.event("FunctionRun", t, STEP_US, _p=7, _r=1)
        cp.event("ExecutorState::Process", t, 8000, _c=7)
        gn.event("IteratorGetNextOp::DoCompute", t + 5000, 4000)  # 3 ms hidden, 1 ms exposed
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["breakdown_pct"]["input"] == pytest.approx(10.0, abs=0.1)
    assert r["breakdown_pct"]["device_compute"] == pytest.approx(80.0, abs=0.1)


def test_overlapping_events_on_one_line_are_counted_once(tmp_path):
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, cp = host.line("python"), host.line("tf_Compute/2")
    py.event("train", 0, STEP_US, step_num=1, _r=1)
    py.event("FunctionRun", 0, STEP_US, _p=9, _r=1)
    # Three overlapping executor events covering [1000, 6000) once: 50 %.
    cp.event("ExecutorState::Process", 1000, 3000, _c=9)
    cp.event("ExecutorState::Process", 2000, 3000, _c=9)
    cp.event("ExecutorState::Process", 3000, 3000, _c=9)
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["breakdown_pct"]["device_compute"] == pytest.approx(50.0, abs=0.1)
    assert r["breakdown_pct"]["host_compute"] == pytest.approx(50.0, abs=0.1)


def test_no_steps_still_gives_whole_window_breakdown(tmp_path):
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    cp = host.line("tf_Compute/2")
    cp.event("ExecutorState::Process", 0, 4000)
    cp.event("ExecutorState::Process", 6000, 4000)
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["step_source"] == "none"
    assert r["steps"]["count"] == 0
    assert "No steps found" in r["steps"]["why_none"]
    assert r["breakdown_pct"]["device_compute"] == pytest.approx(80.0, abs=0.1)
    assert any("No steps found" in e for e in r["evidence"])
