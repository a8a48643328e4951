"""``tfbneck fleet``, ``tfbneck_plugin.fleet()``, the tab's ``/fleet`` route and the persistent
report cache (``tfbneck_plugin.cache``), on a fleet of real sessions: the demo runs and the
shared real traces hard-linked under many run names, each run with a step-time trend file
(``tests/support/fleet_logs.py``).

Every expected figure is computed here from the per-session JSON of ``tfbneck analyze`` and
from the trend files the fixture wrote, independently of ``tfbneck_plugin.fleet_view.report``.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess

import pytest

from conftest import DEMO_LOGS, REALTRACES, tfbneck_cmd
from support.fleet_logs import build_fleet, real_sessions
from support.trend_files import set_window_overhead

PATTERN = r"exp-(\w+)-"
RUNS = 36


def cli(*args, env=None, timeout=600):
    return subprocess.run(tfbneck_cmd() + list(args), capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    """36 runs of 2 real sessions each, plus one run whose trace is not a trace."""
    root = tmp_path_factory.mktemp("fleet")
    sources = real_sessions(DEMO_LOGS, REALTRACES if os.path.isdir(REALTRACES) else None)
    assert len(sources) >= 11
    made = build_fleet(str(root / "logs"), sources, RUNS, sessions_per_run=2)
    bad = root / "logs" / "vision" / "exp-broken-9999" / "plugins" / "profile" / "2026_11_02_00_00_00"
    bad.mkdir(parents=True)
    (bad / "host.xplane.pb").write_bytes(b"\x12\x34 not a protobuf \xff" * 8)
    return {"root": str(root / "logs"), "made": made, "cache": str(root / "cache")}


@pytest.fixture(scope="module")
def per_session(fleet_dir):
    r = cli("analyze", fleet_dir["root"], "--format", "json", "--jobs", "2",
            env={"TFBNECK_CACHE_DIR": fleet_dir["cache"]})
    assert r.returncode == 1, r.stderr[-2000:]  # the broken run
    return json.loads(r.stdout)["sessions"]


def _fleet_json(fleet_dir, *extra, rc=1):
    r = cli("fleet", fleet_dir["root"], "--format", "json", *extra, env={"TFBNECK_CACHE_DIR": fleet_dir["cache"]})
    assert r.returncode == rc, r.stderr[-2000:]  # 1: a session without a report (the broken run), counted
    return json.loads(r.stdout)


def profiled_ms(s):
    """A session's profiled time: mean step x steady steps (0 without steps)."""
    mean = (s["steps"].get("step_time_ms") or {}).get("mean")
    return mean * s["steps"]["count"] if mean is not None else 0.0


def _expected_runs(sessions, made):
    """Each run's recoverable time by hand, from the latest ok session: its fix is the
    report's first recommendation (the fix every view names first), by its prediction, or
    with no model but a bound at the middle of [bound, now]; recoverable = the run's own time (from its
    trend file: batches / steps_per_execution x the points' mean) x (1 - 1 / speedup), else
    (now - best) x the profiled batches. A first fix with neither a prediction nor a bound:
    unknown (None), not 0; no recommendation at all: 0."""
    trend = {m["run"]: m["trend"] for m in made}
    out = {}
    for run in {s["run"] for s in sessions}:
        ok = sorted((s for s in sessions if s["run"] == run and s["status"] == "ok"), key=lambda s: s["session"])
        if not ok:
            continue
        last = ok[-1]
        now = last["steps"].get("time_per_batch_ms")
        options = []
        for r in last["recommendations"][:1]:
            if r.get("predicted"):
                options.append((r["predicted"]["time_per_batch_ms"], r["predicted"]["speedup"], r["fix"]))
            elif r.get("bound_ms") is not None and now:
                expect = (r["bound_ms"] + now) / 2
                options.append((expect, round(now / expect, 2), r["fix"]))
        if not options:
            first = last["recommendations"][0]["fix"] if last["recommendations"] else None
            out[run] = (None if first else 0.0, first)
            continue
        best, speedup, fix = min(options, key=lambda o: o[0])
        t = trend.get(run)
        pts = [p for p in (t or {}).get("points") or [] if p.get("n")]
        if pts:
            mean = sum(p["mean_ms"] * p["n"] for p in pts) / sum(p["n"] for p in pts)
            run_ms = max(p["step"] for p in pts) / (t.get("steps_per_execution") or 1) * mean
            rec = run_ms * max(0.0, 1 - 1 / speedup)
        else:
            rec = max(0.0, now - best) * last["steps"]["count"] * last["steps"]["batches_per_step"]
        out[run] = (rec, fix)
    return out


def test_fleet_sums_and_ranking_match_the_reports(fleet_dir, per_session):
    f = _fleet_json(fleet_dir)
    ok = [s for s in per_session if s["status"] == "ok"]
    assert f["sessions"] == len(per_session) == 2 * RUNS + 1
    assert f["errors"]["sessions"] == 1 and sum(f["errors"]["by_kind"].values()) == 1
    # Category totals: the sum of each session's share x mean step x steady steps.
    cats = set().union(*(s["breakdown_pct"] for s in ok))
    for c in cats:
        want = sum(s["breakdown_pct"].get(c, 0.0) / 100 * profiled_ms(s) for s in ok)
        assert f["categories_ms"][c] == pytest.approx(want, rel=1e-9, abs=1e-9)
    total = sum(f["categories_ms"].values())
    assert f["categories_pct"]["input"] == pytest.approx(100 * f["categories_ms"]["input"] / total, abs=0.01)
    kinds = {}
    for s in ok:
        kinds[s["bottleneck"]] = kinds.get(s["bottleneck"], 0) + 1
    assert f["by_bottleneck"] == kinds
    # The top of the ranking is the run a hand calculation puts there, with its fix.
    expected = _expected_runs(per_session, fleet_dir["made"])
    top_run, (top_ms, top_fix) = max(((k, v) for k, v in expected.items() if v[0] is not None), key=lambda kv: kv[1][0])
    assert top_ms > 0
    assert f["runs"][0]["run"] == top_run and f["runs"][0]["fix"] == top_fix
    assert f["runs"][0]["recoverable_ms"] == pytest.approx(top_ms, rel=1e-9)
    for r in f["runs"]:
        if r["run"] in expected and expected[r["run"]][0] is None:
            assert r["recoverable_ms"] is None and r["fix"] == expected[r["run"]][1], r["run"]
        elif r["run"] in expected:
            assert r["recoverable_ms"] == pytest.approx(expected[r["run"]][0], rel=1e-9, abs=1e-9), r["run"]
    # Ranked: time to recover (most first), then unknown worth, then none to recover, then no report.
    tier = [0 if (r["recoverable_ms"] or 0) > 0 else 1 if r["status"] == "ok" and r["recoverable_ms"] is None
            else 2 if r["status"] == "ok" else 3 for r in f["runs"]]
    assert tier == sorted(tier) and tier.count(1) > 0 and tier[-1] == 3
    known = [r["recoverable_ms"] for r in f["runs"] if (r["recoverable_ms"] or 0) > 0]
    assert known == sorted(known, reverse=True)
    # Skipped windows the trend files record, and runs whose length is known.
    made = fleet_dir["made"]
    assert f["skipped_windows"]["in_trend_files"] == sum(
        1 for m in made if m["trend"] and any(w["status"] == "skipped" for w in m["trend"]["windows"]))
    assert f["accelerator_hours"]["runs_with_length"] == sum(  # a length, and steps to split it by
        1 for m in made if m["trend"] and sum(profiled_ms(s) for s in per_session
                                              if s["run"] == m["run"] and s["status"] == "ok") > 0)


def test_accelerator_hours_by_hand(fleet_dir, per_session):
    f = _fleet_json(fleet_dir)
    want = 0.0
    for m in fleet_dir["made"]:
        ok = [s for s in per_session if s["run"] == m["run"] and s["status"] == "ok"]
        if not (m["trend"] and ok):
            continue
        pts = m["trend"]["points"]
        run_ms = max(p["step"] for p in pts) * sum(p["mean_ms"] * p["n"] for p in pts) / sum(p["n"] for p in pts)
        prof = sum(profiled_ms(s) for s in ok)
        inp = sum(s["breakdown_pct"].get("input", 0.0) / 100 * profiled_ms(s) for s in ok)
        want += inp / prof * run_ms / 3.6e6 if prof else 0.0
    assert f["accelerator_hours"]["by_category"]["input"] == pytest.approx(want, rel=1e-9)


def test_group_by_pattern_and_level(fleet_dir, per_session):
    f = _fleet_json(fleet_dir, "--group-by", PATTERN)
    runs = {s["run"] for s in per_session}
    want = {}
    for run in runs:
        want[re.search(PATTERN, run).group(1)] = want.get(re.search(PATTERN, run).group(1), 0) + 1
    assert {g["group"]: g["runs"] for g in f["groups"]} == want
    names = [g["group"] for g in f["groups"]]  # as people number them: exp2 before exp10
    assert names == sorted(names, key=lambda t: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", t)])
    assert all(r["group"] == re.search(PATTERN, r["run"]).group(1) for r in f["runs"])
    by_team = _fleet_json(fleet_dir, "--group-level", "1")
    assert {g["group"]: g["runs"] for g in by_team["groups"]} == {
        t: sum(1 for r in runs if r.split("/")[0] == t) for t in {r.split("/")[0] for r in runs}}
    r = cli("fleet", fleet_dir["root"], "--group-by", "exp-(")
    assert r.returncode == 2 and "not a regular expression" in r.stderr and "Traceback" not in r.stderr


def test_since_and_trend(fleet_dir, per_session):
    f = _fleet_json(fleet_dir)
    dates = sorted({s["session"][:10].replace("_", "-") for s in per_session})
    assert [d["date"] for d in f["trend"]] == dates
    assert sum(d["sessions"] for d in f["trend"]) == f["sessions"]
    later = _fleet_json(fleet_dir, "--since", dates[3], rc=0)  # the broken run is older
    assert later["sessions"] == sum(1 for s in per_session if s["session"][:10].replace("_", "-") >= dates[3])
    assert [d["date"] for d in later["trend"]] == dates[3:]


def test_formats_and_fleet_csv(fleet_dir):
    r = cli("fleet", fleet_dir["root"], "--format", "csv", env={"TFBNECK_CACHE_DIR": fleet_dir["cache"]})
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == RUNS + 1 and rows[0]["rank"] == "1" and rows[0]["fix"]
    assert {row["window_kind"] for row in rows} >= {"scheduled", "triggered"}
    assert {row["window_trigger"] for row in rows} >= {"slowdown", ""}
    table = cli("fleet", fleet_dir["root"], env={"TFBNECK_CACHE_DIR": fleet_dir["cache"]}).stdout
    assert "Fix these first" in table and rows[0]["run"] in table
    # The run whose trace is not a trace is named, with the line analyze gives for it.
    [broken] = [row for row in rows if row["status"] == "error"]
    assert broken["run"] == "vision/exp-broken-9999" and broken["recoverable_ms"] == ""
    assert broken["error"].startswith(os.path.join(fleet_dir["root"], "vision", "exp-broken-9999"))
    assert "\n" not in broken["error"]
    assert f"vision/exp-broken-9999/2026_11_02_00_00_00: ERROR {broken['error']}" in table
    # Runs whose first fix has no predicted worth read "no model", never "0 ms".
    unknown = [row for row in rows if row["status"] == "ok" and row["recoverable_ms"] == ""]
    assert unknown and all(row["fix_worth"].startswith("no prediction") for row in unknown)
    md = cli("fleet", fleet_dir["root"], "--format", "markdown", env={"TFBNECK_CACHE_DIR": fleet_dir["cache"]}).stdout
    assert md.startswith("# tfbneck fleet") and "| category | share |" in md


def test_analyze_csv_carries_fix_window_and_time(fleet_dir, per_session):
    r = cli("analyze", fleet_dir["root"], "--format", "csv", env={"TFBNECK_CACHE_DIR": fleet_dir["cache"]})
    rows = {(x["run"], x["session"]): x for x in csv.DictReader(io.StringIO(r.stdout))}
    for s in per_session:
        row = rows[(s["run"], s["session"])]
        assert row["path"] == s["path"]
        if s["status"] != "ok":
            continue
        fix = s["recommendations"][0] if s["recommendations"] else None
        assert row["fix_first"] == (fix["fix"] if fix else "")
        assert row["time_per_batch_ms"] == str(s["steps"].get("time_per_batch_ms", ""))
        assert row["session_time"].replace("-", "_").replace("T", "_").replace(":", "_") == s["session"]
        w = s.get("window") or {}  # none where the run has no trend file
        assert row["window_kind"] == (w.get("kind") or "") and row["window_trigger"] == (w.get("trigger") or "")
    kinds = {(s.get("window") or {}).get("kind") for s in per_session if s["status"] == "ok"}
    assert kinds == {"scheduled", "triggered", None}


def test_api_fleet_is_the_cli_json(fleet_dir, monkeypatch):
    import tfbneck_plugin as tfb
    monkeypatch.setenv("TFBNECK_CACHE_DIR", fleet_dir["cache"])
    f = tfb.fleet(fleet_dir["root"], group_by=PATTERN)
    assert json.loads(f.to_json()) == _fleet_json(fleet_dir, "--group-by", PATTERN)
    df = f.to_dataframe()
    assert list(df["run"])[:3] == [r["run"] for r in f["runs"][:3]] and df["recoverable_ms"].dropna().is_monotonic_decreasing
    html = f._repr_html_()
    assert "Fix these first" in html and f["runs"][0]["run"] in html and "<script" not in html
    with pytest.raises(ValueError, match="not a regular expression"):
        tfb.fleet(fleet_dir["root"], group_by="(")


def test_a_group_by_that_backtracks_without_end_is_one_line_not_a_hang(tmp_path):
    """``(a|aa)+$`` searched in a long run name of a's ending in b takes exponential time in
    Python's ``re``; the search has a time limit and the user gets one line, in seconds."""
    import shutil
    import time
    demo = next(os.path.join(d) for d, _, fs in sorted(os.walk(DEMO_LOGS)) if any(f.endswith(".xplane.pb") for f in fs))
    run = "a" * 200 + "b"
    shutil.copytree(demo, tmp_path / "logs" / run / "plugins" / "profile" / os.path.basename(demo))
    started = time.monotonic()
    r = cli("fleet", str(tmp_path / "logs"), "--group-by", "(a|aa)+$", env={"TFBNECK_CACHE_DIR": str(tmp_path / "c")},
            timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "backtracks" in r.stderr
    assert time.monotonic() - started < 60
    import tfbneck_plugin as tfb
    with pytest.raises(ValueError, match="backtracks"):
        tfb.fleet(str(tmp_path / "logs"), group_by="(a|aa)+$")
    ok = cli("fleet", str(tmp_path / "logs"), "--group-by", "(a+)b$", "--format", "json",
             env={"TFBNECK_CACHE_DIR": str(tmp_path / "c")})
    assert ok.returncode == 0 and [g["group"] for g in json.loads(ok.stdout)["groups"]] == ["a" * 200]


@pytest.mark.parametrize("kind", ["scheduled", "triggered"])
def test_a_traced_step_faster_than_the_jobs_own_advises_other_steps_only_for_chosen_windows(kind):
    """A traced step under 0.8x the job's own step around the window: a scheduled window's
    steps drew on a prefetch buffer, and the user is told to profile later steps; a window the
    slowdown trigger opened was not chosen by the user (a newcomer's busy-machine run read
    0.67x and 0.79x there), so it gets no advice to choose other steps."""
    from tfbneck_plugin.analysis.run_evidence import job_scale_evidence
    report = {"steps": {"step_time_ms": {"mean": 20.0}}, "window": {"kind": kind, "job_step_ms": 30.0}}
    text = job_scale_evidence(report)
    assert "is 0.67x that" in text
    assert ("profile a window of 5 steps later" in text) == (kind == "scheduled")
    from tfbneck_plugin.analysis.run_evidence import unrepresentative
    assert unrepresentative(report) == (kind == "scheduled")   # caps the verdict's confidence (write_run_facts)
    if kind == "scheduled":
        # The advice fits an epoch: without its length, no steps that may not fit one; with it,
        # a window of as many steps in the middle of the first epoch after this window's, inside the run.
        report["window"]["steps"] = [20, 24]
        assert "profile_steps=" not in job_scale_evidence(report)
        assert "this run's epoch length is not in its trend file" in job_scale_evidence(report)
        report["window"]["epoch_batches"] = 30
        assert "profile_steps=(43, 47), the middle of epoch 2" in job_scale_evidence(report), job_scale_evidence(report)
        report["run_length"] = {"batches": 40, "time_ms": 1000.0}   # a run of 40 batches: no whole epoch after
        assert "hold no whole epoch after this window" in job_scale_evidence(report), job_scale_evidence(report)
        # A window already in the middle of epoch 2 (a PyDataset's queue that runs ahead wherever it is profiled):
        # no advice to move it again, which would only cycle between epochs.
        report["window"]["steps"], report["run_length"] = [43, 47], {"batches": 120, "time_ms": 1000.0}
        said = job_scale_evidence(report)
        assert "this window already lies inside epoch 2, away from its start" in said and "profile_steps=" not in said
    assert ("the slowdown trigger chose" in text) == (kind == "triggered")
    report["window"]["job_step_ms"] = 21.0  # 0.95x: the profiler's cost, in either kind
    assert "the profiler's own cost included" in job_scale_evidence(report)


def test_a_confidence_held_down_by_the_jobs_clock_says_so(tmp_path, monkeypatch):
    """The shipped cpu_bound_input run (confidence 0.8 from its trace) whose trend file says the
    job's own steps around the window took 1/0.7 of the traced step: the report holds the
    confidence at 0.6 and its evidence says why and what it was, so a user who read 0.8 in the
    callback's line at the window's end can tell the two apart."""
    import shutil
    import tfbneck_plugin as tfb
    from tfbneck_plugin.analysis.run_evidence import UNREPRESENTATIVE_CONFIDENCE
    run = tmp_path / "cpu_bound_input"
    shutil.copytree(os.path.join(DEMO_LOGS, "cpu_bound_input"), run)
    monkeypatch.setenv("TFBNECK_CACHE_DIR", str(tmp_path / "cache"))
    before = tfb.analyze(str(run))["cpu_bound_input"]
    set_window_overhead(run, before["steps"]["step_time_ms"]["mean"], 0.7)
    after = tfb.analyze(str(run))["cpu_bound_input"]
    assert before["confidence"] == 0.8 and after["confidence"] == UNREPRESENTATIVE_CONFIDENCE == 0.6
    said = [e for e in after["evidence"] if e.startswith("By the job's own clock")]
    assert len(said) == 1 and "is 0.70x that" in said[0], after["evidence"]
    assert said[0].endswith("so the confidence is held at 0.6 (0.8 from the trace alone: what the callback reports "
                            "at the window's end, before the job's later steps are timed)."), said[0]
    # The input's worth at the job's scale: the step without the input (the trace's after_ms) against the job's step.
    load, job = after["input_load"], after["window"]["job_step_ms"]
    assert "speedup_job" not in before["input_load"]
    assert load["speedup_job"] == round(job / load["after_ms"], 2) > load["speedup"], load
    (worth,) = [e for e in after["evidence"] if e.startswith("At the job's scale the input's work")]
    assert f"worth about {load['speedup_job']:.2f}x" in worth and f"({load['speedup']}x) divides the traced step" in worth
    # A measurement of the job's input cost that confirms the verdict has the last word: 0.8, its sentence
    # after the window's, naming the held figure as the one without it.
    from tfbneck_plugin.capture.input_cost import write_input_cost
    from tfbneck_plugin.runs import INPUT_COST_FORMAT
    write_input_cost(str(run), {"format": INPUT_COST_FORMAT, "version": 1, "time_unix": 1.8e9, "host": "h", "pid": 1,
                                "real_ms_per_batch": 10.0, "cached_ms_per_batch": 5.0, "input_ms_per_batch": 5.0,
                                "gain": 2.0, "limit": "input", "unsettled": None, "input_share": 0.5, "steps": 30,
                                "repeats": 2, "backend": "tensorflow", "input_kind": "tf.data", "others_cores": 0.02})
    measured = tfb.analyze(str(run))["cpu_bound_input"]
    ev = measured["evidence"]
    (window,) = [i for i, e in enumerate(ev) if e.startswith("By the job's own clock")]
    (confirm,) = [i for i, e in enumerate(ev) if e.startswith("Measured by ablation")]
    assert measured["confidence"] == 0.8 and confirm > window, ev
    assert "it confirms the verdict: confidence 0.8 (0.6 without the measurement)." in ev[confirm], ev[confirm]
    assert ev[confirm].endswith(f", {measured['input_load']['speedup_job']:.2f}x at the job's scale (compare this one: "
                                "the window's steps were not the job's)."), ev[confirm]
