"""Hostile places to write to and read from, found by an attack run: standard output full or
closed, a non-finite CI gate, cache entries that are pipes or device links, trend files with
NaN. Each gets one line and the right exit status, never a traceback or a hang."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from support.paths import DEMO_LOGS, ROOT

CLI = [sys.executable, "-m", "tfbneck_plugin.cli"]


def _run(args, tmp_path, **kw):
    env = dict(os.environ, PYTHONPATH=ROOT, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.pop("TFBNECK_CACHE_DIR", None)
    env.update(kw.pop("env", {}))
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(CLI + args, stderr=subprocess.PIPE, text=True, timeout=120, env=env, **kw)


@pytest.fixture
def logdir(tmp_path):
    dst = tmp_path / "logs" / "compute_bound"
    shutil.copytree(os.path.join(DEMO_LOGS, "compute_bound"), dst)
    return str(tmp_path / "logs")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_standard_output_full_is_one_line_and_exit_2(logdir, tmp_path):
    with open("/dev/full", "w") as full:
        out = _run(["analyze", logdir], tmp_path, stdout=full)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["tfbneck: standard output: cannot write the report "
                                               "(No space left on device)"]


def test_standard_output_closed_is_one_line_and_exit_2(logdir, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    out = subprocess.run(["bash", "-c", f"{sys.executable} -m tfbneck_plugin.cli analyze {logdir} >&-"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2
    assert "standard output is closed" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("pct", ["nan", "inf", "-5"])
def test_a_ci_gate_that_could_never_fail_is_refused(logdir, tmp_path, pct):
    out = _run(["compare", logdir, logdir, "--fail-if-slower", pct], tmp_path)
    assert out.returncode == 2 and "not a percentage" in out.stderr


@pytest.mark.parametrize("kind", ["fifo", "zero_link"])
def test_a_cache_entry_that_is_not_a_regular_file_is_a_miss(logdir, tmp_path, kind):
    first = _run(["analyze", logdir, "--format", "json"], tmp_path)
    assert first.returncode == 0
    entries = [os.path.join(d, n) for d, _, names in os.walk(tmp_path / "xdg") for n in names if n.endswith(".json")]
    assert entries
    for e in entries:
        os.unlink(e)
        if kind == "fifo":
            os.mkfifo(e)
        else:
            os.symlink("/dev/zero", e)
    again = _run(["analyze", logdir, "--format", "json"], tmp_path)  # a hang or an OOM would time out
    assert again.returncode == 0
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert a["sessions"][0]["bottleneck"] == b["sessions"][0]["bottleneck"]


def test_a_trend_file_with_nan_is_a_problem_not_a_number(logdir, tmp_path):
    from tfbneck_plugin.records import SidecarError, read_step_times
    path = tmp_path / "steptimes_x.json"
    path.write_text('{"format": "tfbneck.step_times", "points": [{"step": 1, "p50_ms": NaN}], "windows": []}')
    with pytest.raises(SidecarError, match="not JSON"):
        read_step_times(str(path))
