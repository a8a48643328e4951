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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from . import sysmetrics

#: A machine counts as saturated when fewer cores than this sat idle on average (cores;
#: one 50 ms sample of a 2-core machine resolves about 0.02 cores; our choice, a tenth of
#: a core, is well above the sampler's noise).
IDLE_SLACK_CORES = 0.1
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


def cores_of(system: Optional[Dict]) -> Optional[Cores]:
    """The window's :class:`Cores` from a sampler summary, or None without one (or without the
    core count)."""
    if not system or not system.get("cpu_count"):
        return None
    n = int(system.get("usable_cores") or system["cpu_count"])
    tree = system.get("tree_cpu_cores")
    tree = float(tree if tree is not None else system.get("proc_cpu_cores") or 0.0)
    others = sysmetrics.other_cores(system, tree, int(system["cpu_count"]))
    # Other processes may run on cores outside this process's affinity: count only what
    # could have been on its own cores.
    others = min(float(others), max(n - tree, 0.0))
    return Cores(n=n, tree=tree, others=others, waiting=float(system.get("tree_runq_wait_cores") or 0.0))
