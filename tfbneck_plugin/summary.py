"""A session report reduced to the figures a fleet view adds up (``summarize``): a few
hundred bytes instead of a report's tens of kilobytes, so that 10,000 cached sessions are
read in well under a second. No TensorFlow here.

Every figure comes from the session report (README "The report"):

    ``profiled_ms``         mean step time x steady steps: the time the profiled steps took (ms)
    ``categories_ms``       ``breakdown_pct`` x ``profiled_ms`` / 100, per breakdown category (ms)
    ``time_per_batch_ms``   ``steps.time_per_batch_ms`` (a step covers ``batches_per_step``
                            batches with ``steps_per_execution`` > 1), else the mean step time
    ``best_fix``            the fix to make first (the report's first recommendation) with its
                            ``worth`` string and the numbers that rank it (:func:`best_fix`)
"""
from __future__ import annotations

from typing import Dict, Optional

from . import schema
from .analysis.breakdown import CATEGORIES

#: Format of a summary; bumped when its fields change (the cache then recomputes it).
SUMMARY_FORMAT = 3


def best_fix(report: schema.Report) -> Optional[Dict]:
    """``{"fix", "title", "worth", "time_per_batch_ms", "step_time_ms", "speedup", "basis"}``
    of the fix to make first: the report's first recommendation (the report ranks them,
    ``analysis.whatif._order``), so that a fleet names the fix its session's report names,
    with the same ``worth`` string. The numbers rank the runs: ``basis`` ``predicted`` gives
    its prediction; ``bound`` (no model, but a bound ``bound_ms`` from the share of the step it
    acts on) counts it at the middle of [bound, now], as the report ranks it; ``None``
    (neither) leaves ``time_per_batch_ms``, ``step_time_ms`` and ``speedup`` None. None when
    the report recommends nothing."""
    rec = schema.first_fix(report)
    if rec is None:
        return None
    given = (report.get("steps") or {}).get("time_per_batch_ms")
    now = float(given) if isinstance(given, (int, float)) and given > 0 else None
    bps = int((report.get("steps") or {}).get("batches_per_step") or 1)
    pred = rec.get("predicted") or {}
    tpb, step, speedup, basis = pred.get("time_per_batch_ms"), pred.get("step_time_ms"), pred.get("speedup"), None
    if isinstance(tpb, (int, float)) and tpb > 0:
        basis = "predicted"
    elif isinstance(rec.get("bound_ms"), (int, float)) and now is not None:
        tpb = (float(rec["bound_ms"]) + now) / 2.0
        step, speedup, basis = round(tpb * bps, 3), round(now / tpb, 2), "bound"
    else:
        tpb = step = speedup = None
    worth = rec.get("worth")
    return {"fix": rec.get("fix"), "title": rec.get("title"),
            "worth": worth if isinstance(worth, str) else schema.worth(rec, now),
            "time_per_batch_ms": float(tpb) if tpb is not None else None,
            "step_time_ms": step, "speedup": speedup, "basis": basis}


def summarize(report: schema.Report) -> Dict:
    """The fleet's figures of one session report (format in the module docstring), plus its
    identity (``run``, ``session``, ``path``), ``status``, ``error_kind``, ``error``,
    ``bottleneck``, ``cause``, ``device_kind``, ``hosts``, ``kind`` and ``steps`` (steady
    steps counted), ``batches_per_step``, ``step_time_ms`` (mean, ms), and the first fix
    (``fix_first``: its ``fix`` and ``title``)."""
    out = {"format": SUMMARY_FORMAT, "run": report.get("run"), "session": report.get("session"),
           "path": report.get("path"), "status": report.get("status"), "kind": report.get("kind"),
           "hosts": list(report.get("hosts") or []), "device_kind": report.get("device_kind")}
    if report.get("status") != "ok":
        out.update(error_kind=report.get("error_kind"), error=report.get("error"))
        return out
    steps = report.get("steps") or {}
    mean = schema.step_time_ms(report)
    count = int(steps.get("count") or 0)
    bps = int(steps.get("batches_per_step") or 1)
    profiled = float(mean) * count if isinstance(mean, (int, float)) else 0.0
    pct = report.get("breakdown_pct") or {}
    first = schema.first_fix(report)
    tpb = steps.get("time_per_batch_ms")
    if not isinstance(tpb, (int, float)) and isinstance(mean, (int, float)):
        tpb = float(mean) / bps
    out.update(bottleneck=report.get("bottleneck", "unknown"), cause=report.get("cause"),
               confidence=report.get("confidence"), steps=count, batches_per_step=bps, step_time_ms=mean,
               time_per_batch_ms=tpb, profiled_ms=profiled,
               categories_ms={c: float(pct.get(c) or 0.0) * profiled / 100.0 for c in CATEGORIES},
               best_fix=best_fix(report),
               fix_first={"fix": first.get("fix"), "title": first.get("title")} if first else None)
    return out
