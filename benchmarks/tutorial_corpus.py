"""A corpus of training scripts written the way TensorFlow's tutorials write them, each with
its truth measured by ablation, to judge tfbneck's verdicts on runs it was not built from.

Three separate commands, so that improving the rules never needs new runs:

    python benchmarks/tutorial_corpus.py runs  [--out DIR] [--only RUN,RUN] [--load busy]   # TensorFlow
    python benchmarks/tutorial_corpus.py score [--out DIR]    # no TensorFlow: analyse, judge, write JSON
    python benchmarks/tutorial_corpus.py table                # the judged half's table, from the JSON
    python benchmarks/tutorial_corpus.py list                 # the runs and their half
    python benchmarks/tutorial_corpus.py stability [--repeats N] [--load idle|busy] [--out DIR]
        # each of STABILITY_RUNS N times (profiled fit only, no ablation); then the verdicts'
        # agreement per script into benchmarks/results/stability.json (merged by load)

A run is one Python process: the script's pipeline and model, trained with
``BottleneckProfiler`` (one profiling window, system metrics every 50 ms) and timed by its own
clock (``time.perf_counter`` at every batch's end), then the **ablation**: the same model fed
from an in-memory cache of its pipeline's already-made batches (``from_tensor_slices`` over
the stacked batches, repeated, prefetched), timed the same way; the two alternate
:data:`REPS` times (:data:`REPS_BUSY` beside other work), seconds apart, so that both see the same machine. The truth is the ratio
of the mean time per batch (the real run's steps outside the profiled window and the warm-up)
to the ablation's: at least :data:`INPUT_LIMITED` means the input pipeline limits the run,
under :data:`DEVICE_LIMITED` that the model's math does; between the two the run is
``mixed`` and only the confidence is judged.

The scripts (each small: tens of seconds on a 2-core machine): an image folder read by
``image_dataset_from_directory`` with Keras augmentation layers in ``map``; the tutorial's
cached JPEG pipeline (``list_files`` -> decode/resize map -> ``cache()`` -> shuffle -> batch
-> prefetch); ``TextVectorization`` in ``map``; a numpy generator read through
``from_generator``; a ``PyDataset`` with worker threads and with worker processes; a
TFRecord pipeline read by a custom training loop; in-memory arrays given to ``fit``. Each in
a light and a heavy variant of input or model, so that both truths occur.

Each run's half (``fit`` or ``judged``) is a seeded hash of its name (:func:`half`), fixed
before any result: thresholds are chosen on the fit half only, and the table published
(README, ``docs/tutorial_corpus.md``) is the judged half's. ``--load busy`` runs the same
scripts beside ``../shared/tools/under-load`` (one spinning process per core).
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tfbneck-tutorial-corpus")
UNDER_LOAD = os.path.join(REPO, "..", "shared", "tools", "under-load")
TABLE_JSON = os.path.join(HERE, "tutorial_corpus.json")
TABLE_MD = os.path.join(REPO, "docs", "tutorial_corpus.md")
#: Seed of the fit/judged split.
SEED = 43
#: Ablation gain (real time per batch / cached batches' time per batch) from which the input
#: limits the run, and under which the model's math does (the issue's definitions).
INPUT_LIMITED = 1.25
DEVICE_LIMITED = 1.1
#: Real run and ablation alternate this many times in one process; beside other work,
#: :data:`REPS_BUSY` times: there one script's gain moved between 1.09x and 1.65x across
#: three runs of two alternations, and the truth is the median of each side's fits.
REPS = 2
REPS_BUSY = 4
#: Batches per fit, the profiled window's steps, and the steps left out of the timing at the
#: start of each fit (tf.function tracing, the first epoch's start).
STEPS = 48
WINDOW = (20, 24)
SKIP = 6
SAMPLE_INTERVAL_S = 0.05

#: The runs: name -> settings of :func:`_build`.
RUNS = {
    "imgfolder-aug-smallcnn": {"family": "imgfolder_aug", "model": "small"},
    "imgfolder-aug-bigcnn": {"family": "imgfolder_aug", "model": "big"},
    "jpeg-cached-smallcnn": {"family": "jpeg_cached", "model": "small"},
    "jpeg-cached-bigcnn": {"family": "jpeg_cached", "model": "big"},
    "textvec-small": {"family": "textvec", "model": "small"},
    "textvec-conv": {"family": "textvec", "model": "big"},
    "numpy-gen-heavy": {"family": "numpy_gen", "model": "small", "passes": 8},
    "numpy-gen-light": {"family": "numpy_gen", "model": "big", "passes": 1},
    "pyds-threads-w2": {"family": "pyds", "model": "small", "workers": 2, "mp": False},
    "pyds-procs-w2": {"family": "pyds", "model": "small", "workers": 2, "mp": True},
    "pyds-threads-bigmodel": {"family": "pyds", "model": "big", "workers": 2, "mp": False},
    "tfrecord-loop-heavy": {"family": "tfrecord_loop", "model": "small", "passes": 24},
    "tfrecord-loop-light": {"family": "tfrecord_loop", "model": "big", "passes": 1},
    "inmem-mlp": {"family": "inmem", "model": "mid", "batch": 128},
    "inmem-widemlp": {"family": "inmem", "model": "big", "batch": 128},
    "inmem-tinymlp": {"family": "inmem", "model": "small"},
    "textvec-bigbatch": {"family": "textvec", "model": "small", "batch": 256},
}


def half(name: str) -> str:
    """``fit`` or ``judged``: a seeded hash of the run's name, independent of any result."""
    digest = hashlib.sha256(f"{SEED}:{name}".encode()).digest()
    return "fit" if digest[0] % 2 == 0 else "judged"


# ---- one run (in its own process; imports TensorFlow) -----------------------------------------

IMG = 64
FEATURES = 256


def _images(folder: str, n: int = 192) -> str:
    """A folder of JPEGs in two class subfolders (made once, kept under ``folder``)."""
    import numpy as np
    from PIL import Image
    root = os.path.join(folder, "images")
    if os.path.exists(os.path.join(root, "done")):
        return root
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        os.makedirs(os.path.join(root, c), exist_ok=True)
    for i in range(n):
        arr = (rng.random((IMG * 2, IMG * 2, 3)) * 255).astype("uint8")
        Image.fromarray(arr).save(os.path.join(root, "ab"[i % 2], f"{i}.jpg"), quality=90)
    open(os.path.join(root, "done"), "w").close()
    return root


def _cnn(keras, kind: str):
    width = 16 if kind == "small" else 64
    return keras.Sequential([
        keras.Input((IMG, IMG, 3)), keras.layers.Rescaling(1.0 / 255),
        keras.layers.Conv2D(width, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(width * 2, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dense(64 if kind == "small" else 256, activation="relu"),
        keras.layers.Dense(2)])


def _mlp(keras, kind: str, features: int = FEATURES):
    width, depth = {"small": (128, 1), "mid": (512, 2), "big": (1024, 3)}[kind]
    return keras.Sequential([keras.Input((features,))] + [keras.layers.Dense(width, activation="relu")
                                                           for _ in range(depth)] + [keras.layers.Dense(10)])


def _np_augment(x, passes, rng):
    import numpy as np
    for _ in range(passes):
        x = np.tanh(x + rng.normal(scale=0.01, size=x.shape).astype("float32"))
    return x[::-1] if rng.random() < 0.5 else x


def _text_data(keras, np):
    """(texts, labels, an adapted TextVectorization layer) of the text scripts: 2,048 texts of
    60 words from a 2,000-word vocabulary, seeded."""
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(2000)])
    texts = [" ".join(rng.choice(words, size=60)) for _ in range(2048)]
    labels = rng.integers(0, 2, size=len(texts)).astype("int32")
    vectorize = keras.layers.TextVectorization(max_tokens=2000, output_sequence_length=60)
    vectorize.adapt(texts[:256])
    return texts, labels, vectorize


def _build(cfg: dict, folder: str, tf, keras, np):
    """(training data, model, custom loop or None) of one script, as a tutorial writes it."""
    fam, kind = cfg["family"], cfg["model"]
    batch = cfg.get("batch", 32)
    if fam == "imgfolder_aug":
        ds = keras.utils.image_dataset_from_directory(_images(folder), image_size=(IMG, IMG), batch_size=batch,
                                                      verbose=False)
        augment = keras.Sequential([keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1),
                                    keras.layers.RandomZoom(0.1)])
        ds = ds.map(lambda x, y: (augment(x, training=True), y), num_parallel_calls=tf.data.AUTOTUNE)
        return ds.repeat().prefetch(tf.data.AUTOTUNE), _cnn(keras, kind), None
    if fam == "jpeg_cached":
        files = tf.data.Dataset.list_files(os.path.join(_images(folder), "*", "*.jpg"), shuffle=False)

        def process_path(path):
            label = tf.cast(tf.strings.regex_full_match(path, ".*/b/.*"), tf.int32)
            img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
            return tf.image.resize(img, [IMG, IMG]), label
        ds = files.map(process_path, num_parallel_calls=tf.data.AUTOTUNE).cache().shuffle(1000)
        return ds.batch(batch).repeat().prefetch(tf.data.AUTOTUNE), _cnn(keras, kind), None
    if fam == "textvec":
        texts, labels, vectorize = _text_data(keras, np)
        ds = tf.data.Dataset.from_tensor_slices((texts, labels)).shuffle(2048).batch(batch)
        ds = ds.map(lambda x, y: (vectorize(x), y)).repeat().prefetch(tf.data.AUTOTUNE)
        layers = [keras.Input((60,), dtype="int64"), keras.layers.Embedding(2001, 16 if kind == "small" else 64)]
        if kind != "small":
            layers += [keras.layers.Conv1D(128, 5, activation="relu"), keras.layers.Conv1D(128, 5, activation="relu")]
        model = keras.Sequential(layers + [keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)])
        return ds, model, None
    rows = batch * (STEPS + 16 if fam == "inmem" else 16)  # in memory: one epoch covers the whole fit
    x = np.random.default_rng(0).normal(size=(rows, FEATURES)).astype("float32")
    y = np.random.default_rng(1).integers(0, 10, size=len(x)).astype("int32")
    if fam == "numpy_gen":
        def gen():
            rng = np.random.default_rng(2)
            while True:
                for i in range(len(x)):
                    yield _np_augment(x[i], cfg["passes"], rng), y[i]
        sig = (tf.TensorSpec((FEATURES,), tf.float32), tf.TensorSpec((), tf.int32))
        ds = tf.data.Dataset.from_generator(gen, output_signature=sig).batch(batch).prefetch(tf.data.AUTOTUNE)
        return ds, _mlp(keras, kind), None
    if fam == "pyds":
        class Batches(keras.utils.PyDataset):
            def __len__(self):
                return 100_000

            def __getitem__(self, i):
                rng = np.random.default_rng(i)
                lo = (i % 16) * batch
                return _np_augment(x[lo:lo + batch], 6, rng), y[lo:lo + batch]
        return Batches(workers=cfg["workers"], use_multiprocessing=cfg["mp"]), _mlp(keras, kind), None
    if fam == "tfrecord_loop":
        path = os.path.join(folder, "rows.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for row, label in zip(x, y):
                feats = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
                         "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}
                w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
        spec = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

        def parse(record):
            ex = tf.io.parse_single_example(record, spec)
            v = ex["x"]
            for _ in range(cfg["passes"]):
                v = tf.math.tanh(v + tf.random.normal([FEATURES], stddev=0.01))
            return v, tf.cast(ex["y"], tf.int32)
        ds = tf.data.TFRecordDataset(path).repeat().map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.batch(batch).prefetch(tf.data.AUTOTUNE), _mlp(keras, kind), "loop"
    if fam == "inmem":
        return (x, y, batch), _mlp(keras, kind), None
    raise ValueError(f"unknown family {fam}")


class _Clock:
    """Batch-end times of one fit or loop, by the job's own clock (s)."""

    def __init__(self):
        self.ends = []

    def mean_ms(self, skip_window: bool) -> float:
        import numpy as np
        d = np.diff(self.ends) * 1e3  # d[i]: batch i+2 (1-based)
        steps = np.arange(2, len(self.ends) + 1)
        keep = steps > SKIP
        if skip_window:  # the profiled steps and the one after (the profiler's stop)
            keep &= (steps < WINDOW[0]) | (steps > WINDOW[1] + 1)
        return float(d[keep].mean())


def _train(model, data, tf, keras, loop, profiler=None) -> _Clock:
    clock = _Clock()
    if loop is None:
        class Timer(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                clock.ends.append(time.perf_counter())
        cbs = [Timer()] + ([profiler] if profiler is not None else [])
        if isinstance(data, tuple) and len(data) == 3:  # in-memory arrays
            x, y, b = data
            model.fit(x, y, batch_size=b, epochs=-(-STEPS * b // len(x)), verbose=0, callbacks=cbs)
            clock.ends = clock.ends[:STEPS]
        else:
            model.fit(data, epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=cbs)
        return clock
    opt, loss_fn = keras.optimizers.Adam(), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step_fn = loop.setdefault("step", None)
    if step_fn is None:
        @tf.function
        def step_fn(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        loop["step"] = step_fn
    ctx = profiler if profiler is not None else None
    if ctx is not None:
        ctx.__enter__()
    try:
        for i, (x, y) in enumerate(data.take(STEPS)):
            if ctx is not None:
                with ctx.step():
                    step_fn(x, y)
            else:
                step_fn(x, y)
            clock.ends.append(time.perf_counter())
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    return clock


def _cached(data, tf, np, batch_hint=None):
    """The ablation's input: the pipeline's first batches, made once, stacked in memory."""
    if isinstance(data, tuple) and len(data) == 3:
        x, y, b = data
        n = len(x) // b
        xs, ys = x[:n * b].reshape(n, b, -1), y[:n * b].reshape(n, b)
    elif hasattr(data, "__getitem__") and not isinstance(data, tf.data.Dataset):
        pairs = [data[i] for i in range(16)]
        xs, ys = np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    else:
        pairs = list(data.take(16).as_numpy_iterator())
        xs, ys = np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    return tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().prefetch(tf.data.AUTOTUNE)


def job(name: str, folder: str, ablation: bool = True, reps: int = REPS) -> None:
    """One run: real and ablation alternately ``reps`` times; writes ``times.json``.
    Without ``ablation``: the profiled fit only (what a stability repeat needs)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfbneck_plugin import BottleneckProfiler
    cfg = RUNS[name]
    tf.random.set_seed(0)
    keras.utils.set_random_seed(0)
    data, model, loop = _build(cfg, folder, tf, keras, np)
    loop = {} if loop else None
    if loop is None:
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    cached = _cached(data, tf, np) if ablation else None
    real, ablation_ms = [], []
    for rep in range(reps if ablation else 1):
        profiler = None
        if rep == 0:
            profiler = BottleneckProfiler(os.path.join(folder, "logs"), profile_steps=WINDOW, analyze=False,
                                          sample_interval_s=SAMPLE_INTERVAL_S, verbose=0)
        real.append(_train(model, data, tf, keras, loop, profiler).mean_ms(skip_window=rep == 0))
        if cached is not None:
            ablation_ms.append(_train(model, cached, tf, keras, loop).mean_ms(skip_window=False))
    with open(os.path.join(folder, "times.json"), "w") as f:
        json.dump({"real_ms": real, "ablation_ms": ablation_ms}, f)


def run_folder(out: str, name: str, load: str) -> str:
    key = json.dumps(RUNS[name], sort_keys=True)
    return os.path.join(out, load, f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:8]}")


def make_runs(out: str, only=None, load: str = "idle") -> None:
    """Make the runs under ``out``/``load``; runs already made are kept."""
    for name in RUNS:
        if only and name not in only:
            continue
        folder = run_folder(out, name, load)
        if os.path.exists(os.path.join(folder, "times.json")):
            print(f"{name}: kept", flush=True)
            continue
        os.makedirs(folder, exist_ok=True)
        cmd = [sys.executable, os.path.abspath(__file__), "job", name, folder]
        if load == "busy":
            cmd = [UNDER_LOAD, "-j", "2"] + cmd + ["--reps", str(REPS_BUSY)]
        started = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
        if proc.returncode != 0:
            print(f"{name}: failed: {proc.stderr.strip().splitlines()[-3:]}", flush=True)
            continue
        print(f"{name}: made in {time.time() - started:.0f} s", flush=True)


# ---- stability: the same script again and again ---------------------------------------------------

#: The scripts a stability measurement repeats: one or two of each family, both truths.
STABILITY_RUNS = ("imgfolder-aug-smallcnn", "jpeg-cached-smallcnn", "textvec-small", "numpy-gen-heavy",
                  "pyds-threads-w2", "pyds-procs-w2", "tfrecord-loop-heavy", "inmem-mlp")
STABILITY_JSON = os.path.join(HERE, "results", "stability.json")


def make_repeats(out: str, repeats: int, load: str) -> None:
    """Each of :data:`STABILITY_RUNS` ``repeats`` times (a profiled fit each, in its own
    process, the scripts interleaved so that a slow minute of the machine hits all of them),
    under ``out/stability/load``; repeats already made are kept."""
    for rep in range(repeats):
        for name in STABILITY_RUNS:
            folder = os.path.join(out, "stability", load, f"{name}-r{rep}")
            if os.path.exists(os.path.join(folder, "times.json")):
                continue
            os.makedirs(folder, exist_ok=True)
            cmd = [sys.executable, os.path.abspath(__file__), "job", name, folder, "--no-ablation"]
            if load == "busy":
                cmd = [UNDER_LOAD, "-j", "2"] + cmd
            started, load_before = time.time(), os.getloadavg()[0]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
            with open(os.path.join(folder, "load.json"), "w") as f:
                json.dump({"loadavg_1min": [load_before, os.getloadavg()[0]]}, f)
            print(f"{name} r{rep}: {'made' if proc.returncode == 0 else 'failed'} in {time.time() - started:.0f} s "
                  f"(load average {load_before:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)


def score_repeats(out: str, load: str) -> list:
    """Per script: the cause of each repeat, the share that agree with the most common one,
    and the highest confidence a cause other than that one claimed."""
    sys.path.insert(0, HERE)
    from pairs_corpus import analyse_run  # noqa: E402
    from collections import Counter
    rows = []
    for name in STABILITY_RUNS:
        causes, loads = [], []
        for folder in sorted(glob.glob(os.path.join(out, "stability", load, f"{name}-r*"))):
            analysed = analyse_run(folder) if os.path.exists(os.path.join(folder, "times.json")) else None
            if analysed is not None:
                causes.append((analysed[0].get("cause"), analysed[0].get("confidence")))
            if os.path.exists(os.path.join(folder, "load.json")):
                with open(os.path.join(folder, "load.json")) as f:
                    loads.extend(json.load(f)["loadavg_1min"])
        if not causes:
            continue
        modal, n = Counter(c for c, _ in causes).most_common(1)[0]
        others = [conf for c, conf in causes if c != modal]
        rows.append({"run": name, "load": load, "repeats": len(causes), "cause": modal,
                     "agreement": round(n / len(causes), 2), "causes": [c for c, _ in causes],
                     "confidences": [conf for _, conf in causes],
                     "flipped_max_confidence": max(others) if others else None,
                     "loadavg": [round(min(loads), 1), round(max(loads), 1)] if loads else None})
    return rows


def save_stability(rows: list, load: str) -> None:
    kept = []
    if os.path.exists(STABILITY_JSON):
        with open(STABILITY_JSON) as f:
            kept = [r for r in json.load(f)["rows"] if r["load"] != load]
    os.makedirs(os.path.dirname(STABILITY_JSON), exist_ok=True)
    with open(STABILITY_JSON, "w") as f:
        json.dump({"rows": kept + rows}, f, indent=1)


# ---- scoring (no TensorFlow) --------------------------------------------------------------------

#: Causes that name the input pipeline (tfbneck_plugin.causes).
INPUT_CAUSES = ("input_preprocessing", "file_read", "remote_read", "cpu_contention")


def truth(gain: float) -> str:
    """``input``, ``device`` or ``mixed`` from the ablation's gain (module docstring)."""
    return "input" if gain >= INPUT_LIMITED else ("device" if gain < DEVICE_LIMITED else "mixed")


def named(report: dict) -> str:
    """What the verdict names: ``input``, ``device`` (the model's math) or ``other``."""
    if report.get("cause") in INPUT_CAUSES:
        return "input"
    return "device" if report.get("cause") == "model_compute" else "other"


def score_run(out: str, name: str, load: str):
    """One run's row, or None when it was not made."""
    sys.path.insert(0, HERE)
    from pairs_corpus import analyse_run  # noqa: E402 (the same analysis the pairs corpus makes)
    import numpy as np
    folder = run_folder(out, name, load)
    times = os.path.join(folder, "times.json")
    if not os.path.exists(times):
        return None
    with open(times) as f:
        t = json.load(f)
    gain = float(np.median(t["real_ms"]) / np.median(t["ablation_ms"]))
    row = {"run": name, "half": half(name), "load": load, "real_ms": round(float(np.median(t["real_ms"])), 2),
           "ablation_ms": round(float(np.median(t["ablation_ms"])), 2), "gain": round(gain, 2), "truth": truth(gain)}
    analysed = analyse_run(folder)
    if analysed is None:
        row["verdict"] = None
        return row
    report, findings = analysed
    recs = report.get("recommendations") or []
    first = recs[0] if recs else {}
    pred = first.get("predicted") or {}
    row.update({"cause": report.get("cause"), "confidence": report.get("confidence"), "named": named(report),
                "input_pct": round(float(report["breakdown_pct"].get("input", 0.0)), 1),
                "first_fix": first.get("fix"), "first_fix_speedup": pred.get("speedup"),
                "input_worth": _input_worth(findings)})
    row["right"] = row["truth"] == "mixed" or row["named"] == row["truth"]
    row["wrong_confident"] = not row["right"] and (row["confidence"] or 0) >= 0.7
    return row


def _input_worth(findings):
    """The modelled gain of removing the input's work and wait
    (:func:`tfbneck_plugin.analysis.cpu_share.input_load`), or None where it does not apply."""
    from tfbneck_plugin.analysis.cpu_share import input_load
    load = input_load(findings)
    return None if load is None else round(load.speedup, 2)


def score(out: str) -> list:
    rows = []
    for load in ("idle", "busy"):
        for name in RUNS:
            row = score_run(out, name, load)
            if row is not None:
                rows.append(row)
    return rows


def table(rows, which: str = "judged") -> str:
    """The markdown table of one half's rows."""
    lines = ["| run | load | real ms/batch | cached ms/batch | ablation gain | truth | verdict (cause) | confidence "
             "| modelled input gain | right |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["half"] != which:
            continue
        worth = "" if r.get("input_worth") is None else f"{r['input_worth']:.2f}x"
        lines.append(f"| {r['run']} | {r['load']} | {r['real_ms']:.1f} | {r['ablation_ms']:.1f} | {r['gain']:.2f}x | "
                     f"{r['truth']} | {r.get('named')} ({r.get('cause')}) | {r.get('confidence')} | {worth} | "
                     f"{'yes' if r.get('right') else '**no**'} |")
    judged = [r for r in rows if r["half"] == which and r.get("named")]
    right = sum(1 for r in judged if r["right"])
    wrong_sure = sum(1 for r in judged if r["wrong_confident"])
    lines.append("")
    lines.append(f"{which} half: {right} of {len(judged)} verdicts right (a `mixed` truth, gain between "
                 f"{DEVICE_LIMITED} and {INPUT_LIMITED}, is right either way); {wrong_sure} wrong at confidence >= 0.7.")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["runs", "score", "table", "list", "job", "stability"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--no-ablation", action="store_true", help="job: the profiled fit only")
    ap.add_argument("--reps", type=int, default=REPS, help="job: alternations of real and cached fits")
    ap.add_argument("--repeats", type=int, default=5, help="stability: repeats of each script")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", default="")
    ap.add_argument("--load", default="idle", choices=["idle", "busy", "shared"],
                    help="busy: beside ../shared/tools/under-load; shared: as the machine is, its load average "
                         "recorded per run (a machine other work uses)")
    a = ap.parse_args(argv)
    if a.command == "job":
        job(a.args[0], a.args[1], ablation=not a.no_ablation, reps=a.reps)
    elif a.command == "stability":
        make_repeats(a.out, a.repeats, a.load)
        rows = score_repeats(a.out, a.load)
        save_stability(rows, a.load)
        for r in rows:
            print(f"{r['run']}: {r['cause']} in {r['agreement']:.0%} of {r['repeats']}; others up to "
                  f"{r['flipped_max_confidence']}")
    elif a.command == "list":
        for name in RUNS:
            print(f"{name}: {half(name)}")
    elif a.command == "runs":
        make_runs(a.out, [n for n in a.only.split(",") if n], a.load)
    elif a.command == "score":
        rows = score(a.out)
        with open(TABLE_JSON, "w") as f:
            json.dump({"input_limited": INPUT_LIMITED, "device_limited": DEVICE_LIMITED, "rows": rows}, f, indent=1)
        print(table(rows, "fit"))
        print()
        print(table(rows, "judged"))
    else:
        with open(TABLE_JSON) as f:
            rows = json.load(f)["rows"]
        text = ("# Tutorial-style runs: verdicts against ablation truths (judged half)\n\n"
                "Generated by `python benchmarks/tutorial_corpus.py table` from `benchmarks/tutorial_corpus.json`.\n\n"
                + table(rows, "judged") + "\n")
        with open(TABLE_MD, "w") as f:
            f.write(text)
        print(text)


if __name__ == "__main__":
    main()
