"""Grouping a multi-worker job's sessions into one report (issue 13, acceptance 3).

The inputs are real: ``tests/data/multiworker`` holds two 2-worker MultiWorkerMirroredStrategy
jobs recorded on localhost by BottleneckProfiler (``straggler``: worker 1's tf.data map is
slow; ``balanced``: a large model, both workers alike; made by ``python
tests/tf_jobs/multiworker_fit.py --data tests/data/multiworker``). Copies of their sessions
without the recorded job stand for sessions of an older callback; copies from the two jobs
mixed stand for sessions of separate jobs. The rules' edges are pinned with hand-made
reports.
"""
import glob
import json
import os
import tempfile
import shutil

import pytest

from tfbneck_plugin.analysis import grouping
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.capture import job as capture_job
from tfbneck_plugin.cli.main import main as cli_main
from tfbneck_plugin.logdir import find_sessions
from support.paths import TESTS

HERE = TESTS
DATA = os.path.join(HERE, "data", "multiworker")


def session_dir(job_name, worker):
    (found,) = glob.glob(os.path.join(DATA, job_name, f"worker{worker}", "plugins", "profile", "*"))
    return found


def copy_session(job_name, worker, dest_logdir, keep_job=True, run=None):
    """Copy one worker's session into ``dest_logdir/<run>/plugins/profile/``; without the
    recorded job (and with the older callback's folder name) unless ``keep_job``."""
    src = session_dir(job_name, worker)
    name = os.path.basename(src)
    if not keep_job:
        name = name.rsplit("_worker", 1)[0]  # older callbacks did not name the task
    dest = os.path.join(str(dest_logdir), run or f"{job_name}-worker{worker}", "plugins", "profile", name)
    shutil.copytree(src, dest)
    if not keep_job:
        sidecar = os.path.join(dest, "tfbneck_system_metrics.json")
        with open(sidecar, encoding="utf-8") as f:
            data = json.load(f)
        assert data.pop("job")["task"] == f"worker:{worker}"
        with open(sidecar, "w", encoding="utf-8") as f:
            json.dump(data, f)
    return dest


def analyze(path):
    """The CLI's JSON report of ``path`` (written to a temporary file: never beside the data)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        code = cli_main(["analyze", str(path), "--format", "json", "--output", out])
        with open(out, encoding="utf-8") as f:
            return code, json.load(f)["sessions"]


def entries(sessions):
    return {(s.get("kind"), tuple(s["hosts"])) for s in sessions}


# ---- real sessions -------------------------------------------------------------------------------

def test_recorded_jobs_are_grouped_by_the_job():
    code, sessions = analyze(DATA)
    assert code == 0
    assert [(s["run"], s["kind"], s["hosts"], s["job"]["grouped_by"]) for s in sessions] == [
        ("balanced", "job", ["worker:0", "worker:1"], "job_info"),
        ("straggler", "job", ["worker:0", "worker:1"], "job_info")]
    balanced, straggler = sessions
    assert (balanced["cause"], balanced["job"]["straggler"]) == ("gradient_sync", None)
    assert (straggler["cause"], straggler["job"]["straggler"]) == ("input_preprocessing", "worker:1")
    assert straggler["evidence"][0].startswith("Grouped by the job BottleneckProfiler recorded in each session (job id ")
    assert straggler["evidence"][0].endswith("tasks worker:0, worker:1) and their overlapping wall-clock windows.")
    assert [h["session"].rsplit("_", 1)[1] for h in straggler["per_host"]] == ["worker0", "worker1"]
    assert straggler["job"]["id"] == straggler["session"].split(":", 1)[1]


def test_sessions_of_an_older_callback_are_grouped_on_evidence(tmp_path):
    for name in ("straggler", "balanced"):
        for w in (0, 1):
            copy_session(name, w, tmp_path / "logs", keep_job=False)
    code, sessions = analyze(tmp_path / "logs")
    assert code == 0 and len(sessions) == 2
    by_cause = {s["cause"]: s for s in sessions}
    for s in sessions:
        assert s["kind"] == "job" and s["hosts"] == ["worker:0", "worker:1"]
        assert s["job"]["grouped_by"] == "evidence" and s["job"]["id"] is None
        assert s["evidence"][0].startswith("Grouped on evidence (no job was recorded): tasks worker:0, worker:1 named "
                                           "in the traces' device names, the same steps (6-12), collectives in every "
                                           "worker's steps (group size 2), wall-clock windows overlapping for ")
    # each job's own sessions, whatever the order of the folders
    assert {h["run"] for h in by_cause["input_preprocessing"]["per_host"]} == {"straggler-worker0", "straggler-worker1"}
    assert {h["run"] for h in by_cause["gradient_sync"]["per_host"]} == {"balanced-worker0", "balanced-worker1"}
    assert by_cause["input_preprocessing"]["job"]["straggler"] == "worker:1"


def test_workers_of_separate_jobs_are_not_grouped(tmp_path):
    # the same steps and tasks, but recorded 20 s apart: two jobs, one worker of each
    copy_session("straggler", 0, tmp_path / "logs", keep_job=False)
    copy_session("balanced", 1, tmp_path / "logs", keep_job=False)
    code, sessions = analyze(tmp_path / "logs")
    assert code == 0
    assert entries(sessions) == {(None, ("vm",))}
    assert len(sessions) == 2 and all("job" not in s for s in sessions)


def test_recorded_jobs_with_different_ids_are_not_grouped(tmp_path):
    a = copy_session("straggler", 0, tmp_path / "logs")
    copy_session("straggler", 1, tmp_path / "logs")
    sidecar = os.path.join(a, "tfbneck_system_metrics.json")
    with open(sidecar, encoding="utf-8") as f:
        data = json.load(f)
    data["job"]["id"] = "another-job"
    with open(sidecar, "w", encoding="utf-8") as f:
        json.dump(data, f)
    code, sessions = analyze(tmp_path / "logs")
    assert len(sessions) == 2 and all(s.get("kind") != "job" for s in sessions)
    assert sorted(s["job"]["task"] for s in sessions) == ["worker:0", "worker:1"]  # the recorded job, per session


def test_two_sessions_of_one_task_are_not_guessed_at(tmp_path):
    copy_session("straggler", 0, tmp_path / "logs", keep_job=False, run="a")
    copy_session("straggler", 0, tmp_path / "logs", keep_job=False, run="b")
    copy_session("straggler", 1, tmp_path / "logs", keep_job=False, run="c")
    code, sessions = analyze(tmp_path / "logs")
    assert len(sessions) == 3 and all(s.get("kind") != "job" for s in sessions)


def test_every_worker_as_a_host_of_one_session(tmp_path):
    """The several-hosts-in-one-session path: lateness at the collectives, not step time."""
    folder = tmp_path / "run" / "plugins" / "profile" / "2026_01_01_00_00_00"
    folder.mkdir(parents=True)
    for w in (0, 1):
        shutil.copy(os.path.join(session_dir("straggler", w), "vm.xplane.pb.gz"), folder / f"host{w}.xplane.pb.gz")
    (session,) = find_sessions(str(tmp_path)).sessions
    r = analyze_session(session)
    assert r["hosts"] == ["host0", "host1"]
    assert (r["cause"], r["job"]["straggler"], r["job"]["grouped_by"]) == ("input_preprocessing", "worker:1",
                                                                           "one_session")
    assert [(h["host"], h["task"], h["straggler"]) for h in r["per_host"]] == [
        ("host0", "worker:0", False), ("host1", "worker:1", True)]
    assert r["trace_viewer"]["host"] == "host1"
    # the old rule on step time names nobody here: in lockstep the step times are alike
    assert not any("is a straggler" in e for e in r["evidence"])
    assert abs(r["per_host"][0]["step_time_ms"] - r["per_host"][1]["step_time_ms"]) < 0.1 * r["per_host"][1][
        "step_time_ms"]


def test_table_has_one_line_per_worker_with_the_straggler_marked(tmp_path, capsys):
    assert cli_main(["analyze", os.path.join(DATA, "straggler")]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip().startswith(("worker:", "* worker:"))]
    assert len(lines) == 2
    assert lines[0].split()[0] == "worker:0" and lines[1].split()[:2] == ["*", "worker:1"]
    assert "own limit cpu/input_preprocessing" in lines[1]


# ---- the rules' edges, on hand-made reports ---------------------------------------------------------

def report(task, steps=(6, 7, 8), start_s=1000.0, length_s=0.2, group_size=2, session="2026_01_01_00_00_00"):
    return {"status": "ok", "hosts": ["vm"], "run": task, "session": session, "path": f"/x/{task}",
            "steps": {"items": [{"step": n} for n in steps], "step_time_ms": {"mean": 10.0}},
            "evidence": [], "bottleneck": "network", "cause": "gradient_sync",
            "sync": {"task": task, "group_size": group_size, "steps": [],
                     "clock": {"start_unix_ns": int(start_s * 1e9), "stop_unix_ns": int((start_s + length_s) * 1e9)}}}


def grouped(reports):
    return [r.get("kind") for r in grouping.group_jobs(reports)]


def test_evidence_rule_edges():
    assert grouped([report("worker:0"), report("worker:1")]) == ["job"]
    assert grouped([report("worker:0"), report("worker:1", steps=(8, 9, 10))]) == [None, None]  # other steps
    assert grouped([report("worker:0"), report("worker:1", steps=(7, 8))]) == ["job"]  # step 6 dropped on one
    assert grouped([report("localhost:0"), report("localhost:1")]) == [None, None]  # not a multi-worker job
    assert grouped([report("worker:0", group_size=1), report("worker:1", group_size=1)]) == [None, None]
    assert grouped([report(f"worker:{i}", group_size=3) for i in range(3)]) == ["job"]
    assert grouped([report(f"worker:{i}", group_size=2) for i in range(3)]) == [None, None, None]  # too many
    assert grouped([report("worker:0"), dict(report("worker:1"), status="error")]) == [None, None]
    assert grouped([report("worker:0"), report("worker:0")]) == [None, None]  # one task twice


@pytest.mark.parametrize("gap_s,kinds", [(1.9, ["job"]), (2.1, [None, None])])
def test_clocks_are_trusted_to_two_seconds(gap_s, kinds):
    assert grouped([report("worker:0", start_s=1000.0), report("worker:1", start_s=1000.2 + gap_s)]) == kinds


def test_without_a_clock_the_folder_name_dates_the_session():
    a, b = report("worker:0"), report("worker:1")
    for r in (a, b):
        r["sync"]["clock"] = None
        r["window_ms"] = 200.0
    assert grouped([a, b]) == ["job"]
    b["session"] = "2026_01_01_00_00_30"
    assert grouped([a, b]) == [None, None]


def test_recorded_job_is_read_only_in_its_shape():
    ok = {"id": "abc", "task": "worker:1", "workers": 2, "cluster": {"worker": 2}, "source": "TF_CONFIG"}
    assert grouping.recorded_job({"job": ok}) == ok
    assert grouping.recorded_job({}) is None
    assert grouping.recorded_job({"job": dict(ok, task="worker")}) is None
    assert grouping.recorded_job({"job": dict(ok, id=7)}) is None
    assert grouping.recorded_job({"job": dict(ok, workers=True)})["workers"] is None


# ---- what the callback records (capture/job.py: no TensorFlow) --------------------------------------

def tf_config(cluster, task_type="worker", index=1):
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def test_job_from_tf_config():
    cluster = {"chief": ["h0:1"], "worker": ["h1:1", "h2:1"], "ps": ["h3:1"]}
    info = capture_job.job_info(environ={"TF_CONFIG": tf_config(cluster)})
    assert info == {"id": info["id"], "task": "worker:1", "task_type": "worker", "task_index": 1,
                    "cluster": {"chief": 1, "worker": 2, "ps": 1}, "workers": 3, "source": "TF_CONFIG"}
    # every worker of the job gets the same id, whatever the order of the keys
    other = capture_job.job_info(environ={"TF_CONFIG": tf_config(dict(reversed(list(cluster.items()))), "chief", 0)})
    assert other["id"] == info["id"] and other["task"] == "chief:0"
    moved = capture_job.job_info(environ={"TF_CONFIG": tf_config(dict(cluster, worker=["h1:1", "h9:1"]))})
    assert moved["id"] != info["id"]
    assert capture_job.session_suffix(info) == "_worker1" and capture_job.session_suffix(None) == ""


@pytest.mark.parametrize("text", [None, "", "{not json", "[]", json.dumps({"cluster": {"worker": ["a:1"]}}),
                                  tf_config({"worker": ["a:1"]}, index=0),                  # one worker: no job
                                  tf_config({"worker": ["a:1"], "evaluator": ["b:1"]}, index=0),
                                  tf_config({"worker": ["a:1", "b:1"]}, index="x")])
def test_no_job_outside_a_multi_worker_cluster(text):
    env = {} if text is None else {"TF_CONFIG": text}
    assert capture_job.job_info(environ=env) is None


def test_sidecar_gets_the_job_even_without_system_metrics():
    info = capture_job.job_info(environ={"TF_CONFIG": tf_config({"worker": ["a:1", "b:1"]})})
    assert capture_job.with_job(None, None, "f", 1) is None
    assert capture_job.with_job(None, info, "f", 1) == {"format": "f", "version": 1, "samples": [], "job": info}
    assert capture_job.with_job({"samples": [1]}, info, "f", 1) == {"samples": [1], "job": info}


@pytest.mark.tf
def test_job_from_a_cluster_resolver():
    import types

    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": ["a:1", "b:1", "c:1"]}), task_type="worker", task_id=2)
    info = capture_job.job_info(types.SimpleNamespace(cluster_resolver=resolver), environ={})
    assert (info["task"], info["workers"], info["source"]) == ("worker:2", 3, "cluster_resolver")
    same = capture_job.job_info(environ={"TF_CONFIG": tf_config({"worker": ["a:1", "b:1", "c:1"]}, index=2)})
    assert same["id"] == info["id"]


def _trend_file(run_dir, session, job_step_ms):
    """A trend file as BottleneckProfiler writes it (``records.STEP_TIMES_FORMAT``) naming the
    worker's window, with the job's own step around it (its ``overhead``)."""
    from tfbneck_plugin.records import STEP_TIMES_DIR, STEP_TIMES_FORMAT
    folder = os.path.join(str(run_dir), STEP_TIMES_DIR)
    os.makedirs(folder, exist_ok=True)
    data = {"format": STEP_TIMES_FORMAT, "version": 1, "source": "callback", "host": "vm", "pid": 1,
            "start_unix_ns": 0, "updated_unix_ns": 0, "ended": True, "steps_per_execution": 1, "points": [],
            "windows": [{"index": 0, "kind": "scheduled", "steps": [6, 12], "status": "profiled",
                         "session": session, "overhead": {"job_step_ms": job_step_ms, "x": None}}]}
    with open(os.path.join(folder, "steptimes_2026_11_30_11_55_58_vm_1.json"), "w", encoding="utf-8") as f:
        json.dump(data, f)


@pytest.mark.parametrize("slower_by", [3.0, 1.1])
def test_a_worker_whose_window_was_faster_than_its_own_steps_is_said_in_the_job_report(tmp_path, slower_by):
    # A one-step window of the straggler job traced a 21 ms step of a 61 ms job, and the job
    # report said nothing. Each worker's trend file here gives the job's own step as
    # slower_by x the traced one: 3x is not the job's steady state, 1.1x is (the profiler's cost).
    _, (alone,) = analyze(os.path.join(DATA, "straggler"))
    traced = {h["host"]: h["step_time_ms"] for h in alone["per_host"]}
    for w in (0, 1):
        dest = copy_session("straggler", w, tmp_path / "logs")
        _trend_file(os.path.dirname(os.path.dirname(os.path.dirname(dest))), os.path.basename(dest),
                    slower_by * traced[f"worker:{w}"])
    code, (job,) = analyze(tmp_path / "logs")
    assert code == 0 and job["kind"] == "job"
    said = [e for e in job["evidence"] if "did not see the job's steady state" in e]
    if slower_by < 1 / 0.8:
        assert said == []
    else:
        assert [s.split(" (")[0] for s in said] == ["The traced step of worker:0", "The traced step of worker:1"]
        t1 = traced["worker:1"]
        assert f"({t1:.3g} ms) is 0.33x its own steps around the window ({3 * t1:.3g} ms" in said[1]
        details = [d for d in job["evidence_detail"] if d["text"] in said]
        assert [d["basis"] for d in details] == ["system_metrics", "system_metrics"]
