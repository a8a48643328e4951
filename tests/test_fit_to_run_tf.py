"""Issue 23, acceptance 3, on real Keras 3 fits (tests/tf_jobs/fit_to_run_jobs.py): advice
reads what the run already does. A PyDataset whose worker processes keep the cores busy does
not get "more workers" first; one whose worker waits with the cores idle does. A map already
run on whole batches does not get "vectorise" (the same map per element does); a model
compiled with jit_compile=True does not get XLA (the same model without it does, when its
math is the limit)."""
import os
import subprocess
import sys

import pytest

from conftest import SHARED, need_shared
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions

#: Timing and CPU-share assertions: run alone (tests/run.sh), never beside another TensorFlow job.
pytestmark = pytest.mark.serial

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOBS = ("pyds_saturated", "pyds_waiting", "pyds_threads", "vectorised", "per_element", "jit", "nojit")


def _run_jobs(logs, jobs, prefix=()):
    """Runs ``jobs`` (names from :data:`JOBS`) in one interpreter, after ``prefix`` (a command
    that runs the rest, e.g. under-load); returns {job: report}."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    r = subprocess.run(list(prefix) + [sys.executable, os.path.join(HERE, "tf_jobs", "fit_to_run_jobs.py"),
                                       str(logs), ",".join(jobs)], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-3000:]
    out = {}
    for job in jobs:
        (session,) = find_sessions(str(logs / job)).sessions
        out[job] = analyze_session(session)
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return _run_jobs(tmp_path_factory.mktemp("fit_to_run"), JOBS)


def _seen(report):
    """What a failure message needs: the verdict, the sampled cores and the advice."""
    keys = ("usable_cores", "tree_cpu_cores", "others_cpu_cores", "tree_runq_wait_cores", "tree_children", "pool_threads")
    return {"verdict": (report["bottleneck"], report["cause"]), "input_pct": report["breakdown_pct"]["input"],
            "system": {k: report["system_metrics"].get(k) for k in keys}, "fixes": _fixes(report)}


def _fixes(report):
    return [r["fix"] for r in report["recommendations"]]


@pytest.mark.tf
def test_saturated_multiprocess_pydataset_does_not_get_more_workers_first(reports):
    s = reports["pyds_saturated"]
    assert s["system_metrics"]["tree_children"] >= 2  # the worker processes were seen
    fixes = _fixes(s)
    assert fixes and fixes[0] != "pydataset_workers", (fixes, s["evidence"])
    for r in s["recommendations"]:
        assert r["why_here"].endswith(".")


@pytest.mark.tf
def test_waiting_pydataset_gets_more_workers_first_where_cores_are_idle(reports):
    """With idle cores, more workers come first; on a machine other processes keep busy (no
    idle core: the state the sampler measured, both outcomes asserted) they are capped, and
    the first recommendation says so."""
    s = reports["pyds_waiting"]
    fixes = _fixes(s)
    m = s["system_metrics"]
    idle = m["usable_cores"] - m["tree_cpu_cores"] - m["others_cpu_cores"]
    if idle >= 0.5:
        assert fixes[0] == "pydataset_workers", (fixes, s["evidence"])
        p = s["recommendations"][0]["predicted"]
        assert p["speedup"] > 1.2 and p["range_ms"][0] <= p["time_per_batch_ms"] <= p["range_ms"][1]
    elif "pydataset_workers" not in fixes:
        assert "capped" in s["recommendations"][0]["why_here"], s["recommendations"][0]


@pytest.mark.tf
def test_waiting_pydataset_advice_is_threads_and_eight_threads_already_running_are_seen(reports):
    """The waiting PyDataset's snippet runs its workers as threads; the run that already has 8
    worker threads (threads of the training process, not child processes) is not told to add
    workers."""
    waiting = next((r for r in reports["pyds_waiting"]["recommendations"] if r["fix"] == "pydataset_workers"), None)
    if waiting is not None:
        assert "use_multiprocessing=False" in waiting["code"], (waiting["code"], _seen(reports["pyds_waiting"]))
    s = reports["pyds_threads"]
    assert s["system_metrics"]["pool_threads"] == 8, s["system_metrics"]
    assert s["system_metrics"]["tree_children"] == 0
    assert "pydataset_workers" not in _fixes(s), (s["recommendations"], s["evidence"])


@pytest.mark.tf
def test_waiting_pydataset_on_a_busy_machine_still_gets_threads(tmp_path):
    """The same waiting PyDataset with a process spinning on one of the cores
    (``under-load -j 1``): its threads wait for the scheduler beside an idle core, which is
    not computing; where more workers are advised, they are threads."""
    prefix = (need_shared(os.path.join(SHARED, "tools", "under-load"), "tools/under-load"), "-j", "1")
    report = _run_jobs(tmp_path, ("pyds_waiting",), prefix)["pyds_waiting"]
    waiting = next((r for r in report["recommendations"] if r["fix"] == "pydataset_workers"), None)
    assert waiting is not None and "use_multiprocessing=False" in waiting["code"], _seen(report)


@pytest.mark.tf
def test_vectorised_map_does_not_get_vectorise_and_per_element_map_does(reports):
    assert "vectorise_map" not in _fixes(reports["vectorised"]), reports["vectorised"]["evidence"]
    per_element = reports["per_element"]
    assert "MapAndBatch" in {st["kind"] for st in per_element["input_pipeline"]["stages"]}
    # The input-side verdicts carry the input advice; on a machine loaded enough that Python
    # overhead dominates the step instead, there is no input advice to check.
    if per_element["cause"] in ("input_preprocessing", "cpu_contention"):
        assert "vectorise_map" in _fixes(per_element), per_element["recommendations"]


@pytest.mark.tf
def test_jit_compiled_model_does_not_get_xla(reports):
    assert "xla" not in _fixes(reports["jit"]), reports["jit"]["recommendations"]
    nojit = reports["nojit"]
    if nojit["cause"] == "model_compute":  # the verdict that recommends XLA on a CPU host
        assert "xla" in _fixes(nojit)
