"""``tfbneck compare BASELINE CANDIDATE``: did a change make training faster or slower, by
how much, how sure, where the time went, and was it what the baseline's advice predicted.

No TensorFlow: both sides are analysed from their traces, with what their runs' trend files say
(:func:`.batch.with_run_facts`).

The comparison of two session reports (:func:`compare_reports`):

``time_per_batch_ms``  mean, p50, p90 of each side's steady steps in the compared window (a
                       step's time divided by its batches, so that a change of
                       ``steps_per_execution`` compares)
``evidence``           the timings the test rests on (:mod:`.compare_evidence`): ``level``
                       (``periods`` of the step-time trend, ``windows`` of the run, or the
                       ``steps`` of one window), units per side, the test, the bootstrap
                       interval of the ratio, the run-to-run floor, and ``missing``: one
                       line saying what would settle an ``inconclusive`` comparison
``change_pct``         candidate over baseline at that level (means of one window's steps,
                       medians of periods or windows), less 1, in %
``p_value``            the test's two-sided p-value
``load``               each side's other processes' load (cores, sidecars) and whether it differed
``verdict``            ``faster`` / ``slower`` when p < :data:`ALPHA` and the change exceeds the
                       run-to-run spread of identical code (:data:`RUN_TO_RUN_FLOOR_PCT`) and is
                       not explained by machine load nor by an unchanged CPU time per step
                       (:data:`CPU_FLOOR_PCT`, :data:`LOADED_CPU_FLOOR_PCT`); ``inconclusive``
                       when it is significant but within that spread or so explained, or
                       when a side's window is not its run's steady state
                       (:func:`_unrepresentative_side`); else ``no_change``
``breakdown_ms``       per breakdown category: each side's mean ms per batch and the change
``verdicts``           each side's bottleneck / cause / confidence
``predictions``        for each change detected between the sides (or named with
                       ``change=``), the baseline's recommendation of that fix: its
                       predicted time per batch against the candidate's measured one
``caveat``             one sentence when the sides' recorded models differ (class or
                       parameter count: two programs, not one change), else None
``op_changes``         the ops and layer scopes whose self time per batch changed most,
                       with the same test over their per-step times (:mod:`.op_compare`)
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, cast

import numpy as np

from . import evidence as evid
from .changes import credited, detect_changes, different_models, prediction_check
from ..analysis.breakdown import CATEGORIES
from ..analysis.thresholds import INPUT_BOUND_PCT
from ..runs import run_dir_of
from .ops import op_changes, text_lines as op_text_lines
from ..trace.timeline import time_stats
from ..errors import TfbneckError
from ..schema import SessionDict

if TYPE_CHECKING:
    from ..logdir import Session

#: Significance level of the test (the conventional 5 %; our choice).
ALPHA = 0.05
#: The test over one window's steps, as the reports name it (the weakest evidence).
TEST = evid.TESTS["steps"]
#: Change (%, either way, as |log ratio|) within which a significant change between two runs
#: is ``inconclusive``, per level of evidence: the largest change between two runs of
#: identical code under the same load, rounded up to 5 %, fitted by benchmarks/compare_noise.py
#: on half of its identical-code pairs (docs/compare_noise.md's first day; its slow day's half
#: gave 35 and 55). No pair had several windows per side: ``windows`` is our choice between.
RUN_TO_RUN_FLOOR_PCT = {"periods": 20.0, "windows": 15.0, "steps": 40.0}
#: How much faster identical code may run on the more loaded of two machines (x): in
#: benchmarks/compare_noise.py the runs beside benchmarks/under_load.sh took 1.69-1.86 ms per
#: step against 1.95-2.26 ms on the idle machine (spinning neighbours keep the cores awake, so
#: the job's threads do not wait for one to wake): at most 1.34x, rounded up.
LOADED_FASTER_X = 1.35
#: Largest change (%) of the process's CPU time per step (the trend's ``cpu_ms``) between
#: two runs of identical code: a CPU-computed model whose CPU time per step stays within it
#: did not change its own cost. Fitted by benchmarks/compare_noise.py on half of its
#: same-load identical pairs (largest change, rounded up to 5 %: docs/compare_noise.md).
CPU_FLOOR_PCT = 20.0
#: The same across loads (%): neighbours also make each step cost more CPU (caches, shared
#: cores), so when the load differs only a larger change speaks for the code. Fitted likewise on
#: half of the identical pairs across loads (docs/compare_noise.md).
LOADED_CPU_FLOOR_PCT = 35.0


class CompareError(TfbneckError):
    """The two sides cannot be compared; the message is one line naming the path."""


# ---- two reports ---------------------------------------------------------------------------

def per_batch_times(report: Dict) -> np.ndarray:
    """Each steady step's time per batch (ms), shape (n_steps,)."""
    steps = report.get("steps") or {}
    bps = max(int(steps.get("batches_per_step") or 1), 1)
    return np.array([float(i["duration_ms"]) / bps for i in steps.get("items") or []], dtype=np.float64)


def _run_name(report: Dict) -> str:
    """The run's name; for a run given as the path itself (``.``), its folder's name: the one
    above ``plugins/profile/<session>``, or the folder itself for PyTorch traces (written
    straight into the run's folder)."""
    run = report.get("run") or ""
    if run not in ("", ".") or not report.get("path"):
        return run
    folder = os.path.normpath(report["path"])
    profile = os.path.dirname(folder)
    in_profile = os.path.basename(profile) == "profile" and os.path.basename(os.path.dirname(profile)) == "plugins"
    if in_profile or not os.path.isdir(folder):
        folder = os.path.dirname(os.path.dirname(profile))
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
    return evid.step_test(baseline, candidate)["p_value"]


def _cores(v) -> str:
    return "?" if v is None else f"{v:.2f}"


def _wait_text(load: Dict, side: str) -> str:
    f = load[f"{side}_contention"]
    return f"{100 * (f - 1):.0f} % of its running time"


def _as_ratio(change_pct: float) -> str:
    """A change in time per step as the ratio it is: the floors are symmetric in log space
    (1.4x slower or 1.4x faster), so "-39.5 %" (1.65x faster) would read as inside "40 %"."""
    x = 1.0 + change_pct / 100.0
    if x <= 0:
        return f"{change_pct:+.1f} %"
    return f"{change_pct:+.1f} % ({x:.2f}x slower)" if x >= 1 else f"{change_pct:+.1f} % ({1 / x:.2f}x faster)"


def _decide(change_pct: float, p: float, lvl: str, load: Dict, missing: str,
            ratio_ci: Optional[List[float]] = None) -> Tuple[str, Optional[str]]:
    """(verdict, the line saying what is missing when inconclusive). A significant change is called when it,
    and its 95 % interval ``ratio_ci`` (:func:`.compare_evidence.interval_within`), exceed the run-to-run floor
    times what a difference of load explains in its direction; else it is inconclusive, naming the load when it
    could explain it. A change beyond the floor the evidence cannot show significant is never ``no_change``."""
    floor = RUN_TO_RUN_FLOOR_PCT[lvl]
    size = abs(np.log1p(change_pct / 100.0))
    allowed = np.log1p(floor / 100.0)
    if p >= ALPHA:
        if size > allowed:  # too few samples to show a change this large: not "no change"
            return "inconclusive", (f"{_as_ratio(change_pct)} is beyond the {1 + floor / 100:.2f}x spread of identical code "
                                    f"(either way) but not significant (p = {p:.3g}) on this little evidence: {missing}")
        return "no_change", None
    word = "slower" if change_pct > 0 else "faster"
    # Under different loads a run may be slower either way: the more loaded one waits for cores (up to its
    # run-queue ratio), and the less loaded one was also seen slower (LOADED_FASTER_X: faster beside a busy machine).
    loaded_slower = (load["more_loaded"] == "candidate") == (word == "slower")
    load_x = load["explains_x"] if loaded_slower else min(load["explains_x"], LOADED_FASTER_X)
    if load["differs"] and size <= allowed + np.log(load_x):
        how = (f"enough to make the {load['more_loaded']} up to {load['explains_x']:.2f}x slower" if loaded_slower else
               "and the less loaded side was the slower one, as identical code also was beside a busy machine "
               "(docs/compare_noise.md)")
        return "inconclusive", (
            f"the machine's load differed: the training waited for a core {_wait_text(load, 'baseline')} in the "
            f"baseline's window and {_wait_text(load, 'candidate')} in the candidate's (other processes "
            f"{_cores(load['baseline_others_cpu_cores'])} -> {_cores(load['candidate_others_cpu_cores'])} cores), "
            f"{how}; the change may be the load's, not the code's: compare runs made under the same load")
    if size <= allowed or evid.interval_within(ratio_ci, word == "slower", floor):
        lo, hi = ratio_ci or (0.0, 0.0)
        how = "is within" if size <= allowed else f"has a 95 % interval of {lo:.2f}-{hi:.2f}x, reaching into"
        return "inconclusive", (f"{_as_ratio(change_pct)} {how} the {1 + floor / 100:.2f}x spread of identical code "
                                f"(either way): {missing}")
    cpu = load.get("cpu_change_pct")
    cpu_floor, across = (LOADED_CPU_FLOOR_PCT, " across loads") if load["differs"] else (CPU_FLOOR_PCT, "")
    if cpu is not None and (abs(np.log1p(cpu / 100.0)) <= np.log1p(cpu_floor / 100.0)
                            or (cpu > 0) != (change_pct > 0)):
        return "inconclusive", (
            f"the process's CPU time per step changed {cpu:+.1f} % (within the {cpu_floor:.0f} % spread of identical "
            f"code{across}, or the other way) while its time per step changed {change_pct:+.1f} %: on a CPU-computed "
            "model the code's own cost did not change; the difference is the machine's (other processes' load, "
            "throttling): compare runs made under the same load")
    return word, None


def compare_reports(baseline: Dict, candidate: Dict, change: Optional[str] = None,
                    timings: Optional[Tuple[evid.SideTimings, evid.SideTimings]] = None) -> Dict:
    """The comparison of two session reports (module docstring for the fields).

    Args:
      baseline, candidate: session reports (``analyze_session`` dicts) with steps.
      change: the fix id of the change made (``parallel_map``, ``prefetch``...); None to
        detect it from the reports (:func:`detect_changes`).
      timings: each side's timings beyond the window (:func:`.compare_evidence`); None: the
        window's steps and the sidecars' load only.

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
    if timings is None:
        timings = (evid.SideTimings(steps=b), evid.SideTimings(steps=c))
    timings[0].steps, timings[1].steps = b, c
    lvl = evid.level(*timings)
    ub, uc = evid.units(timings[0], lvl), evid.units(timings[1], lvl)
    # One window's steps: their means (the reports' step time); periods and windows: medians.
    mid = np.mean if lvl == "steps" else np.median
    change_pct = 100.0 * (mid(uc) - mid(ub)) / mid(ub)
    test = evid.step_test(ub, uc) if lvl == "steps" else evid.unit_test(ub, uc)
    load = evid.machine_load(baseline, candidate, timings)
    # CPU time per step tells the code's cost from the machine's only when the step computes:
    # a run waiting for its input (a sleep, a read) gets faster with no change of CPU per step.
    waiting = max(float((r.get("breakdown_pct") or {}).get("input") or 0.0) for r in (baseline, candidate))
    if lvl == "periods" and all(t.device_kind == "CPU" for t in timings) and waiting < INPUT_BOUND_PCT:
        load["cpu_change_pct"] = evid.cpu_change(*timings)
    missing_why = evid.missing_line(lvl, *timings)
    verdict, missing = _decide(change_pct, test["p_value"], lvl, load, missing_why, test["ratio_ci"])
    off = _unrepresentative_side(baseline, candidate) if lvl == "steps" else None
    if off is not None and verdict != "inconclusive":  # a window that is not the steady state shows no change either
        verdict, missing = "inconclusive", off
    before, after = _breakdown_per_batch(baseline), _breakdown_per_batch(candidate)
    fixes = [change] if change else detect_changes(baseline, candidate)
    caveat = different_models(baseline, candidate)
    return {
        "baseline": _side(baseline, b), "candidate": _side(candidate, c),
        "change_pct": round(change_pct, 2), "p_value": round(test["p_value"], 6), "verdict": verdict,
        "alpha": ALPHA, "test": evid.TESTS[lvl],
        "evidence": {"level": lvl, "units": [int(len(ub)), int(len(uc))], "ratio_ci": test["ratio_ci"],
                     "floor_pct": RUN_TO_RUN_FLOOR_PCT[lvl], "missing": missing,
                     "window_change_pct": round(100.0 * (c.mean() - b.mean()) / b.mean(), 2),
                     "trend_files": [timings[0].trend_file, timings[1].trend_file]},
        "load": load,
        "breakdown_ms": {k: {"baseline": round(before[k], 3), "candidate": round(after[k], 3),
                             "change": round(after[k] - before[k], 3)} for k in CATEGORIES},
        # Between two models no change explains the difference: nothing is credited.
        # A change is explained only where one was measured (a verdict of faster or slower).
        "predictions": credited([prediction_check(baseline, candidate, fix, float(c.mean())) for fix in fixes],
                                allowed=caveat is None and verdict in ("faster", "slower")),
        "caveat": caveat,
        "op_changes": op_changes(baseline, candidate, significance, ALPHA),
    }



def _unrepresentative_side(baseline: Dict, candidate: Dict) -> Optional[str]:
    """The line saying why one window's steps cannot carry a verdict, when a side's traced
    steps were not its run's steady state, else None: every one was warm-up (the report's
    ``steps.warmup`` not ``excluded``: graph building, a PyTorch DataLoader's workers starting,
    :func:`..analysis.torch_host._loader_start_up`), or its own job clock shows it
    (:func:`..analysis.run_evidence.unrepresentative`: steps fed from a buffer filled before
    the window)."""
    from ..analysis.run_evidence import traced_and_job_step_ms, unrepresentative
    for name, side in (("baseline", baseline), ("candidate", candidate)):
        warm = (side.get("steps") or {}).get("warmup") or {}
        if warm.get("count") and not warm.get("excluded", True):
            return (f"every traced step of the {name} was warm-up ({warm.get('reason')}): its steady state is not "
                    "in the comparison")
    for name, side in (("baseline", baseline), ("candidate", candidate)):
        r = cast(SessionDict, side)  # compare's reports are the JSON dicts analyze writes
        if unrepresentative(r):
            traced, job = traced_and_job_step_ms(r) or (0.0, 1.0)
            return (f"the {name}'s traced steps ({traced:.3g} ms) were {traced / job:.2f}x its job's own step around "
                    f"the window ({job:.3g} ms): they drew on batches buffered before it, so the windows' steps "
                    "do not show the change; compare runs long enough for the trend's periods (several "
                    "step_time_every periods per side), or profile later steps")
    return None


# ---- two paths -----------------------------------------------------------------------------

def _oldest_first(s) -> Tuple:
    """Sort key, oldest session first: by name (TensorFlow names session folders by time);
    PyTorch traces, whose names start with the worker (re-runs have other pids), by the time
    their file names carry first."""
    from ..logdir import kineto_session_time
    return (kineto_session_time(s) or 0.0, s.name)


def _sessions_per_run(path: str, side: str) -> Tuple[Dict[str, list], List[str]]:
    """run name -> its sessions, oldest first (session folders are named by time), and notes.
    ``side`` ("the baseline" or "the candidate") starts the error when ``path`` holds none.

    Raises:
      CompareError: ``path`` cannot be read or holds no session."""
    from ..batch import no_session_message
    from ..logdir import DiscoveryError, find_sessions
    try:
        found = find_sessions(path)
    except DiscoveryError as err:
        raise CompareError(f"{side}: {err}") from None
    by_run: Dict[str, list] = {}
    for s in found.sessions:
        by_run.setdefault(s.run, []).append(s)
    notes = [f"{path}: {p}" for p in found.problems]
    for sessions in by_run.values():
        sessions.sort(key=_oldest_first)
    if not by_run:
        raise CompareError(f"{side}: {no_session_message([path])}")
    return by_run, notes


def latest_with_verdict(sessions: List["Session"],
                        analyze) -> Tuple["Session", SessionDict, List[Tuple["Session", SessionDict]]]:
    """The session of a run to compare (``sessions`` oldest first; ``analyze``: ``Session ->
    report``): the latest whose report has a verdict (``status`` ok), as fleet takes a run's
    latest session with a report (:mod:`tfbneck_plugin.fleet_view.report`), so that a later
    window that has none (a skipped or incomplete BottleneckProfiler window, a trace that
    cannot be read) does not stand for the run; the latest when none has. Returns (that
    session, its report, the later ones passed over with theirs), each session analysed once."""
    passed: List[Tuple["Session", SessionDict]] = []
    for s in reversed(sessions):
        report = cast(SessionDict, analyze(s) or {})
        if report.get("status") == "ok":
            return s, report, passed[::-1]
        passed.append((s, report))
    return sessions[-1], passed[0][1], []


def _side_note(run_path: str, sessions: list, pick, passed: List[Tuple["Session", SessionDict]]) -> Optional[str]:
    """The note saying which of a run's several sessions is compared (None for one session)."""
    if len(sessions) < 2:
        return None
    note = (f"{run_path}: {len(sessions)} sessions; compared the latest{' with a verdict' if passed else ''}, "
            f"{pick.name} (the others' step times are evidence)")
    for s, report in passed:
        note += f"; {s.name}, later, has none ({report.get('error') or 'no report'})"
    return note


def _matched(baseline: str, candidate: str):
    """[(baseline sessions, candidate sessions)] and notes: one run each, else the runs of
    the same name; each side's sessions oldest first (:func:`latest_with_verdict` is compared)."""
    base, notes_b = _sessions_per_run(baseline, "the baseline")
    cand, notes_c = _sessions_per_run(candidate, "the candidate")
    if len(base) == 1 and len(cand) == 1:
        return [(next(iter(base.values())), next(iter(cand.values())))], notes_b + notes_c
    common = sorted(set(base) & set(cand))
    if not common:
        raise CompareError(f"{baseline} ({len(base)} runs) and {candidate} ({len(cand)} runs) have no run name in "
                           "common: give one run on each side")
    unmatched = sorted(set(base) ^ set(cand))
    notes = notes_b + notes_c + ([f"runs on one side only, not compared: {', '.join(unmatched)}"] if unmatched else [])
    return [(base[r], cand[r]) for r in common], notes


#: Most windows of a run analysed as evidence (the newest; each costs an analysis).
MAX_EVIDENCE_WINDOWS = 12


def side_timings(run_sessions: list, compared, report: Dict, use_trend: bool = True,
                 analyze=None) -> evid.SideTimings:
    """One side's timings: the compared session's steps (``report``), its run's trend
    periods, and, from :data:`.compare_evidence.MIN_UNITS` sessions of the run on, each
    window's mean step (the newest :data:`MAX_EVIDENCE_WINDOWS`).

    Args:
      run_sessions: the run's sessions, oldest first; compared: the one compared (its report
        is ``report``); analyze: ``Session -> report`` for the other windows (default
        ``batch.analyze_one``; the plugin passes its cache); a report without steps is skipped.
    """
    if analyze is None:
        from ..batch import analyze_one as analyze
    t = evid.SideTimings(steps=per_batch_times(report), others_cpu_cores=evid.load_of(report),
                         contention=evid.contention_of(report), device_kind=report.get("device_kind"))
    if use_trend:
        t.periods, t.period_cpu, t.trend_file = evid.trend_periods(run_dir_of(compared))
    if len(run_sessions) >= evid.MIN_UNITS:
        others = [s for s in run_sessions if s.name != compared.name][-(MAX_EVIDENCE_WINDOWS - 1):]
        means = [float(t.steps.mean())]
        for s in others:
            times = per_batch_times(analyze(s) or {})
            if len(times):
                means.append(float(times.mean()))
        t.windows = np.array(means)
    return t


def compare(baseline: str, candidate: str, change: Optional[str] = None, use_trend: bool = True) -> Dict:
    """Compare the sessions under two paths (logdirs, run folders, session folders, local or
    remote, as ``tfbneck analyze`` takes them): one session each, or the runs of the same
    name (the latest session of each run that has a verdict, :func:`latest_with_verdict`, with
    the run's other windows and its step-time trend as evidence: :mod:`.compare_evidence`).

    Args:
      baseline, candidate: the paths.
      change: the fix id of the change made, or None to detect it.
      use_trend: read the runs' trend files (False: the windows' steps only).

    Returns:
      ``{"baseline", "candidate", "comparisons": [compare_reports(...)], "notes", and the
      summary "change_pct", "p_value", "verdict"}``: the summary is the comparison that
      decides: the most slowed down of those that are ``slower``, else the most sped up of
      those that are ``faster``, else an ``inconclusive`` one, else the one with the
      largest change.

    Raises:
      CompareError: a path holds no session, the runs do not match, or a side cannot be
        compared (one line naming the path).
    """
    from ..batch import analyze_one, with_run_facts
    pairs, notes = _matched(baseline, candidate)
    comparisons = []
    for b_sessions, c_sessions in pairs:
        picks: List["Session"] = []
        traced: List[SessionDict] = []
        for path, sessions in ((baseline, b_sessions), (candidate, c_sessions)):
            pick, report, passed = latest_with_verdict(sessions, analyze_one)
            picks.append(pick)
            traced.append(report)
            note = _side_note(os.path.normpath(os.path.join(path, pick.run)), sessions, pick, passed)
            notes.extend([note] if note else [])
        b_pick, c_pick = picks
        rb, rc = (dict(r) for r in with_run_facts(traced, picks))  # with the jobs' clocks
        timings = None
        if rb.get("status") == "ok" and rc.get("status") == "ok":
            timings = (side_timings(b_sessions, b_pick, rb, use_trend, analyze=analyze_one),
                       side_timings(c_sessions, c_pick, rc, use_trend, analyze=analyze_one))
        comparisons.append(compare_reports(rb, rc, change, timings))
    top = decisive(comparisons)
    return {"baseline": baseline, "candidate": candidate, "change_pct": top["change_pct"], "p_value": top["p_value"],
            "verdict": top["verdict"], "missing": top["evidence"]["missing"], "comparisons": comparisons,
            "notes": notes}


def decisive(comparisons: List[Dict]) -> Dict:
    """The comparison that sums up several (see :func:`compare`)."""
    for verdict, sign in (("slower", 1), ("faster", -1), ("inconclusive", 0)):
        hits = [c for c in comparisons if c["verdict"] == verdict]
        if hits:
            return max(hits, key=lambda c: sign * c["change_pct"] if sign else abs(c["change_pct"]))
    return max(comparisons, key=lambda c: abs(c["change_pct"]))


def slower_than(result: Dict, pct: float) -> List[Dict]:
    """The comparisons whose candidate is significantly slower by more than ``pct`` %
    (an ``inconclusive`` comparison never is)."""
    return [c for c in result["comparisons"] if c["verdict"] == "slower" and c["change_pct"] > pct]


def inconclusive(result: Dict) -> List[Dict]:
    """The comparisons the evidence could not settle."""
    return [c for c in result["comparisons"] if c["verdict"] == "inconclusive"]


# ---- renderings ----------------------------------------------------------------------------

def _title(c: Dict) -> str:
    b, k = c["baseline"], c["candidate"]
    names = b["run"] if b["run"] == k["run"] else f"{b['run']} -> {k['run']}"
    word = {"faster": "FASTER", "slower": "SLOWER", "no_change": "no significant change",
            "inconclusive": "INCONCLUSIVE"}[c["verdict"]]
    ev = c.get("evidence") or {"level": "steps", "units": [b["steps"], k["steps"]]}
    return (f"{names}: {word} ({c['change_pct']:+.1f} % time per batch, p = {c['p_value']:.4g}, "
            f"{ev['units'][0]} vs {ev['units'][1]} {ev['level']})")


def _verdict_text(side: Dict) -> str:
    return f"{side['bottleneck']}/{side['cause']} ({side['confidence']})"


def _prediction_text(p: Dict) -> str:
    if p.get("predicted_ms") is None:
        why = str(p["why_not"]).rstrip(".")
        if p.get("bound_ms") is not None:  # no model, but its best case
            return (f"{p['fix']}: best case {p['bound_ms']:.2f} ms (no model: {why}), measured "
                    f"{p['measured_ms']:.2f} ms")
        return f"{p['fix']}: no prediction ({why}); measured {p['measured_ms']:.2f} ms"
    low, high = p["range_ms"]
    on = (f" by the job's own clock (the traced window: {p['traced_ms']:.2f} ms; the prediction taken to the job's "
          "clock too)" if p.get("measured_on") == "job clock" else "")
    return (f"{p['fix']}: predicted {p['predicted_ms']:.2f} ms (range {low:.2f}-{high:.2f}), measured "
            f"{p['measured_ms']:.2f} ms{on}, error {p['error_pct']:+.1f} %")


def _rows(c: Dict) -> List[Tuple[str, str, str, str]]:
    b, k = c["baseline"]["time_per_batch_ms"], c["candidate"]["time_per_batch_ms"]
    # The decision's change is measured at its level of evidence (periods, windows or this
    # window's steps); the rows show the traced windows, whose own change is shown with them.
    lvl = c["evidence"]["level"]
    rows = [("time per batch, mean (ms, traced window)", f"{b['mean']:.3f}", f"{k['mean']:.3f}",
             f"{c['evidence']['window_change_pct']:+.1f} %")]
    if lvl != "steps":
        rows.insert(0, (f"time per batch, decided on the {lvl} (ms)", "", "", f"{c['change_pct']:+.1f} %"))
    for q in ("p50", "p90"):
        rows.append((f"time per batch, {q} (ms)", f"{b[q]:.3f}", f"{k[q]:.3f}",
                     f"{100.0 * (k[q] - b[q]) / b[q]:+.1f} %" if b[q] else ""))
    rows.append(("verdict", _verdict_text(c["baseline"]), _verdict_text(c["candidate"]), ""))
    for cat, v in c["breakdown_ms"].items():
        if v["baseline"] or v["candidate"]:
            rows.append((f"{cat} (ms per batch)", f"{v['baseline']:.3f}", f"{v['candidate']:.3f}", f"{v['change']:+.3f}"))
    return rows


def _evidence_lines(c: Dict) -> List[str]:
    """The test, the machine load and, when inconclusive, what is missing."""
    out = [f"test: {c.get('test', TEST)}; significant below p = {ALPHA}"]
    ev, load = c.get("evidence") or {}, c.get("load") or {}
    if ev.get("ratio_ci"):
        lo, hi = ev["ratio_ci"]
        out.append(f"95 % interval of the change: {100 * (lo - 1):+.1f} % to {100 * (hi - 1):+.1f} %")
    if load.get("baseline_contention") is not None and load.get("candidate_contention") is not None:
        out.append(f"waiting for a core (run queue): {100 * (load['baseline_contention'] - 1):.0f} % -> "
                   f"{100 * (load['candidate_contention'] - 1):.0f} % of the training's running time"
                   " (its threads' waits summed over its time on the cores: over 100 % when they waited longer than"
                   " they ran)" + (" (differs)" if load.get("differs") else ""))
    unknown = evid.unknown_load_line(c)
    if unknown:
        out.append(f"load: {unknown}")
    if ev.get("missing"):
        out.append(f"inconclusive: {ev['missing']}")
    return out


def to_table(result: Dict) -> str:
    out = [f"tfbneck compare: {result['baseline']} -> {result['candidate']}: {result['verdict']} "
           f"({result['change_pct']:+.1f} %, p = {result['p_value']:.4g})"]
    for c in result["comparisons"]:
        out += ["", _title(c)] + ([f"  caution: {c['caveat']}"] if c.get("caveat") else [])
        rows = [("", "baseline", "candidate", "change")] + _rows(c)
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        out += [f"  predicted vs measured: {_prediction_text(p)}" for p in c["predictions"]]
        out += op_text_lines(c.get("op_changes"), c.get("alpha", ALPHA))
        out += [f"  {line}" for line in _evidence_lines(c)]
    out += [f"note: {n}" for n in result.get("notes") or []]
    return "\n".join(out) + "\n"


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(result: Dict) -> str:
    out = [f"# tfbneck compare: **{result['verdict']}** ({result['change_pct']:+.1f} %, p = {result['p_value']:.4g})",
           "", f"Baseline `{_md(result['baseline'])}`, candidate `{_md(result['candidate'])}`."]
    for c in result["comparisons"]:
        out += ["", f"## {_md(_title(c))}", ""] + ([f"> caution: {_md(c['caveat'])}", ""] if c.get("caveat") else [])
        out += ["| | baseline | candidate | change |", "|---|---|---|---|"]
        out += [f"| {' | '.join(_md(x) for x in r)} |" for r in _rows(c)]
        if c["predictions"]:
            out += ["", "Predicted vs measured:", ""] + [f"- {_md(_prediction_text(p))}" for p in c["predictions"]]
        ops = op_text_lines(c.get("op_changes"), c.get("alpha", ALPHA))
        if ops:
            out += [""] + [f"- {_md(line.strip())}" if line.startswith("    ") else f"\n{_md(line.strip())}\n"
                           for line in ops]
        out += [""] + [f"- {_md(line)}" for line in _evidence_lines(c)]
    out += [""] + [f"> note: {_md(n)}" for n in result.get("notes") or []]
    return "\n".join(out) + "\n"


def to_json(result: Dict) -> str:
    import json
    return json.dumps(result, indent=2) + "\n"


RENDERERS = {"table": to_table, "json": to_json, "markdown": to_markdown}
