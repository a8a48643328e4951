"""The top-ops table of a session report (``tfbneck analyze --ops``), shaped like PyTorch's
``key_averages().table(sort_by=..., row_limit=...)``: one row per op, its self time per
steady step, share, calls per step, inclusive time and, on a device, its kernels.

Reads only the report's ``top_ops`` and ``op_summary`` (:mod:`.analysis.op_report`).
"""
from __future__ import annotations

from typing import List

from ..analysis.ops import XLA_TYPE
from ..schema import SessionDict, TopOp

#: ``--sort`` choices: which place's ops come first (each sorted by self time).
SORTS = {"self": (), "device": ("device",), "host": ("host", "input_pipeline")}
WHERE_LABEL = {"device": "device", "host": "host", "input_pipeline": "tf.data"}
#: The framework whose ops a report's rows are, by its ``framework`` field (TensorFlow's otherwise).
FRAMEWORK_LABEL = {"pytorch": "PyTorch"}


def sorted_ops(report: SessionDict, sort: str = "self", row_limit: int = 10) -> List[TopOp]:
    """``row_limit`` rows of ``top_ops``: with ``sort="device"`` or ``"host"`` only that
    place's ops (host includes the tf.data functions' ops), else all; costliest self time first."""
    first = SORTS[sort]
    rows = [r for r in report.get("top_ops") or [] if not first or r["where"] in first]
    return sorted(rows, key=lambda r: -r["self_ms_per_step"])[:max(row_limit, 0)]


def _name(r: TopOp, width: int) -> str:
    name = r["name"]
    return name if len(name) <= width else "..." + name[-(width - 3):]


def to_text(report: SessionDict, sort: str = "self", row_limit: int = 10, name_width: int = 60) -> str:
    """The op table of one session report, then its costliest op types."""
    summary = report.get("op_summary") or {}
    title = f"{report.get('run')}/{report.get('session')}"
    rows = sorted_ops(report, sort, row_limit)
    if not rows:
        return f"{title}: no {FRAMEWORK_LABEL.get(report.get('framework') or '', 'TensorFlow')} ops in the steady steps\n"
    cols = ["Name", "Type", "Where", "Self ms/step", "Self %", "Calls/step", "Total ms/step", "Kernels"]
    cells = [[_name(r, name_width), r["type"], WHERE_LABEL.get(r["where"], r["where"]), f"{r['self_ms_per_step']:.3f}",
              f"{r['pct']:.1f}", f"{r['count_per_step']:g}", f"{r['total_ms_per_step']:.3f}",
              ", ".join(k[:40] for k in r.get("kernels") or [])[:60]] for r in rows]
    if report.get("framework") == "pytorch":  # a PyTorch op's type is its name: one column says it
        scoped = any(r.get("scope") for r in rows)  # nn.Module scopes: an op's rows kept apart by module
        cols[1:2] = ["Module"] if scoped else []
        for row, r in zip(cells, rows):
            row[1:2] = [r.get("scope") or ""] if scoped else []
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    rule = "  ".join("-" * w for w in widths)
    out = [f"{title}: top ops over {summary.get('steps')} steady steps of {summary.get('step_ms')} ms "
           f"(Self %: of the step; device ops: of the device's busy time)", rule,
           "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip(), rule]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    out.append(rule)
    blocking = (report.get("input_pipeline") or {}).get("bottleneck_stage")
    if blocking and "Generator" not in blocking.split("::")[-1] and \
            not any(g["where"] == "input_pipeline" for g in summary.get("by_type") or []):
        from ..analysis.op_advice import NO_TFDATA_OPS
        out.append(NO_TFDATA_OPS.format(stage=blocking.split("::")[-1]))
    for r in report.get("top_ops") or []:  # an XLA executable's rows add up to its runs' wall time
        if r["type"] == XLA_TYPE:
            out.append(f"{r['name']}: {r['total_ms_per_step']:.3f} ms/step of XLA executable wall time in all, its own row "
                       f"(no HLO op recorded) and its HLO ops' (each instant shared among the ops running)")
    for where, ms in (summary.get("self_ms_per_step") or {}).items():
        top = (summary.get("top10_pct") or {}).get(where)
        types = [g for g in summary.get("by_type") or [] if g["where"] == where][:3]
        kinds = ", ".join(f"{g['type']} {g['self_ms_per_step']:.3f} ms ({g['pct']:.1f} %)" for g in types)
        out.append(f"{WHERE_LABEL.get(where, where)} ops: {ms:.3f} ms/step self time, top 10 ops {top:.1f} % of it; "
                   f"by type: {kinds}")
    return "\n".join(out) + "\n"
