"""``tfbneck watch``: step 1 of the method for any running process, no TensorFlow needed.

    tfbneck watch --pid PID            the process and its children
    tfbneck watch [options] -- COMMAND ...   run COMMAND and watch it

A live panel (rich) refreshed every second shows each core's busy share (as htop's bars),
the process tree's cores, the accelerators' utilisation and memory (NVML), disk and network
rates, and the triage line (:mod:`tfbneck_plugin.system.triage`) with its reason; ``q`` quits, ``c``
captures a trace when ``--capture-port`` is given. ``--format json`` prints one JSON object
at the end instead (``triage``, then the ``intervals`` and the ``series`` of samples).
``--output FILE`` writes the system record (:mod:`tfbneck_plugin.records`) that
``tfbneck analyze`` and the TensorBoard tab show as a system-only session.

From step 1 to step 2: with ``--capture-port PORT --logdir DIR`` (the process runs
TensorFlow's profiler server, ``tf.profiler.experimental.server.start(PORT)`` or
``BottleneckProfiler(profiler_server_port=PORT)``), a trace of ``--capture-ms`` is captured
through XProf's capture client (what the Profile tab's capture button calls) once the triage
has said "not device-bound" for ``--capture-after`` seconds, or when ``c`` is pressed; it is
written into ``DIR`` as a normal session, analysed, and its verdict shown.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

from ..system.run import SystemRun
from .capture import Capturer
from .panel import KeyReader, render_panel

#: Seconds of samples behind the panel's figures and its triage line.
PANEL_WINDOW_S = 5.0


def add_parser(sub) -> None:
    """Add ``watch`` to the CLI's subcommands."""
    w = sub.add_parser("watch", help="watch a running process's system metrics and triage its bottleneck",
                       description="Sample a process tree (CPU per core and per thread, accelerators, disk, network) "
                                   "and say what the system metrics alone show: device, cpu, io, network or unclear. "
                                   "Give --pid PID, or a command after --.")
    w.add_argument("--pid", type=int, help="the process to watch (with its children)")
    w.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until the process ends or q)")
    w.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between samples (default 1)")
    w.add_argument("--aggregate", type=float, default=10.0, metavar="S",
                   help="seconds per interval of the record and its triage (default 10)")
    w.add_argument("--format", choices=["panel", "json"], default="panel",
                   help="a live panel (default), or one JSON object at the end")
    w.add_argument("--output", "-o", metavar="FILE", help="also write the system record to FILE")
    w.add_argument("--capture-port", type=int, metavar="PORT",
                   help="the watched process runs TensorFlow's profiler server on PORT: capture traces from it")
    w.add_argument("--capture-host", default="localhost", help="host of the profiler server (default localhost)")
    w.add_argument("--logdir", metavar="DIR", help="with --capture-port: where captured sessions are written")
    w.add_argument("--capture-ms", type=int, default=2000, metavar="MS", help="length of a capture (default 2000)")
    w.add_argument("--capture-after", type=float, default=10.0, metavar="S",
                   help="capture once the triage has said 'not device-bound' for S seconds (default 10; 0: only on 'c')")
    w.add_argument("--max-captures", type=int, default=1, metavar="N", help="at most N captures (default 1)")
    w.add_argument("target_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="-- COMMAND [ARGS...] to run and watch")


def _usage_error(args) -> Optional[str]:
    command = args.target_command[1:] if args.target_command[:1] == ["--"] else args.target_command
    args.target_command = command
    if (args.pid is None) == (not command):
        return "give either --pid PID or -- COMMAND ..."
    if args.pid is not None:
        import psutil
        try:
            status = psutil.Process(args.pid).status() if args.pid > 0 else None
        except (psutil.NoSuchProcess, OverflowError, ValueError):
            status = None
        if status is None:
            return f"no process with pid {args.pid}"
        if status == psutil.STATUS_ZOMBIE:
            return f"process {args.pid} has exited (a zombie): nothing to watch"
    seconds = [args.interval, args.aggregate] + ([args.duration] if args.duration is not None else [])
    if not all(math.isfinite(v) and 0 < v <= 10**6 for v in seconds):
        return "--interval, --aggregate and --duration take positive, finite seconds (at most 1e6)"
    if args.capture_port is not None and not 0 < args.capture_port < 65536:
        return f"--capture-port {args.capture_port}: not a TCP port (1-65535)"
    if args.capture_port is not None and not args.logdir:
        return "--capture-port needs --logdir DIR (where the captured session is written)"
    if args.output:
        return _output_problem(args.output)
    return None


def _output_problem(path: str) -> Optional[str]:
    """Why the system record cannot be written to ``path`` (checked before watching, so
    that nothing recorded is lost at the end), or None. The record replaces a regular file;
    anything else already there (a device, a pipe, a link, a folder) is refused, never replaced."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"--output {path}: the folder {folder} does not exist"
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path)):
        return f"--output {path}: exists and is not a regular file; give a new file name"
    probe = os.path.join(folder, f".tfbneck-probe-{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as err:
        return f"--output {path}: cannot be written ({err.strerror or err})"
    return None


def cmd_watch(args) -> int:
    """Run ``tfbneck watch``. Exit status: the command's own status when it ended while
    watched (COMMAND mode), 128 + the signal when watching was interrupted (130: Ctrl-C,
    129: the terminal closed, 143: SIGTERM; the command is ended in each case), else 0; 2 on a
    usage error, a command that cannot be started, or an output that cannot be written."""
    problem = _usage_error(args)
    if problem:
        print(f"tfbneck watch: {problem}", file=sys.stderr)
        return 2
    try:
        child, log_path = _launch(args) if args.target_command else (None, None)
    except OSError as err:
        print(f"tfbneck watch: cannot run {args.target_command[0]}: {err.strerror or err}", file=sys.stderr)
        return 2
    pid = child.pid if child is not None else args.pid
    run = SystemRun(args.interval, args.aggregate, pid=pid, source="watch",
                    command=args.target_command or None).start()
    capturer = (Capturer(f"{args.capture_host}:{args.capture_port}", args.logdir, args.capture_ms,
                         args.max_captures, args.capture_after, sidecar_for=run.sidecar)
                if args.capture_port is not None else None)
    _STOP.clear()  # a Ctrl-C of an earlier watch in this process is not this one's
    _STOPPED_BY.clear()
    previous = _catch_stop_signals()
    try:
        if args.format == "panel" and sys.stdout.isatty():
            _watch_panel(run, pid, child, args, capturer)
        else:
            _watch_quietly(run, pid, child, args, capturer)
    except OSError:
        if not _STOP.is_set():  # the terminal closed under the panel (a hangup): end as for one
            raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    ended = not _alive(pid, child)
    record = run.stop()
    record["target_ended"] = ended
    if capturer is not None:
        capturer.wait(timeout=60)
        record["captures"] = capturer.results
    rc = _finish_child(child)
    try:
        _emit(record, args, log_path)
    except OSError as err:
        if _STOPPED_BY[:1] == [signal.SIGHUP]:  # the terminal is gone; the record, if asked for, is written
            return 128 + signal.SIGHUP
        print(f"tfbneck watch: {args.output or 'standard output'}: cannot write the system record "
              f"({err.strerror or err})", file=sys.stderr)
        return 2
    if _STOP.is_set():
        return 128 + (_STOPPED_BY[0] if _STOPPED_BY else signal.SIGINT)  # as a shell reports the signal
    return rc if rc is not None else 0


_STOP = threading.Event()
#: The signal that ended the watch (SIGINT: Ctrl-C; SIGHUP: the terminal closed; SIGTERM: kill).
_STOPPED_BY: List[int] = []


def _catch_stop_signals() -> Dict[int, Any]:
    """Ctrl-C, a closed terminal and ``kill`` end the watch the same way: the watcher stops,
    ends the command's process group (its own session, so no signal reaches it otherwise)
    and writes the record. Returns the handlers it replaced."""
    def stop(signum, _frame):
        if not _STOPPED_BY:
            _STOPPED_BY.append(int(signum))
        _STOP.set()
    previous: Dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        previous[sig] = signal.signal(sig, stop)
    return previous


def _launch(args):
    """Start the command: its output goes to stderr with ``--format json`` (standard output
    holds the JSON), else to a log file (the panel owns the terminal), named at the end."""
    # Its own session (process group): Ctrl-C reaches the watcher only, which then ends the
    # command's whole group, grandchildren included (a launcher script's workers).
    if args.format == "json" or not sys.stdout.isatty():
        return subprocess.Popen(args.target_command, stdout=sys.stderr, stdin=subprocess.DEVNULL,
                                start_new_session=True), None
    fd, log_path = tempfile.mkstemp(prefix="tfbneck-watch-", suffix=".log")
    try:
        child = subprocess.Popen(args.target_command, stdout=fd, stderr=fd, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    finally:
        os.close(fd)
    return child, log_path


def _alive(pid: int, child) -> bool:
    if child is not None:
        return child.poll() is None
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _should_stop(t0: float, pid: int, child, args) -> bool:
    return (_STOP.is_set() or not _alive(pid, child)
            or (args.duration is not None and time.monotonic() - t0 >= args.duration))


def _watch_quietly(run: SystemRun, pid: int, child, args, capturer) -> None:
    t0 = time.monotonic()
    while not _should_stop(t0, pid, child, args):
        time.sleep(min(args.interval, 0.2))
        if capturer is not None:
            capturer.consider(run.recent(PANEL_WINDOW_S))


def _watch_panel(run: SystemRun, pid: int, child, args, capturer) -> None:
    from rich.console import Console
    from rich.live import Live
    console = Console()
    # The descriptor is taken before Live replaces sys.stdout with its proxy (rich < 13's
    # proxy has no terminal behind its fileno, which left the panel at the start size).
    out_fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
    t0 = time.monotonic()
    with KeyReader() as keys, Live(console=console, auto_refresh=False, screen=True) as live:
        while not _should_stop(t0, pid, child, args):
            key = keys.read(timeout=1.0)
            if key == "q":
                break
            try:  # the terminal's real size: an exported COLUMNS/LINES would pin rich to a stale one
                console.size = os.get_terminal_size(out_fd)
            except (OSError, ValueError):
                pass
            recent = run.recent(PANEL_WINDOW_S)
            if capturer is not None:
                capturer.consider(recent, manual=(key == "c"))
            live.update(render_panel(recent, run, pid, args, capturer, time.monotonic() - t0,
                                     console.size), refresh=True)


def _finish_child(child) -> Optional[int]:
    """End what the watcher started (the command's process group, when it still runs:
    ``--duration``, ``q`` or Ctrl-C); the command's exit status if it ended by itself."""
    if child is None:
        return None
    ended = child.poll() is not None
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(child.pid, sig)  # the group outlives a command that exited before its children
        except (ProcessLookupError, PermissionError):
            break
        try:
            child.wait(timeout=wait_s)
            if _group_gone(child.pid, wait_s):
                break
        except subprocess.TimeoutExpired:
            continue
    return child.returncode if ended else None


def _group_gone(pgid: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _drop_if_empty(path: str) -> bool:
    """Removes the command's log file when the command wrote nothing to it (a temporary file
    of the watcher's own, not the user's); True when it did."""
    try:
        if os.path.getsize(path) == 0:
            os.remove(path)
            return True
    except OSError:
        pass
    return False


def _emit(record: Dict, args, log_path: Optional[str]) -> None:
    if args.output:
        from ..records import write_sidecar
        folder = os.path.dirname(os.path.abspath(args.output))
        mode = os.stat(args.output).st_mode & 0o777 if os.path.isfile(args.output) else None
        written = write_sidecar(folder, record, name=os.path.basename(args.output))
        if mode is not None:
            os.chmod(written, mode)  # a file replaced keeps its permissions
    if args.format == "json":
        out = {"triage": record["triage"], "cpu_count": record["cpu_count"], "pid": record["pid"],
               "command": record["command"], "captures": record.get("captures", []),
               "target_ended": record["target_ended"], "intervals": record["intervals"], "error": record["error"]}
        print(json.dumps(out, indent=1))
        return
    t = record["triage"]
    if record["target_ended"]:
        print(f"tfbneck watch: process {record['pid']} ended while watched")
    print(f"tfbneck watch: {t['bottleneck']} — {t['reason']}")
    if t.get("caveat"):
        print(f"  ({t['caveat']})")
    for c in record.get("captures", []):
        print(f"  captured {c.get('session')}: {c.get('bottleneck')} / {c.get('cause')}" if not c.get("error")
              else f"  capture failed: {c['error']}")
    if log_path and _drop_if_empty(log_path):
        print("  the command printed nothing")
    elif log_path:
        print(f"  the command's output: {log_path}")
    if args.output:
        print(f"  system record: {args.output}")
