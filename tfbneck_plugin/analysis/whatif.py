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

The models (times per steady step, ms; T the step, I its input wait, R = T - I the rest):

``prefetch``            the input pipeline overlaps the step: max(R, P, W/n), where P is the
                        pipeline's own time per batch (the larger of the input wait and the
                        work its stages recorded) and W/n the CPU work the training process
                        did per step (sampled cores x T) spread over the machine's n cores:
                        on a CPU-only host the pipeline shares cores with the model. (The
                        range's top: the other processes keep the cores they used.)
``parallel_map`` / ``pydataset_workers``  the limiting stage runs on k threads or workers
                        (and, being asynchronous, overlaps the step): P becomes
                        (P - S) + S/k for the stage's work S per batch.
``steps_per_execution`` the ops' own time in a step, and a small part of the gaps between
                        them (the span from first op start to last op end, less the ops'
                        time), recur per batch; the rest of the median step (Python, Keras,
                        callbacks, the call and the executor's start-up) is paid once per
                        call of k batches.
``tf_function``         eager op by op -> one graph: each op keeps its kernel time less
                        the fixed cost of an eager kernel run, independent ops run together
                        as far as the cores and the graph allow, each op pays an executor's
                        cost instead, and the step one compiled call.

The checks against reality: ``demo_logs/PAIRS.json`` (before/after runs made here, each
changing one thing) and ``tests/test_whatif.py``.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from ..trace import timeline
from . import breakdown, sysmetrics
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
#: the cores allow: the compiled dense models here (demo_logs/compute_bound and
#: cpu_bound_input_fixed, 2 cores) ran 1.6-1.8 core-ms of ops per ms of their span.
GRAPH_CONCURRENCY = 1.7
#: Fraction of the gaps between a step's ops (executor hand-offs between threads) that
#: recur for every batch inside Keras' multi-step loop; the rest is start-up that a running
#: loop does not pay again. Fit here on four pairs of runs like demo_logs' pair_spe1 ->
#: pair_spe32, made before the committed ones (2-core VM under other jobs' load): from 0 to
#: 0.1 every prediction was within 25 % (-23 % to +17 % at 0.05); 0.5 gave up to +69 %.
GAP_RECUR = 0.05
#: steps_per_execution assumed when a recommendation's code names none (advice.py's value).
DEFAULT_STEPS_PER_EXECUTION = 32
#: Workers assumed when a PyDataset recommendation's code names none (advice.py's value).
DEFAULT_WORKERS = 8
#: Fewest cores a process is assumed to get (guards the division; our choice).
MIN_FREE_CORES = 0.1
#: Relative spread given to a model's point value when nothing tighter bounds it (our
#: choice: the step-to-step spread of the demo runs is about this size).
MODEL_SPREAD = 0.15

Prediction = Dict[str, object]
Model = Callable[[Dict, Findings], Union[Prediction, str]]


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
    else:  # no training function: the ops ran eagerly, one kernel run each
        _eager_kernels(view, steps, timing)
    return timing


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
    timing.eager_op_floor_us = float(np.percentile(durations, EAGER_FLOOR_PERCENTILE))


# ---- the numbers the models share -----------------------------------------------------------

def _stage_per_batch_ms(st, batches: int) -> float:
    """A stage's work per batch (ms): per call x calls per batch (a stage before ``batch``
    runs once per element). Calls cut by the window's edges do not change the ratio."""
    if st.calls:
        per_batch_calls = max(1, round(st.calls / max(batches, 1)))
        return st.work_ps / st.calls * per_batch_calls / 1e9
    return st.work_ps / max(batches, 1) / 1e9


def _pipeline_ms(f: Findings) -> Optional[Tuple[float, float]]:
    """(P, S): the input pipeline's own time per batch and its limiting stage's work per
    batch (ms). P is the larger of the input wait and the work its stages recorded (an
    asynchronous stage's work counts once per thread it runs on)."""
    p, t = f.pipeline, f.timing
    if p is None or p.blocking is None or t is None:
        return None
    batches = f.steps.count * t.batches_per_step
    total = blocking = 0.0
    for st in p.stages:
        if st.category == "buffer":
            continue
        work = _stage_per_batch_ms(st, batches)
        par = st.parallelism if isinstance(st.parallelism, (int, float)) else None
        if par and par > 1:
            work /= par
        total += work
        if st is p.blocking:
            blocking = work
    wait = t.breakdown_ms["input"] / t.batches_per_step
    return max(wait, total), blocking


def _cores(f: Findings) -> Optional[Tuple[int, float, float]]:
    """(n cores, cores the training process tree used, cores other processes used) from the
    system metrics, or None without them."""
    s = f.system
    if not s or not s.get("cpu_count"):
        return None
    n = int(s["cpu_count"])
    own = s.get("tree_cpu_cores")
    own = float(own if own is not None else s.get("proc_cpu_cores") or 0.0)
    return n, own, sysmetrics.other_cores(s, own, n)


def _code_int(rec: Dict, name: str, default: int) -> int:
    m = re.search(rf"\b{name}\s*=\s*(\d+)", rec.get("code") or "")
    return int(m.group(1)) if m else default


def _timing(f: Findings) -> StepTiming:
    """The findings' step timing: the models run only when there is one (:func:`predict`)."""
    assert f.timing is not None
    return f.timing


def _prediction(f: Findings, per_batch: float, low: float, high: float, basis: str,
                batches_per_step: Optional[int] = None) -> Prediction:
    now = _timing(f).time_per_batch_ms
    per_batch = max(per_batch, 1e-6)
    b = batches_per_step or _timing(f).batches_per_step
    return {"time_per_batch_ms": round(per_batch, 3), "step_time_ms": round(per_batch * b, 3),
            "range_ms": [round(min(low, per_batch), 3), round(max(high, per_batch), 3)],
            "speedup": round(now / per_batch, 2), "basis": basis}


# ---- the models -------------------------------------------------------------------------------

def _overlap(f: Findings, pipeline_after: float, what: str) -> Prediction:
    """The step once the input pipeline (``pipeline_after`` ms per batch) runs beside it:
    the longer of the rest of the step and the pipeline, unless the CPU work per step does
    not fit the machine's cores (a CPU-only host shares them between model and pipeline)."""
    t = _timing(f)
    now = t.time_per_batch_ms
    rest = now - t.breakdown_ms["input"] / t.batches_per_step
    ideal = max(rest, pipeline_after)
    cores = _cores(f)
    if cores is None:
        return _prediction(f, ideal, ideal * (1 - MODEL_SPREAD), now, (
            f"{what}; the step becomes the longer of the rest of the step ({rest:.1f} ms) and the pipeline "
            f"({pipeline_after:.1f} ms per batch). Without system metrics the cores it shares with the model are "
            "unknown: at worst nothing overlaps."))
    n, own, others = cores
    work = own * now  # core-ms the training process used per batch
    point = max(ideal, work / n)
    contended = work / max(n - others, own, MIN_FREE_CORES)  # had the other processes kept their cores
    return _prediction(f, point, point * (1 - MODEL_SPREAD), max(point * (1 + MODEL_SPREAD), contended), (
        f"{what}; the step becomes the longest of the rest of the step ({rest:.1f} ms), the pipeline "
        f"({pipeline_after:.1f} ms per batch) and the CPU work the training process did per batch ({own:.2f} "
        f"cores x {now:.1f} ms) spread over the machine's {n} cores, which model and pipeline share; the "
        f"range's top assumes the other processes keep the {others:.2f} cores they used."))


def _prefetch(rec: Dict, f: Findings) -> Union[Prediction, str]:
    pipe = _pipeline_ms(f)
    if pipe is None:
        return "The trace holds no tf.data stages: the input pipeline's own time is unknown."
    return _overlap(f, pipe[0], "Prefetch overlaps the input pipeline with the step")


def _parallel_stage(rec: Dict, f: Findings) -> Union[Prediction, str]:
    pipe, cores = _pipeline_ms(f), _cores(f)
    if pipe is None:
        return "The trace holds no tf.data stages: the limiting stage's work is unknown."
    if cores is None:
        return "Without system metrics the number of cores a parallel stage could use is unknown."
    total, stage = pipe
    n, own, _others = cores
    if rec["fix"] == "pydataset_workers":
        workers = _code_int(rec, "workers", DEFAULT_WORKERS)
        # Workers that wait (sleep, I/O) all wait at once; workers that compute share the cores.
        k = workers if own < sysmetrics.BUSY_PROCESS_CORES else min(workers, n)
        what = (f"{workers} workers run the Python input ({'waiting' if k == workers else 'computing'}, from the "
                f"sampled CPU use), {k} at a time, ahead of the step")
    else:
        k = n
        blocking = f.pipeline.blocking if f.pipeline is not None else None
        kind = blocking.kind if blocking is not None else "?"
        what = f"The `{kind}` stage runs on the {n} cores (AUTOTUNE) and overlaps the step"
    return _overlap(f, total - stage + stage / k, what)


def _steps_per_execution(rec: Dict, f: Findings) -> Union[Prediction, str]:
    t = _timing(f)
    if t.function_ms is None or t.function_ms <= 0 or not t.op_span_ms:
        return ("The trace shows no call of Keras' training function (eager execution, or a custom loop), so the "
                "step cannot be split into work per batch and overhead per call.")
    k = _code_int(rec, "steps_per_execution", DEFAULT_STEPS_PER_EXECUTION)
    b = t.batches_per_step
    if k <= b:
        return f"The steps already run {b} batches per call."
    ops = min(t.breakdown_ms["device_compute"], t.op_span_ms)  # the ops' own time, gaps between them left out
    # The typical step: a step preempted or slowed by the profiler's start is not per-call cost.
    step = float(np.median(t.durations_ms))

    def per_batch(recurring: float) -> float:
        return recurring / b + max(step - recurring, 0.0) / k

    # On an accelerator the gaps between kernels are launches, paid for every kernel of every batch.
    recur, why = (GAP_RECUR, "fit on runs made here") if f.device_kind == "CPU" else (1.0, "kernel launches")
    recurring = ops + recur * (t.op_span_ms - ops)
    point = per_batch(recurring)
    return _prediction(f, point, per_batch(ops), max(per_batch(t.function_ms), point), (
        f"With steps_per_execution={k} the ops' own time ({ops / b:.2f} ms per batch) and {recur:.0%} of the "
        f"gaps between them ({(t.op_span_ms - ops) / b:.2f} ms; {why}) recur for every batch, and the rest of the "
        f"median step ({max(step - recurring, 0.0):.2f} ms: Python, Keras, callbacks, the call and its start-up) is "
        f"paid once per {k} batches; the range runs from none of the gaps recurring to the whole function call "
        "recurring."), batches_per_step=k)


def _tf_function(rec: Dict, f: Findings) -> Union[Prediction, str]:
    t = _timing(f)
    if not f.eager or t.eager_ops <= 0:
        return "The model does not run eagerly: it is already a tf.function."
    compute = max(t.eager_kernel_ms - t.eager_ops * t.eager_op_floor_us / 1e3, 0.0)
    cores = _cores(f)
    n = cores[0] if cores else 1
    together = min(n, GRAPH_CONCURRENCY)  # independent ops of one graph run at once
    fixed = t.eager_ops * GRAPH_OP_US / 1e3 + COMPILED_CALL_MS + t.breakdown_ms["input"]
    b = t.batches_per_step
    point = (compute / together + fixed) / b
    return _prediction(f, point, (compute / max(n, 1) + fixed) / b, (compute + fixed) / b, (
        f"In one graph the {t.eager_ops:.0f} ops per step keep their kernel time ({t.eager_kernel_ms:.1f} ms) less "
        f"the fixed cost of an eager kernel run ({t.eager_op_floor_us:.0f} us each, the {EAGER_FLOOR_PERCENTILE}th "
        f"percentile of their durations), {together:.1f} at a time on {n} core(s) as the executor ran the compiled "
        f"dense models here; each op pays the executor's {GRAPH_OP_US:.1f} us and the step one compiled Keras "
        f"call ({COMPILED_CALL_MS} ms); Python between the ops disappears."))


def _no_retracing(rec: Dict, f: Findings) -> Union[Prediction, str]:
    st, t = f.steps, _timing(f)
    if not st.graph_build_ms:
        return "No steady step built a graph."
    build = st.graph_build_ms / st.count / t.batches_per_step
    after = t.time_per_batch_ms - build
    return _prediction(f, after, after, after + build * MODEL_SPREAD, (
        f"Without retracing, the {build:.1f} ms per batch spent building graphs (tracing, instantiation, "
        "compilation, measured inside the steady steps) disappears; the rest of the step stays."))


def _overlap_copies(rec: Dict, f: Findings) -> Union[Prediction, str]:
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
    "parallel_map": _parallel_stage,
    "pydataset_workers": _parallel_stage,
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
    "fewer_syncs": "The interconnect's behaviour at other message sizes is not in the trace.",
    "xla": "Which ops XLA would fuse, and what that saves, is not in the trace.",
    "mixed_precision": "How much faster the ops run in 16-bit depends on the hardware and the op mix, not in the "
                       "trace.",
    "fix_device_trace": "This fixes the trace, not the step: there is nothing to predict.",
    "use_gpu": "How fast the model would run on the GPU is not in a trace where it ran on the CPU.",
    "step_markers": "This fixes the trace, not the step: there is nothing to predict.",
}


def predict(rec: Dict, f: Findings) -> Tuple[Optional[Prediction], Optional[str]]:
    """(prediction, None) or (None, why not) for one recommendation.

    Args:
      rec: a recommendation of :mod:`.advice` (``fix``, ``title``, ``detail``, ``code``).
      f: the findings the verdict was drawn from (``timing`` and ``steps`` for the step time,
        ``pipeline`` and ``system`` for the input models).
    """
    if f.timing is None or not f.steps.found:
        return None, "No steady step was found: there is no step time to predict from."
    fix = rec.get("fix") or ""
    model = MODELS.get(fix)
    if model is None:
        return None, WHY_NOT.get(fix, "No model of this change from the trace's numbers.")
    out = model(rec, f)
    return (None, out) if isinstance(out, str) else (out, None)


def rank(recs: List[Dict], f: Findings) -> List[Dict]:
    """Each recommendation with ``predicted`` (or ``predicted: None`` and
    ``predicted_why_not``), ordered by predicted time per batch (the largest gain first);
    those without a prediction follow in the catalogue's order.

    Args:
      recs: the advice catalogue's recommendations for the verdict (updated in place).
      f: the findings (see :func:`predict`).

    Returns:
      The same recommendations, reordered; ``recommendations[0]`` is the fix to make first.
    """
    with_model, without = [], []
    for rec in recs:
        pred, why = predict(rec, f)
        rec["predicted"] = pred
        if pred is None:
            rec["predicted_why_not"] = why
            without.append(rec)
        else:
            with_model.append(rec)
    with_model.sort(key=lambda r: r["predicted"]["time_per_batch_ms"])  # stable: ties keep catalogue order
    return with_model + without
