"""``tfbneck compare BASELINE CANDIDATE``: did a change make training faster or slower, by
how much, how sure, where the time went, and was it what the baseline's advice predicted.

No TensorFlow: both sides are analysed from their traces (:func:`.batch.analyze_one`).

The comparison of two session reports (:func:`compare_reports`):

``time_per_batch_ms``  mean, p50, p90 of each side's steady steps (a step's time divided by
                       its batches, so that a change of ``steps_per_execution`` compares)
``change_pct``         candidate mean over baseline mean, less 1, in %
``p_value``            two-sided Mann-Whitney U test over the per-step times per batch
                       (``scipy.stats.mannwhitneyu``; exact for small samples without ties).
                       Rank-based: one preempted step does not sway it, and it assumes no
                       normal distribution, which step times seldom follow.
``verdict``            ``faster`` / ``slower`` when p < :data:`ALPHA`, else ``no_change``
``breakdown_ms``       per breakdown category: each side's mean ms per batch and the change
``verdicts``           each side's bottleneck / cause / confidence
``predictions``        for each change detected between the sides (or named with
                       ``change=``), the baseline's recommendation of that fix: its
                       predicted time per batch against the candidate's measured one
``op_changes``         the ops and layer scopes whose self time per batch changed most,
                       with the same test over their per-step times (:mod:`.op_compare`)
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from .analysis.breakdown import CATEGORIES
from .op_compare import op_changes, text_lines as op_text_lines
from .trace.timeline import time_stats

#: Significance level of the test (the conventional 5 %; our choice).
ALPHA = 0.05
#: The test, as the reports name it.
TEST = "Mann-Whitney U, two-sided, over the per-step times per batch (scipy.stats.mannwhitneyu)"


class CompareError(Exception):
    """The two sides cannot be compared; the message is one line naming the path."""


# ---- two reports ---------------------------------------------------------------------------

def per_batch_times(report: Dict) -> np.ndarray:
    """Each steady step's time per batch (ms), shape (n_steps,)."""
    steps = report.get("steps") or {}
    bps = max(int(steps.get("batches_per_step") or 1), 1)
    return np.array([float(i["duration_ms"]) / bps for i in steps.get("items") or []], dtype=np.float64)


def _run_name(report: Dict) -> str:
    """The run's name; for a run given as the path itself (``.``), its folder's name."""
    run = report.get("run") or ""
    if run not in ("", ".") or not report.get("path"):
        return run
    folder = os.path.dirname(os.path.dirname(os.path.dirname(os.path.normpath(report["path"]))))
    return os.path.basename(folder) or run


def _side(report: Dict, times: np.ndarray) -> Dict:
    steps = report.get("steps") or {}
    return {"run": _run_name(report), "session": report.get("session"), "path": report.get("path"),
            "steps": int(len(times)), "batches_per_step": int(steps.get("batches_per_step") or 1),
            "time_per_batch_ms": time_stats(times), "bottleneck": report.get("bottleneck"),
            "cause": report.get("cause"), "confidence": report.get("confidence")}


def _breakdown_per_batch(report: Dict) -> Dict[str, float]:
    steps = report.get("steps") or {}
    items = steps.get("items") or []
    bps = max(int(steps.get("batches_per_step") or 1), 1)
    return {c: sum(float(i["breakdown_ms"].get(c, 0.0)) for i in items) / len(items) / bps for c in CATEGORIES}


def significance(baseline: np.ndarray, candidate: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value of the two samples of step times (1.0 when they
    cannot differ: identical values)."""
    from scipy.stats import mannwhitneyu
    if np.array_equal(np.sort(baseline), np.sort(candidate)):
        return 1.0
    return float(mannwhitneyu(baseline, candidate, alternative="two-sided").pvalue)


def compare_reports(baseline: Dict, candidate: Dict, change: Optional[str] = None) -> Dict:
    """The comparison of two session reports (module docstring for the fields).

    Args:
      baseline, candidate: session reports (``analyze_session`` dicts) with steps.
      change: the fix id of the change made (``parallel_map``, ``prefetch``...); None to
        detect it from the reports (:func:`detect_changes`).

    Raises:
      CompareError: a side failed to analyse or has no steady steps.
    """
    sides = []
    for name, r in (("baseline", baseline), ("candidate", candidate)):
        if r.get("status") != "ok":
            raise CompareError(f"{name} {r.get('path')}: cannot be compared: {r.get('error')}")
        times = per_batch_times(r)
        if len(times) == 0:
            raise CompareError(f"{name} {r.get('path')}: no steps found, so no step times to compare")
        sides.append(times)
    b, c = sides
    change_pct = 100.0 * (c.mean() - b.mean()) / b.mean()
    p = significance(b, c)
    verdict = "no_change" if p >= ALPHA else ("slower" if change_pct > 0 else "faster")
    before, after = _breakdown_per_batch(baseline), _breakdown_per_batch(candidate)
    fixes = [change] if change else detect_changes(baseline, candidate)
    return {
        "baseline": _side(baseline, b), "candidate": _side(candidate, c),
        "change_pct": round(change_pct, 2), "p_value": round(p, 6), "verdict": verdict, "alpha": ALPHA,
        "test": TEST,
        "breakdown_ms": {k: {"baseline": round(before[k], 3), "candidate": round(after[k], 3),
                             "change": round(after[k] - before[k], 3)} for k in CATEGORIES},
        "predictions": [_prediction_check(baseline, fix, float(c.mean())) for fix in fixes],
        "op_changes": op_changes(baseline, candidate, significance),
    }


def _prediction_check(baseline: Dict, fix: str, measured: float) -> Dict:
    rec = next((r for r in baseline.get("recommendations") or [] if r.get("fix") == fix), None)
    out = {"fix": fix, "measured_ms": round(measured, 3)}
    if rec is None:
        return dict(out, predicted_ms=None, why_not="the baseline's report did not recommend this change")
    pred = rec.get("predicted")
    if not pred:
        return dict(out, predicted_ms=None, why_not=rec.get("predicted_why_not") or "no prediction")
    low, high = pred["range_ms"]
    predicted = float(pred["time_per_batch_ms"])
    return dict(out, predicted_ms=predicted, range_ms=[low, high],
                error_pct=round(100.0 * (predicted - measured) / measured, 1),
                within_range=bool(low <= measured <= high), basis=pred.get("basis"))


def _stage_kinds(report: Dict) -> List[str]:
    return [s.get("kind", "") for s in (report.get("input_pipeline") or {}).get("stages") or []]


def _fixes(report: Dict) -> List[str]:
    return [r.get("fix") for r in report.get("recommendations") or []]


def detect_changes(baseline: Dict, candidate: Dict) -> List[str]:
    """Fix ids of the changes visible between two reports, as far as the reports show them:
    more batches per step (``steps_per_execution``); a sequential ``Map`` that became a
    parallel map (``parallel_map``: a parallel map is asynchronous and overlaps the step, so
    a prefetch added with it is part of the same change); a prefetch added
    (``prefetch``); a baseline advised to compile its eager step that the candidate no longer
    is (``tf_function``: offered to eager programs only)."""
    out = []
    b_steps, c_steps = baseline.get("steps") or {}, candidate.get("steps") or {}
    if (c_steps.get("batches_per_step") or 1) > (b_steps.get("batches_per_step") or 1):
        out.append("steps_per_execution")
    b_kinds, c_kinds = _stage_kinds(baseline), _stage_kinds(candidate)
    if "Map" in b_kinds and "Map" not in c_kinds and any(k.startswith("ParallelMap") for k in c_kinds):
        out.append("parallel_map")
    elif not (baseline.get("input_pipeline") or {}).get("has_prefetch") and \
            (candidate.get("input_pipeline") or {}).get("has_prefetch"):
        out.append("prefetch")
    if "tf_function" in _fixes(baseline) and "tf_function" not in _fixes(candidate):
        out.append("tf_function")
    return out


# ---- two paths -----------------------------------------------------------------------------

def _latest_per_run(path: str) -> Tuple[Dict[str, object], List[str]]:
    """run name -> its latest session (session folders are named by time), and notes."""
    from .batch import no_session_message
    from .logdir import DiscoveryError, find_sessions
    try:
        found = find_sessions(path)
    except DiscoveryError as err:
        raise CompareError(str(err)) from None
    by_run: Dict[str, list] = {}
    for s in found.sessions:
        by_run.setdefault(s.run, []).append(s)
    notes = [f"{path}: {p}" for p in found.problems]
    latest = {}
    for run, sessions in by_run.items():
        sessions.sort(key=lambda s: s.name)
        latest[run] = sessions[-1]
        if len(sessions) > 1:
            notes.append(f"{os.path.join(path, run)}: {len(sessions)} sessions; compared the latest, {sessions[-1].name}")
    if not latest:
        raise CompareError(no_session_message([path]))
    return latest, notes


def _matched(baseline: str, candidate: str):
    """[(baseline session, candidate session)] and notes: one session each, else the runs
    of the same name."""
    base, notes_b = _latest_per_run(baseline)
    cand, notes_c = _latest_per_run(candidate)
    if len(base) == 1 and len(cand) == 1:
        return [(next(iter(base.values())), next(iter(cand.values())))], notes_b + notes_c
    common = sorted(set(base) & set(cand))
    if not common:
        raise CompareError(f"{baseline} ({len(base)} runs) and {candidate} ({len(cand)} runs) have no run name in "
                           "common: give one run on each side")
    unmatched = sorted(set(base) ^ set(cand))
    notes = notes_b + notes_c + ([f"runs on one side only, not compared: {', '.join(unmatched)}"] if unmatched else [])
    return [(base[r], cand[r]) for r in common], notes


def compare(baseline: str, candidate: str, change: Optional[str] = None) -> Dict:
    """Compare the sessions under two paths (logdirs, run folders, session folders, local or
    remote, as ``tfbneck analyze`` takes them): one session each, or the runs of the same
    name (the latest session of each run).

    Args:
      baseline, candidate: the paths.
      change: the fix id of the change made, or None to detect it.

    Returns:
      ``{"baseline", "candidate", "comparisons": [compare_reports(...)], "notes", and the
      summary "change_pct", "p_value", "verdict"}``: the summary is the comparison that
      decides: the most slowed down of those that are ``slower``, else the most sped up of
      those that are ``faster``, else the one with the largest change.

    Raises:
      CompareError: a path holds no session, the runs do not match, or a side cannot be
        compared (one line naming the path).
    """
    from .batch import analyze_one
    pairs, notes = _matched(baseline, candidate)
    comparisons = [compare_reports(dict(analyze_one(b)), dict(analyze_one(c)), change) for b, c in pairs]
    top = decisive(comparisons)
    return {"baseline": baseline, "candidate": candidate, "change_pct": top["change_pct"], "p_value": top["p_value"],
            "verdict": top["verdict"], "comparisons": comparisons, "notes": notes}


def decisive(comparisons: List[Dict]) -> Dict:
    """The comparison that sums up several (see :func:`compare`)."""
    for verdict, sign in (("slower", 1), ("faster", -1)):
        hits = [c for c in comparisons if c["verdict"] == verdict]
        if hits:
            return max(hits, key=lambda c: sign * c["change_pct"])
    return max(comparisons, key=lambda c: abs(c["change_pct"]))


def slower_than(result: Dict, pct: float) -> List[Dict]:
    """The comparisons whose candidate is significantly slower by more than ``pct`` %."""
    return [c for c in result["comparisons"] if c["verdict"] == "slower" and c["change_pct"] > pct]


# ---- renderings ----------------------------------------------------------------------------

def _title(c: Dict) -> str:
    b, k = c["baseline"], c["candidate"]
    names = b["run"] if b["run"] == k["run"] else f"{b['run']} -> {k['run']}"
    word = {"faster": "FASTER", "slower": "SLOWER", "no_change": "no significant change"}[c["verdict"]]
    return (f"{names}: {word} ({c['change_pct']:+.1f} % time per batch, p = {c['p_value']:.4g}, "
            f"{b['steps']} vs {k['steps']} steps)")


def _verdict_text(side: Dict) -> str:
    return f"{side['bottleneck']}/{side['cause']} ({side['confidence']})"


def _prediction_text(p: Dict) -> str:
    if p.get("predicted_ms") is None:
        return f"{p['fix']}: no prediction ({p['why_not']}); measured {p['measured_ms']:.2f} ms"
    low, high = p["range_ms"]
    return (f"{p['fix']}: predicted {p['predicted_ms']:.2f} ms (range {low:.2f}-{high:.2f}), measured "
            f"{p['measured_ms']:.2f} ms, error {p['error_pct']:+.1f} %")


def _rows(c: Dict) -> List[Tuple[str, str, str, str]]:
    b, k = c["baseline"]["time_per_batch_ms"], c["candidate"]["time_per_batch_ms"]
    rows = [("time per batch, mean (ms)", f"{b['mean']:.3f}", f"{k['mean']:.3f}", f"{c['change_pct']:+.1f} %")]
    for q in ("p50", "p90"):
        rows.append((f"time per batch, {q} (ms)", f"{b[q]:.3f}", f"{k[q]:.3f}",
                     f"{100.0 * (k[q] - b[q]) / b[q]:+.1f} %" if b[q] else ""))
    rows.append(("verdict", _verdict_text(c["baseline"]), _verdict_text(c["candidate"]), ""))
    for cat, v in c["breakdown_ms"].items():
        if v["baseline"] or v["candidate"]:
            rows.append((f"{cat} (ms per batch)", f"{v['baseline']:.3f}", f"{v['candidate']:.3f}", f"{v['change']:+.3f}"))
    return rows


def to_table(result: Dict) -> str:
    out = [f"tfbneck compare: {result['baseline']} -> {result['candidate']}: {result['verdict']} "
           f"({result['change_pct']:+.1f} %, p = {result['p_value']:.4g})"]
    for c in result["comparisons"]:
        out += ["", _title(c)]
        rows = [("", "baseline", "candidate", "change")] + _rows(c)
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        out += [f"  predicted vs measured: {_prediction_text(p)}" for p in c["predictions"]]
        out += op_text_lines(c.get("op_changes"))
    out += [f"note: {n}" for n in result.get("notes") or []]
    out.append(f"test: {TEST}; significant below p = {ALPHA}")
    return "\n".join(out) + "\n"


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(result: Dict) -> str:
    out = [f"# tfbneck compare: **{result['verdict']}** ({result['change_pct']:+.1f} %, p = {result['p_value']:.4g})",
           "", f"Baseline `{_md(result['baseline'])}`, candidate `{_md(result['candidate'])}`."]
    for c in result["comparisons"]:
        out += ["", f"## {_md(_title(c))}", "", "| | baseline | candidate | change |", "|---|---|---|---|"]
        out += [f"| {' | '.join(_md(x) for x in r)} |" for r in _rows(c)]
        if c["predictions"]:
            out += ["", "Predicted vs measured:", ""] + [f"- {_md(_prediction_text(p))}" for p in c["predictions"]]
        ops = op_text_lines(c.get("op_changes"))
        if ops:
            out += [""] + [f"- {_md(line.strip())}" if line.startswith("    ") else f"\n{_md(line.strip())}\n"
                           for line in ops]
    out += [""] + [f"> note: {_md(n)}" for n in result.get("notes") or []]
    out.append(f"Test: {TEST}; significant below p = {ALPHA}.")
    return "\n".join(out) + "\n"


def to_json(result: Dict) -> str:
    import json
    return json.dumps(result, indent=2) + "\n"


RENDERERS = {"table": to_table, "json": to_json, "markdown": to_markdown}
