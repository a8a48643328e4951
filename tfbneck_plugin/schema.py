"""The report contract in code: ``TypedDict`` shapes of one session's report (README "The
report", ``shared/design/diagnosis.md``), and accessors for the values that front doors read
(so that the CLI, the plugin and the API do not repeat nested ``.get()`` chains).

Only the keys of the public contract and the ones front doors read are typed here;
reports carry more (``total=False``: every key may be absent in an error report).
"""
from __future__ import annotations

from typing import Dict, List, Optional, TypedDict


class StepTime(TypedDict, total=False):
    """Step-time statistics over the steady steps (ms)."""
    mean: float                       # ms
    p50: float
    p90: float
    min: float
    max: float


class StepItem(TypedDict, total=False):
    """One steady step."""
    step: int
    start_ms: float                   # from the start of the host window
    duration_ms: float
    breakdown_ms: Dict[str, float]    # category -> ms, sums to duration_ms


class Steps(TypedDict, total=False):
    """The report's ``steps`` object: how steps were found and their times."""
    count: int
    step_time_ms: Optional[StepTime]
    items: List[StepItem]
    dropped_partial: int
    batches_per_step: int
    time_per_batch_ms: float
    tried: List[Dict[str, str]]       # {"finder", "why_not"}
    why_none: str
    warmup: Dict[str, object]         # count, time_ms, steps, reason, excluded
    graph_builds: Dict[str, float]    # steps, time_ms, pct


class Predicted(TypedDict, total=False):
    """What the steady step would take after one recommended change (ms)."""
    time_per_batch_ms: float
    step_time_ms: float
    range_ms: List[float]             # [low, high]
    speedup: float
    basis: str


class Recommendation(TypedDict, total=False):
    """One change to make, with its predicted effect."""
    fix: str                          # kind of change: parallel_map, prefetch, steps_per_execution...
    title: str
    detail: str
    code: Optional[str]
    predicted: Optional[Predicted]
    predicted_why_not: str


class InputPipeline(TypedDict, total=False):
    """The tf.data stages and the one that blocks the consumer."""
    bottleneck_stage: Optional[str]   # full tf.data iterator name
    stages: List[Dict[str, object]]
    has_prefetch: bool


class SessionReport(TypedDict, total=False):
    """One element of the report's ``sessions`` list."""
    version: str
    run: str
    session: str
    hosts: List[str]
    path: str
    status: str                       # "ok" | "error"
    error: str
    error_kind: str                   # tfbneck_plugin.errors.ERROR_KINDS
    device_kind: str                  # "GPU" | "TPU" | "CPU"
    step_source: str
    steps: Steps
    breakdown_pct: Dict[str, float]   # sums to 100
    bottleneck: str                   # "cpu" | "device" | "io" | "network" | "unknown"
    cause: str                        # tfbneck_plugin.causes.CAUSES
    cause_text: str
    confidence: float                 # 0-1
    evidence: List[str]
    evidence_detail: List[Dict[str, str]]   # {"text", "basis": "trace" | "system_metrics" | "inferred"}
    input_pipeline: InputPipeline
    recommendations: List[Recommendation]
    devices: List[Dict[str, object]]
    per_host: List[Dict[str, object]]         # one row per host or worker (straggler flagged)
    kind: str                                 # "job" for a multi-worker job's grouped sessions
    job: Dict[str, object]                    # id, grouped_by, sessions, straggler, lateness_pct...
    sync: Dict[str, object]                   # a worker's collective time, input measured first
    system_metrics: Dict[str, object]
    worst_step: Optional[Dict[str, float]]
    interrupted: Dict[str, object]            # training left the window early (records.interrupted_window):
    #                                           steps_recorded, markers_recorded, exception, detected
    trace_viewer: Dict[str, str]
    warnings: List[str]


def step_time_ms(report: SessionReport, stat: str = "mean") -> Optional[float]:
    """One statistic of the step time (ms), None without steps."""
    return ((report.get("steps") or {}).get("step_time_ms") or {}).get(stat)


def share_pct(report: SessionReport, category: str) -> Optional[float]:
    """The breakdown share (%) of ``category``, None when the report has no breakdown."""
    return (report.get("breakdown_pct") or {}).get(category)


def blocking_stage_kind(report: SessionReport) -> str:
    """The blocking tf.data stage's kind (the last part of its iterator name), or ""."""
    name = (report.get("input_pipeline") or {}).get("bottleneck_stage") or ""
    return name.split("::")[-1]


def first_fix(report: SessionReport) -> Optional[Recommendation]:
    """The recommendation to make first (the verdict's "fix first"), or None."""
    recs = report.get("recommendations") or []
    return recs[0] if recs else None
