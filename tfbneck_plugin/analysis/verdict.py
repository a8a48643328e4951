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
    """What limits the step: the bottleneck kind, the cause code, the confidence (0-1), the evidence
    sentences and the recommendations.
    """
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


#: Highest confidence of a verdict over a window in which no step was found: the breakdown
#: then mixes whatever the window held (our choice; calibrated in README "Confidence").
NO_STEPS_CONFIDENCE = 0.4
#: Highest confidence when the device's time is inferred (an untraced PluggableDevice) or
#: when every step found was warm-up (our choice; calibrated likewise).
INFERRED_DEVICE_CONFIDENCE = 0.6
WARMUP_ONLY_CONFIDENCE = 0.4
#: Confidence lost when the steps were inferred from the iterator cadence (our choice).
INFERRED_STEPS_PENALTY = 0.1


def decide(f: Findings) -> Verdict:
    """The first rule of ``rules.RULES`` that applies, with its advice, the evidence that
    holds for every verdict (warm-up, why no steps were found, what the devices did) and
    the confidence adjusted for what could not be measured."""
    from .rules import RULES, untraced_device_sentence  # rules build Verdicts: one direction of import
    for rule in RULES:
        v = rule(f)
        if v is not None:
            break
    assert CAUSES[v.cause].bottleneck == v.bottleneck, (v.cause, v.bottleneck)
    if v.cause == "not_tensorflow":
        return v
    from .whatif import rank  # the what-if models read the findings only
    v.recommendations = rank(advice_for(v.cause, f), f)  # with `predicted`, the largest gain first
    if f.steps.odd:
        v.evidence.insert(0, f.steps.odd)
    if f.steps.fetch_outside:
        v.evidence.insert(0, f.steps.fetch_outside)
    if f.steps.warmup_count:
        v.evidence.insert(0, _warmup_sentence(f))
    if not f.steps.found and f.steps.why_none:
        v.evidence.insert(0, f.steps.why_none)
    if f.placement.state == "untraced_pluggable":
        v.evidence.append(untraced_device_sentence(f))
    if v.cause != "device_trace_missing":
        v.evidence.extend(ev.device_sentences(f))
    v.confidence = _adjusted(v, f)
    return v


def _warmup_sentence(f: Findings) -> str:
    st = f.steps
    if st.all_warmup:
        return (f"Every step in the window ({st.warmup_count}) was warm-up ({st.warmup_reason}): there is no steady "
                "step to analyse apart; profile later steps.")
    return (f"{st.warmup_count} warm-up step(s) ({st.warmup_ms:.1f} ms) were excluded from the breakdown and the "
            f"verdict: {st.warmup_reason}.")


def _adjusted(v: Verdict, f: Findings) -> float:
    """The rule's confidence, lowered where the facts behind it are partial."""
    c = v.confidence
    if v.bottleneck == "unknown":
        return c
    if not f.steps.found:
        c = min(c, NO_STEPS_CONFIDENCE)
    if f.steps.all_warmup:
        c = min(c, WARMUP_ONLY_CONFIDENCE)
    if f.steps.inferred:
        c -= INFERRED_STEPS_PENALTY
    if f.placement.state == "untraced_pluggable":
        c = min(c, INFERRED_DEVICE_CONFIDENCE)
    return round(max(0.05, c), 2)
