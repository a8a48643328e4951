"""Step 1 of the method: the first diagnosis that the system metrics alone support.

The flowchart (``shared/design/diagnosis.md``), read off what ``nvidia-smi``,
``htop`` and ``iostat`` show while training runs:

1. accelerator utilisation consistently high (> 90 %)         -> ``device``
2. the training process tree fills a core (one thread, the GIL's
   signature) or every core (or holds half of a machine whose
   cores are all busy), or waits in the run queue for one       -> ``cpu``
3. little CPU, accelerator idle, the network busy               -> ``network``
4. accelerator and CPU both mostly idle                         -> ``io`` (disk activity
   confirms it; without disk reads the wait is elsewhere: remote storage, a lock, a sleep)
5. anything in between                                          -> ``unclear``

The input is the system sampler's samples (:class:`tfbneck_plugin.system.sampler.SystemSampler`,
one dict per ``dt_s`` seconds); :func:`aggregate` rolls them into intervals (what a 10 s tick
of TensorBoard's scalars holds), :func:`triage_interval` classifies one interval and
:func:`triage_run` the whole run. No TensorFlow, no trace: this is what a user sees before
profiling, and its limits are said in the reasons (on a CPU-only host the model's math and
the input preparation are both CPU work: the system view cannot separate them).
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Tuple

#: Accelerator utilisation above which the run is device-bound: the method's flowchart
#: ("consistently high (> 90 %)"; NVML's utilisation.gpu, the figure nvidia-smi shows).
DEVICE_UTIL_HIGH_PCT = 90.0
#: A core counts as saturated at this busy share: htop draws a full bar, and the kernel's
#: 10 ms accounting ticks (USER_HZ = 100) leave a saturated thread at 95-100 % over 1 s.
CORE_SATURATED_PCT = 90.0
#: The tree waits for a CPU half of a core's time or more: other processes hold the cores
#: (``/proc/<pid>/task/<tid>/schedstat``; 100 % = one thread always runnable, never running).
RUNQ_WAIT_CPU_PCT = 50.0
#: Other processes using fewer cores than this cannot be what the tree's threads wait for: they
#: wait for each other (more runnable threads and worker processes than cores). Our choice: a
#: quarter of a core, far above what a shell, the sampler or the kernel's threads use.
OTHERS_IDLE_CORES = 0.25
#: Below this many cores of CPU the tree is "mostly idle" (the flowchart's "both low").
CPU_IDLE_CORES = 0.35
#: External network traffic (received + sent, loopback excluded) that counts as busy, MB/s:
#: a tenth of a 100 Mbit/s link, far above the keep-alive traffic of an idle machine.
NET_BUSY_MBPS = 1.25
#: Disk reads (the tree's, from storage, page-cache hits excluded) or machine I/O wait that
#: confirm an I/O wait.
DISK_BUSY_MBPS = 1.0
IOWAIT_BUSY_PCT = 5.0

KINDS = ("device", "cpu", "network", "io", "unclear")

CPU_ONLY_CAVEAT = ("CPU-only host: the model's math and the input preparation both run on the CPU, so the "
                   "system view cannot tell them apart; profile a window (BottleneckProfiler) to split them")


def _wmean(samples: List[Dict], key: str) -> Optional[float]:
    """Mean of ``key`` over the samples, weighted by their ``dt_s``; None if no sample has it."""
    num = den = 0.0
    for s in samples:
        v = s.get(key)
        if v is not None:
            w = float(s.get("dt_s") or 0.0)
            num += float(v) * w
            den += w
    return num / den if den > 0 else None


def aggregate(samples: List[Dict]) -> Optional[Dict]:
    """One interval's summary of consecutive sampler samples.

    Returns None for no samples, else a dict: ``t_unix_ns`` (end), ``dt_s`` (covered
    seconds), ``samples`` (how many), ``cpu_pct`` (machine, mean over cores),
    ``busiest_core_pct`` (the core with the highest mean, as htop's bars), ``cores_busy``
    (machine busy cores), ``tree_cores`` (the training tree's CPU in cores),
    ``other_cores`` (cores busy outside the tree), ``busiest_thread_pct`` and
    ``busiest_thread_demand_pct`` (running, and running or runnable; or None),
    ``runq_wait_pct`` (or None), ``iowait_pct`` (or None), ``disk_read_MBps``,
    ``tree_disk_read_MBps``, ``net_recv_MBps`` and ``net_sent_MBps`` (without loopback),
    ``gpus``: ``[{index, util_pct, mem_used_gb}]`` (mean utilisation, peak memory).
    """
    if not samples:
        return None
    dt = sum(float(s.get("dt_s") or 0.0) for s in samples) or 1e-9
    ncores = max((len(s.get("cpu_pct") or []) for s in samples), default=0)
    per_core = [0.0] * ncores
    for s in samples:
        for i, v in enumerate(s.get("cpu_pct") or []):
            per_core[i] += float(v) * float(s.get("dt_s") or 0.0) / dt
    cores_busy = sum(per_core) / 100.0
    tree_cores = (_wmean(samples, "tree_cpu_pct") or 0.0) / 100.0
    gpus: Dict[int, Dict] = {}
    for s in samples:
        for g in s.get("gpus") or []:
            cur = gpus.setdefault(int(g["index"]), {"index": int(g["index"]), "util": 0.0, "w": 0.0, "mem": 0})
            w = float(s.get("dt_s") or 0.0)
            cur["util"] += float(g.get("util_pct") or 0.0) * w
            cur["w"] += w
            cur["mem"] = max(cur["mem"], int(g.get("mem_used_bytes") or 0))

    def mbps(key: str) -> float:
        return round((_wmean(samples, key) or 0.0) / 1e6, 3)

    def opt(key: str) -> Optional[float]:
        v = _wmean(samples, key)
        return None if v is None else round(v, 1)

    return {
        "t_unix_ns": int(samples[-1].get("t_unix_ns") or 0),
        "dt_s": round(dt, 3),
        "samples": len(samples),
        "cpu_pct": round(sum(per_core) / ncores, 1) if ncores else 0.0,
        "busiest_core_pct": round(max(per_core), 1) if per_core else 0.0,
        "cores_busy": round(cores_busy, 2),
        "tree_cores": round(tree_cores, 2),
        "other_cores": round(max(cores_busy - tree_cores, 0.0), 2),
        "busiest_thread_pct": opt("busiest_thread_pct"),
        "busiest_thread_demand_pct": opt("busiest_thread_demand_pct"),
        "runq_wait_pct": opt("tree_runq_wait_pct"),
        "iowait_pct": opt("iowait_pct"),
        "disk_read_MBps": mbps("disk_read_Bps"),
        "tree_disk_read_MBps": mbps("tree_disk_read_Bps"),
        "net_recv_MBps": mbps("net_recv_external_Bps"),
        "net_sent_MBps": mbps("net_sent_external_Bps"),
        "gpus": [{"index": g["index"], "util_pct": round(g["util"] / g["w"], 1) if g["w"] else 0.0,
                  "mem_used_gb": round(g["mem"] / 2**30, 2)} for g in sorted(gpus.values(), key=lambda g: g["index"])],
    }


def busiest_gpu_util_pct(iv: Mapping) -> Optional[float]:
    """The highest utilisation (%) among an interval's accelerators (its ``gpus``, as
    :func:`aggregate` writes them; a missing figure counts as 0), None without accelerators:
    the figure the flowchart, the tab's trend view and the callback's scalar read."""
    return max((float(g.get("util_pct") or 0.0) for g in iv.get("gpus") or []), default=None)


def triage_interval(iv: Dict, cpu_count: int) -> Dict:
    """The flowchart applied to one :func:`aggregate` interval.

    Returns ``{"bottleneck": one of KINDS, "rule": str, "reason": str}`` plus ``"caveat"``
    where the answer has a known limit (the CPU-only host); ``rule`` names the branch of
    the flowchart (``device_busy``, ``one_thread``, ``contention``, ``all_cores``,
    ``tree_cores``, ``network``, ``waiting``, ``unclear``). ``cpu_count``: the cores the
    machine has.
    """
    util = busiest_gpu_util_pct(iv)
    tree = iv["tree_cores"]
    net = iv["net_recv_MBps"] + iv["net_sent_MBps"]
    if util is not None and util > DEVICE_UTIL_HIGH_PCT:
        return {"bottleneck": "device", "rule": "device_busy",
                "reason": f"accelerator utilisation {util:.0f} % (> {DEVICE_UTIL_HIGH_PCT:.0f} %)"}
    acc = f"accelerator at {util:.0f} %, " if util is not None else ""
    cpu = _cpu_reason(iv, cpu_count)
    if cpu:
        out = {"bottleneck": "cpu", "rule": cpu[0], "reason": acc + cpu[1]}
        if util is None:
            out["caveat"] = CPU_ONLY_CAVEAT
        return out
    if net >= NET_BUSY_MBPS:
        return {"bottleneck": "network", "rule": "network",
                "reason": f"{acc}network busy ({iv['net_recv_MBps']:.1f} MB/s in, {iv['net_sent_MBps']:.1f} MB/s out, "
                          f"loopback excluded) while the process uses {tree:.2f} cores"}
    if tree < CPU_IDLE_CORES:
        disk, iowait = iv["tree_disk_read_MBps"], iv.get("iowait_pct") or 0.0
        seen = (f"confirmed by disk activity ({disk:.1f} MB/s read by the process, I/O wait {iowait:.0f} %)"
                if disk >= DISK_BUSY_MBPS or iowait >= IOWAIT_BUSY_PCT else
                f"no disk reads seen ({disk:.2f} MB/s, I/O wait {iowait:.0f} %): the waits are elsewhere "
                "(remote or cached storage latency, a lock, a sleep)")
        idle = "and the accelerator idles" if util is not None else "(no accelerator seen)"
        return {"bottleneck": "io", "rule": "waiting",
                "reason": f"{acc}the process uses {tree:.2f} cores {idle}: it waits; {seen}"}
    thread = iv.get("busiest_thread_demand_pct")
    return {"bottleneck": "unclear", "rule": "unclear",
            "reason": f"{acc}the process uses {tree:.2f} of {cpu_count} cores, busiest thread {_pct(thread)}, "
                      f"network {net:.1f} MB/s: no single resource is saturated; profile a window"}


def _pct(v: Optional[float]) -> str:
    return "unknown" if v is None else f"{v:.0f} %"


def _cpu_reason(iv: Dict, cpu_count: int) -> Optional[Tuple[str, str]]:
    """(rule, why) the tree is CPU-bound, or None. A thread that wants a core all the time
    but mostly waits for one is contention (other processes hold the cores), not a
    single-threaded limit: parallelising it would not help."""
    tree, thread, running = iv["tree_cores"], iv.get("busiest_thread_demand_pct"), iv.get("busiest_thread_pct")
    runq = iv.get("runq_wait_pct")
    if thread is not None and thread >= CORE_SATURATED_PCT:
        if running is not None and running < thread / 2:
            rule, who = _who_holds_the_cores(iv)
            return (rule, f"the busiest thread wants a core {thread:.0f} % of the time but runs only "
                          f"{running:.0f} %: {who}")
        return ("one_thread", f"one thread of the process runs or waits for a core {thread:.0f} % of the time (a "
                              f"single-threaded limit, e.g. Python), the process tree at {tree:.2f} cores")
    if cpu_count and tree >= CORE_SATURATED_PCT / 100.0 * cpu_count:
        return ("all_cores", f"the process tree fills the machine: {tree:.2f} of {cpu_count} cores")
    if cpu_count and iv.get("cores_busy", 0.0) >= CORE_SATURATED_PCT / 100.0 * cpu_count and tree >= cpu_count / 2:
        # Every bar full in htop and the tree holds most of them: the tree is short of cores even
        # though a watcher, a shell or the kernel take the last tenth.
        return ("all_cores", f"the machine's cores are full ({iv['cores_busy']:.2f} of {cpu_count} busy) and the "
                             f"process tree holds {tree:.2f} of them")
    if runq is not None and runq >= RUNQ_WAIT_CPU_PCT:
        rule, who = _who_holds_the_cores(iv)
        return (rule, f"the process waits for a CPU ({runq:.0f} % of a core runnable but not running): {who}")
    if thread is None and tree >= CORE_SATURATED_PCT / 100.0:
        return ("tree_cores", f"the process tree uses {tree:.2f} cores (per-thread figures not sampled)")
    return None


def _who_holds_the_cores(iv: Dict) -> Tuple[str, str]:
    """(rule, words) for what the tree's threads wait for: other processes (``contention``),
    or, where those used under :data:`OTHERS_IDLE_CORES`, the tree's own threads and worker
    processes, more than the cores (``own_threads``); other processes when their cores are
    unknown."""
    others = iv.get("other_cores")
    if isinstance(others, (int, float)) and others < OTHERS_IDLE_CORES:
        return ("own_threads", f"the process tree's own threads and worker processes outnumber the cores (other "
                               f"processes used {others:.2f} cores)")
    known = f" ({others:.2f} cores busy outside the process)" if isinstance(others, (int, float)) else ""
    return ("contention", f"other processes hold the cores{known}")


def triage_run(intervals: Iterable[Dict], cpu_count: int) -> Dict:
    """The run's triage: each interval's (added as ``triage`` to each), then the kind that
    holds for the most time.

    Returns ``{"bottleneck", "reason", "shares": {kind: share of the time}, "seconds",
    "intervals"}`` (+ ``caveat``); ``unclear`` with the reason when nothing was sampled. The
    reason is that of the latest interval of the kind's most frequent rule (by time).
    """
    ivs = [iv for iv in intervals if iv]
    if not ivs:
        return {"bottleneck": "unclear", "reason": "no system samples", "shares": {}, "seconds": 0.0, "intervals": 0}
    time_by: Dict[str, float] = {}
    for iv in ivs:
        iv["triage"] = triage_interval(iv, cpu_count)
        k = iv["triage"]["bottleneck"]
        time_by[k] = time_by.get(k, 0.0) + iv["dt_s"]
    total = sum(time_by.values()) or 1e-9
    kind = max(time_by, key=lambda k: (time_by[k], -KINDS.index(k)))
    of_kind = [iv for iv in ivs if iv["triage"]["bottleneck"] == kind]
    rule_time: Dict[str, float] = {}
    for iv in of_kind:
        rule_time[iv["triage"]["rule"]] = rule_time.get(iv["triage"]["rule"], 0.0) + iv["dt_s"]
    rule = max(rule_time, key=lambda r: rule_time[r])
    longest = [iv for iv in of_kind if iv["triage"]["rule"] == rule][-1]
    out = {"bottleneck": kind,
           "reason": f"{100 * time_by[kind] / total:.0f} % of {total:.0f} s: {longest['triage']['reason']}",
           "shares": {k: round(v / total, 3) for k, v in sorted(time_by.items())},
           "seconds": round(total, 1), "intervals": len(ivs)}
    if "caveat" in longest["triage"]:
        out["caveat"] = longest["triage"]["caveat"]
    return out
