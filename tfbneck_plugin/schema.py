"""The report contract in code: ``TypedDict`` shapes of one session's report (README "The
report", ``shared/design/diagnosis.md``), and accessors for the values that front doors read
(so that the CLI, the plugin and the API do not repeat nested ``.get()`` chains).

The one home of the report's types: the analysis produces these values (``SessionDict``
for one session) and every consumer reads them through these types (renderers in
:mod:`tfbneck_plugin.render.report`, the plugin routes, the API, the notebook, the Beam pipeline,
the callback's trend); mypy checks both sides (``mypy.ini``, run by ``tests/run.sh``).
``SessionDict`` is the JSON object itself; :class:`tfbneck_plugin.api.SessionReport` is the
same dict with a notebook display. Only the keys of the public contract and the ones front
doors read are typed here; reports carry more (``total=False``: every key may be absent in
an error report).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, TypedDict


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
    why_none: Optional[str]           # no steps: each step finder's reason, in one sentence
    warmup: Dict[str, object]         # count, time_ms, steps, reason, excluded
    outliers: Dict[str, object]       # odd steps left out of the verdict: steps, time_ms, reason
    notes: List[str]                  # how the steps were read (e.g. a batch fetched outside the marked step)
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
    bound_ms: float                   # no model: the best time per batch (ms), the share it acts on removed
    worth: str                        # the worth in words, as every view shows it (schema.worth)
    why_here: str                     # one sentence with this run's numbers: why the change fits it
    worker: str                       # a job's straggler verdict: the worker (task name) whose own limit it fixes


class InputPipeline(TypedDict, total=False):
    """The tf.data stages and the one that blocks the consumer."""
    bottleneck_stage: Optional[str]   # full iterator name of the stage the step waits on; None below 5 % input
    busiest_stage: Optional[str]      # the stage with the most work, whether or not the step waits for it
    stages: List[Dict[str, object]]
    has_prefetch: bool
    py_function_ms: Optional[float]   # time inside tf.py_function calls in the window (ms); None: not measured


class WorstStep(TypedDict, total=False):
    """The step the Trace Viewer link opens: the most input wait, else the longest."""
    step: int
    start_ms: float                   # from the start of the analysed window (as steps.items)
    duration_ms: float
    input_ms: float
    trace_start_ms: float             # the step's bounds on the Trace Viewer's time axis (ms)
    trace_end_ms: float


class OpOccurrence(TypedDict, total=False):
    """An op's longest occurrence in the steady steps (where the Trace Viewer shows it)."""
    start_ms: float                   # from the start of the host window, as worst_step
    duration_ms: float


class TopOp(TypedDict, total=False):
    """One row of ``top_ops``: an op's self time per steady step (analysis.op_report)."""
    name: str                         # op name without its type: sequential/dense_1/MatMul
    type: str                         # op type: MatMul, _FusedMatMul, Conv2D...; device events without an op: their kind
    where: str                        # "device" | "host" | "input_pipeline"
    self_ms_per_step: float           # nested ops not counted; device: share of the busy time
    total_ms_per_step: float          # inclusive
    pct: float                        # % of the steady step (host, input_pipeline) or of the device's busy time
    count_per_step: float
    scope: Optional[str]              # layer scope: sequential/dense_1
    self_ms_steps: List[float]        # self ms in each steady step
    longest: OpOccurrence
    stage: Optional[str]              # input_pipeline: the tf.data stage whose function ran it
    kernels: List[str]                # device: its costliest kernels (names as the trace gives them)
    tensor_core: bool                 # device: a kernel ran on Tensor Cores (by its name, as XProf decides)
    reduced_precision: bool           # device: a kernel works in fp16/bf16 (by its name)


class OpGroup(TypedDict, total=False):
    """One row of ``op_summary.by_type`` / ``by_scope``: ops summed by type or layer scope."""
    where: str
    type: str                         # by_type rows
    scope: str                        # by_scope rows
    stage: Optional[str]              # input_pipeline rows
    self_ms_per_step: float
    pct: float
    count_per_step: float
    ops: int                          # distinct ops in the group


class OpSummary(TypedDict, total=False):
    """The report's ``op_summary``: what ``top_ops`` covers and its grouped views."""
    steps: int                        # steady steps averaged over (1 without steps: the window)
    step_ms: float                    # their mean length
    device_busy_ms_per_step: Optional[float]
    self_ms_per_step: Dict[str, float]   # where -> self time of all its ops
    top10_pct: Dict[str, float]          # where -> % of that self time in its 10 costliest ops
    by_type: List[OpGroup]
    by_scope: List[OpGroup]


class EvidenceItem(TypedDict):
    """One evidence sentence and what it rests on."""
    text: str
    basis: str                        # "trace" | "system_metrics" | "inferred"


class VerdictFields(TypedDict):
    """The report fields of a verdict (:func:`tfbneck_plugin.analysis.verdict.verdict_fields`)."""
    bottleneck: str
    cause: str
    cause_text: str
    confidence: float
    evidence: List[str]
    evidence_detail: List[EvidenceItem]
    recommendations: List[Recommendation]


class SyncStep(TypedDict, total=False):
    """One step of a worker's ``sync`` section (ms; input wait measured before collectives)."""
    step: int
    duration_ms: float
    collective_ms: float
    own_ms: Dict[str, float]          # own category -> ms (analysis.sync.OWN_CATEGORIES)
    start_unix_ns: Optional[int]


class OwnLimit(VerdictFields, total=False):
    """A worker's own verdict: the host rules over its time outside collectives (a verdict's
    fields, and the time they were decided on)."""
    pct: Dict[str, float]             # % of the own time
    own_ms: float                     # mean ms per step outside collectives
    step_ms: float                    # mean ms per step


class SyncClock(TypedDict):
    """The trace's wall-clock window (unix ns)."""
    start_unix_ns: int
    stop_unix_ns: int
    source: str


class SyncSection(TypedDict, total=False):
    """A worker's time around its collectives (analysis.sync.sync_section)."""
    task: Optional[str]               # "worker:1"
    group_size: Optional[int]
    clock: Optional[SyncClock]
    steps: List[SyncStep]
    own: OwnLimit
    network_recommendations: List[Recommendation]


class SystemMetrics(TypedDict, total=False):
    """The system metrics sampled beside a window's trace: the report's ``system_metrics``
    (analysis.sysmetrics.summarize of the sidecar's samples), which the verdict rules read
    as ``Findings.system``. Means over the samples, each weighted by the time it covers.
    Every key is written; the process-tree figures are None for sidecars that lack them
    (``scope`` ``"machine"``)."""
    samples: int                      # samples summarised
    cpu_count: Optional[int]          # the machine's cores
    usable_cores: Optional[int]       # cores the training process may run on (its CPU affinity, else cpu_count)
    sampled_s: Optional[float]        # seconds the samples cover; None for sidecars without each sample's dt_s
    cpu_mean_pct: Optional[float]     # % over all cores
    busiest_core_mean_pct: Optional[float]   # % of the busiest core in each sample
    saturated_cores_mean: Optional[float]    # cores above sysmetrics.SATURATED_CORE_PCT
    proc_cpu_cores: float             # cores the training process alone kept busy
    iowait_pct: Optional[float]       # %
    disk_read_MBps: float             # MB/s, machine-wide
    net_recv_MBps: float              # MB/s, machine-wide, loopback included
    gpu_util_pct: Optional[float]     # %, None without GPUs
    tree_cpu_cores: Optional[float]   # cores used by the training process and its descendants
    others_cpu_cores: Optional[float]  # cores busy with processes outside that tree
    tree_children: Optional[int]      # most descendants seen at once
    pool_threads: Optional[int]       # most Python thread-pool workers seen at once in the training process
    pool_cpu_cores: Optional[float]   # cores those pool workers used over the window (schedstat)
    cpu_exact: bool                   # proc/tree cores from the threads' own clocks (schedstat), not ticks
    tree_disk_read_MBps: Optional[float]     # MB/s the tree read from storage
    net_recv_external_MBps: Optional[float]  # MB/s received on non-loopback interfaces, machine-wide
    remote_connections: Optional[int]        # most TCP connections of the tree to non-loopback peers at once
    loopback_connections: Optional[int]      # the same to loopback peers
    tree_runq_wait_cores: Optional[float]    # mean threads of the tree runnable but waiting for a core
    scope: str                        # "process_tree" when the per-process figures exist, else "machine"
    series: Dict[str, List[Any]]      # per-sample lists: t_ms, cpu_pct, proc_cpu_pct, tree_cpu_pct...


class InputCost(TypedDict, total=False):
    """The input pipeline's cost measured by ablation (``tfbneck_plugin.measure_input_cost``,
    capture/input_cost.py): the same model's fit on the run's input and on cached copies of its
    batches, alternated."""
    real_ms_per_batch: float                  # mean ms per batch on the run's own input
    cached_ms_per_batch: float                # mean ms per batch on cached copies of its batches
    input_ms_per_batch: float                 # the difference (>= 0): what the input costs a batch
    gain: float                               # real / cached
    limit: str                                # "input" (gain >= 1.25) | "model" (< 1.1) | "mixed" | "unsettled"
    unsettled: Optional[str]                  # why the repeats settle nothing (they disagree), else None
    input_share: float                        # input_ms_per_batch / real_ms_per_batch, 0-1
    steps: int                                # steps timed per fit
    repeats: int                              # alternations of the two fits
    backend: str                              # the Keras backend measured on
    input_kind: str                           # "tf.data" | "PyDataset" | "iterator" | "iterable"
    time_unix: float                          # when it was measured
    others_cores: Optional[float]             # cores other processes used during it (probed), None if unknown


class PerHostRow(TypedDict, total=False):
    """One row of ``per_host``: a host of a session, or a worker of a job (ms, %). A job's
    row copies its worker's report; a value that report lacks is None."""
    host: str
    task: str
    run: Optional[str]
    session: Optional[str]
    path: Optional[str]
    step_time_ms: Optional[float]
    breakdown_pct: Optional[Dict[str, float]]
    bottleneck: Optional[str]
    cause: Optional[str]
    confidence: Optional[float]
    trace_viewer: Optional[Dict[str, str]]
    kept_others_waiting_pct: float    # the job's part: how long the others waited for it
    last_in_steps: int
    matched_steps: int
    collective_ms: float
    own_limit: Optional[Dict[str, object]]
    straggler: bool


class SessionDict(TypedDict, total=False):
    """One element of the report's ``sessions`` list."""
    version: str
    run: str
    session: str
    hosts: List[str]
    path: str
    status: str                       # "ok" | "error"
    error: str
    error_kind: str                   # tfbneck_plugin.errors.ERROR_KINDS
    incomplete: str                   # error_kind "incomplete": why the window's trace was not saved
    skipped: str                      # error_kind "skipped": the reason BottleneckProfiler recorded
    framework: str                    # "tensorflow" | "jax" | "pytorch" | "unknown" (from the trace's events)
    device_kind: str                  # "GPU" | "TPU" | "CPU"
    window_ms: float                  # the host window: first to last host event (ms; 0 without host events)
    events: int                       # events in the host's trace
    step_source: str
    steps: Steps
    breakdown_pct: Dict[str, float]   # sums to 100
    bottleneck: str                   # "cpu" | "device" | "io" | "network" | "unknown"
    bottleneck_label: str             # the verdict as every view names it (BOTTLENECK_LABELS)
    category_labels: Dict[str, str]   # breakdown category -> its name for this device (category_label)
    cause: str                        # tfbneck_plugin.causes.CAUSES
    cause_text: str
    confidence: float                 # 0-1
    evidence: List[str]
    evidence_detail: List[EvidenceItem]     # each evidence sentence and what it rests on
    input_pipeline: InputPipeline
    recommendations: List[Recommendation]
    devices: List[Dict[str, object]]
    per_host: List[PerHostRow]                # one row per host or worker (straggler flagged)
    kind: str                                 # "job" for a multi-worker job's grouped sessions,
    #                                           "system_only" for a system record (no trace)
    system_triage: Dict[str, Any]             # system_only: the record's run triage (tfbneck_plugin.system.triage)
    system_record: Dict[str, Any]             # system_only: source, pid, command, cpu_count, times, captures
    system_intervals: List[Dict[str, Any]]    # system_only: t_s, dt_s, tree_cores, cores_busy, gpu_util_pct,
    #                                           disk_read_MBps, net_MBps, bottleneck (the interval's triage)
    job: Dict[str, object]                    # id, grouped_by, sessions, straggler, lateness_pct...
    model: Dict[str, object]                  # what trained, from the callback's sidecar: class, name,
    #                                           layers, params, no_xla (records.recorded_model); absent otherwise
    backend: str                              # the Keras backend BottleneckProfiler ran on: tensorflow, jax or torch
    #                                           (sidecar "backend"); absent for traces the callback did not write
    keras_input: str                          # what fed that fit: tf.data, PyDataset, generator, DataLoader, arrays
    #                                           (sidecar "keras_input"; also grain or other); absent when unknown
    sync: SyncSection                         # a worker's collective time, input measured first
    input_load: Dict[str, object]             # CPU-only host with system metrics: what the input's work takes of
    #                                           the model's cores, ms per step (analysis.cpu_share.InputLoad)
    system_metrics: SystemMetrics             # the metrics sampled beside the trace
    worst_step: Optional[WorstStep]
    interrupted: Dict[str, object]            # training left the window early (records.interrupted_window):
    #                                           steps_recorded, markers_recorded, exception, detected
    top_ops: List[TopOp]                      # costliest ops per place, costliest first
    op_summary: OpSummary
    trace_viewer: Optional[Dict[str, str]]    # run, host: the Trace Viewer link (None: a job whose worker had none)
    warnings: List[str]
    # Added by the batch front doors from the run's step-time trend file (tfbneck_plugin.runs):
    session_time: Optional[float]             # unix s: the time the session folder is named after, else its mtime
    window: Dict[str, object]                 # index, kind ("scheduled" | "triggered"), trigger (its kind), steps,
    #                                           job_step_ms, overhead_x (the job's own step around it, unprofiled),
    #                                           epoch_batches (batches per epoch, where the trend file shows them)
    dataloader: Dict[str, object]             # a PyTorch trace's DataLoader: iterator (its class), workers (bool:
    #                                           worker processes load the batches), wait_ms_per_step
    run_length: Dict[str, float]              # batches, time_ms: the whole run, from its trend files
    input_cost: InputCost                     # the run's newest measurement of its input's cost, where it has one



class HostReport(SessionDict, total=False):
    """The report fields of one host's trace (:meth:`tfbneck_plugin.analysis.host_analysis.
    HostAnalysis.report`: framework, devices, steps, breakdown, verdict, ops, ``sync``),
    and the host's name (``host``, the trace file's). A session report takes these fields
    from its slowest host (:mod:`tfbneck_plugin.analysis.multihost`)."""
    host: str                         # the host as its trace file names it


#: What the accessors below read: a ``SessionDict``, or any mapping of the report's keys (the
#: API's ``SessionReport``, a report loaded from JSON).
Report = Mapping[str, Any]


def step_time_ms(report: Report, stat: str = "mean") -> Optional[float]:
    """One statistic of the step time (ms: ``mean``, ``p50``, ``p90``, ``min``, ``max``), None
    without steps."""
    value = ((report.get("steps") or {}).get("step_time_ms") or {}).get(stat)
    return value if isinstance(value, (int, float)) else None


def share_pct(report: Report, category: str) -> Optional[float]:
    """The breakdown share (%) of ``category``, None when the report has no breakdown."""
    return (report.get("breakdown_pct") or {}).get(category)


def blocking_stage_kind(report: Report) -> str:
    """The blocking tf.data stage's kind (the last part of its iterator name), or ""."""
    name = (report.get("input_pipeline") or {}).get("bottleneck_stage") or ""
    return name.split("::")[-1]


def first_fix(report: Report) -> Optional[Recommendation]:
    """The recommendation to make first (the verdict's "fix first"), or None."""
    recs = report.get("recommendations") or []
    return recs[0] if recs else None


#: The verdict's name in every view (tab, CLI summary, notebook, fleet): ``bottleneck`` -> label.
BOTTLENECK_LABELS: Dict[str, str] = {"cpu": "CPU-bound", "device": "Device-bound", "io": "I/O-bound",
                                     "network": "Network-bound", "unknown": "No verdict"}

#: The breakdown categories' names in every view, worded as the evidence's breakdown
#: sentence words them (``analysis.evidence.breakdown_sentence``); ``device_compute`` is
#: named by :func:`category_label` after the device.
CATEGORY_LABELS: Dict[str, str] = {"input": "Waiting for input", "host_compute": "Host overhead",
                                   "host_to_device": "Host → device copies", "device_to_host": "Device → host copies",
                                   "collective": "Collectives", "kernel_launch": "Kernel launch",
                                   "idle": "Nothing recorded", "device_compute": "Device compute"}


def bottleneck_label(bottleneck: Optional[str]) -> str:
    """The verdict's label (:data:`BOTTLENECK_LABELS`); an unknown code is shown as it is."""
    return BOTTLENECK_LABELS.get(str(bottleneck), str(bottleneck or "unknown"))


def bottleneck_words(bottleneck: Optional[str]) -> str:
    """The verdict's label inside a sentence: :func:`bottleneck_label` with the capital that
    only starts it lowered (``device-bound``, ``no verdict``); ``CPU-bound`` and ``I/O-bound``
    keep theirs."""
    label = bottleneck_label(bottleneck)
    return label[0].lower() + label[1:] if label[1:2].islower() else label


def category_label(category: str, device_kind: Optional[str] = None) -> str:
    """A breakdown category's name (:data:`CATEGORY_LABELS`): ``device_compute`` is "Model
    compute on the CPU" on a CPU-only host, "GPU compute" / "TPU compute" on an accelerator,
    "Device compute" when the device is not known (a fleet of several kinds)."""
    if category == "device_compute" and device_kind:
        return "Model compute on the CPU" if device_kind == "CPU" else f"{device_kind} compute"
    return CATEGORY_LABELS.get(category, category)


def vocabulary() -> Dict[str, Dict[str, str]]:
    """The words of views that show no single report (the tab's session list, fleet and
    trend): ``{"bottleneck_labels", "category_labels"}`` (the device not known)."""
    return {"bottleneck_labels": dict(BOTTLENECK_LABELS), "category_labels": dict(CATEGORY_LABELS)}


def add_words(report: SessionDict) -> SessionDict:
    """Write into ``report`` (and return it) the words every view renders as they are, so no
    view words them again: ``bottleneck_label``, ``category_labels`` (category -> name, for
    this report's device) and each recommendation's ``worth`` (:func:`worth`; also those of
    a worker's ``sync`` section). An error report gets none of them."""
    if report.get("status") != "ok":
        return report
    report["bottleneck_label"] = bottleneck_label(report.get("bottleneck"))
    report["category_labels"] = {c: category_label(c, report.get("device_kind")) for c in CATEGORY_LABELS}
    now = (report.get("steps") or {}).get("time_per_batch_ms")
    sync = report.get("sync") or {}
    own = sync.get("own")
    for recs in (report.get("recommendations"), own.get("recommendations") if own else None,
                 sync.get("network_recommendations")):
        for rec in recs or []:
            rec["worth"] = worth(rec, now)
    return report


def worth(rec: Recommendation, now_ms: Optional[float] = None) -> str:
    """A recommendation's worth in words: its predicted time per batch, speedup and range (and,
    when a gain's range reaches the time per batch today ``now_ms``, that it may gain nothing),
    or (no model) its best case from the share of the step it acts on, or (neither) why it
    has no prediction (``predicted_why_not``), or "".
    The report carries it as each recommendation's ``worth`` (:func:`add_words`): views
    render that string and never word it again."""
    p = rec.get("predicted")
    if p:
        low, high = p["range_ms"]
        gain = (f"{p['speedup']:.2f}x" if p["speedup"] >= 1.005 else
                "no faster" if p["speedup"] > 0.995 else f"{p['speedup']:.2f}x, slower")
        reach = (f", reaching today's {now_ms:.2f} ms: it may gain nothing"
                 if now_ms and p["speedup"] >= 1.005 and high >= now_ms else "")
        return f"predicted {p['time_per_batch_ms']:.2f} ms per batch ({gain}; range {low:.2f}-{high:.2f} ms{reach})"
    bound = rec.get("bound_ms")
    if bound and now_ms:
        return f"at best {bound:.2f} ms per batch (up to {now_ms / bound:.1f}x; no model)"
    why = str(rec.get("predicted_why_not") or "").strip().rstrip(".")
    return f"no prediction: {why[:1].lower()}{why[1:]}; measure it" if why else ""


def top_ops(report: SessionDict, where: Optional[str] = None) -> List[TopOp]:
    """The report's ``top_ops`` rows (of one place when ``where`` is given), costliest first."""
    return [r for r in report.get("top_ops") or [] if where is None or r.get("where") == where]
