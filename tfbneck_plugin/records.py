"""The files BottleneckProfiler writes beside a trace, in one place: their names, their
formats, how they are written (atomically) and read. The capture side writes them; the
analyzer and discovery read them. No TensorFlow here.

Files (all JSON, written with a temporary file + rename so a reader never sees torn JSON):

* ``tfbneck_system_metrics.json`` (``SIDECAR_NAME``) in a session folder: the system
  metrics sampled during the window (format below).
* ``tfbneck_skipped.json`` (``SKIPPED_NAME``): a window that could not be captured,
  ``{"format": "tfbneck.skipped", "version": 1, "reason": str, ...}``; in a staging
  folder it marks the window as incomplete until it is published.
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
                  "gpus": [{"index": int, "util_pct": float, "mem_used_bytes": int}]}]}

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
import tempfile
from typing import Dict

#: Name of the system-metrics sidecar in a session folder.
SIDECAR_NAME = "tfbneck_system_metrics.json"
#: Name of the record of a window that was skipped (or is still being written).
SKIPPED_NAME = "tfbneck_skipped.json"
#: Folder under ``log_dir`` where windows are written before they are published.
STAGING_DIR = ".tfbneck-staging"
FORMAT = "tfbneck.system_metrics"
VERSION = 1


class SidecarError(Exception):
    """The sidecar exists but cannot be used; the message is one line naming the file."""


def write_sidecar(folder: str, data: Dict, name: str = SIDECAR_NAME) -> str:
    """Write ``data`` as JSON into ``folder`` atomically; returns the path."""
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
    try:
        with opener(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise SidecarError(f"{path}: unreadable system metrics ({type(err).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("samples"), list):
        raise SidecarError(f"{path}: not a tfbneck system-metrics file")
    return data


def read_skipped_reason(path: str, opener=open) -> str:
    """The ``reason`` of a skip record; a readable sentence even when the record is not."""
    try:
        with opener(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
        return str(data.get("reason", "unknown reason"))
    except Exception:
        return "unknown reason (unreadable record)"
