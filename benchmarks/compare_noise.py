"""How often ``tfbneck compare`` calls identical code slower (false alarms) and how often it
sees real 10 %, 25 % and 2x changes, measured on real runs made side by side.

Usage::

    python benchmarks/compare_noise.py RUNS_DIR [--make] [--base N] [--busy N] [--changed N]
                                       [--markdown docs/compare_noise.md]

``--make`` first makes the runs (benchmarks/noise_job.py, one process each): ``--base`` runs of
the base code as the machine is, ``--busy`` more under ``benchmarks/under_load.sh``, and
``--changed`` runs of each real change (the step's work x 1.1, 1.25, 2). Every pair of
base runs is a pair of identical code run twice (both as the machine is, both busy, one of
each); every (base, changed) pair is a real change. Each pair is compared twice: with all
the evidence (the window's steps, the trend's periods, the sidecars' load) and with the
window's steps only (what a run without the trend file has). The table gives, per kind of
pair and evidence, how many pairs the 5 % gate (``--fail-if-slower 5``) failed, and the
verdicts; ``--markdown`` also writes it to a file.

The floors of :data:`tfbneck_plugin.comparison.compare.RUN_TO_RUN_FLOOR_PCT` (and the CPU floors)
are fitted on the even-numbered identical pairs (same load; for the CPU floor across loads,
pairs at different loads) and judged on the others: the table leaves the fit half out.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOB = os.path.join(HERE, "noise_job.py")
UNDER_LOAD = os.path.join(HERE, "under_load.sh")  # spinners and a loopback stream
BASE_WORK = 20
CHANGES = {"+10 %": 1.1, "+25 %": 1.25, "2x": 2.0}


def _run(work, out, busy):
    cmd = [sys.executable, JOB, str(work), out]
    if busy:
        cmd = [UNDER_LOAD] + cmd
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    clock = next((float(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("CLOCK_MS")), None)
    if clock is None:
        raise SystemExit(f"{out}: the job failed: {r.stderr[-2000:]}")
    return clock


def make_runs(root, n_base, n_busy, n_changed):
    """Interleaves the runs so that slow drifts of the machine's load spread over every kind."""
    os.makedirs(root, exist_ok=True)
    plan = [("base", i, BASE_WORK, False) for i in range(n_base)] + \
           [("busy", i, BASE_WORK, True) for i in range(n_busy)] + \
           [(name, i, round(BASE_WORK * f), False) for name, f in CHANGES.items() for i in range(n_changed)]
    plan.sort(key=lambda p: (p[1], p[0]))
    index = {}
    for kind, i, work, busy in plan:
        name = f"{kind.replace(' ', '').replace('%', 'pct').replace('+', 'plus')}_{i}"
        t = time.time()
        clock = _run(work, os.path.join(root, name), busy)
        index[name] = {"kind": kind, "work": work, "busy": busy, "clock_ms": clock}
        print(f"{name}: work {work}, {'busy' if busy else 'as is'}, {clock:.2f} ms per step ({time.time() - t:.0f} s)",
              flush=True)
        with open(os.path.join(root, "runs.json"), "w") as f:
            json.dump(index, f, indent=1)
    return index


def load_sides(root, index):
    """run name -> (report, timings with the trend, timings from the window only)."""
    import dataclasses

    import numpy as np
    sys.path.insert(0, ROOT)
    from tfbneck_plugin.comparison import compare as comparison
    from tfbneck_plugin.analysis.session import analyze_session
    out = {}
    for name in sorted(index):
        by_run, _ = comparison._sessions_per_run(os.path.join(root, name))
        (sessions,) = by_run.values()
        report = analyze_session(sessions[-1])
        full = comparison.side_timings(sessions, sessions[-1], report, use_trend=True)
        out[name] = (report, full, dataclasses.replace(full, periods=np.zeros(0), period_cpu=np.zeros(0), trend_file=None))
    return out


def pairs(index):
    """(kind of pair, baseline run, candidate run)."""
    base = sorted(n for n, r in index.items() if r["kind"] == "base")
    busy = sorted(n for n, r in index.items() if r["kind"] == "busy")
    out = [("identical, as is", a, b) for a, b in itertools.combinations(base, 2)]
    out += [("identical, busy", a, b) for a, b in itertools.combinations(busy, 2)]
    out += [("identical, as is -> busy", a, b) for a in base for b in busy]
    out += [("identical, busy -> as is", b, a) for a in base for b in busy]
    for kind in CHANGES:
        out += [(f"real {kind}", a, b) for a in base for b in sorted(n for n, r in index.items() if r["kind"] == kind)]
    return out


def evaluate(sides, index, floors=None):
    """Rows of (pair kind, evidence, baseline, candidate, verdict, change %, gate failed)."""
    from tfbneck_plugin.comparison import compare as comparison
    saved, saved_cpu = dict(comparison.RUN_TO_RUN_FLOOR_PCT), comparison.CPU_FLOOR_PCT
    saved_loaded = comparison.LOADED_CPU_FLOOR_PCT
    if floors:
        comparison.RUN_TO_RUN_FLOOR_PCT.update({k: v for k, v in floors.items() if k in saved})
        comparison.CPU_FLOOR_PCT = floors.get("cpu", saved_cpu)
        comparison.LOADED_CPU_FLOOR_PCT = floors.get("cpu_across_loads", saved_loaded)
    rows = []
    try:
        for kind, a, b in pairs(index):
            for evidence, k in (("all", 1), ("window only", 2)):
                c = comparison.compare_reports(sides[a][0], sides[b][0], timings=(sides[a][k], sides[b][k]))
                gate = c["verdict"] == "slower" and c["change_pct"] > 5
                rows.append({"pair": kind, "evidence": evidence, "baseline": a, "candidate": b,
                             "level": c["evidence"]["level"], "verdict": c["verdict"], "change_pct": c["change_pct"],
                             "gate_failed": gate, "p": c["p_value"], "cpu_change_pct": c["load"].get("cpu_change_pct")})
    finally:
        comparison.RUN_TO_RUN_FLOOR_PCT.clear()
        comparison.RUN_TO_RUN_FLOOR_PCT.update(saved)
        comparison.CPU_FLOOR_PCT = saved_cpu
        comparison.LOADED_CPU_FLOOR_PCT = saved_loaded
    return rows


def _half(rows):
    """The fit half: the even-numbered pairs (rows come in (all, window only) twos)."""
    return [r for i, r in enumerate(rows) if (i // 2) % 2 == 0]


def _largest(changes):
    """The largest |change| (%, as |log ratio|), rounded up to 5 %; None without any."""
    import math
    sizes = [abs(math.log1p(c / 100)) for c in changes if c is not None]
    return 5.0 * math.ceil(100 * math.expm1(max(sizes)) / 5.0) if sizes else None


def fit_floors(rows):
    """Per level, the largest |change| between same-load identical runs in the fit half (the
    even-numbered pairs of each kind), rounded up to 5 %; ``cpu``: of their CPU time per step;
    ``cpu_across_loads``: of the CPU time per step of identical runs at different loads."""
    fit = _half([r for r in rows if r["pair"] in ("identical, as is", "identical, busy")])
    across = _half([r for r in rows if r["pair"] in ("identical, as is -> busy", "identical, busy -> as is")])
    floors = {lvl: _largest([r["change_pct"] for r in fit if r["level"] == lvl]) for lvl in ("periods", "windows", "steps")}
    floors["cpu"] = _largest([r.get("cpu_change_pct") for r in fit])
    floors["cpu_across_loads"] = _largest([r.get("cpu_change_pct") for r in across])
    return {k: v for k, v in floors.items() if v is not None}, {id(r) for r in fit + across}


def table(rows, fit_ids):
    """Markdown: per pair kind and evidence, the judged pairs, gate failures and verdicts."""
    groups = {}
    for r in rows:
        if id(r) in fit_ids:
            continue
        groups.setdefault((r["pair"], r["evidence"]), []).append(r)
    out = ["| pairs | evidence (level) | n | failed the 5 % gate | slower | faster | inconclusive | no change | "
           "median change |", "|---|---|---|---|---|---|---|---|---|"]
    for (pair, ev), rs in groups.items():
        levels = "/".join(sorted({r["level"] for r in rs}))
        count = {v: sum(r["verdict"] == v for r in rs) for v in ("slower", "faster", "inconclusive", "no_change")}
        med = sorted(r["change_pct"] for r in rs)[len(rs) // 2]
        out.append(f"| {pair} | {ev} ({levels}) | {len(rs)} | {sum(r['gate_failed'] for r in rs)} | "
                   f"{count['slower']} | {count['faster']} | {count['inconclusive']} | {count['no_change']} | "
                   f"{med:+.1f} % |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs_dir")
    ap.add_argument("--make", action="store_true")
    ap.add_argument("--base", type=int, default=6)
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--changed", type=int, default=3)
    ap.add_argument("--markdown")
    args = ap.parse_args()
    if args.make:
        index = make_runs(args.runs_dir, args.base, args.busy, args.changed)
    else:
        with open(os.path.join(args.runs_dir, "runs.json")) as f:
            index = json.load(f)
    sides = load_sides(args.runs_dir, index)
    from tfbneck_plugin.comparison import compare as comparison
    floors, _ = fit_floors(evaluate(sides, index, floors={k: 0.0 for k in comparison.RUN_TO_RUN_FLOOR_PCT}))
    floors.setdefault("cpu", comparison.CPU_FLOOR_PCT)
    rows = evaluate(sides, index)
    _, fit_ids = fit_floors(rows)
    clocks = {k: sorted(r["clock_ms"] for r in index.values() if r["kind"] == k) for k in
              ["base", "busy"] + list(CHANGES)}
    text = "\n".join([
        f"Runs: {len(index)} (benchmarks/noise_job.py; base work {BASE_WORK}); each run's own clock, median ms per "
        "step, by kind: " + "; ".join(f"{k} {', '.join(f'{c:.2f}' for c in v)}" for k, v in clocks.items()),
        "",
        f"Floors fitted on the fit half (largest |change| of identical pairs, same load or, for cpu_across_loads, "
        f"different loads; rounded up to 5 %): {floors}; "
        f"in use (tfbneck_plugin.comparison.compare.RUN_TO_RUN_FLOOR_PCT, CPU_FLOOR_PCT, LOADED_CPU_FLOOR_PCT): "
        f"{comparison.RUN_TO_RUN_FLOOR_PCT}, cpu {comparison.CPU_FLOOR_PCT}, cpu across loads "
        f"{comparison.LOADED_CPU_FLOOR_PCT}.",
        "", "Judged pairs (the fit half left out):", "", table(rows, fit_ids)])
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# `tfbneck compare`: false alarms and detection\n\n"
                    "Generated by `python benchmarks/compare_noise.py RUNS_DIR --make --markdown "
                    "docs/compare_noise.md`.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
