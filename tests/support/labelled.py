"""Tests that run real TensorFlow jobs with a known right answer leave their report here,
so that ``benchmarks/calibration.py --with-tests`` can add them to the calibration set."""
import json
import os
import re

from support.paths import TESTS

LABELLED = os.path.join(TESTS, "_artifacts", "labelled")


def record(name: str, report: dict, bottleneck: str, cause, why: str) -> None:
    """Keep ``report`` with the answer the calling test asserts (``name``: the test's name;
    ``cause`` None: the test knows the bottleneck only)."""
    os.makedirs(LABELLED, exist_ok=True)
    label = {"path": f"test:{name}", "bottleneck": bottleneck, "cause": cause, "why": why}
    with open(os.path.join(LABELLED, re.sub(r"[^\w.-]", "_", name) + ".json"), "w", encoding="utf-8") as f:
        json.dump({"label": label, "report": report}, f)
