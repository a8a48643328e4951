"""Real TensorFlow runs (CPU, tiny models) for the step evidence that the first finders missed
(issue 11 kinds 2-3, issue 17 points 1-2): a Keras 3 fit profiled from its first batch
(warm-up), a custom loop with the user's own un-rooted step annotations around gradient
accumulation, graph-mode training (tf-keras with eager disabled, a tf.compat.v1.Session loop),
and a custom loop whose tf.function gets a Python int each step (retracing) beside the same
loop given a tensor. The jobs are tests/tf_jobs/step_kinds.py, one process per kind.

Expected values come from the jobs themselves (how many steps they ran, how they numbered
them, how many calls each step made) and are checked against the raw events of the trace.
"""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import HERE, ROOT, tfbneck_cmd

from tfbneck_plugin.analysis import host as hostmod
from tfbneck_plugin.analysis.odd_steps import MAX_ODD_SHARE
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.analysis.steps import find_steps
from tfbneck_plugin.logdir import find_sessions
from tfbneck_plugin.trace import tracefile

pytestmark = pytest.mark.tf
JOB = os.path.join(HERE, "tf_jobs", "step_kinds.py")
GRAPH_BUILD = "tf.function-graph_building"


def _run(kind, out, legacy_keras=False):
    import importlib.util
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed (pip install '.[tensorflow]' in the tfbneck clone)")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, JOB, kind, str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-3000:]
    return out


def _search(folder):
    files = glob.glob(os.path.join(str(folder), "**", "*.xplane.pb"), recursive=True)
    assert len(files) == 1, files
    space = tracefile.read_space(files[0])
    view = hostmod.host_view(space)
    return find_steps(space, view), view


def _report(folder):
    """The session report of the one session under ``folder`` (the real analyzer)."""
    (session,) = find_sessions(str(folder)).sessions
    return analyze_session(session)


def _events(view, name):
    """(starts, ends) of every event called ``name`` on the host plane, ps."""
    return view.intervals(view.select(view.ids_named([name])))


def _per_step(steps, starts):
    return np.searchsorted(np.sort(starts), steps.ends) - np.searchsorted(np.sort(starts), steps.starts)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each job once per module, on demand."""
    done = {}

    def get(kind):
        if kind not in done:
            done[kind] = _run(kind, tmp_path_factory.mktemp(kind), legacy_keras=kind == "graph_mode")
        return done[kind]
    return get


def test_keras3_fit_profiled_from_the_first_batch_flags_step_one_as_warmup(runs):
    """The stock TensorBoard(profile_batch=(1, 4)): batch 1 traces and instantiates the train
    function; it is warm-up, the three steps after it are not."""
    found, view = _search(runs("keras3_first_batch"))
    st = found.steps
    assert st.source == "keras_profiled_batch ('Profiled batch')"
    assert st.numbers.tolist() == [0, 1, 2, 3]  # Keras numbers batches from 0
    assert st.warmup.tolist() == [True, False, False, False]
    tracing = _events(view, GRAPH_BUILD)
    assert _per_step(st, tracing[0]).tolist()[1:] == [0, 0, 0]
    # Tracing alone is part of the step's graph building; instantiation adds to it.
    assert st.graph_build_ps[0] > int((tracing[1] - tracing[0]).max())
    assert (st.graph_build_ps[1:] == 0).all()
    reason = st.warmup_reason
    assert reason.startswith("step 0 is warm-up: graph building took ")
    assert f"`{GRAPH_BUILD}` of `multi_step_on_iterator`" in reason and "instantiation" in reason
    assert "the median step that built no graph" in reason
    # The report leaves the warm-up step out of the breakdown and the verdict, and says so.
    report = _report(runs("keras3_first_batch"))
    assert report["steps"]["count"] == 3 and [i["step"] for i in report["steps"]["items"]] == [1, 2, 3]
    assert report["steps"]["warmup"]["steps"] == [0] and report["steps"]["warmup"]["excluded"] is True
    # The steady steps' times are the ones reported: none is near the warm-up step's.
    assert report["steps"]["step_time_ms"]["max"] < report["steps"]["warmup"]["time_ms"] / 5
    assert any("warm-up step(s)" in e and "excluded" in e for e in report["evidence"])


def test_user_annotations_without_r_around_gradient_accumulation(runs):
    """Trace('batch_step', step_num=100 + i) around three calls of the gradient function."""
    folder = runs("grad_accum")
    found, view = _search(folder)
    st = found.steps
    assert st.source == "user_step_annotations ('batch_step')"
    assert st.numbers.tolist() == list(range(100, 112))
    annotations = _events(view, "batch_step")
    assert (st.starts == np.sort(annotations[0])).all() and (st.ends == np.sort(annotations[1])).all()
    calls = _events(view, "grads")  # the tf.function's own call events
    assert _per_step(st, calls[0]).tolist() == [3] * 12
    assert st.batches_per_step == 3
    assert any("3 function launches" in n for n in st.notes)
    assert not st.warmup.any() and (st.graph_build_ps == 0).all()  # traced before the profiler started
    # The report says where the steps came from.
    r = subprocess.run(tfbneck_cmd() + ["analyze", str(folder), "--format", "json"], capture_output=True,
                       text=True, timeout=300)
    s = json.loads(r.stdout)["sessions"][0]
    # Odd steps are left out of the report's steps and named: 12 in all. Beside other work more
    # than one can be odd (two of twelve in a whole-suite run), never more than the rule allows.
    outliers = ((s["steps"].get("outliers") or {}).get("steps")) or []
    assert s["step_source"] == "user_step_annotations ('batch_step')"
    assert s["steps"]["count"] + len(outliers) == 12 and len(outliers) <= int(MAX_ODD_SHARE * 12), outliers


@pytest.mark.parametrize("sub", ["fit", "session"])
def test_graph_mode_steps_are_session_runs(runs, sub):
    """tf-keras fit with eager disabled and a tf.compat.v1.Session loop: 16 batches each, one
    SessionRun per batch; step i runs from run i to run i+1, so the last run's step is dropped."""
    found, view = _search(os.path.join(str(runs("graph_mode")), sub))
    st = found.steps
    runs_ = _events(view, "SessionRun")
    assert len(runs_[0]) == 16
    assert st.source == "session_run"
    assert st.numbers.tolist() == list(range(15)) and st.dropped_partial == 1
    assert (st.starts == np.sort(runs_[0])[:-1]).all() and (st.ends == np.sort(runs_[0])[1:]).all()
    assert view.plane.lines[found.training_line].name.startswith("python")
    assert [f for f, _ in found.tried] == ["step_markers", "trace_context", "keras_profiled_batch",
                                           "user_step_annotations"]


def test_python_int_argument_retraces_every_step_tensor_argument_does_not(runs):
    folder = runs("retrace")
    py, _ = _search(os.path.join(str(folder), "python_int"))
    tensor, tview = _search(os.path.join(str(folder), "tensor"))
    py, tensor = py.steps, tensor.steps
    assert py.count == tensor.count == 12
    # A new Python value each call: a graph built in (nearly) every step, none of it warm-up.
    assert (py.graph_build_ps > 0).sum() >= 11
    assert not py.warmup.any() and py.warmup_reason is None
    # The same loop given a tensor traces once, in its first step: that step alone is warm-up.
    assert tensor.graph_build_ps[0] > 0 and (tensor.graph_build_ps[1:] == 0).all()
    assert _per_step(tensor, _events(tview, GRAPH_BUILD)[0]).tolist() == [1] + [0] * 11
    assert tensor.warmup.tolist() == [True] + [False] * 11
    assert "`train_step`" in tensor.warmup_reason
    # Side by side: retracing makes the steady step several times longer.
    assert np.median(py.durations_ps[1:]) > 3 * np.median(tensor.durations_ps[1:])
    # The verdicts: retracing for the Python int, not for the tensor.
    retraced = _report(os.path.join(str(folder), "python_int"))
    assert (retraced["bottleneck"], retraced["cause"]) == ("cpu", "retracing"), retraced["evidence"]
    assert retraced["recommendations"][0]["fix"] in ("tensor_arguments", "input_signature", "reduce_retracing")
    assert _report(os.path.join(str(folder), "tensor"))["cause"] != "retracing"
