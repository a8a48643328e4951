"""tfbneck against Holistic Trace Analysis (HTA) on the same PyTorch profiler traces, in one run:
time and peak memory of each tool's analysis, each in its own subprocess.

    pip install traceinsight          # HTA (PyPI name since 0.6; formerly HolisticTraceAnalysis)
    python benchmarks/bench_torch_vs_hta.py [--trace FILE] [--scale 10] [--repeats 3] [--json OUT]

What is measured, per trace and tool (a fresh Python process each time, the tools alternating):

    tfbneck   discovery of the folder and ``analysis.session.analyze_session``: the whole report
              (reading the Kineto JSON with orjson, steps, breakdown, verdict, advice, top ops)
    HTA       ``hta.trace_analysis.TraceAnalysis(trace_dir=...)`` (its load: parsing into pandas
              DataFrames) and ``get_temporal_breakdown(visualize=False)``

``time`` is that work's wall time (imports excluded, reported apart); ``peak RSS`` is the
process's high-water mark (``VmHWM``, imports included: what running the tool costs), and that
of any worker process the tool forks (``ru_maxrss`` of the children; HTA's loader forks a pool
when it parses several ranks): the table's ratio takes the larger of the two, a lower bound of
HTA's peak. The times are the fastest of
``--repeats`` runs, the memory the median.

Traces: the largest real trace of ``../shared/realtraces-torch`` (``ns_resolution_rank0``: one GPU,
68,692 events, 5 steps) and the same made ``--scale`` times longer by script: its events repeated
end to end in time, with step numbers, correlation ids and flow ids moved so they stay unique,
written under ``/tmp`` (never into the project).
"""
from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("TFBNECK_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")
DEFAULT_TRACE = os.path.join(SHARED, "realtraces-torch", "ns_resolution_rank0",
                             "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")


# ---- the children -------------------------------------------------------------------------------

def _peaks() -> Dict[str, int]:
    """Peak resident set sizes, in KiB: this process's own (``VmHWM`` of /proc/self/status: its
    memory since it started, where ``ru_maxrss`` would carry over the parent's at fork and
    exec) and its waited-for children's (``ru_maxrss``, Linux: KiB)."""
    own = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                own = int(line.split()[1])
    return {"peak_self_kib": own, "peak_children_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}


def child_tfbneck(folder: str) -> Dict:
    t0 = time.perf_counter()
    sys.path.insert(0, ROOT)
    from tfbneck_plugin.analysis.session import analyze_session
    from tfbneck_plugin.logdir import find_sessions
    t1 = time.perf_counter()
    [session] = find_sessions(folder).sessions
    report = analyze_session(session)
    t2 = time.perf_counter()
    assert report["status"] == "ok", report.get("error")
    return {"import_s": t1 - t0, "work_s": t2 - t1, **_peaks(),
            "result": f"{report['bottleneck']}/{report['cause']}, {report['steps']['count']} steps"}


def child_hta(folder: str) -> Dict:
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis
    t1 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=folder)
    df = analyzer.get_temporal_breakdown(visualize=False)
    t2 = time.perf_counter()
    row = df.iloc[0].to_dict()
    return {"import_s": t1 - t0, "work_s": t2 - t1, **_peaks(),
            "result": f"idle {row.get('idle_time_pctg')} %, compute {row.get('compute_time_pctg')} %"}


CHILDREN = {"tfbneck": child_tfbneck, "hta": child_hta}


# ---- the traces ---------------------------------------------------------------------------------

def scaled_copy(src: str, scale: int, out_dir: str) -> str:
    """``src``'s events repeated ``scale`` times end to end, in ``out_dir`` (a gzipped
    ``.pt.trace.json.gz`` of the same name); returns its path."""
    doc = json.loads(gzip.decompress(open(src, "rb").read()) if src.endswith(".gz") else open(src, "rb").read())
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start
    steps = [int(e["name"].split("#")[1]) for e in timed if str(e.get("name", "")).startswith("ProfilerStep#")]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    corr = max([e["args"].get("correlation", 0) for e in events if isinstance(e.get("args"), dict)
                and isinstance(e["args"].get("correlation"), int)] + [0]) + 1
    ext = max([e["args"].get("External id", 0) for e in events if isinstance(e.get("args"), dict)
               and isinstance(e["args"].get("External id"), int)] + [0]) + 1
    flow = max([e["id"] for e in events if isinstance(e.get("id"), int)] + [0]) + 1
    out = [e for e in events if not isinstance(e.get("ts"), (int, float))]  # metadata once
    for k in range(scale):
        shift = k * (span + 1000.0)
        for e in timed:
            c = dict(e)
            c["ts"] = e["ts"] + shift
            name = str(e.get("name", ""))
            if k and name.startswith("ProfilerStep#"):
                c["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k * step_span}"
            if k and isinstance(e.get("id"), int):
                c["id"] = e["id"] + k * flow
            args = e.get("args")
            if k and isinstance(args, dict):
                a = dict(args)
                if isinstance(a.get("correlation"), int):
                    a["correlation"] += k * corr
                if isinstance(a.get("External id"), int):
                    a["External id"] += k * ext
                c["args"] = a
            out.append(c)
    doc["traceEvents"] = out
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, os.path.basename(src) if src.endswith(".gz") else os.path.basename(src) + ".gz")
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(json.dumps(doc).encode())
    return path


def folder_of(trace: str, work: str, name: str) -> str:
    """A folder holding only ``trace`` (HTA reads every trace file of its folder)."""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    dst = os.path.join(d, os.path.basename(trace))
    if not os.path.exists(dst):
        os.symlink(os.path.abspath(trace), dst)
    return d


# ---- the parent ---------------------------------------------------------------------------------

def run_child(tool: str, folder: str) -> Dict:
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", tool, folder],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(folder: str, repeats: int) -> Dict[str, Dict]:
    runs: Dict[str, List[Dict]] = {t: [] for t in CHILDREN}
    for _ in range(repeats):
        for tool in CHILDREN:  # alternating, so that load on the machine hits both alike
            runs[tool].append(run_child(tool, folder))
    out = {}
    for tool, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            out[tool] = {"error": rs[0]["error"]}
            continue
        out[tool] = {"work_s": min(r["work_s"] for r in ok), "import_s": min(r["import_s"] for r in ok),
                     "peak_self_mib": statistics.median(r["peak_self_kib"] for r in ok) / 1024,
                     "peak_children_mib": statistics.median(r["peak_children_kib"] for r in ok) / 1024,
                     "result": ok[0]["result"], "runs": len(ok)}
        out[tool]["peak_mib"] = max(out[tool]["peak_self_mib"], out[tool]["peak_children_mib"])
    return out


def table(rows: List[Dict]) -> str:
    lines = ["| trace | events | MB (JSON) | tfbneck s | HTA s | HTA / tfbneck time | tfbneck peak MiB | "
             "HTA peak MiB (its process / forked parser) | HTA / tfbneck memory |", "|" + "---|" * 9]
    for r in rows:
        t, h = r["tfbneck"], r["hta"]
        if "error" in h or "error" in t:
            lines.append(f"| {r['trace']} | {r['events']:,} | {r['json_mb']:.0f} | {t.get('work_s', float('nan')):.2f} | "
                         f"error: {h.get('error') or t.get('error')} | | | | |")
            continue
        lines.append(
            f"| {r['trace']} | {r['events']:,} | {r['json_mb']:.0f} | {t['work_s']:.2f} | {h['work_s']:.2f} | "
            f"{h['work_s'] / t['work_s']:.1f}x | {t['peak_mib']:.0f} | {h['peak_mib']:.0f} "
            f"({h['peak_self_mib']:.0f} / {h['peak_children_mib']:.0f}) | {h['peak_mib'] / t['peak_mib']:.1f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=2, metavar=("TOOL", "FOLDER"), help=argparse.SUPPRESS)
    ap.add_argument("--trace", default=DEFAULT_TRACE, help="a real Kineto trace (default: ns_resolution_rank0)")
    ap.add_argument("--scale", type=int, default=10, help="the larger trace's length, in copies (default 10)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each tool per trace (default 3)")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    a = ap.parse_args(argv)
    if a.child:
        tool, folder = a.child
        print(json.dumps(CHILDREN[tool](folder)))
        return 0
    if not os.path.exists(a.trace):
        print(f"bench_torch_vs_hta: {a.trace} is absent (../shared/realtraces-torch sits beside the project)",
              file=sys.stderr)
        return 2
    try:
        import hta  # noqa: F401
        from importlib.metadata import version
        hta_version = version("traceinsight")
    except Exception as err:  # not installed: say so, as the docstring says how to install it
        print(f"bench_torch_vs_hta: HTA is not importable ({type(err).__name__}: {err}); "
              "pip install traceinsight", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="tfbneck_bench_torch_")
    try:
        big = scaled_copy(a.trace, a.scale, os.path.join(work, "made"))
        rows = []
        for name, path in (("real: " + os.path.basename(os.path.dirname(a.trace)), a.trace),
                           (f"{a.scale}x longer (made)", big)):
            raw = gzip.decompress(open(path, "rb").read()) if path.endswith(".gz") else open(path, "rb").read()
            events, json_mb = len(json.loads(raw)["traceEvents"]), len(raw) / 1e6
            del raw
            gc.collect()
            folder = folder_of(path, work, f"t{len(rows)}")
            res = measure(folder, a.repeats)
            rows.append({"trace": name, "events": events, "json_mb": json_mb, **res})
            print(f"{name}: tfbneck {res['tfbneck']}\n{' ' * len(name)}  HTA {res['hta']}", flush=True)
        print(f"\nHTA: traceinsight {hta_version}; Python {sys.version.split()[0]}; {os.cpu_count()} cores\n")
        print(table(rows))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
