"""compare pairs a layer's ops across runs that named its scopes differently, and still shows a
real change, on real TensorFlow 2.21 / Keras 3 runs of one Dense MLP (tests/data/compare_renames,
made by its make.py): ``once`` (the model built once), ``twice`` (built twice in one process, the
second trained: every layer scope renamed) and ``wider`` (the second hidden layer 8x wider).

The layer scopes each trace gave are read here from the reports' op rows, not from the comparison.
"""
import json
import os
import re
import subprocess

import pytest
from conftest import ROOT, tfbneck_cmd

from tfbneck_plugin.comparison.compare import compare
from tfbneck_plugin.comparison.ops import matched_name, paired_layers

DATA = os.path.join(ROOT, "tests", "data", "compare_renames")
DENSE = re.compile(r"/(dense(?:_\d+)*)/")


def _compare(before, after):
    (c,) = compare(os.path.join(DATA, before), os.path.join(DATA, after))["comparisons"]
    return c


def _dense_scopes(name):
    """The dense layer scopes in a run's op rows, in instance order (``dense_1``, ``dense_1_2``...)."""
    r = subprocess.run(tfbneck_cmd() + ["analyze", os.path.join(DATA, name), "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (session,) = json.loads(r.stdout)["sessions"]
    return session, {m.group(1) for t in session["top_ops"] for m in [DENSE.search(t["name"])] if m}


def test_the_traces_name_the_same_layers_differently():
    _, once = _dense_scopes("once")
    _, twice = _dense_scopes("twice")
    assert len(once) == len(twice) == 3 and not once & twice


def test_renamed_layers_pair_up():
    """Each Dense layer of ``once`` is one row with the same layer of ``twice``: no op or scope is
    said to be in one side's top ops only because of its name, and each side's time of a paired
    layer is that of its own scope's ops."""
    session_b, once = _dense_scopes("once")
    session_a, twice = _dense_scopes("twice")
    c = _compare("once", "twice")
    scopes = {r["scope"]: r for r in c["op_changes"]["scopes"]}
    key = lambda s: tuple(int(n) for n in s.split("_")[1:])  # noqa: E731  instance numbers: creation order
    for k, (b, a) in enumerate(zip(sorted(once, key=key), sorted(twice, key=key))):
        row = scopes["sequential/dense" + (f"[{k}]" if k else "")]
        assert "only_in" not in row
        for side, scope, want in ((session_b, b, "baseline_ms"), (session_a, a, "candidate_ms")):
            ms = sum(sum(t["self_ms_steps"]) / len(t["self_ms_steps"]) for t in side["top_ops"]
                     if f"/{scope}/" in t["name"])
            assert row[want] == pytest.approx(ms, abs=2e-3)
    renamed = [r for r in c["op_changes"]["ops"] if r.get("only_in") and "dense" in r["name"]]
    for r in renamed:  # an op below the other side's cut, never a rename: its layer is on both sides
        assert r["baseline_ms" if r["only_in"] == "candidate" else "candidate_ms"] == 0
        layer = r["name"].rsplit("/", 2)[0]
        assert layer in scopes and "only_in" not in scopes[layer]


def test_a_real_change_still_shows():
    """``wider``'s second hidden layer has 1024 units: its forward MatMul grows, the first layer's
    does not grow as much; the comparison says so on the second layer's row."""
    c = _compare("once", "wider")
    ops = {r["name"]: r for r in c["op_changes"]["ops"]}
    scopes = {r["scope"]: r for r in c["op_changes"]["scopes"]}
    second = scopes["sequential/dense[1]"]
    assert second["change_ms"] > 0 and second["p_value"] < c.get("alpha", 0.05)
    assert second["change_ms"] > scopes["sequential/dense"]["change_ms"]
    assert any(n.startswith("sequential/dense[1]/") and r["change_ms"] > 0 for n, r in ops.items())


def test_paired_layers_by_order_and_summed_where_the_counts_differ():
    b = [["sequential_1", "dense_1"], ["sequential_1", "dense_1_2"], ["sequential_1", "dense_2_1"], ["adam"]]
    a = [["sequential_1_1", "dense_5_1"], ["sequential_1_1", "dense_3_1"], ["sequential_1_1", "dense_4_1"]]
    mb, ma = paired_layers(b, a)
    assert [mb[tuple(p)] for p in b[:3]] == [("sequential", "dense"), ("sequential", "dense[1]"),
                                            ("sequential", "dense[2]")]
    assert ma[("sequential_1_1", "dense_3_1")] == ("sequential", "dense")
    assert ma[("sequential_1_1", "dense_5_1")] == ("sequential", "dense[2]")
    assert mb[("adam",)] == ("adam",)
    # One side keeps two of the three layers: the three cannot be paired one by one, so they are summed.
    mb, ma = paired_layers(b[:3], a[:2])
    assert {mb[tuple(p)] for p in b[:3]} == {ma[tuple(p)] for p in a[:2]} == {("sequential", "dense")}
    assert matched_name("StatefulPartitionedCall/sequential_1/dense_1_2/MatMul_1") == "sequential/dense/MatMul"
