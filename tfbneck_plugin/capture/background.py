"""The background analysis of a profiled window: the analyzer's report, one log line with
the verdict, and the ``bottleneck/*`` scalars in ``<log_dir>`` for TensorBoard.

The analysis runs on a thread of the training process that either waits for a child
process (default) or analyses in the thread itself. The child runs the package's own
command line, ``python -m tfbneck_plugin.cli analyze <session_dir> --format json``
(the same code path as ``tfbneck analyze``; it never imports TensorFlow), at low CPU
priority (``nice`` 10, set right after it starts), so the training process neither
competes for the GIL nor grows in memory.

Only the scalars need TensorFlow (imported when the first writer is made). Scalars are
written with ``tf.summary``. Its first use imports modules lazily (TensorBoard's
summary API, which imports ``concurrent.futures.thread``, which registers an exit hook):
done on a thread while the interpreter shuts down, that import fails with "can't register
atexit after shutdown" and the last window's scalars would be lost. So the
file writer is created, and the summary API primed, on the training thread when a window
closes, before the analysis thread starts; the thread then only writes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, cast

from ..session_report import SessionReport
from ..schema import SessionDict, bottleneck_label, step_time_ms
from ..system.sampler import NOT_TRAINING_PIDS

if TYPE_CHECKING:  # the analysis itself needs no TensorFlow; only the scalars do (imported there)
    from .window import WindowRecord

#: ``bottleneck/verdict`` scalar: the verdict as a category index (the scalar chart shows a
#: change of bottleneck as a step).
VERDICT_INDEX = {"cpu": 0, "device": 1, "io": 2, "network": 3, "unknown": 4}
#: ``bottleneck/cause`` scalar: the cause code (:data:`tfbneck_plugin.causes.CAUSES`) as a
#: fixed number, so that two causes of one verdict (``cpu_contention`` and
#: ``input_preprocessing`` are both ``cpu``) read apart on the chart. Numbers are never
#: reused: a new cause takes the next one (a test checks that every cause has one).
CAUSE_INDEX = {"input_preprocessing": 0, "cpu_contention": 1, "python_overhead": 2, "eager_execution": 3,
               "retracing": 4, "kernel_launch": 5, "model_on_cpu": 6, "model_compute": 7, "host_device_transfer": 8,
               "file_read": 9, "remote_read": 10, "gradient_sync": 11, "device_trace_missing": 12, "no_activity": 13,
               "unrecorded": 14, "not_tensorflow": 15, "triage_cpu": 16, "triage_device": 17, "triage_io": 18,
               "triage_network": 19, "triage_unclear": 20}
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
    them at exit), logs the verdict and writes scalars.

    Args:
      log_dir: where the scalars' event file goes.
      mode: ``"process"`` (a child process) or ``"thread"`` (this process).
      timeout_s: per-window limit of the child.
      write_scalars: write ``bottleneck/*`` scalars.
      verbose: log one INFO line per window.
      warn: the callback's ``warn(key, message)``.
      info: logs an INFO line.
      on_report: called on the analysis thread with the record once its report is set,
        before the verdict is logged (the callback computes what changed since the last
        window there); must not raise.
      on_done: called on the analysis thread when the window's analysis ended, whatever
        happened; must not raise.
    """

    def __init__(self, log_dir: str, mode: str, timeout_s: float, write_scalars: bool, verbose: bool,
                 warn: Callable[[str, str], None], info: Callable[[str], None],
                 on_report: Optional[Callable] = None, on_done: Optional[Callable] = None):
        self.log_dir, self.mode, self.timeout_s = log_dir, mode, timeout_s
        self.write_scalars, self.verbose, self._warn, self._info = write_scalars, verbose, warn, info
        self._on_report, self._on_done = on_report, on_done
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._slots = threading.BoundedSemaphore(MAX_RUNNING_ANALYSES)
        self._waiting = 0
        self._writer: Any = None     # a tf.summary writer (TensorFlow is imported only to write scalars)
        self._writer_lock = threading.Lock()
        self._failed: set = set()

    def start(self, rec: WindowRecord) -> None:
        """Analyse the published window ``rec`` in the background (call on the training thread)."""
        if self.write_scalars:
            self._prepare_writer()
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
            if self._on_done is not None:
                self._on_done(rec)
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

    def flush(self) -> None:
        """Flush the scalars written so far to disk."""
        with self._writer_lock:
            if self._writer is not None:
                try:
                    self._writer.flush()
                except Exception:  # noqa: BLE001, S110 - a full disk: the next flush tries again
                    pass

    def write_values(self, values: Dict[str, float], step: int) -> None:
        """Write scalars ``tag -> value`` at ``step`` now (on the training thread: the
        step-time statistics at a period's end), creating the writer if need be."""
        self._prepare_writer()
        if self._writer is None:
            return
        import tensorflow as tf  # imported by _prepare_writer already
        try:
            with self._writer_lock:
                with self._writer.as_default():
                    for tag, value in values.items():
                        tf.summary.scalar(tag, value, step=step)
                self._writer.flush()
        except Exception as err:  # noqa: BLE001 - scalars are optional; training goes on
            self._warn("scalars", f"could not write scalars to {self.log_dir} ({type(err).__name__}: {err})")

    def _prepare_writer(self) -> None:
        """Create the event-file writer and run the summary API once without recording,
        so that its lazy imports happen here and never on the analysis thread."""
        with self._writer_lock:
            if self._writer is not None or "scalars" in self._failed:
                return
            try:
                import tensorflow as tf
                writer = tf.summary.create_file_writer(self.log_dir)
                with writer.as_default(), tf.summary.record_if(False):
                    tf.summary.scalar("bottleneck/step_time_ms", 0.0, step=0)
                self._writer = writer
            except Exception as err:  # noqa: BLE001 - scalars are optional: say so, analyse anyway
                self._failed.add("scalars")  # not retried at every epoch
                self._warn("scalars", f"could not write scalars to {self.log_dir} ({type(err).__name__}: {err})")

    def _worker(self, rec: WindowRecord) -> None:
        try:
            with self._slots:  # at most MAX_RUNNING_ANALYSES at once; the others wait here
                with self._lock:
                    self._waiting -= 1
                self._analyse(rec)
        finally:
            if self._on_done is not None:
                self._on_done(rec)

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
        if self.write_scalars and self._writer is not None:
            try:
                self._write_scalars(rec, report)
            except Exception as err:  # noqa: BLE001 - never let the analysis thread die noisily
                self._warn("scalars", f"could not write scalars to {self.log_dir} ({type(err).__name__}: {err})")

    def _write_scalars(self, rec: WindowRecord, report: SessionDict) -> None:
        import tensorflow as tf  # imported by _prepare_writer already: no import happens here
        values = scalars_from_report(report)
        values["bottleneck/triggered"] = 1.0 if rec.kind == "triggered" else 0.0
        with self._writer_lock:
            with self._writer.as_default():
                for tag, value in values.items():
                    tf.summary.scalar(tag, value, step=(rec.steps or (0, 0))[1])
            self._writer.flush()


def scalars_from_report(report: SessionDict) -> Dict[str, float]:
    """The ``bottleneck/*`` scalars written for one analysed session.

    Args:
      report: a session report (``analyze_session``).

    Returns:
      tag -> value: ``bottleneck/step_time_ms`` (mean step, ms); ``bottleneck/<category>_pct``
      for input, device_compute, host_compute, kernel_launch, collective, idle and
      ``transfer_pct`` (H2D + D2H), in % of the step; ``bottleneck/confidence`` (0-1);
      ``bottleneck/is_<kind>`` (1 for the verdict's kind, else 0); ``bottleneck/verdict``
      (the verdict as a category index: :data:`VERDICT_INDEX`); ``bottleneck/cause`` (the
      cause as a number: :data:`CAUSE_INDEX`; absent for a failed session); and from the sidecar
      ``system_cpu_pct``, ``system_busiest_core_pct`` (%), ``system_proc_cpu_cores``,
      ``system_tree_cpu_cores``, ``system_others_cpu_cores`` (cores) and
      ``system_gpu_util_pct`` (%), when known.
    """
    out: Dict[str, float] = {}
    mean = step_time_ms(report)
    if mean is not None:
        out["bottleneck/step_time_ms"] = float(mean)
    pct = report.get("breakdown_pct") or {}
    for key in ("input", "device_compute", "host_compute", "kernel_launch", "collective", "idle"):
        if key in pct:
            out[f"bottleneck/{key}_pct"] = float(pct[key])
    if "host_to_device" in pct or "device_to_host" in pct:
        out["bottleneck/transfer_pct"] = float(pct.get("host_to_device", 0.0)) + float(pct.get("device_to_host", 0.0))
    if report.get("confidence") is not None:
        out["bottleneck/confidence"] = float(report["confidence"])
    verdict = report.get("bottleneck", "unknown")
    for kind in VERDICT_INDEX:
        out[f"bottleneck/is_{kind}"] = 1.0 if verdict == kind else 0.0
    out["bottleneck/verdict"] = float(VERDICT_INDEX.get(verdict, VERDICT_INDEX["unknown"]))
    if report.get("cause") in CAUSE_INDEX:
        out["bottleneck/cause"] = float(CAUSE_INDEX[report["cause"]])
    system = report.get("system_metrics") or {}
    for src, tag in (("cpu_mean_pct", "system_cpu_pct"), ("busiest_core_mean_pct", "system_busiest_core_pct"),
                     ("proc_cpu_cores", "system_proc_cpu_cores"), ("tree_cpu_cores", "system_tree_cpu_cores"),
                     ("others_cpu_cores", "system_others_cpu_cores"), ("gpu_util_pct", "system_gpu_util_pct")):
        if system.get(src) is not None:
            out[f"bottleneck/{tag}"] = float(system[src])
    return out


def verdict_line(rec: WindowRecord, report: SessionDict) -> str:
    """The one-line verdict logged after a window, e.g. ``steps 3-5: CPU-bound (...); ...``.
    With ``steps_per_execution`` k > 1 a traced step and the trigger's step times are one
    execution of k batches (the markers say k), and the line says so."""
    st = step_time_ms(report)
    per = rec.markers[0][1] - rec.markers[0][0] + 1 if rec.markers else 1
    unit = "ms/step" if per <= 1 else f"ms per execution of {per} steps"
    pct = report.get("breakdown_pct") or {}
    recs = report.get("recommendations") or []
    head = report.get("bottleneck_label") or bottleneck_label(report.get("bottleneck"))
    first, last = rec.steps or (0, 0)
    parts = [f"steps {first}-{last}: {head} ({report.get('cause', '')}, "
             f"confidence {float(report.get('confidence') or 0):.2f})"]
    if st is not None:
        parts.append(f"{st:.1f} {unit}, {float(pct.get('input', 0.0)):.0f}% waiting for input")
    if recs:  # the title, the report's worth string and the fix's code name, as the CLI's table
        worth = recs[0].get("worth")
        parts.append(f"fix first: {recs[0].get('title')}" + (f" — {worth}" if worth else "") + f" [{recs[0].get('fix')}]")
    if rec.kind == "triggered" and rec.trigger:
        t = rec.trigger
        parts.append(f"opened on a slowdown: {t['observed_p50_ms']:.3g} {unit} against a baseline of "
                     f"{t['baseline_p50_ms']:.3g} ms from step {t['slow_steps'][0]}")
    if rec.change:
        parts.append(f"changed: {rec.change['text']}")
    return "; ".join(parts) + f" [{rec.session_dir}]"
