"""The verdict: which link limits the step, why, how sure, and what to change.

``decide(findings)`` tries the rules of :mod:`.rules` in order; the first that applies gives
the bottleneck, the cause code (:mod:`tfbneck_plugin.causes`), the confidence and the
evidence; the recommendations come from the advice catalogue (:mod:`.advice`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

from ..causes import CAUSES
from . import evidence as ev
from .advice import advice_for
from .findings import Findings


@dataclass
class Verdict:
    bottleneck: str
    cause: str
    confidence: float                  # 0-1: the chance the verdict is right
    evidence: List[str] = field(default_factory=list)
    recommendations: List[Dict] = field(default_factory=list)


def confidence(share: float, threshold: float, penalty: float = 0.0) -> float:
    """0.5 at the threshold, rising linearly to 0.95 at 100 %, minus ``penalty``; within 0.05-0.95.

    Args:
      share: the share (%) of step time the verdict rests on.
      threshold: the rule's threshold (%).
    """
    span = max(100.0 - threshold, 1e-9)
    value = 0.5 + 0.45 * min(max((share - threshold) / span, 0.0), 1.0)
    return round(max(0.05, min(0.95, value - penalty)), 2)


def decide(f: Findings) -> Verdict:
    """The first rule of ``rules.RULES`` that applies, with its advice and the evidence that
    holds for every verdict (why no steps were found, what the devices did)."""
    from .rules import RULES  # rules build Verdicts: import here to keep one direction of import
    for rule in RULES:
        v = rule(f)
        if v is not None:
            break
    assert CAUSES[v.cause].bottleneck == v.bottleneck, (v.cause, v.bottleneck)
    if v.cause == "not_tensorflow":
        return v
    v.recommendations = advice_for(v.cause, f)
    if not f.steps.found and f.steps.why_none:
        v.evidence.insert(0, f.steps.why_none)
    if f.placement.legacy_state == "untraced_pluggable":
        v.evidence.append(f"Tensors were allocated by `{f.placement.untraced_allocator}`: the ops ran on an "
                          "accelerator (a PluggableDevice such as Apple Metal) whose activity the profiler did not "
                          "record; time the training function waited on it is counted as device compute.")
    if v.cause != "device_trace_missing":
        v.evidence.extend(ev.device_sentences(f))
    return v
