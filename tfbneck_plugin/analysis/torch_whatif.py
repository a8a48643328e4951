"""What PyTorch's fixes (:mod:`.torch_advice`) are worth: the models :mod:`.whatif` runs
for them, the reasons where none exists, and the breakdown categories that bound the
others. A prediction has :mod:`.whatif`'s shape (``time_per_batch_ms``, ``step_time_ms``,
``range_ms``, ``speedup``, ``basis``); times are ms per batch.

``num_workers``            the DataLoader from ``num_workers=0`` to k worker processes: the
                           batch the loop loaded itself (its wait I, all of the loading) is
                           loaded by k processes beside the rest of the step R:
                           max(R, I/n), n = min(k, cores) (k without system metrics); at
                           worst the workers take the model's cores and R + I/n.
``pin_memory``,            copies from pinned memory with ``non_blocking=True`` overlap the
``non_blocking``           host-to-device copies that held the step (T less their share).
"""
from __future__ import annotations

import re
from typing import Callable, Dict, Tuple, Union

from ..schema import Predicted, Recommendation
from . import cpu_share
from .findings import Findings

#: Workers assumed when a recommendation's code names none (torch_advice.DEFAULT_WORKERS).
DEFAULT_WORKERS = 4


def _predicted(f: Findings, after: float, low: float, high: float, basis: str) -> Predicted:
    """A prediction whose range holds its point (as :func:`.whatif._prediction`)."""
    assert f.timing is not None
    now, b = f.timing.time_per_batch_ms, f.timing.batches_per_step
    low, high = max(min(low, high), 1e-6), max(low, high)
    after = min(max(after, low), high)
    return {"time_per_batch_ms": round(after, 3), "step_time_ms": round(after * b, 3),
            "range_ms": [round(low, 3), round(high, 3)], "speedup": round(now / after, 2), "basis": basis}


def _loader_workers(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    loader, t = f.loader, f.timing
    if loader is None or t is None:
        return "The trace holds no DataLoader: the loading time is unknown."
    if loader.workers:
        return "The DataLoader already loads in worker processes: the loading's own time is not in the trace."
    m = re.search(r"\bnum_workers\s*=\s*(\d+)", rec.get("code") or "")
    k = max(int(m.group(1)) if m else DEFAULT_WORKERS, 1)
    cores = cpu_share.cores_of(f.system)
    n = min(k, cores.n) if cores else k
    now = t.time_per_batch_ms
    load = t.breakdown_ms.get("input", 0.0) / t.batches_per_step
    rest = now - load
    after = max(rest, load / n)
    # At worst the workers take the model's cores and the two add up; without system metrics the
    # cores they get are unknown, so that worst case is today's time (on a busy or 2-core machine
    # workers were measured to gain nothing or less: benchmarks/torch_corpus.py).
    worst = min(now, rest + load / n) if cores else now
    return _predicted(f, after, after, worst, (
        f"{k} worker processes load the batches ({load:.1f} ms of loading per batch today, inside the step) beside "
        f"the rest of the step ({rest:.1f} ms): the step becomes the longer of the two, the loading spread over "
        f"{n} process(es)" + ("; at worst the workers take the model's cores and the two add up" if cores else
                              "; the cores they get are unknown without system metrics: at worst they take the "
                              "model's and nothing is gained") + "."))


def _async_copies(rec: Recommendation, f: Findings) -> Union[Predicted, str]:
    t = f.timing
    assert t is not None
    h2d = t.breakdown_ms.get("host_to_device", 0.0) / t.batches_per_step
    if h2d <= 0:
        return "No host-to-device copy held the step up."
    now = t.time_per_batch_ms
    return _predicted(f, now - h2d, now - h2d, now, (
        f"Copies from pinned memory with non_blocking=True overlap the {h2d:.1f} ms per batch of host-to-device "
        "copies with the step; copies back to the host stay."))


#: fix id -> its model.
MODELS: Dict[str, Callable[[Recommendation, Findings], Union[Predicted, str]]] = {
    "num_workers": _loader_workers,
    "pin_memory": _async_copies,
    "non_blocking": _async_copies,
}

#: fix id -> why no model of the trace's numbers exists for it.
WHY_NOT: Dict[str, str] = {
    "more_workers": "How many more batches more workers would deliver depends on the cores they get, not in the "
                    "trace (the workers' processes are not profiled).",
    "persistent_workers": "Worker start-up happens at each epoch's first batches, outside the profiled steps.",
    "cheaper_transforms": "How much cheaper the dataset's work could be is not in the trace.",
    "torch_compile": "Which ops torch.compile would fuse, and what that saves, is not in the trace.",
    "cuda_graphs": "How much of the launch time a CUDA graph removes depends on the capture, not in the trace.",
    "larger_batch": "How the step time grows with the batch is not in a trace taken at one batch size.",
    "amp": "How much faster the ops run in 16-bit depends on the hardware and the op mix, not in the trace.",
    "ddp_buckets": "How the all-reduce overlaps the backward pass at other bucket sizes is not in the trace.",
    "measure_input": "A measurement, not a change: it says whether the input or the model limits the run.",
    # (a tf.data pipeline feeding a Keras fit on JAX or PyTorch: its stages are in neither trace)
    "time_tf_data": "A measurement first: the tf.data pipeline's stages are not in this trace.",
    "keras_other_backend": "A measurement on another backend, not a change.",
}

#: fix id -> the breakdown categories the change can at most remove (its bound).
ACTS_ON: Dict[str, Tuple[str, ...]] = {
    "more_workers": ("input",), "cheaper_transforms": ("input",), "persistent_workers": ("input",),
    "cuda_graphs": ("kernel_launch",), "ddp_buckets": ("collective",),
}
