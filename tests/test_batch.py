"""The batch driver (tfbneck_plugin.batch): every front door's discovery and analysis."""
import json
import os

import pytest

from tfbneck_plugin import batch
from tfbneck_plugin.analysis.grouping import group_jobs
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.cli.main import main as cli_main
from tfbneck_plugin.logdir import DiscoveryError
from support.paths import DATA, DEMO_LOGS, ROOT
from support.run_dirs import run_with_two_windows


def test_overlapping_paths_name_each_session_once():
    alone, _ = batch.discover([DEMO_LOGS])
    both, _ = batch.discover([DEMO_LOGS, os.path.join(DEMO_LOGS, "compute_bound")])
    assert len(alone) > 5
    assert [s.path for s in both] == [s.path for s in alone]


def test_the_cli_prints_what_analyze_paths_returns(tmp_path):
    """One driver: `tfbneck analyze --format json` holds the reports of analyze_paths, the
    workers of a multi-worker job grouped into one."""
    folder = os.path.join(DATA, "multiworker")
    reports, problems = batch.analyze_paths([folder])
    out = tmp_path / "r.json"
    assert cli_main(["analyze", folder, "--format", "json", "--output", str(out)]) == 0
    printed = json.loads(out.read_text())["sessions"]
    assert json.loads(json.dumps(reports)) == printed
    assert any(r.get("kind") == "job" for r in reports)
    sessions, _ = batch.discover([folder])
    assert len(reports) < len(sessions)  # the workers were grouped
    # analyze_many: each session's report (analyze_one) with what its run's trend files say.
    assert group_jobs(batch.analyze_many(sessions)) == reports
    assert batch.analyze_one(sessions[0]) == analyze_session(sessions[0])


def test_no_session_is_one_line_naming_the_paths(tmp_path):
    with pytest.raises(DiscoveryError) as err:
        batch.analyze_paths([str(tmp_path)])
    assert str(err.value) == batch.no_session_message([str(tmp_path)])
    assert str(err.value).startswith(f"no profiling session found under {tmp_path} (looked for <run>/plugins")
    assert "\n" not in str(err.value)


def test_parallel_analysis_gives_the_same_reports():
    sessions, _ = batch.discover([DEMO_LOGS])
    assert batch.analyze_many(sessions[:3], jobs=2) == batch.analyze_many(sessions[:3], jobs=1)


def test_reports_in_runs_writes_each_runs_facts_on_new_dicts(tmp_path, monkeypatch):
    """The driver's finished reports: the trace's report with what the run's trend files say
    (session time, the window that recorded it), the slow stretch not captured said once, on
    the run's newest session; each run folder read once; the reports ``analyze`` gave (a
    cache's) left as they were."""
    import copy
    from tfbneck_plugin import runs
    sessions, _ = batch.discover([run_with_two_windows(tmp_path)])
    older, newer = sorted(sessions, key=lambda s: s.name)
    given = {s.name: batch.analyze_uncached(s) for s in sessions}
    before = copy.deepcopy(given)
    reads = []
    monkeypatch.setattr(batch, "read_run", lambda d: reads.append(d) or runs.read_run(d))
    shown = batch.reports_in_runs([older, newer], analyze=lambda s: given[s.name])
    assert reads == [runs.run_dir_of(older)]
    assert given == before and not any(r is g for r in shown for g in given.values())
    assert shown[0]["window"]["steps"] == [6, 10] and "window" not in shown[1]  # only the first is in the file
    assert all(r["session_time"] for r in shown)
    said = [[e for e in r["evidence"] if e.startswith("The slowdown trigger saw")] for r in shown]
    assert said[0] == [] and len(said[1]) == 1 and "steps 20-31, median step 12 -> 30 ms" in said[1][0]
    assert said[1][0] in [d["text"] for d in shown[1]["evidence_detail"] if d["basis"] == "system_metrics"]
    # analyze_many finishes them the same way, the traces analysed in processes or not.
    assert batch.analyze_many([older, newer], use_cache=False, progress=False) == shown


def test_a_watch_capture_gets_its_runs_facts_through_the_driver(tmp_path, monkeypatch):
    """``tfbneck watch --capture-port`` into the logdir where the training's BottleneckProfiler
    keeps its trend file and an input-cost measurement: the captured session's report is the
    one ``tfbneck analyze`` gives (the window, the session's time, the measurement that holds
    the confidence down), through the report cache. XProf's capture client is stood in for
    by a copy of a shipped session: no profiler server, no TensorFlow."""
    import shutil
    import time
    from tfbneck_plugin.capture.input_cost import write_input_cost
    from tfbneck_plugin.runs import INPUT_COST_FORMAT
    from tfbneck_plugin.watch import capture
    demo = os.path.join(DEMO_LOGS, "cpu_bound_input")
    logdir = tmp_path / "run"
    shutil.copytree(os.path.join(demo, "plugins", "bottleneck"), logdir / "plugins" / "bottleneck")
    write_input_cost(str(logdir), {
        "format": INPUT_COST_FORMAT, "version": 1, "time_unix": time.time(), "host": "h", "pid": 7,
        "real_ms_per_batch": 10.0, "cached_ms_per_batch": 9.7, "input_ms_per_batch": 0.3, "gain": 1.03,
        "limit": "model", "input_share": 0.03, "steps": 30, "repeats": 2, "steps_per_execution": 1,
        "backend": "tensorflow", "input_kind": "tf.data", "real_ms_runs": [10.0], "cached_ms_runs": [9.7]})
    (name,) = os.listdir(os.path.join(demo, "plugins", "profile"))

    def client(_addr, into, _ms):  # what XProf's client leaves: one session folder under the logdir
        shutil.copytree(os.path.join(demo, "plugins", "profile", name), os.path.join(into, "plugins", "profile", name))

    made = []
    finish = capture.captured_report
    monkeypatch.setattr(capture, "_trace", client)
    monkeypatch.setattr(capture, "captured_report", lambda s: made.append(finish(s)) or made[-1])
    monkeypatch.setenv("TFBNECK_CACHE_DIR", str(tmp_path / "cache"))
    watcher = capture.Capturer("localhost:6009", str(logdir), capture_ms=100, max_captures=1, after_s=0)
    watcher.consider(None, manual=True)
    watcher.wait(120)
    (result,) = watcher.results
    (report,) = made
    assert result["error"] is None and result["session"].endswith(name), result
    assert (result["bottleneck"], result["cause"], result["status"]) == ("cpu", "input_preprocessing", "ok")
    assert report["window"]["steps"] == [6, 10] and report["session_time"]
    assert report["input_cost"]["gain"] == 1.03 and report["confidence"] == 0.6
    assert any(e.startswith("Measured by ablation") for e in report["evidence"])
    (analysed,), _ = batch.analyze_paths([str(logdir)], use_cache=False, progress=False)
    named = dict(run=None, trace_viewer=None)  # the CLI names the run after its folder, the watcher "."
    assert dict(report, **named) == dict(analysed, **named)
    assert any(n.endswith(".json") for _d, _s, names in os.walk(tmp_path / "cache") for n in names)


def test_only_the_driver_writes_a_runs_facts_into_reports():
    """One place finishes a report with its run's facts: the batch driver. No other module of
    the package calls the writers of :mod:`tfbneck_plugin.analysis.run_evidence` that take a
    run's facts (front doors call ``batch.reports_in_runs`` or ``batch.analyze_many``)."""
    import re
    package = os.path.join(ROOT, "tfbneck_plugin")
    writers = re.compile(r"\b(write_run_facts|uncaptured_evidence|annotate)\(")
    allowed = {os.path.join("tfbneck_plugin", "batch.py"), os.path.join("tfbneck_plugin", "analysis", "run_evidence.py")}
    callers = []
    for folder, _dirs, names in os.walk(package):
        for name in names:
            path = os.path.join(folder, name)
            where = os.path.relpath(path, ROOT)
            if name.endswith(".py") and where not in allowed:
                with open(path, encoding="utf-8") as f:
                    callers += [f"{where}: {m.group(1)}" for m in writers.finditer(f.read())]
    assert callers == []


def test_run_mates_are_the_sessions_that_decide_a_shown_sessions_report(tmp_path):
    """A front door that shows one session of a logdir (the tab's routes) gives the driver the
    session and its run's newer sessions when the run's trend files record a slow stretch not
    profiled (the one fact another session decides): its finished report is then the one the
    whole logdir's run gives it. Without such a stretch, the session alone."""
    sessions, _ = batch.discover([run_with_two_windows(tmp_path / "a")])
    older, newer = sorted(sessions, key=lambda s: s.name)
    assert batch.run_mates([older], sessions) == [older, newer]
    assert batch.run_mates([newer], sessions) == [newer]
    assert batch.run_mates([older], [newer]) == [newer, older]  # one the listing lacks comes last
    whole = dict(zip((s.key for s in sessions), batch.analyze_many(sessions, use_cache=False, progress=False)))
    for s in (older, newer):
        mates = batch.run_mates([s], sessions)
        assert batch.reports_in_runs(mates, analyze=batch.analyze_uncached)[mates.index(s)] == whole[s.key]
    import shutil
    plain = os.path.join(str(tmp_path / "b"), "cpu_bound_input")
    shutil.copytree(os.path.join(DEMO_LOGS, "cpu_bound_input"), plain)
    profile = os.path.join(plain, "plugins", "profile")
    (first,) = os.listdir(profile)
    shutil.copytree(os.path.join(profile, first), os.path.join(profile, "2026_11_30_12_25_00_steps40-44"))
    sessions, _ = batch.discover([plain])
    assert batch.run_mates([sessions[0]], sessions) == [sessions[0]]
