"""System metrics beside a trace: the sampler that records them and the summary the
analyzer reads.

The trace shows what threads did, not whether a core computed or sat waiting: a
``py_function`` that sleeps on a network read looks the same as one that decodes images.
Sampling the system while the profiler runs answers that (``diagnosis.md``, step 1 of the
method: accelerator low + CPU cores saturated = CPU-bound; accelerator low + CPU low =
waiting on storage or network).

Sidecar file ``tfbneck_system_metrics.json`` in the session folder (format version 1)::

    {"format": "tfbneck.system_metrics", "version": 1,
     "host": str, "pid": int, "cpu_count": int, "interval_s": float,
     "start_unix_ns": int, "end_unix_ns": int,
     "samples": [{"t_unix_ns": int,
                  "cpu_pct": [float per core, 0-100],   # psutil.cpu_percent(percpu=True)
                  "proc_cpu_pct": float,                # this process, 100 = one full core
                  "iowait_pct": float | null,           # share of CPU time waiting on I/O (Linux)
                  "mem_used_pct": float, "proc_rss_bytes": int,
                  "disk_read_Bps": float, "disk_write_Bps": float,
                  "net_recv_Bps": float, "net_sent_Bps": float,
                  "gpus": [{"index": int, "util_pct": float, "mem_used_bytes": int}]}]}

The file is written atomically (temporary file + rename): a reader never sees torn JSON.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from typing import Dict, List, Optional

FORMAT = "tfbneck.system_metrics"
VERSION = 1


class SidecarError(Exception):
    """The sidecar exists but cannot be used; the message is one line naming the file."""


# ----------------------------------------------------------------------------------------
# Sampling (used by BottleneckProfiler and by the demo generator)
# ----------------------------------------------------------------------------------------

class SystemSampler:
    """Samples the system every ``interval_s`` seconds on a daemon thread (psutil, NVML).

    ``start()`` begins, ``stop()`` ends and returns the sidecar dict; ``write(folder)``
    stores it. Any exception inside the thread stops sampling and is kept in ``error``:
    the sampler never raises into the training loop.
    """

    def __init__(self, interval_s: float = 0.1):
        self.interval_s = float(interval_s)
        self.samples: List[Dict] = []
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._start_ns = self._end_ns = 0
        self._nvml = None

    def start(self) -> "SystemSampler":
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
        import psutil
        return {"format": FORMAT, "version": VERSION, "host": socket.gethostname(), "pid": os.getpid(),
                "cpu_count": psutil.cpu_count() or 0, "interval_s": self.interval_s,
                "start_unix_ns": self._start_ns, "end_unix_ns": self._end_ns or time.time_ns(),
                "sampler_error": self.error, "samples": list(self.samples)}

    def _gpu_handles(self):
        try:
            import pynvml  # from nvidia-ml-py; optional
            pynvml.nvmlInit()
            self._nvml = pynvml
            return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no NVIDIA driver or package: no GPU columns
            return []

    def _run(self):
        try:
            import psutil
            proc = psutil.Process()
            gpus = self._gpu_handles()
            psutil.cpu_percent(percpu=True)
            proc.cpu_percent()
            last_t = time.monotonic()
            disk0 = psutil.disk_io_counters()
            net0 = psutil.net_io_counters()
            cpu_t0 = psutil.cpu_times()
            while not self._stop.wait(self.interval_s):
                now = time.monotonic()
                dt = max(now - last_t, 1e-6)
                last_t = now
                disk1, net1, cpu_t1 = psutil.disk_io_counters(), psutil.net_io_counters(), psutil.cpu_times()
                iowait = None
                if hasattr(cpu_t1, "iowait"):
                    busy = sum(cpu_t1) - sum(cpu_t0)
                    iowait = round(100.0 * (cpu_t1.iowait - cpu_t0.iowait) / busy, 2) if busy > 0 else 0.0
                sample = {
                    "t_unix_ns": time.time_ns(),
                    "cpu_pct": psutil.cpu_percent(percpu=True),
                    "proc_cpu_pct": proc.cpu_percent(),
                    "iowait_pct": iowait,
                    "mem_used_pct": psutil.virtual_memory().percent,
                    "proc_rss_bytes": proc.memory_info().rss,
                    "disk_read_Bps": _rate(disk0, disk1, "read_bytes", dt),
                    "disk_write_Bps": _rate(disk0, disk1, "write_bytes", dt),
                    "net_recv_Bps": _rate(net0, net1, "bytes_recv", dt),
                    "net_sent_Bps": _rate(net0, net1, "bytes_sent", dt),
                    "gpus": [self._gpu_sample(i, h) for i, h in enumerate(gpus)],
                }
                disk0, net0, cpu_t0 = disk1, net1, cpu_t1
                self.samples.append(sample)
        except Exception as err:  # never let the sampler reach the training loop
            self.error = f"{type(err).__name__}: {err}"

    def _gpu_sample(self, index, handle):
        util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return {"index": index, "util_pct": float(util.gpu), "mem_used_bytes": int(mem.used)}


def _rate(a, b, field, dt):
    if a is None or b is None:
        return 0.0
    return round(max(getattr(b, field) - getattr(a, field), 0) / dt, 1)


def write_sidecar(folder: str, data: Dict, name: str = "tfbneck_system_metrics.json") -> str:
    """Write ``data`` as JSON into ``folder`` atomically; returns the path."""
    fd, tmp = tempfile.mkstemp(prefix=".tfbneck-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        final = os.path.join(folder, name)
        os.replace(tmp, final)
        return final
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ----------------------------------------------------------------------------------------
# Reading (the analyzer)
# ----------------------------------------------------------------------------------------

#: A core counts as saturated above this utilisation (%). htop/psutil report 100 for a
#: core busy the whole interval; 85 leaves room for sampling jitter at 100 ms intervals
#: (measured here: a pure-Python busy loop reads 88-100 % per 100 ms sample).
SATURATED_CORE_PCT = 85.0
#: Below this mean utilisation across all cores (%) the host is "mostly idle". With two
#: cores one saturated core already reads 50 %; 35 leaves room for the training thread.
IDLE_HOST_PCT = 35.0


def read_sidecar(path: str, opener=open) -> Dict:
    try:
        with opener(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise SidecarError(f"{path}: unreadable system metrics ({type(err).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("samples"), list):
        raise SidecarError(f"{path}: not a tfbneck system-metrics file")
    return data


def summarize(data: Dict) -> Optional[Dict]:
    """Means over the samples: cpu_mean_pct (all cores), busiest_core_mean_pct,
    saturated_cores_mean (cores above SATURATED_CORE_PCT), proc_cpu_cores, iowait_pct,
    disk/net bytes per second, gpu_util_pct. None when there are no samples."""
    samples = [s for s in data.get("samples", []) if isinstance(s, dict) and s.get("cpu_pct")]
    if not samples:
        return None

    def mean(values):
        values = [float(v) for v in values if isinstance(v, (int, float))]
        return round(sum(values) / len(values), 2) if values else None

    gpu_utils = [g.get("util_pct") for s in samples for g in s.get("gpus") or [] if isinstance(g, dict)]
    return {
        "samples": len(samples),
        "cpu_count": data.get("cpu_count"),
        "cpu_mean_pct": mean(mean(s["cpu_pct"]) for s in samples),
        "busiest_core_mean_pct": mean(max(s["cpu_pct"]) for s in samples),
        "saturated_cores_mean": mean(sum(1 for c in s["cpu_pct"] if c >= SATURATED_CORE_PCT) for s in samples),
        "proc_cpu_cores": round((mean(s.get("proc_cpu_pct") for s in samples) or 0) / 100.0, 2),
        "iowait_pct": mean(s.get("iowait_pct") for s in samples),
        "disk_read_MBps": round((mean(s.get("disk_read_Bps") for s in samples) or 0) / 1e6, 3),
        "net_recv_MBps": round((mean(s.get("net_recv_Bps") for s in samples) or 0) / 1e6, 3),
        "gpu_util_pct": mean(gpu_utils) if gpu_utils else None,
        "series": {
            "t_ms": [round((s["t_unix_ns"] - samples[0]["t_unix_ns"]) / 1e6, 1) for s in samples],
            "cpu_pct": [s["cpu_pct"] for s in samples],
            "proc_cpu_pct": [s.get("proc_cpu_pct") for s in samples],
            "disk_read_Bps": [s.get("disk_read_Bps") for s in samples],
            "net_recv_Bps": [s.get("net_recv_Bps") for s in samples],
            "gpu_util_pct": [[g.get("util_pct") for g in s.get("gpus") or []] for s in samples],
        },
    }
