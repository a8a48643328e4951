import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import tfbneck_cmd
from support.traces import cpu_input_bound
from support.xspace_builder import SpaceBuilder, session_path


def run_cli(*args, timeout=120):
    return subprocess.run(tfbneck_cmd() + list(args), capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def logdir(tmp_path):
    for run, sess in (("a", "2024_01_01_00_00_00"), ("b/train", "2024_01_02_00_00_00")):
        b = SpaceBuilder()
        cpu_input_bound(b)
        b.write(session_path(tmp_path, run=run, session=sess))
    return tmp_path


def test_table_is_default_and_lists_each_session(logdir):
    r = run_cli("analyze", str(logdir))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "session", "status"]
    rows = [l.split() for l in lines[2:4]]
    assert [x[0] for x in rows] == ["a", "b/train"]
    assert all("cpu" in x and "input_preprocessing" in x for x in rows)


def test_json_csv_markdown(logdir, tmp_path):
    r = run_cli("analyze", str(logdir), "--format", "json")
    data = json.loads(r.stdout)
    assert data["version"] and len(data["sessions"]) == 2
    s = data["sessions"][0]
    for key in ("run", "session", "hosts", "status", "device_kind", "step_source", "steps", "breakdown_pct",
                "bottleneck", "cause", "confidence", "evidence", "input_pipeline", "recommendations"):
        assert key in s
    r = run_cli("analyze", str(logdir), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [x["run"] for x in rows] == ["a", "b/train"] and rows[0]["input_pct"] == "60.0"
    out = tmp_path / "report.md"
    r = run_cli("analyze", str(logdir), "--format", "markdown", "--output", str(out))
    assert r.returncode == 0 and r.stdout == ""
    md = out.read_text()
    assert md.startswith("| run |") and "```python" in md


def test_jobs_gives_identical_results(logdir):
    a = json.loads(run_cli("analyze", str(logdir), "--format", "json").stdout)
    b = json.loads(run_cli("analyze", str(logdir), "--format", "json", "--jobs", "2").stdout)
    assert a == b


def test_bad_files_beside_good_ones(logdir):
    """Corrupt, empty and truncated traces: status error naming the file, others analysed, exit 1."""
    good = open(session_path(logdir, run="a", session="2024_01_01_00_00_00"), "rb").read()
    bad = {"corrupt": b"\x12\x34 not protobuf \xff" * 10, "empty": b"", "truncated": good[: len(good) // 3]}
    for name, content in bad.items():
        p = session_path(logdir, run=name, session="s")
        os.makedirs(os.path.dirname(p))
        with open(p, "wb") as f:
            f.write(content)
    before = {p: open(p, "rb").read() for p in _all_files(logdir)}
    r = run_cli("analyze", str(logdir), "--format", "json")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    sessions = {s["run"]: s for s in json.loads(r.stdout)["sessions"]}
    assert sessions["a"]["status"] == "ok" and sessions["b/train"]["status"] == "ok"
    for name in bad:
        s = sessions[name]
        assert s["status"] == "error"
        assert session_path(logdir, run=name, session="s") in s["error"]
        assert "\n" not in s["error"]
    assert "file is empty" in sessions["empty"]["error"]
    after = {p: open(p, "rb").read() for p in _all_files(logdir)}
    assert before == after  # nothing altered, nothing added


def _all_files(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def test_usage_errors_exit_2(tmp_path):
    r = run_cli("analyze", str(tmp_path / "missing"))
    assert r.returncode == 2 and "no such file or directory" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("analyze", str(tmp_path))
    assert r.returncode == 2 and "no profiling session found" in r.stderr
    r = run_cli("analyze", str(tmp_path), "--format", "xml")
    assert r.returncode == 2


def test_legacy_only_session_is_reported(tmp_path):
    d = tmp_path / "old" / "plugins" / "profile" / "2020_01_01"
    d.mkdir(parents=True)
    (d / "host.trace.json.gz").write_bytes(b"x")
    (d / "host.overview_page.pb").write_bytes(b"x")
    r = run_cli("analyze", str(tmp_path), "--format", "json")
    assert r.returncode == 1
    s = json.loads(r.stdout)["sessions"][0]
    assert s["status"] == "error" and "TensorFlow <= 2.10" in s["error"]


def test_session_folder_and_single_file_paths(logdir):
    sess = os.path.dirname(session_path(logdir, run="a", session="2024_01_01_00_00_00"))
    for path in (sess, os.path.join(sess, "testhost.xplane.pb")):
        data = json.loads(run_cli("analyze", path, "--format", "json").stdout)
        assert len(data["sessions"]) == 1
        assert data["sessions"][0]["run"] == "a" and data["sessions"][0]["status"] == "ok"
    # A trace file outside the profile layout: the run is named after the file, less its suffix.
    loose = logdir.parent / "loose"
    loose.mkdir()
    shutil.copy(os.path.join(sess, "testhost.xplane.pb"), loose / "mytrace.xplane.pb")
    data = json.loads(run_cli("analyze", str(loose / "mytrace.xplane.pb"), "--format", "json").stdout)
    assert [(s["run"], s["session"], s["status"]) for s in data["sessions"]] == [("mytrace", "loose", "ok")]


def test_analyzer_and_cli_do_not_import_tensorflow(logdir):
    code = ("import sys\n"
            "from tfbneck_plugin import logdir\nfrom tfbneck_plugin.cli import main as cli\n"
            "from tfbneck_plugin.render import report\n"
            "from tfbneck_plugin.analysis import session\nfrom tfbneck_plugin.trace import xspace\n"
            f"rc = cli.main(['analyze', {str(logdir)!r}, '--format', 'json', '--output', '/dev/null'])\n"
            "bad = [m for m in sys.modules if m == 'tensorflow' or m.startswith(('tensorflow.', 'keras', 'tf_keras'))]\n"
            "print('IMPORTED', bad, rc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "IMPORTED [] 0" in r.stdout, r.stdout + r.stderr


# --- Rows a reader can tell apart (issue 26) ------------------------------------------------

def _keras3_runs(root, names):
    """Keras 3 logdirs ``<root>/<name>/train/plugins/profile/<session>`` with one built
    input-bound trace each."""
    for name in names:
        b = SpaceBuilder()
        cpu_input_bound(b)
        b.write(session_path(root, run=f"{name}/train", session="2024_01_01_00_00_00"))


def test_run_folders_as_paths_are_named_after_the_folder(tmp_path):
    _keras3_runs(tmp_path, ["exp1", "exp2"])
    r = run_cli("analyze", str(tmp_path / "exp1"), str(tmp_path / "exp2"), "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [x["run"] for x in rows] == ["exp1/train", "exp2/train"]
    assert [x["path"] for x in rows] == [str(tmp_path / f"exp{i}/train/plugins/profile/2024_01_01_00_00_00")
                                         for i in (1, 2)]
    # One run folder that is the run itself (tf-keras layout): its own name, never ".".
    r = run_cli("analyze", str(tmp_path / "exp1" / "train"), "--format", "json")
    assert [s["run"] for s in json.loads(r.stdout)["sessions"]] == ["train"]
    r = subprocess.run(tfbneck_cmd() + ["analyze", ".", "--format", "json"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path / "exp2" / "train")
    assert [s["run"] for s in json.loads(r.stdout)["sessions"]] == ["train"]


def test_path_column_in_table_and_markdown(tmp_path):
    _keras3_runs(tmp_path, ["exp1", "exp2"])
    for fmt, sep in (("table", None), ("markdown", "|")):
        r = run_cli("analyze", str(tmp_path / "exp1"), str(tmp_path / "exp2"), "--format", fmt)
        header = r.stdout.splitlines()[0]
        assert [c.strip() for c in header.split(sep) if c.strip()][-1] == "path", fmt
        for i in (1, 2):
            assert str(tmp_path / f"exp{i}/train/plugins/profile/2024_01_01_00_00_00") in r.stdout, fmt


def test_runs_sort_naturally(tmp_path):
    _keras3_runs(tmp_path, ["exp10", "exp2", "exp1", "exp11"])
    r = run_cli("analyze", str(tmp_path), "--format", "csv")
    assert [x["run"] for x in csv.DictReader(io.StringIO(r.stdout))] == \
        ["exp1/train", "exp2/train", "exp10/train", "exp11/train"]


def test_a_bad_path_among_several_is_an_error_row_and_the_rest_is_analysed(tmp_path):
    _keras3_runs(tmp_path, ["exp1"])
    missing = str(tmp_path / "nope")
    r = run_cli("analyze", str(tmp_path / "exp1"), missing, "--format", "json")
    assert r.returncode == 1, r.stderr
    sessions = json.loads(r.stdout)["sessions"]
    assert [(s["run"], s["status"]) for s in sessions] == [("exp1/train", "ok"), (missing, "error")]
    bad = sessions[1]
    assert bad["error"] == f"{missing}: no such file or directory" and bad["error_kind"] == "not_found"
    assert f"tfbneck: error: {missing}: no such file or directory" in r.stderr
    # The table's row for it says error, not a verdict of "unknown".
    r = run_cli("analyze", str(tmp_path / "exp1"), missing)
    row = next(line for line in r.stdout.splitlines() if line.endswith(f"  {missing}")).split()
    assert row[1:4] == ["error", "0", "none"] and row[4:6] == ["error", "not_found"] and "unknown" not in row
    # Alone, a bad PATH is still a usage error (exit 2, one line).
    r = run_cli("analyze", missing)
    assert r.returncode == 2 and r.stderr.strip() == f"tfbneck: {missing}: no such file or directory"


def test_beam_discovery_gives_the_local_runners_error_row(tmp_path):
    from tfbneck_plugin.fleet_view import beam as beam_pipeline
    from tfbneck_plugin.errors import path_error_report
    from tfbneck_plugin.logdir import DiscoveryError, find_sessions
    missing = str(tmp_path / "nope")
    [(key, rec)] = list(beam_pipeline.discover((1, missing), None, True))
    with pytest.raises(DiscoveryError) as err:
        find_sessions(missing)
    assert key == (1, missing, "") and rec == path_error_report(missing, err.value)
    _keras3_runs(tmp_path, ["exp1"])
    [(key, s)] = list(beam_pipeline.discover((0, str(tmp_path / "exp1")), None, True))
    assert key == (0, "exp1/train", "2024_01_01_00_00_00") and s.run == "exp1/train"


def test_step_source_reads_the_same_in_every_format(logdir):
    j = json.loads(run_cli("analyze", str(logdir), "--format", "json").stdout)["sessions"][0]["step_source"]
    assert " (" in j  # the finder and what it found, e.g. step_markers ('train')
    c = next(csv.DictReader(io.StringIO(run_cli("analyze", str(logdir), "--format", "csv").stdout)))
    assert c["step_source"] == j
    assert j in run_cli("analyze", str(logdir)).stdout.splitlines()[2]
    assert f"| {j} |" in run_cli("analyze", str(logdir), "--format", "markdown").stdout


def _in_a_terminal(args, cwd):
    """Runs ``tfbneck ARGS`` with stdout and stderr on one pseudo-terminal, as a user's shell
    does; returns (exit status, what the terminal showed)."""
    import pty
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(tfbneck_cmd() + list(args), cwd=cwd, stdin=subprocess.DEVNULL, stdout=secondary,
                            stderr=secondary, close_fds=True)
    os.close(secondary)
    shown = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(primary)
    return proc.wait(timeout=60), shown.decode("utf-8", "replace")


def test_a_corrupt_trace_is_said_once_in_a_terminal(tmp_path):
    """In a terminal the table's ERROR line is the one place the failure is said (the stderr
    copy is for output that goes elsewhere: a pipe, --output, JSON)."""
    session = tmp_path / "run" / "plugins" / "profile" / "2024_01_01_00_00_00"
    session.mkdir(parents=True)
    bad = session / "host.xplane.pb"
    bad.write_bytes(b"\x0b" * 3000)
    rc, shown = _in_a_terminal(["analyze", "run"], str(tmp_path))
    assert rc == 1
    assert shown.count("not a valid XSpace protobuf") == 1 and "Traceback" not in shown, shown
    r = run_cli("analyze", str(tmp_path / "run"))  # piped: the report and the error line on stderr
    assert r.returncode == 1 and r.stderr.count("not a valid XSpace protobuf") == 1, r.stderr


def test_the_table_fits_the_terminal_it_is_shown_in(tmp_path):
    """In a 100-column terminal (tmux) the table leaves out the columns NARROW_DROPS names until
    it fits, says which, and folds the evidence; the fix's code is never folded. Piped, every
    column and whole lines."""
    from tfbneck_plugin.render.report import NARROW_DROPS, TABLE_COLUMNS
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    demo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "demo_logs")
    done, name = tmp_path / "done", f"tfbneck-table-{os.getpid()}"
    script = tmp_path / "run.sh"
    script.write_text(f"unset COLUMNS LINES\n{' '.join(tfbneck_cmd())} analyze {demo}/cpu_bound_input "
                      f"{demo}/compute_bound\necho $? > {done}\nsleep 60\n")
    tmux = ["tmux", "-L", name]
    subprocess.run(tmux + ["kill-server"], capture_output=True)
    try:
        assert subprocess.run(tmux + ["new-session", "-d", "-s", name, "-x", "100", "-y", "80", f"bash {script}"],
                              capture_output=True).returncode == 0
        for _ in range(120):
            if done.exists():
                break
            time.sleep(0.5)
        screen = subprocess.run(tmux + ["capture-pane", "-p", "-J", "-t", name, "-S", "-200"], capture_output=True,
                                text=True).stdout
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)
    assert done.read_text().strip() == "0", screen
    lines = screen.rstrip("\n").splitlines()
    assert lines and max(len(x) for x in lines) <= 100, max(lines, key=len)
    header = lines[0].split()
    assert header[:2] == ["run", "session"] and {"bottleneck", "cause", "confidence", "fix_first"} <= set(header)
    left_out = [c for c in NARROW_DROPS if c not in header]
    assert left_out and left_out == NARROW_DROPS[:len(left_out)] and set(header) | set(left_out) == set(TABLE_COLUMNS)
    assert f"(left out to fit 100 columns: {', '.join(left_out)};" in " ".join(" ".join(lines).split())
    assert "      ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)" in lines  # the code, whole
    piped = run_cli("analyze", f"{demo}/cpu_bound_input", f"{demo}/compute_bound").stdout.splitlines()
    assert piped[0].split() == TABLE_COLUMNS and max(len(x) for x in piped) > 100


def test_a_damaged_host_beside_a_good_one_is_said_in_the_table(tmp_path):
    """A session whose second host's trace is damaged is analysed from the good one, and the
    table says so under the verdict (not only the JSON's warnings)."""
    demo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "demo_logs", "cpu_bound_input")
    run = tmp_path / "run"
    shutil.copytree(demo, run)
    (session,) = (run / "plugins" / "profile").iterdir()
    (session / "worker1.xplane.pb").write_bytes(b"\x0b" * 100)
    r = run_cli("analyze", str(run))
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stdout.splitlines() if line.startswith("  warning: ")]
    assert len(warned) == 1 and "worker1.xplane.pb: not a valid XSpace protobuf" in warned[0], r.stdout
    lines = r.stdout.splitlines()
    assert lines.index(warned[0]) == next(i for i, x in enumerate(lines) if "CPU-bound (" in x) + 1
