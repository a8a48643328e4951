"""``tfbneck fleet`` without and with the report cache, and the tab's ``/fleet`` request with
10,000 cached reports, measured side by side in one run.

The fleet is made of real sessions (the demo runs and, when present, ``../shared/realtraces``)
hard-linked under many run names, each run with a step-time trend file
(``tests/support/fleet_logs.py``): hard links cost inodes, not disk.

1. ``tfbneck fleet LOGDIR --format json --jobs J`` over ``--sessions`` sessions (default 2,000)
   with an empty cache (every session analysed), then again (every report read from the
   cache); the two JSON outputs must be equal.
2. A 10,000-session logdir (``--tab-sessions``) whose reports are all in the cache: each real
   source session is analysed once and its report stored for each of its copies (the copies
   are the same files, so their reports are the same but for run, session and path, which the
   cache rewrites on every read). Then a real ``tensorboard --logdir`` is started, its session
   scan awaited, and ``GET /data/plugin/bottleneck/fleet`` timed: the first request (summaries
   read from the disk cache) and the second (from the tab's memory).

    python benchmarks/bench_fleet.py [--sessions 2000] [--tab-sessions 10000] [--jobs 2] [--out docs/fleet_benchmark.md]

Prints a table; ``--out`` also writes it as Markdown. Needs no TensorFlow.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

from support.fleet_logs import build_fleet, real_sessions  # noqa: E402

REALTRACES = os.path.join(os.path.dirname(ROOT), "shared", "realtraces")


def children_cpu() -> float:
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed_fleet(logdir: str, cache_dir: str, jobs: int):
    """(wall seconds, CPU seconds of the command and its workers, its JSON)."""
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "fleet", logdir, "--format", "json",
                        "--jobs", str(jobs)], capture_output=True, text=True,
                       env=dict(os.environ, TFBNECK_CACHE_DIR=cache_dir, TFBNECK_CACHE_MAX_MB="4096"))
    took = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"tfbneck fleet failed: {r.stderr[-2000:]}")
    return took, children_cpu() - cpu0, json.loads(r.stdout)


def fill_cache(logdir: str, sources, cache_dir: str) -> int:
    """Store, for every session under ``logdir``, the report of the real session it copies."""
    os.environ["TFBNECK_CACHE_DIR"] = cache_dir
    from tfbneck_plugin import cache
    from tfbneck_plugin.analysis.session import analyze_session
    from tfbneck_plugin.logdir import find_sessions
    by_file = {}
    for src in sources:
        found = find_sessions(src["path"]).sessions
        if found:
            by_file[os.stat(found[0].files[0]).st_ino] = analyze_session(found[0])
    stored = 0
    for s in find_sessions(logdir).sessions:
        report = by_file.get(os.stat(s.files[0]).st_ino)
        if report is not None:
            stored += cache.put(s, dict(report, run=s.run, session=s.name, path=s.path))
    return stored


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(url: str, timeout: float = 300.0, pid: int = 0):
    """(wall seconds, CPU seconds the server ``pid`` used meanwhile (its scan threads too), body)."""
    cpu0 = proc_cpu(pid) if pid else 0.0
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = r.read()
    took = time.perf_counter() - t0
    return took, (proc_cpu(pid) - cpu0 if pid else 0.0), json.loads(body)


def tab_request(logdir: str, cache_dir: str):
    """(first /fleet seconds, second /fleet seconds, body) from a real TensorBoard."""
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    log = tempfile.NamedTemporaryFile(prefix="tfb-bench-tb-", suffix=".log", delete=False)
    proc = subprocess.Popen([exe, "--logdir", logdir, "--port", str(port), "--host", "127.0.0.1"], stdout=log,
                            stderr=subprocess.STDOUT,
                            env=dict(os.environ, TFBNECK_CACHE_DIR=cache_dir, CUDA_VISIBLE_DEVICES=""))
    base = f"http://127.0.0.1:{port}/data/plugin/bottleneck/"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if get(base + "sessions")[2].get("scanned"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"tensorboard did not finish its scan; log in {log.name}")
            time.sleep(1.0)
        first = get(base + "fleet", pid=proc.pid)
        second = get(base + "fleet", pid=proc.pid)
        assert second[2]["sessions"] == first[2]["sessions"]
        return first[:2], second[:2], first[2]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--tab-sessions", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--workdir", help="where the fleets and caches are made (default: a temporary folder, removed)")
    ap.add_argument("--out", help="also write the table as Markdown to this file")
    args = ap.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="tfbneck-bench-fleet-")
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    sources = real_sessions(os.path.join(ROOT, "demo_logs"), REALTRACES if os.path.isdir(REALTRACES) else None)
    try:
        cli_logs = os.path.join(work, "cli")
        build_fleet(cli_logs, sources, runs=args.sessions // 2, sessions_per_run=2)
        cold, cold_cpu, a = timed_fleet(cli_logs, os.path.join(work, "cache-cli"), args.jobs)
        warm, warm_cpu, b = timed_fleet(cli_logs, os.path.join(work, "cache-cli"), args.jobs)
        assert a == b, "the cached fleet differs from the first one"
        tab_logs = os.path.join(work, "tab")
        build_fleet(tab_logs, sources, runs=args.tab_sessions // 2, sessions_per_run=2)
        stored = fill_cache(tab_logs, sources, os.path.join(work, "cache-tab"))
        first, second, body = tab_request(tab_logs, os.path.join(work, "cache-tab"))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, load average {load0:.1f} at the start and "
        f"{load:.1f} at the end"
        f"; Python {platform.python_version()}; {len(sources)} real source sessions.",
        "",
        "| measurement | sessions | wall s | CPU s | note |",
        "|---|---|---|---|---|",
        f"| `tfbneck fleet` first run (empty cache, --jobs {args.jobs}) | {a['sessions']} | {cold:.2f} | {cold_cpu:.2f} "
        "| every session analysed |",
        f"| `tfbneck fleet` second run (cached) | {b['sessions']} | {warm:.2f} | {warm_cpu:.2f} "
        f"| {cold / warm:.0f}x faster (wall), same JSON |",
        f"| tab `GET /fleet`, first request | {body['sessions']} | {first[0]:.2f} | {first[1]:.2f} "
        f"| {stored} cached reports, {body['pending']} pending; CPU: the server's, all threads |",
        f"| tab `GET /fleet`, second request | {body['sessions']} | {second[0]:.2f} | {second[1]:.2f} "
        "| summaries in the tab's memory |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Fleet benchmark (`benchmarks/bench_fleet.py`)\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
