"""What each fix is worth: the step time predicted after one recommended change, from the
trace's own numbers, so that recommendations can be ranked by what they gain.

Every recommendation gets ``predicted`` (a dict, below) or ``predicted: None`` with
``predicted_why_not`` (one sentence) when no honest model exists for that change on this
trace. ``predicted``:

    ``time_per_batch_ms``  the steady time per batch after the change (ms)
    ``step_time_ms``       the steady step after the change (ms; a step covers
                           ``steps_per_execution`` batches when that is the change)
    ``range_ms``           [low, high] time per batch (ms): what the model's assumptions allow
    ``speedup``            today's time per batch / the predicted one
    ``basis``              one sentence: the model and its assumptions

The models (per batch, ms; T today's time, I its input wait, R = T - I the rest; cores from
the sampler, :mod:`.cpu_share`: G those the training process tree gets once it wants more):

``prefetch``            the input pipeline runs beside the rest of the step:
                        min(T, max(R, P, W/G)). P, the pipeline's wall time per batch: the
                        input wait when the consumer runs it itself; else its limiting
                        stage's work per batch over the calls it runs at once (an
                        asynchronous stage's self time is the wait for that work, never added
                        to it). W: the CPU work per batch of model and pipeline (the model's
                        executor work, the limiting stage's and the training thread's own
                        time outside ops, from the trace, at most the sampled tree's): on a
                        CPU-only host they share the cores.
``parallel_map``        the same with P = (P - S) + S/n: the limiting stage's work S per
                        batch on one call per core (AUTOTUNE).
``pydataset_workers``   the same with P = S1/k': one worker's Python time per batch over the
                        workers at work at once (all when they wait, at most n when they
                        compute: the input's own cores, the tree's less the model's executor
                        work on a CPU-only host, plus its runnable threads, reach
                        ``BUSY_PROCESS_CORES``).
``steps_per_execution`` the ops' own time in a step, and ``GAP_RECUR`` of the gaps between
                        them, recur per batch; the rest of the median step (Python, Keras,
                        callbacks, the call and the executor's start-up) is paid once per
                        call of k batches.
``tf_function``         eager op by op -> one graph: each op keeps its kernel time less
                        the fixed cost of an eager kernel run, independent ops run together
                        as far as the cores and the graph allow, each op pays an executor's
                        cost instead, and the step one compiled call.

A change that overlaps or adds parallelism is never predicted slower than today; every
range holds its point. A change with no model gets ``bound_ms`` where the share of the step
it acts on bounds it (:data:`ACTS_ON`). The checks against reality: the validation half of
``benchmarks/pairs_corpus.py`` (``docs/predictions.md``), the ``demo_logs`` pairs and
``tests/test_whatif.py``; the constants ``SHARE_GAIN`` and ``GAP_RECUR`` are fit on the
corpus's fit half only (``benchmarks/fit_whatif.py``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from ..schema import Predicted, Recommendation
from ..trace import timeline
from . import breakdown, cpu_share, python_input, torch_whatif
from .findings import Findings, StepTiming

#: Eager kernel runs on the training thread (tensorflow/core/common_runtime/eager/
#: kernel_and_device.cc: ``KernelAndDeviceOp::Run`` / ``KernelAndDeviceFunc::Run`` TraceMes).
EAGER_KERNEL_RUNS = ("KernelAndDeviceFunc::Run", "KernelAndDeviceOp::Run")
#: Percentile of the eager kernel runs' durations taken as the fixed cost of one run (the
#: cheapest ops, ReadVariableOp and friends, do almost nothing but that; our choice).
EAGER_FLOOR_PERCENTILE = 10
#: Cost of one op in TensorFlow's graph executor on the CPU (us: the op span per op run),
#: and of one compiled Keras training call besides its ops (ms: the median step less its op
#: span). Measured here (2-core VM, TF 2.21, Keras 3) on a compiled tiny model, the job
#: demo_logs/pair_spe1, in five runs under other jobs' load, the committed one included:
#: 3.9-6.8 us and 0.55-0.65 ms; the medians (tests/test_whatif.py checks the committed run
#: stays within a factor of two).
GRAPH_OP_US = 5.8
COMPILED_CALL_MS = 0.61
#: How many ops of one training graph TensorFlow's executor runs at once on average, where
#: the cores allow: the compiled dense models here (demo_logs/compute_bound and the 1024x3
#: model of tests/data/cache_filling_window, 2 cores) ran 1.6-1.8 core-ms of ops per ms of their span.
GRAPH_CONCURRENCY = 1.7
#: Fraction of the gaps between a step's ops (executor hand-offs between threads) that
#: recur for every batch inside Keras' multi-step loop; the rest is start-up that a running
#: loop does not pay again. Fit by benchmarks/fit_whatif.py on the steps_per_execution
#: pairs of the corpus's fit half (benchmarks/whatif_fit.json).
GAP_RECUR = 0.35
#: steps_per_execution assumed when a recommendation's code names none (advice.py's value).
DEFAULT_STEPS_PER_EXECUTION = 32
#: Workers assumed when a PyDataset recommendation's code names none (advice.py's value).
DEFAULT_WORKERS = 8
#: Share of the cores other processes used that the training process tree takes once it
#: wants more (0: it keeps what it used plus the idle cores; 1: it gets every core it may
#: run on; see :mod:`.cpu_share`). Fit by benchmarks/fit_whatif.py on the fit half of the
#: pairs corpus (benchmarks/whatif_fit.json).
SHARE_GAIN = 0.15
#: Relative spread given to a model's point value when nothing tighter bounds it (our
#: choice: the step-to-step spread of the demo runs is about this size).
MODEL_SPREAD = 0.15


class CannotHelp(str):
    """A model's reason why the change cannot help this run because it is already made.
    Such a recommendation is not made (:func:`rank` leaves it out)."""

Model = Callable[[Recommendation, Findings], Union[Predicted, str]]


# ---- the facts the models read ------------------------------------------------------------

def step_timing(steps, parts: Dict[str, np.ndarray], view, activity) -> Optional[StepTiming]:
    """Per-step times of one host for the what-if models.

    Args:
      steps: the steady steps (:class:`.steps.Steps`) or None.
      parts: ps per breakdown category per step (:func:`.breakdown.per_step`).
      view: the host view with its training thread (:class:`.host.HostView`) or None.
      activity: the breakdown categories' intervals (:class:`.breakdown.Activity`).

    Returns:
      None without steady steps, else a :class:`.findings.StepTiming` (ms per step).
    """
    if steps is None or not steps.count:
        return None
    n = steps.count
    timing = StepTiming(
        step_ms=float(steps.durations_ps.mean()) / 1e9, batches_per_step=int(steps.batches_per_step),
        breakdown_ms={c: float(parts[c].sum()) / n / 1e9 for c in breakdown.CATEGORIES},
        durations_ms=[float(d) / 1e9 for d in steps.durations_ps])
    if view is None or view.training_line is None:
        return timing
    from .host import INFERENCE_FUNCTION_RE
    fn_ids = view.ids(("whatif-fn",), lambda name: bool(INFERENCE_FUNCTION_RE.match(name)))
    fn = view.select(fn_ids, [view.training_line])
    if fn:
        inside = timeline.overlap_per_window(view.intervals(fn), steps.starts, steps.ends)
        timing.function_ms = float(inside.sum()) / n / 1e9
        act = activity  # the step's work: ops on host threads or devices, copies, launches
        work = timeline.concat([act.device_compute, act.collective, act.host_to_device, act.device_to_host,
                                act.kernel_launch])
        timing.op_span_ms = _op_span_ms(work, steps)
        timing.model_cpu_ms = _core_ms(view.model_executor_intervals(), steps)
    else:  # no training function: the ops ran eagerly, one kernel run each
        _eager_kernels(view, steps, timing)
    return timing


#: Events of XLA executables on the host (XLA:CPU's ``CpuExecutable::ExecuteAsyncOnStream`` and
#: ``ThunkExecutor::Execute``, seen in a Keras ``jit_compile=True`` run here; TF's XLA launch
#: ops ``XlaLaunch`` / ``_XlaRun`` (tensorflow/compiler/jit/kernels/xla_ops.cc)).
XLA_EVENTS = ("CpuExecutable::ExecuteAsyncOnStream", "ThunkExecutor::Execute", "GpuExecutable::ExecuteAsyncOnStream",
              "XlaLaunch", "_XlaRun", "XlaLaunchV2")


def runs_xla(view) -> bool:
    """XLA executables ran in the window (any :data:`XLA_EVENTS` on the host plane)."""
    if view is None:
        return False
    return bool(view.select(view.ids_named(XLA_EVENTS)))


def _op_span_ms(ops: timeline.Intervals, steps) -> Optional[float]:
    """Mean over the steps of the time from the first op start to the last op end inside
    the step (ms): on a CPU-only host the executor's ops, on an accelerator host its
    kernels and copies too (they run after the host has launched them)."""
    s, e = timeline.union(*ops)
    if not len(s):
        return None
    first = np.searchsorted(e, steps.starts, side="right")  # first interval ending after the start
    last = np.searchsorted(s, steps.ends, side="left") - 1  # last interval starting before the end
    ok = (first < len(s)) & (last >= first)
    if not ok.any():
        return None
    lo = np.maximum(s[first[ok]], steps.starts[ok])
    hi = np.minimum(e[last[ok]], steps.ends[ok])
    return float((hi - lo).mean()) / 1e9


def _core_ms(iv: timeline.Intervals, steps) -> float:
    """Core-ms per step of intervals on any number of threads (not merged: two threads busy
    at once count twice) inside the span of the steady steps."""
    s, e = iv
    lo, hi = int(steps.starts.min()), int(steps.ends.max())
    inside = np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0, None)
    return float(inside.sum()) / steps.count / 1e9


def _eager_kernels(view, steps, timing: StepTiming) -> None:
    """Eager kernel runs inside the steady steps, less those that wait for input."""
    sel = view.select(view.ids_named(EAGER_KERNEL_RUNS), [view.training_line])
    if not sel:
        return
    line = view.plane.lines[view.training_line]
    idx = sel[0][1]
    s, e = line.start_ps[idx], line.start_ps[idx] + line.dur_ps[idx]
    in_step = np.zeros(len(s), dtype=bool)
    for lo, hi in zip(steps.starts, steps.ends):
        in_step |= (s >= lo) & (e <= hi)
    wait_s, _ = timeline.union(*view.get_next_intervals())
    if len(wait_s):  # a kernel run that holds an IteratorGetNext is the input wait
        k = np.searchsorted(wait_s, e, side="left") - 1
        holds = (k >= 0) & (wait_s[np.maximum(k, 0)] >= s)
        in_step &= ~holds
    durations = (e - s)[in_step].astype(np.float64) / 1e6  # us
    if not len(durations):
        return
    timing.eager_ops = len(durations) / steps.count
    timing.eager_kernel_ms = float(durations.sum()) / 1e3 / steps.count
    timing.eager_op_floor_us = timeline.percentile(durations, EAGER_FLOOR_PERCENTILE)


# ---- the numbers the models share -----------------------------------------------------------

@dataclass
class PipelineWall:
    """The input pipeline's wall time per batch, from the trace (ms per batch)."""
    wait: float          # the step's input wait
    rest: float          # the rest of the step: now - wait
    now: float           # the pipeline's time per batch as it runs today
    stage: float         # the limiting stage's work per batch, one element at a time
    threads: int         # elements the limiting stage works on at once today
    synchronous: bool    # the consumer runs the pipeline itself (no asynchronous stage above it)
    kind: str            # the limiting stage's kind


def _pipeline_wall(f: Findings) -> Optional[PipelineWall]:
    """The pipeline's wall time per batch. Synchronous (no prefetch, no parallel stage): the
    consumer runs it, so its time is the input wait. Asynchronous: its producer runs beside
    the step, so the wait says only by how much it is late; its time is the limiting stage's
    work per batch over the elements it works on at once (its function's CPU time: the self
    time on the consumer thread is the wait for that work, never added to it)."""
    p, t = f.pipeline, f.timing
    if p is None or p.blocking is None or t is None:
        return None
    st = p.blocking
    batches = max(f.steps.count * t.batches_per_step, 1)
    wait = t.breakdown_ms["input"] / t.batches_per_step
    rest = t.time_per_batch_ms - wait
    stage = st.work_ps / batches / 1e9
    synchronous = not p.blocking_runs_ahead
    if synchronous:
        now = wait
        stage = min(stage, wait) if wait > 0 else stage  # the stage runs inside the wait
    else:
        now = max(stage / min(st.threads, max(_n_cores(f), 1)), wait)
    return PipelineWall(wait=wait, rest=rest, now=now, stage=stage, threads=st.threads,
                        synchronous=synchronous, kind=st.kind)


def _n_cores(f: Findings) -> int:
    c = cpu_share.cores_of(f.system)
    return c.n if c else 1


def _code_int(rec: Recommendation, name: str, default: int) -> int:
    m = re.search(rf"\b{name}\s*=\s*(\d+)", rec.get("code") or "")
    return int(m.group(1)) if m else default


def _timing(f: Findings) -> StepTiming:
    """The findings' step timing: the models run only when there is one (:func:`predict`)."""
    assert f.timing is not None
    return f.timing


def _prediction(f: Findings, per_batch: float, low: float, high: float, basis: str,
                batches_per_step: Optional[int] = None) -> Predicted:
    """A prediction whose range holds its point (the point is clipped into [low, high] where
    the bounds are tighter than the model)."""
    now = _timing(f).time_per_batch_ms
    low, high = max(min(low, high), 1e-6), max(low, high)
    per_batch = min(max(per_batch, low), high)
    b = batches_per_step or _timing(f).batches_per_step
    return {"time_per_batch_ms": round(per_batch, 3), "step_time_ms": round(per_batch * b, 3),
            "range_ms": [round(low, 3), round(high, 3)],
            "speedup": round(now / per_batch, 2), "basis": basis}


# ---- the models -------------------------------------------------------------------------------

def _overlap(f: Findings, pipe: PipelineWall, after: float, what: str) -> Predicted:
    """The step once the input pipeline (``after`` ms per batch) runs beside the rest of the
    step: the longer of the two, unless the CPU work per batch does not fit the cores the
    training process tree gets (a CPU-only host shares them between model and pipeline).
    A change that only overlaps or adds parallelism never makes the step longer than now."""
    now = _timing(f).time_per_batch_ms
    ideal = max(pipe.rest, after)
    cores = cpu_share.cores_of(f.system)
    if cores is None:
        return _prediction(f, ideal, ideal * (1 - MODEL_SPREAD), now, (
            f"{what}; the step becomes the longer of the rest of the step ({pipe.rest:.1f} ms) and the pipeline "
            f"({after:.1f} ms per batch). Without system metrics the cores it shares with the model are unknown: "
            "at worst nothing overlaps."))
    work = _cpu_work(f, pipe, cores)  # core-ms per batch; the change keeps the work
    gets = cores.gets(SHARE_GAIN)
    point = min(max(ideal, work / gets), now)
    low = min(max(ideal, work / cores.n), now)
    high = min(max(ideal, work / cores.free) * (1 + MODEL_SPREAD), now)
    return _prediction(f, point, low, high, (
        f"{what}; the step becomes the longest of the rest of the step ({pipe.rest:.1f} ms), the pipeline "
        f"({after:.1f} ms per batch) and the CPU work per batch of model and pipeline ({work:.1f} core-ms, at most "
        f"the process tree's {cores.tree:.2f} cores x {now:.1f} ms) over the cores the tree gets: the {cores.free:.2f} "
        f"of {cores.n} it used or found idle and {SHARE_GAIN:.0%} of the {cores.others:.2f} other processes used; "
        "never longer than now. The range runs from all the cores to none of the others'."))


def _cpu_work(f: Findings, pipe: PipelineWall, cores) -> float:
    """Core-ms of CPU work per batch that model and pipeline share: the model's executor work,
    the limiting stage's work and the training thread's own time outside ops (Python, Keras,
    the data adapter: the breakdown's host overhead), all from the trace (threads that spin
    while idle add CPU time but no work), at most what the sampler saw the process tree use."""
    t = _timing(f)
    sampled = cores.tree * t.time_per_batch_ms
    if t.model_cpu_ms is None or f.device_kind != "CPU":
        return sampled
    host = t.breakdown_ms.get("host_compute", 0.0) / t.batches_per_step  # the training thread's own Python
    return min(t.model_cpu_ms / t.batches_per_step + pipe.stage + host, sampled)


def _prefetch(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    pipe = _pipeline_wall(f)
    if pipe is None:
        return "The trace holds no tf.data stages: the input pipeline's own time is unknown."
    if f.pipeline is not None and f.pipeline.has_prefetch:
        return CannotHelp("The pipeline already prefetches.")
    what = ("Prefetch runs the pipeline on its own thread beside the step" if pipe.synchronous else
            f"The `{pipe.kind}` stage already runs ahead on its own threads; prefetch adds a buffer")
    return _overlap(f, pipe, pipe.now, what)


def _parallel_map(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    pipe, cores = _pipeline_wall(f), cpu_share.cores_of(f.system)
    if pipe is None:
        return "The trace holds no tf.data stages: the limiting stage's work is unknown."
    if cores is None:
        return "Without system metrics the number of cores a parallel stage could use is unknown."
    k = cores.n  # AUTOTUNE runs up to one call per core
    if pipe.threads >= k:
        now = _timing(f).time_per_batch_ms
        return _prediction(f, now, now, now, (
            f"The `{pipe.kind}` stage already runs {pipe.threads} calls at once on {cores.n} core(s): AUTOTUNE "
            "would run no more."))
    others = max(pipe.now - pipe.stage / pipe.threads, 0.0) if pipe.synchronous else 0.0
    after = others + pipe.stage / k
    return _overlap(f, pipe, after, (
        f"The `{pipe.kind}` stage ({pipe.stage:.1f} ms of work per batch, {pipe.threads} call(s) at a time) runs "
        f"{k} calls at once (AUTOTUNE, one per core) ahead of the step"))


def _pydataset_workers(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    pipe, cores = _pipeline_wall(f), cpu_share.cores_of(f.system)
    if pipe is None:
        return "The trace holds no tf.data stages: the Python input's time is unknown."
    if cores is None:
        return "Without system metrics it is unknown whether the Python input computes or waits."
    now = _timing(f).time_per_batch_ms
    workers, who = python_input.input_workers(f.system)
    workers = max(workers, 1)
    k = _code_int(rec, "workers", DEFAULT_WORKERS)
    computing = bool(python_input.input_computes(f))
    at_once = (lambda w: min(w, cores.n)) if computing else (lambda w: w)
    if at_once(k) <= at_once(workers):
        return _prediction(f, now, now, now, (
            f"{who} already run the Python input"
            f"{f', computing, on all {cores.n} core(s) the run may use' if computing else ''}: {k} workers would run "
            "no more at once."))
    # One batch's Python work on one worker: the generator stage's time per batch (the
    # Python code itself with one worker; with several, the wait for the next batch they
    # deliver) times the workers that were at work at once.
    one = pipe.stage * at_once(workers)
    after = one / at_once(k)
    how = "wanting cores: computing, or runnable and waiting for one" if computing else "waiting"
    return _overlap(f, pipe, after, (
        f"{k} workers run the Python input ({how}, from the sampled CPU "
        f"use: {cores.tree:.2f} cores, {cores.waiting:.2f} more runnable), {at_once(k)} at a time instead of "
        f"{at_once(workers)}, ahead of the step"))


def _steps_per_execution(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    t = _timing(f)
    if t.function_ms is None or t.function_ms <= 0 or not t.op_span_ms:
        return ("The trace shows no call of Keras' training function (eager execution, or a custom loop), so the "
                "step cannot be split into work per batch and overhead per call.")
    k = _code_int(rec, "steps_per_execution", DEFAULT_STEPS_PER_EXECUTION)
    b = t.batches_per_step
    if k <= b:
        return CannotHelp(f"The steps already run {b} batches per call.")
    ops = min(t.breakdown_ms["device_compute"], t.op_span_ms)  # the ops' own time, gaps between them left out
    # The typical step: a step preempted or slowed by the profiler's start is not per-call cost.
    step = timeline.median(t.durations_ms)

    def per_batch(recurring: float) -> float:
        return recurring / b + max(step - recurring, 0.0) / k

    # On an accelerator the gaps between kernels are launches, paid for every kernel of every batch.
    recur, why = (GAP_RECUR, "fit on runs made here") if f.device_kind == "CPU" else (1.0, "kernel launches")
    recurring = ops + recur * (t.op_span_ms - ops)
    point = per_batch(recurring)
    now = t.time_per_batch_ms
    return _prediction(f, point, min(per_batch(ops), now), min(max(per_batch(t.function_ms), point), now), (
        f"With steps_per_execution={k} the ops' own time ({ops / b:.2f} ms per batch) and {recur:.0%} of the "
        f"gaps between them ({(t.op_span_ms - ops) / b:.2f} ms; {why}) recur for every batch, and the rest of the "
        f"median step ({max(step - recurring, 0.0):.2f} ms: Python, Keras, callbacks, the call and its start-up) is "
        f"paid once per {k} batches; the range runs from none of the gaps recurring to the whole function call "
        "recurring."), batches_per_step=k)


def _tf_function(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    t = _timing(f)
    if not f.eager or t.eager_ops <= 0:
        return CannotHelp("The model does not run eagerly: it is already a tf.function.")
    compute = max(t.eager_kernel_ms - t.eager_ops * t.eager_op_floor_us / 1e3, 0.0)
    cores = cpu_share.cores_of(f.system)
    n = cores.gets(SHARE_GAIN) if cores else 1.0  # the cores the run gets (see _overlap)
    together = max(min(n, GRAPH_CONCURRENCY), 1.0)  # independent ops of one graph run at once
    fixed = t.eager_ops * GRAPH_OP_US / 1e3 + COMPILED_CALL_MS + t.breakdown_ms["input"]
    b = t.batches_per_step
    point = (compute / together + fixed) / b
    now = t.time_per_batch_ms
    return _prediction(f, point, (compute / max(n, 1.0) + fixed) / b, min((compute + fixed) / b, now), (
        f"In one graph the {t.eager_ops:.0f} ops per step keep their kernel time ({t.eager_kernel_ms:.1f} ms) less "
        f"the fixed cost of an eager kernel run ({t.eager_op_floor_us:.0f} us each, the {EAGER_FLOOR_PERCENTILE}th "
        f"percentile of their durations), {together:.1f} at a time on the {n:.1f} core(s) it gets (at most "
        f"{GRAPH_CONCURRENCY}, as the executor ran compiled dense models here); each op pays the executor's "
        f"{GRAPH_OP_US:.1f} us and the step one compiled Keras "
        f"call ({COMPILED_CALL_MS} ms); Python between the ops disappears."))


def _no_retracing(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    st, t = f.steps, _timing(f)
    if not st.graph_build_ms:
        return "No steady step built a graph."
    build = st.graph_build_ms / st.count / t.batches_per_step
    after = t.time_per_batch_ms - build
    return _prediction(f, after, after, after + build * MODEL_SPREAD, (
        f"Without retracing, the {build:.1f} ms per batch spent building graphs (tracing, instantiation, "
        "compilation, measured inside the steady steps) disappears; the rest of the step stays."))


def _overlap_copies(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    t = _timing(f)
    h2d = t.breakdown_ms.get("host_to_device", 0.0) / t.batches_per_step
    if h2d <= 0:
        return "No host-to-device copy held the step up."
    now = t.time_per_batch_ms
    return _prediction(f, now - h2d, now - h2d, now, (
        f"Prefetching to the device overlaps the {h2d:.1f} ms per batch of host-to-device copies with the step; "
        "copies back to the host stay."))


#: fix id -> its model.
MODELS: Dict[str, Model] = {
    "prefetch": _prefetch,
    "parallel_map": _parallel_map,
    "pydataset_workers": _pydataset_workers,
    "steps_per_execution": _steps_per_execution,
    "tf_function": _tf_function,
    "tensor_arguments": _no_retracing,
    "input_signature": _no_retracing,
    "reduce_retracing": _no_retracing,
    "prefetch_to_device": _overlap_copies,
}

#: fix id -> why no honest model exists for it (from what a trace can and cannot say).
WHY_NOT: Dict[str, str] = {
    "vectorise_map": "How much of the map's time is fixed cost per call, which batching would amortise, is not "
                     "in a trace taken at one batch size.",
    "cache": "Which part of the preprocessing is deterministic, and so can be cached, is not in the trace.",
    "no_py_function": "How fast TensorFlow ops would do the Python code's work is not in the trace.",
    "tfdata_ops": "How fast TensorFlow ops would do the Python code's work is not in the trace.",
    "augment_on_device": "How long the augmentation would take on the accelerator is not in the trace.",
    "parallel_reads": "How many reads the storage serves at once is not in the trace.",
    "local_copy": "The local disk's speed is not in the trace.",
    "larger_files": "The storage's cost per file open, apart from per byte, is not in the trace.",
    "free_cores": "What the other processes would leave free is not in the trace.",
    "more_cores": "How the run would use cores it did not have is not in the trace.",
    "fewer_syncs": "The interconnect's behaviour at other message sizes is not in the trace.",
    "xla": "Which ops XLA would fuse, and what that saves, is not in the trace.",
    "measure_xla": "This measures a change already made: there is nothing to predict.",
    "mixed_precision": "How much faster the ops run in 16-bit depends on the hardware and the op mix, not in the "
                       "trace.",
    "fix_device_trace": "This fixes the trace, not the step: there is nothing to predict.",
    "use_gpu": "How fast the model would run on the GPU is not in a trace where it ran on the CPU.",
    "step_markers": "This fixes the trace, not the step: there is nothing to predict.",
    "python_tracer": "This fixes the trace, not the step: there is nothing to predict.",
    "profile_training_steps": "This fixes the trace, not the step: there is nothing to predict.",
    "profile_window": "This confirms a first diagnosis from system metrics: there is nothing to predict.",
    "use_xprof": "This trace is not TensorFlow training: there is no step time to predict.",
    **torch_whatif.WHY_NOT,
}


#: fix id -> the breakdown categories the change can at most remove: for a change with no
#: model, its share of the step bounds its gain (``bound_ms``, the best time per batch).
#: Changes to the model's math (XLA, mixed precision, a GPU) have no such bound: they speed
#: the ops up, they do not remove them.
ACTS_ON: Dict[str, Tuple[str, ...]] = {
    "vectorise_map": ("input",), "cache": ("input",), "no_py_function": ("input",), "tfdata_ops": ("input",),
    "augment_on_device": ("input",), "parallel_reads": ("input",), "local_copy": ("input",),
    "larger_files": ("input",), "free_cores": ("input",), "more_cores": ("input",),
    "fewer_syncs": ("collective",),
    **torch_whatif.ACTS_ON,
}
#: A change worth less than this share of the time per batch is within the run-to-run
#: spread of the runs here (two runs of one program differ by up to about this much on the
#: shared 2-core machine of benchmarks/pairs_corpus.py; our choice): "no gain".
NO_GAIN = 0.05



def predict(rec: Recommendation, f: Findings) -> Tuple[Optional[Predicted], Optional[str]]:
    """(prediction, None) or (None, why not) for one recommendation; ``why not`` is a
    :class:`CannotHelp` when the change cannot help this run.

    Args:
      rec: a recommendation of :mod:`.advice` (``fix``, ``title``, ``detail``, ``code``).
      f: the findings the verdict was drawn from (``timing`` and ``steps`` for the step time,
        ``pipeline`` and ``system`` for the input models).
    """
    if f.timing is None or not f.steps.found:
        return None, "No steady step was found: there is no step time to predict from."
    fix = rec.get("fix") or ""
    model = MODELS.get(fix) or torch_whatif.MODELS.get(fix)
    if model is None:
        return None, WHY_NOT.get(fix, "No model of this change from the trace's numbers.")
    out = model(rec, f)
    return (None, out) if isinstance(out, str) else (out, None)


def bound_ms(rec: Recommendation, f: Findings) -> Optional[float]:
    """The best time per batch a change with no model could reach: today's less the share of
    the step it acts on (:data:`ACTS_ON`), or None when that is not known.

    For a change to an input whose work holds cores the model's math needs on a CPU-only
    host (:func:`.cpu_share.input_load` with a share of the cores), the step with the input's
    work and wait gone (:attr:`.cpu_share.InputLoad.after_ms`): its gain is then not bounded
    by the step's wait for it, but by what the input takes of the cores."""
    cats = ACTS_ON.get(str(rec.get("fix")))
    if not cats or f.timing is None or not f.steps.found:
        return None
    t = f.timing
    acts = sum(t.breakdown_ms.get(c, 0.0) for c in cats) / t.batches_per_step
    if "input" in cats:
        load = cpu_share.input_load(f)
        if load is not None and load.share > 0:
            return round(min(load.after_ms / t.batches_per_step, t.time_per_batch_ms - acts), 3)
        if cpu_share.input_cores_ms(f) is not None or f.unseen_workers:
            return None
    return round(max(t.time_per_batch_ms - acts, 1e-3), 3)


def _order(rec: Recommendation, now: float) -> Tuple[int, float]:
    """Sort key: changes with a predicted gain first, by their predicted time per batch; then
    changes with no model whose bound leaves room for a gain, by the middle of [bound, now]
    (the expected time were its gain anywhere between none and all of the share it acts on,
    equally likely): a bound is a best case, not a worth, so it never ranks above a
    prediction; then changes of unknown worth; then those predicted to gain nothing; those
    predicted to slow the run last."""
    p = rec.get("predicted")
    t = p["time_per_batch_ms"] if p else rec.get("bound_ms")
    if t is None:
        return 2, 0.0
    if not p:
        t = (t + now) / 2.0
    if t > now * (1 + NO_GAIN) and p:
        return 4, t
    if t >= now * (1 - NO_GAIN):
        return 3, t
    return (0 if p else 1), t


def rank(recs: List[Recommendation], f: Findings) -> Tuple[List[Recommendation], List[Tuple[Recommendation, str]]]:
    """Each recommendation with ``predicted`` (or ``predicted: None``, ``predicted_why_not``
    and, where the trace bounds it, ``bound_ms``), those that cannot help this run left
    out, ordered by what they gain (:func:`_order`).

    Args:
      recs: the advice catalogue's recommendations for the verdict (updated in place).
      f: the findings (see :func:`predict`).

    Returns:
      (kept, dropped): the kept recommendations reordered, ``kept[0]`` the fix to make
      first; ``dropped``: (recommendation, why it cannot help) of those left out.
    """
    kept: List[Recommendation] = []
    dropped: List[Tuple[Recommendation, str]] = []
    for rec in recs:
        pred, why = predict(rec, f)
        if isinstance(why, CannotHelp):
            dropped.append((rec, str(why)))
            continue
        rec["predicted"] = pred
        if pred is None:
            assert why is not None  # predict gives the reason whenever it gives no prediction
            rec["predicted_why_not"] = why
            b = bound_ms(rec, f)
            if b is not None:
                rec["bound_ms"] = b
        kept.append(rec)
    now = f.timing.time_per_batch_ms if f.timing is not None else 0.0
    kept.sort(key=lambda r: _order(r, now))  # stable: ties keep the catalogue's order
    return kept, dropped
