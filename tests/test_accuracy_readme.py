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
