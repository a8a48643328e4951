"""The Keras callback on the TensorFlow installed: in the lowest-versions job that is the
floor setup.py declares for the ``[tensorflow]`` extra (tests/run_min_versions.sh), in the
main job the newest release. A plain ``fit`` with ``profile_steps=(3, 5)`` must give a
window whose analysis finds exactly steps 3, 4 and 5 (TensorFlow 2.12-2.15 gave only step 3,
which is why the floor is 2.16.1)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import HERE, ROOT, tfbneck_cmd

pytestmark = pytest.mark.tf
JOB = os.path.join(HERE, "tf_jobs", "floor_fit.py")


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_fit_window_finds_steps_3_to_5(tmp_path, flavour):
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed (pip install '.[tensorflow]' in the tfbneck clone)")
    if flavour == "tf_keras" and importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf-keras is not installed (pip install '.[tensorflow]' in the tfbneck clone)")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1" if flavour == "tf_keras" else "0")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, JOB, str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["legacy"] == (flavour == "tf_keras")
    assert result["windows"] == ["profiled"], result
    a = subprocess.run(tfbneck_cmd() + ["analyze", str(tmp_path / "logs"), "--format", "json"], capture_output=True,
                       text=True, timeout=300)
    assert a.returncode == 0, a.stderr
    (s,) = json.loads(a.stdout)["sessions"]
    assert s["status"] == "ok"
    assert s["step_source"].startswith("step_markers")
    assert [i["step"] for i in s["steps"]["items"]] == [3, 4, 5], (result, s["steps"])
    assert s["system_metrics"], "the window's sidecar was not read"
