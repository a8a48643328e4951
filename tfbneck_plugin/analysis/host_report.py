"""The host-level part of a session report (README "The report"): the report's sections,
each from the analysis values it names (:class:`.host_analysis.HostAnalysis` passes them).
Shapes only: every number comes from the analysis."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ..trace import timeline
from ..trace.timeline import ms, ms_list
from . import breakdown, tfdata
from ..schema import InputPipeline, StepItem, Steps, StepTime, WorstStep
from .findings import StepFacts
from .thresholds import INPUT_MODERATE_PCT


def step_stats(durations_ps: np.ndarray) -> StepTime:
    """mean, p50, p90, min, max of step durations, in ms."""
    d = durations_ps.astype(np.float64) / 1e9
    t = timeline.time_stats(d)
    return {"mean": t["mean"], "p50": t["p50"], "p90": t["p90"], "min": round(float(d.min()), 3),
            "max": round(float(d.max()), 3)}


def steps_section(steps, search, parts: Dict[str, np.ndarray], origin: int, facts: StepFacts,
                  odd: Optional[np.ndarray] = None) -> Steps:
    """The report's ``steps`` object (times in ms; warm-up, odd steps and graph builds when present).

    Args:
      steps: the steady steps or None; search: the step finders' :class:`.steps.StepSearch`;
      parts: ps per breakdown category per step; origin: time 0 of ``start_ms`` (ps);
      facts: the findings' :class:`.findings.StepFacts`; odd: which found steps are odd
      (bool, shape (n_found,); :mod:`.odd_steps`).
    """
    tried = [{"finder": f, "why_not": why} for f, why in search.tried]
    if steps is None:
        return {"count": 0, "step_time_ms": None, "items": [], "dropped_partial": 0, "batches_per_step": 1,
                "tried": tried, "why_none": facts.why_none}
    n = steps.count
    # One conversion per column (timeline.ms_list), not one ms() per value: the same numbers.
    columns = zip(steps.numbers[:n].tolist(), ms_list(steps.starts - origin), ms_list(steps.ends - steps.starts),
                  *(ms_list(parts[c][:n]) for c in breakdown.CATEGORIES))
    items: List[StepItem] = [{"step": number, "start_ms": start, "duration_ms": duration,
              "breakdown_ms": dict(zip(breakdown.CATEGORIES, cells))} for number, start, duration, *cells in columns]
    stats = step_stats(steps.durations_ps)
    out: Steps = {"count": steps.count, "step_time_ms": stats, "items": items, "dropped_partial": steps.dropped_partial,
           "batches_per_step": steps.batches_per_step,
           "time_per_batch_ms": round(stats["mean"] / steps.batches_per_step, 3), "notes": steps.notes,
           "tried": tried}
    if facts.warmup_count:
        found = search.steps
        out["warmup"] = {"count": facts.warmup_count, "time_ms": facts.warmup_ms, "reason": facts.warmup_reason,
                         "steps": [int(n) for n in found.numbers[found.warmup]], "excluded": not facts.all_warmup}
    if facts.odd and odd is not None and odd.any():
        found = search.steps
        out["outliers"] = {"steps": [int(n) for n in found.numbers[odd]],
                           "time_ms": ms(int(found.durations_ps[odd].sum())), "reason": facts.odd}
    if facts.graph_build_steps:
        out["graph_builds"] = {"steps": facts.graph_build_steps, "time_ms": facts.graph_build_ms,
                               "pct": round(facts.graph_build_pct, 2)}
    return out


def worst_step(steps, parts: Dict[str, np.ndarray], origin: int) -> Optional[WorstStep]:
    """The step with the most input wait (else the longest): the Trace Viewer link opens it.

    ``start_ms`` counts from the analysed window's start (``origin``, as ``steps.items``);
    ``trace_start_ms`` / ``trace_end_ms`` are the step's bounds on the Trace Viewer's own
    time axis: the trace's event times, which XProf draws as they are (ms from the
    profile's start; seen equal to the step marker's ``ts`` in XProf 2.24's trace JSON)."""
    if steps is None or not steps.count:
        return None
    k = int(np.argmax(parts["input"])) if parts["input"].sum() > 0 else int(np.argmax(steps.durations_ps))
    return {"step": int(steps.numbers[k]), "start_ms": ms(steps.starts[k] - origin),
            "duration_ms": ms(steps.ends[k] - steps.starts[k]), "input_ms": ms(parts["input"][k]),
            "trace_start_ms": round(float(steps.starts[k]) / 1e9, 6),
            "trace_end_ms": round(float(steps.ends[k]) / 1e9, 6)}


def input_pipeline_section(pipeline: Optional[tfdata.Pipeline], input_pct: float) -> InputPipeline:
    """The report's ``input_pipeline``: the blocking stage, the stages, and whether the
    pipeline prefetches. The busiest stage blocks only when the step waits for input at all
    (``input_pct`` >= XProf's "moderately input-bound" level, ``rules.INPUT_MODERATE_PCT``):
    a pipeline that keeps ahead of the step has no blocking stage (``busiest_stage`` keeps it)."""
    busiest = pipeline.blocking.path if (pipeline and pipeline.blocking) else None
    blocks = busiest is not None and input_pct >= INPUT_MODERATE_PCT
    return {"bottleneck_stage": busiest if blocks else None, "busiest_stage": busiest,
            "stages": tfdata.stage_rows(pipeline, 0, blocks) if pipeline else [],
            "has_prefetch": bool(pipeline and pipeline.has_prefetch),
            "py_function_ms": (round(pipeline.py_function_ps / 1e9, 3)
                               if pipeline and pipeline.py_function_ps is not None else None)}
