"""Running ``tfbneck analyze`` on a logdir in a subprocess, and snapshots of the logdir, for
tests/test_bad_logdirs.py: a run has a time limit and an address-space cap, and everything
under the logdir (names, types, sizes, mtimes, link targets, contents) is compared before and
after it."""
from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import time

import pytest

from conftest import tfbneck_cmd

CLI_TIMEOUT_S = 120
CLI_MEM_BYTES = 1536 * 2 ** 20
SETPRIV = shutil.which("setpriv")


# ----------------------------------------------------------------------------------------
# Snapshot: everything a user could lose
# ----------------------------------------------------------------------------------------

def snapshot(root, skip=()) -> dict:
    """Every entry under ``root`` (bytes paths, links not followed): type, size, mtime, link
    target, and a hash of each readable regular file's content."""
    root_b = os.fsencode(str(root))
    skip = {os.fsencode(str(s)) for s in skip}
    out = {}
    for dirpath, dirnames, filenames in os.walk(root_b, followlinks=False):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if full in skip:
                continue
            st = os.lstat(full)
            entry = {"mode": st.st_mode, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
            if stat.S_ISLNK(st.st_mode):
                entry["target"] = os.readlink(full)
            elif stat.S_ISREG(st.st_mode):
                entry["sha1"] = _hash(full, st)
            out[os.path.relpath(full, root_b)] = entry
    return out


def _hash(path: bytes, st) -> str:
    if st.st_blocks == 0 and st.st_size:  # a sparse file of zeros: nothing stored to hash
        return "sparse"
    h = hashlib.sha1()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except PermissionError:
        return "unreadable by the test"
    return h.hexdigest()


# ----------------------------------------------------------------------------------------
# Running the CLI
# ----------------------------------------------------------------------------------------

def _unprivileged_prefix():
    if os.geteuid() != 0:
        return []
    if SETPRIV is None:
        pytest.skip("running as root and setpriv (util-linux) is absent: file permissions cannot be made "
                    "to apply to the analyzer")
    return [SETPRIV, "--bounding-set=-dac_override,-dac_read_search"]


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (CLI_MEM_BYTES, CLI_MEM_BYTES))


class Result:
    def __init__(self, proc: subprocess.CompletedProcess, seconds: float):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr.decode("utf-8", "surrogateescape")
        self.seconds = seconds
        self.report = None
        if proc.stdout.strip().startswith(b"{"):
            self.report = json.loads(proc.stdout.decode("utf-8", "surrogateescape"))

    @property
    def sessions(self) -> dict:
        return {s["session"]: s for s in (self.report or {}).get("sessions", [])}

    @property
    def warnings(self):
        return [l.split("warning: ", 1)[1] for l in self.stderr.splitlines() if l.startswith("tfbneck: warning: ")]


def run_cli(paths, *extra, unprivileged=False, env=None, timeout=CLI_TIMEOUT_S) -> Result:
    cmd = (_unprivileged_prefix() if unprivileged else []) + tfbneck_cmd() + ["analyze"] + \
        [os.fsdecode(p) for p in ([paths] if isinstance(paths, (str, bytes, os.PathLike)) else paths)] + \
        ["--format", "json"] + list(extra)
    full_env = dict(os.environ)
    full_env.pop("TFBNECK_MAX_TRACE_BYTES", None)
    full_env.update(env or {})
    t0 = time.monotonic()
    # Its own process group: on a hang, the CLI and its --jobs workers are all stopped.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env,
                            preexec_fn=_limit_memory, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of the process started here, nothing else
        proc.communicate()
        raise AssertionError(f"tfbneck analyze did not finish in {timeout} s: {cmd}") from None
    return Result(subprocess.CompletedProcess(cmd, proc.returncode, out, err), time.monotonic() - t0)
