"""The six real PyTorch profiler traces kept beside the repository (``realtraces-torch`` in the
shared folder: ``$TFBNECK_SHARED``, else ``../shared``), each analysed through tfbneck's API,
with what each trace is and how its verdict was checked.

    python benchmarks/torch_realtraces.py            # write benchmarks/results/torch_realtraces.json
    python benchmarks/torch_realtraces.py --check    # exit 1 when a live analysis differs from it

Each folder is one session (``tfbneck_plugin.analyze`` of the folder, which reads and fills the
report cache; a changed analyzer never reads an old report there). A row (:func:`row`) keeps what
the README's accuracy table states (``benchmarks/accuracy_readme.py`` renders it):

    folder, status, error       "ok", or "error" with the report's one line
    bottleneck, cause, confidence
    steps, step_source, hosts   step count, where the steps came from, the session's hosts
    shares                      the report's largest breakdown share and the next when it is 1 % or
                                more: [category, its label, % of the step (of the window without steps)]
    lead                        the report's first evidence sentence (the README shows it for a
                                verdict of ``unknown``, whose shares are not what it rests on)
    fix                         the first recommendation's fix
    what, checked               fixed text: what the trace is (the folder's SOURCES.md, and the
                                file read by hand) and how the verdict was checked
    hta                         ns_resolution_rank0 only: Holistic Trace Analysis' temporal breakdown
                                of the same file (``pip install traceinsight``; its
                                ``get_temporal_breakdown``: compute, non-compute and idle, % of
                                the GPU's time), read when this script writes the file

What a row's "checked" says is asserted by ``tests/test_kineto.py`` (``REAL``: steps, the
device's vendor, and the cause where the file shows one by hand); ``tests/test_torch_realtraces.py``
asserts that the saved rows are what the analyzer gives now, so the README cannot drift from it.
No threshold was chosen on these traces.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
SHARED = os.environ.get("TFBNECK_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")
TRACES = os.path.join(SHARED, "realtraces-torch")
OUT = os.path.join(ROOT, "benchmarks", "results", "torch_realtraces.json")

#: folder -> what the trace is (the shared folder's SOURCES.md, and the file read by hand).
WHAT: Dict[str, str] = {
    "amd_mi250_minitoy": "a small training loop on an AMD MI250 (ROCm 6.2)",
    "distributed_info_missing": "the CPU side of a GPU job, without `distributedInfo`",
    "nccl_2gpu": "rank 0 of a 2-GPU NCCL job",
    "ns_resolution_rank0": "one V100, fractional-microsecond times",
    "sampled_128gpu": "ranks 0 and 1 of a 128-GPU job, events sampled",
    "simple_add_no_steps": "a GPU benchmark without `ProfilerStep#` markers",
}

#: folder -> how its verdict was checked (tests/test_kineto.py's REAL holds the facts read by
#: hand that these sentences say are asserted; ``{hta}``: :func:`hta_words`).
CHECKED: Dict[str, str] = {
    "amd_mi250_minitoy": "steps and vendor (AMD) asserted; the cause is not measured (a toy model's tiny "
                         "kernels make launch-bound plausible)",
    "distributed_info_missing": "steps and cause asserted: GPU runtime calls but no device events in the file",
    "nccl_2gpu": "steps and vendor asserted; the cause follows the breakdown, not measured otherwise",
    "ns_resolution_rank0": "steps, vendor and cause asserted; {hta}",
    "sampled_128gpu": "two hosts in one session, steps and cause asserted; the sampling keeps the confidence low",
    "simple_add_no_steps": "no steps asserted (step source none): the verdict covers the whole window",
}

#: The folder whose verdict is checked against HTA's temporal breakdown.
HTA_FOLDER = "ns_resolution_rank0"

#: The fields of a row that come from the analyzer (what ``--check`` and the test compare).
VERDICT_FIELDS = ("status", "error", "bottleneck", "cause", "confidence", "steps", "step_source", "hosts",
                  "shares", "lead", "fix")
#: The second largest share is kept when it is at least this much of the step (%; our choice:
#: a smaller one says nothing in a one-line evidence cell).
SHARE_MIN_PCT = 1.0


def folders(traces: str = TRACES) -> List[str]:
    """The trace folders under ``traces`` (sorted). Raises FileNotFoundError when it is absent."""
    return sorted(d for d in os.listdir(traces) if os.path.isdir(os.path.join(traces, d)))


def analysed(path: str) -> Dict:
    """The analyzer's fields of a row (:data:`VERDICT_FIELDS`) for the trace folder ``path``:
    one session through ``tfbneck_plugin.analyze``; a folder that cannot be searched, or that
    holds other than one session, is a row with status ``error`` and the one-line reason."""
    import tfbneck_plugin as tfb
    from tfbneck_plugin.errors import TfbneckError
    from tfbneck_plugin.schema import category_label
    try:
        reports = list(tfb.analyze(path))
    except TfbneckError as err:
        return {"status": "error", "error": str(err)}
    if len(reports) != 1:
        return {"status": "error", "error": f"{len(reports)} sessions in the folder, not one"}
    r = reports[0]
    if r.get("status") != "ok":
        return {"status": r.get("status"), "error": r.get("error")}
    ranked = sorted((r.get("breakdown_pct") or {}).items(), key=lambda kv: -kv[1])
    shares = ranked[:1] + [kv for kv in ranked[1:2] if kv[1] >= SHARE_MIN_PCT]
    first = (r.get("recommendations") or [{}])[0]
    return {"status": "ok", "error": None, "bottleneck": r.get("bottleneck"), "cause": r.get("cause"),
            "confidence": r.get("confidence"), "steps": (r.get("steps") or {}).get("count"),
            "step_source": r.get("step_source"), "hosts": list(r.get("hosts") or []),
            "shares": [[c, category_label(c, r.get("device_kind")), round(pct, 1)] for c, pct in shares],
            "lead": (r.get("evidence") or [None])[0], "fix": first.get("fix")}


def hta_breakdown(path: str) -> Optional[Dict[str, float]]:
    """HTA's temporal breakdown of the trace folder ``path`` (rank 0): ``compute_pct``,
    ``non_compute_pct``, ``idle_pct`` (% of the GPU's time); None when HTA is not installed."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    logging.disable(logging.WARNING)  # HTA logs its progress as warnings
    try:
        row = TraceAnalysis(trace_dir=path).get_temporal_breakdown(visualize=False).iloc[0].to_dict()
    finally:
        logging.disable(logging.NOTSET)
    return {"compute_pct": round(float(row["compute_time_pctg"]), 2),
            "non_compute_pct": round(float(row["non_compute_time_pctg"]), 2),
            "idle_pct": round(float(row["idle_time_pctg"]), 2)}


def hta_words(hta: Optional[Dict[str, float]]) -> str:
    """The HTA clause of :data:`CHECKED`."""
    if not hta:
        return "HTA's temporal breakdown not run here (pip install traceinsight)"
    return (f"HTA's temporal breakdown of the same file: {hta['compute_pct']} % compute, "
            f"{hta['idle_pct']} % idle")


def row(traces: str, folder: str, with_hta: bool = True) -> Dict:
    """One folder's row (module docstring)."""
    path = os.path.join(traces, folder)
    out: Dict = {"folder": folder, **analysed(path)}
    hta = hta_breakdown(path) if with_hta and folder == HTA_FOLDER else None
    if folder == HTA_FOLDER:
        out["hta"] = hta
    out["what"] = WHAT.get(folder, "(not described)")
    out["checked"] = CHECKED.get(folder, "not checked").format(hta=hta_words(hta))
    return out


def differences(saved: List[Dict], traces: str = TRACES) -> List[str]:
    """Where the saved rows differ from a live analysis of ``traces`` (one line each; empty
    when they agree): the folders present, and each row's :data:`VERDICT_FIELDS`."""
    live = {f: {"folder": f, **analysed(os.path.join(traces, f))} for f in folders(traces)}
    was = {r["folder"]: r for r in saved}
    out = [f"{f}: {'not saved' if f in live else 'saved but not in ' + traces}" for f in sorted(set(live) ^ set(was))]
    for f in sorted(set(live) & set(was)):
        for key in VERDICT_FIELDS:
            if live[f].get(key) != was[f].get(key):
                out.append(f"{f}: {key} saved {was[f].get(key)!r}, now {live[f].get(key)!r}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--traces", default=TRACES, help="the folder of trace folders (default: %(default)s)")
    ap.add_argument("--json", default=OUT, help="the rows' file (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="compare the saved rows with a live analysis; write nothing")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.traces):
        print(f"{a.traces}: no such folder (the shared folder's realtraces-torch; TFBNECK_SHARED says where it is)",
              file=sys.stderr)
        return 2
    if a.check:
        with open(a.json, encoding="utf-8") as f:
            diff = differences(json.load(f), a.traces)
        print("\n".join(diff) if diff else f"{a.json} is what the analyzer gives now")
        return 1 if diff else 0
    rows = [row(a.traces, f) for f in folders(a.traces)]
    for r in rows:
        verdict = (f"{r['bottleneck']} / {r['cause']} ({r['confidence']}), {r['steps']} steps"
                   if r["status"] == "ok" else f"{r['status']}: {r['error']}")
        print(f"{r['folder']}: {verdict}")
    with open(a.json, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    print(f"written: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
