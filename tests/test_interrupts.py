"""Training interrupted inside a profiling window (issue 22, point 3).

Real jobs (``tests/callback_jobs/interrupt_jobs.py``, one fresh interpreter each): a real
SIGINT (Python raises ``KeyboardInterrupt``) at step 10 of a window 5-30, in Keras 3's and
tf-keras' ``fit`` and inside a custom loop's ``profiler.step()``; then a second training
with a new ``BottleneckProfiler`` in the same process. The first window must be a session
marked interrupted that ``tfbneck analyze`` reads, TensorFlow's profiler must stop without
any further call (a notebook kernel after an interrupted cell), and the second window must
be profiled. The owner watch's own rules (:mod:`tfbneck_plugin.capture.interrupts`) and
the sidecar's ``interrupted`` record are tested without TensorFlow.
"""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from tfbneck_plugin.capture import interrupts
from tfbneck_plugin.records import SIDECAR_NAME, interrupted_window

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOBS = os.path.join(HERE, "callback_jobs", "interrupt_jobs.py")
TFBNECK = [sys.executable, "-m", "tfbneck_plugin.cli"]
MARKERS = "step_markers ('train')"


def run_job(scenario, out, **env_extra):
    env = dict(os.environ)
    env.pop("TF_USE_LEGACY_KERAS", None)
    env.pop("TF_DISABLE_PROFILING", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra)
    proc = subprocess.run([sys.executable, JOBS, scenario, str(out)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"job {scenario} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    with open(os.path.join(out, "result.json")) as f:
        return json.load(f)


def analyze(path):
    proc = subprocess.run(TFBNECK + ["analyze", str(path), "--format", "json"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["sessions"]


def check_interrupted_then_profiled(r, exception):
    """The first window: steps 5-9 kept, marked interrupted, analysable; the second profiled."""
    assert r["raised"] == "KeyboardInterrupt"
    (first,) = r["first"]
    # Step 10 was cut by the interrupt: the complete steps 5-9 are kept.
    assert first["status"] == "profiled" and first["closed_by"] == "interrupted"
    assert first["steps"] == [5, 9] and first["markers"] == [[s, s] for s in range(5, 10)]
    assert first["interrupted"]["steps_recorded"] == 5 and first["interrupted"]["markers_recorded"] == 5
    assert first["interrupted"]["exception"] == exception
    with open(os.path.join(first["session_dir"], SIDECAR_NAME)) as f:
        window = json.load(f)["window"]
    assert window["closed_by"] == "interrupted" and window["interrupted"] == first["interrupted"]
    (rep,) = analyze(first["session_dir"])
    assert rep["status"] == "ok" and rep["step_source"] == MARKERS
    assert rep["interrupted"] == first["interrupted"]
    assert any(w.startswith("profiling window interrupted") and "after 5 recorded steps" in w
               for w in rep["warnings"])
    (second,) = r["second"]
    assert second["status"] == "profiled" and second["closed_by"] == "completed" and second["steps"] == [3, 5]
    assert not any("another profiler" in w or "not profiled" in w for w in r["warnings"]), r["warnings"]
    assert sum("ended inside a profiling window of steps 5-30 after step 9" in w for w in r["warnings"]) == 1


@pytest.mark.tf
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_keyboard_interrupt_in_fit_closes_the_window_and_the_next_fit_profiles(tmp_path, flavour):
    env = {"TF_USE_LEGACY_KERAS": "1"} if flavour == "tf_keras" else {}
    r = run_job("fit_sigint", tmp_path, **env)
    assert r["keras"] == flavour
    # Nothing was called after the interrupt: the owner watch stopped the profiler.
    assert r["profiler_running_after_quiet"] is False
    check_interrupted_then_profiled(r, exception=None)  # fit does not show the exception to callbacks
    assert "fit was left" in r["first"][0]["interrupted"]["detected"]


@pytest.mark.tf
def test_next_fit_right_after_the_interrupt_takes_the_profiler_back(tmp_path):
    r = run_job("fit_sigint", tmp_path, JOB_QUIET_S="0")
    check_interrupted_then_profiled(r, exception=None)


@pytest.mark.tf
def test_keyboard_interrupt_inside_a_custom_loop_step(tmp_path):
    r = run_job("loop_sigint", tmp_path)
    # The exception passed through profiler.step(): closed there, before the job looked.
    assert r["profiler_running_at_once"] is False
    check_interrupted_then_profiled(r, exception="KeyboardInterrupt")
    assert r["first"][0]["interrupted"]["detected"] == "the exception left profiler.step()"


@pytest.mark.tf
def test_skip_message_names_our_own_window_holding_the_profiler(tmp_path):
    r = run_job("own_holder", tmp_path)
    (a,) = r["a"]
    (b,) = r["b"]
    assert a["status"] == "profiled" and a["steps"] == [3, 8]
    assert b["status"] == "skipped"
    log_a = os.path.join(str(tmp_path), "a")
    assert b["reason"] == (f"the profiler is held by this process' own BottleneckProfiler window 0 (steps 3-8, "
                           f"log_dir {log_a}), still open because the training that owns it is still running")
    assert "another profiler" not in b["reason"]


@pytest.mark.tf
def test_interrupt_inside_the_callbacks_own_close_does_not_leak_the_profiler(tmp_path):
    r = run_job("cut_close", tmp_path)
    assert r["raised"] == "KeyboardInterrupt" and r["profiler_running_after_cut"] is True
    (first,) = r["first"]
    assert first["status"] == "skipped" and first["reason"] == "the window's close was interrupted; its trace was dropped"
    (second,) = r["second"]
    assert second["status"] == "profiled" and second["steps"] == [3, 5]


# ----------------------------------------------------------------------------------------
# Without TensorFlow: the owner rules and the sidecar record
# ----------------------------------------------------------------------------------------

def test_fit_owner_is_gone_once_its_frame_left_the_stack():
    owners = {}

    def fit():  # named like Keras' method: fit_frame finds it above the callback's frame
        def on_train_begin():
            owners["fit"] = interrupts.Owner(interrupts.fit_frame(sys._getframe()), "fit")
            owners["inside"] = owners["fit"].gone()
        on_train_begin()
        owners["still_inside"] = owners["fit"].gone()

    fit()
    assert owners["fit"].frame.f_code.co_name == "fit"
    assert owners["inside"] is False and owners["still_inside"] is False
    assert owners["fit"].gone() is True
    assert interrupts.fit_frame(sys._getframe()) is None  # no fit above a test function


def test_loop_owner_waits_for_idle_steps_unless_asked_from_its_thread():
    def helper():  # a loop whose `with profiler.step()` sits in a helper that returns each step
        return interrupts.Owner(sys._getframe(), "loop")

    owner = helper()
    seen = {}
    t = threading.Thread(target=lambda: seen.update(other=owner.gone(strict=True)))
    t.start()
    t.join()
    assert owner.gone() is False and seen["other"] is False  # a step began just now
    assert owner.gone(strict=True) is True  # asked from the loop's own thread: the loop is not running
    owner.last_step = time.monotonic() - interrupts.LOOP_IDLE_S - 0.1
    assert owner.gone() is True


def test_interrupted_record_of_the_sidecar():
    rec = {"steps_recorded": 5, "markers_recorded": 5, "exception": "KeyboardInterrupt", "detected": "x"}
    assert interrupted_window({"window": {"closed_by": "interrupted", "interrupted": rec}}) == rec
    assert interrupted_window({"window": {"closed_by": "completed", "interrupted": None}}) is None
    assert interrupted_window({}) is None
    # An older callback's sidecar: interrupted, the counts it knew.
    old = interrupted_window({"window": {"closed_by": "interrupted", "markers": [[3, 3], [4, 4]]}})
    assert old == {"steps_recorded": None, "markers_recorded": 2, "exception": None, "detected": None}
    bad = interrupted_window({"window": {"closed_by": "interrupted", "interrupted": {"steps_recorded": "5"}}})
    assert bad["steps_recorded"] is None


def test_multiworker_job_profiled_repeatedly_is_warned_once_about_the_profiler_crash():
    from tfbneck_plugin.capture.job import from_tf_config, repeated_profiling_risk
    info = from_tf_config(json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}))
    assert repeated_profiling_risk(info, 1, False) is None      # one window: the README's advice
    assert repeated_profiling_risk(None, 2, True) is None       # not a multi-worker job
    for planned, triggered in ((2, False), (1, True)):
        text = repeated_profiling_risk(info, planned, triggered)
        assert text.startswith("this is worker worker:1 of a 2-worker job") and "docs/profiler_abort.md" in text
