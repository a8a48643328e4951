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
                  "tree_disk_read_Bps": float,      # bytes the tree read from storage (/proc/PID/io read_bytes)
                  "tree_remote_conns": int,         # the tree's TCP connections to non-loopback peers
                  "tree_loopback_conns": int,       # ... and to loopback peers (127.0.0.0/8, ::1)
                  "tree_runq_wait_pct": float | null,  # the tree's threads runnable but waiting
                                                    # for a CPU, 100 = one thread (Linux schedstat)
                  "net_recv_external_Bps": float,   # machine-wide, loopback interfaces excluded
                  "net_sent_external_Bps": float}]}

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
               "closed_by": str}                  # "completed", "training_ended", "closed", ...

The file is written atomically (temporary file + rename): a reader never sees torn JSON.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

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


class SidecarError(Exception):
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
    fd, tmp = tempfile.mkstemp(prefix=".tfbneck-", suffix=".tmp", dir=folder)
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
            data = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise SidecarError(f"{path}: unreadable system metrics ({type(err).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("samples"), list):
        raise SidecarError(f"{path}: not a tfbneck system-metrics file")
    return data


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


def write_skip_record(folder: str, reason: Optional[str], requested_steps, *, incomplete: bool = False) -> str:
    """Write the skip record of a window into ``folder`` atomically; returns its path.

    Args:
      folder: an existing folder: a session folder (skipped window) or a window's staging
        folder (``incomplete=True``).
      reason: why the window was skipped; None with ``incomplete`` gives
        :func:`incomplete_reason` for this process.
      requested_steps: the windows asked for, ``[(start, stop)]`` 1-based batches.
      incomplete: mark the window as being written (staging record).

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
            data = json.loads(f.read().decode("utf-8"))
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
