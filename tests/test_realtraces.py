"""End to end on real profiler output from public projects (../shared/realtraces/SOURCES.md)."""
import json
import subprocess

import pytest

from conftest import tfbneck_cmd

TF_TRAINING = {
    "homl-macos/20221130_2021", "homl-macos/chapter_14/mnist/run_20221222_110330",
    "pfe-thesis-gpu/cnn_download128/train", "pfe-thesis-gpu/cnn_prefetch8/train",
    "pfe-thesis-gpu/prefetch_example/train", "xprof-demo/GPU-multi-worker",
}
JAX = {"amd-jax/jax08_attention", "amd-jax/jax08_gemm", "amd-jax/jax_te_fused_attn", "tpu-jax/matmul"}


@pytest.fixture(scope="module")
def report(realtraces):
    res = subprocess.run(tfbneck_cmd() + ["analyze", realtraces, "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    data = json.loads(res.stdout)
    return {s["run"]: s for s in data["sessions"]}


def test_every_session_gets_a_report(report):
    assert set(report) == TF_TRAINING | JAX | {"laptop-cpu/eager_inference/train"}
    for run, s in report.items():
        assert s["status"] == "ok", (run, s.get("error"))
        assert s["bottleneck"] in ("cpu", "device", "io", "network", "unknown")
        assert abs(sum(s["breakdown_pct"].values()) - 100.0) <= 0.5 or s["framework"] == "jax"


def test_every_tensorflow_training_trace_gets_steps(report):
    for run in TF_TRAINING:
        s = report[run]
        assert s["steps"]["count"] >= 1, run
        assert s["step_source"] != "none", run


def test_step_sources_are_the_expected_ones(report):
    assert report["pfe-thesis-gpu/cnn_download128/train"]["step_source"].startswith("trace_context")
    assert report["pfe-thesis-gpu/cnn_prefetch8/train"]["step_source"].startswith("step_markers")
    assert report["homl-macos/20221130_2021"]["step_source"] == "train_function_calls"
    assert report["xprof-demo/GPU-multi-worker"]["step_source"].startswith("device_steps_line")


def test_jax_traces_are_reported_plainly(report):
    for run in JAX:
        s = report[run]
        assert s["framework"] == "jax"
        assert s["bottleneck"] == "unknown" and s["cause"] == "not_tensorflow"
        assert any("no tf.data pipeline and no Keras steps" in e for e in s["evidence"])
    assert report["tpu-jax/matmul"]["device_kind"] == "TPU"
    assert report["amd-jax/jax08_gemm"]["devices"][0]["vendor"] == "AMD"


def test_homl_input_bound_by_map_and_batch(report):
    """The profiler of its day: 'tf.data MapAndBatch dominates the host'."""
    s = report["homl-macos/20221130_2021"]
    assert s["bottleneck"] == "cpu" and s["cause"] == "input_preprocessing"
    assert s["breakdown_pct"]["input"] > 50
    assert s["input_pipeline"]["bottleneck_stage"].endswith("::MapAndBatch")


def test_gpu_thesis_kernel_launch_bound(report):
    """Its profiler put 56.9 % of step time in kernel launch."""
    s = report["pfe-thesis-gpu/cnn_download128/train"]
    assert s["device_kind"] == "GPU"
    assert s["bottleneck"] == "cpu" and s["cause"] == "kernel_launch"
    assert s["breakdown_pct"]["kernel_launch"] == pytest.approx(56.9, abs=5)


def test_gpu_thesis_empty_device_plane_means_model_on_cpu(report):
    for run in ("pfe-thesis-gpu/cnn_prefetch8/train", "pfe-thesis-gpu/prefetch_example/train"):
        s = report[run]
        assert s["device_kind"] == "GPU"
        assert s["cause"] == "model_on_cpu"
        assert any("GPU sat idle" in e for e in s["evidence"])
