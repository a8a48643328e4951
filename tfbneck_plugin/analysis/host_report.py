"""The host-level part of a session report (README "The report"), from a
:class:`.host_analysis.HostAnalysis`. Shapes only: every number comes from the analysis."""
from __future__ import annotations

from typing import Dict

import numpy as np

from . import breakdown, tfdata
from .rules import INPUT_MODERATE_PCT
from .sync import sync_section
from .verdict import verdict_fields


def _ms(ps) -> float:
    return round(float(ps) / 1e9, 3)


def step_stats(durations_ps: np.ndarray) -> Dict[str, float]:
    """mean, p50, p90, min, max of step durations, in ms."""
    d = durations_ps.astype(np.float64) / 1e9
    return {"mean": round(float(d.mean()), 3), "p50": round(float(np.percentile(d, 50)), 3),
            "p90": round(float(np.percentile(d, 90)), 3), "min": round(float(d.min()), 3),
            "max": round(float(d.max()), 3)}


def steps_section(a) -> Dict:
    """The report's ``steps`` object (times in ms; warm-up and graph builds when present)."""
    steps, search, parts = a.steps, a.step_search, a.parts
    tried = [{"finder": f, "why_not": why} for f, why in search.tried]
    if steps is None:
        return {"count": 0, "step_time_ms": None, "items": [], "dropped_partial": 0, "batches_per_step": 1,
                "tried": tried, "why_none": a.findings.steps.why_none}
    items = [{"step": int(steps.numbers[i]), "start_ms": _ms(steps.starts[i] - a.origin),
              "duration_ms": _ms(steps.ends[i] - steps.starts[i]),
              "breakdown_ms": {c: _ms(parts[c][i]) for c in breakdown.CATEGORIES}} for i in range(steps.count)]
    stats = step_stats(steps.durations_ps)
    out = {"count": steps.count, "step_time_ms": stats, "items": items, "dropped_partial": steps.dropped_partial,
           "batches_per_step": steps.batches_per_step,
           "time_per_batch_ms": round(stats["mean"] / steps.batches_per_step, 3), "notes": steps.notes,
           "tried": tried}
    facts = a.findings.steps
    if facts.warmup_count:
        found = search.steps
        out["warmup"] = {"count": facts.warmup_count, "time_ms": facts.warmup_ms, "reason": facts.warmup_reason,
                         "steps": [int(n) for n in found.numbers[found.warmup]], "excluded": not facts.all_warmup}
    odd = getattr(a, "_odd", None)
    if facts.odd and odd is not None and odd.any():
        found = search.steps
        out["outliers"] = {"steps": [int(n) for n in found.numbers[odd]],
                           "time_ms": _ms(int(found.durations_ps[odd].sum())), "reason": facts.odd}
    if facts.graph_build_steps:
        out["graph_builds"] = {"steps": facts.graph_build_steps, "time_ms": facts.graph_build_ms,
                               "pct": round(facts.graph_build_pct, 2)}
    return out


def worst_step(a):
    """The step with the most input wait (else the longest): the Trace Viewer link opens it."""
    steps, parts = a.steps, a.parts
    if steps is None or not steps.count:
        return None
    k = int(np.argmax(parts["input"])) if parts["input"].sum() > 0 else int(np.argmax(steps.durations_ps))
    return {"step": int(steps.numbers[k]), "start_ms": _ms(steps.starts[k] - a.origin),
            "duration_ms": _ms(steps.ends[k] - steps.starts[k]), "input_ms": _ms(parts["input"][k])}


def host_report(a) -> Dict:
    """The host-level report fields of a :class:`.host_analysis.HostAnalysis`."""
    pipeline = a.pipeline
    v = a.verdict
    device_kind = a.devices[0].kind if a.devices else a.device_kind
    # The busiest stage blocks only when the step waits for input at all (XProf's "moderately
    # input-bound" level): a pipeline that keeps ahead of the step has no blocking stage.
    blocks = bool(pipeline and pipeline.blocking) and a.breakdown_pct.get("input", 0.0) >= INPUT_MODERATE_PCT
    out = {
        "framework": a.framework,
        "device_kind": device_kind,
        "devices": a.device_rows,
        "window_ms": _ms(a.window[1] - a.window[0]) if a.window else 0.0,
        "events": a.space.n_events,
        "step_source": a.steps.source if a.steps is not None else "none",
        "steps": steps_section(a),
        "breakdown_pct": a.breakdown_pct,
        "input_pipeline": {
            "bottleneck_stage": pipeline.blocking.path if blocks else None,
            "busiest_stage": pipeline.blocking.path if (pipeline and pipeline.blocking) else None,
            "stages": tfdata.stage_rows(pipeline, 0, blocks) if pipeline else [],
            "has_prefetch": bool(pipeline and pipeline.has_prefetch),
        },
        **verdict_fields(v),
        "worst_step": None if v.cause == "not_tensorflow" else worst_step(a),
    }
    sync = sync_section(a)  # steps with collectives: what a multi-worker job's root cause needs
    if sync is not None:
        out["sync"] = sync
    return out
