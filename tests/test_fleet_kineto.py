"""``tfbneck fleet`` and the tab's Fleet view on PyTorch profiler traces (Kineto JSON) beside
TensorFlow runs: every session without a report is named with its one-line error in every
format, a trace straight in the given folder takes the run name ``tfbneck analyze`` gives it, a
first fix with no predicted worth is unknown (never "0 ms") and ranks after the runs with time to
recover, and the tab's ``/fleet`` route carries the worth the CLI prints.

The traces are written here as Kineto writes them (the event spellings of tests/test_kineto.py:
``ProfilerStep#N`` and the DataLoader's ``__next__`` as ``user_annotation``, ops as ``cpu_op``),
and read by the real CLI in a subprocess and a real TensorBoard; the bad files are what a crashed
or still-writing profiler leaves (empty, cut in the middle, not JSON, JSON of another shape).
Every expected error line is the one ``tfbneck analyze --format json`` gives for that session.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import DEMO_LOGS, SHARED, need_shared, tfbneck_cmd
from support.kineto_loop import SINGLE, TRACE, WORKERS, cpu_loop

#: Broken runs: more than the table names (render.TOP_FAILED = 20), so the bound shows.
BROKEN = 22
TORCH_TRACES = os.path.join(SHARED, "realtraces-torch")


def bad_bytes(k: int, good: bytes) -> bytes:
    """The ``k``-th broken trace: empty, cut in the middle, not JSON, JSON with no events."""
    return [b"", good[: len(good) // 2], b"hello, this is not JSON\n", b"[1, 2, 3]"][k % 4]


def write_runs(root):
    """Three analysable runs and :data:`BROKEN` runs of one broken trace each, under ``root``.
    ``workers_behind``: the DataLoader's workers keep the loop waiting 15 % of a 20 ms step on a
    CPU-only host (input-bound; its first fix, cheaper dataset work, has no predicted worth);
    ``single_input``: a single-process loader waiting 70 % (its fix, workers, is predicted);
    ``compute``: a 3 % wait, the model's math (its fix, a GPU, has no predicted worth)."""
    cpu_loop(root / "workers_behind" / TRACE, WORKERS, 3_000.0, step_us=20_000.0)
    cpu_loop(root / "single_input" / TRACE, SINGLE, 7_000.0)
    good = cpu_loop(root / "compute" / TRACE, SINGLE, 300.0).read_bytes()
    for k in range(BROKEN):
        d = root / f"broken{k:02d}"
        d.mkdir(parents=True)
        (d / TRACE).write_bytes(bad_bytes(k, good))


def cli(*args, cache, timeout=600):
    return subprocess.run(tfbneck_cmd() + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, TFBNECK_CACHE_DIR=str(cache)))


@pytest.fixture(scope="module")
def torch_logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleetkineto")
    write_runs(root / "logs")
    return {"logs": root / "logs", "cache": root / "cache"}


@pytest.fixture(scope="module")
def analyzed(torch_logs):
    """``tfbneck analyze --format json`` of the logdir: ``{run: session report}``."""
    r = cli("analyze", torch_logs["logs"], "--format", "json", cache=torch_logs["cache"])
    assert r.returncode == 1, r.stderr[-2000:]  # the broken runs
    return {s["run"]: s for s in json.loads(r.stdout)["sessions"]}


@pytest.fixture(scope="module")
def outputs(torch_logs):
    """``tfbneck fleet`` of the logdir in each format: ``{format: (returncode, stdout, stderr)}``."""
    out = {}
    for fmt in ("table", "json", "csv", "markdown"):
        r = cli("fleet", torch_logs["logs"], "--format", fmt, cache=torch_logs["cache"])
        out[fmt] = (r.returncode, r.stdout, r.stderr)
    return out


def test_each_session_without_a_report_is_named_with_its_error_in_every_format(analyzed, outputs):
    broken = {run: s for run, s in analyzed.items() if s["status"] != "ok"}
    assert len(broken) == BROKEN and {s["error_kind"] for s in broken.values()} == {"empty_file", "corrupt"}
    for run, s in broken.items():  # analyze's own line names the file and what is wrong
        assert s["error"].startswith(s["path"]) and "\n" not in s["error"], s["error"]
    for fmt, (rc, stdout, stderr) in outputs.items():
        assert rc == 1 and "Traceback" not in stdout + stderr, (fmt, stderr[-2000:])
    # JSON: every one, with analyze's line; each failed run carries it too.
    f = json.loads(outputs["json"][1])
    assert f["errors"]["sessions"] == BROKEN
    assert {x["run"]: (x["session"], x["error_kind"], x["error"]) for x in f["failed"]} == {
        run: (s["session"], s["error_kind"], s["error"]) for run, s in broken.items()}
    assert {r["run"]: r["error"] for r in f["runs"] if r["status"] != "ok"} == {run: s["error"] for run, s in broken.items()}
    assert all(r["error"] is None for r in f["runs"] if r["status"] == "ok")
    # CSV: one row per run, each failed run's row with its line.
    rows = list(csv.DictReader(io.StringIO(outputs["csv"][1])))
    assert {row["run"]: row["error"] for row in rows if row["status"] == "error"} == {
        run: s["error"] for run, s in broken.items()}
    # Table and Markdown: the first 20 (as analyze prints them: run/session: ERROR line), and how many there are.
    shown = sorted(broken)[:20]
    for fmt, prefix in (("table", "  "), ("markdown", "- ")):
        text = outputs[fmt][1]
        assert f"Sessions without a report (first 20 of {BROKEN}; --format json names them all)" in text
        for run in broken:
            line = f"{prefix}{run}/{broken[run]['session']}: ERROR {broken[run]['error']}"
            assert (line in text.splitlines()) == (run in shown), (fmt, run)


def test_a_first_fix_with_no_predicted_worth_is_unknown_not_zero(analyzed, outputs):
    """The input-bound run whose first fix (cheaper dataset work) has neither a prediction
    nor a bound: recoverable unknown (None; "no model" in the table, empty in the CSV), ranked
    after the run with a predicted worth and before the runs without a report, above the
    compute-bound run of the same kind of fix because more of its time is at stake (20 ms x 6
    batches against 10 ms x 6)."""
    wb = analyzed["workers_behind"]
    assert (wb["bottleneck"], wb["cause"]) == ("cpu", "input_preprocessing")
    first = wb["recommendations"][0]
    assert first["fix"] == "cheaper_transforms" and not first.get("predicted") and first.get("bound_ms") is None
    f = json.loads(outputs["json"][1])
    order = [r["run"] for r in f["runs"]]
    assert order[:3] == ["single_input", "workers_behind", "compute"], order
    assert set(order[3:]) == {f"broken{k:02d}" for k in range(BROKEN)}
    by = {r["run"]: r for r in f["runs"]}
    assert by["single_input"]["recoverable_ms"] > 0
    assert by["workers_behind"]["recoverable_ms"] is None and by["compute"]["recoverable_ms"] is None
    assert by["workers_behind"]["fix_worth"] == first["worth"]
    assert any("unknown, not 0" in b for b in f["basis"])
    assert {g["group"]: (g["recoverable_ms"], g["runs_worth_unknown"]) for g in f["groups"]
            if not g["group"].startswith("broken")} == {
        "single_input": (by["single_input"]["recoverable_ms"], 0), "workers_behind": (None, 1), "compute": (None, 1)}
    rows = {row["run"]: row for row in csv.DictReader(io.StringIO(outputs["csv"][1]))}
    assert rows["workers_behind"]["rank"] == "2" and rows["workers_behind"]["recoverable_ms"] == ""
    assert rows["workers_behind"]["recoverable_hours"] == "" and rows["single_input"]["recoverable_ms"] != ""
    table = outputs["table"][1].splitlines()
    [line] = [ln for ln in table if ln.startswith("2  ")]
    assert "workers_behind" in line and "no model" in line and " 0 ms" not in line


def test_ranking_tiers_known_unknown_none_to_recover_and_no_report(torch_logs, outputs):
    """build() on real summaries, one of them made a report that recommends nothing (a known 0):
    time to recover first, then unknown worth, then nothing to recover, then no report."""
    from tfbneck_plugin.fleet_view.report import build, collect
    items, contexts, problems = collect([str(torch_logs["logs"])], use_cache=False)
    nothing = next(i for i in items if i["run"] == "compute")
    nothing["best_fix"] = None
    f = build(items, contexts, problems=problems)
    order = [r["run"] for r in f["runs"]]
    assert order[:3] == ["single_input", "workers_behind", "compute"]
    assert f["runs"][2]["recoverable_ms"] == 0.0 and f["runs"][1]["recoverable_ms"] is None
    assert all(r["status"] == "error" for r in f["runs"][3:])


def test_a_trace_straight_in_the_folder_is_named_as_analyze_names_it(tmp_path):
    """``tfbneck fleet myrun`` where myrun/ holds the trace itself: the run is ``myrun``, as
    ``tfbneck analyze`` names it, never "."; with several PATHs each run name starts with its
    PATH's folder, as analyze's do."""
    cpu_loop(tmp_path / "myrun" / TRACE, SINGLE, 7_000.0)
    cpu_loop(tmp_path / "other" / "a" / TRACE, SINGLE, 300.0)
    cache = tmp_path / "cache"
    for paths in ([tmp_path / "myrun"], [tmp_path / "myrun" / TRACE], [tmp_path / "myrun", tmp_path / "other"]):
        a = cli("analyze", *paths, "--format", "json", cache=cache)
        f = cli("fleet", *paths, "--format", "json", cache=cache)
        assert a.returncode == f.returncode == 0, (a.stderr, f.stderr)
        names = sorted(s["run"] for s in json.loads(a.stdout)["sessions"])
        assert sorted(r["run"] for r in json.loads(f.stdout)["runs"]) == names, paths
        assert "." not in names and "myrun" in names
    table = cli("fleet", tmp_path / "myrun", cache=cache).stdout
    assert "  myrun  " in table or "\nmyrun  " in table


# ---- the tab's /fleet route, in a real TensorBoard --------------------------------------------

def _copy_demo(logs):
    for name in sorted(os.listdir(DEMO_LOGS)):
        if os.path.isdir(os.path.join(DEMO_LOGS, name)):
            shutil.copytree(os.path.join(DEMO_LOGS, name), logs / "tf" / name)


def _copy_shared_torch(logs):
    real = need_shared(TORCH_TRACES, "../shared/realtraces-torch (real PyTorch traces)")
    for name in ("nccl_2gpu", "amd_mi250_minitoy", "ns_resolution_rank0"):
        shutil.copytree(os.path.join(real, name), logs / "torch" / name)


def _route_fleet(tb, deadline_s=180.0):
    deadline = time.monotonic() + deadline_s
    while True:
        code, _headers, body = tb.get("fleet", timeout=60)
        if code == 200:
            f = json.loads(body)
            if f["pending"] == 0:
                return f
        else:
            assert code == 503, body[:500]  # the first scan is still running
        assert time.monotonic() < deadline, "the /fleet route still had sessions pending"
        time.sleep(0.5)


@pytest.mark.parametrize("logdir", ["demo_and_written", "shared_torch"])
def test_the_tabs_fleet_route_carries_the_worth_the_cli_prints(tmp_path, logdir):
    """The same logdir, the same report cache: every run of the route has the ``fix_worth``,
    ``recoverable_ms``, rank and ``error`` of ``tfbneck fleet --format json`` (the Worth
    column of the tab reads ``fix_worth``), and ``failed`` names the same sessions."""
    from support.plugin_helpers import TensorBoard
    logs, cache = tmp_path / "logs", tmp_path / "cache"
    if logdir == "shared_torch":
        _copy_shared_torch(logs)
    else:
        _copy_demo(logs)
        write_runs(logs / "torch")
    r = cli("fleet", logs, "--format", "json", cache=cache)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
    want = json.loads(r.stdout)
    worths = [x["fix_worth"] for x in want["runs"] if x["fix_worth"]]
    assert len(worths) >= 3
    with TensorBoard(str(logs), env={"TFBNECK_CACHE_DIR": str(cache)}) as tb:
        got = _route_fleet(tb)
    assert [x["run"] for x in got["runs"]] == [x["run"] for x in want["runs"]]
    for g, w in zip(got["runs"], want["runs"]):
        fields = ("fix", "fix_worth", "fix_basis", "error")
        assert [g[k] for k in fields] == [w[k] for k in fields], w["run"]
        assert (g["recoverable_ms"] is None) == (w["recoverable_ms"] is None), w["run"]
        if w["recoverable_ms"] is not None:
            assert g["recoverable_ms"] == pytest.approx(w["recoverable_ms"], rel=1e-9), w["run"]
    assert [(x["run"], x["session"], x["error"]) for x in got["failed"]] == [
        (x["run"], x["session"], x["error"]) for x in want["failed"]]
