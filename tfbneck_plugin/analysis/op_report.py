"""The report's ``top_ops`` and ``op_summary`` (the manual's "Which operations take the time",
docs/ops.md), from an :class:`.ops.OpTable`: per-step times in ms, shares, and the grouped views (by op
type, by layer scope, the share of the ten costliest ops). Shapes only: every number comes
from :mod:`.ops`.
"""
from __future__ import annotations

import re
from typing import Dict, List, Literal, Optional

import numpy as np

from ..schema import OpGroup, OpSummary, TopOp
from .ops import WHERE, OpRow, OpTable

#: Rows kept per place (device, host, input pipeline) and per grouped view: what a
#: ``key_averages().table(row_limit=...)`` shows, with room for ``--row-limit``.
ROW_LIMIT = 25
#: How many costliest ops the ``top10_pct`` share covers ("the share of the top 10").
TOP_N = 10
#: Kernels that run on Tensor Cores, by name, as XProf's kernel_stats tool decides it
#: (xprof: convert/kernel_stats_utils IsKernelUsingTensorCore: cuBLAS/cuDNN ``884``/``1688``
#: MMA shapes, ``hmma``/``xmma``), widened to Ampere/Hopper names (``16816``, ``imma``,
#: ``gmma``, CUTLASS ``tensorop``).
TENSOR_CORE_RE = re.compile(r"884|1688|16816|hmma|xmma|imma|gmma|tensorop", re.I)
#: Kernels working in 16-bit floats, by the type their name carries (``fp16``, ``bf16``,
#: ``half``; cuBLAS ``h884``/``h1688`` half-precision MMA kernels).
REDUCED_PRECISION_RE = re.compile(r"fp16|bf16|bfloat16|\bhalf\b|__half|_h884|_h1688|_f16", re.I)


def _ms(ps: float, steps: int) -> float:
    return round(float(ps) / 1e9 / max(steps, 1), 3)


def _pct(ps: float, table: OpTable, where: str) -> float:
    """Share (%) of the device's busy time (device rows) or of the steady step (others)."""
    base = table.device_busy_ps if where == "device" else table.step_ps * table.steps
    return round(100.0 * ps / base, 2) if base > 0 else 0.0


def op_row(r: OpRow, table: OpTable, origin: int) -> TopOp:
    """One row of ``top_ops`` (ms per steady step; ``longest``: the op's longest occurrence,
    its start from the host window's start, as ``worst_step``)."""
    n = table.steps
    out: TopOp = {"name": r.name, "type": r.type, "where": r.where,
           "self_ms_per_step": _ms(r.self_ps, n), "total_ms_per_step": _ms(r.total_ps, n),
           "pct": _pct(r.self_ps, table, r.where), "count_per_step": round(r.count / max(n, 1), 2),
           "scope": table.scope(r),
           "self_ms_steps": np.round(r.per_step / 1e9, 3).tolist() if r.per_step is not None else [],
           "longest": {"start_ms": round((r.longest_start_ps - origin) / 1e9, 3),
                       "duration_ms": round(r.longest_ps / 1e9, 3)}}
    if r.where == "input_pipeline":
        out["stage"] = r.stage
    if r.where == "device":
        kernels = sorted(r.kernels.items(), key=lambda kv: -kv[1])
        out["kernels"] = [k for k, _ in kernels[:3]]
        out["tensor_core"] = any(TENSOR_CORE_RE.search(k) for k, _ in kernels)
        out["reduced_precision"] = any(REDUCED_PRECISION_RE.search(k) for k, _ in kernels)
    return out


def top_ops(table: OpTable, origin: int, limit: int = ROW_LIMIT) -> List[TopOp]:
    """The ``limit`` costliest ops (self time) of each place, costliest first."""
    out: List[TopOp] = []
    for where in WHERE:
        rows = sorted((r for r in table.rows if r.where == where), key=lambda r: -r.self_ps)[:limit]
        out.extend(op_row(r, table, origin) for r in rows)
    return sorted(out, key=lambda row: -row["self_ms_per_step"])


def _grouped(table: OpTable, key, label: Literal["type", "scope"]) -> List[OpGroup]:
    """Rows summed by ``key(row) -> (where, stage, group) or None``, costliest first, ``ROW_LIMIT`` per place."""
    groups: Dict[tuple, List[float]] = {}
    for r in table.rows:
        k = key(r)
        if k is None:
            continue
        g = groups.setdefault(k, [0.0, 0, 0])
        g[0] += r.self_ps
        g[1] += r.count
        g[2] += 1
    out: List[OpGroup] = []
    for where in WHERE:
        mine = sorted(((k, g) for k, g in groups.items() if k[0] == where), key=lambda kg: -kg[1][0])
        for (w, stage, name), (ps, count, n_ops) in mine[:ROW_LIMIT]:
            row: OpGroup = {"where": w}
            row[label] = name
            row.update({"self_ms_per_step": _ms(ps, table.steps), "pct": _pct(ps, table, w),
                        "count_per_step": round(count / max(table.steps, 1), 2), "ops": int(n_ops)})
            if w == "input_pipeline":
                row["stage"] = stage
            out.append(row)
    return out


def op_summary(table: OpTable) -> OpSummary:
    """The report's ``op_summary``: what the shares are of, the per-place totals, and the
    grouped views (``by_type``, ``by_scope``, ``top10_pct``)."""
    totals, top10 = {}, {}
    for where in WHERE:
        selfs = sorted((r.self_ps for r in table.rows if r.where == where), reverse=True)
        if selfs:
            totals[where] = _ms(sum(selfs), table.steps)
            top10[where] = round(100.0 * sum(selfs[:TOP_N]) / sum(selfs), 2) if sum(selfs) > 0 else 0.0
    return {
        "steps": table.steps,
        "step_ms": round(table.step_ps / 1e9, 3),
        "device_busy_ms_per_step": _ms(table.device_busy_ps, table.steps) if table.device_busy_ps else None,
        "self_ms_per_step": totals,
        "top10_pct": top10,
        "by_type": _grouped(table, lambda r: (r.where, r.stage, r.type or r.name), "type"),
        "by_scope": _grouped(table, lambda r: (r.where, r.stage, s) if (s := table.scope(r)) else None, "scope"),
    }


def stage_types(summary: OpSummary, stage: Optional[str], limit: int = 3) -> List[OpGroup]:
    """The costliest op types inside one tf.data stage's function (``by_type`` rows)."""
    return [g for g in summary.get("by_type", []) if g["where"] == "input_pipeline" and g.get("stage") == stage][:limit]
