"""``Findings``: every fact about one host that the verdict rules read, in one value.

Built by :class:`.host_analysis.HostAnalysis` from the modules' facts; read by the rules in
:mod:`.rules` (which may be unit-tested with hand-made findings, no trace needed).
Percentages are shares of the analysed (steady) step time, 0-100.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..schema import OpSummary, SystemMetrics
from .placement import Placement
from .tfdata import Pipeline


@dataclass
class StepFacts:
    """What the step finders found (times in ms)."""
    source: str = "none"              # step_source of the report, or "none"
    count: int = 0                    # steady steps analysed
    mean_ms: float = 0.0
    why_none: Optional[str] = None    # when no steps were found: each finder's reason
    warmup_count: int = 0             # leading steps dominated by graph building, excluded
    warmup_ms: float = 0.0
    warmup_reason: Optional[str] = None
    graph_build_steps: int = 0        # steady steps that built (traced) a graph
    graph_build_ms: float = 0.0       # graph-building time summed over the steady steps
    total_ms: float = 0.0             # the steady steps' time summed
    all_warmup: bool = False          # every step found was warm-up (none left to analyse apart)
    custom_loop: bool = False         # marked steps of the user's own loop (no Keras training function)
    fetch_outside: Optional[str] = None   # the batch was fetched between marked steps: what was done about it
    odd: Optional[str] = None         # the odd (outlier) steps left out of the steady steps, named
    left_out_input_ms: float = 0.0    # input wait summed over the steps left out (warm-up, odd)
    input_bound_steps: int = 0        # steady steps that waited for input >= 20 % of their time

    @property
    def graph_build_pct(self) -> float:
        """Share (%) of the steady steps' time spent building graphs."""
        return 100.0 * self.graph_build_ms / self.total_ms if self.total_ms > 0 else 0.0

    @property
    def found(self) -> bool:
        """At least one steady step was found."""
        return self.count > 0

    @property
    def inferred(self) -> bool:
        """Steps were inferred from a cadence, not read from markers or calls."""
        return self.source.startswith("iterator_cadence")


@dataclass
class StepTiming:
    """Mean time per steady step (ms) by what the step did: the inputs of the what-if
    models (:mod:`.whatif`), built by :func:`.whatif.step_timing`."""
    step_ms: float                    # mean steady step time
    batches_per_step: int
    breakdown_ms: Dict[str, float]    # breakdown category -> mean ms per step
    durations_ms: List[float]         # each steady step
    function_ms: Optional[float] = None   # inside the training tf.function's execution; None: no tf.function ran
    op_span_ms: Optional[float] = None    # from the first to the last op the training function ran in the step
    eager_ops: float = 0.0            # eager op kernels run per step (outside input waits)
    eager_kernel_ms: float = 0.0      # their time per step
    eager_op_floor_us: float = 0.0    # the fixed cost of one eager kernel run (low percentile of their durations)
    model_cpu_ms: Optional[float] = None  # core-ms per step of the training function's executor work on host threads

    @property
    def time_per_batch_ms(self) -> float:
        return self.step_ms / max(self.batches_per_step, 1)

    @property
    def model_cores(self) -> Optional[float]:
        """Cores the training function's executor work kept busy on average (core-ms per ms
        of step); None when unknown. On a CPU-only host this is the model's math, which the
        sampled process tree's cores include."""
        if self.model_cpu_ms is None or self.step_ms <= 0:
            return None
        return self.model_cpu_ms / self.step_ms


@dataclass
class LoaderFacts:
    """PyTorch's DataLoader as the trace shows it (``enumerate(DataLoader)#<iterator>.__next__``
    annotations, :mod:`.torch_host`): the iterator class, whether worker processes load the
    batches (``num_workers`` > 0), the calls seen and the mean wait per steady step (ms)."""
    iterator: str
    workers: bool
    calls: int
    wait_ms_per_step: float


@dataclass
class KernelFacts:
    """Device kernels over the window."""
    count: int
    devices: int
    median_us: float
    median_gap_us: Optional[float]


@dataclass
class GapFact:
    """One long idle gap of a device and what the host did meanwhile (shares of the gap, %)."""
    device: str
    start_ms: float                   # from the start of the host window
    duration_ms: float
    input_wait_pct: float
    training_event: Optional[str]     # the event the training thread spent most of the gap in
    training_event_pct: float
    tfdata_busy_pct: Optional[float]  # busiest tf.data thread; None without tf.data threads
    host_missing: bool = False        # the trace has no host plane


@dataclass
class OwnTime:
    """A worker's own time: the step less its time in collectives (mean ms per step). Set on
    the findings of a worker's own verdict (:func:`.sync.own_verdict`), whose shares are of
    this time."""
    own_ms: float
    step_ms: float


@dataclass
class Slowdown:
    """The slowdown that opened a triggered window (``window.trigger`` of its sidecar, read by
    :func:`tfbneck_plugin.records.slowdown_trigger`): the job's own step time before it and
    in the slow stretch (ms per step, trimmed means) and the trigger's factor."""
    baseline_ms: float
    observed_ms: float
    factor: float
    baseline_p50_ms: Optional[float] = None   # the medians, as the console's line gives them
    observed_p50_ms: Optional[float] = None


@dataclass
class Findings:
    """Every fact about one host that the verdict rules read (see the module docstring)."""
    framework: str                    # "tensorflow", "pytorch", "jax" or "unknown"
    device_kind: str                  # device of the breakdown: "GPU"/"TPU", or "CPU" when the host computes
    placement: Placement
    pct: Dict[str, float]             # breakdown_pct (sums to 100)
    steps: StepFacts = field(default_factory=StepFacts)
    pipeline: Optional[Pipeline] = None
    system: Optional[SystemMetrics] = None   # the sidecar's system metrics (analysis.sysmetrics.summarize)
    eager: bool = False
    kernels: Optional[KernelFacts] = None
    devices: List[Dict] = field(default_factory=list)   # devices.summarize() rows
    gaps: List[GapFact] = field(default_factory=list)
    shared_clock_only: bool = False   # steps from one device's own Steps line
    timing: Optional[StepTiming] = None   # per-step times for the what-if models (None: no steps)
    ops: Optional[OpSummary] = None   # the report's op_summary (analysis.op_report): the advice names the ops
    own_time: Optional[OwnTime] = None    # set when ``pct`` are shares of a worker's time outside collectives
    xla: bool = False                 # XLA executables ran (whatif/fit_to_run: no "compile with XLA")
    slowdown: Optional[Slowdown] = None   # the slowdown trigger opened this window
    loader: Optional[LoaderFacts] = None  # PyTorch's DataLoader (None for other frameworks)
    keras_input: Optional[str] = None     # a Keras fit on JAX or PyTorch: what fed it (tf.data, PyDataset,
    #                                       generator, arrays...), from the callback's input marks (analysis.jax_host)
    #                                       or its sidecar (analysis.torch_host); None outside a Keras fit
    keras_no_xla: Optional[List[str]] = None  # the Keras 3 model's layers without XLA support, with which Keras
    #                                           compiles it without XLA (capture.model_info); None: unknown or none

    def share(self, category: str) -> float:
        """The breakdown share (%) of ``category`` (0 when absent)."""
        return float(self.pct.get(category, 0.0))

    @property
    def transfer_pct(self) -> float:
        """H2D plus D2H copies (% of the step)."""
        return self.share("host_to_device") + self.share("device_to_host")

    @property
    def unseen_workers(self) -> bool:
        """The input's work holds cores the trace does not show: PyTorch DataLoader worker
        processes on a CPU-only host (they load on the model's cores, and only the training
        process is profiled), with no system metrics to measure them."""
        return self.device_kind == "CPU" and self.loader is not None and self.loader.workers and self.system is None
