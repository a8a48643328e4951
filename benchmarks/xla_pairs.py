"""XLA switched on and off: the same tutorial-style model and input timed on the CPU with
``jit_compile=False`` and ``jit_compile=True``, to say what the advice "try XLA" is worth on a
CPU-only host (no model in tfbneck predicts it: ``whatif.WHY_NOT["xla"]``).

    python benchmarks/xla_pairs.py runs [--only NAME,NAME] [--rounds 3] [--out DIR]   # TensorFlow
    python benchmarks/xla_pairs.py table                                              # no TensorFlow
    python benchmarks/xla_pairs.py rescore     # the derived fields again from the saved rounds
    python benchmarks/xla_pairs.py list

``runs`` makes each pair of :data:`PAIRS` in its own Python process (a fresh TensorFlow, so no
compiled program or thread pool carries from one pair to the next) and writes
``benchmarks/results/xla_pairs.json`` (rows of pairs already there and not run again are kept).
``table`` prints every pair's row as markdown (what ``docs/accuracy.md`` shows;
``benchmarks/accuracy_readme.py`` renders it and the README's paragraph from the JSON).

One pair, in one process: the script's pipeline and model are built by
``benchmarks/tutorial_corpus.py``'s ``_build`` (the same tutorial-style scripts whose verdicts
that corpus judges), or here where that corpus has no such model (a GRU text classifier) or no
custom loop over that input. The model is cloned with the same initial weights, so that the two
sides differ in one thing only:

- ``fit`` pairs: ``model.compile("adam", SparseCategoricalCrossentropy(from_logits=True),
  jit_compile=False)`` against the clone compiled with ``jit_compile=True`` (Keras 3 on a
  CPU-only host resolves the default ``"auto"`` to ``False``, ``keras/src/trainers/trainer.py``
  ``_resolve_auto_jit_compile``, so the off side is what a user gets without asking). Keras
  silently turns ``jit_compile=True`` off for a model with a layer that does not support it
  (``model_supports_jit``: ``TextVectorization``, ``RandomZoom``...); each side's resolved
  ``model.jit_compile`` is saved, and a pair whose on side did not compile is left out of the
  counts.
- ``custom loop`` pairs: a training step (``GradientTape``, Adam) under
  ``tf.function(jit_compile=False)`` against the same step under ``tf.function(jit_compile=True)``.

Each side first runs a warm-up of :data:`WARMUP` batches (tracing, and XLA's compilation on the
on side; its wall time is saved as ``first_fit_s``), then the sides alternate for ``--rounds``
rounds, the order flipped each round (off-on, on-off, off-on...) so that a drift of the machine
hits both. A round is :data:`STEPS` batches timed by the job's own clock (``time.perf_counter``
at each batch's end: Keras' ``on_train_batch_end``, or after each call of the loop's step); its
time per batch is the time from the end of batch :data:`SKIP` to the end of the last batch over
the batches between (the iterator's start and the prefetch buffer's filling left out). Each
side's **fastest** round is kept: on a machine that other work shares, interference only adds
time, so the fastest round of each side is the nearest to that side's own cost, and the two are
compared at their least disturbed; the median round of each side and whether every round of one
side beat every round of the other (``separated``) are saved too.

``speedup`` is off / on (above 1: XLA made the step faster). A pair is ``faster`` or ``slower``
only when the fastest rounds' and the median rounds' ratios are both beyond :data:`SAME` on the
same side, else ``unclear`` (:func:`direction`). Times are ms per batch.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "xla_pairs.json")
DEFAULT_OUT = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tfbneck-xla-pairs")

#: Batches of each timed round, batches at its start left out of the timing, warm-up batches.
STEPS = 40
SKIP = 4
WARMUP = 8
#: Default number of rounds a side.
ROUNDS = 3
#: A speedup within this factor of 1 (either way) is "within noise": the spread of repeated
#: identical rounds on the shared 2-core machine is of this order.
SAME = 1.05
#: Seconds one pair's process may take.
TIMEOUT_S = 600

#: The pairs: name -> ``kind`` (what the model is, for the tables), ``api`` (``fit`` or
#: ``custom loop``) and ``build``, the settings of ``tutorial_corpus._build`` (its ``family``
#: picks the input pipeline, ``model`` the size); ``gru``: the model is :func:`_gru` on that input.
PAIRS = {
    "cnn-small": {"kind": "small CNN, cached JPEGs", "api": "fit",
                  "build": {"family": "jpeg_cached", "model": "small"}},
    "cnn-big": {"kind": "big CNN, cached JPEGs", "api": "fit",
                "build": {"family": "jpeg_cached", "model": "big"}},
    "cnn-small-aug": {"kind": "small CNN, image folder with augmentation in map", "api": "fit",
                      "build": {"family": "imgfolder_aug", "model": "small"}},
    "textvec-embed": {"kind": "TextVectorization map, embedding, pooling, dense", "api": "fit",
                      "build": {"family": "textvec", "model": "small"}},
    "textvec-conv": {"kind": "TextVectorization map, embedding, two Conv1D", "api": "fit",
                     "build": {"family": "textvec", "model": "big"}},
    "textvec-gru": {"kind": "TextVectorization map, embedding, GRU(64)", "api": "fit",
                    "build": {"family": "textvec", "model": "small"}, "gru": True},
    "mlp-128": {"kind": "MLP 1x128, arrays", "api": "fit",
                "build": {"family": "inmem", "model": "small"}},
    "mlp-512x2": {"kind": "MLP 2x512, arrays", "api": "fit",
                  "build": {"family": "inmem", "model": "mid", "batch": 128}},
    "mlp-1024x3": {"kind": "MLP 3x1024, arrays", "api": "fit",
                   "build": {"family": "inmem", "model": "big", "batch": 128}},
    "loop-tfrecord-mlp": {"kind": "MLP 3x1024, TFRecord map", "api": "custom loop",
                          "build": {"family": "tfrecord_loop", "model": "big", "passes": 1}},
    "loop-cnn-small": {"kind": "small CNN, cached JPEGs", "api": "custom loop",
                       "build": {"family": "jpeg_cached", "model": "small"}},
}


def direction(speedup: float, speedup_median: float) -> str:
    """``faster`` or ``slower`` when both the fastest rounds' ratio (``speedup``) and the median
    rounds' (``speedup_median``), off / on, are beyond :data:`SAME` on the same side of 1; else
    ``unclear`` (within :data:`SAME`, or the two disagree: the machine's noise decides it)."""
    if speedup >= SAME and speedup_median >= SAME:
        return "faster"
    if speedup <= 1 / SAME and speedup_median <= 1 / SAME:
        return "slower"
    return "unclear"


def derived(off_rounds: list, on_rounds: list) -> dict:
    """What a pair's rounds (ms per batch, each side) give: the fastest of each side (``off_ms``,
    ``on_ms``), ``speedup`` = off / on of those, ``speedup_median`` of the median rounds,
    ``separated`` (every round of one side faster than every round of the other), ``direction``."""
    off, on = min(off_rounds), min(on_rounds)
    median = statistics.median(off_rounds) / statistics.median(on_rounds)
    return {"off_ms": round(off, 3), "on_ms": round(on, 3), "speedup": round(off / on, 3),
            "speedup_median": round(median, 3),
            "separated": max(on_rounds) < min(off_rounds) or max(off_rounds) < min(on_rounds),
            "direction": direction(off / on, median)}


# ---- one pair (in its own process; imports TensorFlow) ---------------------------------------------

def _tutorial():
    """benchmarks/tutorial_corpus.py as a module (stdlib only at import)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import tutorial_corpus
    return tutorial_corpus


def _gru(keras):
    """A GRU text classifier on the TextVectorization pipeline's 60-token sequences."""
    return keras.Sequential([keras.Input((60,), dtype="int64"), keras.layers.Embedding(2001, 32),
                             keras.layers.GRU(64), keras.layers.Dense(2)])


def _fit_side(model, data, keras, steps: int) -> list:
    """Batch-end times (s) of one ``fit`` of ``steps`` batches."""
    ends = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.perf_counter())
    if isinstance(data, tuple):  # in-memory arrays, as tutorial_corpus._build gives them
        x, y, batch = data
        model.fit(x[:steps * batch], y[:steps * batch], batch_size=batch, epochs=1, verbose=0, callbacks=[Timer()])
    else:
        model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[Timer()])
    return ends


def _loop_step(model, tf, keras, jit: bool):
    """A custom loop's training step under ``tf.function(jit_compile=jit)``."""
    opt, loss_fn = keras.optimizers.Adam(), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt.build(model.trainable_variables)

    @tf.function(jit_compile=jit)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return train_step


def _loop_side(step, data, steps: int) -> list:
    ends, loss = [], None
    for x, y in data.take(steps):
        loss = step(x, y)
        ends.append(time.perf_counter())
    float(loss)  # the last step has finished
    ends[-1] = time.perf_counter()
    return ends


def _ms_per_batch(ends: list) -> float:
    """Time per batch (ms) from the end of batch :data:`SKIP` to the end of the last."""
    return (ends[-1] - ends[SKIP - 1]) / (len(ends) - SKIP) * 1e3


def job(name: str, folder: str, rounds: int, out: str) -> None:
    """One pair: warm-up, then ``rounds`` alternating rounds a side; writes ``out`` (JSON)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf
    cfg = PAIRS[name]
    tf.random.set_seed(0)
    keras.utils.set_random_seed(0)
    data, model, _ = _tutorial()._build(cfg["build"], folder, tf, keras, np)
    if cfg.get("gru"):
        model = _gru(keras)
    twin = keras.models.clone_model(model)
    twin.set_weights(model.get_weights())
    models = {"off": model, "on": twin}
    loop = cfg["api"] == "custom loop"
    if loop:
        steps = {side: _loop_step(m, tf, keras, side == "on") for side, m in models.items()}

        def side_run(side, n):
            return _loop_side(steps[side], data, n)
        jit = {"off": False, "on": True}
    else:
        for side, m in models.items():
            m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=side == "on")

        def side_run(side, n):
            return _fit_side(models[side], data, keras, n)
        jit = {side: bool(m.jit_compile) for side, m in models.items()}
    first = {}
    for side in ("off", "on"):
        started = time.perf_counter()
        side_run(side, WARMUP)
        first[side] = round(time.perf_counter() - started, 2)
    ms = {"off": [], "on": []}
    for r in range(rounds):
        for side in (("off", "on") if r % 2 == 0 else ("on", "off")):
            ms[side].append(_ms_per_batch(side_run(side, STEPS)))
    batch = data[2] if isinstance(data, tuple) else cfg["build"].get("batch", 32)
    with open(out, "w") as f:
        json.dump({"off_rounds_ms": ms["off"], "on_rounds_ms": ms["on"], "first_fit_s": first, "jit": jit,
                   "batch": batch, "tensorflow": tf.__version__, "keras": keras.__version__}, f)


# ---- the runs (no TensorFlow in this process) ------------------------------------------------------

def machine() -> dict:
    """The CPU's model name, the cores this process may use, and the OS."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cores": cores, "os": platform.platform(terse=True)}


def row(name: str, t: dict, load: list) -> dict:
    """One pair's saved row from its job's times (``t``) and the 1-minute load average before
    and after it."""
    cfg = PAIRS[name]
    return {"name": name, "kind": cfg["kind"], "api": cfg["api"], "batch": t["batch"],
            **derived(t["off_rounds_ms"], t["on_rounds_ms"]),
            "compiled": bool(t["jit"]["on"]) and not t["jit"]["off"],
            "off_rounds_ms": [round(x, 3) for x in t["off_rounds_ms"]],
            "on_rounds_ms": [round(x, 3) for x in t["on_rounds_ms"]],
            "first_fit_s": t["first_fit_s"], "tensorflow": t["tensorflow"], "keras": t["keras"],
            "machine": machine(), "loadavg": [round(x, 2) for x in load]}


def make_runs(out: str, only, rounds: int) -> list:
    """Run the pairs (``only``: these names) and merge their rows into :data:`RESULTS`."""
    os.makedirs(out, exist_ok=True)
    rows = {r["name"]: r for r in (load()["pairs"] if os.path.exists(RESULTS) else [])}
    for name in PAIRS:
        if only and name not in only:
            continue
        times = os.path.join(out, f"{name}.json")
        before, started = os.getloadavg()[0], time.time()
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "job", name, out, times, "--rounds",
                               str(rounds)], capture_output=True, text=True, timeout=TIMEOUT_S,
                              env=dict(os.environ, PYTHONPATH=REPO))
        if proc.returncode != 0:
            print(f"{name}: failed: {proc.stderr.strip().splitlines()[-3:]}", flush=True)
            continue
        with open(times) as f:
            rows[name] = row(name, json.load(f), [before, os.getloadavg()[0]])
        r = rows[name]
        print(f"{name}: off {r['off_ms']:.2f} ms, on {r['on_ms']:.2f} ms per batch, {r['speedup']:.2f}x "
              f"({time.time() - started:.0f} s, load {before:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)
        save([rows[n] for n in PAIRS if n in rows])
    return [rows[n] for n in PAIRS if n in rows]


def save(rows: list, where: dict = None) -> None:
    """Write :data:`RESULTS`: the rows, and what they share (``rounds``: the fewest of any pair;
    ``machine``: ``where``, else this one)."""
    loads = [x for r in rows for x in r["loadavg"]]
    rounds = min(min(len(r["off_rounds_ms"]), len(r["on_rounds_ms"])) for r in rows)
    data = {"benchmark": "benchmarks/xla_pairs.py", "rounds": rounds, "kept": "fastest",
            "steps_per_round": STEPS, "skipped_steps": SKIP, "warmup_steps": WARMUP, "same_within": SAME,
            "tensorflow": sorted({r["tensorflow"] for r in rows}), "machine": where or machine(),
            "loadavg": [min(loads), max(loads)] if loads else None, "pairs": rows}
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def load(path: str = RESULTS) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def table(data: dict) -> str:
    """Every pair as a markdown table (times in ms per batch, the fastest round of each side)."""
    lines = ["| pair | model and input | API | batch | off ms/batch | on ms/batch | speedup (off / on) "
             "| median rounds' | every round apart | first warm-up off / on (s) | load average |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["pairs"]:
        said = f"{r['speedup']:.2f}x" if r["direction"] == "unclear" else f"**{r['speedup']:.2f}x {r['direction']}**"
        if not r["compiled"]:
            said += " (Keras did not compile it with XLA)"
        lines.append(f"| {r['name']} | {r['kind']} | {r['api']} | {r['batch']} | {r['off_ms']:.2f} | "
                     f"{r['on_ms']:.2f} | {said} | {r['speedup_median']:.2f}x | {'yes' if r['separated'] else 'no'} | "
                     f"{r['first_fit_s']['off']:.1f} / {r['first_fit_s']['on']:.1f} | "
                     f"{min(r['loadavg']):.1f}-{max(r['loadavg']):.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["runs", "table", "list", "job", "rescore"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--only", default="", help="runs: these pairs (comma-separated names)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="rounds a side (at least 3)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="runs: folder for the inputs and each pair's times")
    a = ap.parse_args(argv)
    if a.command == "job":
        job(a.args[0], a.args[1], a.rounds, a.args[2])
    elif a.command == "runs":
        if a.rounds < 3:
            ap.error("--rounds: at least 3 a side")
        for r in make_runs(a.out, [n for n in a.only.split(",") if n], a.rounds):
            print(f"{r['name']}: {r['speedup']:.2f}x ({r['direction']})")
    elif a.command == "rescore":  # the derived fields again from the saved rounds (no TensorFlow)
        data = load()
        rows = [{**r, **derived(r["off_rounds_ms"], r["on_rounds_ms"])} for r in data["pairs"]]
        save(rows, data["machine"])
        print(table(load()))
    elif a.command == "list":
        for name, cfg in PAIRS.items():
            print(f"{name}: {cfg['api']}, {cfg['kind']}")
    else:
        print(table(load()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
