"""Odd steps: a steady step far slower than the others, left out of the verdict and named.

A window of a handful of steps is summarised by what most of its steps do. One step that
took several times the median (a garbage collection, a checkpoint, the profiler's own
start) would otherwise decide a breakdown of means.

A step is odd when its duration's modified z-score (0.6745 (x - median) / MAD) exceeds
``ODD_Z`` (Iglewicz & Hoaglin, 1993: "How to Detect and Handle Outliers", the same test as
the straggler host's, with the MAD floored at ``MAD_FLOOR`` of the median so that very
regular steps do not make any jitter odd) and it took at least ``ODD_SLOWDOWN`` x the
median (the warm-up rule's factor, :data:`.steps.WARMUP_SLOWDOWN`). Only slow steps are
odd, only with at least ``MIN_STEPS`` steps, and at most ``MAX_ODD_SHARE`` of them: when
more are slow the window is bimodal, which is what it does, not an accident. One exception
keeps a busy host's jitter from hiding an accident: when more steps pass the test than the
share allows, the slowest of them are still odd if they are few enough and each took at
least ``ODD_SLOWDOWN`` x the slowest of the rest (a 2.3 ms window with steps of 9.2 and
5.9 ms under load and one of 100 ms: the 100 ms step is odd, the other two stay in the
window; four steps of 2.5x in eight, with no such gap between them, stay a pattern).
Slow steps that spent most of their time waiting for their batch, two or more in a window, are
not set aside (:data:`INPUT_WAIT_SHARE`, :data:`INPUT_WAIT_RHYTHM`, decided in
:mod:`.host_analysis`, which has the breakdown): the input falling behind recurs, and the report
names them as kept (:func:`waited_sentence`).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..trace import timeline
from .steps import WARMUP_SLOWDOWN

#: Modified z-score above which a step is an outlier (Iglewicz & Hoaglin 1993).
ODD_Z = 3.5
#: MAD floor as a share of the median (the straggler rule's 5 %).
MAD_FLOOR = 0.05
#: An odd step also took at least this many times the median step.
ODD_SLOWDOWN = WARMUP_SLOWDOWN
#: Fewest steps for a median to stand for "most steps" (4: one odd step is a minority of 25 %).
MIN_STEPS = 4
#: Largest share of the steps that may be set aside as odd (our choice: a quarter; more
#: slow steps are a pattern of the window).
MAX_ODD_SHARE = 0.25
#: A slow step that spent at least this share of its time waiting for input is not set aside:
#: a step waits for its batch when the input pipeline, not an accident of the host, is
#: slower than the step at that moment, and a window too short to show the input's rhythm
#: (a PyDataset's queue running dry every few steps: 2 steps of 9 at 25 and 59 ms beside a
#: 4.4 ms median, almost all of it waiting) would otherwise read as a fast input. Our
#: choice: the majority of the step.
INPUT_WAIT_SHARE = 0.5
#: Fewest such steps in one window for them to stay in: two are the input's rhythm (the
#: PyDataset above); one alone may be a one-off stall, which the job's own clock, not the
#: window, can tell from a rhythm (its job-scale figures then say so: run_evidence).
INPUT_WAIT_RHYTHM = 2


def odd_steps(durations_ps: np.ndarray) -> np.ndarray:
    """Which steps are odd (module docstring).

    Args:
        durations_ps: steady step durations, int64 ps, shape (n_steps,).

    Returns:
        bool mask, shape (n_steps,); all False when none is odd or too many would be.
    """
    d = np.asarray(durations_ps, dtype=np.float64)
    odd = np.zeros(len(d), dtype=bool)
    if len(d) < MIN_STEPS:
        return odd
    median = timeline.median(d)
    mad = max(timeline.median(np.abs(d - median)), MAD_FLOOR * median)
    if median <= 0 or mad <= 0:
        return odd
    odd = (0.6745 * (d - median) / mad > ODD_Z) & (d >= ODD_SLOWDOWN * median)
    allowed = int(MAX_ODD_SHARE * len(d))
    if odd.sum() <= allowed:
        return odd
    # Too many: the largest k <= allowed slowest steps that each took ODD_SLOWDOWN x the
    # slowest of the others, if any such k exists.
    order = np.argsort(-d, kind="stable")
    for k in range(allowed, 0, -1):
        if d[order[k - 1]] >= ODD_SLOWDOWN * d[order[k]]:
            odd = np.zeros(len(d), dtype=bool)
            odd[order[:k]] = True
            return odd
    return np.zeros(len(d), dtype=bool)


def odd_sentence(numbers, durations_ps, input_ps, median_ps: float) -> Optional[str]:
    """One sentence naming the odd steps: number, duration, input wait, against the median.

    Args:
        numbers: the odd steps' numbers; durations_ps, input_ps: their durations and input
            wait (ps), same length; median_ps: the median of all steady steps (ps).
    """
    if not len(numbers):
        return None
    parts = [f"step {int(n)} took {d / 1e9:.2f} ms ({d / median_ps:.1f}x the median step of {median_ps / 1e9:.2f} ms"
             f"{f', {i / 1e9:.2f} ms of it waiting for input' if i > 0 else ''})"
             for n, d, i in zip(numbers, durations_ps, input_ps, strict=True)]
    which = "it is an outlier" if len(parts) == 1 else "they are outliers"
    return (f"{'; '.join(parts)}: {which} (modified z-score > {ODD_Z}), left out of the breakdown and the verdict, "
            "which rest on what the other steps do.")


def waited_sentence(numbers, durations_ps, input_ps, median_ps: float) -> Optional[str]:
    """One sentence naming the slow steps kept in because they waited for input
    (:data:`INPUT_WAIT_SHARE`): number, duration, input wait, against the median of the others."""
    if not len(numbers):
        return None
    parts = [f"step {int(n)} took {d / 1e9:.2f} ms"
             + (f" ({d / median_ps:.1f}x the median of the others, {median_ps / 1e9:.2f} ms)" if median_ps > 0 else "")
             + f", {i / 1e9:.2f} ms of it waiting for input"
             for n, d, i in zip(numbers, durations_ps, input_ps, strict=True)]
    return (f"{'; '.join(parts)}: kept in the breakdown and the verdict, though slow enough to be outliers "
            f"(modified z-score > {ODD_Z}): steps that spent {INPUT_WAIT_SHARE:.0%} or more of their time waiting for "
            "their batch, again and again in one window, show the input falling behind, not an accident of the host.")
