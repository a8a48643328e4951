"""``tfbneck watch`` on real processes, each limited by one known resource (issue 28,
acceptance 1, 2 and 4): the triage that the system metrics alone give, the live panel in a
real terminal (tmux), and the capture from a profiler server."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT

#: Timing and CPU-share assertions: run alone (tests/run.sh), never beside another TensorFlow job.
pytestmark = pytest.mark.serial

TARGETS = os.path.join(ROOT, "tests", "tf_jobs", "watch_targets.py")
NETNS_LINK = os.path.join(os.path.dirname(ROOT), "shared", "tools", "netns-link")


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")


def _start(*args, prefix=()):
    """Start a watch target; returns it once it printed ``ready`` (its limited phase)."""
    p = subprocess.Popen([*prefix, sys.executable, TARGETS, *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=_env())
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if line.strip() == "ready":
            return p
        if not line and p.poll() is not None:
            raise AssertionError(f"watch target {args[0]} ended before it was ready (exit {p.returncode})")
    p.kill()
    raise AssertionError(f"watch target {args[0]} not ready within 240 s")


def _watch(*args, timeout=120):
    out = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "watch", *map(str, args)],
                         capture_output=True, text=True, timeout=timeout, env=_env())
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _stop(p):
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()


def _watch_target(*target):
    """``tfbneck watch --pid P --duration 10 --format json`` of a target started for it (then
    stopped): the JSON result and the target's pid."""
    p = _start(*target)
    try:
        return _watch("--pid", p.pid, "--duration", 10, "--format", "json"), p.pid
    finally:
        _stop(p)


def test_busy_loop_is_cpu():
    result, pid = _watch_target("busy", 60)
    t = result["triage"]
    assert t["bottleneck"] == "cpu", t
    assert t["shares"]["cpu"] >= 0.6
    assert result["intervals"] and result["pid"] == pid
    # The busy loop's one thread runs whenever it gets a core: it is at 100 % of one, or it
    # waits in the run queue for one (a machine busy with other work).
    iv = result["intervals"][0]
    assert iv["busiest_thread_demand_pct"] >= 90, iv


def test_file_reads_with_latency_are_io(tmp_path):
    result, _ = _watch_target("reads", tmp_path / "files", 60)
    t = result["triage"]
    assert t["bottleneck"] == "io", t
    assert "waits" in t["reason"]
    assert all(iv["tree_cores"] < 0.35 for iv in result["intervals"] if iv["triage"]["bottleneck"] == "io")


@pytest.mark.tf
def test_compute_bound_keras_fit_on_cpu_only_host_gets_the_caveat():
    result, _ = _watch_target("keras", 60)
    t = result["triage"]
    assert t["bottleneck"] == "cpu", t
    assert "cannot tell them apart" in t["caveat"]
    assert result["intervals"][0]["gpus"] == []


@pytest.mark.tf
def test_two_workers_over_a_slow_link_are_network():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("the netns link needs root and iproute2 (CI runs as root)")
    if not os.path.exists(NETNS_LINK):
        pytest.skip(f"{NETNS_LINK} is absent (it sits beside the project in the team's checkout)")
    subprocess.run([NETNS_LINK, "down"], capture_output=True)
    subprocess.run([NETNS_LINK, "up", "20mbit"], check=True, capture_output=True)
    workers = []
    try:
        addrs = ["10.231.0.1:23456", "10.231.0.2:23457"]
        for i, ns in enumerate("ab"):
            workers.append(subprocess.Popen([NETNS_LINK, "run", ns, sys.executable, TARGETS, "worker", str(i), *addrs,
                                             "100000"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                            text=True, env=_env()))
        deadline = time.monotonic() + 300
        while workers[0].stdout.readline().strip() != "ready":
            assert time.monotonic() < deadline and workers[0].poll() is None, "worker 0 never started training"
        result = _watch("--pid", workers[0].pid, "--duration", 10, "--format", "json")
    finally:
        for w in workers:
            _stop(w)
        subprocess.run([NETNS_LINK, "down"], capture_output=True)
    t = result["triage"]
    assert t["bottleneck"] == "network", t
    iv = result["intervals"][-1]
    assert iv["net_sent_MBps"] + iv["net_recv_MBps"] >= 1.25


def test_command_mode_returns_the_commands_status_and_writes_the_record(tmp_path):
    record = tmp_path / "system.json"
    out = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "watch", "--format", "json", "--output",
                          str(record), "--", sys.executable, "-c", "import time; time.sleep(2); raise SystemExit(3)"],
                         capture_output=True, text=True, timeout=60, env=_env())
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    assert data["command"][-1].endswith("SystemExit(3)")
    from tfbneck_plugin.records import read_system_run
    saved = read_system_run(str(record))
    assert saved["source"] == "watch" and saved["triage"]["bottleneck"] == data["triage"]["bottleneck"]
    # Sampled until the command ended (2 s; the last sample may be lost when it exits mid-read).
    assert 0.9 <= sum(iv["dt_s"] for iv in saved["intervals"]) <= 10


def test_duration_ends_the_commands_whole_process_group(tmp_path):
    pids = tmp_path / "pids"
    script = (f"import subprocess, sys, time\n"
              f"kids = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(2)]\n"
              f"open({str(pids)!r}, 'w').write(' '.join(str(k.pid) for k in kids))\n"
              f"time.sleep(60)\n")
    out = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "watch", "--duration", "4", "--format", "json",
                          "--", sys.executable, "-c", script], capture_output=True, text=True, timeout=90, env=_env())
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["error"] is None
    # The grandchildren spun in the watched tree: the busiest thread is theirs.
    assert max(iv["busiest_thread_demand_pct"] for iv in result["intervals"]) >= 50, result["intervals"]  # was 0
    import psutil
    kids = [int(p) for p in pids.read_text().split()]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(k) and psutil.Process(k).status() != "zombie"
                                              for k in kids):
        time.sleep(0.2)
    assert not any(psutil.pid_exists(k) and psutil.Process(k).status() != "zombie" for k in kids)


@pytest.mark.parametrize("args, words", [
    ([], "give either --pid PID or -- COMMAND"),
    (["--pid", "999999999"], "no process with pid 999999999"),
    (["--pid", str(os.getpid()), "--duration", "-1"], "positive, finite seconds"),
    (["--pid", str(os.getpid()), "--interval", "nan"], "positive, finite seconds"),
    (["--pid", str(os.getpid()), "--aggregate", "inf"], "positive, finite seconds"),
    (["--pid", "99999999999999999999"], "no process with pid 99999999999999999999"),
    (["--pid", str(os.getpid()), "--capture-port", "70000", "--logdir", "x"], "not a TCP port"),
    (["--pid", str(os.getpid()), "--output", "/dev/full"], "exists and is not a regular file"),
    (["--pid", str(os.getpid()), "--capture-port", "6009"], "--capture-port needs --logdir"),
    (["--pid", str(os.getpid()), "--output", "/nonexistent-folder/x.json"], "/nonexistent-folder does not exist"),
    (["--pid", str(os.getpid()), "--output", "/proc/x.json"], "/proc/x.json: cannot be written"),
    (["--", "/nonexistent/command"], "cannot run /nonexistent/command: No such file or directory"),
])
def test_usage_errors_are_one_line(args, words):
    out = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "watch", *args], capture_output=True,
                         text=True, timeout=60, env=_env())
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("tfbneck watch:"), out.stderr


def _tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30)


def _tmux_run(tmp_path, prefix: str, script_text: str, width: int, height: int) -> str:
    """A new detached tmux session of ``width`` x ``height`` running ``script_text`` in bash;
    its name."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    name = f"{prefix}-{os.getpid()}"
    script = tmp_path / "run.sh"
    script.write_text(script_text)
    _tmux("kill-session", "-t", name)
    assert _tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), f"bash {script}").returncode == 0
    return name


def test_live_panel_in_a_real_terminal(tmp_path):
    done = tmp_path / "done"
    name = _tmux_run(tmp_path, "tfbneck-watch",
                     f"export COLUMNS=80 LINES=24 PYTHONPATH={ROOT}\n{sys.executable} -m tfbneck_plugin.cli watch -- "
                     f"{sys.executable} -c 'while True: pass'\necho $? > {done}\nsleep 30\n", 120, 40)
    try:
        screen = ""
        for _ in range(60):
            time.sleep(1)
            screen = _tmux("capture-pane", "-p", "-t", name).stdout
            if "triage:" in screen and "cpu" in screen.split("triage:", 1)[1][:20]:
                break
        assert "triage: cpu" in screen, screen
        assert "process tree" in screen and "q quits" in screen
        assert " 0 [" in screen and " 1 [" in screen  # a bar per core
        _tmux("resize-window", "-t", name, "-x", "70", "-y", "30")
        for _ in range(10):  # the panel is redrawn at the new size within a refresh or two
            time.sleep(1)
            narrow = _tmux("capture-pane", "-p", "-t", name).stdout
            if narrow.startswith("tfbneck watch") and "triage:" in narrow:
                break
        assert narrow.startswith("tfbneck watch") and "triage:" in narrow, narrow
        assert max(len(line) for line in narrow.splitlines()) <= 70
        lines = narrow.splitlines()
        assert lines[1].startswith("triage: ")  # the verdict right under the title: never cropped
        assert any(" 0 [" in x for x in lines)  # the core bars, shortened to fit
        _tmux("send-keys", "-t", name, "q")
        for _ in range(30):
            if done.exists():
                break
            time.sleep(1)
        assert done.exists(), _tmux("capture-pane", "-p", "-t", name).stdout
        assert done.read_text().strip() == "0"
        after = _tmux("capture-pane", "-p", "-t", name).stdout
        assert "tfbneck watch: cpu" in after  # the summary line once the panel closed
        # The spinning command printed nothing: no empty log file is left behind.
        assert "the command printed nothing" in after and "the command's output" not in after, after
    finally:
        _tmux("kill-session", "-t", name)


def test_closing_the_terminal_ends_the_watched_command_and_keeps_the_record(tmp_path):
    """The command runs in its own session, so a hangup reaches only the watcher: it must end
    the command itself (a busy loop left running after the terminal closed was seen)."""
    import psutil
    pid_file, record = tmp_path / "child.pid", tmp_path / "system.json"
    child = f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid()))\nwhile True: pass"
    name = _tmux_run(tmp_path, "tfbneck-hup",
                     f"export PYTHONPATH={ROOT}\n{sys.executable} -m tfbneck_plugin.cli watch --output {record} -- "
                     f"{sys.executable} -c \"{child}\"\n", 100, 30)
    try:
        for _ in range(30):
            time.sleep(1)
            if pid_file.exists() and pid_file.read_text().strip():
                break
        child_pid = int(pid_file.read_text())
        time.sleep(3)  # a few samples
        assert psutil.pid_exists(child_pid)
    finally:
        _tmux("kill-session", "-t", name)  # the terminal closes: SIGHUP to the watcher
    def ended():
        try:
            return psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # gone, possibly between two looks
            return True
    for _ in range(30):
        if ended():
            break
        time.sleep(0.5)
    else:
        os.kill(child_pid, 9)
        pytest.fail("the watched command still runs after its terminal closed")
    for _ in range(20):
        if record.exists():
            break
        time.sleep(0.5)
    written = json.loads(record.read_text())
    assert written["intervals"] and written["triage"]["bottleneck"] == "cpu"
    umask = os.umask(0)
    os.umask(umask)
    assert record.stat().st_mode & 0o777 == 0o666 & ~umask  # readable as any file the user writes


@pytest.mark.tf
def test_capture_port_takes_a_session_that_analyze_diagnoses(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    logdir = tmp_path / "captured"
    p = _start("server", port, tmp_path / "fitlog", 120)
    try:
        # The capture starts ~3 s in; one still running when the 10 s end waits for it (up to 60 s).
        result = _watch("--pid", p.pid, "--duration", 10, "--format", "json", "--capture-port", port, "--logdir",
                        logdir, "--capture-after", 3, "--capture-ms", 2000, timeout=200)
    finally:
        _stop(p)
    caps = result["captures"]
    assert len(caps) == 1 and caps[0]["error"] is None, caps
    assert caps[0]["session"].startswith(str(logdir))
    # The watcher's samples over the capture are kept beside the trace, as the callback's are.
    from tfbneck_plugin.records import SIDECAR_NAME, read_sidecar
    side = read_sidecar(os.path.join(caps[0]["session"], SIDECAR_NAME))
    assert side["pid"] == p.pid and side["samples"]
    out = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "analyze", str(logdir), "--format", "json"],
                         capture_output=True, text=True, timeout=120, env=_env())
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    sessions = report["sessions"] if isinstance(report, dict) and "sessions" in report else report
    assert len(sessions) == 1
    assert sessions[0]["bottleneck"] == caps[0]["bottleneck"] == "cpu", sessions[0].get("evidence")
    assert sessions[0]["system_metrics"]["samples"] == len(side["samples"])


def _capture_client_missing() -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec("xprof.convert._pywrap_profiler_plugin") is None
    except ImportError:
        return True


@pytest.mark.skipif(_capture_client_missing(), reason="XProf's capture client (xprof.convert._pywrap_profiler_plugin) "
                    "is not installed (the lowest-versions job's tensorboard-plugin-profile 2.13 has none)")
def test_capture_with_no_profiler_server_says_so(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    p = _start("busy", 60)
    try:
        result = _watch("--pid", p.pid, "--duration", 8, "--format", "json", "--capture-port", port, "--logdir",
                        tmp_path / "cap", "--capture-after", 1, "--capture-ms", 500, timeout=200)
    finally:
        _stop(p)
    (cap,) = result["captures"]
    assert cap["session"] is None and f"nothing answered at localhost:{port}" in cap["error"], cap
