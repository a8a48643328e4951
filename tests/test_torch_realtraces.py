"""The real PyTorch traces' verdicts as the README states them (benchmarks/torch_realtraces.py
saved them in benchmarks/results/torch_realtraces.json; benchmarks/accuracy_readme.py renders
that file into the README's accuracy block): the saved rows are what the analyzer gives now,
and each row's "how it was checked" says only what tests/test_kineto.py asserts."""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import ROOT, SHARED, need_shared

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import torch_realtraces  # noqa: E402

TRACES = os.path.join(SHARED, "realtraces-torch")
WHAT = "../shared/realtraces-torch (real PyTorch traces)"


def _saved():
    with open(torch_realtraces.OUT, encoding="utf-8") as f:
        return json.load(f)


def test_saved_rows_are_what_the_analyzer_gives_now():
    traces = need_shared(TRACES, WHAT)
    diff = torch_realtraces.differences(_saved(), traces)
    assert not diff, ("benchmarks/results/torch_realtraces.json differs from a live analysis: run "
                      "python benchmarks/torch_realtraces.py, then python benchmarks/accuracy_readme.py:\n"
                      + "\n".join(diff))


def test_every_folder_gives_a_report_or_a_one_line_reason():
    rows = _saved()
    assert [r["folder"] for r in rows] == sorted(torch_realtraces.WHAT)
    for r in rows:
        if r["status"] == "ok":
            assert r["bottleneck"] and r["cause"] and r["confidence"] is not None and r["shares"], r
        else:
            assert r["error"] and "\n" not in r["error"] and "Traceback" not in r["error"], r
        assert r["what"] and r["checked"] and "not checked" not in r["checked"], r


def test_what_each_row_says_was_checked_is_what_test_kineto_asserts():
    """``checked`` says the steps (and, where the file shows it by hand, the cause) are
    asserted: tests/test_kineto.py's REAL holds those facts; the saved rows agree with it,
    and the HTA comparison is there with its numbers."""
    from test_kineto import REAL
    rows = {r["folder"]: r for r in _saved()}
    assert set(rows) == set(REAL)
    for folder, want in REAL.items():
        r = rows[folder]
        assert r["steps"] == want["steps"], folder
        if want["cause"]:
            assert r["cause"] == want["cause"] and "cause asserted" in r["checked"], folder
        else:
            assert "cause asserted" not in r["checked"], folder
    hta = rows[torch_realtraces.HTA_FOLDER]["hta"]
    assert hta and f"{hta['compute_pct']} % compute" in rows[torch_realtraces.HTA_FOLDER]["checked"]
    # tfbneck's device share and HTA's compute share of the same trace agree within 2 points
    device = dict((c, pct) for c, _, pct in rows[torch_realtraces.HTA_FOLDER]["shares"])["device_compute"]
    assert device == pytest.approx(hta["compute_pct"], abs=2)
