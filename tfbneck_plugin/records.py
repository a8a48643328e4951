"""The files BottleneckProfiler writes beside a trace, in one place: their names, their
formats, how they are written (atomically) and read. The capture side writes them; the
analyzer and discovery read them. No TensorFlow here.

Files (all JSON, written with a temporary file + rename so a reader never sees torn JSON):

* ``tfbneck_system_metrics.json`` (``SIDECAR_NAME``) in a session folder: the system
  metrics sampled during the window (format below).
* ``tfbneck_skipped.json`` (``SKIPPED_NAME``): a window that could not be captured, or
  (in a staging folder, with ``"incomplete": true``) a window being written: it stays
  there if the process dies before the window is published. Written by
  :func:`write_skip_record`, read by :func:`read_skip_record`::

      {"format": "tfbneck.skipped", "version": 1, "reason": str,
       "requested_steps": [[int, int]], "host": str, "pid": int, "time_unix_ns": int,
       "source": "BottleneckProfiler", "incomplete": bool}   # incomplete: staging only
* ``<log_dir>/.tfbneck-staging/`` (``STAGING_DIR``): windows being written.

Sidecar file ``tfbneck_system_metrics.json`` in the session folder (format version 1)::

    {"format": "tfbneck.system_metrics", "version": 1,
     "host": str, "pid": int, "cpu_count": int, "interval_s": float,
     "cpu_affinity": int | null,          # added later: cores the process may run on (sched_getaffinity)
     "start_unix_ns": int, "end_unix_ns": int,
     "samples": [{"t_unix_ns": int,
                  "cpu_pct": [float per core, 0-100],   # psutil.cpu_percent(percpu=True)
                  "proc_cpu_pct": float,                # this process, 100 = one full core
                  "iowait_pct": float | null,           # share of CPU time waiting on I/O (Linux)
                  "mem_used_pct": float, "proc_rss_bytes": int,
                  "disk_read_Bps": float, "disk_write_Bps": float,
                  "net_recv_Bps": float, "net_sent_Bps": float,
                  "gpus": [{"index": int, "util_pct": float, "mem_used_bytes": int}],
                  # Added later (absent from older sidecars; readers treat them as unknown):
                  "dt_s": float,                    # seconds this sample covers, ending at t_unix_ns
                  "tree_cpu_pct": float,            # the process and its descendants, 100 = one core
                  "tree_children": int,             # descendants alive at the reading
                  "py_pool_threads": int | null,    # multiprocessing.dummy pool workers alive in the
                                                    # training process (a PyDataset's threads); null
                                                    # when watching another process
                  "tree_disk_read_Bps": float,      # bytes the tree read from storage (/proc/PID/io read_bytes)
                  "tree_remote_conns": int,         # the tree's TCP connections to non-loopback peers
                  "tree_loopback_conns": int,       # ... and to loopback peers (127.0.0.0/8, ::1)
                  "tree_runq_wait_pct": float | null,  # the tree's threads runnable but waiting
                                                    # for a CPU, 100 = one thread (Linux schedstat)
                  "net_recv_external_Bps": float,   # machine-wide, loopback interfaces excluded
                  "net_sent_external_Bps": float}],
     # Added later: CPU over the whole window from every thread's schedstat (ns), exact where
     # the samples' 10 ms ticks are not; null where schedstat is missing or the window is open.
     "window_cpu": {"dur_s": float, "proc_cpu_s": float, "tree_cpu_s": float,
                    "pool_cpu_s": float | null} | null}   # pool_cpu_s: the input pools' threads in the
                                                      # training process (thread workers, handlers)

Consecutive samples are contiguous: the first starts at the reading taken when the window
opened, the last ends at the reading taken when it closed, so even a window shorter than
``interval_s`` has one sample covering all of it.

``sampler_error`` (str or null) says why sampling stopped early. Writers may add further
top-level keys; readers ignore the ones they do not know. ``BottleneckProfiler`` adds
``"source": "BottleneckProfiler"`` and ``"window"``::

    "window": {"index": int,                      # 0-based, in the order windows were opened
               "requested_steps": [[int, int]],   # the windows asked for that this session covers
               "profiled_steps": [int, int],      # first and last batch (1-based) recorded
               "markers": [[int, int]],           # per step marker: first and last batch it covers
               "steps_per_execution": int,
               "closed_by": str,                  # "completed", "training_ended", "closed", ...
               # Added later (absent from older sidecars):
               "kind": "scheduled" | "triggered", # triggered: opened by on_slowdown
               "trigger": null | {...},           # why a triggered window opened (below)
               "interrupted": null | {            # closed_by "interrupted": training left the
                   "steps_recorded": int,         #   window with an exception; complete steps
                   "markers_recorded": int,       #   (batches, markers) kept in the trace
                   "exception": str | null,       #   its type name, when the callback saw it
                   "detected": str}}              #   how the callback saw it

``trigger`` (``capture/steptime.py``; step times are between consecutive step beginnings,
ms per step, per execution when ``steps_per_execution`` > 1)::

    {"kind": "slowdown", "detected_at_step": int, "detected_unix_ns": int,
     "slow_steps": [int, int],          # first and last batch of the slow stretch
     "slow_step_count": int, "slow_for_s": float,   # steps timed in it (a few fast ones included), seconds
     "observed_p50_ms": float,          # median step time of the slow stretch
     "observed_mean_ms": float,         # its trimmed mean (capture/slowdown/levels.py)
     "baseline_p50_ms": float, "baseline_p90_ms": float, "baseline_steps": int,
     "baseline_mean_ms": float,         # the baseline's trimmed mean
     "threshold_ms": float,             # factor * baseline_mean_ms (older files: max(factor * p50, p90))
     "slower_by": float,                # observed_mean_ms / baseline_mean_ms
     "held_by": null | "analysis" | "cooldown",   # what delayed the window after confirmation
     "confirmed_at_step": int | null,
     "capture": int,                    # 1 for the trigger's first window, ...
     "cpu": null | {"taken": bool,      # capture/cpu_taken.py: the job's cores and other processes'
                    "own_cores_before", "own_cores_during",        # (CPU s per s) in the 3 s before
                    "others_cores_before", "others_cores_during", # the stretch and during it
                    "own_cpu_per_step_ratio",   # the job's CPU s per step during over before: at
                    "own_work"},        # 2 or more (it, or the ratio against the job's clean steps: the
                                        # trigger log's cpu_per_step_ratio) its own work grew, never "taken";
                                        # own_work: others took cores, yet it was captured for that (both
                                        # absent in older files)
                                        # (null: not measured, cpu_check off, child processes, too few samples)
     "thresholds": {"factor", "consecutive", "min_seconds", "window_steps", "window_seconds", "cooldown_steps",
                    "max_captures", "horizon_steps", "warmup_steps", "quick_steps", "quick_seconds",
                    "cpu_check"},
     "outcome": "captured" | "partial" | "too_late",  # partial: training ended inside the
                                        # window; too_late: it ended before a step was recorded
     "note": str | null}

A skip record of a triggered window carries the same ``trigger`` object.

A worker of a multi-worker job adds ``"job"`` (``capture/job.py``; the sidecar is then
written even without system metrics, with ``"samples": []``; read back by
``analysis.grouping.recorded_job``)::

    "job": {"id": str,                    # hash of the cluster spec: the same on every worker
            "task": "worker:1", "task_type": str, "task_index": int,
            "cluster": {task type: int},  # tasks of each type
            "workers": int,               # chief + workers
            "source": "TF_CONFIG" | "cluster_resolver"}

The callback adds what trained (``capture/model_info.py``; read back by :func:`recorded_model`;
older sidecars lack it)::

    "model": {"class": str,               # the Keras model's class, e.g. "Sequential"
              "name": str, "layers": int, # its name and top-level layer count
              "params": int,              # model.count_params(): every weight's elements
              "no_xla": [str]}            # Keras 3: classes of its layers without XLA support, with
                                          # which Keras compiles it without XLA ([]: none; absent: unknown)

The step-time trend file ``<log_dir>/plugins/bottleneck/steptimes_<YYYY_MM_DD_HH_MM_SS>_<host>_<pid>.json``
(``STEP_TIMES_DIR``; one per ``BottleneckProfiler``, rewritten atomically as training goes),
read by the TensorBoard tab's ``/trend`` route::

    {"format": "tfbneck.step_times", "version": 1, "source": "BottleneckProfiler",
     "host": str, "pid": int, "start_unix_ns": int, "updated_unix_ns": int,
     "ended": bool,                     # close() or the end of the last fit was seen
     "steps_per_execution": int,        # step times are per execution when > 1
     "trigger": null | {thresholds as above},
     "baseline": null | {"p50_ms", "p90_ms", "mean_ms" (trimmed mean), "steps", "threshold_ms"},
                                        # the trigger's baseline when written (re-learnt after a
                                        # capture or a lasting change of level: the slow one at the end)
     "trigger_state": null | {           # the slowdown trigger's record (capture/slowdown/); absent in older files
         "armed": bool, "captures": int,
         "short_runs": int,              # slow stretches shorter than `consecutive` steps (not listed)
         "log": [{"event": "armed", "step", "baseline_p50_ms", "baseline_mean_ms", "baseline_steps", "threshold_ms",
                  "level_steps", "busy_machine" (the baseline had to last 2 s),
                  "slow_tail_steps" (its last steps, a slowdown begun already, left out), "t_unix_ns"}
               | {"event": "run", "direction": "slower" | "faster", "first_step", "last_step",
                  "steps", "seconds", "observed_p50_ms", "observed_mean_ms", "baseline_p50_ms",
                  "baseline_mean_ms",
                  "peak_level_ms", "threshold_ms",      # its level furthest beyond the threshold
                                                        # (the mean of ~0.5 s of steps, less the top
                                                        # tenth; absent in older files), and the threshold
                  "confirmed_at_step": int | null,      # step its thresholds were all met
                  "usual_level_ms": float | null,       # the level the baseline held lately, when
                                                        # the stretch was back to it (else null;
                                                        # absent in older files)
                  "cpu": null | {as in a window's trigger},  # measured at its confirmation
                  "cpu_per_step_ratio": float | null,   # the job's CPU s per step in it over its clean
                                                        # steps' before (capture/cpu_taken.py work_ratio;
                                                        # at WORK_HOLD_RATIO (1.4) or more its own work grew:
                                                        # opened or held open at the middle line, kept out
                                                        # of the baseline; null: not read, under 0.5 s;
                                                        # absent in older files)
                  "held_by": null | "analysis" | "cooldown",
                  "outcome": "captured" | "ended: fast_steps: too short" | "ended: fast_steps (held by ...)"
                           | "not captured: max_captures reached" | "not captured: back to the usual level"
                           | "not captured: CPU taken by other processes"
                           | "training ended: too late" | "faster: new baseline",
                  "at_step", "t_unix_ns"}
               | {"event": "rebaselined", "step", "why", "t_unix_ns"}]},
     "points": [{"step": int,           # last batch of the period (x of the scalars)
                 "first_step": int, "epoch": int | null, "n": int,   # steps timed
                 "p50_ms": float, "p90_ms": float, "mean_ms": float, "t_unix_ns": int,
                 "cpu_ms": float}],               # the process's CPU time per step over the period
                                                  # (absent from the first period and older files)
     "windows": [{"index": int, "kind": "scheduled" | "triggered",
                  "requested": [[int, int]], "steps": [int, int] | null,
                  "status": "open" | "profiled" | "skipped", "reason": str | null,
                  "closed_by": str | null, "session": str | null,   # folder name in plugins/profile
                  "trigger": null | {...},
                  "verdict": null | {"bottleneck", "cause", "confidence", "step_time_ms"},
                  "analysis_error": str | null,
                  "change": null | {"from_window": int, "from": {"bottleneck", "cause"},
                                    "to": {"bottleneck", "cause"}, "same_verdict": bool,
                                    "x": float, "job_step_ms": [float, float] | null,
                                    "grew": [{"what", "name", "from_ms", "to_ms", "per"}],
                                    "text": str, "against_baseline": {...}, ...},
                  "overhead": null | {"window_step_ms", "job_step_ms",   # the traced step against
                                      "periods": int, "x": float}}]}     # the unprofiled one around it

The file is written atomically (temporary file + rename): a reader never sees torn JSON.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Dict, List, Optional, Tuple

from .errors import TfbneckError

#: Name of the system-metrics sidecar in a session folder.
SIDECAR_NAME = "tfbneck_system_metrics.json"
#: Name of the record of a window that was skipped (or is still being written).
SKIPPED_NAME = "tfbneck_skipped.json"
#: Folder under ``log_dir`` where windows are written before they are published.
STAGING_DIR = ".tfbneck-staging"
FORMAT = "tfbneck.system_metrics"
VERSION = 1
#: ``format`` of the skip / staging record.
SKIPPED_FORMAT = "tfbneck.skipped"
#: Folder of the step-time trend files, under a run's folder (``plugins/<plugin name>``,
#: the TensorBoard convention for a plugin's own data; the plugin is named ``bottleneck``).
STEP_TIMES_DIR = os.path.join("plugins", "bottleneck")
#: A trend file's name begins and ends so (:func:`step_times_name`).
STEP_TIMES_PREFIX, STEP_TIMES_SUFFIX = "steptimes_", ".json"
#: ``format`` of a step-time trend file.
STEP_TIMES_FORMAT = "tfbneck.step_times"
#: Trend files larger than this (bytes) are not read (a long job's file is ~100 bytes per point).
MAX_STEP_TIMES_BYTES = 8 * 1024 * 1024
#: Entries a trend file's ``trigger_state.log`` keeps: the first (arming) and the latest.
MAX_TRIGGER_LOG = 40


class Outcome(StrEnum):
    """What the slowdown trigger did with a slow stretch: a ``trigger_state.log`` entry's
    ``outcome`` (written by :mod:`tfbneck_plugin.capture.slowdown`), and what a triggered window
    captured: its ``trigger.outcome`` (``CAPTURED``, ``PARTIAL``, ``TOO_LATE``, ``SKIPPED``).
    The trend file, ``tfbneck trigger``, the run context and the console read these values.
    docs/slowdown_trigger.md says when each is given."""
    #: A window was opened for it (the log); the window recorded all its steps (a window's trigger).
    CAPTURED = "captured"
    #: The level came back before the stretch was confirmed, or within its first ``consecutive`` steps.
    TOO_SHORT = "ended: fast_steps: too short"
    #: The level came back while a confirmed stretch waited for an analysis or the cooldown.
    ENDED_IN_ANALYSIS = "ended: fast_steps (held by analysis)"
    ENDED_IN_COOLDOWN = "ended: fast_steps (held by cooldown)"
    #: Confirmed, not captured: within ``factor`` of a level the baseline held lately.
    BACK_TO_USUAL = "not captured: back to the usual level"
    #: Confirmed, not captured: other processes took the job's cores (the entry's ``cpu``).
    CPU_TAKEN = "not captured: CPU taken by other processes"
    #: Confirmed, not captured: ``max_captures`` windows were opened already.
    MAX_CAPTURES = "not captured: max_captures reached"
    #: Training ended while an unconfirmed stretch was slow (logged, and a skipped window).
    TRAINING_ENDED = "training ended: too late"
    #: A lastingly faster stretch: the baseline is learnt again from its steps.
    FASTER = "faster: new baseline"
    #: A triggered window that training ended inside of (some steps recorded) ...
    PARTIAL = "partial"
    #: ... or before a step of it was recorded.
    TOO_LATE = "too_late"
    #: A triggered window that could not be opened (a profiler already running).
    SKIPPED = "skipped"

    @classmethod
    def of(cls, value: object) -> Optional["Outcome"]:
        """The outcome a record's field holds, or None for anything else (an older or damaged file)."""
        if not isinstance(value, str):
            return None
        try:
            return cls(value)
        except ValueError:
            return None

    @property
    def uncaptured(self) -> bool:
        """Confirmed as a slowdown, yet no window opened for it (the user is told why)."""
        return self in (Outcome.BACK_TO_USUAL, Outcome.CPU_TAKEN, Outcome.MAX_CAPTURES)

    @property
    def why(self) -> str:
        """The reason of an uncaptured outcome, as a sentence ends with it ("CPU taken by other processes")."""
        return self.value.split(": ", 1)[1] if self.uncaptured else self.value


def _reject_constant(name: str):
    """``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (RFC 8259) and no writer of these
    files produces them: a file holding one is refused rather than read into the report."""
    raise ValueError(f"{name} is not a number JSON allows")


class SidecarError(TfbneckError):
    """The sidecar exists but cannot be used; the message is one line naming the file."""


def write_sidecar(folder: str, data: Dict, name: str = SIDECAR_NAME) -> str:
    """Write ``data`` as JSON into ``folder`` atomically (temporary file + rename).

    Args:
      folder: an existing folder.
      data: JSON-serialisable dict.
      name: the file name (default the sidecar's).

    Returns:
      The path written.

    Raises:
      OSError: the folder cannot be written; no temporary file is left behind.
    """
    # Not mkstemp: its 0600 would hide the record from a TensorBoard run by another user of a
    # shared logdir; O_EXCL with 0666 gives what the umask allows, as any file the user writes.
    tmp = os.path.join(folder, f".tfbneck-{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        final = os.path.join(folder, name)
        os.replace(tmp, final)
        return final
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_sidecar(path: str, opener=open) -> Dict:
    """Read a system-metrics sidecar.

    Args:
      path: the sidecar (local path or URL ``opener`` understands).
      opener: ``open``-like callable (``logdir.open_any`` for URLs).

    Returns:
      The sidecar's dict (format above).

    Raises:
      SidecarError: unreadable, not JSON, or not a tfbneck system-metrics file.
    """
    try:
        with opener(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise SidecarError(f"{path}: unreadable system metrics ({type(err).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("samples"), list):
        raise SidecarError(f"{path}: not a tfbneck system-metrics file")
    return data


def slowdown_trigger(sidecar: Dict) -> Optional[Dict]:
    """``{"baseline_ms", "observed_ms", "factor", "baseline_p50_ms", "observed_p50_ms"}`` of a
    window the slowdown trigger opened (the ``window.trigger`` record, format above: the
    baseline's and the slow stretch's trimmed mean step, else their medians, ms per step on the
    job's own clock, the trigger's factor, and the two medians alone, None when absent), or
    None: a scheduled window, an older sidecar, or a record whose numbers are missing or not
    positive."""
    window = sidecar.get("window")
    trig = window.get("trigger") if isinstance(window, dict) and window.get("kind") == "triggered" else None
    if not isinstance(trig, dict) or trig.get("kind") != "slowdown":
        return None
    record: Dict = trig

    def positive(*keys):
        for key in keys:
            v = record.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                return float(v)
        return None
    thresholds = record.get("thresholds")
    factor = thresholds.get("factor") if isinstance(thresholds, dict) else None
    out = {"baseline_ms": positive("baseline_mean_ms", "baseline_p50_ms"),
           "observed_ms": positive("observed_mean_ms", "observed_p50_ms"),
           "factor": float(factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1
           else None}
    if None in out.values():
        return None
    return {**out, "baseline_p50_ms": positive("baseline_p50_ms"), "observed_p50_ms": positive("observed_p50_ms")}


def recorded_model(sidecar: Dict) -> Optional[Dict]:
    """The sidecar's ``model`` record (format above) with only its well-formed keys, or None:
    absent (an older callback, a watch capture) or with nothing well-formed."""
    rec = sidecar.get("model")
    if not isinstance(rec, dict):
        return None
    out: Dict = {k: rec[k] for k in ("class", "name") if isinstance(rec.get(k), str)}
    out.update({k: rec[k] for k in ("layers", "params")
                if isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool) and rec[k] >= 0})
    no_xla = rec.get("no_xla")
    if isinstance(no_xla, list) and all(isinstance(name, str) for name in no_xla):
        out["no_xla"] = list(no_xla)
    return out or None


def interrupted_window(sidecar: Dict) -> Optional[Dict]:
    """The ``window.interrupted`` record of a sidecar (format above), or None: absent, not
    a window closed as interrupted, or malformed (older sidecars lack it)."""
    window = sidecar.get("window")
    if not isinstance(window, dict) or window.get("closed_by") != "interrupted":
        return None
    rec = window.get("interrupted")
    if not isinstance(rec, dict):  # an older callback: interrupted, counts unknown
        markers = window.get("markers")
        return {"steps_recorded": None, "markers_recorded": len(markers) if isinstance(markers, list) else 0,
                "exception": None, "detected": None}
    steps = rec.get("steps_recorded")
    return {"steps_recorded": steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
            "markers_recorded": rec.get("markers_recorded") if isinstance(rec.get("markers_recorded"), int) else None,
            "exception": rec.get("exception") if isinstance(rec.get("exception"), str) else None,
            "detected": rec.get("detected") if isinstance(rec.get("detected"), str) else None}


@dataclass
class SkipRecord:
    """A skip record (``tfbneck_skipped.json``): a window that was not captured, or, with
    ``incomplete``, a window still being written (staging folder).

    Attributes:
      reason: one or more sentences saying why; shown to the user as is.
      requested_steps: the windows asked for, ``(start, stop)`` 1-based batches.
      host, pid: the training process that wrote it (None when the record lacks them).
      incomplete: True for the record a staging folder holds while its window is open.
      time_unix_ns: when it was written (ns since the epoch), None when unknown.
      readable: False when the file could not be parsed (``reason`` then says so).
    """
    reason: str
    requested_steps: List[Tuple[int, int]] = field(default_factory=list)
    host: Optional[str] = None
    pid: Optional[int] = None
    incomplete: bool = False
    time_unix_ns: Optional[int] = None
    readable: bool = True


def incomplete_reason(requested_steps, pid: int, host: str) -> str:
    """The sentence a staging record gives: the process stopped inside the window."""
    steps = ", ".join(f"{a}-{b}" for a, b in requested_steps)
    return (f"the training process (pid {pid} on {host}) stopped inside the window of steps {steps} "
            f"before its trace was saved (killed, crashed or out of memory); files left in this folder "
            f"are partial. Delete the folder to dismiss this entry")


def write_skip_record(folder: str, reason: Optional[str], requested_steps, *, incomplete: bool = False,
                      trigger: Optional[Dict] = None) -> str:
    """Write the skip record of a window into ``folder`` atomically; returns its path.

    Args:
      folder: an existing folder: a session folder (skipped window) or a window's staging
        folder (``incomplete=True``).
      reason: why the window was skipped; None with ``incomplete`` gives
        :func:`incomplete_reason` for this process.
      requested_steps: the windows asked for, ``[(start, stop)]`` 1-based batches.
      incomplete: mark the window as being written (staging record).
      trigger: for a window the slowdown trigger asked for, why (format above).

    Raises:
      OSError: the folder cannot be written (disk full, read-only, file-size limit).
    """
    host, pid = socket.gethostname(), os.getpid()
    requested = [[int(a), int(b)] for a, b in requested_steps]
    data = {"format": SKIPPED_FORMAT, "version": 1,
            "reason": reason if reason is not None else incomplete_reason(requested, pid, host),
            "requested_steps": requested, "host": host, "pid": pid, "time_unix_ns": time.time_ns(),
            "source": "BottleneckProfiler"}
    if incomplete:
        data["incomplete"] = True
    if trigger is not None:
        data["trigger"] = trigger
    return write_sidecar(folder, data, name=SKIPPED_NAME)


def read_skip_record(path: str, opener=open) -> SkipRecord:
    """Read a skip record; never raises: an unreadable record gives ``readable=False`` and
    a reason that says so.

    Args:
      path: the record (local path or URL ``opener`` understands).
      opener: ``open``-like callable (``logdir.open_any`` for URLs).
    """
    try:
        with opener(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"), parse_constant=_reject_constant)
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except Exception:  # any unreadable record is reported the same way
        return SkipRecord(reason="unknown reason (unreadable record)", readable=False)
    pid, host = data.get("pid"), data.get("host")
    requested = []
    for w in data.get("requested_steps") or []:
        if isinstance(w, (list, tuple)) and len(w) == 2 and all(isinstance(x, int) for x in w):
            requested.append((int(w[0]), int(w[1])))
    stamp = data.get("time_unix_ns")
    return SkipRecord(reason=str(data.get("reason", "unknown reason")), requested_steps=requested,
                      host=host if isinstance(host, str) else None,
                      pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                      incomplete=data.get("incomplete") is True,
                      time_unix_ns=stamp if isinstance(stamp, int) and not isinstance(stamp, bool) else None)


def read_skipped_reason(path: str, opener=open) -> str:
    """The ``reason`` of a skip record; a readable sentence even when the record is not."""
    return read_skip_record(path, opener).reason


def step_times_name(start_unix_ns: int, host: str, pid: int) -> str:
    """The trend file's name: ``steptimes_<YYYY_MM_DD_HH_MM_SS>_<host>_<pid>.json`` (local
    time, as the profiler names sessions); characters other than letters, digits, ``-``,
    ``.`` and ``_`` in the host name become ``_``."""
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(start_unix_ns / 1e9))
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in host) or "host"
    return f"{STEP_TIMES_PREFIX}{stamp}_{safe}_{int(pid)}{STEP_TIMES_SUFFIX}"


def read_record(path: str, opener, limit: int, what: str, fmt: str) -> Dict:
    """A JSON record of ``format`` ``fmt`` at most ``limit`` bytes; raises SidecarError with
    one line naming the file and calling it ``what``."""
    try:
        with opener(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as err:
        raise SidecarError(f"{path}: unreadable {what} ({err.strerror or type(err).__name__})") from None
    if len(raw) > limit:
        raise SidecarError(f"{path}: {what} larger than {limit // 2**20} MiB; not read")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:  # RecursionError: arrays nested 100000 deep
        raise SidecarError(f"{path}: {what} is not JSON ({type(err).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise SidecarError(f"{path}: not a tfbneck {what}")
    return data


def read_step_times(path: str, opener=open) -> Dict:
    """Read a step-time trend file (format above).

    Args:
      path: the file (local path or URL ``opener`` understands).
      opener: ``open``-like callable (``logdir.open_any`` for URLs).

    Returns:
      The file's dict, with ``points`` and ``windows`` lists of dicts.

    Raises:
      SidecarError: unreadable, larger than ``MAX_STEP_TIMES_BYTES``, not JSON, or not a
        tfbneck step-time file (the message is one line naming the file).
    """
    data = read_record(path, opener, MAX_STEP_TIMES_BYTES, "step-time file", STEP_TIMES_FORMAT)
    for key in ("points", "windows"):
        items = data.get(key)
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            raise SidecarError(f"{path}: step-time file without a valid '{key}' list")
    return data


# -- the whole run's system record ---------------------------------------------------------
#: ``format`` of a system record: the whole run's system metrics in intervals, with the
#: flowchart's triage (``tfbneck_plugin.system.triage``). Written by ``BottleneckProfiler`` (one per
#: training process, ``system_<stamp>_<host>_<pid>.json`` in ``STEP_TIMES_DIR`` beside the
#: trend file) and by ``tfbneck watch --output``::
#:
#:     {"format": "tfbneck.system_run", "version": 1, "source": "callback" | "watch",
#:      "host": str, "pid": int, "command": [str] | null, "cpu_count": int,
#:      "interval_s": float, "aggregate_s": float, "start_unix_ns": int, "end_unix_ns": int,
#:      "intervals": [triage.aggregate(...) + {"triage": {...}}, ...],
#:      "triage": triage.triage_run(...), "captures": [{"session": path, "bottleneck", "cause"}]}
SYSTEM_RUN_FORMAT = "tfbneck.system_run"
#: System records larger than this are not read (a day at 10 s intervals is ~3 MB).
MAX_SYSTEM_RUN_BYTES = 32 * 1024 * 1024


def system_run_name(start_unix_ns: int, host: str, pid: int) -> str:
    """The callback's system record name, ``system_<stamp>_<host>_<pid>.json`` (as
    :func:`step_times_name`)."""
    return "system_" + step_times_name(start_unix_ns, host, pid)[len(STEP_TIMES_PREFIX):]


def read_system_run(path: str, opener=open) -> Dict:
    """Read a system record (format above).

    Raises:
      SidecarError: unreadable, too large, not JSON, or not a tfbneck system record (one
        line naming the file).
    """
    data = read_record(path, opener, MAX_SYSTEM_RUN_BYTES, "system record", SYSTEM_RUN_FORMAT)
    if not isinstance(data.get("intervals"), list) or not all(isinstance(x, dict) for x in data["intervals"]):
        raise SidecarError(f"{path}: system record without a valid 'intervals' list")
    return data
