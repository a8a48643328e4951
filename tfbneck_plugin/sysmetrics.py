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

``sampler_error`` (str or null) says why sampling stopped early. Writers may add further
top-level keys; readers ignore the ones they do not know. ``BottleneckProfiler`` adds
``"source": "BottleneckProfiler"`` and ``"window"``::

    "window": {"index": int,                      # 0-based, in the order windows were opened
               "requested_steps": [[int, int]],   # the windows asked for that this session covers
               "profiled_steps": [int, int],      # first and last batch (1-based) recorded
               "markers": [[int, int]],           # per step marker: first and last batch it covers
               "steps_per_execution": int,
               "closed_by": str}                  # "completed", "training_ended", "closed", ...

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
#: The training process is computing (not waiting) when it keeps at least this many cores
#: busy on average (psutil's process CPU % / 100). A pipeline stage that computes keeps at
#: least one thread running; one that sleeps on I/O does not. Measured here (2 cores,
#: demo_logs/make_demo_logs.py): CPU-bound map 0.8-1.9 cores, sleep-bound reads 0.3-0.45.
BUSY_PROCESS_CORES = 0.65
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
