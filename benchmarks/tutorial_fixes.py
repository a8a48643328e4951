"""The first fix tfbneck gave each run of the tutorial corpus (``benchmarks/tutorial_corpus.py``),
applied as its code says and measured: did it make the run faster, and by how much?

    python benchmarks/tutorial_fixes.py runs [--load idle|busy] [--only RUN,RUN]   # TensorFlow
    python benchmarks/tutorial_fixes.py table                                      # from the JSON

For each row of ``benchmarks/tutorial_corpus.json`` (both halves, each load) whose first fix
can be applied to its script on this machine (:data:`APPLIED`: the fix's own snippet written
into the script's pipeline or ``compile``), one process builds the script twice, as it was and
with the fix, each with its own model (same seed), and times them alternately :data:`REPS`
times by the job's own clock: the wall time of a ``fit`` (or the custom loop) of
:data:`tutorial_corpus.STEPS` batches over that count, the fit's own start included alike on
both sides (which only understates a gain), after one warm-up fit each (tracing, the first
epoch's start). The fix's measured gain is the fastest time per batch before over the fastest
after: on a 2-core machine one side's rounds were seen to split between two modes (113-120 and
213-214 ms for the same fit), where medians of a few rounds pick either. Fixes that need what
the machine lacks (``use_gpu``) or that no script change expresses (``more_cores``) are listed
as not measured, with why.

Results: ``benchmarks/results/tutorial_fixes.json`` (merged by load); ``--load busy`` runs
beside ``../shared/tools/under-load -j 2`` as the corpus does.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tutorial_corpus as tc  # noqa: E402

RESULTS = os.path.join(HERE, "results", "tutorial_fixes.json")
OUT = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tfbneck-tutorial-fixes")
#: Before and after alternate this many times in one process.
REPS = 4
#: The fixes this benchmark applies, by script family: the fix's snippet in the script's terms.
APPLIED = {
    "cache": ("imgfolder_aug", "textvec", "jpeg_cached"),
    "parallel_map": ("textvec",),
    "vectorise_map": ("tfrecord_loop",),
    "tfdata_ops": ("pyds", "numpy_gen"),
    "steps_per_execution": ("imgfolder_aug", "jpeg_cached", "textvec", "numpy_gen", "pyds", "inmem"),
}
#: Why a fix is not measured here.
NOT_APPLIED = {"use_gpu": "this machine has no GPU", "more_cores": "this machine has 2 cores",
               "xla": "measured separately (benchmarks/xla_pairs.py)"}
#: steps_per_execution's value in the fix's snippet (analysis/advice.py).
SPE = 32


def _tf_augment(tf, passes):
    """_np_augment's work as tf ops on a batch: ``passes`` times tanh(x + noise), reversed rows
    half the time."""
    def augment(x, y):
        for _ in range(passes):
            x = tf.math.tanh(x + tf.random.normal(tf.shape(x), stddev=0.01))
        return tf.cond(tf.random.uniform(()) < 0.5, lambda: tf.reverse(x, [0]), lambda: x), y
    return augment


def _fixed_data(cfg, fix, folder, tf, keras, np):
    """The script's training data with ``fix`` applied (the model is unchanged), or None when
    the fix only changes ``compile``."""
    fam, batch = cfg["family"], cfg.get("batch", 32)
    if fix == "steps_per_execution":
        return None
    if fam == "imgfolder_aug" and fix == "cache":
        ds = keras.utils.image_dataset_from_directory(tc._images(folder), image_size=(tc.IMG, tc.IMG),
                                                      batch_size=batch, verbose=False).cache()
        augment = keras.Sequential([keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1),
                                    keras.layers.RandomZoom(0.1)])
        ds = ds.map(lambda x, y: (augment(x, training=True), y), num_parallel_calls=tf.data.AUTOTUNE)
        return ds.repeat().prefetch(tf.data.AUTOTUNE)
    if fam == "textvec":
        # The script's pipeline (tutorial_corpus._build), its map rebuilt with the fix.
        texts, labels, vectorize = tc._text_data(keras, np)
        ds = tf.data.Dataset.from_tensor_slices((texts, labels)).shuffle(2048).batch(batch)
        if fix == "parallel_map":
            ds = ds.map(lambda x, y: (vectorize(x), y), num_parallel_calls=tf.data.AUTOTUNE)
        else:
            ds = ds.map(lambda x, y: (vectorize(x), y)).cache()
        return ds.repeat().prefetch(tf.data.AUTOTUNE)
    if fam == "tfrecord_loop" and fix == "vectorise_map":
        tc._build(cfg, folder, tf, keras, np)  # writes the records
        spec = {"x": tf.io.FixedLenFeature([tc.FEATURES], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

        def parse_batch(records):
            ex = tf.io.parse_example(records, spec)
            v = ex["x"]
            for _ in range(cfg["passes"]):
                v = tf.math.tanh(v + tf.random.normal(tf.shape(v), stddev=0.01))
            return v, tf.cast(ex["y"], tf.int32)
        ds = tf.data.TFRecordDataset(os.path.join(folder, "rows.tfrecord")).repeat().batch(batch)
        return ds.map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    if fam in ("pyds", "numpy_gen") and fix == "tfdata_ops":
        rows = batch * 16
        x = np.random.default_rng(0).normal(size=(rows, tc.FEATURES)).astype("float32")
        y = np.random.default_rng(1).integers(0, 10, size=rows).astype("int32")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
        passes = 6 if fam == "pyds" else cfg["passes"]
        return ds.map(_tf_augment(tf, passes), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    raise ValueError(f"{fix} is not applied to {fam}")


def _timed(model, data, tf, keras, loop) -> float:
    """ms per batch of one fit (or loop) of STEPS batches, by wall time."""
    start = time.perf_counter()
    tc._train(model, data, tf, keras, loop)
    return (time.perf_counter() - start) * 1e3 / tc.STEPS


def job(name: str, fix: str, folder: str) -> None:
    """Before and after ``fix`` for run ``name``, alternately; writes ``times.json``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf
    cfg = tc.RUNS[name]
    arms = []
    for fixed in (False, True):
        tf.random.set_seed(0)
        keras.utils.set_random_seed(0)
        data, model, loop = tc._build(cfg, folder, tf, keras, np)
        if fixed:
            data = _fixed_data(cfg, fix, folder, tf, keras, np) or data
        loop = {} if loop else None
        if loop is None:
            spe = SPE if fixed and fix == "steps_per_execution" else 1
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          steps_per_execution=spe)
        _timed(model, data, tf, keras, loop)  # warm-up
        arms.append((model, data, loop))
    before, after = [], []
    for _ in range(REPS):
        before.append(_timed(*arms[0][:2], tf, keras, arms[0][2]))
        after.append(_timed(*arms[1][:2], tf, keras, arms[1][2]))
    with open(os.path.join(folder, "times.json"), "w") as f:
        json.dump({"before_ms": before, "after_ms": after}, f)


def _rows(load: str, only) -> list:
    with open(tc.TABLE_JSON) as f:
        rows = [r for r in json.load(f)["rows"] if r["load"] == load and r.get("first_fix")]
    return [r for r in rows if not only or r["run"] in only]


def run_all(load: str, only, out: str = OUT) -> list:
    """Measure each row's first fix under ``out``/``load``; returns the result rows."""
    import numpy as np
    results = []
    for r in _rows(load, only):
        name, fix = r["run"], r["first_fix"]
        base = {"run": name, "half": r["half"], "load": load, "truth": r["truth"], "cause": r.get("cause"),
                "fix": fix, "predicted": r.get("first_fix_speedup")}
        fam = tc.RUNS[name]["family"]
        if fam not in APPLIED.get(fix, ()):
            results.append(base | {"measured": None, "why_not": NOT_APPLIED.get(fix, f"not applied to {fam} here")})
            continue
        folder = os.path.join(out, load, f"{name}-{fix}")
        os.makedirs(folder, exist_ok=True)
        cmd = [sys.executable, os.path.abspath(__file__), "job", name, fix, folder]
        if load == "busy":
            cmd = [tc.UNDER_LOAD, "-j", "2"] + cmd
        started = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=tc.REPO))
        if proc.returncode != 0:
            print(f"{name} {fix}: failed: {proc.stderr.strip().splitlines()[-3:]}", flush=True)
            continue
        with open(os.path.join(folder, "times.json")) as f:
            t = json.load(f)
        b, a = float(np.min(t["before_ms"])), float(np.min(t["after_ms"]))
        results.append(base | {"before_ms": round(b, 2), "after_ms": round(a, 2), "measured": round(b / a, 2)})
        print(f"{name} {fix}: {b:.2f} -> {a:.2f} ms per batch ({b / a:.2f}x) in {time.time() - started:.0f} s",
              flush=True)
    return results


def save(rows: list, load: str) -> None:
    """Merge ``rows`` into the results: a row replaces the saved one of the same run and load."""
    kept = []
    made = {(r["run"], load) for r in rows}
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            kept = [r for r in json.load(f)["rows"] if (r["run"], r["load"]) not in made]
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"rows": kept + rows}, f, indent=1)


def table(rows: list, which: str = "judged") -> str:
    """The markdown table of one half's first fixes."""
    lines = ["| run | load | verdict | first fix | measured | predicted |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["half"] != which:
            continue
        measured = f"{r['measured']:.2f}x" if r.get("measured") else f"not measured: {r.get('why_not')}"
        predicted = f"{r['predicted']:.2f}x" if r.get("predicted") else "no prediction"
        lines.append(f"| {r['run']} | {r['load']} | {r.get('cause')} | `{r['fix']}` | {measured} | {predicted} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["runs", "table", "job"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--load", default="idle", choices=["idle", "busy"])
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    if a.command == "job":
        job(*a.args[:3])
    elif a.command == "runs":
        save(run_all(a.load, [n for n in a.only.split(",") if n], a.out), a.load)
    else:
        with open(RESULTS) as f:
            print(table(json.load(f)["rows"]))


if __name__ == "__main__":
    main()
