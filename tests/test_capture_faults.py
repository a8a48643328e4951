"""Faults during capture (issue 7): the training process killed inside a profiling window,
the disk full (or a file-size limit hit) while the trace or the sidecar is written, the
sampler thread raising, and readers polling while windows are written.

Every case is a real Keras 3 ``fit`` in a fresh interpreter (``tests/callback_jobs/fault_jobs.py``):
two processes are SIGKILLed at chosen points inside a window, one more runs the other faults one
after the other while a reader thread here parses every JSON record it sees. The tests then
read the files and ``tfbneck analyze``'s JSON. Each test records what it observed; a complete
run rewrites ``docs/capture_faults.md`` (deterministic: paths, pids, host and times are
replaced by placeholders, so the file changes only when a behaviour changes).

Disk full is a real full tmpfs (mounted here; needs root, skipped with the reason otherwise)
and, everywhere, ``RLIMIT_FSIZE`` (writes past the limit fail with EFBIG, SIGXFSZ ignored).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tfbneck_plugin import logdir
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions
from tfbneck_plugin.records import SIDECAR_NAME, SKIPPED_NAME, STAGING_DIR, write_sidecar

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FAULT_JOBS = os.path.join(HERE, "callback_jobs", "fault_jobs.py")
TFBNECK = [sys.executable, "-m", "tfbneck_plugin.cli"]
TABLE = os.path.join(ROOT, "docs", "capture_faults.md")
MARKERS = "step_markers ('train')"
HOST = socket.gethostname()

# ----------------------------------------------------------------------------------------
# The table: one row per case, written when every row was observed
# ----------------------------------------------------------------------------------------

ROWS = [
    ("killed_in_step", "Training process killed inside a window",
     "SIGKILL during step 5 of the window 3-6 (the job signals from inside the step, then waits)"),
    ("killed_saving", "Training process killed while the window is saved",
     "SIGKILL after the trace was exported to the staging folder, while the sidecar's JSON is "
     "half written (the encoder stalls after 64 KiB)"),
    ("later_run", "A later run in the same log_dir",
     "a new `fit` with a new callback (steps 3-5) in the log_dir of the first kill"),
    ("trace_efbig", "Trace write fails: file-size limit",
     "`RLIMIT_FSIZE` 8 KiB (EFBIG) during steps 1-6, windows 3-5 and 8-9, limit lifted at step 7"),
    ("trace_enospc", "Trace write fails: disk full",
     "8 MiB tmpfs as log_dir, filled during step 5 (inside the window 3-5), freed at step 7; windows 3-5 and 8-9"),
    ("record_efbig", "Nothing about the window can be written",
     "`RLIMIT_FSIZE` 100 bytes (below the skip record's size) during steps 1-6, windows 3-5 and 8-9"),
    ("full_from_start", "Disk full before training starts",
     "tmpfs filled before `fit`, freed after it; windows 3-5 and 8-9"),
    ("sidecar_efbig", "Sidecar write fails: file-size limit",
     "`RLIMIT_FSIZE` 128 bytes (EFBIG) while the sidecar of the window 3-5 is written"),
    ("sidecar_enospc", "Sidecar write fails: disk full",
     "tmpfs filled just before the sidecar of the window 3-5 is written"),
    ("sampler_midway", "Sampler thread raises",
     "`SystemSampler._take` (one call per sample) raises on its 3rd call, inside the window 3-5 "
     "(sampling every 20 ms)"),
    ("sampler_no_start", "Sampler cannot start",
     "`SystemSampler.start` raises (as when no thread can be created)"),
    ("atomic", "Reader polling while windows are written",
     "a thread here stats every `tfbneck_system_metrics.json` / `tfbneck_skipped.json` under the jobs' "
     "folders every 5 ms and parses each new version, while the jobs above and 6 more windows (sampled every "
     "10 ms) are written"),
    ("torn_control", "Control for the reader: a non-atomic writer",
     "the same reader against a sidecar written in place in two halves 0.2 s apart, and against "
     "`write_sidecar` stalled for 0.2 s in the middle of its JSON"),
    ("live_window", "Staging folder of a window still being recorded",
     "a staging folder whose record names a live process on this host, a dead one, another host; "
     "one without a record"),
    ("remote_staging", "Leftover staging folder in a log_dir copied to object storage",
     "a log_dir holding a dead process' staging folder (record + partial trace) copied to `memory://` "
     "(fsspec) and analysed from there"),
]
OBSERVED = {}


def observe(key, text):
    assert key in dict((k, 1) for k, _, _ in ROWS), key
    OBSERVED[key] = text


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_table():
    lines = [
        "# Faults during capture: what BottleneckProfiler and `tfbneck analyze` do",
        "",
        "Generated by `tests/test_capture_faults.py` from what its runs observed; do not edit by hand.",
        "`python -m pytest tests/test_capture_faults.py -q` rewrites it after a complete run. Each case is a",
        "real Keras 3 `fit` (2 epochs of 6 batches, or a slowed `tf.data` pipeline for the sampler cases) in",
        "its own process; training results are compared with the same `fit` without the callback. In",
        "messages, `LOG_DIR` is the callback's log_dir, `PID`, `HOST`, `TIMESTAMP` and `ID` stand for the",
        "process id, host name, session time and random suffix.",
        "",
        "A window is recorded in `LOG_DIR/.tfbneck-staging/PID-N-ID/`, which holds from the start a record",
        "saying the window is incomplete; only the finished session folder (trace + sidecar) is moved into",
        "`LOG_DIR/plugins/profile/`. `tfbneck analyze` lists a staging folder left by a process that is gone",
        "as a session with `status: error` (\"incomplete profiling window\") and never reads its partial files.",
        "A sampler that fails on every call is covered by `tests/test_callback.py`",
        "(`test_sampler_failure_keeps_the_trace_and_says_so`).",
        "",
        "| fault | how the test makes it | observed |",
        "|---|---|---|",
    ]
    lines += [f"| {_cell(title)} | {_cell(how)} | {_cell(OBSERVED[key])} |" for key, title, how in ROWS]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module", autouse=True)
def write_table():
    yield
    if all(key in OBSERVED for key, _, _ in ROWS):
        text = render_table()
        try:
            with open(TABLE, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = None
        if text != old:
            os.makedirs(os.path.dirname(TABLE), exist_ok=True)
            with open(TABLE, "w", encoding="utf-8") as f:
                f.write(text)


def norm(text, log_dir=None):
    """A message with its run-specific parts replaced by placeholders."""
    text = str(text)
    if log_dir:
        text = text.replace(log_dir, "LOG_DIR")
    text = re.sub(rf"pid \d+ on {re.escape(HOST)}\b", "pid PID on HOST", text)
    text = re.sub(rf"{re.escape(STAGING_DIR)}/\d+-(\d+)-[0-9a-f]+", rf"{STAGING_DIR}/PID-\1-ID", text)
    text = re.sub(r"\d{4}(_\d\d){5}", "TIMESTAMP", text)
    text = re.sub(rf"/{re.escape(HOST)}\.xplane\.pb", "/HOST.xplane.pb", text)
    return text


# ----------------------------------------------------------------------------------------
# Running the jobs
# ----------------------------------------------------------------------------------------

def _env(extra=None):
    env = dict(os.environ)
    env.pop("TF_USE_LEGACY_KERAS", None)
    env.pop("TF_DISABLE_PROFILING", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def _start(scenario, out, extra=None):
    os.makedirs(out, exist_ok=True)
    log = open(os.path.join(out, "job.log"), "w")
    proc = subprocess.Popen([sys.executable, FAULT_JOBS, scenario, out], env=_env(extra), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    return proc


def _log_tail(out):
    with open(os.path.join(out, "job.log"), errors="replace") as f:
        return f.read()[-6000:]


def _kill_when_ready(proc, out, timeout=240):
    """Wait for the job's ready.json, then SIGKILL it; returns what the job said."""
    ready = os.path.join(out, "ready.json")
    deadline = time.monotonic() + timeout
    while not os.path.exists(ready):
        if proc.poll() is not None:
            pytest.fail(f"job {out} exited ({proc.returncode}) before reaching the kill point:\n{_log_tail(out)}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"job {out} did not reach the kill point in {timeout} s:\n{_log_tail(out)}")
        time.sleep(0.05)
    with open(ready) as f:
        info = json.load(f)
    assert proc.poll() is None, "the job must still be running inside the window"
    os.kill(proc.pid, signal.SIGKILL)
    info["returncode"] = proc.wait()
    return info


def _snapshot(folder):
    """Relative path -> size of every file under ``folder``."""
    out = {}
    for dirpath, _dirs, files in os.walk(folder):
        for n in files:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, folder)] = os.path.getsize(p)
    return out


def cli_json(*paths):
    proc = subprocess.run(TFBNECK + ["analyze", *map(str, paths), "--format", "json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, env=_env())
    return {"rc": proc.returncode, "report": json.loads(proc.stdout) if proc.stdout.strip() else None,
            "stderr": proc.stderr}


class Reader(threading.Thread):
    """Polls ``root`` every ``interval`` s: parses every new version of every sidecar /
    skipped record (new inode, size or mtime), and notes session folders in
    ``plugins/profile`` listed with a trace but without a sidecar, and trace sizes when first seen."""

    def __init__(self, root, interval=0.005):
        super().__init__(name="capture-faults-reader", daemon=True)
        self.root, self.interval = root, interval
        self.halt = threading.Event()
        self.reads, self.files, self.invalid, self.errors = 0, set(), [], []
        self.trace_without_sidecar, self.trace_sizes = set(), {}
        self._seen = {}

    def run(self):
        try:
            while not self.halt.is_set():
                self.poll()
                time.sleep(self.interval)
            self.poll()
        except Exception as err:  # reported by the tests
            self.errors.append(repr(err))

    def stop(self):
        self.halt.set()
        self.join(30)

    def poll(self):
        for dirpath, _dirs, files in os.walk(self.root):
            for n in files:
                p = os.path.join(dirpath, n)
                if n in (SIDECAR_NAME, SKIPPED_NAME):
                    self._read(p)
            parent = os.path.dirname(dirpath)
            published = (os.path.basename(parent) == "profile" and STAGING_DIR not in dirpath
                         and os.path.basename(os.path.dirname(parent)) == "plugins")
            traces = [os.path.join(dirpath, n) for n in files if n.endswith(".xplane.pb")]
            if published and traces:
                if SIDECAR_NAME not in files:
                    self.trace_without_sidecar.add(dirpath)
                for p in traces:
                    try:
                        self.trace_sizes.setdefault(p, os.path.getsize(p))
                    except FileNotFoundError:
                        pass

    def _read(self, path):
        try:
            st = os.stat(path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self._seen.get(path) == key:
                return
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:  # the staging folder went away meanwhile
            return
        self._seen[path] = key
        self.reads += 1
        self.files.add(path)
        try:
            json.loads(raw.decode("utf-8"))
        except ValueError as err:
            self.invalid.append((path, len(raw), type(err).__name__))


# ----------------------------------------------------------------------------------------
# The module fixture: both kills, then the fault job, a reader all along
# ----------------------------------------------------------------------------------------

def _mount_tmpfs(where):
    """Mount an 8 MiB tmpfs at ``where``; returns None or why it cannot be done."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not running as root: cannot mount a tmpfs"
    if not shutil.which("mount"):
        return "no mount command"
    os.makedirs(where, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", where], capture_output=True, text=True)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        return f"mount -t tmpfs failed ({said[-1] if said else f'exit status {proc.returncode}'})"
    return None


def _umount(where):
    if subprocess.run(["umount", where], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", where], capture_output=True)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("capture_faults"))
    disk = os.path.join(root, "disk_full")
    tmpfs_problem = _mount_tmpfs(disk)
    reader = Reader(root)
    reader.start()
    procs = {}
    try:
        out = {"root": root, "tmpfs": None if tmpfs_problem else disk, "tmpfs_problem": tmpfs_problem}
        kills = {name: os.path.join(root, name) for name in ("killed_in_step", "killed_saving")}
        procs.update({name: _start(name, path) for name, path in kills.items()})
        for name, path in kills.items():
            out[name] = _kill_when_ready(procs[name], path)
            out[name]["files"] = _snapshot(os.path.join(path, "logs"))
            out[name]["log_dir"] = os.path.join(path, "logs")
        out["after_kill"] = cli_json(*kills.values())

        faults_dir = os.path.join(root, "faults")
        extra = {"FAULT_KILLED_LOG": out["killed_in_step"]["log_dir"]}
        if out["tmpfs"]:
            extra["FAULT_TMPFS"] = disk
        proc = procs["faults"] = _start("faults", faults_dir, extra)
        try:
            rc = proc.wait(timeout=400)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the fault job did not finish in 400 s:\n{_log_tail(faults_dir)}")
        assert rc == 0, f"fault job failed ({rc}):\n{_log_tail(faults_dir)}"
        with open(os.path.join(faults_dir, "result.json")) as f:
            out["faults"] = json.load(f)
        reader.stop()
        out["reader"] = reader
        out["final"] = cli_json(root)
        yield out
    finally:
        for proc in procs.values():  # a job left running by a failure above
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.stop()
        if not tmpfs_problem:
            _umount(disk)


def sessions_of(report, run):
    return [s for s in report["sessions"] if s["run"] == run]


def _no_traceback(cli):
    assert "Traceback" not in cli["stderr"], cli["stderr"][-3000:]


def _incomplete_error(sess, steps):
    assert sess["status"] == "error" and sess["hosts"] == [], sess
    assert os.path.basename(os.path.dirname(sess["path"])) == STAGING_DIR
    assert sess["error"].startswith(sess["path"] + ": incomplete profiling window: the training process (pid ")
    assert f"stopped inside the window of steps {steps} before its trace was saved" in sess["error"]
    assert sess["incomplete"] in sess["error"] and "files left in this folder are partial" in sess["incomplete"]


# ----------------------------------------------------------------------------------------
# Killed inside a window
# ----------------------------------------------------------------------------------------

@pytest.mark.tf
def test_process_killed_inside_a_window_is_reported_as_an_incomplete_window(capture):
    k = capture["killed_in_step"]
    assert k["returncode"] == -signal.SIGKILL
    (staging_name,) = k["staging"]
    # Nothing was published; the staging folder holds the window's record only.
    assert list(k["files"]) == [os.path.join(STAGING_DIR, staging_name, SKIPPED_NAME)], k["files"]
    cli = capture["after_kill"]
    _no_traceback(cli)
    assert cli["rc"] == 1, "a failed session makes the exit status 1"
    (sess,) = [s for s in cli["report"]["sessions"] if s["path"].startswith(k["log_dir"] + os.sep)]
    _incomplete_error(sess, "3-6")
    assert f"pid {k['pid']} on {HOST}" in sess["error"]
    assert sess["path"] == os.path.join(k["log_dir"], STAGING_DIR, staging_name)
    assert f"tfbneck: error: {sess['error']}" in cli["stderr"]
    # The same through the library (the later run's session is there too by now).
    (s,) = [s for s in find_sessions(k["log_dir"]).sessions if s.path == sess["path"]]
    assert s.incomplete and s.files == [] and s.sidecar is None and s.skipped.endswith(SKIPPED_NAME)
    observe("killed_in_step",
            f"nothing in `plugins/profile`; the staging folder holds only the window's record. `tfbneck analyze "
            f"LOG_DIR`: exit {cli['rc']}, no traceback, the window is a session with `status: error`: "
            f"\"{norm(sess['error'], k['log_dir'])}\"")


@pytest.mark.tf
def test_process_killed_while_saving_leaves_no_session_that_looks_complete(capture):
    k = capture["killed_saving"]
    assert k["returncode"] == -signal.SIGKILL
    files = k["files"]
    traces = [p for p in files if p.endswith(".xplane.pb")]
    temps = [p for p in files if os.path.basename(p).startswith(".tfbneck-") and p.endswith(".tmp")]
    # The trace had been exported into the staging folder, the sidecar was half written.
    assert len(traces) == 1 and traces[0].startswith(STAGING_DIR + os.sep) and files[traces[0]] > 0
    assert len(temps) == 1 and files[temps[0]] >= 65536
    with open(os.path.join(k["log_dir"], temps[0]), "rb") as f:
        with pytest.raises(ValueError):
            json.loads(f.read().decode("utf-8"))  # torn, as expected of a killed writer...
    assert not any(os.path.basename(p) == SIDECAR_NAME for p in files), "...but never under the sidecar's name"
    assert not any(p.startswith(os.path.join("plugins", "profile")) for p in files), "nothing was published"
    cli = capture["after_kill"]
    _no_traceback(cli)
    mine = [s for s in cli["report"]["sessions"] if s["path"].startswith(k["log_dir"] + os.sep)]
    assert len(mine) == 1, "the trace in the staging folder must not be reported as a session of its own"
    _incomplete_error(mine[0], "3-5")
    observe("killed_saving",
            f"the staging folder holds the exported trace and a torn `.tfbneck-*.tmp` ({files[temps[0]] // 1024} KiB, "
            f"not JSON); no file named `{SIDECAR_NAME}` exists anywhere. `tfbneck analyze`: one session, "
            f"`status: error`, \"incomplete profiling window: {norm(mine[0]['incomplete'])}\"; the trace in the "
            f"staging folder is not read (no host, no verdict)")


@pytest.mark.tf
def test_later_run_in_the_same_log_dir_works_and_the_incomplete_window_stays_reported(capture):
    r = capture["faults"]
    run = r["later_run"]
    (w,) = run["windows"]
    assert w["status"] == "profiled" and w["markers"] == [[3, 3], [4, 4], [5, 5]]
    assert run["losses"] == r["losses_without"] and run["warnings"] == []
    log_dir = capture["killed_in_step"]["log_dir"]
    assert sorted(os.listdir(os.path.join(log_dir, STAGING_DIR))) == capture["killed_in_step"]["staging"], \
        "the later run removes its own staging folder and leaves the other process' one alone"
    final = capture["final"]
    _no_traceback(final)
    sessions = sorted(sessions_of(final["report"], "killed_in_step/logs"), key=lambda s: s["status"])
    assert [s["status"] for s in sessions] == ["error", "ok"]
    bad, good = sessions
    _incomplete_error(bad, "3-6")
    assert good["path"] == w["session_dir"] and good["step_source"] == MARKERS
    assert [i["step"] for i in good["steps"]["items"]] == [3, 4, 5] and good["system_metrics"]["samples"] >= 1
    observe("later_run",
            "training unchanged (same losses as without the callback), no warning; steps 3-5 profiled into "
            "`plugins/profile` as usual. `tfbneck analyze`: the new session `ok` (steps 3, 4, 5, with system "
            "metrics) and the killed window still listed as incomplete (error) until its folder is deleted")


# ----------------------------------------------------------------------------------------
# Disk full / file too large
# ----------------------------------------------------------------------------------------

ERRNO_TEXT = {"efbig": "File too large", "enospc": "No space left on device"}


TMPFS_CASES = ("trace_enospc", "sidecar_enospc", "full_from_start")


def _case(capture, name):
    if name in TMPFS_CASES and capture["tmpfs"] is None:
        pytest.skip(f"disk-full case needs a tmpfs mount: {capture['tmpfs_problem']} "
                    f"(the EFBIG cases exercise the same failure paths)")
    return capture["faults"][name]


def _run_name(capture, log_dir):
    return os.path.relpath(log_dir, capture["root"]).replace(os.sep, "/")


@pytest.mark.tf
@pytest.mark.parametrize("kind", ["efbig", "enospc"])
def test_trace_write_failure_skips_the_window_and_training_is_unchanged(capture, kind):
    name = f"trace_{kind}"
    c = _case(capture, name)
    log_dir, text = c["log_dir"], ERRNO_TEXT[kind]
    assert c["losses"] == capture["faults"]["losses_without"], "the callback changed training"
    (warning,) = c["warnings"]
    assert warning.startswith("steps 3-5 were not profiled: the profiler could not save the trace (")
    assert text in warning and "Training continues; recorded in " in warning
    failed, nxt = c["windows"]
    assert failed["status"] == "skipped" and text in failed["reason"] and failed["markers"] == [[3, 3], [4, 4], [5, 5]]
    assert failed["session_dir"].endswith("_steps3-5_skipped")
    with open(os.path.join(failed["session_dir"], SKIPPED_NAME)) as f:
        assert json.load(f)["reason"] == failed["reason"]
    assert nxt["status"] == "profiled" and nxt["markers"] == [[8, 8], [9, 9]], "the next window must work again"
    # The half-written trace went with the staging folder: the only trace is the next window's.
    files = _snapshot(log_dir)
    traces = [p for p in files if p.endswith(".xplane.pb")]
    assert len(traces) == 1 and traces[0].startswith(os.path.relpath(nxt["session_dir"], log_dir) + os.sep)
    assert not os.path.exists(os.path.join(log_dir, STAGING_DIR)), "staging folder left behind"
    final = capture["final"]
    _no_traceback(final)
    sessions = {s["session"]: s for s in sessions_of(final["report"], _run_name(capture, log_dir))}
    assert len(sessions) == 2
    skipped = sessions[os.path.basename(failed["session_dir"])]
    assert skipped["status"] == "error" and skipped["skipped"] == failed["reason"]
    assert "profiling window was skipped: the profiler could not save the trace" in skipped["error"]
    ok = sessions[os.path.basename(nxt["session_dir"])]
    assert ok["status"] == "ok" and [i["step"] for i in ok["steps"]["items"]] == [8, 9]
    observe(name,
            f"training unchanged (same losses); one warning: \"{norm(warning, log_dir)}\". The half-written trace "
            f"is deleted with the staging folder; window 3-5 recorded as skipped (`{SKIPPED_NAME}` with that "
            f"reason); window 8-9 profiled normally. `tfbneck analyze`: 3-5 `status: error` \"profiling window was "
            f"skipped: ...{text})\", 8-9 `ok`")


@pytest.mark.tf
@pytest.mark.parametrize("kind", ["efbig", "enospc"])
def test_sidecar_write_failure_keeps_the_trace_and_never_a_torn_sidecar(capture, kind):
    name = f"sidecar_{kind}"
    c = _case(capture, name)
    log_dir, text = c["log_dir"], ERRNO_TEXT[kind]
    assert c["losses"] == capture["faults"]["losses_without"], "the callback changed training"
    assert c["warnings"] == [f"could not write the system metrics ({text}); the trace is kept without them"]
    (w,) = c["windows"]
    assert w["status"] == "profiled" and w["markers"] == [[3, 3], [4, 4], [5, 5]]
    files = sorted(os.listdir(w["session_dir"]))
    assert files == [f"{HOST}.xplane.pb"], f"no sidecar and no temporary file may remain: {files}"
    assert not os.path.exists(os.path.join(log_dir, STAGING_DIR))
    (sess,) = sessions_of(capture["final"]["report"], _run_name(capture, log_dir))
    assert sess["status"] == "ok" and [i["step"] for i in sess["steps"]["items"]] == [3, 4, 5]
    assert "system_metrics" not in sess
    observe(name,
            f"training unchanged (same losses); one warning: \"{c['warnings'][0]}\". The session holds the "
            f"complete trace only (the temporary sidecar file is removed, no `{SIDECAR_NAME}`). `tfbneck analyze`: "
            f"`ok`, steps 3, 4, 5, without system metrics")


@pytest.mark.tf
def test_window_that_cannot_even_be_recorded_leaves_nothing_but_one_warning(capture):
    c = _case(capture, "record_efbig")
    log_dir = c["log_dir"]
    assert c["losses"] == capture["faults"]["losses_without"]
    (warning,) = c["warnings"]
    assert warning.startswith("steps 3-5 were not profiled: the profiler could not save the trace (")
    assert warning.endswith("Training continues; could not record it (File too large)")
    failed, nxt = c["windows"]
    assert failed["status"] == "skipped" and failed["session_dir"] is None and "File too large" in failed["reason"]
    assert nxt["status"] == "profiled" and nxt["markers"] == [[8, 8], [9, 9]]
    profile = os.path.join(log_dir, "plugins", "profile")
    assert os.listdir(profile) == [os.path.basename(nxt["session_dir"])], "an empty session folder was left"
    assert not os.path.exists(os.path.join(log_dir, STAGING_DIR))
    (sess,) = sessions_of(capture["final"]["report"], _run_name(capture, log_dir))
    assert sess["status"] == "ok" and sess["path"] == nxt["session_dir"]
    observe("record_efbig",
            f"training unchanged (same losses); one warning: \"{norm(warning, log_dir)}\". No file and no "
            f"empty folder is left for window 3-5 (the warning is its only record); window 8-9 profiled normally; "
            f"`tfbneck analyze` lists 8-9 only")


@pytest.mark.tf
def test_disk_full_from_the_start_records_nothing_and_warns_once(capture):
    c = _case(capture, "full_from_start")
    log_dir = c["log_dir"]
    assert c["losses"] == capture["faults"]["losses_without"]
    (warning,) = c["warnings"]
    assert warning == (f"log_dir {log_dir} is not writable (OSError: No space left on device): no profiling window "
                       f"will be recorded (training continues)")
    assert [(w["status"], w["session_dir"]) for w in c["windows"]] == [("skipped", None), ("skipped", None)]
    assert _snapshot(log_dir) == {}, "no file may be left"
    assert sessions_of(capture["final"]["report"], _run_name(capture, log_dir)) == []
    observe("full_from_start",
            f"training unchanged (same losses); one warning at the start of `fit`: \"{norm(warning, log_dir)}\"; "
            f"both windows skipped (in `BottleneckProfiler.windows`), no file written; `tfbneck analyze` finds no "
            f"session for this log_dir")


# ----------------------------------------------------------------------------------------
# The sampler
# ----------------------------------------------------------------------------------------

@pytest.mark.tf
def test_sampler_raising_midway_leaves_a_valid_sidecar_flagged_incomplete(capture):
    c = capture["faults"]["sampler_midway"]
    assert c["losses"] == capture["faults"]["losses_without_slow"]
    err = "RuntimeError: injected sampler failure after 2 samples"
    assert c["warnings"] == [f"the system sampler failed ({err}); the window's system metrics are incomplete"]
    (w,) = c["windows"]
    assert w["status"] == "profiled" and w["markers"] == [[3, 3], [4, 4], [5, 5]]
    with open(os.path.join(w["session_dir"], SIDECAR_NAME)) as f:
        side = json.load(f)
    assert side["sampler_error"] == err and len(side["samples"]) == 2
    (sess,) = sessions_of(capture["final"]["report"], _run_name(capture, c["log_dir"]))
    assert sess["status"] == "ok" and sess["system_metrics"]["samples"] == 2
    (warning,) = sess["warnings"]
    assert warning == (f"{os.path.join(w['session_dir'], SIDECAR_NAME)}: system metrics incomplete, the sampler "
                       f"stopped early ({err})")
    observe("sampler_midway",
            f"training unchanged; one warning: \"{c['warnings'][0]}\". The sidecar is valid JSON with "
            f"`sampler_error` and the 2 samples taken. `tfbneck analyze`: `ok`, metrics from 2 samples, and in "
            f"`warnings`: \"{norm(warning, c['log_dir'])}\"")


@pytest.mark.tf
def test_sampler_that_cannot_start_leaves_the_trace_without_metrics(capture):
    c = capture["faults"]["sampler_no_start"]
    assert c["losses"] == capture["faults"]["losses_without"]
    (warning,) = c["warnings"]
    assert warning.startswith("system sampler could not start (RuntimeError: can't start new thread (injected))")
    (w,) = c["windows"]
    assert w["status"] == "profiled" and sorted(os.listdir(w["session_dir"])) == [f"{HOST}.xplane.pb"]
    (sess,) = sessions_of(capture["final"]["report"], _run_name(capture, c["log_dir"]))
    assert sess["status"] == "ok" and "system_metrics" not in sess
    observe("sampler_no_start",
            f"training unchanged; one warning: \"{warning}\". The session holds the trace only; "
            f"`tfbneck analyze`: `ok`, without system metrics")


# ----------------------------------------------------------------------------------------
# Atomicity: readers polling while windows are written
# ----------------------------------------------------------------------------------------

NO_SIDECAR_RUNS = ("sidecar_efbig", "sidecar_enospc", "sampler_no_start")


@pytest.mark.tf
def test_readers_polling_never_see_torn_json_or_a_trace_without_its_sidecar(capture):
    reader = capture["reader"]
    assert not reader.errors, reader.errors
    assert reader.invalid == [], f"torn JSON seen: {reader.invalid}"
    c = capture["faults"]["atomic"]
    assert [w["status"] for w in c["windows"]] == ["profiled"] * 6
    sidecars = {os.path.join(w["session_dir"], SIDECAR_NAME) for w in c["windows"]}
    assert sidecars <= reader.files, "the reader missed sidecars"
    # The reader raced the writers: it parsed windows' staging records, which exist only
    # while a window is open.
    assert any(f"{os.sep}{STAGING_DIR}{os.sep}" in p for p in reader.files), "the reader never saw an open window"
    expected_bare = {capture["faults"][n]["windows"][0]["session_dir"] for n in NO_SIDECAR_RUNS
                     if n in capture["faults"]}
    assert reader.trace_without_sidecar <= expected_bare, \
        f"session folders seen with a trace but no sidecar: {sorted(reader.trace_without_sidecar - expected_bare)}"
    grown = {p: (size, os.path.getsize(p)) for p, size in reader.trace_sizes.items()
             if os.path.exists(p) and os.path.getsize(p) != size}
    assert not grown, f"traces changed size after their folder appeared: {grown}"
    assert len(reader.trace_sizes) >= 6
    observe("atomic",
            "every version of every record and sidecar the reader saw parsed as JSON (the 6 sidecars of this run "
            "among them); no session folder was ever listed with a trace but without its sidecar (except the "
            "cases above where the sidecar could not be written); no trace changed size after its folder appeared")


def test_reader_sees_torn_json_from_a_non_atomic_writer_but_not_from_write_sidecar(tmp_path):
    payload = {"format": "tfbneck.system_metrics", "samples": [{"cpu_pct": [1.0] * 64}] * 400}
    text = json.dumps(payload)

    naive_dir, atomic_dir = tmp_path / "naive", tmp_path / "atomic"
    naive_dir.mkdir()
    atomic_dir.mkdir()
    reader = Reader(str(tmp_path), interval=0.005)
    reader.start()
    try:
        with open(naive_dir / SIDECAR_NAME, "w") as f:  # in place, in two halves
            f.write(text[:len(text) // 2])
            f.flush()
            time.sleep(0.2)
            f.write(text[len(text) // 2:])

        class Stalling(dict):
            def items(self):
                items = list(super().items())
                yield items[0]
                yield "padding", "x" * 65536  # flushed to the temporary file
                time.sleep(0.2)
                yield from items[1:]

        write_sidecar(str(atomic_dir), Stalling(payload))
    finally:
        reader.stop()
    torn = [p for p, _, _ in reader.invalid]
    assert torn and set(torn) == {str(naive_dir / SIDECAR_NAME)}, reader.invalid
    with open(atomic_dir / SIDECAR_NAME) as f:
        assert json.load(f)["samples"] == payload["samples"]
    assert os.listdir(atomic_dir) == [SIDECAR_NAME], "write_sidecar left its temporary file"
    observe("torn_control",
            "the in-place writer: torn JSON seen by the reader; `write_sidecar` (temporary file + rename): "
            "never, and no temporary file left")


# ----------------------------------------------------------------------------------------
# Discovery of staging folders without TensorFlow
# ----------------------------------------------------------------------------------------

def _staging_window(log_dir, name, record=None):
    folder = os.path.join(log_dir, STAGING_DIR, name)
    os.makedirs(folder)
    if record is not None:
        write_sidecar(folder, dict({"format": "tfbneck.skipped", "version": 1, "incomplete": True,
                                    "reason": "stopped inside the window of steps 3-5"}, **record), name=SKIPPED_NAME)
    return folder


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_window_still_being_recorded_is_not_reported_and_leftovers_are(tmp_path):
    log_dir = str(tmp_path / "run")
    dead = _dead_pid()
    live = _staging_window(log_dir, f"{os.getpid()}-0-aaaa", {"host": HOST, "pid": os.getpid()})
    gone = _staging_window(log_dir, f"{dead}-1-bbbb", {"host": HOST, "pid": dead})
    other_host = _staging_window(log_dir, f"{os.getpid()}-2-cccc", {"host": HOST + "-elsewhere", "pid": os.getpid()})
    no_record_dead = _staging_window(log_dir, f"{dead}-3-dddd")
    no_record_live = _staging_window(log_dir, f"{os.getpid()}-4-eeee")
    # A partial trace inside a staging folder is never a session of its own.
    partial = os.path.join(gone, "plugins", "profile", "2026_01_01_00_00_00")
    os.makedirs(partial)
    with open(os.path.join(partial, "host.xplane.pb"), "wb") as f:
        f.write(b"\x0a\x05trunc")
    found = find_sessions(log_dir).sessions
    assert sorted(s.path for s in found) == sorted([gone, other_host, no_record_dead])
    assert all(s.incomplete and s.files == [] and s.run == "." for s in found)
    assert live not in [s.path for s in found] and no_record_live not in [s.path for s in found]
    # Given directly, a staging folder is the same session (the TensorBoard plugin re-reads sessions so).
    (direct,) = find_sessions(gone).sessions
    assert direct.incomplete and direct.path == gone and direct.run == "run"
    assert find_sessions(live).sessions == []
    reports = {s.path: analyze_session(s) for s in found}
    assert reports[gone]["error"] == f"{gone}: incomplete profiling window: stopped inside the window of steps 3-5"
    assert reports[no_record_dead]["error"].startswith(
        f"{no_record_dead}: incomplete profiling window: the training process stopped inside this profiling window")
    assert all(r["status"] == "error" and r["hosts"] == [] for r in reports.values())
    observe("live_window",
            "live process on this host: not listed (the window is being recorded); dead process, another host, "
            "or no record (the pid in the folder name is dead): listed as incomplete (`status: error`, the "
            "record's reason or a generic one); a trace file inside a staging folder is never read as a session")


def test_leftover_staging_folder_in_remote_storage_is_reported(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    log_dir = str(tmp_path / "run")
    folder = _staging_window(log_dir, "12345-0-ffff", {"host": "elsewhere", "pid": 12345})
    partial = os.path.join(folder, "plugins", "profile", "2026_01_01_00_00_00")
    os.makedirs(partial)
    with open(os.path.join(partial, "host.xplane.pb"), "wb") as f:
        f.write(b"\x0a\x05trunc")
    fs = fsspec.filesystem("memory")
    base = f"/capture-faults-{os.getpid()}"
    try:
        for rel in _snapshot(log_dir):
            with open(os.path.join(log_dir, rel), "rb") as src:
                fs.pipe(f"{base}/run/{rel.replace(os.sep, '/')}", src.read())
        found = logdir.find_sessions(f"memory://{base}").sessions
        assert [(s.run, s.name, s.incomplete, s.files) for s in found] == [("run", "12345-0-ffff", True, [])]
        report = analyze_session(found[0])
        assert report["status"] == "error" and "incomplete profiling window: stopped inside" in report["error"]
        (direct,) = logdir.find_sessions(f"memory://{base}/run/{STAGING_DIR}/12345-0-ffff").sessions
        assert direct.incomplete and direct.run == "run" and direct.files == []
    finally:
        fs.rm(base, recursive=True)
    observe("remote_staging",
            "listed as one incomplete session (`status: error` with the record's reason); the partial trace in it "
            "is not read; the same when the URL names the staging folder itself")
