"""The system sampler (``tfbneck_plugin.system.sampler``) and the summary the verdict reads
(``tfbneck_plugin.analysis.sysmetrics.summarize``), on real processes, sockets and files.

Each figure is checked against a measurement taken independently of psutil: CPU time that
child processes report themselves (``time.process_time``), ``/proc/<pid>/stat`` of a process
outside the tree, ``/proc/self/io`` for storage reads, the bytes the test itself sent over
loopback. No TensorFlow here.
"""
import glob
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from tfbneck_plugin.analysis.sysmetrics import TREE_KEYS, summarize
from tfbneck_plugin.system.sampler import NOT_TRAINING_PIDS, SystemSampler
from support.paths import ROOT, TESTS

HERE = TESTS
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
linux = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")


def tree_cpu_s(side):
    """CPU seconds of the process tree over the window, from the samples."""
    return sum(s["tree_cpu_pct"] * s["dt_s"] for s in side["samples"]) / 100.0


def proc_cpu_s(side):
    return sum(s["proc_cpu_pct"] * s["dt_s"] for s in side["samples"]) / 100.0


def _burn(seconds, go, done, report):
    """Child: wait for ``go``, burn ``seconds`` of CPU, report its own CPU time since it was
    born (fork: starts at 0), then idle until ``done``."""
    go.wait()
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        pass
    report.put(time.process_time())
    done.wait()


# ----------------------------------------------------------------------------------------
# Samples cover the window, however short
# ----------------------------------------------------------------------------------------

def test_a_window_shorter_than_the_interval_gets_one_sample_covering_it():
    s = SystemSampler(interval_s=10).start()
    time.sleep(0.005)
    side = s.stop()
    assert side["sampler_error"] is None
    (sample,) = side["samples"]
    assert sample["t_unix_ns"] == side["end_unix_ns"]
    covered_ns = sample["dt_s"] * 1e9
    assert abs(covered_ns - (side["end_unix_ns"] - side["start_unix_ns"])) < 2e6  # wall vs monotonic: < 2 ms
    assert 0.004 <= sample["dt_s"] < 5


def test_samples_are_contiguous_and_span_start_to_stop():
    s = SystemSampler(interval_s=0.05).start()
    time.sleep(0.4)
    side = s.stop()
    samples = side["samples"]
    assert len(samples) >= 3
    total_ns = sum(x["dt_s"] for x in samples) * 1e9
    assert abs(total_ns - (side["end_unix_ns"] - side["start_unix_ns"])) < 5e6
    assert samples[-1]["t_unix_ns"] == side["end_unix_ns"]
    # No sliver at the end: a remainder under min(interval / 5, 10 ms) joins the last sample.
    assert min(x["dt_s"] for x in samples) >= 0.01
    gaps = [(b["t_unix_ns"] - a["t_unix_ns"]) / 1e9 - b["dt_s"] for a, b in zip(samples, samples[1:])]
    assert max(abs(g) for g in gaps) < 0.002, gaps


# ----------------------------------------------------------------------------------------
# The process tree
# ----------------------------------------------------------------------------------------

@linux
@pytest.mark.parametrize("born", ["before", "during"])
def test_children_cpu_is_counted_in_the_tree_not_as_others(born):
    ctx = multiprocessing.get_context("fork")
    go, done, report = ctx.Event(), ctx.Event(), ctx.Queue()
    kids = [ctx.Process(target=_burn, args=(0.3, go, done, report)) for _ in range(2)]
    sampler = None
    try:
        if born == "during":
            sampler = SystemSampler(interval_s=0.05).start()
        for k in kids:
            k.start()
        if born == "before":
            time.sleep(0.2)  # both children exist and idle before the window opens
            sampler = SystemSampler(interval_s=0.05).start()
        go.set()
        reported = sum(report.get(timeout=120) for _ in kids)   # the children's own CPU time
        time.sleep(0.6)  # at least one tree scan after they finished burning
        side = sampler.stop()
    finally:
        done.set()
        for k in kids:
            k.join(30)
    assert side["sampler_error"] is None
    assert max(s["tree_children"] for s in side["samples"]) == 2
    children_s = tree_cpu_s(side) - proc_cpu_s(side)
    # Kernel ticks are 10 ms per process and reading: 2 children x 2 readings.
    assert children_s == pytest.approx(reported, abs=0.05 + 0.1 * reported), (children_s, reported)
    summary = summarize(side)
    assert summary["scope"] == "process_tree" and summary["tree_children"] == 2
    assert summary["tree_cpu_cores"] >= summary["proc_cpu_cores"]
    machine_busy = summary["cpu_mean_pct"] * summary["cpu_count"] / 100.0
    assert summary["others_cpu_cores"] == pytest.approx(max(machine_busy - summary["tree_cpu_cores"], 0), abs=0.05)


def _spin_until(deadline):
    while time.monotonic() < deadline:
        pass


@linux
def test_run_queue_wait_shows_threads_waiting_for_a_cpu():
    """More spinning children than cores: at least (children - cores) of them wait for a
    CPU at any time; sleeping children add nothing to the wait of the process tree without
    them (this test's own process, whose threads wait for a core on a busy machine: measured
    before and after the sleepers, the larger taken, as other work on the machine comes and
    goes; a run beside the whole suite read 0.07 before them and 0.45 with them)."""
    ctx = multiprocessing.get_context("fork")
    n = (os.cpu_count() or 1) + 2
    results = {}
    for kind in ("none", "sleep", "none_after", "spin"):
        deadline = time.monotonic() + 1.7 + (1.0 if kind == "sleep" else 0.0)  # time to fall asleep
        target = _spin_until if kind == "spin" else (lambda d: time.sleep(max(d - time.monotonic(), 0)))
        kids = [ctx.Process(target=target, args=(deadline,)) for _ in range(n if kind in ("sleep", "spin") else 0)]
        for k in kids:
            k.start()
        # Sample once the children run: forking them is CPU work that waits in the run queue
        # on a busy machine, sleeping children or not (so wait until the sleepers sleep).
        time.sleep(0.3)
        while kind == "sleep" and time.monotonic() < deadline - 1.2 and not all(
                psutil.Process(k.pid).status() == psutil.STATUS_SLEEPING for k in kids):
            time.sleep(0.02)
        sampler = SystemSampler(interval_s=0.1).start()
        time.sleep(1.0)
        side = sampler.stop()
        for k in kids:
            k.join(30)
        results[kind] = summarize(side)["tree_runq_wait_cores"]
    assert results["spin"] >= 0.8 * (n - (os.cpu_count() or 1)), results
    assert results["sleep"] < max(results["none"], results["none_after"]) + 0.2, results
    print("run-queue wait (cores):", results)


@linux
def test_the_profilers_own_analysis_process_is_not_training_work():
    ctx = multiprocessing.get_context("fork")
    deadline = time.monotonic() + 1.5
    kid = ctx.Process(target=_spin_until, args=(deadline,))
    kid.start()
    NOT_TRAINING_PIDS.add(kid.pid)  # as background.analyze_in_child registers its child
    try:
        side = SystemSampler(interval_s=0.1).start()
        time.sleep(1.0)
        side = side.stop()
    finally:
        NOT_TRAINING_PIDS.discard(kid.pid)
        kid.join(30)
    summary = summarize(side)
    assert summary["tree_children"] == 0 and summary["tree_cpu_cores"] < 0.3, summary


def _proc_stat_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15 of proc(5))


@linux
def test_a_process_outside_the_tree_counts_as_others():
    # sh starts the spinner in the background and exits: the spinner is re-parented away
    # from this process, as another user's job would be.
    out = subprocess.run(["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, timeout=30)
    spinner = int(out.stdout.strip())
    try:
        time.sleep(0.2)
        before = _proc_stat_cpu_s(spinner)
        side = SystemSampler(interval_s=0.1).start()
        time.sleep(1.0)
        side = side.stop()
        spun = _proc_stat_cpu_s(spinner) - before
    finally:
        os.kill(spinner, 9)
    summary = summarize(side)
    assert summary["tree_children"] == 0
    window_s = summary["sampled_s"]
    # The spinner is not in the tree, and is part of what others kept busy.
    assert summary["tree_cpu_cores"] < 0.5
    assert summary["others_cpu_cores"] * window_s >= spun - 0.1, (summary, spun)


# ----------------------------------------------------------------------------------------
# Network and storage
# ----------------------------------------------------------------------------------------

def _stream(host, nbytes, bind=None):
    """Send ``nbytes`` from this process to itself over TCP; returns bytes received."""
    srv = socket.socket(socket.AF_INET if ":" not in host else socket.AF_INET6)
    srv.bind((bind or host, 0))
    srv.listen(1)
    got = [0]

    def sink():
        c, _ = srv.accept()
        with c:
            while True:
                data = c.recv(1 << 16)
                if not data:
                    return
                got[0] += len(data)

    t = threading.Thread(target=sink)
    t.start()
    chunk = b"x" * (1 << 16)
    with socket.create_connection((host, srv.getsockname()[1])) as out:
        for _ in range(nbytes // len(chunk)):
            out.sendall(chunk)
        time.sleep(0.7)  # the connection is open across a tree scan
    t.join(30)
    srv.close()
    return got[0]


def test_loopback_traffic_is_not_counted_as_external_and_its_connections_are_loopback():
    s = SystemSampler(interval_s=0.1).start()
    got = _stream("127.0.0.1", 32 << 20)
    side = s.stop()
    assert got == 32 << 20
    machine = sum(x["net_recv_Bps"] * x["dt_s"] for x in side["samples"])
    external = sum(x["net_recv_external_Bps"] * x["dt_s"] for x in side["samples"])
    # Same interval, same kernel counters: the difference is what loopback received.
    assert machine - external >= 0.95 * got, (machine, external, got)
    assert max(x["tree_loopback_conns"] for x in side["samples"]) >= 2  # client and server side
    assert max(x["tree_remote_conns"] for x in side["samples"]) == 0
    summary = summarize(side)
    assert summary["loopback_connections"] >= 2 and summary["remote_connections"] == 0
    assert summary["net_recv_MBps"] - summary["net_recv_external_MBps"] >= 0.95 * got / 1e6 / summary["sampled_s"]


def _non_loopback_ipv4():
    import psutil
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


def test_connections_to_a_non_loopback_address_count_as_remote():
    ip = _non_loopback_ipv4()
    if ip is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect to")
    s = SystemSampler(interval_s=0.1).start()
    _stream(ip, 1 << 20)
    side = s.stop()
    assert max(x["tree_remote_conns"] for x in side["samples"]) >= 2
    assert summarize(side)["remote_connections"] >= 2


def _io_read_bytes():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("read_bytes:")).split()[1])


@linux
def test_storage_reads_of_the_tree(tmp_path):
    path = tmp_path / "data.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(16 << 20))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache: reads hit storage
        before = _io_read_bytes()
        s = SystemSampler(interval_s=0.1).start()
        while os.read(fd, 1 << 20):
            pass
        side = s.stop()
        read = _io_read_bytes() - before
    finally:
        os.close(fd)
    sampled = sum(x["tree_disk_read_Bps"] * x["dt_s"] for x in side["samples"])
    # The kernel's own count of this process' storage reads is the oracle (0 when the
    # file system serves it from memory, e.g. tmpfs: then the sampler must say 0 too).
    assert sampled == pytest.approx(read, abs=256 << 10), (sampled, read)


# ----------------------------------------------------------------------------------------
# The summary
# ----------------------------------------------------------------------------------------

def _sample(dt, cpu, tree, **extra):
    return dict({"t_unix_ns": 0, "dt_s": dt, "cpu_pct": cpu, "proc_cpu_pct": tree, "tree_cpu_pct": tree,
                 "tree_children": 0, "tree_disk_read_Bps": 0.0, "net_recv_Bps": 0.0,
                 "net_recv_external_Bps": 0.0, "tree_remote_conns": 0, "tree_loopback_conns": 0,
                 "tree_runq_wait_pct": 0.0, "gpus": []}, **extra)


def test_summary_weights_samples_by_the_time_they_cover():
    side = {"cpu_count": 2, "samples": [_sample(0.09, [100.0, 100.0], 200.0, tree_children=3),
                                        _sample(0.01, [0.0, 0.0], 0.0, tree_remote_conns=1,
                                                tree_runq_wait_pct=100.0)]}
    s = summarize(side)
    assert s["cpu_mean_pct"] == 90.0 and s["tree_cpu_cores"] == 1.8 and s["proc_cpu_cores"] == 1.8
    assert s["others_cpu_cores"] == 0.0 and s["sampled_s"] == 0.1
    assert s["tree_children"] == 3 and s["remote_connections"] == 1 and s["tree_runq_wait_cores"] == 0.1
    others = summarize({"cpu_count": 2, "samples": [_sample(0.1, [100.0, 50.0], 40.0)]})
    assert others["others_cpu_cores"] == 1.1 and others["scope"] == "process_tree"


def test_summary_of_a_sidecar_without_tree_figures_says_machine_scope():
    # A sidecar as the sampler wrote it before the tree figures existed: a current one with
    # the per-sample keys that were added since taken out.
    paths = sorted(glob.glob(os.path.join(ROOT, "demo_logs", "**", "tfbneck_system_metrics.json"), recursive=True))
    assert paths, "demo_logs holds no sidecar"
    with open(paths[0]) as f:
        side = json.load(f)
    added = ("dt_s", "tree_cpu_pct", "tree_children", "tree_disk_read_Bps", "net_recv_external_Bps", "tree_remote_conns",
             "tree_loopback_conns", "tree_runq_wait_pct")
    assert "tree_cpu_pct" in side["samples"][0], "the sampler no longer writes tree figures"
    side["samples"] = [{k: v for k, v in smp.items() if k not in added} for smp in side["samples"]]
    s = summarize(side)
    assert s["scope"] == "machine" and all(s[k] is None for k in TREE_KEYS) and s["sampled_s"] is None
    assert s["proc_cpu_cores"] is not None and s["cpu_mean_pct"] is not None


@linux
def test_a_short_windows_cpu_is_exact_and_counts_the_pool_workers_own_time():
    """A 20-ms-tick counter cannot tell 15 ms of work from 0 or 20: the window's ``window_cpu``
    (per-thread schedstat) must equal what the two pool workers measured on their own clocks
    (``time.thread_time``), and the summary of the short window must use it."""
    from multiprocessing.dummy import Pool

    def spin(_):
        start = time.thread_time()
        while time.thread_time() - start < 0.015:
            pass
        return time.thread_time() - start

    with Pool(2) as pool:
        pool.map(lambda _: None, range(2))  # the workers exist before the window opens
        sampler = SystemSampler(0.05).start()
        own = pool.map(spin, range(2), chunksize=1)
        side = sampler.stop()
    cpu = side["window_cpu"]
    assert cpu is not None and 0 < cpu["dur_s"] < 1.0
    assert abs(cpu["pool_cpu_s"] - sum(own)) < 0.003, (cpu, own)
    assert cpu["tree_cpu_s"] >= cpu["pool_cpu_s"] and cpu["proc_cpu_s"] == cpu["tree_cpu_s"]
    summary = summarize(side)
    assert summary["pool_cpu_cores"] == pytest.approx(cpu["pool_cpu_s"] / cpu["dur_s"], abs=1e-3)
    assert summary["tree_cpu_cores"] == pytest.approx(cpu["tree_cpu_s"] / cpu["dur_s"], abs=1e-3)


def _array_bytes(_):
    """A process pool's task: a 16 MB array, pickled back to the parent (module level: a
    worker process imports it)."""
    return bytes(16 * 1024 * 1024)


@linux
def test_a_process_pools_result_handler_counts_as_the_pools_cpu():
    """A PyDataset with worker processes sends each batch back pickled; the parent's
    ``Pool._handle_results`` thread unpickles it on the training process's cores. The window's
    ``pool_cpu_s`` must hold that thread's time (at least half of what unpickling the same
    results costs on this thread's own clock) and none of the main thread's busy loop."""
    import pickle
    payload = pickle.dumps(_array_bytes(0))
    start = time.thread_time()
    for _ in range(6):
        pickle.loads(payload)
    unpickle_s = time.thread_time() - start
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pool.map(len, [b""])  # the handler threads and the worker exist before the window
        sampler = SystemSampler(0.05).start()
        for _ in range(6):
            pool.apply(_array_bytes, (0,))
        start = time.thread_time()
        while time.thread_time() - start < 0.05:  # the main thread's own work: not the pool's
            pass
        side = sampler.stop()
    cpu = side["window_cpu"]
    assert cpu is not None and cpu["pool_cpu_s"] >= 0.5 * unpickle_s, (cpu, unpickle_s)
    assert cpu["pool_cpu_s"] < cpu["proc_cpu_s"] - 0.04, cpu


@linux
def test_a_window_too_short_for_the_machines_counters_says_so_and_gives_the_exact_cores():
    """A 10 ms window (one tick of the machine-wide counters): the system sentence gives no
    machine-wide CPU % (0 % or 100 % there, not measured) but this process's cores over the
    window from its threads' own clocks; a 0.3 s window keeps the machine-wide figures."""
    from tfbneck_plugin.analysis.evidence import system_sentence
    from tfbneck_plugin.analysis.sysmetrics import MACHINE_CPU_MIN_S

    def spin(seconds):
        sampler = SystemSampler(0.05).start()
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            pass
        return sampler.stop()

    # A loaded machine can stretch a 10 ms spin's window past the limit (the sampler's last reading waits
    # for a core): a few tries for a window that short, the precondition of what is asserted below.
    for _ in range(5):
        side = spin(0.01)
        summary = summarize(side)
        if summary["sampled_s"] < MACHINE_CPU_MIN_S:
            break
    assert summary["sampled_s"] < MACHINE_CPU_MIN_S and summary["cpu_exact"]
    text = str(system_sentence(summary))
    cores = side["window_cpu"]["proc_cpu_s"] / side["window_cpu"]["dur_s"]
    assert "too short for the machine's CPU counters" in text and "CPU 0%" not in text and "busiest core" not in text
    assert f"this process {cores:.2f} cores over it (by its threads' own clocks)" in text, text
    long = str(system_sentence(summarize(spin(0.3))))
    assert "busiest core" in long and "too short" not in long
