"""Is ``confidence`` the chance that the verdict is right? The calibration table.

Runs the analyzer on every labelled input (``benchmarks/calibration_labels.json``: demo
runs, real traces and cases whose right answer is known, each with why) and, when present,
on the labelled reports the test suite leaves in ``tests/_artifacts/labelled/`` (real
TensorFlow runs made by the tests, each with the answer its test asserts). Prints the table
(confidence bins against the fraction right) and every wrong verdict.

    python benchmarks/calibration.py            # table of the committed set (what docs/accuracy.md shows)
    python benchmarks/calibration.py --with-tests   # plus the reports the last test run left

A verdict is right when its ``bottleneck`` and ``cause`` both match the label (some test runs label
the bottleneck only, when the cause depends on the machine's load at the time).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABELS = os.path.join(ROOT, "benchmarks", "calibration_labels.json")
TEST_LABELLED = os.path.join(ROOT, "tests", "_artifacts", "labelled")
#: Confidence bins (lower bound included, upper excluded; the last includes 1.0).
BINS = [(0.0, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 1.0)]
#: No wrong verdict is allowed at or above this confidence (issue 11's acceptance).
TRUSTED = 0.7


def labelled_reports(with_tests: bool = False) -> List[Tuple[Dict, Dict]]:
    """(label, session report) for every labelled input that is present on this machine."""
    from tfbneck_plugin.analysis.session import analyze_session
    from tfbneck_plugin.logdir import find_sessions

    with open(LABELS, encoding="utf-8") as f:
        labels = json.load(f)["labels"]
    out = []
    for label in labels:
        path = os.path.normpath(os.path.join(ROOT, label["path"]))
        if not os.path.exists(path):
            continue
        for session in find_sessions(path).sessions:
            out.append((label, analyze_session(session)))
    if with_tests:
        for name in sorted(glob.glob(os.path.join(TEST_LABELLED, "*.json"))):
            with open(name, encoding="utf-8") as f:
                item = json.load(f)
            out.append((item["label"], item["report"]))
    return out


def is_right(label: Dict, report: Dict) -> bool:
    """Bottleneck and cause match the label (a label without a cause checks the bottleneck only)."""
    if report.get("bottleneck") != label["bottleneck"]:
        return False
    return label.get("cause") is None or report.get("cause") == label["cause"]


def table(pairs: List[Tuple[Dict, Dict]]) -> str:
    """The calibration table as Markdown."""
    lines = ["| confidence | verdicts | right | fraction right |", "|---|---|---|---|"]
    for lo, hi in BINS:
        inside = [(lab, rep) for lab, rep in pairs
                  if lo <= float(rep.get("confidence") or 0.0) < hi or (hi == 1.0 and rep.get("confidence") == 1.0)]
        right = sum(is_right(lab, rep) for lab, rep in inside)
        frac = f"{right / len(inside):.2f}" if inside else "–"
        lines.append(f"| {lo:.1f}-{hi:.1f} | {len(inside)} | {right} | {frac} |")
    return "\n".join(lines)


def wrong(pairs: List[Tuple[Dict, Dict]]) -> List[str]:
    return [f"{lab['path']}: {rep.get('bottleneck')}/{rep.get('cause')} at {rep.get('confidence')}, "
            f"right is {lab['bottleneck']}/{lab['cause']}" for lab, rep in pairs if not is_right(lab, rep)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-tests", action="store_true", help="add the labelled reports of the last test run")
    args = ap.parse_args(argv)
    pairs = labelled_reports(args.with_tests)
    print(table(pairs))
    bad = wrong(pairs)
    print(f"\n{len(pairs)} labelled verdicts, {len(bad)} wrong" + (":" if bad else "."))
    for line in bad:
        print(f"- {line}")
    trusted_wrong = [(lab, rep) for lab, rep in pairs if not is_right(lab, rep) and (rep.get("confidence") or 0) >= TRUSTED]
    return 1 if trusted_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
