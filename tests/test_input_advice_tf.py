"""Advice that fits the input the user wrote (issue 11, kind 5), on a real Keras 3 fit: a
PyDataset gets its own knobs (workers, use_multiprocessing, max_queue_size) or the move to
tf.data, never "add prefetch at the end of the pipeline", which a PyDataset cannot take."""
import os
import subprocess
import sys

import pytest

from support import labelled
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions
from support.paths import ROOT, TESTS

#: Timing and CPU-share assertions: run alone (tests/run.sh), never beside another TensorFlow job.
pytestmark = pytest.mark.serial

HERE = TESTS


@pytest.mark.tf
def test_pydataset_input_gets_pydataset_advice(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "tf_jobs", "pydataset_fit.py"), str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (session,) = find_sessions(str(tmp_path)).sessions
    report = analyze_session(session)
    stages = {s["kind"] for s in report["input_pipeline"]["stages"]}
    assert "Generator" in stages, stages  # Keras reads a PyDataset through Dataset.from_generator
    assert report["breakdown_pct"]["input"] >= 20.0, report["evidence"]
    # Computing in Python: the process is busy, unless other processes take the cores (then it
    # is contention); either way a CPU-side verdict, never storage.
    assert report["bottleneck"] == "cpu" and report["cause"] in ("input_preprocessing", "cpu_contention"), \
        report["evidence"]
    fixes = [rec["fix"] for rec in report["recommendations"]]
    assert "tfdata_ops" in fixes, fixes
    assert "prefetch" not in fixes and "parallel_reads" not in fixes, fixes
    first_input_fix = next(f for f in fixes if f != "free_cores")
    m = report["system_metrics"]
    if m["usable_cores"] - m["tree_cpu_cores"] - m["others_cpu_cores"] >= 0.5:  # idle cores: workers first
        assert first_input_fix == "pydataset_workers", fixes
    elif "pydataset_workers" not in fixes:  # no idle core (issue 23): capped, and the first fix says so
        assert "capped" in report["recommendations"][0]["why_here"], report["recommendations"][0]
    # Label the bottleneck only: whether the cause is the input's own work or contention depends
    # on the other processes of the moment.
    labelled.record("test_pydataset_input_gets_pydataset_advice", report, "cpu", None,
                    "a PyDataset computing numpy on one thread")


@pytest.mark.tf
@pytest.mark.parametrize("mode", ["tiny", "heavy"])
def test_replace_python_is_advised_only_when_python_does_most_of_the_stage(tmp_path, mode):
    """A map of TensorFlow ops that calls a py_function of microseconds per element is not a
    Python input: its py_function time is measured (``py_function_ms``) and "replace Python" is
    advised only when that time is at least half of the blocking stage's work."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "tf_jobs", "py_function_share.py"), str(tmp_path), mode],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (session,) = find_sessions(str(tmp_path)).sessions
    report = analyze_session(session)
    pipe = report["input_pipeline"]
    blocking = next(s for s in pipe["stages"] if s["name"] == pipe["busiest_stage"])
    share = pipe["py_function_ms"] / blocking["work_ms"]
    assert pipe["py_function_ms"] > 0, pipe
    assert (share >= 0.5) == (mode == "heavy"), (share, pipe)
    assert report["breakdown_pct"]["input"] >= 20.0, report["evidence"]
    fixes = [rec["fix"] for rec in report["recommendations"]]
    assert ("no_py_function" in fixes) == (mode == "heavy"), (fixes, report["cause"])
