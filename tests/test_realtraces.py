"""End to end on real profiler output from public projects (../shared/realtraces/SOURCES.md)."""
import glob
import json
import os
import subprocess

import pytest

from conftest import tfbneck_cmd, xprof_input_pipeline

TF_TRAINING = {
    "homl-macos/20221130_2021", "homl-macos/chapter_14/mnist/run_20221222_110330",
    "pfe-thesis-gpu/cnn_download128/train", "pfe-thesis-gpu/cnn_prefetch8/train",
    "pfe-thesis-gpu/prefetch_example/train", "xprof-demo/GPU-multi-worker",
}
JAX = {"amd-jax/jax08_attention", "amd-jax/jax08_gemm", "amd-jax/jax_te_fused_attn", "tpu-jax/matmul"}

#: run -> (bottleneck, cause, step_source, step count): what each trace supports (SOURCES.md: what
#: its profiler concluded at the time, and what the trace holds).
VERDICTS = {
    "amd-jax/jax08_attention": ("unknown", "not_tensorflow", "none", 0),
    "amd-jax/jax08_gemm": ("unknown", "not_tensorflow", "none", 0),
    "amd-jax/jax_te_fused_attn": ("unknown", "not_tensorflow", "none", 0),
    "tpu-jax/matmul": ("unknown", "not_tensorflow", "none", 0),
    # tf.data MapAndBatch dominates the host (its input_pipeline.pb says so).
    "homl-macos/20221130_2021": ("cpu", "input_preprocessing", "train_function_calls", 1),
    # Host plane only, but the tensors were allocated by the Apple GPU's PluggableDevice: its step
    # is the device's work.
    "homl-macos/chapter_14/mnist/run_20221222_110330": ("device", "model_compute", "train_function_calls", 1),
    # Eager inference on a CPU laptop: the model's math on the host is the work; no steps.
    "laptop-cpu/eager_inference/train": ("device", "model_compute", "none", 0),
    # Its profiler: 56.9 % of step time in kernel launch.
    "pfe-thesis-gpu/cnn_download128/train": ("cpu", "kernel_launch", "trace_context ('TraceContext')", 19),
    # A GPU plane without events and no GPU allocations: the model ran on the CPU.
    "pfe-thesis-gpu/cnn_prefetch8/train": ("cpu", "model_on_cpu", "step_markers ('train')", 19),
    "pfe-thesis-gpu/prefetch_example/train": ("cpu", "model_on_cpu", "train_function_calls", 1),
    # 74.6 % GPU compute; input (11.5 %) moderate.
    "xprof-demo/GPU-multi-worker": ("device", "model_compute", "device_steps_line (/device:GPU:4)", 1),
}


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


def test_every_trace_gets_its_verdict_and_steps(report):
    assert set(VERDICTS) == set(report)
    got = {run: (s["bottleneck"], s["cause"], s["step_source"], s["steps"]["count"]) for run, s in report.items()}
    assert got == VERDICTS


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


def _xprof_shares(xplane, workdir):
    """XProf 2.24.2's own input-pipeline analysis of one file: per-step averages, % of its step."""
    p = xprof_input_pipeline(xplane, workdir)["p"]
    step = float(p["steptime_ms_average"])
    assert step > 0, p.get("input_conclusion")  # it does compute steps on these two
    return {k[:-len("_time_ms_avg")]: 100.0 * float(v) / step for k, v in p.items() if k.endswith("_time_ms_avg")}


def _xplane(realtraces, run):
    files = glob.glob(os.path.join(realtraces, run, "plugins", "profile", "*", "*.xplane.pb"))
    assert len(files) == 1, files
    return files[0]


def test_input_share_agrees_with_xprof_on_the_gpu_thesis(report, realtraces, tmp_path):
    """README, 'Compared with XProf': both find ~0 % input on pfe-thesis-gpu/cnn_download128."""
    theirs = _xprof_shares(_xplane(realtraces, "pfe-thesis-gpu/cnn_download128/train"), tmp_path)
    ours = report["pfe-thesis-gpu/cnn_download128/train"]["breakdown_pct"]
    assert abs(ours["input"] - theirs["infeed"]) <= 5.0
    assert abs(ours["device_compute"] - theirs["device_compute"]) <= 10.0


def test_xprof_all_others_split_on_gpu_multi_worker(report, realtraces, tmp_path):
    """README: XProf reports 0 % input and 30 % 'All Others'; tfbneck splits that time into
    11.5 % input (the blocking MultiDeviceIteratorGetNextFromShard), 11.6 % kernel launch and
    2 % unrecorded."""
    ours = report["xprof-demo/GPU-multi-worker"]["breakdown_pct"]
    assert ours["input"] == pytest.approx(11.5, abs=0.3)
    assert ours["kernel_launch"] == pytest.approx(11.6, abs=0.3)
    assert ours["idle"] == pytest.approx(2.0, abs=0.3)
    theirs = _xprof_shares(_xplane(realtraces, "xprof-demo/GPU-multi-worker"), tmp_path)
    assert theirs["infeed"] == 0.0
    assert theirs["other"] == pytest.approx(30.2, abs=1.5)  # SOURCES.md: 30.2 % "All Others"
    others = ours["input"] + ours["kernel_launch"] + ours["host_compute"] + ours["idle"]
    assert abs(others - theirs["other"]) <= 6.0
    assert abs(ours["device_compute"] - theirs["device_compute"]) <= 6.0
