"""The system sampler BottleneckProfiler runs during a window (psutil, NVML): what the
machine, the training process tree and the GPUs did, written as the sidecar described
in :mod:`tfbneck_plugin.records`. No TensorFlow here.

Machine-wide counters alone mislead on a shared machine: another
process' traffic, loopback included, looks like remote reads, and the training's own
worker processes (Keras ``PyDataset(workers=N, use_multiprocessing=True)``,
``multiprocessing`` pools) look like someone else's load. So each sample also holds the
figures of the training process *tree* (the process and its descendants): CPU, bytes
read from storage, TCP connections to peers outside the machine; and the machine's
receive counters without loopback interfaces. In the training process itself (not a
process ``tfbneck watch`` follows) it also counts the worker threads of Python thread
pools: a ``PyDataset``'s threads are not processes.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import threading
import time
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from ..records import FORMAT, VERSION, write_sidecar

_NVML_MISSING = False
_LOOPBACK_NICS: Optional[frozenset] = None
#: Child processes of the profiler itself (the background analysis of an earlier window):
#: not the training's work, so never counted in its tree. Added and removed by
#: :mod:`tfbneck_plugin.capture.background`.
NOT_TRAINING_PIDS: set = set()
#: Seconds between two scans for the tree's descendants and TCP connections (also done at
#: the window's first and last readings). A scan reads every ``/proc/<pid>/stat`` of the
#: machine (psutil's ``children``): ~1.3 ms for 90 processes measured here, too much for
#: every 100 ms sample; CPU and I/O of the known processes are read at every sample.
TREE_REFRESH_S = 0.5


class _Reading(NamedTuple):
    """Counters read at one instant; a sample is the difference of two readings."""
    mono: float                        # time.monotonic(), s
    wall_ns: int                       # time.time_ns()
    cores: list                        # psutil.cpu_times(percpu=True)
    disk: object                       # psutil.disk_io_counters() (None without disks)
    net: object                        # psutil.net_io_counters()
    net_ext: Tuple[int, int]           # (bytes_recv, bytes_sent) over non-loopback NICs
    proc_cpu_s: float                  # this process: user + system, s
    tree: Dict[int, Tuple[float, int]]  # pid -> (user + system s, read_bytes)
    children: int                      # descendants alive
    conns: Tuple[int, int]             # the tree's TCP connections: (remote peers, loopback peers)
    runq_wait_s: Optional[float]       # the tree's threads: time runnable but waiting for a CPU, s
    threads: Dict[int, Tuple[float, float]]  # the tree's threads: tid -> (on-CPU s, run-queue wait s)
    tasks: Optional["_TaskClock"] = None  # on-CPU time per thread, at the window's first and last readings


class _TaskClock(NamedTuple):
    """On-CPU seconds of the tree's threads at one reading, from
    ``/proc/<pid>/task/<tid>/schedstat`` (field 1, ns): exact where the tick-based
    ``cpu_times`` (10 ms, USER_HZ = 100) cannot resolve a short window."""
    own: Dict[int, float]       # this process's threads: tid -> on-CPU s
    tree: Dict[int, float]      # every thread of the tree (this process's included)
    pool: frozenset             # tids of Python thread-pool workers (a PyDataset's threads)


class SystemSampler:
    """Samples the system every ``interval_s`` seconds on a daemon thread (psutil, NVML).

    ``start()`` takes the first reading (on the caller's thread) and begins; ``stop()``
    takes the last reading and returns the sidecar dict; ``write(folder)`` stores it. Any
    exception inside the thread stops sampling and is kept in ``error``: the sampler never
    raises into the training loop.

    Samples are contiguous: each covers the time since the previous reading (``dt_s``),
    the first starts at ``start()`` and the last ends at ``stop()``, so a window shorter
    than ``interval_s`` still gets one sample covering all of it. A remainder shorter than
    ``min(interval_s / 5, 10 ms)`` at ``stop()`` is merged into the last sample rather than
    made a sample of its own (the kernel counts CPU time in 10 ms ticks, USER_HZ = 100,
    so shorter spans read 0 % or 100 %). CPU figures of short windows are coarse for the
    same reason.

    Per-core CPU % comes from this sampler's own ``psutil.cpu_times(percpu=True)`` deltas
    (busy = all time but idle and iowait, as ``psutil.cpu_percent`` counts it); process CPU
    from ``Process.cpu_times()`` deltas (100 = one core, as ``Process.cpu_percent``). The
    tree (this process and its descendants, rescanned every ``TREE_REFRESH_S`` s) gives
    ``tree_cpu_pct``, ``tree_disk_read_Bps`` (``/proc/<pid>/io`` ``read_bytes``: bytes
    fetched from storage, page-cache hits excluded), ``tree_children``, its TCP
    connections to loopback and to other peers (the profiler's own analysis processes,
    ``NOT_TRAINING_PIDS``, excluded), and ``tree_runq_wait_pct``: the time its
    threads were runnable but waiting for a CPU (``/proc/<pid>/task/<tid>/schedstat``; 100 =
    one thread waiting all the time), the direct sign of CPU contention. The connections
    and the run-queue wait are read at the scans only: a sample between two scans shows
    0 run-queue wait and the next one the whole amount; their sum over the window is
    exact. A descendant born during the window counts from its start; one that exits
    between two readings counts up to its last reading.
    NVIDIA GPUs are read through NVML (package ``nvidia-ml-py``) when installed and a driver
    is present; otherwise ``gpus`` is an empty list.

    With ``pid`` the tree is that process and its descendants (``tfbneck watch``); its
    non-loopback network counters are read from ``/proc/<pid>/net/dev``, which shows the
    interfaces of *its* network namespace (a worker inside a container or ``ip netns``).
    With ``thread_detail`` each sample also holds ``busiest_thread_pct``: the tree's
    busiest thread, in any of its processes (100 = one core), the sign of a single-threaded limit (Python's
    GIL) that a process total hides, and ``busiest_thread_demand_pct``: the largest share
    of time a thread was running or runnable (waiting for a core): a thread that would run
    all the time reads 100 there even when other processes hold the cores. Both come from
    ``/proc/<pid>/task/*/schedstat``, read at every sample.

    The window's first and last readings also read every thread's on-CPU time from
    ``schedstat`` (ns): the sidecar's ``window_cpu`` gives the process's, the tree's and the
    Python pool workers' CPU over the whole window exactly, where a window of a few 10 ms
    ticks reads 0 % or 100 % in ``cpu_times``. A thread that ends inside the window takes
    its time with it (it is left out); one born inside counts from zero.

    Args:
      interval_s: seconds between samples (the callback checks 0.01-10).
      pid: the process whose tree is sampled (default: this process).
      thread_detail: also sample per-thread CPU of the tree's processes.
    """

    def __init__(self, interval_s: float = 0.1, pid: Optional[int] = None, thread_detail: bool = False):
        self.interval_s = float(interval_s)
        self.pid = pid
        self.thread_detail = thread_detail
        self.samples: List[Dict] = []
        self._samples_lock = threading.Lock()
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._start_ns = self._end_ns = 0
        self._nvml = None
        self._gpus: List = []
        self._proc: Any = None           # psutil.Process of this process, once sampling started
        self._tree_procs: Dict = {}      # pid -> psutil.Process, the tree at the last scan
        self._baseline: Dict[int, Optional[Tuple[float, int]]] = {}  # pid -> (0, 0) when born in the window
        self._children = 0
        self._conns = (0, 0)
        self._runq_wait_s: Optional[float] = None
        self._scanned = -1e9
        self._prev: Optional[_Reading] = None   # the last reading
        self._last_base: Optional[_Reading] = None  # the reading the last sample started from
        self._first_tasks: Optional[_TaskClock] = None  # the window's first thread clocks
        self._first_mono = 0.0

    def start(self) -> "SystemSampler":
        """Take the first reading and start the sampling thread; returns ``self``.

        Raises:
          RuntimeError: the thread cannot start (the callback then records the trace
            without system metrics).
        """
        # Imports and the first reading happen here, on the caller's thread: a sampler
        # thread importing modules while the training thread holds the GIL can take
        # hundreds of ms to get going.
        try:
            import psutil
            self._proc = psutil.Process(self.pid)
            self._gpus = self._gpu_handles()
            self._prev = self._read(psutil, first=True)
            self._first_tasks, self._first_mono = self._prev.tasks, self._prev.mono
        except Exception as err:  # noqa: BLE001 - psutil missing or /proc unreadable: no metrics, said why
            self.error = f"{type(err).__name__}: {err}"
        self._start_ns = self._prev.wall_ns if self._prev is not None else time.time_ns()
        self._thread = threading.Thread(target=self._run, name="tfbneck-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Dict:
        """Take the last reading, stop the thread; returns the sidecar dict (:meth:`to_dict`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)
        self._end_ns = self._prev.wall_ns if self._prev is not None and not self.error else time.time_ns()
        return self.to_dict()

    def to_dict(self) -> Dict:
        """The sidecar (format in :mod:`tfbneck_plugin.records`) of what was sampled so far."""
        try:
            import psutil
            cpu_count = psutil.cpu_count() or 0
        except Exception:  # noqa: BLE001 - psutil missing: the error is already in self.error
            cpu_count = os.cpu_count() or 0
        return {"format": FORMAT, "version": VERSION, "host": socket.gethostname(), "pid": os.getpid(),
                "cpu_count": cpu_count, "cpu_affinity": _affinity(), "interval_s": self.interval_s,
                "start_unix_ns": self._start_ns, "end_unix_ns": self._end_ns or time.time_ns(),
                "sampler_error": self.error, "samples": list(self.samples),
                "window_cpu": self._window_cpu()}

    def _window_cpu(self) -> Optional[Dict]:
        """CPU seconds over the whole window from the first and last readings' thread clocks
        (:class:`_TaskClock`), or None before the window closed or where ``schedstat`` is
        missing: ``{"dur_s", "proc_cpu_s", "tree_cpu_s", "pool_cpu_s"}``; ``pool_cpu_s`` is
        None when watching another process (its pools cannot be seen from here)."""
        prev = self._prev
        first, last = self._first_tasks, prev.tasks if prev is not None else None
        if prev is None or first is None or last is None or last is first or not last.tree:
            return None

        def spent(now: Dict[int, float], tids) -> float:
            return sum(max(now[t] - first.tree.get(t, 0.0), 0.0) for t in tids if t in now)
        own_pid = self.pid is None or self.pid == os.getpid()
        return {"dur_s": round(max(prev.mono - self._first_mono, 0.0), 6),
                "proc_cpu_s": round(spent(last.own, last.own), 6),
                "tree_cpu_s": round(spent(last.tree, last.tree), 6),
                "pool_cpu_s": round(spent(last.tree, last.pool), 6) if own_pid else None}

    def drain(self) -> List[Dict]:
        """The samples taken since the last ``drain()``, removed from the sampler (a
        long-running sampler keeps its memory bounded this way)."""
        with self._samples_lock:
            out, self.samples = self.samples, []
        return out

    def write(self, folder: str, extra: Optional[Dict] = None) -> str:
        """Write the sidecar (plus the optional top-level keys ``extra``) into ``folder``.

        Raises:
          OSError: the folder cannot be written.
        """
        data = self.to_dict()
        if extra:
            data.update(extra)
        return write_sidecar(folder, data)

    # -- the thread ---------------------------------------------------------------------
    def _run(self):
        if self.error is not None:
            return
        try:
            import psutil
            while not self._stop.wait(self.interval_s):
                self._take(psutil, self._read(psutil))
            self._finish(psutil)
        except Exception as err:  # noqa: BLE001 - never let the sampler reach the training loop
            self.error = f"{type(err).__name__}: {err}"
        finally:
            if self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # noqa: BLE001, S110 - the driver went away: nothing to release
                    pass

    def _take(self, psutil, now: _Reading) -> None:
        if self._prev is None:  # cannot happen: sampling starts with a first reading
            self._prev = now
            return
        sample = self._diff(self._prev, now, psutil)
        with self._samples_lock:
            self.samples.append(sample)
        self._last_base, self._prev = self._prev, now

    def _finish(self, psutil) -> None:
        """The reading at close: a sample up to now, or the last one stretched to now."""
        now = self._read(psutil, first=True)
        if self.samples and self._prev is not None and now.mono - self._prev.mono < min(self.interval_s / 5, 0.01):
            self.samples.pop()
            self._prev = self._last_base
        self._take(psutil, now)

    # -- readings -----------------------------------------------------------------------
    def _read(self, psutil, first: bool = False) -> _Reading:
        if first or time.monotonic() - self._scanned >= TREE_REFRESH_S:
            self._scan_tree(psutil, time.monotonic(), first_reading=first and self._prev is None)
        tree = {}
        for pid, p in list(self._tree_procs.items()):
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    io = p.io_counters() if hasattr(p, "io_counters") else None
                tree[pid] = (t.user + t.system, io.read_bytes if io is not None else 0)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._tree_procs.pop(pid, None)  # exited: counted up to its last reading
        own = tree.get(self._proc.pid)
        # Both clocks together, next to the machine-wide counters (a preempted thread could
        # otherwise put milliseconds between them).
        mono, wall = time.monotonic(), time.time_ns()
        foreign = self.pid is not None and self.pid != os.getpid()
        net_ext = _namespace_net(self._proc.pid, psutil) if foreign else _external_net(psutil)
        threads = _thread_times(self._tree_procs) if self.thread_detail else {}
        tasks = _task_clock(self._proc.pid, self._tree_procs) if first else None
        return _Reading(mono, wall, psutil.cpu_times(percpu=True), psutil.disk_io_counters(),
                        psutil.net_io_counters(), net_ext, own[0] if own else 0.0, tree,
                        self._children, self._conns, self._runq_wait_s, threads, tasks)

    def _scan_tree(self, psutil, mono: float, first_reading: bool) -> None:
        """Find the tree's processes and connections; a process first seen after the
        window's first reading was born in the window and counts from zero."""
        self._scanned = mono
        try:
            kids = self._proc.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            kids = []
        skip = set(NOT_TRAINING_PIDS)
        if skip:  # the profiler's own children, and theirs
            for k in kids:
                try:
                    if k.pid not in skip and any(p.pid in skip for p in k.parents()):
                        skip.add(k.pid)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    skip.add(k.pid)
            kids = [k for k in kids if k.pid not in skip]
        procs = {self._proc.pid: self._proc}
        procs.update((k.pid, k) for k in kids)
        for pid in procs:
            if pid not in self._baseline:
                self._baseline[pid] = None if first_reading else (0.0, 0)
        self._tree_procs, self._children = procs, len(kids)
        self._conns = _count_connections(psutil, procs.values())
        self._runq_wait_s = _runq_wait_s(procs)

    def _diff(self, a: _Reading, b: _Reading, psutil) -> Dict:
        dt = max(b.mono - a.mono, 1e-6)
        cpu_pct, iowait = _core_pcts(a.cores, b.cores)
        tree_cpu = tree_read = 0.0
        for pid, (cpu, read) in b.tree.items():
            base = a.tree.get(pid) or self._baseline.get(pid) or (cpu, read)
            tree_cpu += max(cpu - base[0], 0.0)
            tree_read += max(read - base[1], 0)
        proc = self._proc
        extra = {}
        if self.thread_detail:
            run = demand = 0.0
            for tid, (on_cpu, wait) in b.threads.items():
                on0, wait0 = a.threads.get(tid, (on_cpu, wait))
                run = max(run, on_cpu - on0)
                demand = max(demand, on_cpu - on0 + wait - wait0)
            extra["busiest_thread_pct"] = round(min(100.0 * run / dt, 100.0), 1)
            extra["busiest_thread_demand_pct"] = round(min(100.0 * demand / dt, 100.0), 1)
        return extra | {
            "t_unix_ns": b.wall_ns,
            "dt_s": round(dt, 4),
            "cpu_pct": cpu_pct,
            "proc_cpu_pct": round(100.0 * max(b.proc_cpu_s - a.proc_cpu_s, 0.0) / dt, 1),
            "iowait_pct": iowait,
            "mem_used_pct": psutil.virtual_memory().percent,
            "proc_rss_bytes": proc.memory_info().rss,
            "disk_read_Bps": _rate(a.disk, b.disk, "read_bytes", dt),
            "disk_write_Bps": _rate(a.disk, b.disk, "write_bytes", dt),
            "net_recv_Bps": _rate(a.net, b.net, "bytes_recv", dt),
            "net_sent_Bps": _rate(a.net, b.net, "bytes_sent", dt),
            "net_recv_external_Bps": round(max(b.net_ext[0] - a.net_ext[0], 0) / dt, 1),
            "net_sent_external_Bps": round(max(b.net_ext[1] - a.net_ext[1], 0) / dt, 1),
            "tree_cpu_pct": round(100.0 * tree_cpu / dt, 1),
            "tree_children": b.children,
            "py_pool_threads": _pool_threads() if self.pid is None or self.pid == os.getpid() else None,
            "tree_disk_read_Bps": round(tree_read / dt, 1),
            "tree_remote_conns": b.conns[0],
            "tree_loopback_conns": b.conns[1],
            "tree_runq_wait_pct": (round(100.0 * max(b.runq_wait_s - a.runq_wait_s, 0.0) / dt, 1)
                                   if a.runq_wait_s is not None and b.runq_wait_s is not None else None),
            "gpus": [self._gpu_sample(i, h) for i, h in enumerate(self._gpus)],
        }

    # -- GPUs ---------------------------------------------------------------------------
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
        except Exception:  # noqa: BLE001 - no NVIDIA driver or package: no GPU columns
            return []

    def _gpu_sample(self, index, handle):
        util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return {"index": index, "util_pct": float(util.gpu), "mem_used_bytes": int(mem.used)}


# ----------------------------------------------------------------------------------------
def _core_pcts(cores0, cores1) -> Tuple[List[float], Optional[float]]:
    """Busy % per core and the machine's iowait % between two ``cpu_times(percpu=True)``."""
    cpu_pct, iowait_all, total_all = [], 0.0, 0.0
    for a, b in zip(cores0, cores1):
        total = cpu_total(b) - cpu_total(a)
        idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
        busy = max(total - idle, 0.0)
        cpu_pct.append(round(min(100.0, 100.0 * busy / total), 1) if total > 0 else 0.0)
        iowait_all += getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0)
        total_all += max(total, 0.0)
    iowait = None
    if cores1 and hasattr(cores1[0], "iowait"):
        iowait = round(100.0 * iowait_all / total_all, 2) if total_all > 0 else 0.0
    return cpu_pct, iowait


def cpu_total(t) -> float:
    """All the CPU seconds of a ``psutil.cpu_times()`` tuple."""
    # guest and guest_nice are already counted in user and nice (Linux): do not add them twice.
    total = sum(t)
    return total - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _rate(a, b, field, dt):
    if a is None or b is None:
        return 0.0
    return round(max(getattr(b, field) - getattr(a, field), 0) / dt, 1)


def _loopback_nics(psutil) -> frozenset:
    """Names of the loopback interfaces (psutil's interface flags; ``lo`` without them)."""
    global _LOOPBACK_NICS
    if _LOOPBACK_NICS is None:
        names = set()
        try:
            for name, st in psutil.net_if_stats().items():
                if "loopback" in (getattr(st, "flags", "") or "").split(","):
                    names.add(name)
        except Exception:  # noqa: BLE001 - psutil without flags or no /sys/class/net: by name below
            pass
        _LOOPBACK_NICS = frozenset(names or {"lo"})
    return _LOOPBACK_NICS


def _external_net(psutil) -> Tuple[int, int]:
    """Bytes received and sent by all interfaces but loopback, since boot."""
    loop = _loopback_nics(psutil)
    recv = sent = 0
    for name, c in psutil.net_io_counters(pernic=True).items():
        if name not in loop:
            recv += c.bytes_recv
            sent += c.bytes_sent
    return recv, sent


def _namespace_net(pid: int, psutil) -> Tuple[int, int]:
    """Bytes received and sent by the non-loopback interfaces of ``pid``'s network
    namespace, since they were created (``/proc/<pid>/net/dev``: after the interface name,
    field 1 is received bytes and field 9 sent bytes, see proc(5)). (0, 0) if unreadable."""
    loop = _loopback_nics(psutil) | {"lo"}
    recv = sent = 0
    try:
        with open(f"/proc/{pid}/net/dev", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()[2:]  # two header lines
    except OSError:
        return 0, 0
    for line in lines:
        name, _, counters = line.partition(":")
        fields = counters.split()
        if name.strip() in loop or len(fields) < 9:
            continue
        recv += int(fields[0])
        sent += int(fields[8])
    return recv, sent


def _schedstat(procs) -> Iterator[Tuple[int, int, float, float]]:
    """(pid, tid, seconds on a CPU, seconds runnable but waiting for one) of every thread of the
    processes ``procs``: fields 1 and 2 of ``/proc/<pid>/task/<tid>/schedstat`` (ns; Linux with
    CONFIG_SCHED_INFO, see the kernel's Documentation/scheduler/sched-stats.rst). Threads and
    processes that end while they are read are left out."""
    for pid in list(procs):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # the process ended
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    fields = f.read().split()
                yield pid, int(tid), int(fields[0]) / 1e9, int(fields[1]) / 1e9
            except (OSError, ValueError, IndexError):
                continue  # the thread ended meanwhile


def _thread_times(procs) -> Dict[int, Tuple[float, float]]:
    """The threads of the processes ``procs`` (pid -> process): thread id -> (seconds on a
    CPU, seconds runnable but waiting for one) (:func:`_schedstat`). Thread ids are unique
    across the machine."""
    return {tid: (on_cpu, wait) for _pid, tid, on_cpu, wait in _schedstat(procs)}


def _task_clock(own_pid: int, procs) -> Optional[_TaskClock]:
    """Every thread's on-CPU seconds in the processes ``procs`` (:func:`_schedstat`), split into
    ``own_pid``'s and the tree's, with the tids of Python pool workers when ``own_pid`` is this
    process (:func:`_pool_tids`); None where no file could be read."""
    own: Dict[int, float] = {}
    tree: Dict[int, float] = {}
    for pid, tid, on_cpu, _wait in _schedstat(procs):
        tree[tid] = on_cpu
        if pid == own_pid:
            own[tid] = on_cpu
    if not tree:
        return None
    return _TaskClock(own, tree, _pool_tids() if own_pid == os.getpid() else frozenset())


def _runq_wait_s(procs) -> Optional[float]:
    """Seconds the processes' threads spent runnable but waiting for a CPU, since they
    started (:func:`_schedstat`), or None where the files do not exist."""
    waits = [wait for _pid, _tid, _on_cpu, wait in _schedstat(procs)]
    return sum(waits) if waits else None


def _is_loopback(ip: str) -> bool:
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def _pool_threads() -> int:
    """Worker threads of ``multiprocessing.dummy`` pools alive in this process: Keras 3's
    ``PyDataset(workers=N)`` without ``use_multiprocessing`` runs its N workers in such a pool
    (keras/src/trainers/data_adapters/py_dataset_adapter.py: ``multiprocessing.dummy.Pool``),
    whose workers are ``DummyProcess`` threads (its handler threads are plain threads). A
    process's threads are not processes: the tree's ``children`` cannot count them."""
    import sys
    dummy = sys.modules.get("multiprocessing.dummy")
    if dummy is None:  # never imported: no such pool
        return 0
    return sum(isinstance(t, dummy.DummyProcess) for t in threading.enumerate())


#: Targets of the threads a ``multiprocessing`` pool runs in the process that owns it (both
#: ``multiprocessing.Pool`` and ``multiprocessing.dummy.Pool``: CPython's
#: Lib/multiprocessing/pool.py starts ``Pool._handle_workers``, ``Pool._handle_tasks`` and
#: ``Pool._handle_results`` as threads). The task handler pickles each task for the workers
#: and the result handler unpickles each result (a whole batch, where a PyDataset's workers
#: are processes): input work done on the training process's cores and under its GIL.
POOL_HANDLERS = frozenset({"Pool._handle_workers", "Pool._handle_tasks", "Pool._handle_results"})


def _is_pool_handler(thread: threading.Thread) -> bool:
    """The thread runs one of a pool's :data:`POOL_HANDLERS` (its ``_target``, which
    ``Thread.run`` keeps while the target runs)."""
    target = getattr(thread, "_target", None)
    return getattr(target, "__qualname__", None) in POOL_HANDLERS


def _pool_tids() -> frozenset:
    """Kernel thread ids of the input pools' threads alive in this process: the
    ``multiprocessing.dummy`` pool workers (:func:`_pool_threads`) and every pool's handler
    threads (:data:`POOL_HANDLERS`: a ``PyDataset``'s worker processes send their batches
    through them); ``Thread.native_id``, Python 3.8+."""
    import sys
    if "multiprocessing.pool" not in sys.modules:  # never imported: no pool
        return frozenset()
    dummy = sys.modules.get("multiprocessing.dummy")
    return frozenset(t.native_id for t in threading.enumerate()
                     if t.native_id is not None and ((dummy is not None and isinstance(t, dummy.DummyProcess))
                                                    or _is_pool_handler(t)))


def _count_connections(psutil, procs) -> Tuple[int, int]:
    """The processes' TCP connections with a peer: (to other machines, to loopback)."""
    remote = loop = 0
    for p in procs:
        try:
            conns = (p.net_connections if hasattr(p, "net_connections") else p.connections)(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        for c in conns:
            if c.raddr:
                if _is_loopback(c.raddr.ip):
                    loop += 1
                else:
                    remote += 1
    return remote, loop


def _affinity() -> Optional[int]:
    """Cores this process may run on (``os.sched_getaffinity``; taskset / a container's cpuset
    narrow it below ``cpu_count``), or None where the platform cannot say."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
