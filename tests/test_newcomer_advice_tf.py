"""Advice wording a newcomer's tutorial-style Keras runs showed wrong, on real Keras 3 fits
(tests/tf_jobs/): each job is run here and its session analysed as the CLI does."""
import os
import subprocess
import sys

import pytest

from support.paths import ROOT, TESTS
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions

#: Real TensorFlow fits: run alone (tests/run.sh), never beside another TensorFlow job.
pytestmark = pytest.mark.serial


def _run(job, logs, *args):
    """Runs ``tests/tf_jobs/<job>`` with ``logs`` and ``args``; returns its completed process."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    r = subprocess.run([sys.executable, os.path.join(TESTS, "tf_jobs", job), str(logs), *args], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-3000:]
    return r


def _report(logs):
    (session,) = find_sessions(str(logs)).sessions
    return analyze_session(session)


@pytest.mark.tf
def test_augmentation_after_a_cache_is_not_advised_a_cache(tmp_path):
    """cache().shuffle() of the whole epoch, then a parallel map of augmentation layers: the
    profiled steps call nothing below the shuffle, so the cache is not in the trace: the advice
    never says the pipeline has no cache, and a cache advised says that it may be there."""
    _run("cached_augment_fit.py", tmp_path)
    report = _report(tmp_path)
    fixes = [r["fix"] for r in report["recommendations"]]
    text = " ".join(str(r.get(k)) for r in report["recommendations"] for k in ("title", "detail", "why_here"))
    assert "no cache()" not in text, (report["cause"], fixes, text)
    for r in report["recommendations"]:
        if r["fix"] == "cache":
            assert "whether the pipeline already caches is not in the trace" in r["why_here"], r
