"""README.md's accuracy section, rendered from the corpora's saved results (no runs, no TensorFlow):

    python benchmarks/accuracy_readme.py            # rewrite the block between the accuracy markers
    python benchmarks/accuracy_readme.py --check    # exit 1 when README.md's block differs

Sources, each made by its own benchmark (their docstrings say how, and which half is judged):

- ``benchmarks/tutorial_corpus.json`` (``benchmarks/tutorial_corpus.py score``): tutorial-style
  scripts with their truth by ablation; the judged half's verdicts, and the input's modelled
  worth against the ablation's measured gain.
- ``benchmarks/pairs_corpus.json`` (``benchmarks/pairs_corpus.py score``): before/after pairs
  changing one thing; the validation half's predicted against measured time per batch.
- ``benchmarks/results/torch_corpus.json`` (``benchmarks/torch_corpus.py --json``), where
  present: PyTorch runs made by script with their truth by ablation.
- ``benchmarks/results/stability.json`` (``benchmarks/tutorial_corpus.py stability``), where
  present: the same tutorial-style scripts run again and again, the cause of each run.

Nothing here is fitted: the numbers are the judged halves' as the benchmarks saved them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
README = os.path.join(REPO, "README.md")
TUTORIAL = os.path.join(HERE, "tutorial_corpus.json")
PAIRS = os.path.join(HERE, "pairs_corpus.json")
TORCH = os.path.join(HERE, "results", "torch_corpus.json")
STABILITY = os.path.join(HERE, "results", "stability.json")
BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"


def _load(path: str):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def tutorial_lines(data: dict) -> list:
    """The judged half of the tutorial corpus: a table and its two summary sentences."""
    rows = [r for r in data["rows"] if r["half"] == "judged" and r.get("named")]
    right = sum(1 for r in rows if r["right"])
    sure_wrong = sum(1 for r in rows if r["wrong_confident"])
    out = [f"**Verdicts on tutorial-style scripts** (the judged half of `benchmarks/tutorial_corpus.py`: "
           f"image folders with augmentation layers, cached JPEGs, `TextVectorization`, numpy generators, "
           f"PyDatasets, TFRecord loops, arrays; truth by ablation: input-bound from a "
           f"{data['input_limited']}x gain on cached batches, model-bound under {data['device_limited']}x): "
           f"**{right} of {len(rows)} right, {sure_wrong} wrong at confidence 0.7 or more**.", "",
           "| run | load | ablation gain | truth | verdict | confidence | modelled input gain |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        worth = "-" if r.get("input_worth") is None else f"{r['input_worth']:.2f}x"
        mark = "" if r["right"] else " (wrong)"
        out.append(f"| {r['run']} | {r['load']} | {r['gain']:.2f}x | {r['truth']} | {r['named']} ({r['cause']}){mark} "
                   f"| {r['confidence']} | {worth} |")
    worths = [abs(r["input_worth"] / r["gain"] - 1) * 100 for r in rows if r.get("input_worth")]
    if worths:
        out += ["", f"The input's modelled worth against its measured one (the ablation's gain): median error "
                    f"{statistics.median(worths):.0f} %, largest {max(worths):.0f} % over {len(worths)} runs. "
                    "To measure it on your own run: `tfbneck_plugin.measure_input_cost` "
                    "([measure the input's cost](docs/verdicts.md#measure-the-inputs-cost-instead-of-modelling-it))."]
    return out


def pairs_lines(data: dict) -> list:
    """The validation half of the before/after pairs: error of the predicted time per batch."""
    v = data["validation"]
    fixes = sorted({r["fix"] for r in data["rows"] if r["half"] == "validation"})
    return [f"**What each fix is worth** (the validation half of `benchmarks/pairs_corpus.py`: {v['pairs']} real "
            f"before/after pairs changing one thing: {', '.join(f'`{f}`' for f in fixes)}): {v['predicted']} "
            f"predicted, median error {v['median_abs_error_pct']} %, 90th percentile {v['p90_abs_error_pct']} %, "
            f"{v['within_25_pct']} % within 25 %, wrong direction: "
            f"{', '.join(v['wrong_direction']) or 'none'} ([every pair](docs/predictions.md))."]


def torch_lines(rows: list) -> list:
    """PyTorch runs made by script, judged half, with their truth by ablation."""
    judged = [r for r in rows if r.get("half") == "judged" and r.get("judged") in ("right", "wrong")]
    if not judged:
        return []
    right = sum(1 for r in judged if r["judged"] == "right")
    sure_wrong = sum(1 for r in judged if r["judged"] == "wrong" and (r.get("confidence") or 0) >= 0.7)
    return [f"**PyTorch runs** (the judged half of `benchmarks/torch_corpus.py`: `torch.profiler` traces of "
            f"DataLoader, worker-process, compute-bound and DDP-over-gloo loops on the CPU, truth by ablation): "
            f"**{right} of {len(judged)} right, {sure_wrong} wrong at confidence 0.7 or more** "
            "([PyTorch traces](docs/pytorch.md))."]


def stability_lines(data: dict) -> list:
    """The repeats of each script: how many gave its most common cause, and each run that gave
    another, with the confidence it claimed (a cause that flips between identical runs should
    not claim 0.7)."""
    rows = data["rows"]
    if not rows:
        return []
    runs = sum(r["repeats"] for r in rows)
    agreeing = sum(round(r["agreement"] * r["repeats"]) for r in rows)
    flips = [f"{r['run']} {c} at {conf} ({r['cause']} in the others)" for r in rows
             for c, conf in zip(r["causes"], r["confidences"]) if c != r["cause"]]
    loads = [x for r in rows for x in (r.get("loadavg") or [])]
    where = f", load average {min(loads)}-{max(loads)} on 2 cores" if loads else ""
    said = {"idle": "an idle machine", "busy": "beside ../shared/tools/under-load", "shared": "a machine other work shared"}
    times = "/".join(str(n) for n in sorted({r["repeats"] for r in rows}))
    return [f"**The same script again** (`benchmarks/tutorial_corpus.py stability`: {len(rows)} of those scripts "
            f"{times} times each, on {', '.join(said.get(x, x) for x in sorted({r['load'] for r in rows}))}{where}): "
            f"{agreeing} of {runs} runs "
            f"gave their script's most common cause; the others: {'; '.join(flips) or 'none'}."]


def render() -> str:
    """The block between the markers."""
    parts = []
    tutorial, pairs, torch, stability = _load(TUTORIAL), _load(PAIRS), _load(TORCH), _load(STABILITY)
    if tutorial:
        parts.append("\n".join(tutorial_lines(tutorial)))
    if stability and stability_lines(stability):
        parts.append("\n".join(stability_lines(stability)))
    if pairs:
        parts.append("\n".join(pairs_lines(pairs)))
    if torch:
        lines = torch_lines(torch)
        if lines:
            parts.append("\n".join(lines))
    missing = ([] if stability else ["the verdict's stability over repeats of one script"]) + [
        "XLA (`jit_compile`) switched on and off across models"]
    parts.append(f"Not yet in a corpus: {'; '.join(missing)}. No model predicts XLA's worth, so on a CPU host its advice "
                 "says to measure it (it slowed five of seven tutorial-style scripts, by 1.1x to 11x). Generated by "
                 "`python benchmarks/accuracy_readme.py` from the files above; more: "
                 "[accuracy and performance](docs/accuracy.md).")
    return "\n\n".join(parts) + "\n"


def readme_block(readme: str = README) -> str:
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    return text[text.index(BEGIN) + len(BEGIN) + 1:text.index(END)]


def write_readme(readme: str = README) -> None:
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    i, j = text.index(BEGIN) + len(BEGIN) + 1, text.index(END)
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text[:i] + render() + text[j:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md's block is not what the files give")
    a = ap.parse_args(argv)
    if a.check:
        same = readme_block() == render()
        print("README.md's accuracy block is current" if same else
              "README.md's accuracy block differs: run python benchmarks/accuracy_readme.py")
        return 0 if same else 1
    write_readme()
    print(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
