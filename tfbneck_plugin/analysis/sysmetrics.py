"""The summary of a window's system metrics that the verdict reads, and the thresholds
that turn it into "computing", "waiting" or "contended". The sampler that records them is
:mod:`tfbneck_plugin.capture.sampler`; the file format is in :mod:`tfbneck_plugin.records`.

The trace shows what threads did, not whether a core computed or sat waiting: a
``py_function`` that sleeps on a network read looks the same as one that decodes images.
Sampling the system while the profiler runs answers that (``diagnosis.md``, step 1 of the
method: accelerator low + CPU cores saturated = CPU-bound; accelerator low + CPU low =
waiting on storage or network).
"""
from __future__ import annotations

from typing import Dict, Optional


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
