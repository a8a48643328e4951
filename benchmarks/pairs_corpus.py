"""A corpus of real before/after training runs, each pair changing ONE thing, to check the
what-if models (:mod:`tfbneck_plugin.analysis.whatif`) on runs they were not built from.

Two separate commands, so that improving a model never needs new runs:

    python benchmarks/pairs_corpus.py runs  [--out DIR] [--only PAIR,PAIR]   # TensorFlow: make the runs
    python benchmarks/pairs_corpus.py score [--out DIR]                       # no TensorFlow: predict, compare
    python benchmarks/pairs_corpus.py list                                    # the pairs and their half

``runs`` trains small Keras 3 models on the CPU (a few seconds each), each profiled by
``BottleneckProfiler`` (trace + system metrics every 50 ms), one Python process per run;
the runs of one pair are made one right after the other so that both see the same
machine. Runs already made are kept (delete DIR to start over). ``score`` analyses every
run with tfbneck, asks the before-run's model for the pair's change (the same call the
report makes), and writes ``benchmarks/pairs_corpus.json`` (every pair: before, predicted,
range, measured, error, half) and ``docs/predictions.md`` (the validation half's table).

The pairs vary the model (width x depth), the batch size, the map's cost (passes of
sin/cos over the batch widened 4 times: light to dominant), the source (in memory,
TFRecord files, a Python generator, a Keras ``PyDataset`` with threads or processes),
``.batch(b).map(f)`` against the fused ``.map(f).batch(b)`` (tf.data's ``MapAndBatch``),
``steps_per_execution``, eager against compiled, one core against two
(``os.sched_setaffinity`` in the run's process) and an idle against a busy machine
(``benchmarks/under_load.sh``: one spinning process per core).

Each pair's half (``fit`` or ``validation``) is fixed by a seeded hash of its name
(:data:`SEED`): ``benchmarks/fit_whatif.py`` fits the models' remaining constants on the
fit half only; ``docs/predictions.md`` judges the validation half only.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tfbneck-pairs-corpus")
UNDER_LOAD = os.path.join(HERE, "under_load.sh")  # spinners and a loopback stream
TABLE_JSON = os.path.join(HERE, "pairs_corpus.json")
TABLE_MD = os.path.join(REPO, "docs", "predictions.md")
#: Seed of the fit/validation split (a pair's half is a hash of SEED and its name).
SEED = 23
FEATURES = 512
SAMPLE_INTERVAL_S = 0.05

# ---- the runs ---------------------------------------------------------------------------------

#: A run's settings; each run overrides some (see :func:`_dataset` and :func:`job`).
BASE = {"src": "mem", "passes": 6, "order": "batch_map", "par": None, "prefetch": False, "batch": 128,
        "width": 512, "depth": 2, "spe": 1, "eager": False, "workers": 1, "mp": False, "py_sleep_ms": 0,
        "usual": False, "steps": [6, 45]}


def _spe_steps(k: int):
    """Profile window in batches for steps_per_execution k: whole executions, a few of them."""
    execs = max(3, -(-96 // k))
    return [k * 5 + 1, k * 5 + k * execs]


def _pair(name, fix, before, after, code="", cores=2, load="idle"):
    return {"name": name, "fix": fix, "code": code, "cores": cores, "load": load,
            "before": dict(BASE, **before), "after": dict(BASE, **{**before, **after})}


def _map_pairs():
    out = []
    for passes in (2, 6, 16):  # light, even, dominant map against the 2 x 512 model
        b = {"passes": passes}
        out.append(_pair(f"map{passes}-par", "parallel_map", b, {"par": "auto"}))
        out.append(_pair(f"map{passes}-prefetch", "prefetch", b, {"prefetch": True}))
    for tag, b, kw in (("b32", {"batch": 32}, {}), ("1core", {}, {"cores": 1}), ("busy", {}, {"load": "busy"}),
                       ("wide", {"width": 1024, "depth": 3}, {}), ("1core-busy", {}, {"cores": 1, "load": "busy"})):
        out.append(_pair(f"map6-{tag}-par", "parallel_map", b, {"par": "auto"}, **kw))
        out.append(_pair(f"map6-{tag}-prefetch", "prefetch", b, {"prefetch": True}, **kw))
    out.append(_pair("map6-par-prefetch", "prefetch", {"par": "auto"}, {"prefetch": True}))
    return out


def _fused_pairs():
    out = []
    for passes in (4, 12):  # .map(f).batch(b): tf.data fuses it into MapAndBatch
        b = {"order": "map_batch", "passes": passes}
        out.append(_pair(f"fused{passes}-par", "parallel_map", b, {"par": "auto"}))
        out.append(_pair(f"fused{passes}-prefetch", "prefetch", b, {"prefetch": True}))
    b = {"order": "map_batch", "passes": 12, "usual": True}  # written the usual way: default options
    out.append(_pair("fused12-usual-prefetch", "prefetch", b, {"prefetch": True}))
    out.append(_pair("fused12-usual-vectorise", "vectorise_map", b, {"order": "batch_map"}))
    out.append(_pair("fused12-usual-busy-prefetch", "prefetch", b, {"prefetch": True}, load="busy"))
    return out


def _source_pairs():
    out = []
    b = {"src": "files", "passes": 6}
    out.append(_pair("files6-par", "parallel_map", b, {"par": "auto"}))
    out.append(_pair("files6-prefetch", "prefetch", b, {"prefetch": True}))
    compute = {"src": "pyds", "passes": 6, "batch": 64}
    out.append(_pair("pyds-compute-w2mp", "pydataset_workers", compute, {"workers": 2, "mp": True}, "workers=2"))
    out.append(_pair("pyds-compute-w2mp-busy", "pydataset_workers", compute, {"workers": 2, "mp": True},
                     "workers=2", load="busy"))
    out.append(_pair("pyds-compute-w2mp-1core", "pydataset_workers", compute, {"workers": 2, "mp": True},
                     "workers=2", cores=1))
    out.append(_pair("pyds-compute-w2-w4mp", "pydataset_workers", dict(compute, workers=2, mp=True),
                     {"workers": 4}, "workers=4"))
    out.append(_pair("pyds-compute-w2threads", "pydataset_workers", compute, {"workers": 2}, "workers=2"))
    sleepy = {"src": "pyds", "passes": 1, "batch": 64, "py_sleep_ms": 15}
    out.append(_pair("pyds-sleep-w4threads", "pydataset_workers", sleepy, {"workers": 4}, "workers=4"))
    out.append(_pair("pyds-sleep-w2threads", "pydataset_workers", sleepy, {"workers": 2}, "workers=2"))
    # Added after the PyDataset model read the input's own cores (not the tree's, which hold
    # the model's math on a CPU-only host): Python input that waits more than it computes,
    # made once that model was written, to judge it on runs it had not seen.
    out.append(_pair("pyds-sleep8-w3threads", "pydataset_workers", dict(sleepy, py_sleep_ms=8), {"workers": 3},
                     "workers=3"))
    out.append(_pair("pyds-sleep25-w8threads", "pydataset_workers", dict(sleepy, py_sleep_ms=25), {"workers": 8},
                     "workers=8"))
    out.append(_pair("pyds-sleep-w4mp", "pydataset_workers", sleepy, {"workers": 4, "mp": True}, "workers=4"))
    out.append(_pair("pyds-sleep-w2-w6threads", "pydataset_workers", dict(sleepy, workers=2), {"workers": 6},
                     "workers=6"))
    out.append(_pair("pyds-sleep-w4threads-busy", "pydataset_workers", sleepy, {"workers": 4}, "workers=4",
                     load="busy"))
    out.append(_pair("gen-compute-w2mp", "pydataset_workers", dict(compute, src="gen"),
                     {"src": "pyds", "workers": 2, "mp": True}, "workers=2"))
    return out


def _step_pairs():
    out = []
    tiny = {"src": "cached", "width": 16, "depth": 1, "batch": 32, "steps": [6, 105]}
    for k in (4, 16, 32):
        out.append(_pair(f"spe1-{k}", "steps_per_execution", tiny, {"spe": k, "steps": _spe_steps(k)},
                         f"steps_per_execution={k}"))
    small = dict(tiny, width=128, depth=2, batch=64)
    out.append(_pair("spe1-16-small", "steps_per_execution", small, {"spe": 16, "steps": _spe_steps(16)},
                     "steps_per_execution=16"))
    out.append(_pair("spe1-16-busy", "steps_per_execution", tiny, {"spe": 16, "steps": _spe_steps(16)},
                     "steps_per_execution=16", load="busy"))
    out.append(_pair("spe1-16-1core", "steps_per_execution", tiny, {"spe": 16, "steps": _spe_steps(16)},
                     "steps_per_execution=16", cores=1))
    out.append(_pair("spe4-32", "steps_per_execution", dict(tiny, spe=4, steps=_spe_steps(4)),
                     {"spe": 32, "steps": _spe_steps(32)}, "steps_per_execution=32"))
    for tag, model, kw in (("256x2-b32", {"width": 256, "depth": 2, "batch": 32}, {}),
                           ("1024x2-b128", {"width": 1024, "depth": 2, "batch": 128}, {}),
                           ("64x1-b32", {"width": 64, "depth": 1, "batch": 32}, {}),
                           ("256x2-b32-busy", {"width": 256, "depth": 2, "batch": 32}, {"load": "busy"}),
                           ("256x2-b32-1core", {"width": 256, "depth": 2, "batch": 32}, {"cores": 1}),
                           ("1024x2-b128-1core", {"width": 1024, "depth": 2, "batch": 128}, {"cores": 1})):
        b = dict(model, src="cached", eager=True, steps=[4, 15])
        out.append(_pair(f"eager-{tag}", "tf_function", b, {"eager": False, "steps": [6, 45]}, **kw))
    return out


def all_pairs():
    """Every pair of the corpus (list of dicts: name, fix, code, cores, load, before, after),
    the families interleaved and the busy-machine pairs (the slowest) last, so that a corpus
    cut short still covers every kind of change."""
    families = [_map_pairs(), _fused_pairs(), _source_pairs(), _step_pairs()]
    out = []
    for i in range(max(len(f) for f in families)):
        out += [f[i] for f in families if i < len(f)]
    return [p for p in out if p["load"] == "idle"] + [p for p in out if p["load"] != "idle"]


def half(name: str) -> str:
    """``fit`` or ``validation``: a seeded hash of the pair's name, so that the split never
    depends on the results or on the order of the pairs."""
    digest = hashlib.sha256(f"{SEED}:{name}".encode()).digest()
    return "fit" if digest[0] % 2 == 0 else "validation"


# ---- one run (in its own process; imports TensorFlow) -----------------------------------------

def _heavy(tf, x, passes):
    y = tf.repeat(x[..., None], 4, axis=-1)
    for _ in range(passes):
        y = tf.math.sin(y) * 1.0001 + tf.math.cos(y) * 0.0001
    return tf.reduce_mean(y, axis=-1)


def _np_heavy(x, passes):
    import numpy as np
    y = np.repeat(x[..., None], 4, axis=-1)
    for _ in range(passes):
        y = np.sin(y) * 1.0001 + np.cos(y) * 0.0001
    return y.mean(axis=-1)


def _tf_dataset(cfg, x, y, tf, folder):
    if cfg["src"] == "cached":
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(cfg["batch"]).cache().repeat().prefetch(
            tf.data.AUTOTUNE)
    if cfg["src"] == "files":
        path = os.path.join(folder, "rows.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for row in x:
                w.write(row.tobytes())
        rows = tf.data.TFRecordDataset(path).repeat()

        def decode(r):
            return tf.io.decode_raw(r, tf.float32)
        labels = tf.data.Dataset.from_tensor_slices(y).repeat()
        ds = tf.data.Dataset.zip((rows, labels))
    else:
        decode = None
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    par = tf.data.AUTOTUNE if cfg["par"] == "auto" else cfg["par"]

    def fn(a, b):
        a = decode(a) if decode else a
        return _heavy(tf, a, cfg["passes"]), b

    if cfg["order"] == "batch_map":
        ds = ds.batch(cfg["batch"]).map(fn, num_parallel_calls=par)
    else:
        ds = ds.map(fn, num_parallel_calls=par).batch(cfg["batch"])
    if cfg["prefetch"]:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    if not cfg["usual"]:  # controlled: no injected prefetch or parallelism, one core per map call
        options = tf.data.Options()
        options.experimental_optimization.map_parallelization = False
        options.experimental_optimization.inject_prefetch = False
        options.threading.max_intra_op_parallelism = 1
        ds = ds.with_options(options)
    return ds


def _py_dataset(cfg, x, y):
    import keras

    class Batches(keras.utils.PyDataset):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.n = len(x) // cfg["batch"]

        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            lo = (i % self.n) * cfg["batch"]
            if cfg["py_sleep_ms"]:
                time.sleep(cfg["py_sleep_ms"] / 1e3)
            return _np_heavy(x[lo:lo + cfg["batch"]], cfg["passes"]), y[lo:lo + cfg["batch"]]

    if cfg["src"] == "gen":
        data = Batches()

        def gen():
            i = 0
            while True:
                yield data[i]
                i += 1
        return gen()
    return Batches(workers=cfg["workers"], use_multiprocessing=cfg["mp"], max_queue_size=8)


#: Each pair is run as before, after, before, after in one process (seconds apart, so
#: that both sides see the same load on a shared machine); the table takes the medians.
REPS = 2


def _fit_one(cfg: dict, folder: str, tf, keras, np) -> None:
    """One profiled training run (settings ``cfg``) writing under ``folder``/logs."""
    from tfbneck_plugin import BottleneckProfiler
    tf.random.set_seed(0)
    n = cfg["batch"] * 24
    x = np.random.default_rng(0).normal(size=(n, FEATURES)).astype("float32")
    y = np.random.default_rng(1).integers(0, 10, size=n).astype("int32")
    os.makedirs(folder, exist_ok=True)
    data = _py_dataset(cfg, x, y) if cfg["src"] in ("pyds", "gen") else _tf_dataset(cfg, x, y, tf, folder)
    layers = [keras.Input((FEATURES,))] + [keras.layers.Dense(cfg["width"], activation="relu")
                                            for _ in range(cfg["depth"])]
    model = keras.Sequential(layers + [keras.layers.Dense(10)])
    model.compile("sgd" if cfg["src"] == "cached" else "adam",
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=cfg["spe"], run_eagerly=cfg["eager"], jit_compile=False)
    first, last = cfg["steps"]
    profiler = BottleneckProfiler(os.path.join(folder, "logs"), profile_steps=(first, last), analyze=False,
                                  sample_interval_s=SAMPLE_INTERVAL_S, verbose=0)
    model.fit(data, epochs=1, steps_per_epoch=last + 4 * cfg["spe"], verbose=0, callbacks=[profiler])
    bad = [w for w in profiler.windows if w.status != "profiled"]
    if bad:
        raise SystemExit(f"window not captured: {bad[0].reason}")


def job(pair: dict, folder: str) -> None:
    """A pair's runs, before and after alternately :data:`REPS` times, under ``folder``."""
    if pair["cores"] < (os.cpu_count() or 1):
        os.sched_setaffinity(0, set(range(pair["cores"])))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf
    for rep in range(REPS):
        for side in ("before", "after"):
            _fit_one(pair[side], os.path.join(folder, f"{side}-{rep}"), tf, keras, np)


def pair_folder(out: str, p: dict) -> str:
    """A pair's folder: its name and a hash of its settings (a changed pair is run anew)."""
    key = json.dumps({k: p[k] for k in ("before", "after", "cores", "load")}, sort_keys=True)
    return os.path.join(out, f"{p['name']}-{hashlib.sha256(key.encode()).hexdigest()[:8]}")


def _make_pair(out: str, p: dict) -> str:
    folder = pair_folder(out, p)
    if os.path.exists(os.path.join(folder, "done.json")):
        return "kept"
    os.makedirs(folder, exist_ok=True)
    cmd = [sys.executable, os.path.abspath(__file__), "job", json.dumps(p), folder]
    if p["load"] == "busy":
        cmd = [UNDER_LOAD, "-j", "2"] + cmd
    started, load_before = time.time(), os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
    if proc.returncode != 0:
        return f"failed: {proc.stderr.strip().splitlines()[-1:]}"
    with open(os.path.join(folder, "done.json"), "w") as f:
        json.dump({"pair": p, "wall_s": round(time.time() - started, 1), "loadavg_before": load_before}, f)
    return f"made in {time.time() - started:.0f} s (load {load_before:.1f})"


def make_runs(out: str, only=None) -> None:
    """Make every pair's runs under ``out``; pairs already made are kept."""
    os.makedirs(out, exist_ok=True)
    for p in all_pairs():
        if not only or p["name"] in only:
            print(f"{p['name']}: {_make_pair(out, p)}", flush=True)


# ---- scoring (no TensorFlow) --------------------------------------------------------------------

def analyse_run(folder: str):
    """(host report, findings) of one run, or None when it holds no trace. The findings are
    what the what-if models read (:class:`tfbneck_plugin.analysis.findings.Findings`)."""
    from tfbneck_plugin import records
    from tfbneck_plugin.analysis import sysmetrics
    from tfbneck_plugin.analysis.host_analysis import HostAnalysis
    from tfbneck_plugin.logdir import find_sessions
    from tfbneck_plugin.trace.tracefile import read_space
    if not os.path.isdir(os.path.join(folder, "logs")):
        return None
    sessions = find_sessions(os.path.join(folder, "logs")).sessions
    if not sessions or not sessions[0].files:
        return None
    s = sessions[0]
    system = sysmetrics.summarize(records.read_sidecar(s.sidecar, open)) if s.sidecar else None
    a = HostAnalysis(read_space(s.files[0], open), system)
    if not a.findings.steps.found:
        return None
    report = a.report()
    report["system_metrics"] = system  # as analyze_session adds it
    return report, a.findings


def load_pair(out: str, p: dict):
    """{"before": [(report, findings)], "after": [report]} of a pair's runs, or None when
    the pair was not made (or a run holds no steady step). The analysis is kept in the
    pair's folder (``analysis.pickle``) for the next call; ``--fresh`` drops it."""
    import pickle
    folder = pair_folder(out, p)
    if not os.path.exists(os.path.join(folder, "done.json")):
        return None
    cached = os.path.join(folder, "analysis.pickle")
    if os.path.exists(cached) and not FRESH:
        with open(cached, "rb") as f:
            return pickle.load(f)
    loaded = _analyse_pair(folder)
    with open(cached, "wb") as f:
        pickle.dump(loaded, f)
    return loaded


#: Analyse the runs again, ignoring the analysis kept beside them (``score --fresh``): after
#: a change to the analysis itself, not to the models.
FRESH = False


def _analyse_pair(folder: str):
    runs = {side: [analyse_run(os.path.join(folder, f"{side}-{rep}")) for rep in range(REPS)]
            for side in ("before", "after")}
    if any(r is None for side in runs.values() for r in side):
        return None
    return {"before": runs["before"], "after": [r[0] for r in runs["after"]]}


def _others(report) -> float:
    """Cores other processes kept busy during a run (the machine's load on it)."""
    m = report.get("system_metrics") or {}
    return round(float(m.get("others_cpu_cores") or 0.0), 2)


def score_pair(p: dict, loaded) -> dict:
    """One pair's row: the before-runs' prediction for the change against the after-runs
    (medians over the repetitions)."""
    import numpy as np
    from tfbneck_plugin.analysis.whatif import predict
    row = {"pair": p["name"], "fix": p["fix"], "half": half(p["name"]), "cores": p["cores"], "load": p["load"]}
    if loaded is None:
        row["missing"] = "runs not made, or no steady steps"
        return row
    row["others_cores"] = [_others(r) for r in [b for b, _ in loaded["before"]] + loaded["after"]]
    row["before_ms"] = round(float(np.median([r["steps"]["time_per_batch_ms"] for r, _ in loaded["before"]])), 3)
    row["measured_ms"] = round(float(np.median([r["steps"]["time_per_batch_ms"] for r in loaded["after"]])), 3)
    from tfbneck_plugin.analysis.rules import decide
    recommended = [r["fix"] for r in decide(loaded["before"][0][1]).recommendations]
    row["recommended"] = p["fix"] in recommended
    row["rank"] = recommended.index(p["fix"]) + 1 if row["recommended"] else None
    preds = [predict({"fix": p["fix"], "code": p["code"]}, f) for _, f in loaded["before"]]
    if any(pred is None for pred, _ in preds):
        row["predicted_ms"], row["why_not"] = None, next(why for pred, why in preds if pred is None)
        return row
    row["predicted_ms"] = round(float(np.median([pred["time_per_batch_ms"] for pred, _ in preds])), 3)
    row["range_ms"] = [min(pred["range_ms"][0] for pred, _ in preds), max(pred["range_ms"][1] for pred, _ in preds)]
    row["error_pct"] = round(100.0 * (row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"], 1)
    row["wrong_direction"] = _wrong_direction(row)
    return row


#: A change in time per batch within this share of the before-run counts as "no change":
#: runs differ by this much between two runs of the same program here (our choice).
SAME_PCT = 5.0


def _wrong_direction(row) -> bool:
    """Predicted faster but measured slower, or the reverse, each beyond :data:`SAME_PCT`."""
    was = row["before_ms"]

    def way(v):
        d = 100.0 * (v - was) / was
        return 0 if abs(d) <= SAME_PCT else (1 if d > 0 else -1)
    return way(row["predicted_ms"]) * way(row["measured_ms"]) < 0


def score(out: str) -> list:
    """Every pair's row (see :func:`score_pair`)."""
    return [score_pair(p, load_pair(out, p)) for p in all_pairs()]


def summary(rows) -> dict:
    """Median and 90th-percentile absolute error, share within 25 %, wrong directions."""
    import numpy as np
    scored = [r for r in rows if r.get("predicted_ms") is not None]
    errs = np.abs([r["error_pct"] for r in scored]) if scored else np.array([])
    return {"pairs": len(rows), "predicted": len(scored),
            "median_abs_error_pct": round(float(np.median(errs)), 1) if len(errs) else None,
            "p90_abs_error_pct": round(float(np.percentile(errs, 90)), 1) if len(errs) else None,
            "within_25_pct": round(100.0 * float((errs <= 25).mean()), 1) if len(errs) else None,
            "wrong_direction": [r["pair"] for r in scored if r["wrong_direction"]]}


README = os.path.join(REPO, "docs", "accuracy.md")  # the manual's page that carries the summary
README_BEGIN = "<!-- generated by benchmarks/pairs_corpus.py score -->\n"
README_END = "<!-- end of generated summary -->"


def _pct(v) -> str:
    return "" if v is None else f"{v:.0f} %"


def readme_summary(rows, meta) -> str:
    """The accuracy table of docs/accuracy.md: the validation half, by change and overall."""
    val = [r for r in rows if r["half"] == "validation"]
    out = [f"Validation half ({meta}; times per batch are medians of {REPS} before and {REPS} after runs):", "",
           "| change | pairs | with a prediction | median abs error | p90 abs error | within 25 % | wrong direction |",
           "|---|---|---|---|---|---|---|"]
    groups = [(fix, [r for r in val if r["fix"] == fix]) for fix in sorted({r["fix"] for r in val})]
    for name, part in groups + [("**all**", val)]:
        s = summary(part)
        out.append(f"| {name if name.startswith('*') else f'`{name}`'} | {s['pairs']} | {s['predicted']} | "
                   f"{_pct(s['median_abs_error_pct'])} | {_pct(s['p90_abs_error_pct'])} | {_pct(s['within_25_pct'])} | "
                   f"{', '.join(f'`{w}`' for w in s['wrong_direction']) or 'none'} |")
    return "\n".join(out) + "\n"


def write_readme(rows, meta) -> None:
    """Replace docs/accuracy.md's generated summary (between its markers) with :func:`readme_summary`."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    a, b = text.index(README_BEGIN) + len(README_BEGIN), text.index(README_END)
    with open(README, "w", encoding="utf-8") as f:
        f.write(text[:a] + readme_summary(rows, meta) + text[b:])


def markdown(rows, meta) -> str:
    """docs/predictions.md: the validation half's summary and table, then the fit half's."""
    out = ["# What each fix is worth: predictions against measured runs", "",
           "Generated by `python benchmarks/pairs_corpus.py score` from the runs that "
           "`python benchmarks/pairs_corpus.py runs` makes (seed "
           f"{SEED}; {meta}). Times are ms per batch, steady steps; error = (predicted - measured) / measured. "
           "A pair's half is fixed by a seeded hash of its name; the models' constants are fit "
           "(`benchmarks/fit_whatif.py`) on the fit half only. Others' cores: the cores other processes kept busy "
           "in each run (before, before, after, after): the machine's load moved under the pairs. Rank: the "
           "change's place among the first before-run's recommendations (not offered: left out, e.g. capped by "
           "the cores, or not the verdict's advice).", ""]
    for name in ("validation", "fit"):
        part = [r for r in rows if r["half"] == name]
        s = summary(part)
        out += [f"## {name.capitalize()} half", "",
                f"{s['pairs']} pairs, {s['predicted']} with a prediction: median absolute error "
                f"{s['median_abs_error_pct']} %, 90th percentile {s['p90_abs_error_pct']} %, "
                f"{s['within_25_pct']} % within 25 %; wrong direction: {', '.join(s['wrong_direction']) or 'none'}.",
                "", "| pair | change | cores | machine | others' cores (before, after runs) | before | predicted (range) "
                "| measured | error | rank |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in part:
            out.append(_md_row(r))
        out.append("")
    return "\n".join(out)


def _md_row(r) -> str:
    load = " ".join(f"{v:.1f}" for v in r.get("others_cores", []))
    head = f"| `{r['pair']}` | `{r['fix']}` | {r['cores']} | {r['load']} | {load} |"
    if r.get("missing"):
        return head + f" | | | {r['missing']} | |"
    rank = r["rank"] if r["rank"] else "not offered"
    if r.get("predicted_ms") is None:
        return head + f" {r['before_ms']:.2f} | none: {r['why_not']} | {r['measured_ms']:.2f} | | {rank} |"
    lo, hi = r["range_ms"]
    flag = " (wrong way)" if r["wrong_direction"] else ""
    return head + (f" {r['before_ms']:.2f} | {r['predicted_ms']:.2f} ({lo:.2f}-{hi:.2f}) | {r['measured_ms']:.2f} |"
                   f" {r['error_pct']:+.0f} %{flag} | {rank} |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["runs", "score", "list", "job"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--out", default=DEFAULT_OUT, help="folder of the runs (default: %(default)s)")
    ap.add_argument("--only", default="", help="comma-separated pair names")
    ap.add_argument("--fresh", action="store_true", help="analyse the runs again (after a change to the analysis)")
    ap.add_argument("--meta", default=None,
                    help="where the runs were made (for the table's header; default: what the committed "
                         "table says)")
    a = ap.parse_args(argv)
    if a.command == "job":
        pair, folder = a.args
        job(json.loads(pair), folder)
    elif a.command == "list":
        for p in all_pairs():
            print(f"{p['name']:32s} {p['fix']:20s} {half(p['name'])}")
    elif a.command == "runs":
        make_runs(a.out, set(a.only.split(",")) if a.only else None)
    else:
        global FRESH
        FRESH = a.fresh
        rows = score(a.out)
        if a.meta is None:
            try:
                with open(TABLE_JSON) as f:
                    a.meta = json.load(f)["meta"]
            except (OSError, ValueError, KeyError):
                a.meta = "where the runs were made: not said"
        with open(TABLE_JSON, "w") as f:
            json.dump({"seed": SEED, "meta": a.meta, "rows": rows,
                       "validation": summary([r for r in rows if r["half"] == "validation"]),
                       "fit": summary([r for r in rows if r["half"] == "fit"])}, f, indent=1)
            f.write("\n")
        with open(TABLE_MD, "w") as f:
            f.write(markdown(rows, a.meta))
        write_readme(rows, a.meta)
        print(json.dumps(summary([r for r in rows if r["half"] == "validation"])))


if __name__ == "__main__":
    main()
