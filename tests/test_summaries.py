"""What BottleneckProfiler writes to TensorBoard's own dashboards: a few scalars beside the
user's loss curves (at most 8 tags per run) and each window's verdict as text. The values
(no TensorFlow), then a real fit with system sampling on, its event file read back with
TensorBoard's own reader."""
import glob
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from support.paths import ROOT
from tfbneck_plugin.capture import summaries
from tfbneck_plugin.capture.summaries import (CPU_PCT, GPU_UTIL_PCT, INPUT_PCT, MAX_TAGS, OTHER_CORES, PROCESS_CORES,
                                              SCALAR_TAGS, STEP_TIME_P50, STEP_TIME_P90, VERDICT_TAG)


def _window(**kw):
    base = dict(steps=(10, 14), markers=[(10, 10)], kind="scheduled", trigger=None, change=None,
                session_dir="/logs/run1/plugins/profile/2026_01_02_03_04_05_steps10-14")
    base.update(kw)
    return SimpleNamespace(**base)


REPORT = {"status": "ok", "bottleneck": "cpu", "bottleneck_label": "CPU-bound", "cause": "input_preprocessing",
          "cause_text": "The tf.data preprocessing cannot keep up with training.", "confidence": 0.83,
          "steps": {"step_time_ms": {"mean": 41.26}}, "breakdown_pct": {"input": 62.4, "device_compute": 30.0},
          "recommendations": [{"title": "Parallelise the map", "worth": "about 2x", "fix": "parallel_map"}]}


def test_the_tags_fit_the_budget():
    assert len(set(SCALAR_TAGS)) == len(SCALAR_TAGS) and VERDICT_TAG not in SCALAR_TAGS
    assert len(SCALAR_TAGS) + 1 <= MAX_TAGS == 8


def test_the_accelerators_fold_into_one_tag_the_busiest():
    iv = {"cpu_pct": 37.5, "tree_cores": 1.25, "other_cores": 0.5, "busiest_core_pct": 99.0, "iowait_pct": 3.0,
          "gpus": [{"index": i, "util_pct": u, "mem_used_gb": 3.0} for i, u in enumerate((12.0, 97.0, 40.0, 0.0))]}
    assert summaries.system_scalars(iv) == {CPU_PCT: 37.5, PROCESS_CORES: 1.25, OTHER_CORES: 0.5,
                                            GPU_UTIL_PCT: 97.0}
    assert summaries.system_scalars(dict(iv, gpus=[])) == {CPU_PCT: 37.5, PROCESS_CORES: 1.25, OTHER_CORES: 0.5}


def test_window_and_period_scalars():
    assert summaries.window_scalars(REPORT) == {INPUT_PCT: 62.4}
    assert summaries.window_scalars({"status": "error", "bottleneck": "unknown"}) == {}
    assert summaries.period_scalars({"p50_ms": 4.5, "p90_ms": 7.25, "n": 30}) == {STEP_TIME_P50: 4.5,
                                                                                 STEP_TIME_P90: 7.25}


def test_the_verdict_text_says_kind_cause_confidence_and_the_first_fix():
    text = summaries.verdict_text(_window(), REPORT)
    lines = text.splitlines()
    assert lines[0] == r"**steps 10-14: CPU-bound (input\_preprocessing, confidence 0.83)**"
    assert "- 41.3 ms/step, 62% waiting for input" in lines
    assert r"- fix first: Parallelise the map — about 2x [parallel\_map]" in lines
    assert ("- kind `cpu`, cause `input_preprocessing`: The tf.data preprocessing cannot keep up with training."
            in lines)
    assert lines[-1].startswith("- session `2026_01_02_03_04_05_steps10-14`")
    # A triggered window says why it opened, and the log line is the same clauses on one line.
    trig = _window(kind="triggered", trigger={"observed_p50_ms": 80.0, "baseline_p50_ms": 40.0, "slow_steps": [301]})
    assert "- opened on a slowdown: 80 ms/step against a baseline of 40 ms from step 301" in \
        summaries.verdict_text(trig, REPORT).splitlines()
    assert summaries.verdict_parts(trig, REPORT)[-1].startswith("opened on a slowdown")
    # An input verdict that rests on the cores the input takes, not on a wait, says so beside the wait.
    held = dict(REPORT, breakdown_pct={"input": 0.2, "device_compute": 91.0}, input_load={"share": 0.23})
    assert summaries.verdict_parts(_window(), held)[1] == ("41.3 ms/step, 0% waiting for input, the input's work "
                                                           "23% of the cores' demand")


def test_the_verdict_text_renders_as_written_in_the_text_dashboard():
    from tensorboard import plugin_util
    html = plugin_util.markdown_to_safe_html(summaries.verdict_text(_window(), REPORT))
    assert "<strong>steps 10-14: CPU-bound (input_preprocessing, confidence 0.83)</strong>" in html
    assert "<code>input_preprocessing</code>" in html and "[parallel_map]</li>" in html


FIT = r"""
import json, sys, numpy as np, tensorflow as tf
from tfbneck_plugin import BottleneckProfiler
x = np.random.rand(1024, 32).astype("float32"); y = np.random.rand(1024, 1).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
m = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)])
m.compile("sgd", "mse")
cb = BottleneckProfiler(sys.argv[1], profile_steps=(10, 12), verbose=0)  # system sampling on (the default)
m.fit(ds, epochs=2, callbacks=[cb], verbose=0)
cb.close(wait=True, timeout=300)
(w,) = cb.windows
# Keras' own answer to jit_compile=True for a model holding a layer without XLA support
# (RandomRotation) and for this one, beside what the callback records of each.
from tfbneck_plugin.capture.model_info import layers_without_xla
aug = tf.keras.Sequential([tf.keras.Input((8, 8, 3)), tf.keras.layers.RandomFlip(), tf.keras.layers.RandomRotation(0.1),
                           tf.keras.layers.Flatten(), tf.keras.layers.Dense(1)])
aug.compile("sgd", "mse", jit_compile=True)
m.compile("sgd", "mse", jit_compile=True)
print(json.dumps({"steps": list(w.steps), "report": dict(w.report or {}),
                  "model": {"class": type(m).__name__, "name": m.name, "layers": len(m.layers),
                            "params": m.count_params(), "no_xla": []},
                  "jit": {"aug": [aug.jit_compile, layers_without_xla(aug)], "m": [m.jit_compile, layers_without_xla(m)]}}))
"""


@pytest.mark.tf
def test_a_fit_writes_at_most_eight_tags_and_the_verdict_as_text(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray
    logdir = str(tmp_path / "run1")
    out = subprocess.run([sys.executable, "-c", FIT, logdir], capture_output=True, text=True, timeout=400,
                         env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.returncode == 0, out.stderr[-3000:]
    window = json.loads(out.stdout.splitlines()[-1])
    report, last = window["report"], window["steps"][1]
    assert report["status"] == "ok", report.get("error")
    # What trained, recorded in the window's sidecar and carried by its report (compare reads it).
    assert report["model"] == window["model"] and window["model"]["params"] == 32 * 64 + 64 + 64 + 1
    # The layers recorded as without XLA are those with which Keras itself turns jit_compile=True off.
    assert window["jit"] == {"aug": [False, ["RandomRotation"]], "m": [True, []]}

    ea = EventAccumulator(logdir, size_guidance={"tensors": 0})
    ea.Reload()
    tags = ea.Tags()["tensors"]
    kind = {t: ea.SummaryMetadata(t).plugin_data.plugin_name for t in tags}
    scalars = sorted(t for t in tags if kind[t] == "scalars")
    assert len(scalars) <= 8 and len(tags) <= MAX_TAGS, tags
    assert [t for t in tags if kind[t] == "text"] == [VERDICT_TAG]
    (record,) = glob.glob(os.path.join(logdir, "plugins", "bottleneck", "system_*.json"))
    with open(record) as f:
        intervals = json.load(f)["intervals"]
    gpus = any(iv.get("gpus") for iv in intervals)
    assert scalars == sorted(t for t in SCALAR_TAGS if gpus or t != GPU_UTIL_PCT)

    # The verdict at the window's last step, as the Text dashboard shows it.
    from tensorboard import plugin_util
    (entry,) = ea.Tensors(VERDICT_TAG)
    text = make_ndarray(entry.tensor_proto).item().decode("utf-8")
    html = plugin_util.markdown_to_safe_html(text)
    assert entry.step == last
    for words in (f"<strong>steps {window['steps'][0]}-{last}: {report['bottleneck_label']} ({report['cause']}, "
                  f"confidence {report['confidence']:.2f})</strong>",
                  f"kind <code>{report['bottleneck']}</code>, cause <code>{report['cause']}</code>",
                  "fix first: " + report["recommendations"][0]["title"]):
        assert words in html, (words, html)

    def points(tag):
        return [(e.step, float(make_ndarray(e.tensor_proto))) for e in ea.Tensors(tag)]

    # The scalars kept carry the figures the report, the trend file and the system record hold.
    assert points(INPUT_PCT) == [(last, pytest.approx(report["breakdown_pct"]["input"], abs=0.01))]
    (trend,) = glob.glob(os.path.join(logdir, "plugins", "bottleneck", "steptimes_*.json"))
    with open(trend) as f:
        periods = json.load(f)["points"]
    assert [p["step"] for p in periods] == [64, 128]  # one point per epoch
    for tag, key in ((STEP_TIME_P50, "p50_ms"), (STEP_TIME_P90, "p90_ms")):
        assert points(tag) == [(p["step"], pytest.approx(p[key], rel=1e-5)) for p in periods]
    for tag, key in ((CPU_PCT, "cpu_pct"), (PROCESS_CORES, "tree_cores"), (OTHER_CORES, "other_cores")):
        assert [v for _, v in points(tag)] == pytest.approx([iv[key] for iv in intervals], rel=1e-5, abs=1e-6)
