"""README.md's accuracy section is what the corpora's saved results give
(benchmarks/accuracy_readme.py renders it; the judged halves only)."""
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import accuracy_readme  # noqa: E402


def test_readme_accuracy_block_is_rendered_from_the_saved_results():
    assert accuracy_readme.readme_block() == accuracy_readme.render(), \
        "README's accuracy block differs from the corpora's results: run python benchmarks/accuracy_readme.py"


def test_the_pytorch_pages_tables_are_rendered_from_the_saved_results():
    for name, body in accuracy_readme.pytorch_doc_blocks().items():
        assert accuracy_readme.block_of(accuracy_readme.PYTORCH_DOC, *accuracy_readme._markers(name)) == body, \
            f"docs/pytorch.md's {name} table differs from its saved results: run python benchmarks/accuracy_readme.py"


def test_the_pytorch_line_counts_the_judged_half_only():
    rows = [dict(run="a", half="judged", judged="right", confidence=0.5),
            dict(run="b", half="judged", judged="wrong", confidence=0.75),
            dict(run="c", half="fit", judged="wrong", confidence=0.9),
            dict(run="d", half="judged", judged="ambiguous", confidence=0.9)]
    [line] = accuracy_readme.torch_lines(rows)
    assert "**1 of 2 right, 1 wrong at confidence 0.7 or more**" in line


def test_the_block_counts_the_judged_half_only():
    import json
    with open(accuracy_readme.TUTORIAL, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    judged = [r for r in rows if r["half"] == "judged" and r.get("named")]
    fit_only = {r["run"] for r in rows if r["half"] == "fit"} - {r["run"] for r in judged}
    block = "\n".join(accuracy_readme.tutorial_lines(json.load(open(accuracy_readme.TUTORIAL, encoding="utf-8"))))
    assert f"{sum(r['right'] for r in judged)} of {len(judged)} right" in block
    assert fit_only and not [run for run in fit_only if f"| {run} |" in block]


def test_the_accuracy_pages_xla_table_is_rendered_from_the_saved_results():
    blocks = accuracy_readme.accuracy_doc_blocks()
    assert "xla_pairs" in blocks, "benchmarks/results/xla_pairs.json is missing: python benchmarks/xla_pairs.py runs"
    assert accuracy_readme.block_of(accuracy_readme.ACCURACY_DOC, *accuracy_readme._markers("xla_pairs")) == \
        blocks["xla_pairs"], "docs/accuracy.md's XLA table differs from its saved results: " \
                             "run python benchmarks/accuracy_readme.py"


def test_the_xla_pairs_json_has_what_the_readme_renders():
    """benchmarks/results/xla_pairs.json: at least 8 pairs, fit and custom loop, each with the
    fields the README's sentence and the accuracy page's table read, consistent with its rounds."""
    import xla_pairs
    data = xla_pairs.load()
    for key in ("rounds", "kept", "steps_per_round", "skipped_steps", "warmup_steps", "same_within", "tensorflow",
                "machine", "loadavg", "pairs"):
        assert key in data, key
    assert data["kept"] == "fastest" and data["rounds"] >= 3 and data["machine"]["cores"] >= 1
    pairs = data["pairs"]
    names = [r["name"] for r in pairs]
    assert len(pairs) >= 8 and len(set(names)) == len(names) and set(names) <= set(xla_pairs.PAIRS)
    assert {r["api"] for r in pairs} == {"fit", "custom loop"}
    for r in pairs:
        for key in ("kind", "batch", "off_ms", "on_ms", "speedup", "direction", "compiled", "separated",
                    "speedup_median", "first_fit_s", "tensorflow", "machine", "loadavg"):
            assert key in r, (r["name"], key)
        assert len(r["off_rounds_ms"]) >= 3 and len(r["on_rounds_ms"]) >= 3, r["name"]
        assert r["off_ms"] == min(r["off_rounds_ms"]) and r["on_ms"] == min(r["on_rounds_ms"]), r["name"]
        assert abs(r["speedup"] - r["off_ms"] / r["on_ms"]) < 0.002, r["name"]
        assert r["direction"] == xla_pairs.direction(r["speedup"], r["speedup_median"]), r["name"]
        assert r["tensorflow"] in data["tensorflow"] and len(r["loadavg"]) == 2
    assert accuracy_readme.xla_line(data) in accuracy_readme.readme_block()


def test_the_xla_sentence_counts_each_direction_and_leaves_out_what_xla_did_not_compile():
    """A direction needs the fastest and the median rounds beyond 5 % the same way; a pair whose
    on side Keras did not compile is left out of the counts."""
    import xla_pairs

    def pair(name, off, on, compiled=True):
        return dict(name=name, api="fit", compiled=compiled, **xla_pairs.derived(off, on))
    data = dict(rounds=3, same_within=1.05, tensorflow=["2.x"], machine=dict(cores=2),
                pairs=[pair("a", [10, 11, 12], [5, 6, 7]), pair("b", [10, 10, 10], [20, 21, 22]),
                       pair("c", [10, 11, 12], [40, 41, 42]), pair("d", [10, 11, 12], [10.2, 10.5, 13]),
                       pair("f", [10, 20, 20], [9, 21, 22]),  # fastest faster, median slower: unclear
                       pair("e", [10, 10, 10], [30, 30, 30], compiled=False)])
    line = accuracy_readme.xla_line(data)
    assert "5 pairs on a 2-core CPU" in line
    assert "faster in 1 (by up to 2.00x, a)" in line
    assert "slower in 2 (from 2.00x to 4.00x the time per batch, c the most)" in line
    assert "5 with `model.compile`;" in line
    assert "unclear in 2 (fastest or median rounds within 5 %" in line and "1 left out" in line
