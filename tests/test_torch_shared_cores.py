"""The evidence of a verdict held down because the DataLoader's worker processes share the
model's CPU cores out of the trace (tfbneck_plugin/analysis/torch_host.py: shared_cores_verdict):
it says what is measured, not that the model's math is the limit. Traces written as Kineto writes
them (the event spellings of tests/test_kineto.py), analysed by the real reader."""
import json

from tfbneck_plugin.analysis.rules import DESIRED_STATE
from tfbneck_plugin.analysis.session import analyze_space
from tfbneck_plugin.analysis.torch_host import SHARED_CORES_MAX_CONFIDENCE
from tfbneck_plugin.trace.kineto import read_kineto

PID = TID = 4242
WORKERS = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def _x(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": {}}


def _cpu_loop(path, iterator, steps=6, step_us=10_000.0, wait_us=300.0):
    """A CPU-only loop: each step waits ``wait_us`` in the DataLoader's ``__next__`` (``iterator``),
    then runs matrix ops on the CPU for the rest of the step (no device events)."""
    base = 1_000_000.0
    ev = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "python3"}}]
    for k in range(steps):
        t0 = base + k * step_us
        ev.append(_x("user_annotation", f"ProfilerStep#{k + 2}", t0, step_us))
        ev.append(_x("user_annotation", iterator, t0 + 1, wait_us))
        t = t0 + wait_us + 2
        while t + 520 < t0 + step_us:
            ev.append(_x("cpu_op", "aten::addmm", t, 500.0))
            t += 510
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return str(path)


def _compute_sentence(r):
    [s] = [e for e in r["evidence"] if "computes" in e and "% of the step" in e]
    return s


def test_held_down_for_the_workers_the_evidence_says_what_is_measured(tmp_path):
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json", WORKERS)))
    assert (r["device_kind"], r["cause"]) == ("CPU", "model_compute")
    assert r["confidence"] <= SHARED_CORES_MAX_CONFIDENCE
    first = _compute_sentence(r)
    assert "desired state" not in first and DESIRED_STATE not in " ".join(r["evidence"])
    assert "the training process's own ops" in first and "workers take is not in the trace" in first
    assert any("worker processes run on the same CPU cores" in e for e in r["evidence"])


def test_a_single_process_loader_keeps_the_sentence(tmp_path):
    """Not held down for the workers (num_workers=0): the rules' sentence as it was."""
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json",
                                            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")))
    assert r["cause"] == "model_compute" and _compute_sentence(r).endswith(DESIRED_STATE)
