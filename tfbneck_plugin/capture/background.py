"""The background analysis of a profiled window: the analyzer's report, one log line with
the verdict, and the window's summaries in ``<log_dir>`` for TensorBoard (the input share
scalar and the verdict text: :mod:`.summaries`).

The analysis runs on a thread of the training process that either waits for a child
process (default) or analyses in the thread itself. The child runs the package's own
command line, ``python -m tfbneck_plugin.cli analyze <session_dir> --format json``
(the same code path as ``tfbneck analyze``; it never imports TensorFlow), at low CPU
priority (``nice`` 10, set right after it starts), so the training process neither
competes for the GIL nor grows in memory. An analysis in the thread holds the slowdown
trigger while it runs (:class:`.steptime.TriggerHold`).

Only the summaries need TensorFlow: :class:`.summaries.EventWriter` writes them (its writer is
made on the training thread when a window closes, before the analysis thread starts).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, List, Optional, cast

from ..session_report import SessionReport
from ..schema import SessionDict
from ..system.sampler import NOT_TRAINING_PIDS
from .display import WindowDisplay
from .summaries import EventWriter, verdict_parts

if TYPE_CHECKING:
    from .controller import WindowRecord
    from .steptime import TriggerHold

#: Analyses that run at once, and windows that may wait for one: a long job of short windows
#: on a busy machine made them faster than nice-10 children finished (ten children at once,
#: benchmarks/bench_many_windows.py), each taking memory and CPU from training. A window
#: beyond the queue keeps its trace but is not analysed in the background (said once; `tfbneck
#: analyze` reads it later). Our choice: one child per core of this 2-core machine, and a
#: queue that a burst of triggered and scheduled windows fills without loss.
MAX_RUNNING_ANALYSES = 2
MAX_WAITING_ANALYSES = 6
#: ``nice`` increment of the analysis child: below the training process, which keeps its
#: own priority (the analysis may take seconds of CPU on a large trace).
CHILD_NICE = 10


def analysis_command(session_dir: str) -> List[str]:
    """The child's command line: the package's CLI on one session folder, JSON out."""
    return [sys.executable, "-m", "tfbneck_plugin.cli", "analyze", session_dir, "--format", "json"]


def analyze_in_child(session_dir: str, timeout_s: float) -> SessionDict:
    """Analyse ``session_dir`` in a child process (:func:`analysis_command`) at low priority.

    Args:
      session_dir: a session folder (trace + sidecar).
      timeout_s: seconds before the child is killed.

    Returns:
      The session's report (``analyze_session``'s dict; ``status`` says whether it worked).

    Raises:
      RuntimeError: the child timed out, exited with status 2 or more, or printed no report.
    """
    if not sys.executable:  # an embedded interpreter: no python to start
        return analyze_here(session_dir)
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(analysis_command(session_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)
    NOT_TRAINING_PIDS.add(proc.pid)  # a later window's sampler must not count it as training work
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, CHILD_NICE)
    except (AttributeError, OSError):  # not POSIX, or the child already exited
        pass
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"the analysis took longer than {timeout_s:g} s (analysis_timeout_s)") from None
    finally:
        NOT_TRAINING_PIDS.discard(proc.pid)
    # The CLI exits 1 when the session's analysis failed: its report says why.
    try:
        sessions = json.loads(out.decode("utf-8"))["sessions"] if proc.returncode in (0, 1) else []
    except (ValueError, KeyError, TypeError):
        sessions = []
    if not sessions:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"analyzer exited with status {proc.returncode}: {tail[0]}")
    return cast(SessionDict, sessions[0])  # one element of the CLI's JSON sessions


def analyze_here(session_dir: str) -> SessionDict:
    """Analyse ``session_dir`` in this process; returns the session's report, the same as
    the child's (``tfbneck analyze``: with what the run's trend files say of the window)."""
    from ..batch import analyze_many
    from ..logdir import find_sessions
    found = find_sessions(session_dir).sessions
    if not found:
        return {"status": "error", "error": f"{session_dir}: no session found"}
    return analyze_many(found[:1], progress=False)[0]


class BackgroundAnalysis:
    """Analyses windows after they close, on non-daemon threads (the interpreter waits for
    them at exit), logs the verdict and writes the window's summaries.

    Args:
      log_dir: the callback's ``log_dir`` (named in the messages).
      mode: ``"process"`` (a child process) or ``"thread"`` (this process).
      timeout_s: per-window limit of the child.
      write_scalars: write each analysed window's summaries (:meth:`.summaries.EventWriter.write_window`).
      verbose: log one INFO line per window.
      warn: the callback's ``warn(key, message)``.
      info: logs an INFO line.
      on_report: called on the analysis thread with the record once its report is set,
        before the verdict is logged (the callback computes what changed since the last
        window there); must not raise.
      on_done: called on the analysis thread when the window's analysis ended, whatever
        happened; must not raise.
      writer: the event file the summaries go to (default: a new :class:`.summaries.EventWriter`
        in ``log_dir``).
      display: reserve a notebook output for each window's verdict (:class:`.display.WindowDisplay`)
        when its analysis starts.
      hold: held from each analysis' start to its end (the callback passes the slowdown
        trigger's hold for analyses in its own process); None: nothing held.
    """

    def __init__(self, log_dir: str, mode: str, timeout_s: float, write_scalars: bool, verbose: bool,
                 warn: Callable[[str, str], None], info: Callable[[str], None],
                 on_report: Optional[Callable] = None, on_done: Optional[Callable] = None, *,
                 writer: Optional[EventWriter] = None, display: bool = False, hold: Optional["TriggerHold"] = None):
        self.log_dir, self.mode, self.timeout_s = log_dir, mode, timeout_s
        self.write_scalars, self.verbose, self._warn, self._info = write_scalars, verbose, warn, info
        self._on_report, self._on_done = on_report, on_done
        self.writer = writer if writer is not None else EventWriter(log_dir, warn)
        self.display, self._hold = display, hold
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._slots = threading.BoundedSemaphore(MAX_RUNNING_ANALYSES)
        self._waiting = 0

    def start(self, rec: WindowRecord) -> None:
        """Analyse the published window ``rec`` in the background (call on the training thread)."""
        if self.display:
            first, last = rec.steps or (0, 0)
            rec.display = WindowDisplay(f"steps {first}-{last}")
        if self._hold is not None:
            self._hold.start()
        if self.write_scalars:
            self.writer.prepare()
        with self._lock:
            if self._waiting >= MAX_WAITING_ANALYSES:
                full = True
            else:
                full = False
                self._waiting += 1
        if full:
            rec.analysis_error = (f"not analysed in the background: {MAX_RUNNING_ANALYSES} analyses running and "
                                  f"{MAX_WAITING_ANALYSES} waiting (the machine is busy); the trace is kept")
            self._warn("analysis-queue", f"windows come faster than their analyses finish: {rec.analysis_error}; "
                                         f"run `tfbneck analyze {self.log_dir}` later")
            if rec.display is not None:  # the placeholder must not say "analysing" for ever
                rec.display.show({"status": "error", "session": os.path.basename(rec.session_dir or ""),
                                  "error": rec.analysis_error})
            self._ended(rec)
            return
        t = threading.Thread(target=self._worker, args=(rec,), name=f"tfbneck-analysis-{rec.index}")
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait for the analyses started so far (at most ``timeout`` s); True when all finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    def _ended(self, rec: WindowRecord) -> None:
        if self._hold is not None:
            self._hold.end()
        if self._on_done is not None:
            self._on_done(rec)

    def _worker(self, rec: WindowRecord) -> None:
        try:
            with self._slots:  # at most MAX_RUNNING_ANALYSES at once; the others wait here
                with self._lock:
                    self._waiting -= 1
                self._analyse(rec)
        finally:
            self._ended(rec)

    def _analyse(self, rec: WindowRecord) -> None:
        session_dir = rec.session_dir or ""  # a window with a trace has its folder
        first, last = rec.steps or (0, 0)
        try:
            report = (analyze_in_child(session_dir, self.timeout_s) if self.mode == "process"
                      else analyze_here(session_dir))
        except Exception as err:  # noqa: BLE001 - the trace is kept; the user can analyse it later
            rec.analysis_error = f"{type(err).__name__}: {err}"
            self._warn("analysis", f"analysis of {rec.session_dir} failed ({rec.analysis_error}); the trace is "
                                   f"kept: run `tfbneck analyze {rec.session_dir}`")
            if rec.display is not None:  # the placeholder must not say "analysing" for ever
                rec.display.show({"status": "error", "session": os.path.basename(rec.session_dir or ""),
                                  "error": f"analysis failed ({rec.analysis_error})"})
            return
        rec.report = SessionReport.from_dict(report)  # a dict that displays as the verdict card
        if rec.display is not None:
            rec.display.show(rec.report)
        if self._on_report is not None:
            self._on_report(rec)
        if report.get("status") != "ok":
            rec.analysis_error = report.get("error") or "analysis failed"
            self._warn("analysis", f"steps {first}-{last}: {rec.analysis_error}")
            return
        if self.verbose:
            self._info(verdict_line(rec, report))
        if self.write_scalars and self.writer.ready:
            try:
                self.writer.write_window(rec, report)
            except Exception as err:  # noqa: BLE001 - never let the analysis thread die noisily
                self._warn("scalars", f"could not write scalars to {self.log_dir} ({type(err).__name__}: {err})")


def verdict_line(rec: WindowRecord, report: SessionDict) -> str:
    """The one-line verdict logged after a window, e.g. ``steps 3-5: CPU-bound (...); ...
    [<session folder>]`` (:func:`.summaries.verdict_parts`)."""
    return "; ".join(verdict_parts(rec, report)) + f" [{rec.session_dir}]"
