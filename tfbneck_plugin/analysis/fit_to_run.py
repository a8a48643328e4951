"""Advice that fits the run and the machine: the catalogue's recommendations (:mod:`.advice`)
less what the run already does, ranked by what each is worth (:mod:`.whatif`), less what
the machine leaves nothing to gain, each with one sentence "why here" carrying the numbers.

What the run already does is read from the trace and the sampler: an existing ``prefetch``
or ``cache()`` stage, a map already run on whole batches (no "vectorise"), parallel map
calls (the stage's ``parallelism`` stat), ``steps_per_execution`` (batches per step), XLA
(``XLA_EVENTS`` in the trace: no "compile with XLA"), eager or compiled execution, whether
an accelerator computes, PyDataset worker processes (the process tree's children) and the
cores the training process tree uses (:mod:`.cpu_share`).
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional

from ..schema import Recommendation
from . import cpu_share, python_input, whatif
from .advice import more_cores, rec
from .cpu_share import takes_cores
from .findings import Findings, StepTiming
from .op_advice import one_element_share
from .tfdata import MAPS

#: Changes that add parallelism or overlap to the input: the machine's free cores cap them.
CAPPED_BY_CORES = ("prefetch", "parallel_map", "pydataset_workers")
#: Changes that reduce the input's work (run in fewer cores, not more).
REDUCES_WORK = ("vectorise_map", "cache", "no_py_function", "tfdata_ops", "lighter_map")


def already_done(rec: Recommendation, f: Findings) -> Optional[str]:
    """Why the run already does what ``rec`` recommends, or None."""
    fix, p = rec.get("fix"), f.pipeline
    if fix == "cache" and p is not None:
        return _cache_done(p)
    if fix == "vectorise_map" and p is not None:
        return _vectorise_done(p, f)
    if fix == "xla" and f.xla:
        return "The trace shows XLA executables: the step is already compiled with XLA."
    if fix in ("augment_on_device", "mixed_precision") and f.device_kind == "CPU":
        return "No accelerator computes in this run."
    return None


def _vectorise_done(p, f: Findings) -> Optional[str]:
    """Why batching before a map cannot shorten the input, or None: no map runs once per
    element (:attr:`.tfdata.Pipeline.map_per_element`); most of that map's op time is in ops
    that take one element (:func:`.op_advice.one_element_share`); or the costliest map already
    runs on batches while the one per element does less."""
    per_element = p.map_per_element
    if per_element is None:
        return "The map already runs on whole batches."
    share = one_element_share(f.ops, per_element.path) if f.ops else 0.0
    if share >= 50.0:  # most of the map's work (our choice: the majority)
        return (f"{share:.0f} % of the `{per_element.kind}` map's op time is in ops that take one element "
                "(file reads, image or audio decoders): batching before the map cannot batch them.")
    if p.blocking is not None and p.blocking.kind in MAPS and p.blocking is not per_element:
        # The costliest map runs on batches; the one per element does less (an image_dataset_from_directory's
        # decode, say): batching it first would not touch the map that limits the input.
        return f"The `{p.blocking.kind}` map, where the input's work is, already runs on whole batches."
    return None


def _cache_done(p) -> Optional[str]:
    """Why a ``cache()`` cannot remove the work the step waits for, or None: the pipeline
    caches already (:attr:`.tfdata.Pipeline.has_cache`), and the blocking stage, when it is
    not under the cache, runs after it for every batch (a random augmentation after
    ``cache().shuffle()``); caching after such a map would replay one augmentation each epoch."""
    if not p.has_cache:
        return None
    st = p.blocking
    after = st is not None and not p.fills_cache(st)
    return "The pipeline already caches" + (f"; the `{st.kind}` stage runs after it, for every batch." if after else ".")


def _unseen_sentence(p) -> str:
    """For a pipeline whose analysed steps called no stage upstream of a buffer
    (:attr:`.tfdata.Pipeline.unseen_upstream`): that a cache there is not in the trace; for one
    read to its source: that it has no cache."""
    up = p.unseen_upstream if p is not None else None
    if up is None:
        return "no cache() in the pipeline."
    return (f"the stages upstream of `{up.kind}` left no call in the profiled steps, so whether the pipeline "
            "already caches is not in the trace: if it caches before this map (a random augmentation), the map "
            "runs every epoch and less work in it, not another cache, is what shortens it.")


def lighter_map(f: Findings) -> Optional[Recommendation]:
    """For a map that runs for every batch after the pipeline's cache (:func:`_cache_done`):
    fewer or cheaper ops in it, which caching cannot give. None when the blocking stage is not
    such a map (:data:`.tfdata.MAPS`)."""
    p = f.pipeline
    st = p.blocking if p is not None else None
    if p is None or st is None or st.kind not in MAPS or p.fills_cache(st) or not p.has_cache:
        return None
    return rec("lighter_map", f"Do less work in the `{st.kind}` map",
               "This map runs on every element of every epoch, after the pipeline's cache: caching "
               "cannot remove it, since random augmentation must differ each epoch. Fewer or cheaper random ops "
               "(drop the augmentation layers that do not help accuracy, augment at a smaller image size), run "
               "on whole batches and in parallel, shorten it.",
               "ds = ds.cache().shuffle(buffer).batch(batch_size)\n"
               "ds = ds.map(lambda x, y: (augment(x, training=True), y),  # whole batches, fewer layers\n"
               "            num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)")


def fit(recs: List[Recommendation], f: Findings) -> List[Recommendation]:
    """The recommendations that fit this run, ranked, each with ``why_here``.

    Args:
      recs: the catalogue's recommendations for the verdict's cause.
      f: the findings.

    Returns:
      The kept recommendations, the one to make first at [0]. Where every change that adds
      input parallelism is capped by the machine, the first is one that reduces the work
      (or more cores) and its ``why_here`` says so.
    """
    lighter = lighter_map(f) if any(r.get("fix") == "cache" for r in recs) else None
    recs = [_fit_code(r, f) for r in recs if already_done(r, f) is None] + ([lighter] if lighter else [])
    kept, _done = whatif.rank(recs, f)
    kept = _less_work_first(kept, f)
    capped = [r for r in kept if r["fix"] in CAPPED_BY_CORES and _no_gain(r)]
    kept = [r for r in kept if r not in capped]
    if capped and not any(r["fix"] in CAPPED_BY_CORES for r in kept):
        if not any(r["fix"] in REDUCES_WORK for r in kept):
            extra = [more_cores()]
            kept, _ = whatif.rank(extra + kept, f)
    for r in kept:
        r["why_here"] = why_here(r, f)
    if capped and kept:
        names = ", ".join(f"`{r['fix']}`" for r in capped)
        first = capped[0].get("predicted")
        assert first is not None  # _no_gain holds only for a change with a prediction
        kept[0]["why_here"] = (f"{_capped_sentence(f)} ({names} would gain nothing here, "
                               f"predicted {first['time_per_batch_ms']:.1f} ms per batch). "
                               + kept[0]["why_here"])
    return kept


def _fit_code(r: Recommendation, f: Findings) -> Recommendation:
    """The snippet's workers fitted to the machine: Python input that computes gets one worker
    process per core it may use (more would wait for a core; processes, because the GIL runs
    one thread's Python at a time), input that waits keeps the catalogue's count as threads
    (waiting workers all wait at once, and a thread waiting on I/O or a sleep holds no GIL;
    processes would only add the copy of every batch between processes)."""
    c = cpu_share.cores_of(f.system)
    computes = python_input.input_computes(f)
    code = r.get("code")
    if r.get("fix") != "pydataset_workers" or c is None or computes is None or not code:
        return r
    if computes:
        r["code"] = re.sub(r"\bworkers=\d+", f"workers={max(c.n, 2)}", code)
    else:
        r["code"] = code.replace("use_multiprocessing=True", "use_multiprocessing=False")
    return r


def _less_work_first(recs: List[Recommendation], f: Findings) -> List[Recommendation]:
    """Where the input's work takes the cores the model's math needs (a CPU-only host whose
    training threads waited for busy cores, :func:`.cpu_share.input_cores_ms`), the changes that
    add input parallelism go after those that reduce the input's work, whatever their
    prediction: more threads cannot add cores there and take more of them from the model (a
    TextVectorization map parallelised on 2 such cores ran at 0.64x the speed, predicted 1.15x),
    while less work frees cores for it."""
    if cpu_share.input_cores_ms(f) is None or not any(r["fix"] in REDUCES_WORK for r in recs):
        return recs
    late = [r for r in recs if r["fix"] in CAPPED_BY_CORES]
    return [r for r in recs if r not in late] + late


def _no_gain(r: Recommendation) -> bool:
    p = r.get("predicted")
    return p is not None and p["speedup"] < 1.0 / (1.0 - whatif.NO_GAIN)


def _capped_sentence(f: Findings) -> str:
    c = cpu_share.cores_of(f.system)
    if c is None:
        return "Every change that adds input parallelism is capped here."
    return (f"Every change that adds input parallelism is capped here: the training process tree used "
            f"{c.tree:.2f} of the {c.n} core(s) it may run on and other processes {c.others:.2f}.")


# ---- why here ----------------------------------------------------------------------------------

def _tm(f: Findings) -> StepTiming:
    """The step timing: the sentences run only when there is one (:func:`why_here`)."""
    assert f.timing is not None
    return f.timing


def _t(f: Findings):
    t = _tm(f)
    now = t.time_per_batch_ms
    wait = t.breakdown_ms.get("input", 0.0) / t.batches_per_step
    return now, wait, 100.0 * wait / now if now > 0 else 0.0


def _cores_clause(f: Findings) -> str:
    c = cpu_share.cores_of(f.system)
    return "" if c is None else f"; the training process tree used {c.tree:.2f} of {c.n} core(s)"


def _why_prefetch(f):
    now, wait, pct = _t(f)
    return (f"The step waits {wait:.1f} of its {now:.1f} ms per batch ({pct:.0f} %) for an input pipeline with no "
            f"prefetch{_cores_clause(f)}.")


def _why_parallel(f):
    st = f.pipeline.blocking
    now, wait, pct = _t(f)
    per_batch = st.work_ps / max(f.steps.count * _tm(f).batches_per_step, 1) / 1e9
    return (f"The `{st.kind}` stage does {per_batch:.1f} ms of work per batch, {st.threads} call at a time, while "
            f"the step waits {wait:.1f} ms per batch ({pct:.0f} %){_cores_clause(f)}.")


def _why_workers(f):
    now, wait, pct = _t(f)
    workers, who = python_input.input_workers(f.system)
    made = who if workers else f"the training process ({who})"
    return f"The step waits {wait:.1f} ms per batch ({pct:.0f} %) for Python input made by {made}{_cores_clause(f)}."


def _beside(f) -> str:
    """For an input whose work takes the step's cores (:func:`.cpu_share.takes_cores`): the
    blocking stage's work per batch beside the step, in words; else ""."""
    if not takes_cores(f) or f.pipeline.blocking is None:
        return ""
    st = f.pipeline.blocking
    per_batch = st.work_ps / max(f.steps.count * _tm(f).batches_per_step, 1) / 1e9
    who = "the model's math and the training thread" if f.device_kind == "CPU" else "the training thread"
    return (f"the `{st.kind}` stage works {per_batch:.1f} ms per batch beside the step, on the cores {who} "
            "also need")


def _feeding(st) -> str:
    """Which of the pipeline's maps ``st`` is, in the code's terms: "the `ParallelMapV2` stage
    that feeds `Shuffle` (…::Shuffle::ParallelMapV2)", the stage it feeds being its iterator's
    parent (tf.data names an iterator under its consumer's, which comes later in the code)."""
    parts = st.path.split("::")
    parent = parts[-2].split("[")[0] if len(parts) >= 2 else "Root"
    if parent == "Root":
        return f"the `{st.kind}` stage"
    return f"the `{st.kind}` stage that feeds `{parent}` (…::{'::'.join(parts[-2:])})"


def _why_vectorise(f):
    st = f.pipeline.map_per_element
    now, wait, pct = _t(f)
    batches = max(f.steps.count * _tm(f).batches_per_step, 1)
    calls = f" ({st.calls / batches:.0f} calls per batch)" if st.calls > batches else ""
    beside = _beside(f)
    if beside:
        return f"T{_feeding(st)[1:]} calls its function once per element{calls}, and {beside}."
    return (f"T{_feeding(st)[1:]} calls its function once per element{calls} and the step waits {wait:.1f} ms "
            f"per batch ({pct:.0f} %) for the input.")


def _why_cache(f):
    now, wait, pct = _t(f)
    beside = _beside(f)
    if beside:
        return (f"The preprocessing runs again for every batch and {beside} (the step waits {wait:.1f} ms per "
                f"batch for it); {_unseen_sentence(f.pipeline)}")
    return (f"The step waits {wait:.1f} ms per batch ({pct:.0f} %) for preprocessing that runs again for every "
            f"batch; {_unseen_sentence(f.pipeline)}")


def _why_lighter(f):
    beside = _beside(f)
    if beside:
        return f"{beside[0].upper()}{beside[1:]}, for every batch of every epoch."
    st = f.pipeline.blocking
    now, wait, pct = _t(f)
    per_batch = st.work_ps / max(f.steps.count * _tm(f).batches_per_step, 1) / 1e9
    return (f"The `{st.kind}` stage does {per_batch:.1f} ms of work per batch, for every batch of every epoch; the "
            f"step waits {wait:.1f} of its {now:.1f} ms per batch ({pct:.0f} %) for the input.")


def _why_spe(f):
    t = _tm(f)
    outside = t.time_per_batch_ms - (t.op_span_ms or 0.0) / t.batches_per_step
    return (f"Each batch pays one call of the training function ({t.batches_per_step} batch(es) per call): "
            f"{max(outside, 0.0):.2f} of its {t.time_per_batch_ms:.2f} ms lie outside the model's ops.")


def _why_tf_function(f):
    t = _tm(f)
    return (f"The model runs eagerly: {t.eager_ops:.0f} ops per step each dispatched from Python, their kernels "
            f"{t.eager_kernel_ms:.1f} ms of the {t.step_ms:.1f} ms step.")


def _why_xla(f):
    t = _tm(f)
    ops = t.breakdown_ms.get("device_compute", 0.0)
    return (f"The model's ops take {ops:.1f} ms of the {t.step_ms:.1f} ms step on the {f.device_kind} and no XLA "
            "executable ran in the trace.")


def _why_retracing(f):
    st = f.steps
    per_batch = st.graph_build_ms / max(st.count * _tm(f).batches_per_step, 1)
    return (f"Steady steps spent {per_batch:.1f} ms per batch ({st.graph_build_pct:.0f} % of their time) building "
            f"graphs, in {st.graph_build_steps} of {st.count} steps.")


def _why_copies(f):
    t = _tm(f)
    h2d = t.breakdown_ms.get("host_to_device", 0.0) / t.batches_per_step
    return f"Host-to-device copies held the step {h2d:.1f} of its {t.time_per_batch_ms:.1f} ms per batch."


def _why_trace(f):
    return (f"The breakdown of the {_tm(f).time_per_batch_ms:.1f} ms per batch rests on what the trace recorded: "
            "this makes it record the rest.")


def _why_math(f):
    t = _tm(f)
    ops = t.breakdown_ms.get("device_compute", 0.0)
    return f"The model's ops take {ops:.1f} ms of the {t.step_ms:.1f} ms step on the {f.device_kind}."


def _why_more_cores(f):
    beside = _beside(f)
    if beside:
        c = cpu_share.cores_of(f.system)
        used = "" if c is None else (f" (the training process tree used {c.tree:.2f} of the {c.n} core(s) it may "
                                     f"run on, other processes {c.others:.2f})")
        now, wait, pct = _t(f)
        return f"The step waits {wait:.1f} ms per batch ({pct:.0f} %) for its input, and {beside}{used}."
    return _capped_sentence(f)


def _why_share(r: Recommendation, f: Findings) -> str:
    cats = whatif.ACTS_ON.get(str(r.get("fix")))
    t = _tm(f)
    if not cats:
        return f"The step takes {t.time_per_batch_ms:.1f} ms per batch."
    ms = sum(t.breakdown_ms.get(c, 0.0) for c in cats) / t.batches_per_step
    what = " and ".join(c.replace("_", " ") for c in cats)
    share = (f"{what.capitalize()} takes {ms:.1f} of the {t.time_per_batch_ms:.1f} ms per batch "
             f"({100.0 * ms / max(t.time_per_batch_ms, 1e-9):.0f} %)")
    if "input" in cats and f.unseen_workers:
        return (f"{share} as a wait, and the DataLoader's workers also take the model's cores for a time the trace "
                "does not show: this change can shorten more than the wait.")
    load = cpu_share.input_load(f) if "input" in cats else None
    if load is not None and (load.share > 0 or (load.gil_ms > 0 and python_input.input_computes(f))):
        return (f"{share} as a wait, and its work beside the step takes the cores or the GIL the model and the "
                f"training thread need: without the input a batch would take about "
                f"{load.after_ms / t.batches_per_step:.1f} ms, what this change can shorten at most.")
    return f"{share}: what this change can shorten at most."


WHY: Dict[str, Callable[[Findings], str]] = {
    "prefetch": _why_prefetch, "parallel_map": _why_parallel, "pydataset_workers": _why_workers,
    "vectorise_map": _why_vectorise, "cache": _why_cache, "lighter_map": _why_lighter, "steps_per_execution": _why_spe,
    "tf_function": _why_tf_function, "xla": _why_xla, "more_cores": _why_more_cores,
    "tensor_arguments": _why_retracing, "input_signature": _why_retracing, "reduce_retracing": _why_retracing,
    "prefetch_to_device": _why_copies, "mixed_precision": _why_math, "use_gpu": _why_math, "measure_xla": _why_math,
    "fix_device_trace": _why_trace, "step_markers": _why_trace, "python_tracer": _why_trace,
}


def why_here(r: Recommendation, f: Findings) -> str:
    """One sentence with this run's numbers: why ``r`` fits it."""
    if f.timing is None or not f.steps.found:
        return "No steady step was found: the advice follows the verdict's cause alone."
    fn = WHY.get(str(r.get("fix")))
    needs_pipeline = r.get("fix") in ("parallel_map", "vectorise_map", "lighter_map")
    if fn is None or (needs_pipeline and (f.pipeline is None or f.pipeline.blocking is None)):
        return _why_share(r, f)
    if r.get("fix") == "vectorise_map" and (f.pipeline is None or f.pipeline.map_per_element is None):
        return _why_share(r, f)
    return fn(f)
