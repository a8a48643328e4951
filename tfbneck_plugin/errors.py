"""Errors, in one place: the base of every error tfbneck raises for input it cannot use
(:class:`TfbneckError`), the first line of an error's message (:func:`first_line`), and the
report of a session that cannot be analysed, which is still a report (``status: "error"``),
with a one-line ``error`` naming the file and a machine-readable ``error_kind`` that the
TensorBoard tab and scripts map to their own explanations.
"""
from __future__ import annotations

from typing import Dict, Optional

from .schema import SessionDict

class TfbneckError(Exception):
    """The base of the errors tfbneck raises for input it cannot use: a path that holds no
    session (:class:`tfbneck_plugin.logdir.DiscoveryError`), a trace it cannot read
    (``trace.xspace.TraceReadError``), a sidecar or system record (``records.SidecarError``),
    remote storage (``remote.RemoteError``), two runs it cannot compare
    (:class:`tfbneck_plugin.comparison.compare.CompareError`), a standard output that cannot take the
    report (``render.console.OutputError``) and a bad query to the tab's routes
    (``plugin.query.RouteError``). ``str(err)`` is one line naming the file or value and what
    is wrong: ``except tfbneck_plugin.TfbneckError`` handles them all."""


def first_line(err: object, default: str = "") -> str:
    """The first line of ``str(err)`` (an exception or a recorded message), stripped;
    ``default`` when the message is empty.
    Library errors (protobuf's DecodeError, botocore's, OSError's) can run to many lines:
    a report's ``error`` and a log line keep the first."""
    text = str(err).strip()
    return text.splitlines()[0].strip() if text else default


#: error_kind -> what it means (the frontend has its own, longer wording per kind).
ERROR_KINDS: Dict[str, str] = {
    "empty_file": "the trace file is empty (still being written, or the profiler crashed)",
    "corrupt": "the trace file is truncated or corrupt",
    "not_xspace": "the file is not an XSpace trace",
    "too_large": "the trace is larger than the configured limit",
    "unreadable": "the trace file cannot be read (permissions, not a regular file, storage error)",
    "legacy_only": "only per-tool files of TensorFlow <= 2.10, no .xplane.pb",
    "skipped": "BottleneckProfiler could not capture this window and recorded why",
    "incomplete": "the training process stopped inside this window before its trace was saved",
    "analysis_failed": "the analyzer failed on this trace (a bug: please report it)",
    "out_of_memory": "the trace did not fit in memory",
    "not_found": "the path holds no profiling session",
    "bad_system_record": "the system record (tfbneck watch --output) cannot be read or is not one",
    "unreachable": "remote storage could not be reached",
}


def error_report(session, kind: str, message: str, skipped: Optional[str] = None,
                 incomplete: Optional[str] = None) -> SessionDict:
    """The report of a session that could not be analysed.

    Args:
      session: a :class:`tfbneck_plugin.logdir.Session` (``run``, ``name``, ``hosts``, ``path``).
      kind: a key of ``ERROR_KINDS``.
      message: one line naming the file and what is wrong.
      skipped: the reason BottleneckProfiler recorded for a skipped window (``skipped``).
      incomplete: why an incomplete window's trace was not saved (``incomplete``).

    Raises:
      KeyError: ``kind`` is not a known error kind.
    """
    ERROR_KINDS[kind]  # a typo here would reach the frontend as an unexplained error
    out: SessionDict = {"run": session.run, "session": session.name, "hosts": session.hosts,
                        "path": session.path, "status": "error", "error": message, "error_kind": kind,
                        "bottleneck": "unknown", "step_source": "none"}
    if skipped is not None:
        out["skipped"] = skipped
    if incomplete is not None:
        out["incomplete"] = incomplete
    return out


def path_error_report(path: str, err) -> SessionDict:
    """The report row of a PATH that cannot be searched (a ``logdir.DiscoveryError``): the
    local and the Beam runner both give it and go on with the other PATHs.

    ``run`` is the PATH as given (no session under it is known), ``session`` empty,
    ``error_kind`` ``not_found`` or ``unreachable``."""
    kind = getattr(err, "kind", None) or "not_found"
    return {"run": path, "session": "", "hosts": [], "path": path, "status": "error",
            "error": str(err), "error_kind": kind, "bottleneck": "unknown", "step_source": "none"}
