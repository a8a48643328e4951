"""Helpers for the TensorBoard plugin's tests: logdirs made of real traces (and of broken
files), a real ``tensorboard`` server process on a free port, headless Chromium, and for
the in-process tests an analyzer that records its calls plus request helpers with deadlines.

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
import threading
import time
import urllib.error
import urllib.request
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Dict, Optional, Tuple
from urllib.parse import quote

import pytest
from tensorboard.backend import application
from werkzeug.test import Client

from tfbneck_plugin.causes import CAUSES
from support import paths

REPO = Path(paths.ROOT).resolve()
TESTS = REPO / "tests"
ARTIFACTS = TESTS / "_artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
#: The shared folder (``$TFBNECK_SHARED``, else ``../shared``): real traces from public projects.
SHARED = Path(paths.SHARED)
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
        # A free port can be taken by another test's server between free_port() and
        # TensorBoard's bind: TensorBoard then exits, and the test starts it on another port.
        for attempt in range(3):
            if self._start():
                return self
            log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            if "already in use" not in log or attempt == 2:
                self._fail(f"tensorboard exited with status {self.proc.returncode if self.proc else None}")
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}{self.path_prefix}/"
        return self

    def _start(self) -> bool:
        """Starts TensorBoard; True once it answers on its port, False when it exited first.
        Raises (via :meth:`_fail`) when it did not answer within the timeout."""
        import http.client
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
                self._log.close()
                return False
            try:
                with urllib.request.urlopen(self.url + "data/plugins_listing", timeout=5) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, socket.timeout, http.client.HTTPException):
                pass  # not up yet, or another process answered on the port before it bound
            time.sleep(0.25)
        self._fail(f"tensorboard did not answer within {self.timeout_s:.0f} s")
        return False

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


def put_session(root: Path, run: str, session: str, hosts=("host0",), data: bytes = b"placeholder trace") -> Path:
    """A session folder ``<root>/<run>/plugins/profile/<session>/`` (``run`` "." is the
    logdir itself) holding ``<host>.xplane.pb`` with ``data`` for each host; returns it."""
    d = _session_dir(root if run == "." else root / run, session)
    for h in hosts:
        (d / f"{h}.xplane.pb").write_bytes(data)
    return d


#: A process id no Linux process can have: above PID_MAX_LIMIT (2**22, include/linux/threads.h),
#: so a staging window named after it belongs to a process that is not running.
DEAD_PID = 99999993

#: The ``error_kind`` of each case :func:`add_broken_sessions` makes (tfbneck_plugin/errors.py).
BROKEN_KINDS = {"corrupt": "corrupt", "empty": "empty_file", "not_xspace": "not_xspace", "skipped": "skipped",
                "legacy": "legacy_only", "incomplete": "incomplete"}


def add_broken_sessions(dest: Path, trace: bytes = b"\x0a\x80\x01 cut short") -> Dict[str, str]:
    """Sessions the analyzer must refuse politely, under ``dest/broken/``; returns {case:
    run name} for the cases of :data:`BROKEN_KINDS`.

    ``trace``: bytes of a real trace (cut to a third to make the corrupt case), or by default
    a protobuf whose first field runs past the end of the file.
    """
    cut = trace[: len(trace) // 3] + b"\xff\xff\xff" if len(trace) > 100 else trace
    (_session_dir(dest / "broken" / "corrupt", "2022_01_01_00_00_00") / "host1.xplane.pb").write_bytes(cut)
    (_session_dir(dest / "broken" / "empty", "2022_01_02_00_00_00") / "host1.xplane.pb").write_bytes(b"")
    # A protobuf that parses but holds no planes: only XSpace.hostnames (field 4).
    (_session_dir(dest / "broken" / "not_xspace", "2022_01_04_00_00_00") / "host1.xplane.pb").write_bytes(b'\x22\x02hi')
    (_session_dir(dest / "broken" / "skipped", "2022_01_03_00_00_00") / "tfbneck_skipped.json").write_text(
        json.dumps({"reason": "training ended at step 3, before the profiling window (steps 10-20)"}))
    with gzip.open(_session_dir(dest / "broken" / "legacy", "2020_06_01_00_00_00") / "old.trace.json.gz", "wt") as f:
        f.write('{"traceEvents": []}')
    # A window BottleneckProfiler never finished: its process is gone, its trace cut short.
    window = dest / "broken" / "incomplete" / ".tfbneck-staging" / f"{DEAD_PID}-1-window"
    window.mkdir(parents=True)
    (window / "vm.xplane.pb").write_bytes(trace[:100])
    return {case: f"broken/{case}" for case in BROKEN_KINDS}


def build_plugin_logdir(dest: Path, traces: Path) -> Dict[str, str]:
    """A logdir holding every case the tab must handle; returns {case: run name}.

    Real traces (from :func:`make_tf_traces`) in both Keras layouts, one with system
    metrics; a run named with HTML; and the sessions of :func:`add_broken_sessions` (a
    corrupt trace, an empty one, one that is not an XSpace, a skipped window, TF <= 2.10
    per-tool files only, a window the callback never finished).
    """
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("keras3", "tfkeras"):
        shutil.copytree(traces / name, dest / name)
    one_trace = next((traces / "tfkeras").glob("plugins/profile/*/*.xplane.pb"))
    # A run whose name is HTML (the '/' in '</script>' makes it two folders, as TensorBoard names runs).
    shutil.copy(one_trace, _session_dir(dest / SCRIPT_RUN, "2023_05_05_05_05_05") / "worker<b>0.xplane.pb")
    runs = {"keras3_before": "keras3/before/train", "keras3_after": "keras3/after/train", "tfkeras": "tfkeras",
            "script": SCRIPT_RUN}
    runs.update(add_broken_sessions(dest, one_trace.read_bytes()))
    return runs


def make_fake_logdir(tmp_path: Path) -> Path:
    """``tmp_path/logs`` with six sessions of placeholder traces (both Keras layouts, any
    depth, the logdir itself as a run, a run named 'slow' and one named with HTML), and a
    session next to it, outside the logdir, that no request may reach."""
    root = tmp_path / "logs"
    put_session(root, "keras3/train", "2024_03_01_10_00_00")                 # Keras 3 layout
    put_session(root, "tfkeras", "2024_03_02_10_00_00", hosts=("w0", "w1"))  # tf-keras layout, two hosts
    put_session(root, "deep/a/b/c/train", "2024_02_01_00_00_00")              # any depth
    put_session(root, ".", "2024_01_01_00_00_00")                             # the logdir itself is the run
    put_session(root, "slow", "2024_03_03_10_00_00")
    put_session(root, SCRIPT_RUN, "2024_03_04_10_00_00", hosts=("h<i>1",))
    put_session(tmp_path, "outside", "2024_01_01_00_00_00", data=b"secret outside the logdir")
    return root


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


# ----------------------------------------------------------------------------------------
# The plugin in-process: an analyzer that records its calls, requests through TensorBoard's WSGI app
# ----------------------------------------------------------------------------------------

PREFIX = "/data/plugin/bottleneck"
#: Longest the slow analysis computes if the test never releases it (seconds).
SLOW_MAX_S = 60.0
#: Slack added to a documented wait before a test calls it exceeded: thread start-up and
#: GIL hand-over on a loaded 2-core machine (tools/under-load) take well under a second.
LOADED_MARGIN_S = 5.0


class RecordingAnalyzer:
    """Stands in for ``analyze_session``: returns a small report and counts calls. For runs
    named 'slow*' it computes (pure Python, so it holds the GIL as a real analysis does)
    until ``release`` is set, at most SLOW_MAX_S seconds."""

    def __init__(self):
        self.calls, self.finished = [], []
        self.lock = threading.Lock()
        self.release = threading.Event()

    def __call__(self, session):
        with self.lock:
            self.calls.append((session.run, session.name, tuple(session.files)))
        if session.run.startswith("slow"):
            end, x = time.monotonic() + SLOW_MAX_S, 0
            while not self.release.is_set() and time.monotonic() < end:
                x += 1
        report = {"version": "test", "run": session.run, "session": session.name, "hosts": session.hosts,
                  "path": session.path, "status": "ok", "bottleneck": "cpu", "cause": "input_preprocessing",
                  "cause_text": CAUSES["input_preprocessing"].text, "confidence": 0.9,
                  "evidence": ["placeholder"], "files": list(session.files)}
        with self.lock:
            self.finished.append(session.run)
        return report

    def count(self, run):
        with self.lock:
            return sum(1 for c in self.calls if c[0] == run)

    def done(self, run):
        with self.lock:
            return run in self.finished


def wsgi_client(p):
    return Client(application.TensorBoardWSGI([p]))


def get_json(client, url):
    resp = client.get(url)
    return resp.status_code, json.loads(resp.get_data(as_text=True)), resp.headers


def report_url(run, session, prefix=PREFIX):
    return f"{prefix}/report?run={quote(run, safe='')}&session={quote(session, safe='')}"


def wait_report(p, run, session, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, body, source = p.report_impl({"run": run, "session": session}, wait_s=2.0)
        if code == 200:
            return body, source
    raise AssertionError(f"no report for {run}/{session} within {timeout} s")


def get_until_ready(client, url, timeout=120.0):
    """GET url through the WSGI client until it is no longer 202: (status, body, headers)."""
    deadline = time.monotonic() + timeout
    code, body, headers = get_json(client, url)
    while code == 202:
        assert headers["X-Tfbneck-Cache"] == "analysing"
        assert time.monotonic() < deadline, f"{url} still analysing after {timeout} s"
        time.sleep(0.02)
        code, body, headers = get_json(client, url)
    return code, body, headers


def wait_active(p, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not p.is_active():
        assert time.monotonic() < deadline, f"no session found within {timeout} s"
        time.sleep(0.05)


def scanned_listing(p, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        body = p.sessions_impl()[1]
        if body["scanned"]:
            return body
        assert time.monotonic() < deadline, f"the first scan did not finish within {timeout} s"


def js_fixed(value: float, digits: int) -> str:
    """`value.toFixed(digits)` as the tab's JavaScript writes it: the float's exact binary value, a
    tie rounded away from zero (ECMA-262 Number.prototype.toFixed), where Python's format rounds a
    tie such as 54.25 to even."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))
