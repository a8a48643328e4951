"""Helpers for the TensorBoard plugin's tests: logdirs made of real traces, a real
``tensorboard`` server process on a free port, headless Chromium.

Nothing here imports TensorFlow: real traces are made by ``plugin_trace_job.py`` in a
subprocess (and cached under ``tests/_artifacts/`` between runs).
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
ARTIFACTS = TESTS / "_artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
#: ``../shared`` beside the repository: real traces from public projects.
SHARED = REPO.parent / "shared"
REALTRACES = SHARED / "realtraces"
#: The shipped demo runs (TFBNECK_DEMO_LOGS points the demo browser test at another copy).
DEMO_LOGS = Path(os.environ.get("TFBNECK_DEMO_LOGS") or REPO / "demo_logs").resolve()
EXPECTED = DEMO_LOGS / "EXPECTED.json"
TRACE_JOB = TESTS / "plugin_trace_job.py"
SLOW_TENSORBOARD = TESTS / "plugin_slow_tensorboard.py"

#: A run name that is HTML: it must be shown as text, never run.
SCRIPT_RUN = "<script>window.__tfb_xss = 1</script>"

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


def chromium_path() -> Optional[str]:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tensorboard_command() -> list:
    script = Path(sys.executable).with_name("tensorboard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tensorboard.main"]


class TensorBoard:
    """A real ``tensorboard --logdir LOGDIR`` on a free port of 127.0.0.1.

    ``url`` is the TensorBoard root (with the path prefix, ending in ``/``). Use as a
    context manager; the log is kept in ``log_path`` and shown when start-up fails.
    """

    def __init__(self, logdir: str, cwd: Optional[str] = None, path_prefix: str = "", timeout_s: float = 120.0,
                 launcher: Optional[list] = None, env: Optional[Dict[str, str]] = None):
        self.logdir, self.cwd, self.path_prefix, self.timeout_s = logdir, cwd, path_prefix, timeout_s
        self.launcher, self.extra_env = launcher, env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}{path_prefix}/"
        self.proc: Optional[subprocess.Popen] = None
        self.log_path = Path(tempfile.mkdtemp(prefix="tfb-tb-log-")) / "tensorboard.log"

    def __enter__(self) -> "TensorBoard":
        cmd = (self.launcher or tensorboard_command()) + ["--logdir", self.logdir, "--port", str(self.port),
                                                         "--host", "127.0.0.1"]
        if self.path_prefix:
            cmd += ["--path_prefix", self.path_prefix]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", **self.extra_env)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.cwd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"tensorboard exited with status {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "data/plugins_listing", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.25)
        self._fail(f"tensorboard did not answer within {self.timeout_s:.0f} s")

    def _fail(self, why: str):
        log = self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""
        self.__exit__(None, None, None)
        raise RuntimeError(f"{why}; command log:\n{log}")

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        if getattr(self, "_log", None):
            self._log.close()

    def get(self, route: str, timeout: float = 30.0) -> Tuple[int, Dict[str, str], bytes]:
        """GET ``<root>data/plugin/bottleneck/<route>``: (status, headers, body)."""
        try:
            with urllib.request.urlopen(self.url + "data/plugin/bottleneck/" + route, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()


# ----------------------------------------------------------------------------------------
# Logdirs
# ----------------------------------------------------------------------------------------

def make_tf_traces() -> Path:
    """Real traces from ``plugin_trace_job.py`` (TensorFlow in a subprocess, ~15 s),
    cached under ``tests/_artifacts/tf_traces/<hash of the job>``. Skips the test when
    TensorFlow is not installed."""
    digest = hashlib.sha256(TRACE_JOB.read_bytes()).hexdigest()[:12]
    out = ARTIFACTS / "tf_traces" / digest
    if (out / "DONE").exists():
        return out
    probe = subprocess.run([sys.executable, "-c", "import tensorflow, keras, tf_keras"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("TensorFlow, Keras 3 and tf-keras are needed to make real traces (pip install -e .[test])")
    if out.exists():
        shutil.rmtree(out)
    tmp = Path(tempfile.mkdtemp(prefix="tfb-traces-", dir=ARTIFACTS if ARTIFACTS.exists() else None))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    res = subprocess.run([sys.executable, str(TRACE_JOB), str(tmp)], capture_output=True, text=True, env=env, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"plugin_trace_job.py failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")
    (tmp / "DONE").write_text("ok\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
    return out


def _session_dir(run_dir: Path, name: str) -> Path:
    d = run_dir / "plugins" / "profile" / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def build_plugin_logdir(dest: Path, traces: Path) -> Dict[str, str]:
    """A logdir holding every case the tab must handle; returns {case: run name}.

    Real traces (from :func:`make_tf_traces`) in both Keras layouts, one with system
    metrics; a run named with HTML; a corrupt trace; an empty trace; a session whose
    window was skipped; a session with only TF <= 2.10 per-tool files; a window the callback
    never finished.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("keras3", "tfkeras"):
        shutil.copytree(traces / name, dest / name)
    one_trace = next((traces / "tfkeras").glob("plugins/profile/*/*.xplane.pb"))
    # A run whose name is HTML (the '/' in '</script>' makes it two folders, as TensorBoard names runs).
    shutil.copy(one_trace, _session_dir(dest / SCRIPT_RUN, "2023_05_05_05_05_05") / "worker<b>0.xplane.pb")
    # A corrupt trace: a protobuf cut short.
    data = one_trace.read_bytes()
    (_session_dir(dest / "broken" / "corrupt", "2022_01_01_00_00_00") / "host1.xplane.pb").write_bytes(data[: len(data) // 3] + b"\xff\xff\xff")
    (_session_dir(dest / "broken" / "empty", "2022_01_02_00_00_00") / "host1.xplane.pb").write_bytes(b"")
    (_session_dir(dest / "broken" / "skipped", "2022_01_03_00_00_00") / "tfbneck_skipped.json").write_text(
        json.dumps({"reason": "training ended at step 3, before the profiling window (steps 10-20)"}))
    with gzip.open(_session_dir(dest / "broken" / "legacy", "2020_06_01_00_00_00") / "old.trace.json.gz", "wt") as f:
        f.write('{"traceEvents": []}')
    runs = {"keras3_before": "keras3/before/train", "keras3_after": "keras3/after/train", "tfkeras": "tfkeras",
            "script": SCRIPT_RUN, "corrupt": "broken/corrupt", "empty": "broken/empty", "skipped": "broken/skipped",
            "legacy": "broken/legacy"}
    # A window BottleneckProfiler never finished (its process died: a pid above pid_max).
    window = dest / "broken" / "incomplete" / ".tfbneck-staging" / "99999993-1-window"
    window.mkdir(parents=True)
    (window / "vm.xplane.pb").write_bytes(data[:100])
    from tfbneck_plugin.logdir import find_sessions
    if any(getattr(s, "incomplete", False) for s in find_sessions(str(dest)).sessions):
        runs["incomplete"] = "broken/incomplete"
    else:  # an analyzer without staging windows
        shutil.rmtree(dest / "broken" / "incomplete")
    return runs


def snapshot_tree(root: Path) -> Dict[str, Tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of every file and folder under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size if n in filenames else 0, st.st_mtime_ns)
    return out


# ----------------------------------------------------------------------------------------
# Browser
# ----------------------------------------------------------------------------------------

@contextlib.contextmanager
def chromium_context(viewport=(1440, 1000)):
    """A Playwright persistent context on Debian's Chromium with a fresh profile. Skips
    the test when Playwright or Chromium is missing."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")
    exe = chromium_path()
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; tests/run.sh does it)")
    profile = tempfile.mkdtemp(prefix="tfb-chromium-")
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=exe, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": viewport[0], "height": viewport[1]})
        try:
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


def screenshot(page, name: str, full_page: bool = False) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
