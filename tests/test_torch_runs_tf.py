"""Real torch.profiler runs on CPU, made here by benchmarks/torch_corpus.py, each with its truth
measured by ablation (the same model fed cached batches): tfbneck calls a slow single-process
DataLoader input-bound and a compute-bound model not, is never wrong at confidence 0.7 or more,
and ``tfbneck compare`` calls the DataLoader fix (num_workers 0 -> 4, on a dataset whose items wait on a read) faster.

Marked tf (it trains, with PyTorch's CPU build from the test extra); about 30 s on 2 cores."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.tf
torch = pytest.importorskip("torch", reason="PyTorch (the test extra's torch==2.13.0 CPU build) is not installed")

RUNS = ("loader0_heavy", "loader0_io", "workers4_io", "compute_wide")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The four runs, made in one process; their rows (truth, verdict, confidence)."""
    logdir = tmp_path_factory.mktemp("torch_runs")
    out = logdir / "rows.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "torch_corpus.py"), "--logdir", str(logdir),
                        "--only", ",".join(RUNS), "--steps", "10", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert out.exists(), (r.stdout[-3000:], r.stderr[-3000:])
    rows = {row["run"]: row for row in json.loads(out.read_text())}
    return logdir, rows


def test_the_runs_wrote_kineto_traces(corpus):
    logdir, _rows = corpus
    for name in RUNS:
        files = os.listdir(logdir / name)
        assert files and all(f.endswith(".pt.trace.json") for f in files), files


@pytest.mark.parametrize("run", ["loader0_heavy", "loader0_io"])
def test_a_slow_single_process_dataloader_is_input_bound(corpus, run):
    _logdir, rows = corpus
    row = rows[run]
    assert row["truth"] == "input-bound", row          # the ablation: cached batches are >= 1.25x faster
    assert row["cause"] == "input_preprocessing" and row["fix"] == "num_workers", row
    assert row["input_pct"] > 50, row


def test_a_compute_bound_model_is_not_input_bound(corpus):
    _logdir, rows = corpus
    row = rows["compute_wide"]
    assert row["truth"] != "input-bound", row
    assert row["cause"] == "model_compute" and row["verdict"] == "not input-bound", row


def test_no_wrong_verdict_at_confidence_0_7_or_more(corpus):
    _logdir, rows = corpus
    wrong = [r for r in rows.values() if r["judged"] == "wrong"]
    assert all(r["confidence"] < 0.7 for r in wrong), wrong


def test_compare_calls_the_worker_processes_faster(corpus):
    logdir, _rows = corpus
    r = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "compare", "--format", "json",
                        str(logdir / "loader0_io"), str(logdir / "workers4_io")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    c = json.loads(r.stdout)
    assert c["verdict"] == "faster", {k: c.get(k) for k in ("verdict", "reason", "time_per_batch_ms")}
    # the change is seen in the reports (the DataLoader now loads in worker processes) and the
    # baseline's prediction for it is checked, without --change
    (comparison,) = c["comparisons"]
    assert [p["fix"] for p in comparison["predictions"]] == ["num_workers"], comparison["predictions"]


def test_the_report_speaks_pytorch_and_bounds_the_workers_fix_by_what_it_cannot_see(corpus):
    """The slow DataLoader's report names the DataLoader, not tf.data; with no system metrics
    (torch.profiler records none) the cores the workers would get are unknown, so the
    num_workers prediction's range reaches today's time, and the text says so."""
    logdir, _rows = corpus
    r = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "analyze", "--format", "json",
                        str(logdir / "loader0_heavy")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    (s,) = json.loads(r.stdout)["sessions"]
    assert "DataLoader" in s["cause_text"] and "tf.data" not in s["cause_text"], s["cause_text"]
    fix = s["recommendations"][0]
    assert fix["fix"] == "num_workers" and "system_metrics" not in s
    assert fix["predicted"]["range_ms"][1] == pytest.approx(s["steps"]["time_per_batch_ms"], rel=1e-3), fix
    assert "it may gain nothing" in fix["worth"] and "unknown without system metrics" in fix["predicted"]["basis"]
    table = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "analyze", str(logdir / "loader0_heavy")],
                           capture_output=True, text=True, timeout=300, cwd=ROOT).stdout
    assert "torch.profiler records none" in table and "BottleneckProfiler" not in table
