"""Half-written and odd logdirs, on disk, through the command line.

Each case builds a real logdir: a bad session folder between two good sessions of the same
run. ``tfbneck analyze LOGDIR --format json`` runs in a subprocess (time limit, address
space capped at 1.5 GiB), and the test checks that the bad session gets a clear one-line
status or warning, that the good sessions beside it are still analysed, that the exit
status says what happened, and that nothing in the logdir changed (names, types, sizes,
mtimes, link targets, file contents; tests/support/logdir_cli.py runs the CLI and takes the snapshots).
Results go to docs/faults.md with TFBNECK_WRITE_FAULTS=1, else to tests/_artifacts/faults.md (tests/support/faults_table.py).

Permission cases need a process that file permissions apply to: as root, the command runs
under ``setpriv`` without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (still uid 0, but
``chmod 000`` now denies it); they are skipped, with the reason, where neither works.
"""
from __future__ import annotations

import gzip
import os
import stat
import subprocess
import threading
import time
import zlib

import pytest

from conftest import tfbneck_cmd
from support.faults_table import Section
from support.logdir_cli import CLI_TIMEOUT_S, Result, _unprivileged_prefix, run_cli, snapshot
from support.traces import cpu_input_bound
from support.xspace_builder import SpaceBuilder

RUN = "run"
GOOD = ("a_good", "z_good")
BAD = "m_bad"
#: The limit given to the gzip-bomb case (TFBNECK_MAX_TRACE_BYTES), and the bomb's size.
BOMB_LIMIT = 64 * 2 ** 20
BOMB_SIZE = 256 * 2 ** 20


def trace_bytes(n_steps: int = 3) -> bytes:
    b = SpaceBuilder()
    cpu_input_bound(b, n_steps=n_steps)
    return b.bytes()


TRACE = trace_bytes()


def profile_dir(root, run: str = RUN) -> str:
    return os.path.join(str(root), run, "plugins", "profile")


def make_logdir(root) -> str:
    """Two good sessions; the bad one (``m_bad``) goes between them."""
    for name in GOOD:
        d = os.path.join(profile_dir(root), name)
        os.makedirs(d)
        with open(os.path.join(d, "host0.xplane.pb"), "wb") as f:
            f.write(TRACE)
    return str(root)


def bad_dir(root, create: bool = True) -> str:
    d = os.path.join(profile_dir(root), BAD)
    if create:
        os.makedirs(d, exist_ok=True)
    return d


def write(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


# ----------------------------------------------------------------------------------------
# The results table
# ----------------------------------------------------------------------------------------

CASES = {}  # id -> (fault, how it was made); filled by the case() decorator, in order


def case(key: str, fault: str, made: str):
    CASES[key] = (fault, made)
    return key


case("empty_trace", "session folder while the profiler writes: trace file created, nothing written yet",
     "a 0-byte `host0.xplane.pb`")
case("truncated_trace", "session folder while the profiler writes: trace half written",
     "the first half of a valid trace")
case("truncated_gz", "half-written `.xplane.pb.gz`", "the first half of a gzipped trace")
case("appended_during_run", "trace appended while tfbneck reads it",
     "a thread writes a 37 KB trace in 16-byte chunks, 10 ms apart, while the CLI runs 5 times (the last 64 bytes "
     "after the runs)")
case("staged_then_finished", "the same file read half-written, then after the profiler finished",
     "1/3 of the trace written and the file held open; CLI; rest written; CLI")
case("one_host_truncated", "one host of a two-host session half written",
     "`host0` valid, `host1` the first half of a trace")
case("empty_session", "empty session folder (the profiler created it, no trace yet)", "`plugins/profile/m_bad/` empty")
case("only_empty_sessions", "a logdir whose only session folder is empty", "no good sessions beside it")
case("no_trace_only_other_files", "session folder without a trace, other files in it",
     "`events.out.tfevents...`, `host0.xplane.pb.tmp`")
case("permission_file", "trace file the user cannot read", "`chmod 000 host0.xplane.pb`, CLI without DAC override")
case("permission_session", "session folder the user cannot list", "`chmod 000 m_bad/`, CLI without DAC override")
case("permission_run", "run folder the user cannot list", "`chmod 000` on a second run's folder")
case("fifo_trace", "a FIFO in place of the trace (a reader would block forever)", "`mkfifo host0.xplane.pb`")
case("dir_trace", "a folder in place of the trace", "`mkdir host0.xplane.pb`")
case("device_trace", "a device in place of the trace (endless input)", "`host0.xplane.pb -> /dev/zero`")
case("sparse_huge_trace", "a trace larger than the 2 GiB limit", "a 3 GiB sparse `host0.xplane.pb`")
case("gzip_bomb", "a small `.gz` that inflates past the size limit",
     f"{BOMB_SIZE >> 20} MiB of zeros gzipped (a file of about 250 KiB), TFBNECK_MAX_TRACE_BYTES={BOMB_LIMIT}")
case("garbage_trace", "another kind of file named `.xplane.pb`", "a PNG header and text")
case("symlink_loop_session", "symlink loop in place of a session folder", "`plugins/profile/m_bad -> .`")
case("symlink_loop_tree", "symlink loop above the sessions", "`run/loop -> ..` and `run/plugins/up -> ../..`")
case("symlink_loop_trace", "trace file that is a symlink to itself", "`host0.xplane.pb -> host0.xplane.pb`")
case("dangling_trace", "trace file that is a dangling symlink (file removed mid-scan)",
     "`host0.xplane.pb -> gone.xplane.pb`")
case("symlink_loop_path", "the PATH given is a symlink loop", "`tfbneck analyze loop` with `loop -> loop`")
case("thousands_of_files", "a session folder with thousands of files",
     "3,000 files: 100 host traces, 2,900 other files")
case("non_utf8_names", "non-UTF-8 run, session and file names", "bytes names `r\\xe9un/`, `s\\xff\\xfe/`, `h\\xfe.xplane.pb`")
case("everything_at_once_jobs", "all of the above in one logdir, analysed with `--jobs 2`",
     "each bad session between good ones, CLI without DAC override")

TABLE = Section(
    "logdirs", "Half-written and odd logdirs (tests/test_bad_logdirs.py)",
    """Each case is a real logdir on disk: the bad session folder `m_bad` between two good sessions
(`a_good`, `z_good`) of run `run`, analysed by `tfbneck analyze LOGDIR --format json` (address space
capped at 1.5 GiB). Exit status: 0 every session analysed, 1 some failed, 2 nothing found. In every
case the good sessions were analysed (`status: ok`) and nothing in the logdir changed: names, types,
sizes, mtimes, link targets and contents are compared before and after.""",
    ["fault / bad input", "how the test makes it", "exit", "what tfbneck reports"],
    list(CASES))


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    TABLE.write()


def tidy(text: str, root) -> str:
    text = text.replace(os.fsdecode(os.fsencode(str(root))), "LOGDIR")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def record(key: str, res: Result, root, observed: str = None) -> None:
    if observed is None:
        parts = []
        bad = res.sessions.get(BAD)
        if bad is not None:
            parts.append(f"`status: {bad['status']}`" + (f": {bad['error']}" if bad.get("error") else "")
                         + (f"; warnings: {'; '.join(bad['warnings'])}" if bad.get("warnings") else ""))
        parts += [f"warning on stderr: {w}" for w in res.warnings]
        if res.returncode == 2:
            parts += [l[len("tfbneck: "):] for l in res.stderr.splitlines()
                      if l.startswith("tfbneck: ") and "warning" not in l and "error:" not in l]
        observed = "; ".join(parts)
    fault, made = CASES[key]
    TABLE.record(key, [fault, made, res.returncode, tidy(observed, root)])


# ----------------------------------------------------------------------------------------
# Assertions shared by every case
# ----------------------------------------------------------------------------------------

def one_line(msg: str) -> bool:
    return isinstance(msg, str) and bool(msg) and "\n" not in msg and "\r" not in msg


def check_run(res: Result, root, before: dict, exit_code: int, skip=()) -> None:
    assert res.returncode == exit_code, (res.returncode, res.stderr[-3000:])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    if exit_code != 2:
        for name in GOOD:
            s = res.sessions.get(name)
            assert s is not None and s["status"] == "ok", (name, s and s.get("error"), res.stderr[-2000:])
            assert s["bottleneck"] == "cpu"
        for s in res.sessions.values():
            if s["status"] != "ok":
                assert one_line(s["error"]) and s["path"] in s["error"], s["error"]
    for w in res.warnings:
        assert one_line(w)
    assert snapshot(root, skip) == before, "the logdir changed"


def bad_session(res: Result) -> dict:
    assert BAD in res.sessions, (sorted(res.sessions), res.stderr[-2000:])
    return res.sessions[BAD]


# ----------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------

def test_empty_trace_file(tmp_path):
    root = make_logdir(tmp_path)
    write(os.path.join(bad_dir(root), "host0.xplane.pb"), b"")
    before = snapshot(root)
    res = run_cli(root)
    check_run(res, root, before, 1)
    assert "file is empty (0 bytes): the profiler may still be writing it" in bad_session(res)["error"]
    record("empty_trace", res, root)


def test_half_written_trace(tmp_path):
    root = make_logdir(tmp_path)
    write(os.path.join(bad_dir(root), "host0.xplane.pb"), TRACE[: len(TRACE) // 2])
    before = snapshot(root)
    res = run_cli(root)
    check_run(res, root, before, 1)
    assert "truncated or corrupt" in bad_session(res)["error"]
    record("truncated_trace", res, root)


def test_half_written_gzip(tmp_path):
    root = make_logdir(tmp_path)
    gz = gzip.compress(TRACE)
    write(os.path.join(bad_dir(root), "host0.xplane.pb.gz"), gz[: len(gz) // 2])
    before = snapshot(root)
    res = run_cli(root)
    check_run(res, root, before, 1)
    assert "not a valid gzip file" in bad_session(res)["error"]
    record("truncated_gz", res, root)


def test_trace_appended_while_analysed(tmp_path):
    """A writer keeps appending while the CLI reads: each run gives a report or a clean
    truncated-trace error, and the file ends up exactly as the writer wrote it.

    The writer holds back the trace's last bytes until the five runs are done, so every run
    reads an unfinished file; it appends 16 bytes every 10 ms (the whole trace would take
    23 s), so the file grows while the runs read it, however fast or slow they are."""
    root = make_logdir(tmp_path)
    big = trace_bytes(n_steps=200)  # 37 KB
    path = os.path.join(bad_dir(root), "host0.xplane.pb")
    open(path, "wb").close()  # the profiler created it (before the snapshot: the folder's mtime changes)
    before = snapshot(root, skip=[path])
    release, done = threading.Event(), threading.Event()
    held_back = 64

    def writer():
        with open(path, "wb", buffering=0) as f:
            k = 0
            while k < len(big) - held_back and not release.is_set():
                f.write(big[k:min(k + 16, len(big) - held_back)])
                k = min(k + 16, len(big) - held_back)
                time.sleep(0.01)
            release.wait(120)
            f.write(big[k:])  # the runs are done: the rest at once
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    outcomes, grew = [], 0
    try:
        for _ in range(5):
            size_before = os.path.getsize(path)
            res = run_cli(root)
            grew += os.path.getsize(path) > size_before
            assert not done.is_set()  # the file was unfinished for the whole run
            assert res.returncode in (0, 1), res.stderr[-2000:]
            check_run(res, root, before, res.returncode, skip=[path])
            s = bad_session(res)
            if s["status"] == "ok":
                outcomes.append("report")
            else:
                assert ("truncated or corrupt" in s["error"] or "file is empty" in s["error"]), s["error"]
                outcomes.append("error")
    finally:
        release.set()
        t.join(60)
    assert done.is_set()
    assert grew >= 1, "the file never grew during a run: nothing was read while it was being written"
    assert "error" in outcomes, outcomes  # an unfinished trace was seen, and reported as such
    with open(path, "rb") as f:
        assert f.read() == big, "the trace being written was altered"
    res = run_cli(root)
    check_run(res, root, before, 0, skip=[path])
    record("appended_during_run", res, root,
           "each run: a report, or `status: error` FILE: not a valid XSpace protobuf, truncated or corrupt / "
           "file is empty, for the half-written file; the good sessions every time; after the writer finished, "
           "exit 0 and the file byte-identical to what was written")


def test_trace_read_half_written_then_finished(tmp_path):
    root = make_logdir(tmp_path)
    path = os.path.join(bad_dir(root), "host0.xplane.pb")
    open(path, "wb").close()
    before = snapshot(root, skip=[path])
    with open(path, "wb", buffering=0) as f:
        f.write(TRACE[: len(TRACE) // 3])
        first = run_cli(root)
        check_run(first, root, before, 1, skip=[path])
        assert "truncated or corrupt" in bad_session(first)["error"]
        f.write(TRACE[len(TRACE) // 3:])
        second = run_cli(root)
    check_run(second, root, before, 0, skip=[path])
    assert bad_session(second)["status"] == "ok" and bad_session(second)["bottleneck"] == "cpu"
    with open(path, "rb") as f:
        assert f.read() == TRACE
    record("staged_then_finished", first, root,
           f"while half written: `status: error`: {bad_session(first)['error']}; once finished: "
           f"exit {second.returncode}, `status: ok` (the same verdict as the good sessions)")


def test_one_host_of_two_half_written(tmp_path):
    root = make_logdir(tmp_path)
    d = bad_dir(root)
    write(os.path.join(d, "host0.xplane.pb"), TRACE)
    write(os.path.join(d, "host1.xplane.pb"), TRACE[: len(TRACE) // 2])
    before = snapshot(root)
    res = run_cli(root)
    check_run(res, root, before, 0)
    s = bad_session(res)
    assert s["status"] == "ok" and s["hosts"] == ["host0", "host1"]
    assert any("host1.xplane.pb" in w and "truncated" in w for w in s.get("warnings", [])), s.get("warnings")
    record("one_host_truncated", res, root)


def test_empty_session_folder(tmp_path):
    root = make_logdir(tmp_path)
    bad_dir(root)
    before = snapshot(root)
    res = run_cli(root)
    check_run(res, root, before, 0)
    assert BAD not in res.sessions
    assert any(BAD in w and "no trace in this session folder" in w for w in res.warnings), res.stderr
    record("empty_session", res, root)


def test_only_an_empty_session_folder(tmp_path):
    os.makedirs(os.path.join(profile_dir(tmp_path), BAD))
    before = snapshot(tmp_path)
    res = run_cli(tmp_path)
    check_run(res, tmp_path, before, 2)
    assert any("no trace in this session folder" in w for w in res.warnings)
    assert "no profiling session found" in res.stderr
    # The session folder given directly says the same.
    direct = run_cli(os.path.join(profile_dir(tmp_path), BAD))
    assert direct.returncode == 2 and any("no trace in this session folder" in w for w in direct.warnings)
    record("only_empty_sessions", res, tmp_path)


def test_session_folder_with_other_files_only(tmp_path):
    root = make_logdir(tmp_path)
    d = bad_dir(root)
    write(os.path.join(d, "events.out.tfevents.1700000000.host0"), b"\x00" * 40)
    write(os.path.join(d, "host0.xplane.pb.tmp"), TRACE[:100])
    before = snapshot(root)
    res = run_cli(root)
    check_run(res, root, before, 0)
    assert any(BAD in w and "no trace in this session folder" in w for w in res.warnings)
    record("no_trace_only_other_files", res, root)


@pytest.fixture()
def restore_modes():
    changed = []
    yield changed
    for p, mode in reversed(changed):
        os.chmod(p, mode)


def chmod(path, mode, changed):
    changed.append((path, stat.S_IMODE(os.lstat(path).st_mode)))
    os.chmod(path, mode)


def test_unreadable_trace_file(tmp_path, restore_modes):
    root = make_logdir(tmp_path)
    p = write(os.path.join(bad_dir(root), "host0.xplane.pb"), TRACE)
    chmod(p, 0, restore_modes)
    before = snapshot(root)
    res = run_cli(root, unprivileged=True)
    check_run(res, root, before, 1)
    assert "cannot read file (Permission denied)" in bad_session(res)["error"]
    record("permission_file", res, root)


def test_unreadable_session_folder(tmp_path, restore_modes):
    root = make_logdir(tmp_path)
    d = bad_dir(root)
    write(os.path.join(d, "host0.xplane.pb"), TRACE)
    chmod(d, 0, restore_modes)
    before = snapshot(root)
    res = run_cli(root, unprivileged=True)
    check_run(res, root, before, 0)
    assert any(BAD in w and "cannot read session folder (Permission denied)" in w for w in res.warnings), res.stderr
    record("permission_session", res, root)


def test_unreadable_run_folder(tmp_path, restore_modes):
    root = make_logdir(tmp_path)
    other = os.path.join(profile_dir(root, "locked"), "s1")
    os.makedirs(other)
    write(os.path.join(other, "host0.xplane.pb"), TRACE)
    chmod(os.path.join(str(root), "locked"), 0, restore_modes)
    before = snapshot(root)
    res = run_cli(root, unprivileged=True)
    check_run(res, root, before, 0)
    assert any("locked: cannot list folder (Permission denied)" in w for w in res.warnings), res.stderr
    record("permission_run", res, root)


@pytest.mark.parametrize("key, make, needle", [
    ("fifo_trace", lambda p: os.mkfifo(p), "not a regular file (a FIFO)"),
    ("dir_trace", lambda p: os.mkdir(p), "not a regular file (a folder)"),
    ("device_trace", lambda p: os.symlink("/dev/zero", p), "not a regular file (a character device)"),
    ("symlink_loop_trace", lambda p: os.symlink(os.path.basename(p), p),
     "cannot read file (Too many levels of symbolic links)"),
    ("dangling_trace", lambda p: os.symlink("gone.xplane.pb", p), "cannot read file (No such file or directory)"),
    ("garbage_trace", lambda p: write(p, b"\x89PNG\r\n\x1a\n" + b"not a trace " * 50), "not a valid XSpace"),
])
def test_something_else_in_place_of_the_trace(tmp_path, key, make, needle):
    root = make_logdir(tmp_path)
    make(os.path.join(bad_dir(root), "host0.xplane.pb"))
    before = snapshot(root)
    res = run_cli(root, timeout=60)
    check_run(res, root, before, 1)
    assert needle in bad_session(res)["error"], bad_session(res)["error"]
    assert res.seconds < 30  # no blocking read: a run takes 0.3 s here (0.7 s under tools/under-load)
    record(key, res, root)


def test_trace_over_the_size_limit_is_not_read(tmp_path):
    root = make_logdir(tmp_path)
    with open(os.path.join(bad_dir(root), "host0.xplane.pb"), "wb") as f:
        f.truncate(3 * 2 ** 30)  # sparse: no disk used; reading it would take 2 GiB of memory
    before = snapshot(root)
    res = run_cli(root)
    check_run(res, root, before, 1)
    assert "larger than the 2147483647 byte limit (3221225472 bytes" in bad_session(res)["error"]
    record("sparse_huge_trace", res, root)


def test_gzip_bomb_is_not_inflated_past_the_limit(tmp_path):
    root = make_logdir(tmp_path)
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    bomb = b"".join(z.compress(block) for _ in range(BOMB_SIZE >> 20)) + z.flush()
    write(os.path.join(bad_dir(root), "host0.xplane.pb.gz"), bomb)
    before = snapshot(root)
    res = run_cli(root, env={"TFBNECK_MAX_TRACE_BYTES": str(BOMB_LIMIT)})
    check_run(res, root, before, 1)
    assert f"decompresses to more than the {BOMB_LIMIT} byte limit" in bad_session(res)["error"]
    assert len(bomb) < 400 * 1024
    record("gzip_bomb", res, root)


def test_symlink_loop_in_place_of_a_session(tmp_path):
    root = make_logdir(tmp_path)
    os.symlink(".", os.path.join(profile_dir(root), BAD))
    before = snapshot(root)
    res = run_cli(root, timeout=60)
    check_run(res, root, before, 0)
    assert any(BAD in w and "symbolic link, not followed" in w for w in res.warnings), res.stderr
    record("symlink_loop_session", res, root)


def test_symlink_loops_above_the_sessions(tmp_path):
    root = make_logdir(tmp_path)
    os.symlink("..", os.path.join(str(root), RUN, "loop"))
    os.symlink("../..", os.path.join(str(root), RUN, "plugins", "up"))
    before = snapshot(root)
    res = run_cli(root, timeout=60)
    check_run(res, root, before, 0)
    assert sorted(res.sessions) == sorted(GOOD)
    record("symlink_loop_tree", res, root, "links not followed: the two good sessions only, each once; no warning "
                                          "(links above `plugins/profile/` are not sessions)")


def test_path_that_is_a_symlink_loop(tmp_path):
    loop = os.path.join(str(tmp_path), "loop")
    os.symlink("loop", loop)
    before = snapshot(tmp_path)
    res = run_cli(loop, timeout=60)
    check_run(res, tmp_path, before, 2)
    assert "too many levels of symbolic links" in res.stderr
    record("symlink_loop_path", res, tmp_path)


def test_session_folder_with_thousands_of_files(tmp_path):
    root = make_logdir(tmp_path)
    d = bad_dir(root)
    for k in range(100):
        write(os.path.join(d, f"worker-{k:03d}.xplane.pb"), TRACE)
    for k in range(2900):
        write(os.path.join(d, f"events.out.tfevents.{k}.tmp"), b"x")
    before = snapshot(root)
    res = run_cli(root, timeout=300)
    check_run(res, root, before, 0)
    s = bad_session(res)
    assert s["status"] == "ok" and len(s["hosts"]) == 100 and len(s["per_host"]) == 100
    assert res.seconds < 120
    record("thousands_of_files", res, root, "`status: ok`, 100 hosts in `per_host`, the other 2,900 files ignored "
                                            "(within the test's 120 s bound)")


def test_non_utf8_names(tmp_path):
    root = make_logdir(tmp_path)
    run_b = b"r\xe9un"
    d = os.path.join(os.fsencode(str(root)), run_b, b"plugins", b"profile", b"s\xff\xfe")
    os.makedirs(d)
    write(os.path.join(d, b"h\xfe.xplane.pb"), TRACE)
    d2 = os.path.join(os.fsencode(bad_dir(root)))
    write(os.path.join(d2, b"h\xff.xplane.pb"), TRACE[:50])
    before = snapshot(root)
    res = run_cli(root, env={"PYTHONIOENCODING": "utf-8:strict"})
    check_run(res, root, before, 1)
    s = res.sessions[os.fsdecode(b"s\xff\xfe")]
    assert s["status"] == "ok" and s["run"] == os.fsdecode(run_b) and s["hosts"] == [os.fsdecode(b"h\xfe")]
    assert os.fsencode(s["path"]) == d  # the name round-trips to the bytes on disk
    assert os.fsencode(bad_session(res)["error"]).startswith(os.path.join(d2, b"h\xff.xplane.pb"))
    # Every format, on a terminal that refuses undecodable names, and into a file.
    for fmt in ("table", "csv", "markdown"):
        r = subprocess.run(tfbneck_cmd() + ["analyze", os.fsdecode(root), "--format", fmt], capture_output=True,
                           timeout=CLI_TIMEOUT_S, env=dict(os.environ, PYTHONIOENCODING="utf-8:strict"))
        assert r.returncode == 1 and b"Traceback" not in r.stderr, r.stderr[-2000:]
        assert b"s\xff\xfe" in r.stdout  # written as the bytes on disk
    out = os.path.join(str(tmp_path), "report.csv")
    r = subprocess.run(tfbneck_cmd() + ["analyze", os.fsdecode(root), "--format", "csv", "--output", out],
                       capture_output=True, timeout=CLI_TIMEOUT_S)
    assert r.returncode == 1 and b"Traceback" not in r.stderr, r.stderr[-2000:]
    with open(out, "rb") as f:
        assert b"s\xff\xfe" in f.read()
    os.remove(out)
    assert snapshot(root) == before
    record("non_utf8_names", res, root,
           f"`status: ok` for `s\\xff\\xfe` (run `r\\xe9un`, host `h\\xfe`; JSON escapes them as `\\udcff`..., "
           f"which encode back to the bytes on disk); table/CSV/Markdown and `--output` write the names' bytes "
           f"as they are on disk, also on a strict UTF-8 terminal; the half-written `h\\xff.xplane.pb`: "
           f"{tidy(bad_session(res)['error'], root)}")


def test_everything_at_once_in_parallel(tmp_path, restore_modes):
    """Every bad kind of session in one logdir, analysed by worker processes: none stops the others."""
    _unprivileged_prefix()  # skips where file permissions cannot apply
    root = str(tmp_path)
    prof = profile_dir(root)
    expected = {}

    def session(name, files):
        d = os.path.join(prof, name)
        os.makedirs(d)
        for fname, make in files.items():
            make(os.path.join(d, fname))
        return d

    for k in range(4):
        session(f"good{k}", {"host0.xplane.pb": lambda p: write(p, TRACE)})
    expected["bad_empty"] = "file is empty"
    session("bad_empty", {"host0.xplane.pb": lambda p: write(p, b"")})
    expected["bad_truncated"] = "truncated or corrupt"
    session("bad_truncated", {"host0.xplane.pb": lambda p: write(p, TRACE[:77])})
    expected["bad_fifo"] = "a FIFO"
    session("bad_fifo", {"host0.xplane.pb": os.mkfifo})
    expected["bad_device"] = "a character device"
    session("bad_device", {"host0.xplane.pb": lambda p: os.symlink("/dev/zero", p)})
    expected["bad_loop"] = "Too many levels of symbolic links"
    session("bad_loop", {"host0.xplane.pb": lambda p: os.symlink("host0.xplane.pb", p)})
    expected["bad_perm"] = "Permission denied"
    d = session("bad_perm", {"host0.xplane.pb": lambda p: write(p, TRACE)})
    chmod(os.path.join(d, "host0.xplane.pb"), 0, restore_modes)
    session("empty", {})
    os.symlink(".", os.path.join(prof, "link_loop"))
    before = snapshot(root)
    res = run_cli(root, "--jobs", "2", unprivileged=True, timeout=180)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    for k in range(4):
        assert res.sessions[f"good{k}"]["status"] == "ok"
    for name, needle in expected.items():
        s = res.sessions[name]
        assert s["status"] == "error" and needle in s["error"] and one_line(s["error"]), (name, s.get("error"))
    assert any("empty: no trace" in w for w in res.warnings) and any("link_loop: symbolic link" in w
                                                                      for w in res.warnings)
    assert snapshot(root) == before
    record("everything_at_once_jobs", res, root,
           f"the 4 good sessions `status: ok`; each of the {len(expected)} bad ones `status: error` with its own "
           "message (as above); the empty folder and the link as warnings; exit 1")
