"""The input pipeline's verdicts: the step waits for its batch (:func:`input_bound`), or the
pipeline, running beside the step on a CPU-only host, takes the cores the model's math needs
(:func:`input_takes_cores`, :func:`input_slows_model`, :func:`input_shares_cores`,
:func:`loader_workers_behind`).

Each rule is a function of one host's :class:`.findings.Findings` that returns a
:class:`.verdict.Verdict` or None; :data:`.rules.RULES` orders them among the others. What a
waiting pipeline waits on (computing, contention, storage, network) comes from the system
metrics sampled beside the trace where there are any, else from the blocking stage's kind.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..schema import SystemMetrics
from . import cpu_share, sysmetrics
from .cpu_share import CONTENTION_RUNQ_CORES
from .evidence import LOADER_INPUT, Inferred, Sampled, context, loader_sentence
from .findings import Findings
from .thresholds import HOST_OVERHEAD_PCT, INPUT_BOUND_PCT
from .verdict import Verdict, confidence

#: Confidence lost when the blocking stage runs Python and no system metrics say whether it
#: computed or waited (our choice: such verdicts must stay below 0.7).
PYTHON_STAGE_PENALTY = 0.25
#: Share (%) of the machine's CPU busy with processes outside the training process tree from
#: which a waiting input pipeline is called contended (the same 65 % as "mostly busy" in
#: :data:`.sysmetrics.IDLE_HOST_PCT`: 100 - 35).
CONTENTION_OTHERS_PCT = 100.0 - sysmetrics.IDLE_HOST_PCT
#: Highest confidence of a verdict resting on the input's modelled share of the cores
#: (:func:`input_shares_cores`): a model of the scheduler, not a measured wait (our choice).
INPUT_SHARE_MAX_CONFIDENCE = 0.85
#: Fewest system samples whose run-queue wait can call a waiting pipeline contended, and the
#: share of them that must show it (a majority): a mean over 3-5 samples of 100 ms is one
#: sample's spike (run-queue waits of 0, 0, 0, 568 and 88 % were called contention, while the
#: next window of the same slow phase said input_preprocessing). Below that the trace's own
#: reading of the blocking stage decides. Our choice; the sampler takes 10 samples a second.
CONTENTION_MIN_SAMPLES = 5
CONTENTION_MIN_SHARE = 0.5
#: Confidence lost when a verdict rests on which threads asked for the cores, read off their
#: wall times rather than measured per thread (our choice, as FEW_SAMPLES_PENALTY).
CORE_WAIT_PENALTY = 0.15
#: Share of a slowdown's step growth that the input pipeline's work, spread over the cores the
#: training tree used, must account for to be named the slowdown's cause on a CPU-only host
#: (:func:`input_slows_model`). Our choice: the larger part, so that the input is named only
#: where it is the main cause; not fitted. On the slowdown corpus (benchmarks/slowdown_corpus.py:
#: 82 windows opened on input slowdowns with steps >= 1.5x the baseline) that work was
#: 0.47-1.65 of the growth on an idle machine (46 windows), 1.01-2.83 on a busy one (36).
SLOWDOWN_EXPLAINED_SHARE = 0.5
#: Confidence lost when the system samples were too few, or too split, to decide.
FEW_SAMPLES_PENALTY = 0.15
#: Disk reads (MB/s, the training tree's) and I/O wait (%) from which a waiting pipeline is seen
#: waiting on this machine's storage (the flowchart's confirmation, tfbneck_plugin.system.triage's
#: DISK_BUSY_MBPS and IOWAIT_BUSY_PCT); without them the wait is elsewhere and the io verdict
#: loses NO_READS_PENALTY (our choice: a map that sleeps over in-memory data waits without
#: reading, and must not be called file_read with confidence).
DISK_READ_SEEN_MBPS = 1.0
IOWAIT_SEEN_PCT = 5.0
NO_READS_PENALTY = 0.2
#: Confidence lost when the system metrics are machine-wide only (old sidecars): another
#: process's load or traffic may be read as the training's own.
MACHINE_WIDE_PENALTY = 0.15


def input_bound(f: Findings) -> Optional[Verdict]:
    """Input wait >= ``INPUT_BOUND_PCT``: the input pipeline limits the step; what it waits on
    (computing, contention, storage, network) comes from the system metrics when there are any,
    else from the blocking stage's kind.
    """
    inp = f.share("input")
    if inp < INPUT_BOUND_PCT:
        return None
    p = f.pipeline if (f.pipeline and f.pipeline.stages) else None
    st = p.blocking if p else None
    waiting = ("the DataLoader's __next__" if f.loader is not None else
               f"Keras fetching the next batch ({f.keras_input})" if f.keras_input else "IteratorGetNext blocking")
    ev = context(f) + [f"The training step waits for input {inp:.1f}% of the time ({waiting} with "
                       f"the device idle; input-bound above {INPUT_BOUND_PCT:.0f}%, as XProf rates it)"
                       + (f"; {f.steps.input_bound_steps} of {f.steps.count} steps waited that long." if f.steps.count
                          else ".")]
    if st is not None:
        par = f", parallelism {st.parallelism}" if st.parallelism not in (None, "") else ""
        fn = (f" and {st.function_ps / 1e9:.1f} ms of CPU time in its function on the threads that ran it (the "
              "same work seen from there, not added to it)" if st.function_ps else "")
        calls = f" over {st.calls} calls" if st.calls else ""
        ev.append(f"The stage that blocks the consumer is the tf.data stage `{st.kind}` ({st.path}): "
                  f"{st.self_ps / 1e9:.1f} ms of self time{fn}{calls}{par}.")
    model = f.timing.model_cores if f.timing is not None and f.device_kind == "CPU" else None
    if f.loader is not None:
        ev.append(loader_sentence(f.loader))
    kind, cause, penalty, why = (_input_from_system(f.system, p, st, model, inp / 100.0) if f.system
                                 else ("cpu", "input_preprocessing", PYTHON_STAGE_PENALTY, LOADER_INPUT)
                                 if f.loader is not None
                                 else _input_from_stage(p, st))
    ev.append(why)
    return Verdict(kind, cause, confidence(inp, INPUT_BOUND_PCT, penalty), ev)


def _input_from_system(system: SystemMetrics, pipeline=None, st=None, model_cores: Optional[float] = None,
                       wait_share: float = 1.0):
    """(kind, cause, confidence penalty, sentence) from the sampled system metrics.

    The training process tree (the process and its children: PyDataset workers,
    multiprocessing pools) is what computes the input; on a CPU-only host its cores also
    hold the model's math, ``model_cores`` (the training function's executor work per ms of
    step, from the trace), which is not the input's: the input's own cores while the step
    waited (``wait_share`` of it) decide (:meth:`.cpu_share.Cores.input_while_waiting`).
    Other processes' load is contention,
    called only when the run-queue wait shows it in most of at least
    :data:`CONTENTION_MIN_SAMPLES` samples (else the blocking stage decides, as without
    metrics). A pipeline that waits with no disk reads is ``file_read`` (less sure), unless
    no core sat idle and its blocking stage computes in TensorFlow ops
    (:func:`_computes_in_tf_ops`): then it computed on the cores it got. Old sidecars hold
    machine-wide figures only: the verdict says so and is less sure."""
    tree = system.get("tree_cpu_cores")
    own = tree if tree is not None else (system.get("proc_cpu_cores") or 0.0)
    per_process = system.get("scope") == "process_tree"
    penalty = 0.0 if per_process else MACHINE_WIDE_PENALTY
    who = "training process and its children" if system.get("tree_children") else "training process"
    model = min(model_cores, own) if model_cores else 0.0
    n = system.get("usable_cores") or system.get("cpu_count") or 1
    cores = cpu_share.Cores(n=int(n), tree=own, others=0.0, waiting=0.0)
    busy = cores.input_while_waiting(model if model_cores is not None else None, wait_share)
    split = (f" ({model:.2f} of them the model's math and {own - model:.2f} the rest: as input work, {busy:.2f} "
             f"cores' worth of the {100 * wait_share:.0f}% of the step spent waiting for it)" if model >= 0.05 else "")
    if busy >= sysmetrics.BUSY_PROCESS_CORES:
        return ("cpu", "input_preprocessing", 0.0, Sampled(
            f"The {who} kept {own:.2f} cores busy{split or ' while the step waited'}: the input pipeline is "
            "computing, and the host cannot prepare data fast enough."))
    who += split.replace("of them", "of its cores", 1)
    others = _others_busy_pct(system, own)
    runq = system.get("tree_runq_wait_cores")
    # Busy neighbours take cores only from threads that want one: a pipeline that sleeps on
    # storage does not wait in the run queue, one that computes does.
    if others >= CONTENTION_OTHERS_PCT and (runq is None or runq >= CONTENTION_RUNQ_CORES):
        waited, n = _runq_samples(system)
        if n and (n < CONTENTION_MIN_SAMPLES or waited < CONTENTION_MIN_SHARE * n):
            kind, cause, stage_penalty, why = _input_from_stage(pipeline, st)
            return kind, cause, max(stage_penalty, penalty) + FEW_SAMPLES_PENALTY, Inferred(
                f"{why} Other processes kept {others:.0f}% of the machine's CPU busy, but the training threads "
                f"waited for a core in {waited} of {n} system samples (contention needs most of at least "
                f"{CONTENTION_MIN_SAMPLES}): too few to call it contention.")
        counted = f" (run-queue wait in {waited} of {n} samples)" if n else ""
        return ("cpu", "cpu_contention", penalty, Sampled(
            f"The {who} used only {own:.2f} cores while other processes kept {others:.0f}% of the machine's CPU "
            f"busy{counted}: they take the cores the input pipeline needs."))
    remote = sysmetrics.remote_read_sentence(system)
    if remote:
        return "network", "remote_read", penalty, Sampled(remote)
    machine = "" if per_process else " (only machine-wide figures were recorded: other processes' load could not be told apart)"
    reads = system.get("tree_disk_read_MBps") if per_process else system.get("disk_read_MBps")
    read_by = "the training processes read" if per_process else "the machine read"  # the System line's is the machine's
    iowait = system.get("iowait_pct") or 0.0
    if isinstance(reads, (int, float)) and reads < DISK_READ_SEEN_MBPS and iowait < IOWAIT_SEEN_PCT:
        if _computes_in_tf_ops(pipeline, st) and cpu_share.starved(system):
            # TensorFlow ops neither sleep nor wait on a lock: a stage made of them that was
            # slow while no disk was read, no core sat idle and its threads queued for one
            # computed on the few cores it got. With idle cores, or none of its threads
            # runnable, it waits on something the samples miss.
            return ("cpu", "input_preprocessing", penalty + NO_READS_PENALTY, Inferred(
                f"The {who} used only {own:.2f} cores while the step waited and no disk reads were seen "
                f"({read_by} {reads:.1f} MB/s, I/O wait {iowait:.0f} %), but no core sat idle and the blocking stage "
                f"`{st.kind}` runs TensorFlow ops (no file reads, Python not the most of it): it computed on the cores "
                f"it got (other processes kept {others:.0f}% of the machine's CPU busy){machine}."))
        # Waiting, but not on this machine's disks: a sleep, a lock, a page-cache hit, remote storage.
        return ("io", "file_read", penalty + NO_READS_PENALTY, Sampled(
            f"The {who} used only {own:.2f} cores while the step waited: the input pipeline waits rather than "
            f"computes, which is why this reads as I/O-bound, though not on this machine's disks ({read_by} "
            f"{reads:.1f} MB/s, I/O wait {iowait:.0f} %): it waits on remote storage, files already in the page cache, "
            f"or a sleep or a lock in the pipeline's code; workers that wait side by side shorten it all the same{machine}."))
    return ("io", "file_read", penalty, Sampled(
        f"The {who} used only {own:.2f} cores while the step waited: the input pipeline is waiting on storage (or "
        f"another slow source), not computing{machine}."))


def _computes_in_tf_ops(pipeline, st) -> bool:
    """The blocking stage computes in TensorFlow ops: a stage of the ``compute`` kind
    (:attr:`.tfdata.Stage.category`) over a source that is neither Python nor remote, whose
    work is not mostly ``py_function`` calls (:attr:`.tfdata.Pipeline.mostly_python`)."""
    if st is None or pipeline is None or st.category != "compute":
        return False
    return pipeline.source != "remote" and not pipeline.mostly_python


def _runq_samples(system: SystemMetrics) -> Tuple[int, int]:
    """(samples in which the training tree waited for a core at least
    :data:`CONTENTION_RUNQ_CORES`, samples with a run-queue figure) of the window."""
    values = [v for v in ((system.get("series") or {}).get("tree_runq_wait_pct") or [])
              if isinstance(v, (int, float))]
    return sum(1 for v in values if v >= 100.0 * CONTENTION_RUNQ_CORES), len(values)


def _others_busy_pct(system: SystemMetrics, own_cores: float) -> float:
    """Share (%) of the machine's CPU busy with processes outside the training tree."""
    cores = system.get("cpu_count") or 1
    return 100.0 * sysmetrics.other_cores(system, own_cores, cores) / cores


def _input_from_stage(pipeline, st):
    """(kind, cause, confidence penalty, sentence) from the blocking stage alone (no system
    metrics): what the stage does is inferred from its kind."""
    source = pipeline.source if pipeline else None
    category = st.category if st else "compute"
    if pipeline and pipeline.mostly_python:  # a Python source or blocking stage included
        return ("cpu", "input_preprocessing", PYTHON_STAGE_PENALTY, Inferred(
            "The blocking stage runs Python (from_generator / PyDataset / py_function): the trace cannot tell "
            "computing from waiting inside it. Record system metrics (BottleneckProfiler) to separate CPU-bound "
            "from I/O-bound."))
    if category == "file_read" and source != "in_memory":
        return "io", "file_read", 0.0, Inferred("The blocking stage reads files: the pipeline waits on storage.")
    if category == "remote_read":
        return ("network", "remote_read", 0.0,
                Inferred("The blocking stage reads over the network (tf.data service or remote file system)."))
    return ("cpu", "input_preprocessing", 0.0,
            Inferred("The blocking stage computes (map/decode/augment on host threads)."))


def input_takes_cores(f: Findings) -> Optional[Verdict]:
    """Host overhead >= ``HOST_OVERHEAD_PCT`` on a machine whose training threads waited for
    busy cores (:func:`.cpu_share.starved`: mean run-queue wait >= :data:`CONTENTION_RUNQ_CORES`, from schedstat),
    while the input pipeline, running beside the step (under a prefetch or a parallel stage),
    worked longer per step than the host overhead lasted: ``cpu``/``input_preprocessing``.

    There the trace's host overhead is largely the training thread waiting for a core, and
    the input's threads are the larger demand on the cores the training gets. Both times are
    wall time on their threads, stretched alike by the waits (Linux's CFS shares CPU time
    among runnable threads by weight: ``Documentation/scheduler/sched-design-CFS.rst``), so
    their order is that of the CPU each asks for. No fitted constant: two measured times
    compared, on a machine with no core to spare."""
    hostc, t, p = f.share("host_compute"), f.timing, f.pipeline
    if f.eager or hostc < HOST_OVERHEAD_PCT or t is None or p is None or p.blocking is None or not f.steps.count:
        return None
    st = p.blocking
    if not f.system or f.system.get("scope") != "process_tree" or not cpu_share.starved(f.system) or not p.blocking_runs_ahead:
        return None
    work_ms = st.work_ps / f.steps.count / 1e9
    host_ms = t.breakdown_ms.get("host_compute", 0.0)
    if work_ms < host_ms:
        return None
    idle_what = "CPU model math" if f.device_kind == "CPU" else "device"
    return Verdict("cpu", "input_preprocessing", confidence(hostc, HOST_OVERHEAD_PCT, CORE_WAIT_PENALTY), context(f) + [
        f"{hostc:.1f}% of the step ({host_ms:.2f} ms) is host-side time with the {idle_what} idle, but the "
        f"cores were busy and the training process's threads waited for one ({f.system['tree_runq_wait_cores']:.2f} "
        "cores' worth, from the kernel's run-queue wait): much of that time is the training thread waiting for a core.",
        Inferred(f"The input pipeline's `{st.kind}` stage ({st.path}), running beside the step, worked "
                 f"{work_ms:.2f} ms per step, longer than the host-side time: the input's threads ask for more "
                 "of the cores the training gets than the training thread does, and the host cannot prepare "
                 "data fast enough.")])


def input_shares_cores(f: Findings) -> Optional[Verdict]:
    """On a CPU-only host, in any window (scheduled or triggered), the input pipeline's work
    beside the step holds so much of the training tree's cores, whose threads waited for busy
    cores, that without it the step would be at least :data:`.cpu_share.INPUT_LIMITS_GAIN`
    times faster (:func:`.cpu_share.input_load`, measured quantities only):
    ``cpu``/``input_preprocessing``, naming what does the input's work.

    There the pipeline never makes the step wait: it makes the model's ops slower, and the
    breakdown, which sees those ops fill the step, would read model compute (a tutorial's
    augmentation map, TextVectorization map, numpy generator or PyDataset workers, whose
    ablations on cached batches gained 1.27-4x while their windows read "model compute")."""
    load = cpu_share.input_load(f)
    # Only where the input's work took a part of the cores: a wait alone is input_bound's to judge.
    if load is None or load.share <= 0.0 or load.speedup < cpu_share.INPUT_LIMITS_GAIN:
        return None
    freed = 100.0 * (1.0 - 1.0 / load.speedup)
    floor = 100.0 * (1.0 - 1.0 / cpu_share.INPUT_LIMITS_GAIN)
    return Verdict("cpu", "input_preprocessing", min(confidence(freed, floor), INPUT_SHARE_MAX_CONFIDENCE),
                   context(f) + [input_load_sentence(f, load),
                                 Inferred(f"Without the input's work the step would take about {load.after_ms:.3g} ms "
                                          f"instead of {load.step_ms:.3g} ({load.speedup:.2f}x faster, as the same "
                                          f"model fed cached batches would run{cpu_share.alone_words(load)}): the "
                                          "input takes the cores the model's math needs, and preparing the data is "
                                          "what limits the step.")])


#: Least input wait (% of the step) at which DataLoader worker processes on a CPU-only host are
#: called the limit (:func:`loader_workers_behind`): the wait by itself is then worth 1.1x
#: (a step of T that waits w*T takes (1 - w)*T without it), the gain under which a fix is not
#: worth making (our choice, the line benchmarks/torch_corpus.py draws between "not input-bound"
#: and "ambiguous"); not fitted. Under XProf's 20 % (``INPUT_BOUND_PCT``) because there the wait
#: is not all the input costs: the workers that are late load the whole time, on the model's cores.
WORKERS_BEHIND_PCT = 100.0 * (1.0 - 1.0 / 1.1)


def loader_workers_behind(f: Findings) -> Optional[Verdict]:
    """A PyTorch DataLoader's worker processes, on a CPU-only host (no accelerator traced), keep
    the training loop waiting for its batch :data:`WORKERS_BEHIND_PCT` or more of the step, with
    no system metrics beside the trace: ``cpu``/``input_preprocessing``.

    Workers that are late have no batch ready, so they are loading the whole time, and on a
    CPU-only host they load on the cores the model's math uses (torch/utils/data/dataloader.py:
    each worker fills its ``prefetch_factor`` slots as fast as it can). The step then loses the
    wait, which the trace measures, and a part of its compute time to the workers, which it does
    not (only the training process is profiled): the input costs at least the wait, the gain
    from it alone at least 1 / (1 - wait). With system metrics the workers' cores are measured
    and :func:`input_shares_cores` decides instead. The confidence loses
    :data:`PYTHON_STAGE_PENALTY`, as :func:`input_bound`'s for a DataLoader: loading runs the
    dataset's Python, which the trace cannot split into computing and reading."""
    loader = f.loader
    if loader is None or not f.unseen_workers:
        return None
    inp = f.share("input")
    if inp < WORKERS_BEHIND_PCT:
        return None
    gain = 1.0 / max(1.0 - inp / 100.0, 1e-9)
    return Verdict("cpu", "input_preprocessing", confidence(inp, WORKERS_BEHIND_PCT, PYTHON_STAGE_PENALTY),
                   context(f) + [
        f"The training loop waits for its next batch {inp:.1f}% of the step (the DataLoader's __next__): the worker "
        f"processes are behind, and without that wait alone the step would be {gain:.2f}x faster.",
        loader_sentence(loader),
        Inferred("Workers that are behind load without pause, and on this CPU-only host they load on the cores the "
                 "model's math uses; their work is not in the trace (only the training process is profiled), so the "
                 "input costs more than the wait: part of the model's time is the workers' loading too."),
        LOADER_INPUT])


def input_load_sentence(f: Findings, load: "cpu_share.InputLoad") -> str:
    """The input's work beside the step, measured, and its share of the cores."""
    system = f.system or {}
    parts = [f"{load.tfdata_ms:.3g} ms on tf.data's threads (trace)"]
    if load.workers_ms:
        parts.append(f"{load.workers_ms:.3g} ms in worker processes (sampled CPU)")
    if load.pool_ms:
        parts.append(f"{load.pool_ms:.3g} ms in worker threads (sampled CPU less what the trace shows)")
    return (f"On this CPU-only host the input pipeline ({load.stage}) worked {load.input_ms:.3g} ms per "
            f"{load.step_ms:.3g} ms step ({', '.join(parts)}), beside the model's math ({load.model_ms:.3g} ms on the "
            f"executor's threads) and the training thread ({load.host_ms:.3g} ms), while the training process's "
            f"threads waited for a core ({float(system.get('tree_runq_wait_cores') or 0.0):.2f} cores' worth, from "
            f"the kernel's run-queue wait): the input held {100 * load.share:.0f}% of the demand on the cores.")


def input_slows_model(f: Findings) -> Optional[Verdict]:
    """On a CPU-only host, a window the slowdown trigger opened (:attr:`.findings.Findings.slowdown`),
    whose traced steps are at least the trigger's factor over the job's baseline, on cores the
    training threads waited for (:func:`.cpu_share.starved`), while the input pipeline's blocking stage,
    running beside the step, worked so much that its work over the cores the training tree used
    accounts for :data:`SLOWDOWN_EXPLAINED_SHARE` or more of the step's growth:
    ``cpu``/``input_preprocessing``.

    There the model's math and the input share the cores: a heavier input stretches the
    model's ops, and the breakdown, which sees those ops fill the step, would read model compute.
    On cores that are all taken, a step grows by the added work per step over the cores (work
    per step / cores, both measured); stage work is wall time on its threads, stretched by the
    waits as the model's ops are (Linux's CFS: ``Documentation/scheduler/sched-design-CFS.rst``).
    Scheduled windows have no baseline to compare with: their verdict does not change."""
    sd, t, p, system = f.slowdown, f.timing, f.pipeline, f.system
    taken = cpu_share.input_cores_ms(f)  # None unless CPU-only, beside the step, starved
    if sd is None or f.eager or t is None or taken is None or t.step_ms < sd.factor * sd.baseline_ms:
        return None
    # as input_cores_ms found them
    assert p is not None and p.blocking is not None and system is not None and system["tree_cpu_cores"] is not None
    grew = t.step_ms - sd.baseline_ms
    explained = taken / grew
    if explained < SLOWDOWN_EXPLAINED_SHARE:
        return None
    st, tree = p.blocking, system["tree_cpu_cores"]
    work_ms = taken * tree
    return Verdict("cpu", "input_preprocessing", confidence(min(100.0 * explained, 100.0), 100.0 *
                                                            SLOWDOWN_EXPLAINED_SHARE, CORE_WAIT_PENALTY), context(f) + [
        _slowdown_sentence(sd, t.step_ms),
        f"The CPU does the model's math {f.share('device_compute'):.1f}% of the step, on the cores the input "
        f"pipeline also uses, and the training process's threads waited for a core "
        f"({system['tree_runq_wait_cores']:.2f} cores' worth, from the kernel's run-queue wait).",
        Inferred(f"The input pipeline's `{st.kind}` stage ({st.path}), running beside the step, worked {work_ms:.3g} ms "
                 f"per step: over the {tree:.2f} cores the training used, {taken:.3g} ms of each step, "
                 f"{100 * explained:.0f}% of what the step grew. The input takes the cores the model's math needs: "
                 "preparing the data costs more than before, and the model's ops wait for cores.")])


def _slowdown_sentence(sd, step_ms: float) -> str:
    """The slowdown that opened the window, in the console line's medians where recorded, and
    the traced step against the baseline's mean step (the rule's comparison)."""
    medians = (f"the job's median step rose from {sd.baseline_p50_ms:.3g} to {sd.observed_p50_ms:.3g} ms by its own "
               "clock (the console's line)" if sd.baseline_p50_ms and sd.observed_p50_ms else
               f"the job's steps took {sd.observed_ms:.3g} ms against {sd.baseline_ms:.3g} ms before it (its own clock)")
    return (f"This window opened on a slowdown: {medians}; the traced steps took {step_ms:.3g} ms, "
            f"{step_ms - sd.baseline_ms:.3g} ms more than the job's mean step before it ({sd.baseline_ms:.3g} ms).")


#: Input work per step (ms) under a cache being filled from which the report says so (our
#: choice: below it the first pass costs the run nothing worth a sentence).
CACHE_FILL_SEEN_MS = 1.0


def cache_fill_sentence(f: Findings) -> Optional[str]:
    """A sentence when the window's input work is a ``cache()`` being filled
    (:meth:`.tfdata.Pipeline.fills_cache`): the stages below the cache work in this window
    and stop once it is full, so the window shows a load the rest of the run does not carry.
    None when the stages under a cache worked less than :data:`CACHE_FILL_SEEN_MS` per step."""
    p = f.pipeline
    if p is None or not f.steps.count:
        return None
    filling = [st for st in p.stages if st.category != "buffer" and p.fills_cache(st)]
    work_ms = sum(st.work_ps for st in filling) / f.steps.count / 1e9
    if not filling or work_ms < CACHE_FILL_SEEN_MS:
        return None
    top = max(filling, key=lambda st: st.work_ps)
    load = "; it is not counted as the run's load on the cores" if f.device_kind == "CPU" else ""
    return (f"The `{top.kind}` stage ({top.path}) runs under a cache() that this window is still filling: "
            f"{top.work_ps / f.steps.count / 1e9:.3g} ms of input work per step that stops once the cache holds "
            f"every element (later passes read the cache){load}. Profile steps after the first epoch to see the "
            "steady run.")

