"""Benchmark: a cold ``tfbneck analyze`` against the protobuf parse alone (and XProf's own
input-pipeline analysis), with peak memory; and the README's performance table made from
its last saved results.

Usage:
    python benchmarks/bench_analyze.py [TRACE.xplane.pb] [--repeat 3] [--steps 3000]
                                       [--label NAME] [--no-xprof] [--save]
    python benchmarks/bench_analyze.py --quick [--save]   # the small per-event ratio (tests)
    python benchmarks/bench_analyze.py --readme          # README block from the saved results

Without a trace it makes one (benchmarks/make_large_trace.py: a Keras 3 fit of a small MLP
profiled over --steps steps; TensorFlow needed). Every measurement is a fresh process; the
tools are interleaved in each repetition so machine noise hits them alike; medians of
--repeat, after one untimed run of each (it compiles their bytecode into a cache of its own
and brings the trace into the page cache). Measured:

    (a) parse: read + XSpace.ParseFromString, timed inside its process (imports excluded):
        protobuf's C parser, the floor
    (b) tfbneck: the whole process ``tfbneck analyze TRACE --no-cache`` as a user waits for
        it (interpreter start, imports, reading, analysis, the report), wall time from the
        parent, peak RSS of the process (``wait4``'s ``ru_maxrss``)
    (c) XProf 2.24.2: ``xspace_to_tool_data(..., 'input_pipeline_analyzer')`` in its process
        (given a fresh copy of the trace each time: XProf caches its results beside it)

Targets: b / a <= 1.6, peak RSS of (b) <= 3.5 x the file size, b / c <= 0.2. A trace above
2 GiB (protobuf's limit for one message: neither (a) nor (c) can parse it) gets (b) alone, with
tfbneck's own size limit (TFBNECK_MAX_TRACE_BYTES) raised to its size.
``--save`` writes the medians into benchmarks/results/bench_analyze.json under --label (a
56 MB and a 1 GB trace each have theirs); ``--readme`` renders that file into README.md
between the ``bench_analyze`` marker lines (tests/test_bench_analyze.py keeps them equal).

``--quick`` measures the ratio the quick test tier guards: in one process, interleaved,
the analysis of a small real trace (tests/data/cache_filling_window, read from its bytes)
against protobuf's parse of the same bytes, each the least CPU time of 7 runs; a ratio, so it moves
with the analysis per event and not with the machine's speed. It does move with the numpy and
protobuf releases (the floors' numpy 1.23 and protobuf 4.21: ~23 where numpy 2 and protobuf 6
give ~11.5 on the same machine), so ``--save`` keeps one ratio per pair of their versions.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "bench_analyze.json")
README = os.path.join(ROOT, "README.md")
BEGIN, END = "<!-- bench_analyze:begin -->", "<!-- bench_analyze:end -->"
#: The small real trace of --quick (committed with the project).
QUICK_TRACE = os.path.join(ROOT, "tests", "data", "cache_filling_window", "plugins", "profile",
                           "2026_11_30_12_21_08_steps6-10", "vm.xplane.pb")

PRELUDE = r"""
import gc, json, resource, sys, time
path = sys.argv[1]
"""
PARSE = PRELUDE + r"""
from tfbneck_plugin.trace import xspace
gc.collect()
t = time.perf_counter()
data = open(path, 'rb').read(); space = xspace.XSpace(); space.ParseFromString(data)
dt = time.perf_counter() - t
print('RESULT ' + json.dumps({'seconds': dt}))
"""
XPROF = PRELUDE + r"""
import os
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
from xprof.convert import raw_to_tool_data as r
gc.collect()
t = time.perf_counter()
data, _ = r.xspace_to_tool_data([path], 'input_pipeline_analyzer', {})
dt = time.perf_counter() - t
print('RESULT ' + json.dumps({'seconds': dt}))
"""


def _child(argv, env):
    """Run a child with its own rusage (wait4), so peak RSS is its own, not the maximum of all children."""
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, problem = out.read(), err.read()
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv[:4])} failed ({p.returncode}):\n{problem[-3000:]}")
    return wall, usage.ru_maxrss / 1024, text


def _result(text):
    line = [l for l in text.splitlines() if l.startswith("RESULT ")]
    if not line:
        raise SystemExit(f"no result in:\n{text[-2000:]}")
    return json.loads(line[0][7:])


#: The largest message protobuf parses (bytes): above it there is no (a) nor (c) to measure.
PROTOBUF_LIMIT = 2 ** 31 - 1
#: tfbneck's own size limit (tfbneck_plugin.trace.tracefile.MAX_TRACE_BYTES), raised for such traces.
LIMIT_ENV = "TFBNECK_MAX_TRACE_BYTES"

#: Where the children keep their bytecode (:func:`child_env`): a folder of this run's.
PYCACHE = os.path.join(tempfile.gettempdir(), f"tfbneck-bench-pycache-{os.getuid()}")


def child_env() -> dict:
    """The children's environment: their compiled bytecode kept and reused (in
    :data:`PYCACHE`, outside the source tree) whatever PYTHONDONTWRITEBYTECODE says here, as
    an installed package's is (pip compiles it at install): without it an editable checkout
    pays ~0.1 s compiling its modules in every process, which no user waits for twice."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3", PYTHONPYCACHEPREFIX=PYCACHE)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(tool: str, trace: str) -> dict:
    env = child_env()
    if tool == "a_parse":
        wall, rss, out = _child([sys.executable, "-c", PARSE, trace], env)
        return {"seconds": _result(out)["seconds"], "peak_rss_mb": rss}
    if tool == "b_tfbneck":
        wall, rss, _ = _child([sys.executable, "-m", "tfbneck_plugin.cli", "analyze", trace, "--no-cache",
                               "--output", os.devnull], env)
        return {"seconds": wall, "peak_rss_mb": rss}
    # XProf caches its op stats beside the trace (ALL_HOSTS.op_stats_v2.pb) and reuses them:
    # give it a fresh copy every time so that it really converts the trace.
    fresh = tempfile.mkdtemp(prefix="tfbneck-bench-xprof-")
    try:
        session = os.path.join(fresh, "plugins", "profile", "s")
        os.makedirs(session)
        copy = os.path.join(session, os.path.basename(trace))
        shutil.copy(trace, copy)
        wall, rss, out = _child([sys.executable, "-c", XPROF, copy], env)
        return {"seconds": _result(out)["seconds"], "peak_rss_mb": rss}
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def quick_ratio(path: str = QUICK_TRACE, repeat: int = 7) -> float:
    """(analysis of the trace's bytes) / (protobuf's parse of the same bytes), each the least
    CPU time (``time.process_time``: this process, all its threads) of ``repeat`` interleaved
    runs: the per-event cost of the analysis in units of the parse. CPU time, not wall time: on
    a busy machine every run of the analysis (tens of ms) is preempted, the short parse mostly
    not, which tripled a wall-time ratio beside other work (67 against 24); a process's CPU time
    does not count the time others held its core. The first pair warms both up and is dropped."""
    from tfbneck_plugin.analysis.session import analyze_space
    from tfbneck_plugin.trace import decoder, xspace

    data = open(path, "rb").read()
    parses, analyses = [], []
    for k in range(repeat + 1):
        t = time.process_time()
        for _ in range(3):
            xspace.XSpace().ParseFromString(data)
        parse = time.process_time() - t
        t = time.process_time()
        analyze_space(decoder.decode_space(data, path))
        analysis = time.process_time() - t
        if k:
            parses.append(parse / 3)
            analyses.append(analysis)
    return min(analyses) / min(parses)


def load_results() -> dict:
    if os.path.exists(RESULTS):
        with open(RESULTS, encoding="utf-8") as f:
            return json.load(f)
    return {"traces": {}}


def save_results(results: dict) -> None:
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")


def render_block(results: dict) -> str:
    """The README's performance block (between the markers) from saved results."""
    rows, notes = [], []
    for label, r in sorted(results["traces"].items(), key=lambda kv: kv[1]["size_mb"]):
        m = r["median"]
        a, b = m.get("a_parse"), m["b_tfbneck"]
        c = m.get("c_xprof")
        parse = (f"{a['seconds']:.2f} s | {b['seconds']:.2f} s | **{b['seconds'] / a['seconds']:.2f}**" if a else
                 f"cannot (over 2 GiB) | {b['seconds']:.2f} s | -")
        rows.append(f"| {label} ({r['size_mb']:.0f} MB, {r['events'] / 1e6:.1f} M events) | {parse} | "
                    f"{b['peak_rss_mb']:.0f} MB | **{b['peak_rss_mb'] / r['size_mb']:.2f}** | "
                    + (f"{c['seconds']:.1f} s ({b['seconds'] / c['seconds']:.3f})" if c else "not run") + " |")
        runs = len(r["runs"]["b_tfbneck"])
        notes.append(f"{label}: {r['trace']}" + (f" ({r['note']})" if r.get("note") else "")
                     + f", medians of {runs}; {r['machine']}")
    quick = results.get("quick")
    lines = [
        "`python benchmarks/bench_analyze.py [TRACE]` measures, each tool in a fresh process, interleaved,",
        "medians of several runs (how many: the notes below), after an untimed one of each, which compiles",
        "their bytecode and reads the trace into the page cache: (a) reading the file and protobuf's",
        "`ParseFromString` of the XSpace, timed inside its process; (b) the whole `tfbneck analyze TRACE",
        "--no-cache` process as a user waits for it (interpreter start, imports, reading, analysis, the",
        "report; wall time, and the process's peak RSS); (c) XProf 2.24.2's own `input_pipeline_analyzer`",
        "conversion (given a fresh copy of the file each time: XProf caches its results beside the trace).",
        "Targets: b/a ≤ 1.6, peak RSS ≤ 3.5 x the file, b/c ≤ 0.2. This table is generated from",
        "`benchmarks/results/bench_analyze.json` by `python benchmarks/bench_analyze.py --readme`.",
        "It measures the package it imports, so run it in the checkout the tests install (`pip install -e .`",
        "builds the C decoder in place; a plain `pip install .` leaves the clone's source folder without it,",
        "and the benchmark then stops with one line rather than time the numpy fallback). Without TRACE it",
        "records one with TensorFlow (`benchmarks/make_large_trace.py`); `--no-xprof` leaves out (c).",
        "",
        "| trace | (a) read + parse | (b) tfbneck, whole process | b/a | (b) peak RSS | RSS / file | (c) XProf (b/c) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Traces and machines: " + "; ".join(notes) + ".",
    ]
    if quick:
        saved = "; ".join(f"{q['ratio']:.2f} with {libs} ({q['machine']})" for libs, q in sorted(quick.items()))
        lines += ["", f"The quick test tier guards the analysis per event: on a small real trace, analysis / parse = "
                      f"{saved} when saved; `tests/test_bench_analyze.py` fails above 1.5 x the ratio saved "
                      "with the numpy and protobuf it runs with, measured the same way in the same run."]
    lines += [
        "",
        "What makes it fast: a local trace is mapped into memory, not read, and every line is decoded",
        "from a slice of it (no protobuf object per event), several lines at once in threads;",
        "`tfbneck_plugin/trace/_wirescan.c`, an optional C extension built by `pip install`, splits each",
        "line into events and writes their three scalar fields straight into columns without holding",
        "the GIL (without a compiler the numpy decoder in `wire.py` does the same, ~5x slower, in one",
        "thread); each line's pages are given back once decoded, so the process holds the event columns",
        "(~32 bytes per event), not the file. Events of a name are found through a per-line index (a",
        "counting sort), nesting is one linear scan, stats are decoded only for the events that need",
        "them, once; everything after that is numpy over columns. The `tfbneck` program itself runs",
        "numpy's OpenBLAS on one thread and keeps the memory it frees for its next arrays",
        "(`tfbneck_plugin/cli/main.py`, `run`).",
        "",
        "At 2 GB and beyond: files above `TFBNECK_MAX_TRACE_BYTES` (default 2 GiB - 1 byte, protobuf's",
        "own limit for one message, which XProf shares: it cannot open a larger trace at all, and its",
        "trace viewer shows at most 1 million events) are refused with a one-line error naming the file",
        "(`error_kind: too_large`) instead of risking an out-of-memory kill. Raising the limit lets",
        "tfbneck read them: each XLine must stay under 2 GiB (a larger one is reported corrupt), and",
        "memory grows with the events, not the file (a `.xplane.pb.gz` is the exception: it is inflated",
        "into memory whole). " + ("The row over 2 GiB was measured so, with the limit raised to its size."
                                  if any("a_parse" not in r["median"] for r in results["traces"].values())
                                  else "Not measured above the largest trace in the table."),
    ]
    return "\n".join(lines) + "\n"


def write_readme(results: dict, readme: str = README) -> None:
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    i, j = text.index(BEGIN) + len(BEGIN) + 1, text.index(END)
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text[:i] + render_block(results) + text[j:])


def readme_block(readme: str = README) -> str:
    """The README's text between the markers, as it stands."""
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    return text[text.index(BEGIN) + len(BEGIN) + 1:text.index(END)]


def libraries() -> str:
    """The numpy and protobuf versions the quick ratio depends on, e.g. ``numpy 2.3.1, protobuf 6.33.6``."""
    import google.protobuf
    import numpy
    return f"numpy {numpy.__version__}, protobuf {google.protobuf.__version__}"


def machine() -> str:
    return f"{os.cpu_count()} cores, Python {platform.python_version()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--label", default="56 MB Keras 3 fit")
    ap.add_argument("--note", help="how the trace was made, for the README's notes")
    ap.add_argument("--no-xprof", action="store_true", help="leave out (c)")
    ap.add_argument("--save", action="store_true", help="write the medians into " + RESULTS)
    ap.add_argument("--quick", action="store_true", help="measure the quick tier's per-event ratio only")
    ap.add_argument("--readme", action="store_true", help="render README.md's block from the saved results")
    args = ap.parse_args()
    results = load_results()
    if args.readme:
        write_readme(results)
        print(f"README.md's performance block regenerated from {RESULTS}")
        return
    if args.quick:
        ratio = quick_ratio()
        print(f"analysis / parse on {os.path.relpath(QUICK_TRACE, ROOT)}: {ratio:.3f}")
        if args.save:
            results.setdefault("quick", {})[libraries()] = {"ratio": round(ratio, 3), "machine": machine()}
            save_results(results)
        return
    from tfbneck_plugin.trace import wire
    if not wire.FAST:
        sys.exit(f"bench_analyze: {os.path.dirname(wire.__file__)} has no built C decoder (_wirescan): it would time "
                 "the numpy fallback; run pip install -e . in this checkout (or python setup.py build_ext --inplace)")
    trace = args.trace
    if trace is None:
        out = tempfile.mkdtemp(prefix="tfbneck-bench-")
        r = subprocess.run([sys.executable, os.path.join(HERE, "make_large_trace.py"), out, "--steps", str(args.steps)],
                           capture_output=True, text=True, check=True)
        trace = r.stdout.strip().splitlines()[-1]
    size = os.path.getsize(trace)
    size_mb = size / 2**20
    over = size > PROTOBUF_LIMIT  # neither protobuf nor XProf can parse it: tfbneck with its limit raised
    if over:
        os.environ[LIMIT_ENV] = str(size)
    from tfbneck_plugin.trace.tracefile import read_space
    events = read_space(trace).n_events
    print(f"trace: {trace}\n  {size_mb:.1f} MB, {events:,} events")
    tools = ["b_tfbneck"] if over else ["a_parse", "b_tfbneck"] + ([] if args.no_xprof else ["c_xprof"])
    runs = {t: [] for t in tools}
    for tool in tools:  # untimed: compiles the bytecode, reads the trace into the page cache
        measure(tool, trace)
    for _ in range(args.repeat):
        for tool in tools:
            runs[tool].append(measure(tool, trace))
    med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for t, rs in runs.items()}
    for t, m in med.items():
        print(f"  {t:10s} median {m['seconds']:7.3f} s   peak RSS {m['peak_rss_mb']:8.1f} MB"
              "   (runs: " + ", ".join("%.3f" % r["seconds"] for r in runs[t]) + ")")
    b = med["b_tfbneck"]["seconds"]
    if "a_parse" in med:
        print(f"b/a = {b / med['a_parse']['seconds']:.2f}  (target <= 1.6)")
    print(f"tfbneck peak RSS / file size = {med['b_tfbneck']['peak_rss_mb'] / size_mb:.2f} (target <= 3.5)")
    if "c_xprof" in med:
        print(f"b/c = {b / med['c_xprof']['seconds']:.3f} (target <= 0.2)")
    if args.save:
        results["traces"][args.label] = {
            "trace": f"{os.path.basename(trace)}, {events:,} events", "size_mb": round(size_mb, 1), "events": events,
            "machine": machine(), **({"note": args.note} if args.note else {}),
            "median": {t: {k: round(v, 3) for k, v in m.items()} for t, m in med.items()},
            "runs": {t: [{k: round(v, 3) for k, v in r.items()} for r in rs] for t, rs in runs.items()}}
        save_results(results)
        print(f"saved to {RESULTS}")


if __name__ == "__main__":
    main()
