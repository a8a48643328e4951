"""The change made between two runs, and the baseline's prediction for it: which of the
baseline's recommended fixes the candidate shows (:func:`detect_changes`, read from the two
session reports), and each one's predicted time per batch against the measured one
(:func:`prediction_check`), the best-explaining one ``credited`` (:func:`credited`). Used by
:func:`.comparison.compare_reports`; no TensorFlow."""
from __future__ import annotations

from typing import Any, Dict, List, Optional


def credited(predictions: List[Dict], allowed: bool = True) -> List[Dict]:
    """Marks ``credited`` the change whose prediction explains the measured time best (the
    smallest error; a measured time inside a prediction's range wins), when several were made;
    none when not ``allowed`` (two different models: no one change explains the difference)."""
    scored = [p for p in predictions if p.get("predicted_ms") is not None] if allowed else []
    best = min(scored, key=lambda p: (not p["within_range"], abs(p["error_pct"])), default=None)
    for p in predictions:
        p["credited"] = p is best
    return predictions


def _job_per_batch(report: Dict) -> Optional[float]:
    """The job's own unprofiled time per batch around the report's window (ms), None unknown."""
    job = (report.get("window") or {}).get("job_step_ms")
    per_step = max(int((report.get("steps") or {}).get("batches_per_step") or 1), 1)
    return float(job) / per_step if isinstance(job, (int, float)) and job > 0 else None


def prediction_check(baseline: Dict, candidate: Dict, fix: str, measured: float) -> Dict:
    """The baseline's prediction for ``fix`` against the candidate's time per batch. The
    prediction is made in the baseline trace's units (the profiler's cost included); when
    both sides carry the job's own clock (their trend files), both are taken to it: the
    prediction scaled by the baseline's job / traced ratio, against the candidate's job time
    (``measured_on: "job clock"``), else the candidate's traced window (``"trace"``)."""
    rec = next((r for r in baseline.get("recommendations") or [] if r.get("fix") == fix), None)
    job_b, job_c = _job_per_batch(baseline), _job_per_batch(candidate)
    traced_b = float((baseline.get("steps") or {}).get("time_per_batch_ms") or 0.0)
    scale = job_b / traced_b if job_b and job_c and traced_b > 0 else None
    got = job_c if scale and job_c else measured
    out: Dict[str, Any] = {"fix": fix, "measured_ms": round(got, 3),
                           "measured_on": "job clock" if scale else "trace", "traced_ms": round(measured, 3)}
    if rec is None:
        return dict(out, predicted_ms=None, why_not="the baseline's report did not recommend this change")
    pred = rec.get("predicted")
    if not pred:
        out = dict(out, predicted_ms=None, why_not=rec.get("predicted_why_not") or "no prediction")
        bound = rec.get("bound_ms")
        if isinstance(bound, (int, float)) and bound > 0:  # no model, but its best case
            out["bound_ms"] = round(float(bound) * (scale or 1.0), 3)
        return out
    k = scale or 1.0
    low, high = (round(float(v) * k, 3) for v in pred["range_ms"])
    predicted = round(float(pred["time_per_batch_ms"]) * k, 3)
    return dict(out, predicted_ms=predicted, range_ms=[low, high],
                error_pct=round(100.0 * (predicted - got) / got, 1),
                within_range=bool(low <= got <= high), basis=pred.get("basis"))


def _fixes(report: Dict) -> List[str]:
    return [r.get("fix") for r in report.get("recommendations") or []]


def _parallelism(stage: Dict) -> Optional[int]:
    value: Any = stage.get("parallelism")
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _map_stages(report: Dict) -> List[Dict]:
    return [s for s in (report.get("input_pipeline") or {}).get("stages") or []
            if s.get("kind") in ("Map", "MapAndBatch") or str(s.get("kind", "")).startswith("ParallelMap")]


def _sequential_maps(report: Dict) -> List[Dict]:
    """Map stages that run one element at a time: ``Map``, or a (fused ``MapAndBatch`` /
    ``ParallelMap``) stage whose recorded parallelism is 1."""
    return [s for s in _map_stages(report) if s.get("kind") == "Map" or _parallelism(s) == 1]


def _parallel_maps(report: Dict) -> List[Dict]:
    """Map stages running several elements at once (parallelism > 1, or AUTOTUNE: -1)."""
    def parallel(s: Dict) -> bool:
        return _parallelism(s) not in (1, None, 0) or s.get("autotune") not in (None, False, 0, "0", "false")
    return [s for s in _map_stages(report) if s.get("kind") != "Map" and parallel(s)]


def detect_changes(baseline: Dict, candidate: Dict) -> List[str]:
    """Fix ids of the changes visible between two reports, as far as the reports show them:
    more batches per step (``steps_per_execution``); a sequential map (``Map``, or a fused
    ``MapAndBatch`` / ``ParallelMap`` at parallelism 1) that became a parallel one
    (``parallel_map``: parallelism above 1 or AUTOTUNE; a parallel map is asynchronous and overlaps the step, so
    a prefetch added with it is part of the same change); a prefetch added
    (``prefetch``); a baseline advised to compile its eager step that the candidate no longer
    is (``tf_function``: offered to eager programs only); a baseline advised to cache its
    preprocessing whose candidate has a ``cache()`` stage (``cache``); a baseline advised to run its Python
    input in several workers whose candidate runs more of them, processes or pool threads, as
    the sampler saw them (``pydataset_workers``); a PyTorch baseline whose DataLoader loaded in
    the training process and whose candidate's loads in worker processes (``num_workers``: the
    reports' ``dataloader``)."""
    out = []
    b_steps, c_steps = baseline.get("steps") or {}, candidate.get("steps") or {}
    if (c_steps.get("batches_per_step") or 1) > (b_steps.get("batches_per_step") or 1):
        out.append("steps_per_execution")
    if _sequential_maps(baseline) and not _sequential_maps(candidate) and _parallel_maps(candidate):
        out.append("parallel_map")
    elif not (baseline.get("input_pipeline") or {}).get("has_prefetch") and \
            (candidate.get("input_pipeline") or {}).get("has_prefetch"):
        out.append("prefetch")
    if "cache" in _fixes(baseline) and _caches(candidate) and not _caches(baseline):
        out.append("cache")
    if "tf_function" in _fixes(baseline) and "tf_function" not in _fixes(candidate):
        out.append("tf_function")
    if "pydataset_workers" in _fixes(baseline) and _input_workers(candidate) > max(_input_workers(baseline), 1):
        out.append("pydataset_workers")
    b_loader, c_loader = baseline.get("dataloader") or {}, candidate.get("dataloader") or {}
    if b_loader and c_loader and not b_loader.get("workers") and c_loader.get("workers"):
        out.append("num_workers")
    return out


def _caches(report: Dict) -> bool:
    """The input pipeline has a ``cache()`` stage (tf.data's ``MemoryCache`` /
    ``MemoryCacheImpl`` iterators, ``Cache`` / ``CacheImpl`` for a file cache)."""
    kinds = {"MemoryCache", "MemoryCacheImpl", "Cache", "CacheImpl"}
    return any(st.get("kind") in kinds for st in (report.get("input_pipeline") or {}).get("stages") or [])


def _input_workers(report: Dict) -> int:
    """Workers of the Python input the sampler saw: processes or pool threads."""
    from ..analysis.python_input import input_workers
    return input_workers(report.get("system_metrics"))[0]


def different_models(baseline: Dict, candidate: Dict) -> Optional[str]:
    """One sentence when the two sides' recorded models (the report's ``model``: the
    callback's sidecar) differ in class or parameter count, None when they agree or either
    side has none: the change measured is then between two programs, not one change's effect."""
    a, b = baseline.get("model") or {}, candidate.get("model") or {}
    if not a or not b:
        return None

    def said(m: Dict) -> str:
        params = f"{m['params']:,} parameters" if isinstance(m.get("params"), int) else "parameters unknown"
        return f"{m.get('class', '?')} {m.get('name', '')}".rstrip() + f", {params}"
    same_params = a.get("params") == b.get("params") or None in (a.get("params"), b.get("params"))
    if a.get("class") == b.get("class") and same_params:
        return None
    return (f"The two runs train different models ({said(a)} against {said(b)}): the change measured is between "
            "two programs, not the effect of one change.")
