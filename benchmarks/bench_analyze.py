"""Benchmark: tfbneck analyze against the protobuf parse alone and against XProf's own
input-pipeline analysis of the same trace, with peak memory.

Usage:
    python benchmarks/bench_analyze.py [TRACE.xplane.pb] [--repeat 3] [--steps 3000]

Without a trace it makes one (benchmarks/make_large_trace.py: a Keras 3 fit of a small MLP
profiled over --steps steps; TensorFlow needed). Each measurement runs in a fresh Python
process so that peak memory (ru_maxrss) is its own; the work is timed inside the process
(interpreter start-up and imports excluded), and the three tools are interleaved in each
repetition so machine noise hits them alike. Prints medians and the ratios:

    (a) read + XSpace.ParseFromString          (protobuf's C parser: the floor)
    (b) tfbneck: find_sessions + analyze_session (everything `tfbneck analyze` does per session)
    (c) XProf 2.24.2: xspace_to_tool_data(..., 'input_pipeline_analyzer')

Targets (issue 6): b/c <= 0.2, b/a <= 2.0, peak memory above baseline <= 3 x file size.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

PRELUDE = r"""
import gc, json, resource, sys, time
def rss_mb():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
path = sys.argv[1]
"""
TOOLS = {
    "a_parse": PRELUDE + r"""
from tfbneck_plugin.trace import xspace
gc.collect(); base = rss_mb()
t = time.perf_counter()
data = open(path, 'rb').read(); space = xspace.XSpace(); space.ParseFromString(data)
dt = time.perf_counter() - t
""",
    "b_tfbneck": PRELUDE + r"""
from tfbneck_plugin.logdir import find_sessions
from tfbneck_plugin.analysis.session import analyze_session
gc.collect(); base = rss_mb()
t = time.perf_counter()
report = [analyze_session(s) for s in find_sessions(path).sessions]
dt = time.perf_counter() - t
assert report[0]['status'] == 'ok', report[0]
""",
    "c_xprof": PRELUDE + r"""
import os
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
from xprof.convert import raw_to_tool_data as r
gc.collect(); base = rss_mb()
t = time.perf_counter()
data, _ = r.xspace_to_tool_data([path], 'input_pipeline_analyzer', {})
dt = time.perf_counter() - t
""",
}
EPILOGUE = r"""
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print('RESULT ' + json.dumps({'seconds': dt, 'peak_above_base_mb': peak - base}))
"""


def measure(tool: str, trace: str) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3")
    if tool == "c_xprof":
        # XProf caches its op stats beside the trace (ALL_HOSTS.op_stats_v2.pb) and reuses
        # them: give it a fresh copy every time so that it really converts the trace.
        fresh = tempfile.mkdtemp(prefix="tfbneck-bench-xprof-")
        session = os.path.join(fresh, "plugins", "profile", "s")
        os.makedirs(session)
        shutil.copy(trace, session)
        trace = os.path.join(session, os.path.basename(trace))
    r = subprocess.run([sys.executable, "-c", TOOLS[tool] + EPILOGUE, trace], capture_output=True, text=True,
                       env=env, timeout=1800)
    if tool == "c_xprof":
        shutil.rmtree(fresh, ignore_errors=True)
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if not line:
        raise SystemExit(f"{tool} failed:\n{r.stderr[-3000:]}")
    return json.loads(line[0][7:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    trace = args.trace
    if trace is None:
        out = tempfile.mkdtemp(prefix="tfbneck-bench-")
        r = subprocess.run([sys.executable, os.path.join(HERE, "make_large_trace.py"), out, "--steps", str(args.steps)],
                           capture_output=True, text=True, check=True)
        trace = r.stdout.strip().splitlines()[-1]
    size_mb = os.path.getsize(trace) / 2**20
    from tfbneck_plugin.trace.tracefile import read_space
    events = read_space(trace).n_events
    print(f"trace: {trace}\n  {size_mb:.1f} MB, {events:,} events")
    runs = {t: [] for t in TOOLS}
    for i in range(args.repeat):
        for tool in TOOLS:
            runs[tool].append(measure(tool, trace))
    med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for t, rs in runs.items()}
    for t, m in med.items():
        print(f"  {t:10s} median {m['seconds']:7.3f} s   peak memory above baseline {m['peak_above_base_mb']:8.1f} MB"
              "   (runs: " + ", ".join("%.3f" % r["seconds"] for r in runs[t]) + ")")
    a, b, c = (med[t]["seconds"] for t in ("a_parse", "b_tfbneck", "c_xprof"))
    mem = med["b_tfbneck"]["peak_above_base_mb"] / size_mb
    print(f"b/a = {b / a:.2f}  (target <= 2.0)")
    print(f"b/c = {b / c:.3f} (target <= 0.2)")
    print(f"tfbneck peak memory / file size = {mem:.2f} (target <= 3.0)")


if __name__ == "__main__":
    main()
