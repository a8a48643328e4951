"""README.md's accuracy section, rendered from the corpora's saved results (no runs, no TensorFlow),
the two PyTorch tables of docs/pytorch.md (between its ``realtraces`` and ``torch_corpus`` markers)
and the XLA pairs' table of docs/accuracy.md (between its ``xla_pairs`` markers):

    python benchmarks/accuracy_readme.py            # rewrite the blocks between the markers
    python benchmarks/accuracy_readme.py --check    # exit 1 when a block differs

Sources, each made by its own benchmark (their docstrings say how, and which half is judged):

- ``benchmarks/tutorial_corpus.json`` (``benchmarks/tutorial_corpus.py score``): tutorial-style
  scripts with their truth by ablation; the judged half's verdicts, and the input's modelled
  worth against the ablation's measured gain.
- ``benchmarks/results/tutorial_fixes.json`` (``benchmarks/tutorial_fixes.py runs``), where
  present: each tutorial run's first fix applied and timed before and after.
- ``benchmarks/pairs_corpus.json`` (``benchmarks/pairs_corpus.py score``): before/after pairs
  changing one thing; the validation half's predicted against measured time per batch.
- ``benchmarks/results/torch_corpus.json`` (``benchmarks/torch_corpus.py --json``), where
  present: PyTorch runs made by script with their truth by ablation.
- ``benchmarks/results/torch_realtraces.json`` (``benchmarks/torch_realtraces.py``), where
  present: the real PyTorch traces' verdicts, evidence and how each was checked
  (``tests/test_torch_realtraces.py`` keeps the file what the analyzer gives now).
- ``benchmarks/results/stability.json`` (``benchmarks/tutorial_corpus.py stability``), where
  present: the same tutorial-style scripts run again and again, the cause of each run.
- ``benchmarks/results/xla_pairs.json`` (``benchmarks/xla_pairs.py runs``), where present: the
  same model and input with XLA (``jit_compile``) off and on, on the CPU; a paragraph in the
  README, every pair in ``docs/accuracy.md`` (between its ``xla_pairs`` markers).

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
TORCH_REAL = os.path.join(HERE, "results", "torch_realtraces.json")
STABILITY = os.path.join(HERE, "results", "stability.json")
XLA = os.path.join(HERE, "results", "xla_pairs.json")
FIXES = os.path.join(HERE, "results", "tutorial_fixes.json")
BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"


#: The held-out trial (docs/accuracy.md, "Held out: a new user's own scripts"): run by a helper,
#: not from this repository's files, so stated here as measured there.
HELD_OUT = ("On a new user's own 5 scripts (15 runs, held out): verdicts 15 of 15 right, worths within 25 % in 10; "
            "Python inputs that take a core or more modelled 1.6-4x under "
            "([held out](docs/accuracy.md#held-out-a-new-users-own-scripts)).")

def _load(path: str):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def tutorial_lines(data: dict, fixes: dict = None) -> list:
    """The judged half of the tutorial corpus, one row per script with its loads side by side
    (``idle / busy``), the first fix as measured (``benchmarks/tutorial_fixes.py``), and the
    summary sentences."""
    rows = [r for r in data["rows"] if r["half"] == "judged" and r.get("named")]
    right = sum(1 for r in rows if r["right"])
    sure_wrong = sum(1 for r in rows if r["wrong_confident"])
    measured = {(f["run"], f["load"]): f for f in (fixes or {}).get("rows", [])}
    loads = sorted({r["load"] for r in rows}, key=lambda x: (x != "idle", x))
    out = [f"**Verdicts on tutorial-style scripts** (the judged half of `benchmarks/tutorial_corpus.py`: "
           f"image folders with augmentation layers, cached JPEGs, `TextVectorization`, numpy generators, "
           f"PyDatasets, TFRecord loops, arrays; run {' and '.join(loads)}, busy beside one spinning process per "
           f"core; truth by ablation: input-bound from a {data['input_limited']}x gain on cached batches, "
           f"model-bound under {data['device_limited']}x): **{right} of {len(rows)} right, {sure_wrong} wrong at "
           f"confidence 0.7 or more**. Each cell: {' / '.join(loads)}.", "",
           "| run | ablation gain | truth | verdict (confidence) | modelled input gain | first fix, measured |",
           "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["run"] for r in rows):
        mine = {r["load"]: r for r in rows if r["run"] == name}
        cells = [[], [], [], [], []]
        for load in loads:
            r = mine.get(load)
            if r is None:
                for c in cells:
                    c.append("-")
                continue
            fix = measured.get((name, load))
            cells[0].append(f"{r['gain']:.2f}x")
            cells[1].append(r["truth"])
            cells[2].append(f"{r['named']} ({r['cause']}, {r['confidence']})" + ("" if r["right"] else " **wrong**"))
            cells[3].append("-" if r.get("input_worth") is None else f"{r['input_worth']:.2f}x")
            cells[4].append(f"`{r.get('first_fix')}` " + ("not measured" if not fix or not fix.get("measured")
                                                         else f"{fix['measured']:.2f}x"))
        out.append(f"| {name} | " + " | ".join(" / ".join(c) for c in cells) + " |")
    worths = [abs(r["input_worth"] / r["gain"] - 1) * 100 for r in rows if r.get("input_worth")]
    if worths:
        out += ["", f"The input's modelled worth against its measured one (the ablation's gain): median error "
                    f"{statistics.median(worths):.0f} %, largest {max(worths):.0f} % over {len(worths)} runs. "
                    + HELD_OUT + " To measure it on your own run: `tfbneck_plugin.measure_input_cost` "
                    "([measure the input's cost](docs/verdicts.md#measure-the-inputs-cost-instead-of-modelling-it))."]
    done = [f for f in (fixes or {}).get("rows", []) if f["half"] == "judged" and f.get("measured")]
    if done:
        slower = [f for f in done if f["measured"] < 1.0]
        out[-1] += (f" First fixes applied as their code says and timed before and after "
                    f"(`benchmarks/tutorial_fixes.py`): {len(done)} measured, "
                    + (f"{len(slower)} slower: " + ", ".join(f"{f['run']} ({f['load']}) `{f['fix']}` "
                                                              f"{f['measured']:.2f}x" for f in slower)
                       if slower else "none slower")
                    + "; a GPU, the first fix on device-bound runs, is not measured on this CPU machine.")
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


def torch_lines(rows: list, real: list = None) -> list:
    """PyTorch: the judged half of the runs made by script, with their truth by ablation
    (``rows``), and the real traces' table (``real``), either where present."""
    judged = [r for r in rows or [] if r.get("half") == "judged" and r.get("judged") in ("right", "wrong")]
    said = []
    if judged:
        right = sum(1 for r in judged if r["judged"] == "right")
        sure_wrong = sum(1 for r in judged if r["judged"] == "wrong" and (r.get("confidence") or 0) >= 0.7)
        unclear = sum(1 for r in rows if r.get("half") == "judged" and r.get("judged") == "ambiguous")
        tc = _torch_corpus()
        left = (f" ({unclear} whose ablation gain was between {tc.NOT_BOUND:.2f}x and {tc.INPUT_BOUND:.2f}x "
                "left out)") if unclear else ""
        said.append(f"runs made by script (the judged half of `benchmarks/torch_corpus.py`: `torch.profiler` traces "
                    f"of DataLoader, worker-process, compute-bound and DDP-over-gloo loops on the CPU, truth by "
                    f"ablation): **{right} of {len(judged)} right, {sure_wrong} wrong at confidence 0.7 or more**"
                    f"{left}")
    if real:
        ok = [r for r in real if r["status"] == "ok"]
        said.append(f"{len(real)} real traces from Holistic Trace Analysis' test data, {len(ok)} of them a report, "
                    "each checked as far as the trace allows ([the table](docs/pytorch.md), from "
                    "`benchmarks/torch_realtraces.py`; `tests/test_torch_realtraces.py` checks it against the analyzer)")
    if not said:
        return []
    return ["**PyTorch** ([PyTorch traces](docs/pytorch.md)): " + "; ".join(said) + "."]


def _torch_corpus():
    """benchmarks/torch_corpus.py as a module (stdlib only at import; its runs import torch)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import torch_corpus
    return torch_corpus


def real_verdict(r: dict) -> str:
    """A real trace's verdict cell: ``bottleneck / cause (confidence)``, its steps; or the error."""
    if r["status"] != "ok":
        return f"{r['status']}: {r['error']}"
    steps = f"{r['steps']} step{'s' if r['steps'] != 1 else ''}" if r["steps"] else "no steps marked"
    hosts = f", {len(r['hosts'])} hosts" if len(r.get("hosts") or []) > 1 else ""
    return f"{r['bottleneck']} / {r['cause']} ({r['confidence']}), {steps}{hosts}"


def real_evidence(r: dict) -> str:
    """A real trace's evidence cell: its largest shares of the step (of the window without
    steps), or for a verdict of ``unknown`` its first evidence sentence; then the first fix."""
    if r["status"] != "ok":
        return "-"
    if r["bottleneck"] == "unknown" and r.get("lead"):
        said = r["lead"].rstrip(".")
    else:
        said = ", ".join(f"{label[0].lower() + label[1:] if label[1:2].islower() else label} {pct:g} %"
                         for _, label, pct in r["shares"]) + (" of the step" if r["steps"] else " of the window")
    return said + (f"; first fix `{r['fix']}`" if r.get("fix") else "")


def stability_lines(data: dict) -> list:
    """The repeats of each script, a row each: how many gave its most common cause, the
    confidences claimed, and each run that gave another with the confidence it claimed (a cause
    that flips between identical runs should not claim 0.7)."""
    rows = data["rows"]
    if not rows:
        return []
    runs = sum(r["repeats"] for r in rows)
    agreeing = sum(round(r["agreement"] * r["repeats"]) for r in rows)
    loads = [x for r in rows for x in (r.get("loadavg") or [])]
    where = f", load average {min(loads)}-{max(loads)} on 2 cores" if loads else ""
    said = {"idle": "an idle machine", "busy": "beside ../shared/tools/under-load", "shared": "a machine other work shared"}
    times = "/".join(str(n) for n in sorted({r["repeats"] for r in rows}))
    flipped = [r["flipped_max_confidence"] for r in rows if r.get("flipped_max_confidence") is not None]
    out = [f"**The same script again** (`benchmarks/tutorial_corpus.py stability`: {len(rows)} of those scripts "
           f"{times} times each, on {', '.join(said.get(x, x) for x in sorted({r['load'] for r in rows}))}{where}): "
           f"{agreeing} of {runs} runs gave their script's most common cause; a cause that flipped claimed at most "
           f"{max(flipped) if flipped else '-'}.", "",
           "| script | most common cause | runs agreeing | its confidences | the other runs |", "|---|---|---|---|---|"]
    for r in rows:
        others = [f"{c} {conf}" for c, conf in zip(r["causes"], r["confidences"]) if c != r["cause"]]
        mine = [conf for c, conf in zip(r["causes"], r["confidences"]) if c == r["cause"]]
        out.append(f"| {r['run']} | {r['cause']} | {round(r['agreement'] * r['repeats'])} of {r['repeats']} | "
                   f"{min(mine)}-{max(mine)} | {', '.join(others) or '-'} |")
    return out


def _xla_pairs():
    """benchmarks/xla_pairs.py as a module (stdlib only at import; its runs import TensorFlow)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import xla_pairs
    return xla_pairs


def xla_line(data: dict) -> str:
    """One sentence of the XLA pairs: how many XLA made faster, slower (with the range of the
    slowdowns, on / off), or left unclear (``xla_pairs.direction``), and the largest each way. Pairs whose on side
    Keras did not compile with XLA are left out and counted as such."""
    rows = [r for r in data["pairs"] if r["compiled"]]
    faster = sorted((r for r in rows if r["direction"] == "faster"), key=lambda r: -r["speedup"])
    slower = sorted((r for r in rows if r["direction"] == "slower"), key=lambda r: r["speedup"])
    unclear = [r for r in rows if r["direction"] == "unclear"]
    fits = sum(1 for r in rows if r["api"] == "fit")
    apis = [f"{fits} with `model.compile`"] if fits else []
    if len(rows) > fits:
        apis.append(f"{len(rows) - fits} custom loop{'s' if len(rows) - fits > 1 else ''} with `tf.function`")
    said = []
    if faster:
        said.append(f"faster in {len(faster)} (by up to {faster[0]['speedup']:.2f}x, {faster[0]['name']})")
    if slower:
        lo, hi = 1 / slower[-1]["speedup"], 1 / slower[0]["speedup"]
        span = f"{hi:.2f}x" if len(slower) == 1 else f"from {lo:.2f}x to {hi:.2f}x"
        said.append(f"slower in {len(slower)} ({span} the time per batch, {slower[0]['name']} the most)")
    if unclear:
        said.append(f"unclear in {len(unclear)} (fastest or median rounds within "
                    f"{round((data['same_within'] - 1) * 100)} %, or on opposite sides)")
    left = len(data["pairs"]) - len(rows)
    cores = data["machine"]["cores"]
    tf = ", ".join(data["tensorflow"])
    return (f"**XLA switched on and off** (`benchmarks/xla_pairs.py`: {len(rows)} pairs on a {cores}-core CPU, "
            f"TensorFlow {tf}, the same model and input with `jit_compile` off and on: {', '.join(apis)}; "
            f"the fastest of {data['rounds']} interleaved rounds a side): XLA was " + ", ".join(said)
            + (f"; {left} left out (Keras did not compile {'it' if left == 1 else 'them'} with XLA)" if left else "")
            + " ([every pair](docs/accuracy.md#xla-switched-on-and-off)). No model predicts XLA's worth, so on a "
              "CPU host its advice says to measure it.")


def render() -> str:
    """The block between the markers."""
    parts = []
    tutorial, pairs, torch, stability = _load(TUTORIAL), _load(PAIRS), _load(TORCH), _load(STABILITY)
    if tutorial:
        parts.append("\n".join(tutorial_lines(tutorial, _load(FIXES))))
    if stability and stability_lines(stability):
        parts.append("\n".join(stability_lines(stability)))
    real = _load(TORCH_REAL)
    lines = torch_lines(torch, real)
    if lines:
        parts.append("\n".join(lines))
    xla = _load(XLA)
    missing = ([] if stability else ["the verdict's stability over repeats of one script"]) + (
        [] if xla else ["XLA (`jit_compile`) switched on and off across models"])
    # the last paragraph: the fixes' worth, then (same paragraph, its own line) XLA's pairs and
    # what no corpus has yet
    fixes = "\n".join(pairs_lines(pairs)) + "\n" if pairs else ""
    said = xla_line(xla) + " " if xla else ""
    if missing:
        said += f"Not yet in a corpus: {'; '.join(missing)}. "
    parts.append(fixes + said + "Generated by "
                 "`python benchmarks/accuracy_readme.py` from the files above; more, with the confidence's "
                 "calibration, the slowdown trigger on 75 real runs and what the callback costs: "
                 "[accuracy and performance](docs/accuracy.md).")
    return "\n\n".join(parts) + "\n"


#: The PyTorch page, whose two tables are rendered here too.
PYTORCH_DOC = os.path.join(REPO, "docs", "pytorch.md")


def pytorch_doc_blocks() -> dict:
    """``docs/pytorch.md``'s generated blocks, by marker name (``<!-- NAME:begin -->``): the
    real traces' table, with what each trace is, and the runs made by script, every row."""
    real, corpus = _load(TORCH_REAL), _load(TORCH)
    out = {}
    if real:
        rows = ["| folder | what it is | verdict (confidence) | evidence | how it was checked |",
                "|---|---|---|---|---|"]
        rows += [f"| `{r['folder']}` | {r['what']} | {real_verdict(r)} | {real_evidence(r)} | {r['checked']} |"
                 for r in real]
        out["realtraces"] = "\n".join(rows) + "\n"
    if corpus:
        lines = [_torch_corpus().table(corpus), ""]
        for half in ("fit", "judged"):
            hr = [r for r in corpus if r["half"] == half and r["judged"] != "ambiguous"]
            lines.append(f"- {half} half: {sum(r['judged'] == 'right' for r in hr)}/{len(hr)} right (ambiguous left out)")
        bad = [r["run"] for r in corpus if r["judged"] == "wrong" and (r.get("confidence") or 0) >= 0.7]
        lines.append(f"- wrong at confidence >= 0.7: {', '.join(bad) or 'none'}")
        out["torch_corpus"] = "\n".join(lines) + "\n"
    return out


#: The accuracy page, whose table of the XLA pairs is rendered here too.
ACCURACY_DOC = os.path.join(REPO, "docs", "accuracy.md")


def accuracy_doc_blocks() -> dict:
    """``docs/accuracy.md``'s generated blocks, by marker name: every XLA pair (``xla_pairs``),
    where ``benchmarks/results/xla_pairs.json`` is present."""
    xla = _load(XLA)
    if not xla:
        return {}
    m = xla["machine"]
    where = (f"{m['cores']} cores of an {m['cpu']} ({m['os']}), TensorFlow {', '.join(xla['tensorflow'])}, "
             f"load average {xla['loadavg'][0]:.1f}-{xla['loadavg'][1]:.1f}")
    how = (f"{xla['rounds']} rounds a side of {xla['steps_per_round']} batches, the first {xla['skipped_steps']} "
           f"not timed, after a warm-up of {xla['warmup_steps']}; bold: faster or slower, the fastest and the "
           f"median rounds both beyond {round((xla['same_within'] - 1) * 100)} % the same way")
    said = xla_line(xla).replace(" ([every pair](docs/accuracy.md#xla-switched-on-and-off))", "")
    return {"xla_pairs": f"{where}; {how}.\n\n" + _xla_pairs().table(xla) + "\n\n" + said + "\n"}


#: Each page with generated blocks besides the README, and the function that renders them.
DOC_BLOCKS = ((PYTORCH_DOC, pytorch_doc_blocks), (ACCURACY_DOC, accuracy_doc_blocks))


def _markers(name: str):
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def block_of(path: str, begin: str = BEGIN, end: str = END) -> str:
    """The text between two marker lines of ``path``. Raises ValueError when a marker is missing."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text[text.index(begin) + len(begin) + 1:text.index(end)]


def write_block(path: str, body: str, begin: str = BEGIN, end: str = END) -> None:
    """Put ``body`` between the marker lines of ``path``."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    i, j = text.index(begin) + len(begin) + 1, text.index(end)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:i] + body + text[j:])


def readme_block(readme: str = README) -> str:
    return block_of(readme)


def write_readme(readme: str = README) -> None:
    write_block(readme, render())


def stale() -> list:
    """The generated blocks that differ from what the files give: ``README.md`` and
    ``docs/pytorch.md#NAME`` for each (empty when all are current)."""
    out = [] if readme_block() == render() else ["README.md"]
    for path, blocks in DOC_BLOCKS:
        for name, body in blocks().items():
            if block_of(path, *_markers(name)) != body:
                out.append(f"{os.path.relpath(path, REPO)}#{name}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when README.md's block or docs/pytorch.md's or docs/accuracy.md's are not what "
                         "the files give")
    a = ap.parse_args(argv)
    if a.check:
        late = stale()
        print("README.md's accuracy block and the docs' generated tables are current" if not late else
              f"{', '.join(late)} differ: run python benchmarks/accuracy_readme.py")
        return 1 if late else 0
    write_readme()
    for path, blocks in DOC_BLOCKS:
        for name, body in blocks().items():
            write_block(path, body, *_markers(name))
    print(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
