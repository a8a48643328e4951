"""A system record is a system-only session (issue 28, ``--output FILE``: "a record that the tab
and ``tfbneck analyze`` show as a system-only session with its triage"): real records written
by ``tfbneck watch`` on a real busy process and by the sampler the callback uses, read by the
CLI, by the logdir discovery and by the Bottleneck tab in a real browser."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from tfbneck_plugin import records
from tfbneck_plugin.logdir import find_sessions
from tfbneck_plugin.system.run import SystemRun

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 60: pass"


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=ROOT))


@pytest.fixture(scope="module")
def watch_record(tmp_path_factory):
    """``tfbneck watch --output`` of a real Python busy loop (5 s, 1 s intervals)."""
    folder = tmp_path_factory.mktemp("watched")
    out = folder / "watch.json"
    r = _cli("watch", "--duration", 5, "--aggregate", 1, "--format", "json", "--output", out, "--",
             sys.executable, "-c", BUSY)
    assert r.returncode == 0, r.stderr
    return out


def test_analyze_shows_a_watch_record_as_a_system_only_session(watch_record):
    record = json.loads(watch_record.read_text())
    assert record["triage"]["bottleneck"] == "cpu"  # a busy loop: one thread fills a core
    r = _cli("analyze", watch_record, "--format", "json")
    assert r.returncode == 0, r.stderr
    (s,) = json.loads(r.stdout)["sessions"]
    assert (s["kind"], s["status"], s["bottleneck"], s["cause"]) == ("system_only", "ok", "cpu", "triage_cpu")
    assert s["session"] == "watch.json" and s["path"] == str(watch_record)
    share = record["triage"]["shares"]["cpu"]
    assert s["confidence"] == round(0.5 * share, 2)
    assert s["steps"]["count"] == 0 and "breakdown_pct" not in s  # no trace: no steps, no breakdown
    assert any(record["triage"]["reason"] in e for e in s["evidence"])
    assert s["system_triage"] == record["triage"]
    assert [rec["fix"] for rec in s["recommendations"]] == ["profile_window"]
    assert f"--pid {record['pid']}" in s["recommendations"][0]["code"]
    table = _cli("analyze", watch_record)
    assert table.returncode == 0
    assert "triage_cpu" in table.stdout and "fix first: Profile a few steps where the triage points" in table.stdout


def test_a_folder_lists_watch_records_and_the_callbacks_record_only_of_a_run_without_a_window(
        tmp_path, watch_record):
    """Discovery: a watch record anywhere is a session; the callback's record in
    ``plugins/bottleneck`` only where its run has no profiled session (else it is the trend)."""
    logdir = tmp_path / "logs"
    (logdir / "watched").mkdir(parents=True)
    shutil.copy(watch_record, logdir / "watched" / "watch.json")
    run = SystemRun(0.2, 0.5, pid=os.getpid(), source="callback").start(background=True)
    import time
    time.sleep(1.2)
    record = run.stop()
    for name in ("profiled", "unprofiled"):
        folder = logdir / name / "plugins" / "bottleneck"
        folder.mkdir(parents=True)
        records.write_sidecar(str(folder), record, name=records.system_run_name(record["start_unix_ns"], "vm", 1))
        (folder / "steptimes_x.json").write_text("{}")  # the trend file beside it is not a record
    session = logdir / "profiled" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    demo = os.path.join(ROOT, "demo_logs")
    trace = next(os.path.join(d, f) for d, _, fs in os.walk(demo) for f in fs if f.endswith(".xplane.pb"))
    shutil.copy(trace, session / os.path.basename(trace))
    found = find_sessions(str(logdir)).sessions
    listed = sorted((s.run, s.name, bool(s.system_record)) for s in found)
    unprofiled = records.system_run_name(record["start_unix_ns"], "vm", 1)
    assert listed == [("profiled", "2026_01_01_00_00_00", False), ("unprofiled", unprofiled, True),
                      ("watched", "watch.json", True)]
    r = _cli("analyze", logdir, "--format", "csv")
    assert r.returncode == 0, r.stderr
    causes = {line.split(",")[0]: line.split(",")[9] for line in r.stdout.splitlines()[1:]}
    assert causes["watched"] == "triage_cpu" and causes["unprofiled"].startswith("triage_")


def test_a_damaged_record_is_one_error_line_and_is_left_as_it_was(tmp_path, watch_record):
    bad = tmp_path / "watch.json"
    text = watch_record.read_text()
    bad.write_text(text[: len(text) // 2])  # cut in the middle: begins as a record, is not JSON
    before = bad.read_bytes()
    r = _cli("analyze", bad)
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if line.startswith("tfbneck: error:")]
    assert len(errors) == 1 and str(bad) in errors[0] and "Traceback" not in r.stderr
    assert bad.read_bytes() == before
    j = json.loads(_cli("analyze", bad, "--format", "json").stdout)
    assert j["sessions"][0]["error_kind"] == "bad_system_record"
    wrong = json.loads(text)
    wrong["intervals"][0]["t_unix_ns"] = "soon"  # valid JSON, a field of the wrong kind
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "watch.json").write_text(json.dumps(wrong))
    j = json.loads(_cli("analyze", tmp_path / "wrong" / "watch.json", "--format", "json").stdout)
    assert j["sessions"][0]["error_kind"] == "bad_system_record" and "not a valid system record" in j["sessions"][0]["error"]
    other = tmp_path / "notes.json"
    other.write_text('{"a": 1}')
    r = _cli("analyze", other)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "tfbneck system record" in r.stderr


@pytest.mark.browser
def test_the_tab_lists_and_shows_a_system_only_session(tmp_path, watch_record):
    from support.browser_tab import KIND_LABELS, Tab
    from support.plugin_helpers import TensorBoard, chromium_context
    logdir = tmp_path / "logs"
    (logdir / "watched").mkdir(parents=True)
    shutil.copy(watch_record, logdir / "watched" / "watch.json")
    record = json.loads(watch_record.read_text())
    triage = record["triage"]
    with TensorBoard(str(logdir)) as tb, chromium_context() as ctx:
        tab = Tab(ctx, tb, "system-only")
        assert [row[:2] for row in tab.listed()] == [["watched", "watch.json"]]
        tab.select("watched", "watch.json")
        text = tab.frame.evaluate("() => document.querySelector('.tfb-session').innerText")
        assert KIND_LABELS[triage["bottleneck"]] in text
        assert triage["reason"] in text
        assert "Profile a few steps where the triage points" in text
        assert "System metrics only, no trace." in text and "No training steps were found" not in text
        tab.frame.wait_for_function("() => { const c = document.querySelector('.tfb-system-only-canvas'); "
                                    "return c && c.dataset.chart === 'ready'; }", timeout=30_000)
        drawn = tab.frame.evaluate("() => document.querySelector('.tfb-system-only').dataset.triage")
        assert drawn == ",".join(iv["triage"]["bottleneck"] for iv in record["intervals"])
        tab.shot("session")
        tab.close()
