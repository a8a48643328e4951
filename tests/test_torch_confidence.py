"""How sure a verdict on a CPU-only PyTorch trace may be where the trace cannot see the machine
(tfbneck_plugin/analysis/torch_host.py: unseen_load_verdict). Traces written as Kineto writes
them (the same event spellings as tests/test_kineto.py), analysed by the real reader."""
import json

import pytest

from tfbneck_plugin.analysis.session import analyze_space
from tfbneck_plugin.analysis.torch_host import UNSEEN_LOAD_MAX_CONFIDENCE
from tfbneck_plugin.trace.kineto import read_kineto

PID = TID = 777


def _x(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": {}}


def _cpu_loop(path, steps=6, step_us=10_000.0, wait_us=300.0):
    """A CPU-only loop: each step waits ``wait_us`` in a single-process DataLoader, then runs
    matrix ops on the CPU for the rest of the step (no device events, no deviceProperties)."""
    base = 1_000_000.0
    ev = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "python3"}}]
    for k in range(steps):
        t0 = base + k * step_us
        ev.append(_x("user_annotation", f"ProfilerStep#{k + 2}", t0, step_us))
        ev.append(_x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1, wait_us))
        t = t0 + wait_us + 2
        while t + 520 < t0 + step_us:
            ev.append(_x("cpu_op", "aten::addmm", t, 500.0))
            t += 510
    with open(path, "w") as f:
        json.dump({"schemaVersion": 1, "traceEvents": ev}, f)
    return str(path)


def test_a_compute_bound_cpu_trace_without_system_metrics_stays_under_0_7(tmp_path):
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json")))
    assert r["device_kind"] == "CPU" and (r["bottleneck"], r["cause"]) == ("device", "model_compute")
    assert r["breakdown_pct"]["device_compute"] >= 90.0
    assert r["confidence"] == pytest.approx(UNSEEN_LOAD_MAX_CONFIDENCE) and UNSEEN_LOAD_MAX_CONFIDENCE < 0.7
    assert any("torch.profiler records no system metrics" in e for e in r["evidence"])
    assert not any("desired state" in e for e in r["evidence"])
    assert any("unless other processes took the cores" in e for e in r["evidence"])


def test_an_input_bound_cpu_trace_is_left_alone(tmp_path):
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json", wait_us=7_000.0)))
    assert r["cause"] == "input_preprocessing"
    assert not any("torch.profiler records no system metrics" in e for e in r["evidence"])
