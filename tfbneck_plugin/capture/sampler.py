"""The system sampler BottleneckProfiler runs during a window (psutil, NVML): what the
machine, this process and the GPUs did, written as the sidecar described in
:mod:`tfbneck_plugin.records`. No TensorFlow here.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Dict, List, Optional

from ..records import FORMAT, VERSION, write_sidecar


_NVML_MISSING = False


class SystemSampler:
    """Samples the system every ``interval_s`` seconds on a daemon thread (psutil, NVML).

    ``start()`` begins, ``stop()`` ends and returns the sidecar dict; ``write(folder)``
    stores it. Any exception inside the thread stops sampling and is kept in ``error``:
    the sampler never raises into the training loop.

    Per-core CPU % is computed from this sampler's own ``psutil.cpu_times(percpu=True)``
    deltas (busy = all time but idle and iowait, as ``psutil.cpu_percent`` counts it), so
    other users of ``psutil.cpu_percent`` in the process do not disturb the readings.
    ``stop()`` takes one last sample when at least 10 ms (or ``interval_s / 5``) passed
    since the previous one, so a window shorter than one interval still has a sample
    (coarse: the kernel counts CPU time in 10 ms ticks). NVIDIA GPUs
    are read through NVML (package ``nvidia-ml-py``) when it is installed and a driver is
    present; otherwise ``gpus`` is an empty list.
    """

    def __init__(self, interval_s: float = 0.1):
        self.interval_s = float(interval_s)
        self.samples: List[Dict] = []
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._start_ns = self._end_ns = 0
        self._nvml = None
        self._gpus: List = []
        self._prev = None
        self._proc = None

    def start(self) -> "SystemSampler":
        # Imports and the first readings happen here, on the caller's thread: a sampler
        # thread importing modules while the training thread holds the GIL can take
        # hundreds of ms to get going.
        try:
            import psutil
            self._proc = psutil.Process()
            self._proc.cpu_percent()
            self._gpus = self._gpu_handles()
            self._prev = self._read()
        except Exception as err:
            self.error = f"{type(err).__name__}: {err}"
        self._start_ns = time.time_ns()
        self._thread = threading.Thread(target=self._run, name="tfbneck-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)
        self._end_ns = time.time_ns()
        return self.to_dict()

    def to_dict(self) -> Dict:
        try:
            import psutil
            cpu_count = psutil.cpu_count() or 0
        except Exception:  # psutil missing: the error is already in self.error
            cpu_count = os.cpu_count() or 0
        return {"format": FORMAT, "version": VERSION, "host": socket.gethostname(), "pid": os.getpid(),
                "cpu_count": cpu_count, "interval_s": self.interval_s,
                "start_unix_ns": self._start_ns, "end_unix_ns": self._end_ns or time.time_ns(),
                "sampler_error": self.error, "samples": list(self.samples)}

    def write(self, folder: str, extra: Optional[Dict] = None) -> str:
        """Write the sidecar (plus the optional top-level keys ``extra``) into ``folder``."""
        data = self.to_dict()
        if extra:
            data.update(extra)
        return write_sidecar(folder, data)

    def _gpu_handles(self):
        global _NVML_MISSING
        if _NVML_MISSING:
            return []
        try:
            import pynvml  # from nvidia-ml-py; optional
        except ImportError:
            _NVML_MISSING = True  # do not search sys.path again at every window
            return []
        try:
            pynvml.nvmlInit()
            self._nvml = pynvml
            return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no NVIDIA driver or package: no GPU columns
            return []

    def _read(self):
        import psutil
        return (time.monotonic(), psutil.cpu_times(percpu=True), psutil.disk_io_counters(),
                psutil.net_io_counters())

    def _sample(self, psutil, proc) -> None:
        now, cores1, disk1, net1 = self._read()
        last_t, cores0, disk0, net0 = self._prev
        dt = max(now - last_t, 1e-6)
        cpu_pct, busy_all, iowait_all, total_all = [], 0.0, 0.0, 0.0
        for a, b in zip(cores0, cores1):
            total = _cpu_total(b) - _cpu_total(a)
            idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
            busy = max(total - idle, 0.0)
            cpu_pct.append(round(min(100.0, 100.0 * busy / total), 1) if total > 0 else 0.0)
            iowait_all += getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0)
            total_all += max(total, 0.0)
        iowait = None
        if cores1 and hasattr(cores1[0], "iowait"):
            iowait = round(100.0 * iowait_all / total_all, 2) if total_all > 0 else 0.0
        self.samples.append({
            "t_unix_ns": time.time_ns(),
            "cpu_pct": cpu_pct,
            "proc_cpu_pct": proc.cpu_percent(),
            "iowait_pct": iowait,
            "mem_used_pct": psutil.virtual_memory().percent,
            "proc_rss_bytes": proc.memory_info().rss,
            "disk_read_Bps": _rate(disk0, disk1, "read_bytes", dt),
            "disk_write_Bps": _rate(disk0, disk1, "write_bytes", dt),
            "net_recv_Bps": _rate(net0, net1, "bytes_recv", dt),
            "net_sent_Bps": _rate(net0, net1, "bytes_sent", dt),
            "gpus": [self._gpu_sample(i, h) for i, h in enumerate(self._gpus)],
        })
        self._prev = (now, cores1, disk1, net1)

    def _run(self):
        if self.error is not None:
            return
        try:
            import psutil
            proc = self._proc
            while not self._stop.wait(self.interval_s):
                self._sample(psutil, proc)
            # A last sample covering the end of the window (a short window still gets one).
            if time.monotonic() - self._prev[0] >= min(self.interval_s / 5, 0.01):
                self._sample(psutil, proc)
        except Exception as err:  # never let the sampler reach the training loop
            self.error = f"{type(err).__name__}: {err}"
        finally:
            if self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:
                    pass

    def _gpu_sample(self, index, handle):
        util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return {"index": index, "util_pct": float(util.gpu), "mem_used_bytes": int(mem.used)}


def _cpu_total(t) -> float:
    # guest and guest_nice are already counted in user and nice (Linux): do not add them twice.
    total = sum(t)
    return total - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _rate(a, b, field, dt):
    if a is None or b is None:
        return 0.0
    return round(max(getattr(b, field) - getattr(a, field), 0) / dt, 1)
