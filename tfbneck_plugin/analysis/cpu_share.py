"""The cores the training process tree had while profiling, and the cores it could have
after a change that adds runnable threads (a prefetch thread, parallel map calls, more
PyDataset workers): what the what-if models (:mod:`.whatif`) and the advice's "why here"
(:mod:`.fit_to_run`) read about the machine.

Facts, all from the sampler's summary (:func:`.sysmetrics.summarize`): the cores the
process may run on (``usable_cores``: its CPU affinity), the cores its process tree used
(``tree_cpu_cores``), the cores other processes used (``others_cpu_cores``), and the tree's
threads that were runnable but waiting for a core (``tree_runq_wait_cores``).

Between two bounds lie the cores the tree gets once it wants more (a prefetch thread,
parallel map calls, more PyDataset workers):

* at least what it had plus the cores nobody used (the idle ones), were the other processes
  to keep what they had: :attr:`Cores.free`. Predictions never count on fewer.
* at most every core it may run on, were the other processes to yield theirs (the
  scheduler weighs them against the training's threads: Linux's CFS shares CPU time by
  weight among runnable threads, ``Documentation/scheduler/sched-design-CFS.rst``; a job
  reniced above the others, or with more runnable threads, takes more).

:meth:`Cores.gets` interpolates between the two with the share of the others' cores the
training takes; the what-if models fit that share on the fit half of the pairs corpus.

On a CPU-only host the model's math runs on those cores too: :func:`starved` says the tree's
threads waited for busy cores, and :func:`input_cores_ms` what an input pipeline running beside
the step (:func:`takes_cores`) then takes of each step from the model's math.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, Optional

from ..schema import SystemMetrics
from . import sysmetrics
from .tfdata import PYTHON

if TYPE_CHECKING:  # the findings module needs nothing from here
    from .findings import Findings

#: A machine counts as saturated when fewer cores than this sat idle on average (cores;
#: one 50 ms sample of a 2-core machine resolves about 0.02 cores; our choice, a tenth of
#: a core, is well above the sampler's noise).
IDLE_SLACK_CORES = 0.1
#: Run-queue wait of the training tree (cores: time its threads were ready to run but had no
#: CPU, per second) from which a busy machine is taking cores from it. Measured here under
#: ../shared/tools/under-load: computing pipelines 0.99-1.75, a pipeline sleeping on reads 0.05.
CONTENTION_RUNQ_CORES = 0.25
#: Input wait (% of the step) below which an input pipeline that runs beside the step is not
#: what the step waits for: the rules' input-bound level (thresholds.INPUT_BOUND_PCT, XProf's
#: "HIGHLY input-bound"; tests/test_fit_to_run.py checks that they agree). Such an input
#: limits the step only by the cores it takes (input_rules.input_takes_cores, input_rules.input_slows_model).
INPUT_WAITED_PCT = 20.0
#: Fewest cores a process is assumed to get (guards the divisions; our choice).
MIN_CORES = 0.1


@dataclass
class Cores:
    """The cores of one profiling window (means over the window)."""
    n: int             # cores the training process may run on (its CPU affinity)
    tree: float        # cores its process tree used
    others: float      # cores other processes used
    waiting: float     # the tree's runnable threads that waited for a core (0 when unknown)

    @property
    def idle(self) -> float:
        """Cores nobody used (>= 0)."""
        return max(self.n - self.tree - self.others, 0.0)

    @property
    def starved(self) -> float:
        """The tree's runnable threads that waited for a core the machine did not have:
        :attr:`waiting` beyond the :attr:`idle` cores (>= 0). While a core sits idle, a
        thread's run-queue wait is the scheduler's wake-up latency (each wake-up of a thread
        that sleeps, reads or blocks can wait a slice for a busy core before it moves), which
        grows with other processes' load and with wake-ups, not with the work it wants done."""
        return max(self.waiting - self.idle, 0.0)

    @property
    def free(self) -> float:
        """Cores the tree can count on: what it used plus the idle ones (at most n)."""
        return min(float(self.n), max(self.tree + self.idle, MIN_CORES))

    @property
    def saturated(self) -> bool:
        """Every core was busy (with the tree's work or other processes')."""
        return self.idle < IDLE_SLACK_CORES

    def input_while_waiting(self, model: Optional[float], wait_share: float) -> float:
        """Cores the input pipeline's own threads kept busy while the step waited for it: the
        tree's cores less ``model`` (the training function's executor work, core-ms per ms of
        step, on a CPU-only host: the model's math runs on the same cores), over the share of
        the step spent waiting (0-1), at most :attr:`n`. A pipeline that runs only while the
        step waits (no prefetch) works at that rate then; one that runs ahead all step long is
        credited more than it used, which only errs towards "computing". Without ``model``
        the tree's cores, as sampled."""
        if model is None:
            return self.tree
        own = max(self.tree - model, 0.0)
        return min(own / wait_share, float(self.n)) if wait_share > 0 else own

    def gets(self, share_of_others: float) -> float:
        """Cores the tree gets once it wants more: :attr:`free` plus ``share_of_others`` (0-1)
        of the cores other processes used."""
        return min(float(self.n), self.free + share_of_others * max(self.n - self.free, 0.0))


def cores_of(system: Optional[SystemMetrics]) -> Optional[Cores]:
    """The window's :class:`Cores` from a sampler summary, or None without one (or without the
    core count)."""
    count = system.get("cpu_count") if system else None
    if not system or not count:
        return None
    n = int(system.get("usable_cores") or count)
    tree = system.get("tree_cpu_cores")
    tree = float(tree if tree is not None else system.get("proc_cpu_cores") or 0.0)
    others = sysmetrics.other_cores(system, tree, int(count))
    # Other processes may run on cores outside this process's affinity: count only what
    # could have been on its own cores.
    others = min(float(others), max(n - tree, 0.0))
    return Cores(n=n, tree=tree, others=others, waiting=float(system.get("tree_runq_wait_cores") or 0.0))


def starved(system: Optional[SystemMetrics]) -> bool:
    """The training tree's threads waited for a core (mean run-queue wait >=
    :data:`CONTENTION_RUNQ_CORES`; unknown: False), for more cores than sat idle: those waits
    were for busy cores. A saturated machine (:attr:`Cores.saturated`: under
    :data:`IDLE_SLACK_CORES` idle, below that wait) always passes; so does a
    window of 0.17 s that read 0.18 cores idle, at 100 Hz CPU accounting a few ticks, while
    the threads waited 1.48 cores' worth."""
    cores = cores_of(system)
    runq = (system or {}).get("tree_runq_wait_cores")
    return cores is not None and isinstance(runq, (int, float)) and runq >= CONTENTION_RUNQ_CORES \
        and runq > cores.idle


def takes_cores(f: "Findings") -> bool:
    """The input pipeline's blocking stage runs beside the step (under a prefetch or a parallel
    stage) and the step waits for it less than :data:`INPUT_WAITED_PCT`: an input verdict
    there means its work takes the cores the step needs, not that the step waits for it."""
    p = f.pipeline
    return p is not None and p.blocking_runs_ahead and f.share("input") < INPUT_WAITED_PCT


def input_cores_ms(f: "Findings") -> Optional[float]:
    """ms per step that the input pipeline's work takes from the model's math on a CPU-only
    host: its blocking stage's work per step over the cores the training tree used, where the
    stage runs beside the step (:func:`takes_cores`) on cores the training threads
    waited for (:func:`starved`); None elsewhere. On cores that are all taken a step
    grows by the added work over the cores: on the slowdown corpus (benchmarks/slowdown_corpus.py)
    this figure was 0.47-1.65 times what steps grew when the input got heavier
    on an idle machine, 1.01-2.83 on a busy one (the waits stretch the stage's wall time: an
    upper figure there, which is why it bounds nothing, :func:`.whatif.bound_ms`)."""
    p, system = f.pipeline, f.system or {}
    tree = system.get("tree_cpu_cores")
    if (f.device_kind != "CPU" or p is None or p.blocking is None or not f.steps.count or not takes_cores(f)
            or not starved(system) or not isinstance(tree, (int, float)) or tree <= 0):
        return None
    return p.blocking.work_ps / f.steps.count / 1e9 / tree


#: Predicted gain (today's time per batch over the time with the input's work gone) from
#: which the input's share of the cores limits the step (:func:`input_load`, the rule
#: ``input_rules.input_shares_cores``). Between the ablation truths' two levels (the input limits a
#: run that 1.25x faster on cached batches; under 1.1x it does not); chosen on the fit half
#: of benchmarks/tutorial_corpus.py, whose device-limited runs were predicted at most 1.09x and
#: input-limited ones at least 1.25x (benchmarks/tutorial_corpus.json, "fit" rows).
INPUT_LIMITS_GAIN = 1.15
#: Predicted gain from which a device verdict cannot be confident: the input's work holds a
#: share of the cores the ablation truths call no longer device-limited (1.1x).
INPUT_DOUBT_GAIN = 1.1


@dataclass
class InputLoad:
    """What the input pipeline's work takes of the cores the model's math runs on, per step
    (ms of wall time on the threads that did it; core-ms where several ran at once).

    Measured: ``tfdata_ms`` (the own work of the tf.data stages that run beside the step, under
    a prefetch or a parallel stage, from the trace: stage self time, or the map function's
    time for a stage that runs it on threads of its own), ``workers_ms`` (the Python input's
    worker processes, the training tree's CPU less the training process's own, from the
    sampler) and ``pool_ms`` (the input pool's threads in the training process: a
    PyDataset's worker threads, or the handler threads through which its worker processes'
    batches come, unpickled; their own CPU clocks where the sidecar has them,
    ``pool_cpu_cores``; else the training process's CPU left over once the model's, the
    training thread's and tf.data's are taken out). Each CPU figure is put on the
    wall-time scale of the trace's figures by ``stretch``: the runnable threads over the running
    ones ((tree cores + run-queue wait) / tree cores), since a thread kept waiting for a core shows that wait in its events.

    The model (Linux's CFS gives runnable threads CPU in proportion to their demand:
    ``Documentation/scheduler/sched-design-CFS.rst``): while the step runs beside the input,
    the input holds ``share`` of the tree's demand (its work over its work, the model's and
    the training thread's), so without it the rest of the step shrinks by that share, and the
    wait for input goes too, and so does the training thread's host time that waited for the
    input's Python to release the GIL (:attr:`gil_ms`, for an input whose Python runs in the
    training process): ``after_ms = min((step - wait) x (1 - share), step - wait - gil)``.
    The share counts only where the tree's threads waited for busy cores (:func:`starved`); on
    idle cores the input takes no core from the model. The ablation's step: the same model fed cached
    batches (benchmarks/tutorial_corpus.py measures it)."""
    step_ms: float
    wait_ms: float
    model_ms: float      # the model's work (executor threads' time, or the time its ops ran)
    host_ms: float       # the training thread's own time outside ops
    tfdata_ms: float
    workers_ms: float
    pool_ms: float
    stretch: float
    starved: bool
    stage: str           # what does the input's work, in words
    python_ms: float = 0.0  # the part of the input's work that is Python in the training process (holds the GIL)
    retained: float = 1.0   # the part (0-1) of the cores the input frees that the training keeps (:func:`retained`)
    others: float = 0.0     # cores other processes used on the training's cores (:attr:`Cores.others`)
    cores: int = 1          # cores the training process may run on (:attr:`Cores.n`)

    @property
    def input_ms(self) -> float:
        """The input's work per step (ms on its threads)."""
        return self.tfdata_ms + self.workers_ms + self.pool_ms

    @property
    def beside_ms(self) -> float:
        """The input's work done while the step ran (the part done during the wait for it,
        on one thread at most, took nothing from the model)."""
        return max(self.input_ms - self.wait_ms, 0.0)

    @property
    def share(self) -> float:
        """The input's share (0-1) of the demand on the tree's cores while the step ran, times
        the part of what it frees that the training keeps (:attr:`retained`)."""
        demand = self.beside_ms + self.model_ms + self.host_ms
        return self.retained * self.beside_ms / demand if demand > 0 and self.starved else 0.0

    @property
    def gil_ms(self) -> float:
        """The training thread's host time that waited for the input's Python (ms per step):
        the input's in-process Python work done while the step ran, at most the host time.
        CPython runs one thread's bytecode at a time (the GIL,
        https://docs.python.org/3/glossary.html#term-global-interpreter-lock), so the Keras
        step loop's own Python cannot run while the input's does."""
        return min(max(self.python_ms - self.wait_ms, 0.0), self.host_ms)

    @property
    def own_ms(self) -> float:
        """The least a step can take once the input is gone (ms): the CPU its own work needs,
        the model's spread over every core (:attr:`cores`) and the training thread's (its
        host time less the GIL waits), each taken off the wall-time scale by :attr:`stretch`.
        Where the input's work dwarfs the model's, the share of the demand it frees would
        leave less than that."""
        return (self.model_ms / max(self.cores, 1) + max(self.host_ms - self.gil_ms, 0.0)) / max(self.stretch, 1.0)

    @property
    def after_ms(self) -> float:
        """The step with the input's work and wait gone (ms), at least :attr:`own_ms`."""
        ran = self.step_ms - self.wait_ms
        # The cores the input shares and the GIL it holds take from the same training time: the
        # larger of the two is what its going frees (their sum would count its work twice).
        return max(min(ran * (1.0 - self.share), ran - self.gil_ms), self.own_ms, 1e-6)

    @property
    def speedup(self) -> float:
        """Today's step over :attr:`after_ms`."""
        return self.step_ms / self.after_ms

    @property
    def speedup_alone(self) -> float:
        """:attr:`speedup` were the other processes gone (every core the input frees kept by the
        training, :attr:`retained` 1): the figure a measurement on a quiet machine gives. Equal
        to :attr:`speedup` where others used under :data:`IDLE_SLACK_CORES`."""
        return replace(self, retained=1.0).speedup

    def as_dict(self) -> Dict[str, object]:
        """The report's ``input_load`` (ms per step, share 0-1; ``speedup_alone``:
        :attr:`speedup_alone`; ``others_cores``: :attr:`others`)."""
        return {"speedup_alone": round(self.speedup_alone, 2), "others_cores": round(self.others, 2),
                "input_ms": round(self.input_ms, 3), "tfdata_ms": round(self.tfdata_ms, 3),
                "workers_ms": round(self.workers_ms, 3), "pool_ms": round(self.pool_ms, 3),
                "model_ms": round(self.model_ms, 3), "host_ms": round(self.host_ms, 3),
                "wait_ms": round(self.wait_ms, 3), "gil_ms": round(self.gil_ms, 3), "share": round(self.share, 3),
                "starved": self.starved,
                "after_ms": round(self.after_ms, 3), "speedup": round(self.speedup, 2), "stage": self.stage}


def input_load(f: "Findings") -> Optional[InputLoad]:
    """The input's load on the model's cores in this window (:class:`InputLoad`), on a
    CPU-only host with steady steps, a step timing and the sampler's process-tree figures;
    None elsewhere (an accelerator's math does not share the host's cores)."""
    t, p, system = f.timing, f.pipeline, f.system or {}
    tree_cores = system.get("tree_cpu_cores")
    if (f.device_kind != "CPU" or t is None or not f.steps.count or f.eager or system.get("scope") != "process_tree"
            or not isinstance(tree_cores, (int, float)) or t.step_ms <= 0):
        return None
    tree = float(tree_cores)
    proc = float(system.get("proc_cpu_cores") or tree)
    runq = float(system.get("tree_runq_wait_cores") or 0.0)
    stretch = (tree + runq) / tree if tree > 0 else 1.0
    b = t.breakdown_ms
    step, wait, host = t.step_ms, b.get("input", 0.0), b.get("host_compute", 0.0)
    model = t.model_cpu_ms if t.model_cpu_ms else b.get("device_compute", 0.0)
    # Stages the consumer runs itself do their work inside its wait for input: only those under
    # an asynchronous stage (a prefetch, a parallel map) work beside the step.
    stages = p.stages if p is not None else []
    # Stages under a cache that is being filled stop working once it is full: not the run's load.
    working = [st for st in stages if st.category != "buffer" and not (p is not None and p.fills_cache(st))
               and any(o.asynchronous and st.path.startswith(o.path) for o in stages)]
    # The stages' work is summed over the window; what they did while a left-out step (warm-up,
    # odd) waited for its batch belongs to that step, not to the steady steps' load.
    tfdata = max(sum(st.work_ps for st in working) / 1e9 - f.steps.left_out_input_ms, 0.0) / f.steps.count
    children = int(system.get("tree_children") or 0)
    pool = int(system.get("pool_threads") or 0)
    workers_ms = max(tree - proc, 0.0) * step * stretch if children else 0.0
    pool_ms = 0.0
    pool_cores = system.get("pool_cpu_cores")
    if (pool or children) and isinstance(pool_cores, (int, float)):
        # The pool's own clocks (schedstat): its worker threads, and the handler threads that
        # pickle tasks for worker processes and unpickle the batches they send back.
        pool_ms = pool_cores * step * stretch
    elif pool > children:
        # The training process's CPU less what the trace saw it spend (on the wall scale).
        pool_ms = max(proc * step * stretch - model - host - tfdata, 0.0)
    if workers_ms or pool_ms:
        stage = (f"the Python input's {pool} worker thread(s)" if pool and pool_ms > workers_ms
                 else f"the Python input's {children} worker process(es)")
    elif p is not None and p.blocking is not None:
        stage = f"the tf.data stage `{p.blocking.kind}` ({p.blocking.path})"
    else:
        return None
    cores = cores_of(system)
    python = pool_ms + max(sum(st.work_ps for st in working if st.kind in PYTHON) / 1e9
                           - f.steps.left_out_input_ms, 0.0) / f.steps.count
    return InputLoad(step_ms=step, wait_ms=wait, model_ms=model, host_ms=host, tfdata_ms=tfdata,
                     workers_ms=workers_ms, pool_ms=pool_ms, stretch=stretch, starved=starved(system), stage=stage,
                     python_ms=python, retained=retained(cores), others=cores.others if cores is not None else 0.0,
                     cores=cores.n if cores is not None else 1)


def retained(cores: Optional[Cores]) -> float:
    """The part (0-1) of the cores the input's work frees that the training tree keeps: all of
    them where other processes used under :data:`IDLE_SLACK_CORES`; else the tree's part of the
    busy cores, tree / (tree + others). Linux's CFS shares CPU time among runnable threads by
    weight (``Documentation/scheduler/sched-design-CFS.rst``): where other processes want the
    cores too, what the input's threads no longer take is shared between them and the model's
    threads, not handed to the model (on the tutorial corpus' fit half run beside two spinning
    processes, the modelled gains without this were 1.3-1.7 times the measured ones)."""
    if cores is None or cores.others < IDLE_SLACK_CORES or cores.tree <= 0:
        return 1.0
    return cores.tree / (cores.tree + cores.others)


def alone_words(load: InputLoad) -> str:
    """Words for :attr:`InputLoad.speedup_alone` beside the window's figure, where other
    processes shared the cores enough to change it (by 0.05x or more, our choice: five times
    the figures' rounding); else ''."""
    if load.speedup_alone - load.speedup < 0.05:
        return ""
    return f"; {load.speedup_alone:.2f}x were the {load.others:.2f} core(s) other processes used free"
