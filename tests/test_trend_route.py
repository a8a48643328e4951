"""The tab's ``/trend`` route (``plugin/trend.py``) in process, without a server or TensorFlow.

Trend files are written by the callback's own writer (``capture/trend.JobTrend``: it
imports no TensorFlow) into logdirs of placeholder sessions (the route never analyses).
The browser view over a real job's logdir is tested in ``tests/test_slowdown.py``.
"""
import json
import os
import time
from types import SimpleNamespace

import pytest
from tensorboard.plugins import base_plugin

from support.plugin_helpers import get_json, put_session, scanned_listing, wsgi_client
from tfbneck_plugin.capture.trend import JobTrend
from tfbneck_plugin.plugin.query import RouteError
from tfbneck_plugin.plugin.routes import BottleneckPlugin


def window(index, kind, steps, session, report=None, trigger=None):
    """A window record as BottleneckProfiler keeps it (capture/window.WindowRecord's fields)."""
    return SimpleNamespace(index=index, kind=kind, requested=[steps], steps=steps, status="profiled", reason=None,
                           closed_by="completed", session_dir=f"/x/plugins/profile/{session}", trigger=trigger,
                           report=report, analysis_error=None, change=None)


def report(kind, cause, input_pct, step_ms):
    return {"status": "ok", "bottleneck": kind, "cause": cause, "confidence": 0.8,
            "steps": {"step_time_ms": {"mean": step_ms}}, "breakdown_pct": {"input": input_pct,
                                                                            "device_compute": 100 - input_pct}}


def write_trend(run_dir, windows, points):
    warned = []
    t = JobTrend(str(run_dir), windows, {"factor": 1.5}, lambda k, m: warned.append(m))
    for p in points:
        t.add_point(p)
    t.changes()
    t.write()
    assert not warned
    return t.path


@pytest.fixture
def logdir(tmp_path):
    root = tmp_path / "logs"
    put_session(root, "job", "2024_03_01_10_00_00_steps10-14")
    put_session(root, "job", "2024_03_01_10_05_00_steps500-504_slowdown")
    put_session(root, "other", "2024_03_02_10_00_00")
    ws = [window(0, "scheduled", (10, 14), "2024_03_01_10_00_00_steps10-14", report("device", "device_compute", 3, 20)),
          window(1, "triggered", (500, 504), "2024_03_01_10_05_00_steps500-504_slowdown",
                 report("cpu", "input_preprocessing", 80, 95), {"kind": "slowdown", "slow_steps": [470, 499]}),
          window(2, "scheduled", (900, 904), "gone_session")]
    points = [{"step": s, "first_step": s - 99, "epoch": None, "n": 100, "p50_ms": v, "p90_ms": v * 1.2,
               "mean_ms": v, "t_unix_ns": 0} for s, v in ((100, 20.0), (200, 20.5), (600, 96.0))]
    points[-1]["first_step"] = 505  # the periods leave the window's steps out
    path = write_trend(root / "job", ws, points)
    return root, path


def make_plugin(root):
    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(root)))
    scanned_listing(p)
    return p


def test_trend_lists_each_run_with_its_points_windows_and_changes(logdir):
    root, path = logdir
    p = make_plugin(root)
    code, body, _ = p.trend_impl({})
    assert code == 200 and body["problems"] == []
    (run,) = body["runs"]  # "other" has no trend file
    assert run["run"] == "job"
    (job,) = run["jobs"]
    assert job["file"] == os.path.basename(path) and job["file"].startswith("steptimes_")
    assert [pt["step"] for pt in job["points"]] == [100, 200, 600]
    w0, w1, w2 = job["windows"]
    assert (w0["kind"], w1["kind"]) == ("scheduled", "triggered") and w1["trigger"]["slow_steps"] == [470, 499]
    assert w0["in_logdir"] and w1["in_logdir"] and not w2["in_logdir"]
    assert w0["change"] is None and w2["change"] is None and w2["verdict"] is None
    change = w1["change"]
    assert change["from"] == {"bottleneck": "device", "cause": "device_compute"}
    assert change["moved"] == {"category": "input", "from_pct": 3.0, "to_pct": 80.0}
    assert change["text"] == ("CPU-bound (input_preprocessing), was device-bound (device_compute) in window 0 "
                              "(steps 10-14); input 3% -> 80% of the step; step time 20 -> 95 ms; "
                              "grew: input 0.6 -> 76 ms per step")
    # The job's clock changed phase at window 1 (20.5 ms before it, 96 after): it is not said.
    assert change["job_step_ms"] is None and change["x"] == 4.75 and not change["same_verdict"]
    assert change["grew"] == [{"what": "category", "name": "input", "from_ms": 0.6, "to_ms": 76.0, "per": "step"}]
    # The same through TensorBoard's WSGI application.
    code, wsgi_body, _ = get_json(wsgi_client(p), "/data/plugin/bottleneck/trend?run=job")
    assert code == 200 and wsgi_body["runs"] == body["runs"]


@pytest.mark.parametrize("params, status", [({"run": "nope"}, 404), ({"run": "../x"}, 400), ({"run": ""}, 400),
                                            ({"run": "/abs"}, 400)])
def test_bad_runs_are_refused(logdir, params, status):
    p = make_plugin(logdir[0])
    with pytest.raises(RouteError) as err:
        p.trend_impl(params)
    assert err.value.status == status
    assert p.trend_impl({"run": "other"})[1]["runs"] == []


def test_unreadable_and_outside_files_do_not_hide_the_others(logdir, tmp_path):
    root, path = logdir
    folder = os.path.dirname(path)
    with open(os.path.join(folder, "steptimes_2000_01_01_00_00_00_h_1.json"), "w") as f:
        f.write("{not json")
    secret = tmp_path / "secret.json"
    secret.write_text(open(path).read())
    os.symlink(secret, os.path.join(folder, "steptimes_2099_01_01_00_00_00_h_2.json"))
    body = make_plugin(root).trend_impl({})[1]
    (run,) = body["runs"]
    assert [j["file"] for j in run["jobs"]] == [os.path.basename(path)]  # the link is not followed
    (problem,) = body["problems"]
    assert "steptimes_2000_01_01_00_00_00_h_1.json" in problem and "not JSON" in problem


def test_a_rewritten_file_is_read_again(logdir):
    root, path = logdir
    p = make_plugin(root)
    assert len(p.trend_impl({})[1]["runs"][0]["jobs"][0]["points"]) == 3
    with open(path) as f:
        data = json.load(f)
    data["points"].append(dict(data["points"][-1], step=700))
    time.sleep(0.01)  # a new modification time even on coarse clocks
    with open(path, "w") as f:
        json.dump(data, f)
    assert [pt["step"] for pt in p.trend_impl({})[1]["runs"][0]["jobs"][0]["points"]] == [100, 200, 600, 700]


def test_a_windows_job_clock_never_reaches_across_a_change_of_level(tmp_path):
    """A newcomer's custom loop: trend periods of 1000 steps, a scheduled window at steps
    10-14, and a slowdown the trigger confirmed from step 376 (captured at 436). The first
    period's mean (34.5 ms) mixes both levels, the next period is all slow (49 ms): neither is
    the window's level, so the window has no job-clock figure (the trace's 27.3 ms was once
    called 0.79x the job's and "profile later steps"). A later window inside the slow phase
    still gets the period it ran in; without the trigger's record nothing changes."""
    from tfbneck_plugin.capture.trend import level_breaks, window_entry
    points = [{"step": 1000, "first_step": 1, "n": 990, "mean_ms": 34.5, "p50_ms": 30.0},
              {"step": 2000, "first_step": 1001, "n": 1000, "mean_ms": 49.0, "p50_ms": 49.0},
              {"step": 3000, "first_step": 2001, "n": 990, "mean_ms": 50.0, "p50_ms": 50.0}]
    state = {"log": [{"event": "armed", "step": 35},
                     {"event": "run", "direction": "slower", "first_step": 120, "last_step": 130,
                      "confirmed_at_step": None, "outcome": "too short"},
                     {"event": "run", "direction": "slower", "first_step": 376, "last_step": 435,
                      "confirmed_at_step": 436, "outcome": "captured"}]}
    breaks = level_breaks(state)
    assert breaks == [376]
    early = window(0, "scheduled", (10, 14), "s0", report("device", "model_compute", 1.0, 27.3))
    late = window(1, "scheduled", (2500, 2504), "s1", report("cpu", "input_preprocessing", 30.0, 52.0))
    assert window_entry(early, points)["overhead"]["job_step_ms"] == 34.5      # as before: mixed levels
    assert window_entry(early, points, breaks)["overhead"] is None
    assert window_entry(late, points, breaks)["overhead"]["job_step_ms"] == 50.0
    assert level_breaks(None) == [] and level_breaks({"log": [{"event": "run", "first_step": "x"}]}) == []


def test_what_grew_puts_the_stage_first_under_an_input_verdict_and_names_a_cpus_model_compute():
    """A newcomer's fit: the verdict named the input, but the change line began "grew: device
    compute 28.7 -> 49.5 ms per step" (the model's ops, stretched by the cores the map took,
    on a CPU-only host). Under an input verdict the tf.data stage comes first, and the CPU's
    model math is not called device compute; under a model verdict the order stays."""
    from tfbneck_plugin.capture.trend import verdict_change

    def rep(cause, kind, step_ms, compute_pct, map_ms_per_call):
        r = report(kind, cause, 100 - compute_pct, step_ms)
        r["device_kind"] = "CPU"
        r["input_pipeline"] = {"stages": [{"name": "Iterator::Root::Prefetch::Map", "kind": "Map",
                                           "category": "compute", "calls": 10, "work_ms": 10 * map_ms_per_call}]}
        return r
    before = rep("model_compute", "device", 28.7, 100, 1.0)
    after = rep("input_preprocessing", "cpu", 55.0, 90, 9.0)
    text = verdict_change(0, (10, 14), before, after)["text"]
    grew = text.split("grew: ", 1)[1]
    assert grew.startswith("stage `Map (Iterator::Root::Prefetch::Map)` 1 -> 9 ms per call"), text
    assert "model compute on the CPU 28.7 -> 49.5 ms per step" in grew and "device compute" not in text
    model = verdict_change(0, (10, 14), before, dict(after, bottleneck="device", cause="model_compute"))["text"]
    assert model.split("grew: ", 1)[1].startswith("model compute on the CPU"), model


def test_the_change_line_heads_with_the_jobs_own_clock_where_known():
    """A newcomer's trend: "4.8x slower; step time 2.49 -> 11.9 ms in the trace, 4.47 -> 9.22 ms
    by the job's own clock": three ratios, and the headline the traced one, which carries the
    profiler's cost. Where the job's clock is known it heads the line, and each figure gives
    its own ratio; without it the traced ratio heads, as before."""
    from tfbneck_plugin.capture.trend import verdict_change
    before = report("cpu", "input_preprocessing", 60, 2.49)
    after = report("cpu", "input_preprocessing", 66, 11.9)
    change = verdict_change(0, (10, 14), before, after, job_ms=(4.47, 9.22))
    assert change["text"].startswith("CPU-bound (input_preprocessing) as in window 0 (steps 10-14), "
                                     "2.1x slower by the job's own clock; step time 2.49 -> 11.9 ms in the trace "
                                     "(4.8x), 4.47 -> 9.22 ms by the job's own clock (2.1x)"), change["text"]
    assert change["x"] == 4.78 and change["job_step_ms"] == [4.47, 9.22]
    faster = verdict_change(0, (10, 14), after, before, job_ms=(9.22, 4.47))["text"]
    assert ", 2.1x faster by the job's own clock; " in faster and "(0.21x), 9.22 -> 4.47 ms" in faster, faster
    traced = verdict_change(0, (10, 14), before, after)["text"]
    assert ", 4.8x slower; step time 2.49 -> 11.9 ms; " in traced, traced
