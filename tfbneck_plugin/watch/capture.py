"""``tfbneck watch --capture-port``: from step 1 (the system view) to step 2 (a trace)
without touching the training code. A trace is captured from the process's TensorFlow
profiler server through XProf's own capture client (``xprof.convert._pywrap_profiler_plugin.trace``,
what the Profile tab's capture button calls; no TensorFlow in the watcher), written into the
logdir as a normal session, and analysed as every front door analyses a session
(:func:`captured_report`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from ..records import write_sidecar

if TYPE_CHECKING:
    from ..logdir import Session
    from ..schema import SessionDict

#: The options XProf's capture button sends by default (xprof 2.24 ``profile_plugin.py``,
#: ``capture_route``): host tracer level 2, device tracer on, Python tracer off, no delay.
CAPTURE_OPTIONS = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0, "delay_ms": 0}


class Capturer:
    """Decides when to capture and runs each capture on its own thread.

    Args:
      service_addr: ``host:port`` of the profiler server.
      logdir: where sessions are written (``<logdir>/plugins/profile/<session>/``).
      capture_ms: length of each capture.
      max_captures: at most this many.
      after_s: capture once the triage has not said ``device`` for this long (0: only on demand).
      sidecar_for: ``(start_unix_ns, end_unix_ns) -> sidecar dict`` of the watcher's samples
        over the capture, written beside the captured trace (so that its analysis sees the
        process tree's CPU, run-queue wait, disk and network), or None.
    """

    def __init__(self, service_addr: str, logdir: str, capture_ms: int, max_captures: int, after_s: float,
                 sidecar_for: Optional[Callable[[int, int], Dict]] = None):
        self.sidecar_for = sidecar_for
        self.service_addr, self.logdir = service_addr, logdir
        self.capture_ms, self.max_captures, self.after_s = int(capture_ms), int(max_captures), float(after_s)
        self.results: List[Dict] = []
        self._since: Optional[float] = None
        self._thread: Optional[threading.Thread] = None
        self._started = 0

    def consider(self, recent: Optional[Dict], manual: bool = False) -> None:
        """Start a capture if ``manual`` or the triage has been "not device-bound" for
        ``after_s`` seconds; at most one at a time and ``max_captures`` in all."""
        now = time.monotonic()
        if recent is not None and recent["triage"]["bottleneck"] != "device":
            self._since = self._since if self._since is not None else now
        else:
            self._since = None
        due = manual or (self.after_s > 0 and self._since is not None and now - self._since >= self.after_s)
        busy = self._thread is not None and self._thread.is_alive()
        if due and not busy and self._started < self.max_captures:
            self._started += 1
            self._since = None
            said = recent["triage"]["bottleneck"] if recent is not None else "?"
            reason = "on demand" if manual else f"the triage said '{said}' for {self.after_s:.0f} s"
            self._thread = threading.Thread(target=self._capture, args=(reason,), name="tfbneck-capture", daemon=True)
            self._thread.start()

    def wait(self, timeout: float) -> None:
        """Wait for a capture in progress."""
        if self._thread is not None:
            self._thread.join(timeout)

    def status_line(self) -> str:
        """One line for the panel: the captures so far and the one in progress."""
        parts = [f"capture {i + 1}: " + (f"{r['bottleneck']} / {r['cause']} ({os.path.basename(r['session'])})"
                                         if not r.get("error") else f"failed: {r['error']}")
                 for i, r in enumerate(self.results)]
        if self._thread is not None and self._thread.is_alive():
            parts.append(f"capturing {self.capture_ms} ms from {self.service_addr}...")
        if not parts:
            parts.append(f"captures from {self.service_addr}: none yet ({self._started}/{self.max_captures})")
        return "; ".join(parts)

    def _capture(self, reason: str) -> None:
        result: Dict = {"reason": reason, "session": None, "bottleneck": None, "cause": None, "error": None}
        try:
            before = _sessions(self.logdir)
            os.makedirs(self.logdir, exist_ok=True)
            t0 = time.time_ns()
            _trace(self.service_addr, self.logdir, self.capture_ms)
            t1 = time.time_ns()
            new = [s for s in _sessions(self.logdir) if s.path not in {b.path for b in before}]
            if not new:
                raise RuntimeError(f"the capture wrote no session under {self.logdir}")
            if self.sidecar_for is not None:
                time.sleep(1.1)  # the sample covering the capture's end is taken within a second
                write_sidecar(new[-1].path, self.sidecar_for(t0, t1))
            report = captured_report(new[-1])
            result.update(session=new[-1].path, bottleneck=report.get("bottleneck"), cause=report.get("cause"),
                          status=report.get("status"))
        except Exception as err:  # noqa: BLE001 - a failed capture is a line in the panel, not a crash
            msg = str(err) if isinstance(err, RuntimeError) else f"{type(err).__name__}: {err}"
            result["error"] = " ".join(msg.split())[:300]
        self.results.append(result)


def captured_report(session: Session) -> SessionDict:
    """The finished report of a captured session, as every front door makes it
    (:func:`tfbneck_plugin.batch.reports_in_runs`: the trace's report through the report
    cache, with what the run's trend files in the logdir say: a training process whose
    BottleneckProfiler writes into the same logdir leaves its step clock, input-cost
    measurement and slow stretches there). Never raises for a bad trace (``status: error``)."""
    from ..batch import reports_in_runs
    (report,) = reports_in_runs([session])
    return report


#: The capture client, run in a child process: XProf's C library prints to the standard
#: output (which holds the panel or the JSON) and a crash in it must not end the watcher.
_CLIENT = ("import json, sys\n"
           "try:\n"
           "    from xprof.convert import _pywrap_profiler_plugin\n"
           "except ImportError:\n"
           "    sys.exit(\"XProf's capture client is missing (pip install tensorboard-plugin-profile)\")\n"
           "a = json.loads(sys.argv[1])\n"
           "_pywrap_profiler_plugin.trace(a['addr'], a['logdir'], '', True, a['ms'], 3, a['options'])\n")


def _trace(service_addr: str, logdir: str, capture_ms: int) -> None:
    """Capture ``capture_ms`` of trace from the profiler server into ``logdir``.

    Raises:
      RuntimeError: the client failed (its last line of output says why).
    """
    arg = json.dumps({"addr": service_addr, "logdir": logdir, "ms": capture_ms, "options": CAPTURE_OPTIONS})
    out = subprocess.run([sys.executable, "-c", _CLIENT, arg], capture_output=True, text=True,
                         timeout=capture_ms / 1000.0 * 3 + 120)
    if out.returncode != 0:
        text = (out.stderr or out.stdout or "no output").strip()
        if "UNAVAILABLE" in text or "No trace event was collected" in text:
            raise RuntimeError(f"nothing answered at {service_addr}: is TensorFlow's profiler server running there "
                               f"(tf.profiler.experimental.server.start, or BottleneckProfiler(profiler_server_port=...))?")
        lines = text.splitlines()
        raise RuntimeError(f"the capture client failed (exit {out.returncode}): {lines[-1] if lines else ''}")


def _sessions(logdir: str) -> list:
    from ..logdir import DiscoveryError, find_sessions
    try:
        return sorted(find_sessions(logdir).sessions, key=lambda s: s.path) if os.path.isdir(logdir) else []
    except DiscoveryError:
        return []
