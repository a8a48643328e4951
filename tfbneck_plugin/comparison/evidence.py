"""The timings a comparison rests on, per side, and the test that fits them.

Step times of one profiling window are not independent samples of a run: consecutive
steps share the machine's state (caches, other processes' load, the profiler's own cost),
and two runs of identical code differ by more than the steps of one window vary (two runs of
one script read "44.3 % slower, p = 0.016" with each window's steps as the samples). So a
comparison uses the largest units of time it has, each an independent-enough sample of the run:

``periods``  the step-time trend file's periods (``<run>/plugins/bottleneck/steptimes_*.json``:
             the median step of every epoch or ``step_time_every`` steps, timed without
             the profiler), from :data:`MIN_UNITS` per side on;
``windows``  the mean step of each profiling window of the run, from :data:`MIN_UNITS`;
``steps``    else the steps of the one window (what the issue calls the weakest evidence).

The test over periods or windows is a two-sided permutation test of the difference of
means (``scipy.stats.permutation_test``: exchangeable units, no distribution assumed: a
block permutation test with the period as the block), with a percentile bootstrap
confidence interval of the ratio of means (``scipy.stats.bootstrap``). Over the steps of
one window it is the Mann-Whitney U test, as before. Either way a change is only called
when it also exceeds the run-to-run spread of identical code at that level of evidence
(``comparison.RUN_TO_RUN_FLOOR_PCT``, measured by benchmarks/compare_noise.py).

The machine's load comes from the sidecars (``system_metrics.others_cpu_cores``: cores
busy with processes outside the training process tree during the window; the run-queue
wait of the training's threads, :func:`contention_of`), weighed by :func:`machine_load`; a
side without a sidecar has an unknown load, which the output says (:func:`unknown_load_line`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..logdir import open_any
from ..records import SidecarError, read_step_times
from ..runs import list_trend_files

#: Fewest units per side for a test over periods or windows: with 4 a side the smallest
#: two-sided permutation p is 2/70 = 0.029 < 0.05; with 3 it is 0.1, never significant.
MIN_UNITS = 4
#: Fewest steps a trend period must have timed to count (our choice: a median of fewer
#: steps is one step's jitter; the callback's first period after its 20 untimed steps can
#: be that short, and on a run measured here it was 15x the others).
MIN_PERIOD_STEPS = 10
#: Resamples of the permutation test and the bootstrap (fixed seed: reproducible output).
RESAMPLES = 4999
SEED = 0


@dataclass
class SideTimings:
    """One side's timings (ms per batch). ``periods``: the trend's period medians;
    ``windows``: each profiling window's mean step; ``steps``: the compared window's
    steps; ``others_cpu_cores``: the sidecar's load of other processes, ``contention``: its
    run-queue slowdown factor (:func:`contention_of`; None: no sidecar); ``period_cpu``:
    the process's CPU time per step in each period (NaN where unknown); ``device_kind``:
    the report's (``CPU`` when the host computes the model)."""
    steps: np.ndarray
    periods: np.ndarray = field(default_factory=lambda: np.zeros(0))
    windows: np.ndarray = field(default_factory=lambda: np.zeros(0))
    others_cpu_cores: Optional[float] = None
    contention: Optional[float] = None
    trend_file: Optional[str] = None
    period_cpu: np.ndarray = field(default_factory=lambda: np.zeros(0))
    device_kind: Optional[str] = None


def trend_periods(run: str) -> Tuple[np.ndarray, np.ndarray, Optional[str]]:
    """The newest trend file of ``run``: its periods' median step and the process's CPU time
    per step (ms per batch; NaN where the period has none), and its path. Empty when the run
    has none or it cannot be read (never raises)."""
    try:
        files = list_trend_files(run)
    except OSError:
        return np.zeros(0), np.zeros(0), None
    for path, _size, _mtime in files:
        opener: Any = open
        if "://" in path:
            opener = open_any
        try:
            data = read_step_times(path, opener)
        except SidecarError:
            continue
        spe = max(int(data.get("steps_per_execution") or 1), 1)
        points = [p for p in data["points"]
                  if isinstance(p.get("p50_ms"), (int, float)) and int(p.get("n") or 0) >= MIN_PERIOD_STEPS]
        wall = np.array([float(p["p50_ms"]) / spe for p in points], dtype=np.float64)
        cpu = np.array([float(p["cpu_ms"]) / spe if isinstance(p.get("cpu_ms"), (int, float)) else np.nan
                        for p in points], dtype=np.float64)
        return wall, cpu, path
    return np.zeros(0), np.zeros(0), None


def cpu_change(b: "SideTimings", c: "SideTimings") -> Optional[float]:
    """The change (%) of the median CPU time per step between the sides' trend periods, None
    when either side has fewer than :data:`MIN_UNITS` periods with it."""
    cb, cc = b.period_cpu[np.isfinite(b.period_cpu)], c.period_cpu[np.isfinite(c.period_cpu)]
    if len(cb) < MIN_UNITS or len(cc) < MIN_UNITS or np.median(cb) <= 0:
        return None
    return round(100.0 * (float(np.median(cc)) / float(np.median(cb)) - 1), 2)


def level(b: SideTimings, c: SideTimings) -> str:
    """The strongest evidence both sides have: ``periods``, ``windows`` or ``steps``."""
    if len(b.periods) >= MIN_UNITS and len(c.periods) >= MIN_UNITS:
        return "periods"
    if len(b.windows) >= MIN_UNITS and len(c.windows) >= MIN_UNITS:
        return "windows"
    return "steps"


def _median_diff(x, y, axis=-1):
    return np.median(y, axis=axis) - np.median(x, axis=axis)


def _ratio(x, y, axis=-1):
    return np.median(y, axis=axis) / np.median(x, axis=axis)


def unit_test(b: np.ndarray, c: np.ndarray) -> Dict:
    """Permutation p-value of the difference of medians and the bootstrap 95 % interval of
    the ratio of medians (candidate / baseline) over two sets of units: medians, so that
    one odd period (a checkpoint, a burst of load) does not decide."""
    from scipy.stats import bootstrap, permutation_test
    if np.array_equal(np.sort(b), np.sort(c)):
        return {"p_value": 1.0, "ratio_ci": [1.0, 1.0]}
    p = permutation_test((b, c), _median_diff, vectorized=True, n_resamples=RESAMPLES, alternative="two-sided",
                         random_state=SEED).pvalue
    ci = bootstrap((b, c), _ratio, vectorized=True, n_resamples=RESAMPLES, method="percentile",
                   random_state=SEED).confidence_interval
    return {"p_value": float(p), "ratio_ci": [round(float(ci.low), 4), round(float(ci.high), 4)]}


def interval_within(ratio_ci: Optional[List[float]], slower: bool, floor_pct: float) -> bool:
    """Whether the 95 % interval of the ratio (candidate / baseline, :func:`unit_test`) reaches
    into the run-to-run spread of identical code (a ratio within ``1 + floor_pct / 100``
    either way) on the side of no change: a slowdown whose interval begins under it, or a
    speed-up whose interval ends over its inverse, is not shown to exceed that spread, however
    far its point estimate is (CI's run of identical code: 1.47x by the periods' medians,
    p = 0.0004, interval 1.03-1.71x). False without an interval (one window's steps)."""
    if not ratio_ci:
        return False
    limit = 1.0 + floor_pct / 100.0
    return ratio_ci[0] < limit if slower else ratio_ci[1] > 1.0 / limit


def step_test(b: np.ndarray, c: np.ndarray) -> Dict:
    """Two-sided Mann-Whitney U over the steps of one window each (1.0 for identical samples)."""
    from scipy.stats import mannwhitneyu
    if np.array_equal(np.sort(b), np.sort(c)):
        return {"p_value": 1.0, "ratio_ci": None}
    return {"p_value": float(mannwhitneyu(b, c, alternative="two-sided").pvalue), "ratio_ci": None}


TESTS = {
    "periods": ("permutation test of the difference of the median period (trend files' per-period median "
                "steps), two-sided (scipy.stats.permutation_test), bootstrap 95 % interval of the ratio "
                "(scipy.stats.bootstrap)"),
    "windows": ("permutation test of the difference of the median window (each window's mean step), two-sided "
                "(scipy.stats.permutation_test), bootstrap 95 % interval of the ratio (scipy.stats.bootstrap)"),
    "steps": "Mann-Whitney U, two-sided, over the per-step times per batch of one window (scipy.stats.mannwhitneyu)",
}


def missing_line(lvl: str, b: SideTimings, c: SideTimings) -> str:
    """One line saying what evidence would separate code from noise."""
    if lvl == "steps":
        return (f"one {len(b.steps)}-step window vs one {len(c.steps)}-step window: the run-to-run spread is unknown; "
                "profile longer (several windows) or compare whole runs (the callback's step-time trend files)")
    return (f"{len(getattr(b, lvl))} vs {len(getattr(c, lvl))} {lvl} per run: too few to tell this change from the "
            "spread of identical code; compare longer runs or repeat each run")


def units(t: SideTimings, lvl: str) -> np.ndarray:
    """The side's samples at a level of evidence."""
    return {"periods": t.periods, "windows": t.windows, "steps": t.steps}[lvl]


def load_of(report: Dict) -> Optional[float]:
    """Cores other processes kept busy during the window (the sidecar), None without one."""
    v = (report.get("system_metrics") or {}).get("others_cpu_cores")
    return float(v) if isinstance(v, (int, float)) else None


def contention_of(report: Dict) -> Optional[float]:
    """How much slower the training ran for want of cores during the window: (cores its
    threads used + cores' worth of time they waited runnable in the run queue) / cores used,
    >= 1 (the sidecar's ``tree_cpu_cores`` and ``tree_runq_wait_cores``, from
    ``/proc/<pid>/task/*/schedstat``). None without those figures. Other processes' busy
    cores saturate at the machine's size; the run-queue wait keeps measuring past it."""
    sm = report.get("system_metrics") or {}
    used, waited = sm.get("tree_cpu_cores"), sm.get("tree_runq_wait_cores")
    if not isinstance(used, (int, float)) or not isinstance(waited, (int, float)) or used <= 0:
        return None
    return round((used + max(waited, 0.0)) / used, 3)


def describe_units(lvl: str, t: List[SideTimings]) -> str:
    return " vs ".join(f"{len(units(x, lvl))} {lvl}" for x in t)


#: The sides' run-queue slowdown factors (the training's threads waiting for a core, from
#: the sidecars) that differ by this ratio make the machine's load a cause of a change in
#: its direction (our choice: a quarter, beyond the window-to-window jitter of the factor).
LOAD_DIFF_FACTOR = 1.25


def machine_load(baseline: Dict, candidate: Dict, t: Tuple[SideTimings, SideTimings]) -> Dict:
    """Each side's machine load (the sidecars) and how much slower it alone could make the
    more contended side: ``explains_x`` = the ratio of the sides' run-queue slowdown factors
    (:func:`contention_of`), 1.0 when they are within
    :data:`LOAD_DIFF_FACTOR` of each other or unknown. ``differs`` when they are not;
    ``unknown_on``: the sides without a figure (no sidecar: a PyTorch trace, a profile taken
    without the callback), whose load the verdict cannot weigh and the output says so
    (:func:`unknown_load_line`)."""
    lb = t[0].others_cpu_cores if t[0].others_cpu_cores is not None else load_of(baseline)
    lc = t[1].others_cpu_cores if t[1].others_cpu_cores is not None else load_of(candidate)
    fb = t[0].contention if t[0].contention is not None else contention_of(baseline)
    fc = t[1].contention if t[1].contention is not None else contention_of(candidate)
    out: Dict[str, Any] = {"baseline_others_cpu_cores": lb, "candidate_others_cpu_cores": lc, "baseline_contention": fb,
           "candidate_contention": fc, "differs": False, "explains_x": 1.0, "more_loaded": None,
           "unknown_on": [name for name, f in (("baseline", fb), ("candidate", fc)) if f is None]}
    if fb is None or fc is None:
        return out
    ratio = max(fb, fc) / min(fb, fc)
    if ratio >= LOAD_DIFF_FACTOR:
        out.update(differs=True, explains_x=round(ratio, 3), more_loaded="candidate" if fc > fb else "baseline")
    return out


def unknown_load_line(c: Dict) -> Optional[str]:
    """One line when a side's machine load is unknown (``load.unknown_on``), else None: the
    verdict weighs only the steps, and a busy machine alone moves single windows' steps beyond
    the spread of identical code (identical PyTorch code with DataLoader workers was measured
    2.6x apart on a shared 2-core machine)."""
    sides = (c.get("load") or {}).get("unknown_on") or []
    if not sides:
        return None
    which = " and the ".join(sides)
    return (f"the machine's load is unknown on the {which} (no system metrics beside the trace): other processes "
            "alone can make a window's steps slower than identical code's spread; compare runs made under the same "
            "load (tfbneck watch --pid shows a run's load while it trains)")
