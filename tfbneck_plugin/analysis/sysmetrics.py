"""The summary of a window's system metrics that the verdict reads, and the thresholds
that turn it into "computing", "waiting" or "contended". The sampler that records them is
:mod:`tfbneck_plugin.system.sampler`; the file format is in :mod:`tfbneck_plugin.records`.

The trace shows what threads did, not whether a core computed or sat waiting: a
``py_function`` that sleeps on a network read looks the same as one that decodes images.
Sampling the system while the profiler runs answers that (``diagnosis.md``, step 1 of the
method: accelerator low + CPU cores saturated = CPU-bound; accelerator low + CPU low =
waiting on storage or network).
"""
from __future__ import annotations

from typing import Dict, List, Optional

from ..schema import SystemMetrics

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
#: Windows shorter than this (s) take the process's and the tree's CPU from the sidecar's
#: ``window_cpu`` (per-thread ``schedstat``, ns) rather than from the samples: the kernel
#: counts ``cpu_times`` in 10 ms ticks (USER_HZ = 100), so a 1 s window resolves a core to
#: 1 % and a 20 ms one reads 0 % or 100 % (our choice of the limit).
EXACT_CPU_BELOW_S = 1.0
#: Windows shorter than this (s) are too short for the machine-wide CPU counters: each core's
#: busy share comes from whole 10 ms ticks, so under 5 ticks one tick at either reading moves
#: it by 20 % or more, and a 5 ms window reads 0 % or 100 % (our choice of the limit). The
#: report then gives the process's own cores over the window instead.
MACHINE_CPU_MIN_S = 0.05

#: Network receive rate over disk read rate above which reads are remote (our choice: an
#: order of magnitude, so that disk caches and metadata traffic do not tip it).
REMOTE_READ_RATIO = 10.0


def other_cores(system: SystemMetrics, own_cores: float, cores: float) -> float:
    """Cores (of ``cores``) that processes outside the training process tree kept busy: the
    sampler's ``others_cpu_cores``, else (machine-wide figures only, old sidecars) the
    machine's mean CPU less ``own_cores``, at least 0."""
    others = system.get("others_cpu_cores")
    if others is None:
        others = max((system.get("cpu_mean_pct") or 0.0) * cores / 100.0 - own_cores, 0.0)
    return float(others)


def summarize(data: Dict) -> Optional[SystemMetrics]:
    """The window's system metrics as the verdict reads them: means over the samples.

    Samples that carry ``dt_s`` (sidecars written since the sampler's samples became
    contiguous) are weighted by the time they cover; older ones count alike.

    Args:
      data: a sidecar dict (:func:`tfbneck_plugin.records.read_sidecar`).

    Returns:
      None when there are no samples, else a :class:`~tfbneck_plugin.schema.SystemMetrics`:
        ``samples`` (int), ``cpu_count`` (int), ``usable_cores`` (int: the cores the process may
        run on, its CPU affinity when recorded, else ``cpu_count``), ``sampled_s`` (float, seconds the samples
        cover; None for old sidecars), ``cpu_mean_pct`` (all cores, %),
        ``busiest_core_mean_pct`` (%), ``saturated_cores_mean`` (cores above
        :data:`SATURATED_CORE_PCT`), ``proc_cpu_cores`` (the training process alone, cores),
        ``iowait_pct`` (%), ``disk_read_MBps`` and ``net_recv_MBps`` (machine-wide, MB/s,
        loopback included), ``gpu_util_pct`` (%, None without GPUs), ``series`` (per-sample
        lists), and the process-tree figures (each None when the sidecar lacks them, as
        old sidecars do):
        ``tree_cpu_cores`` (mean cores used by the training process and its descendants),
        ``others_cpu_cores`` (mean cores busy with processes outside the tree: the machine's
        mean busy cores minus the tree's mean, floored at 0), ``tree_children`` (int, most
        descendants seen at once), ``pool_threads`` (int, most worker threads of Python thread
        pools seen at once in the training process: a PyDataset's threads), ``tree_disk_read_MBps`` (MB/s the tree read from
        storage), ``net_recv_external_MBps`` (MB/s received on non-loopback interfaces,
        machine-wide), ``remote_connections`` (int, most TCP connections of the tree to
        non-loopback peers at once), ``loopback_connections`` (int, the same to loopback
        peers), ``tree_runq_wait_cores`` (mean number of the tree's threads runnable but
        waiting for a CPU: CPU contention measured on the training's own threads; None
        where the kernel does not report it), ``pool_cpu_cores`` (cores the input pools'
        threads in the training process used: a thread pool's workers, a process pool's
        handler threads; exact, from the sidecar's ``window_cpu``; None without it),
        ``cpu_exact`` (bool: the process's and the tree's cores come from ``window_cpu``), and ``scope``
        (``"process_tree"`` when the per-process figures exist, else ``"machine"``).
    """
    samples = [s for s in data.get("samples", []) if isinstance(s, dict) and s.get("cpu_pct")]
    if not samples:
        return None
    given = [s.get("dt_s") for s in samples]
    timed = all(isinstance(w, (int, float)) and w > 0 for w in given)
    weights: List[float] = [float(w) for w in given if w is not None] if timed else [1.0] * len(samples)
    mean = _weighted_mean(weights)
    tree = [s.get("tree_cpu_pct") for s in samples]
    has_tree = all(isinstance(v, (int, float)) for v in tree)
    gpu_utils = [g.get("util_pct") for s in samples for g in s.get("gpus") or [] if isinstance(g, dict)]
    out: SystemMetrics = {
        "samples": len(samples),
        "cpu_count": data.get("cpu_count"),
        "usable_cores": _usable_cores(data),
        "sampled_s": round(sum(weights), 4) if timed else None,
        "cpu_mean_pct": mean(_plain_mean(s["cpu_pct"]) for s in samples),
        "busiest_core_mean_pct": mean(max(s["cpu_pct"]) for s in samples),
        "saturated_cores_mean": mean(sum(1 for c in s["cpu_pct"] if c >= SATURATED_CORE_PCT) for s in samples),
        "proc_cpu_cores": round((mean(s.get("proc_cpu_pct") for s in samples) or 0) / 100.0, 2),
        "iowait_pct": mean(s.get("iowait_pct") for s in samples),
        "disk_read_MBps": round((mean(s.get("disk_read_Bps") for s in samples) or 0) / 1e6, 3),
        "net_recv_MBps": round((mean(s.get("net_recv_Bps") for s in samples) or 0) / 1e6, 3),
        "gpu_util_pct": _plain_mean(gpu_utils) if gpu_utils else None,
    }
    out.update(_tree_summary(samples, mean) if has_tree else NO_TREE)
    out["pool_cpu_cores"] = None
    out["cpu_exact"] = False
    if has_tree:
        _exact_cpu(out, data.get("window_cpu"))
    out["scope"] = "process_tree" if has_tree else "machine"
    out["series"] = _series(samples)
    return out


#: The process-tree figures of :func:`summarize` for sidecars without them: each None.
NO_TREE: SystemMetrics = {"tree_cpu_cores": None, "others_cpu_cores": None, "tree_children": None,
                          "pool_threads": None, "tree_disk_read_MBps": None, "net_recv_external_MBps": None,
                          "remote_connections": None, "loopback_connections": None, "tree_runq_wait_cores": None}
#: Keys of the process-tree figures in :func:`summarize`.
TREE_KEYS = tuple(NO_TREE)


def _usable_cores(data: Dict) -> Optional[int]:
    """Cores the training process may run on: its CPU affinity (taskset, a cpuset) when the
    sidecar records it, else every core."""
    n, affinity = data.get("cpu_count"), data.get("cpu_affinity")
    if isinstance(affinity, int) and affinity > 0:
        return min(affinity, n) if isinstance(n, int) and n > 0 else affinity
    return n if isinstance(n, int) else None


def _tree_summary(samples, mean) -> SystemMetrics:
    def most(key):
        values = [int(s[key]) for s in samples if isinstance(s.get(key), (int, float))]
        return max(values) if values else None

    def mbps(key):
        value = mean(s.get(key) for s in samples)
        return round(value / 1e6, 3) if value is not None else None

    runq = mean(s.get("tree_runq_wait_pct") for s in samples)
    tree = mean(s["tree_cpu_pct"] for s in samples)
    # Over the whole window, not per sample: a descendant's CPU lands in the sample where a
    # scan first finds it, so one sample's tree figure can exceed that sample's busy cores.
    others = max(mean(sum(s["cpu_pct"]) for s in samples) - tree, 0.0)
    return {"tree_cpu_cores": round(tree / 100.0, 2), "others_cpu_cores": round(others / 100.0, 2),
            "tree_children": most("tree_children"), "pool_threads": most("py_pool_threads"),
            "tree_disk_read_MBps": mbps("tree_disk_read_Bps"),
            "net_recv_external_MBps": mbps("net_recv_external_Bps"),
            "remote_connections": most("tree_remote_conns"), "loopback_connections": most("tree_loopback_conns"),
            "tree_runq_wait_cores": round(runq / 100.0, 2) if runq is not None else None}


def _exact_cpu(out: SystemMetrics, window_cpu) -> None:
    """Put the sidecar's exact window CPU (``window_cpu``, :mod:`tfbneck_plugin.records`) into
    ``out``: the pool workers' cores always (no sample has them), the process's and the tree's
    where the window is shorter than :data:`EXACT_CPU_BELOW_S`; the others' cores then follow
    the tree's."""
    if not isinstance(window_cpu, dict):
        return
    dur = window_cpu.get("dur_s")
    if not isinstance(dur, (int, float)) or dur <= 0:
        return
    pool = window_cpu.get("pool_cpu_s")
    if isinstance(pool, (int, float)):
        out["pool_cpu_cores"] = round(pool / dur, 3)
    proc, tree = window_cpu.get("proc_cpu_s"), window_cpu.get("tree_cpu_s")
    if dur >= EXACT_CPU_BELOW_S or not isinstance(proc, (int, float)) or not isinstance(tree, (int, float)):
        return
    busy = (out.get("tree_cpu_cores") or 0.0) + (out.get("others_cpu_cores") or 0.0)
    out["cpu_exact"] = True
    out["proc_cpu_cores"] = round(proc / dur, 3)
    out["tree_cpu_cores"] = round(tree / dur, 3)
    out["others_cpu_cores"] = round(max(busy - tree / dur, 0.0), 3)


def _series(samples) -> Dict:
    return {
        "t_ms": [round((s["t_unix_ns"] - samples[0]["t_unix_ns"]) / 1e6, 1) for s in samples],
        "cpu_pct": [s["cpu_pct"] for s in samples],
        "proc_cpu_pct": [s.get("proc_cpu_pct") for s in samples],
        "tree_cpu_pct": [s.get("tree_cpu_pct") for s in samples],
        "tree_runq_wait_pct": [s.get("tree_runq_wait_pct") for s in samples],
        "disk_read_Bps": [s.get("disk_read_Bps") for s in samples],
        "net_recv_Bps": [s.get("net_recv_Bps") for s in samples],
        "gpu_util_pct": [[g.get("util_pct") for g in s.get("gpus") or []] for s in samples],
    }


def _plain_mean(values) -> Optional[float]:
    values = [float(v) for v in values if isinstance(v, (int, float))]
    return round(sum(values) / len(values), 2) if values else None


def _weighted_mean(weights):
    """mean(values): the mean of the numeric values weighted by ``weights`` (same order),
    rounded to 2 decimals; None when no value is numeric."""
    def mean(values):
        pairs = [(float(v), w) for v, w in zip(values, weights) if isinstance(v, (int, float))]
        total = sum(w for _, w in pairs)
        return round(sum(v * w for v, w in pairs) / total, 2) if pairs and total > 0 else None
    return mean


def remote_read_sentence(system: SystemMetrics) -> Optional[str]:
    """A sentence when the training tree read from the network more than from disk, else None.

    Per-process figures: traffic on non-loopback interfaces while the tree held connections to
    remote peers (a loopback stream or another process's downloads do not count). Machine-wide
    figures only: any received traffic, which may be another process's."""
    disk = max(system.get("tree_disk_read_MBps") or system.get("disk_read_MBps") or 0.0, 0.1)
    if system.get("scope") == "process_tree":
        net = system.get("net_recv_external_MBps") or 0.0
        conns = system.get("remote_connections") or 0
        if conns and net > REMOTE_READ_RATIO * disk:
            return (f"The CPU was mostly idle while the step waited, and the training process held {conns} "
                    f"connection(s) to remote hosts while the machine received {net:.1f} MB/s from the network "
                    f"against {disk:.1f} MB/s of disk reads: remote reads limit the input.")
        return None
    net = system.get("net_recv_MBps") or 0.0
    if net > REMOTE_READ_RATIO * disk:
        return ("The CPU was mostly idle while the step waited, and the host was receiving from the network "
                f"({net:.1f} MB/s, machine-wide: it may be another process's traffic): remote reads may limit "
                "the input.")
    return None
