"""Small PyTorch profiler traces (Kineto JSON) written as Kineto writes them, for the fleet's
tests: the event spellings of tests/test_kineto.py (``ProfilerStep#N`` and the DataLoader's
``__next__`` as ``user_annotation`` complete events, ops as ``cpu_op``), one training thread,
no device events (a CPU-only host)."""
from __future__ import annotations

import json
from pathlib import Path

PID = TID = 4242
#: The DataLoader's iterator with worker processes (num_workers > 0) and without (num_workers=0).
WORKERS = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
#: A file name as tensorboard_trace_handler gives it (<host>_<pid>.<ns time>.pt.trace.json).
TRACE = "vm_1.1796636592051681391.pt.trace.json"


def _x(cat: str, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": {}}


def cpu_loop(path: Path, iterator: str, wait_us: float, step_us: float = 10_000.0, steps: int = 6) -> Path:
    """Writes a CPU-only training loop to ``path`` (folders made) and returns ``path``: each of
    ``steps`` steps of ``step_us`` µs waits ``wait_us`` µs in the DataLoader's ``__next__``
    (``iterator``), then runs 500 µs ``aten::addmm`` ops for the rest of the step."""
    base = 1_000_000.0
    ev = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "python3"}}]
    for k in range(steps):
        t0 = base + k * step_us
        ev.append(_x("user_annotation", f"ProfilerStep#{k + 2}", t0, step_us))
        ev.append(_x("user_annotation", iterator, t0 + 1, wait_us))
        t = t0 + wait_us + 2
        while t + 520 < t0 + step_us:
            ev.append(_x("cpu_op", "aten::addmm", t, 500.0))
            t += 510
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path
