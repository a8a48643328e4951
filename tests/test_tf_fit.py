"""Real TensorFlow runs: Keras 3 and tf-keras fits profiled by the stock TensorBoard callback."""
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import HERE, tfbneck_cmd, xprof_input_pipeline

pytestmark = [pytest.mark.tf, pytest.mark.serial]  # verdicts from measured shares: run alone (tests/run.sh)
JOB = os.path.join(HERE, "tf_jobs", "heavy_map_fit.py")


def _need_tf():
    import importlib.util
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed (pip install '.[tensorflow]' in the tfbneck clone)")


def run_job(logdir, flavour):
    _need_tf()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if flavour == "tf_keras":
        env["TF_USE_LEGACY_KERAS"] = "1"
    r = subprocess.run([sys.executable, JOB, str(logdir), flavour], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-3000:]
    files = glob.glob(os.path.join(str(logdir), "**", "*.xplane.pb"), recursive=True)
    assert len(files) == 1
    return files[0]


def analyze(path):
    r = subprocess.run(tfbneck_cmd() + ["analyze", str(path), "--format", "json"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["sessions"][0]


def xprof_input_share(xplane, workdir):
    """XProf's own input-pipeline analysis of the same file: (input %, step count, conclusion)."""
    import re
    res = xprof_input_pipeline(xplane, workdir)
    conclusion = res["p"].get("input_conclusion", "")
    m = re.search(r"([0-9.]+)% of the total step time sampled is waiting for input", conclusion)
    return (float(m.group(1)) if m else None), res["rows"], conclusion


def test_keras3_heavy_map_is_cpu_input_preprocessing(tmp_path):
    logdir = tmp_path / "logdir"
    xplane = run_job(logdir, "keras3")
    assert os.sep + os.path.join("train", "plugins", "profile") in xplane  # Keras 3 layout
    s = analyze(logdir)
    assert s["run"] == "train"
    assert s["step_source"] == "keras_profiled_batch ('Profiled batch')"
    assert [i["step"] for i in s["steps"]["items"]] == [4, 5, 6, 7, 8, 9]  # batches 5..10, 0-based
    assert s["bottleneck"] == "cpu" and s["cause"] == "input_preprocessing"
    # The heavy map takes the largest share of the step (61 % here, 75 % beside a spinning
    # process, 47.6 % on a slow CI machine where the Python around each step slowed too).
    b = s["breakdown_pct"]
    assert max(b, key=b.get) == "input", b
    stage = s["input_pipeline"]["bottleneck_stage"]
    assert stage.split("::")[-1] in ("Map", "MapAndBatch", "ParallelMapV2")
    assert any(stage in e for e in s["evidence"])
    # Where XProf finds no step at all, we do.
    _, rows, conclusion = xprof_input_share(xplane, tmp_path / "xprof")
    assert rows == 0 and conclusion.startswith("No step time measured"), conclusion


def test_tf_keras_input_share_matches_xprof(tmp_path):
    logdir = tmp_path / "logdir"
    xplane = run_job(logdir, "tf_keras")
    s = analyze(logdir)
    assert s["run"] == "logdir"  # the run is the folder given: named after it
    assert s["step_source"] == "step_markers ('train')"
    ours = s["breakdown_pct"]["input"]
    theirs, rows, conclusion = xprof_input_share(xplane, tmp_path / "xprof")
    assert theirs is not None, conclusion
    assert rows == s["steps"]["count"]
    assert abs(ours - theirs) <= 5.0, (ours, theirs)
    assert s["bottleneck"] == "cpu"
