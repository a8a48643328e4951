"""Small PyTorch profiler traces (Kineto JSON) written as Kineto writes them, for the tests of
fleet, the held-down verdicts and the DataLoader's start-up: the event spellings of
tests/test_kineto.py (``ProfilerStep#N`` and the DataLoader's ``__next__`` as ``user_annotation``
complete events, ops as ``cpu_op``), one training thread, no device events (a CPU-only host)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Union

PID = TID = 4242
#: The DataLoader's iterator with worker processes (num_workers > 0) and without (num_workers=0).
WORKERS = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
#: A file name as tensorboard_trace_handler gives it (<host>_<pid>.<ns time>.pt.trace.json).
TRACE = "vm_1.1796636592051681391.pt.trace.json"


def _x(cat: str, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": {}}


def cpu_loop(path: Path, iterator: str, wait_us: float = 300.0,
             step_us: Union[float, Callable[[int], float]] = 10_000.0, steps: int = 6, first: int = 2) -> Path:
    """Writes a CPU-only training loop to ``path`` (folders made) and returns ``path``: its
    ``steps`` steps, ``ProfilerStep#first`` on, each ``step_us`` µs long (or ``step_us(number)``),
    wait ``wait_us`` µs in the DataLoader's ``__next__`` (``iterator``), then run 500 µs
    ``aten::addmm`` ops for the rest of the step."""
    t0 = 1_000_000.0
    ev = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "python3"}}]
    for n in range(first, first + steps):
        dur = step_us(n) if callable(step_us) else step_us
        ev.append(_x("user_annotation", f"ProfilerStep#{n}", t0, dur))
        ev.append(_x("user_annotation", iterator, t0 + 1, wait_us))
        t = t0 + wait_us + 2
        while t + 520 < t0 + dur:
            ev.append(_x("cpu_op", "aten::addmm", t, 500.0))
            t += 510
        t0 += dur
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path
