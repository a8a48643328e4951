"""Fit the what-if models' remaining constants on the FIT half of the pairs corpus, and
only on it (``benchmarks/pairs_corpus.py``: the half of a pair is a seeded hash of its name).

    python benchmarks/fit_whatif.py [--out DIR]      # DIR: the corpus runs (pairs_corpus.py runs)

For each constant, every value of its grid is tried and the one with the smallest median
absolute error (ties: the smaller 90th percentile) over the fit-half pairs of the changes
that use it is kept. Writes ``benchmarks/whatif_fit.json`` (committed): each constant's value,
the pairs it was fit on and the errors along the grid. ``tfbneck_plugin/analysis/whatif.py``
holds the values (tests/test_whatif.py checks they are these). No TensorFlow.

The constants: ``SHARE_GAIN`` (prefetch, parallel_map, pydataset_workers: the share of the
cores other processes used that the training takes once it wants more) and ``GAP_RECUR``
(steps_per_execution: the share of the gaps between ops that recur per batch). The
tf_function model's constants are measurements, not fits (whatif.py says on which runs; none
is a corpus pair).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pairs_corpus  # noqa: E402

OUT_JSON = os.path.join(HERE, "whatif_fit.json")
#: constant -> (the changes whose predictions use it, the grid of values tried).
CONSTANTS = {
    "SHARE_GAIN": (("prefetch", "parallel_map", "pydataset_workers"), [round(x, 2) for x in np.arange(0, 1.01, 0.05)]),
    "GAP_RECUR": (("steps_per_execution",), [round(x, 3) for x in np.arange(0, 1.01, 0.025)]),
}


def _errors(pairs, loaded, fixes):
    from tfbneck_plugin.analysis.whatif import predict
    errs = []
    for p in pairs:
        if p["fix"] not in fixes or loaded[p["name"]] is None:
            continue
        runs = loaded[p["name"]]
        measured = float(np.median([r["steps"]["time_per_batch_ms"] for r in runs["after"]]))
        preds = [predict({"fix": p["fix"], "code": p["code"]}, f)[0] for _, f in runs["before"]]
        if any(x is None for x in preds):
            continue
        point = float(np.median([x["time_per_batch_ms"] for x in preds]))
        errs.append(abs(point - measured) / measured * 100.0)
    return errs


def fit(out: str) -> dict:
    """Each constant's value fit on the fit half (see the module docstring)."""
    from tfbneck_plugin.analysis import whatif
    pairs = [p for p in pairs_corpus.all_pairs() if pairs_corpus.half(p["name"]) == "fit"]
    loaded = {p["name"]: pairs_corpus.load_pair(out, p) for p in pairs}
    result = {}
    for name, (fixes, grid) in CONSTANTS.items():
        keep = getattr(whatif, name)
        curve = []
        for value in grid:
            setattr(whatif, name, value)
            errs = _errors(pairs, loaded, fixes)
            if errs:
                curve.append((value, round(float(np.median(errs)), 1), round(float(np.percentile(errs, 90)), 1)))
        setattr(whatif, name, keep)
        if not curve:
            continue
        best = min(curve, key=lambda c: (c[1], c[2]))
        used = [p["name"] for p in pairs if p["fix"] in fixes and loaded[p["name"]] is not None]
        result[name] = {"value": best[0], "median_abs_error_pct": best[1], "p90_abs_error_pct": best[2],
                        "fit_pairs": used, "curve": [list(c) for c in curve]}
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=pairs_corpus.DEFAULT_OUT, help="folder of the corpus runs")
    a = ap.parse_args(argv)
    result = fit(a.out)
    with open(OUT_JSON, "w") as f:
        json.dump({"seed": pairs_corpus.SEED, "half": "fit", "constants": result}, f, indent=1)
        f.write("\n")
    for name, r in result.items():
        print(f"{name} = {r['value']}  (fit half: {len(r['fit_pairs'])} pairs, median abs error "
              f"{r['median_abs_error_pct']} %, p90 {r['p90_abs_error_pct']} %)")


if __name__ == "__main__":
    main()
