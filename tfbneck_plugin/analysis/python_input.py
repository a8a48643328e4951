"""The Python input of a run (a Keras ``PyDataset``, a generator read through
``Dataset.from_generator``): its workers as the sampler saw them, and whether its code
computes or waits. Read by the what-if model of ``pydataset_workers`` (:mod:`.whatif`), the
advice's snippet (:mod:`.fit_to_run`) and ``tfbneck compare``'s change detection."""
from __future__ import annotations

from typing import Optional, Tuple

from ..schema import SystemMetrics
from . import cpu_share, tfdata
from .findings import Findings


def input_workers(system: Optional[SystemMetrics]) -> Tuple[int, str]:
    """The Python input's workers the sampler saw: worker processes (the tree's children) or
    the worker threads of a Python thread pool in the training process (a PyDataset's
    threads), whichever are more, and how to name them; (0, ...) when neither was seen."""
    system = system or {}
    processes = int(system.get("tree_children") or 0)
    threads = int(system.get("pool_threads") or 0)
    if threads > processes:
        return threads, f"{threads} worker thread(s)"
    if processes:
        return processes, f"{processes} worker process(es)"
    return 0, "no worker process or pool thread seen"


def input_computes(f: Findings) -> Optional[bool]:
    """Whether the Python input computes (True) or waits (False: sleeps, reads, locks), None
    without system metrics. Threads that ran or waited for a core want the CPU, so a starved
    input still computes: its own cores while the step waited
    (:meth:`~.cpu_share.Cores.input_while_waiting`: on a CPU-only host the tree's cores less
    the model's executor work) plus the tree's runnable threads that found no idle core
    (:attr:`~.cpu_share.Cores.starved`) reach :data:`~.sysmetrics.BUSY_PROCESS_CORES`."""
    from .sysmetrics import BUSY_PROCESS_CORES
    cores = cpu_share.cores_of(f.system)
    if cores is None:
        return None
    model = f.timing.model_cores if f.timing is not None and f.device_kind == "CPU" else None
    return cores.input_while_waiting(model, f.share("input") / 100.0) + cores.starved >= BUSY_PROCESS_CORES


#: What a Keras fit on JAX or PyTorch names a Python input (capture.engines' input marks).
PYTHON_KERAS_INPUTS = ("PyDataset", "generator")


def holds_the_gil(f: Findings) -> bool:
    """The input's Python code runs in the training process (a generator, a PyDataset and
    its consumer thread, a ``py_function``): CPython runs one thread's bytecode at a time (the
    global interpreter lock, https://docs.python.org/3/glossary.html#term-global-interpreter-lock),
    so the training thread's own Python (Keras' step loop, its callbacks) waits while the
    input's runs, and that wait is recorded as the training thread's host time, not as input."""
    if f.keras_input in PYTHON_KERAS_INPUTS:
        return True
    stages = f.pipeline.stages if f.pipeline is not None else []
    if any(st.kind in tfdata.PYTHON for st in stages) or (f.pipeline is not None and f.pipeline.uses_py_function):
        return True
    groups = (f.ops or {}).get("by_type") or []
    return any(g.get("type") in ("PyFunc", "EagerPyFunc") for g in groups)
