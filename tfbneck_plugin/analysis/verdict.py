"""The verdict as a value: which link limits the step, why, how sure, and what to change.

Both verdict engines build it: the host rules (:mod:`.rules`, over one host's
:class:`.findings.Findings`) and the job rules (:mod:`.job`, over a multi-worker job's
``JobFindings``). Each engine is an ordered list of rules, small functions of the findings
that return a :class:`Verdict` or None (does not apply), tried in order by
:func:`first_verdict`. :func:`verdict_fields` turns any verdict into the report's fields.
The engines import this module, never the other way round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional, TypeVar

from ..causes import cause_text
from ..schema import EvidenceItem, Recommendation, VerdictFields
from .evidence import basis


@dataclass
class Verdict:
    """What limits the step: the bottleneck kind, the cause code, the confidence (0-1), the evidence
    sentences (``str``, or the :class:`.evidence.Inferred` / :class:`.evidence.Sampled` kinds that
    say their basis) and the recommendations.
    """
    bottleneck: str
    cause: str
    confidence: float                  # 0-1: the chance the verdict is right
    evidence: List[str] = field(default_factory=list)
    recommendations: List[Recommendation] = field(default_factory=list)


def confidence(share: float, threshold: float, penalty: float = 0.0) -> float:
    """0.5 at the threshold, rising linearly to 0.95 at 100 %, minus ``penalty``; within 0.05-0.95.

    Args:
      share: the share (%) of step time the verdict rests on.
      threshold: the rule's threshold (%).
    """
    span = max(100.0 - threshold, 1e-9)
    value = 0.5 + 0.45 * min(max((share - threshold) / span, 0.0), 1.0)
    return round(max(0.05, min(0.95, value - penalty)), 2)


F = TypeVar("F")
V = TypeVar("V", bound=Verdict)


def first_verdict(rules: Iterable[Callable[[F], Optional[V]]], findings: F) -> V:
    """The verdict of the first rule that applies to ``findings``.

    Raises:
      LookupError: no rule applied (each engine ends with a rule that always does).
    """
    for rule in rules:
        v = rule(findings)
        if v is not None:
            return v
    raise LookupError("no verdict rule applied: the last rule of an engine must always apply")


def evidence_details(sentences: Iterable[str]) -> List[EvidenceItem]:
    """``evidence_detail`` of the report: each sentence with its basis (:func:`.evidence.basis`)."""
    return [{"text": str(s), "basis": basis(s)} for s in sentences]


def verdict_fields(v: Verdict, framework: str = "tensorflow") -> VerdictFields:
    """The report fields of a verdict, in the report's key order: ``bottleneck``, ``cause``,
    ``cause_text`` (:func:`tfbneck_plugin.causes.cause_text`, in ``framework``'s words), ``confidence`` (0-1),
    ``evidence`` (sentences), ``evidence_detail`` (``{"text", "basis"}`` each) and
    ``recommendations``."""
    return {"bottleneck": v.bottleneck, "cause": v.cause, "cause_text": cause_text(v.cause, framework),
            "confidence": v.confidence, "evidence": [str(e) for e in v.evidence],
            "evidence_detail": evidence_details(v.evidence), "recommendations": v.recommendations}
