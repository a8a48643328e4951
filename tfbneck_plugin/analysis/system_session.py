"""The report of a system-only session: a system record (``tfbneck watch --output FILE``, or
the callback's whole-run record of a run with no profiled window) shown beside the profiled
sessions, in ``tfbneck analyze``, the Python API and the Bottleneck tab.

Its verdict is step 1 of the method, the flowchart's triage of the system metrics
(:mod:`tfbneck_plugin.system.triage`), said as such: ``cause`` is one of :data:`TRIAGE_CAUSES`,
``confidence`` at most :data:`SYSTEM_ONLY_CONFIDENCE`, no steps and no breakdown (there is no
trace), and one recommendation: profile a window where the triage points (step 2). The
report is a :class:`tfbneck_plugin.schema.SessionDict` with ``kind: "system_only"`` and
``system_triage`` (the record's run triage); see docs/report.md.
"""
from __future__ import annotations

from typing import Any, Dict, List

from .. import records
from ..causes import cause_text
from ..errors import error_report, first_line
from ..logdir import Session
from ..schema import Recommendation, SessionDict
from ..version import __version__
from .advice import profile_window
from .whatif import WHY_NOT

#: The triage's kinds (:data:`tfbneck_plugin.system.triage.KINDS`) -> the report's cause codes.
TRIAGE_CAUSES = {"cpu": "triage_cpu", "device": "triage_device", "io": "triage_io",
                 "network": "triage_network", "unclear": "triage_unclear"}
#: The highest confidence of a verdict from system metrics alone, reached when the kind held
#: for the whole record (confidence = this x the kind's share of the time). Our choice: the
#: flowchart is a triage, and its own source (shared/design/diagnosis.md) sends every
#: answer on to a profile; a trace's verdict is what earns more.
SYSTEM_ONLY_CONFIDENCE = 0.5
#: Why the one recommendation carries no prediction.
PROFILE_WHY_NOT = WHY_NOT["profile_window"]


def system_only_report(session: Session, opener=open) -> SessionDict:
    """The report of a system-only session (``session.system_record`` set).

    Never raises for bad input: a record that cannot be read gets ``status: "error"`` with
    ``error_kind`` ``bad_system_record`` and one line naming the file.
    """
    path = str(session.system_record)
    try:
        record = records.read_system_run(path, opener)
        return _report(session, path, record)
    except records.SidecarError as err:
        return error_report(session, "bad_system_record", str(err))
    except (TypeError, ValueError, KeyError, AttributeError) as err:  # a field of the wrong kind
        return error_report(session, "bad_system_record", f"{path}: not a valid system record ({type(err).__name__}: "
                                                          f"{first_line(err, 'bad value')})")


def _report(session: Session, path: str, record: Dict) -> SessionDict:
    triage: Dict[str, Any] = record["triage"] if isinstance(record.get("triage"), dict) else {}
    kind = str(triage.get("bottleneck"))
    kind = kind if kind in TRIAGE_CAUSES else "unclear"
    cause = TRIAGE_CAUSES[kind]
    seconds = float(triage.get("seconds") or 0.0)
    share = float((triage.get("shares") or {}).get(kind, 0.0) or 0.0)
    gpus_seen = any(iv.get("gpus") for iv in record["intervals"])
    recs: List[Recommendation] = [{**r, "predicted": None, "predicted_why_not": PROFILE_WHY_NOT}
                                  for r in profile_window(kind, record.get("pid"))]
    evidence = _evidence(record, triage, seconds)
    report: SessionDict = {
        "version": __version__, "run": session.run, "session": session.name,
        "hosts": [str(record.get("host") or "")], "path": path, "status": "ok", "kind": "system_only",
        "device_kind": "GPU" if gpus_seen else "CPU", "step_source": "none", "steps": {"count": 0},
        "bottleneck": "unknown" if kind == "unclear" else kind, "cause": cause, "cause_text": cause_text(cause),
        "confidence": round(SYSTEM_ONLY_CONFIDENCE * share, 2),
        "evidence": evidence,
        "recommendations": recs,
        "system_triage": triage,
        "system_intervals": _intervals(record),
        "system_record": {k: record.get(k) for k in ("source", "pid", "command", "cpu_count", "interval_s",
                                                      "aggregate_s", "start_unix_ns", "end_unix_ns", "captures")},
    }
    report["evidence_detail"] = [{"text": e, "basis": "system_metrics"} for e in evidence]
    if record.get("error"):
        report["warnings"] = [f"{path}: the sampler stopped early: {record['error']}"]
    return report


def _evidence(record: Dict, triage: Dict, seconds: float) -> List[str]:
    source = "tfbneck watch" if record.get("source") == "watch" else "BottleneckProfiler's whole-run sampling"
    command = " ".join(record.get("command") or [])
    out = [f"System metrics only, no trace: {seconds:.0f} s of process {record.get('pid')}"
           + (f" ({command})" if command else "") + f" sampled by {source}, {len(record['intervals'])} interval(s)"]
    if triage.get("reason"):
        out.append(f"Triage: {triage['reason']}")
    shares = triage.get("shares") or {}
    if len(shares) > 1:
        out.append("Over the record: " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in
                                                   sorted(shares.items(), key=lambda kv: -kv[1])) + " of the time")
    if triage.get("caveat"):
        out.append(str(triage["caveat"]))
    for c in record.get("captures") or []:
        if isinstance(c, dict) and c.get("session"):
            out.append(f"Captured while watched: {c['session']} ({c.get('bottleneck')} / {c.get('cause')})")
    return out


def _intervals(record: Dict) -> List[Dict[str, Any]]:
    """The record's intervals as the tab draws them: ``t_s`` (end, seconds from the record's
    start), ``dt_s``, ``tree_cores`` and ``cores_busy`` (cores), ``gpu_util_pct`` (the busiest
    accelerator's, or None), ``disk_read_MBps``, ``net_MBps`` (in + out) and ``bottleneck``
    (the interval's triage)."""
    start = int(record.get("start_unix_ns") or 0)
    out = []
    for iv in record["intervals"]:
        gpus = [float(g["util_pct"]) for g in iv.get("gpus") or []
                if isinstance(g, dict) and isinstance(g.get("util_pct"), (int, float))]
        out.append({"t_s": round((int(iv.get("t_unix_ns") or start) - start) / 1e9, 2), "dt_s": iv.get("dt_s"),
                    "tree_cores": iv.get("tree_cores"), "cores_busy": iv.get("cores_busy"),
                    "gpu_util_pct": max(gpus) if gpus else None, "disk_read_MBps": iv.get("disk_read_MBps"),
                    "net_MBps": round(float(iv.get("net_recv_MBps") or 0) + float(iv.get("net_sent_MBps") or 0), 3),
                    "bottleneck": (iv.get("triage") or {}).get("bottleneck")})
    return out
