"""Accelerator traces with exact, known timings: GPU planes, launch overhead, collectives,
several hosts, missing device data (tests/support/xspace_builder.py)."""

import pytest

from tfbneck_plugin.analysis import devices, multihost
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions
from support.xspace_builder import SpaceBuilder, session_path

MS = 1000  # builder times are in us
STEPS = 3


def analyze_one(root):
    sessions = find_sessions(str(root)).sessions
    assert len(sessions) == 1
    return analyze_session(sessions[0])


def gpu_space(step_ms=10, kernels=(), h2d=(), nccl=(), getnext=(), launch_bound=False, streams=1):
    """Host markers of ``step_ms`` per step; per-step device activity given as (start_ms, dur_ms)."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    gn = host.line("tf_data_iterator_get_next/1")
    ex = host.line("tf_Compute/2")
    gpu = b.plane("/device:GPU:0").plane_stat("device_vendor", "Nvidia")
    comp = [gpu.line(f"Stream #{k + 1}(Compute)", line_id=k + 1) for k in range(streams)]
    copy = gpu.line("Stream #9(MemcpyH2D)", line_id=9)
    ops = gpu.line("TensorFlow Ops", line_id=-559038734)  # derived: must not be counted again
    steps_line = gpu.line("Steps", line_id=-559038737)
    for k in range(STEPS):
        t = k * step_ms * MS
        py.event("train", t, step_ms * MS, step_num=k + 1, _r=1)
        py.event("FunctionRun", t, step_ms * MS, _r=1, _p=500 + k)
        steps_line.event(str(k), t, step_ms * MS)
        if launch_bound:
            ex.event("ExecutorState::Process", t, step_ms * MS, _c=500 + k)
        for i, (s, d) in enumerate(kernels):
            comp[i % streams].event("volta_sgemm_128x64_nn", t + s * MS, d * MS)
            ops.event("model/dense/MatMul:MatMul", t + s * MS, d * MS)
        for s, d in h2d:
            copy.event("MemcpyH2D", t + s * MS, d * MS)
        for s, d in nccl:
            comp[0].event("ncclAllReduceRingLLKernel_sum_f32", t + s * MS, d * MS)
        for s, d in getnext:
            gn.event("IteratorGetNextOp::DoCompute", t + s * MS, d * MS)
    return b


def test_device_bound_step(tmp_path):
    gpu_space(kernels=[(0.5, 9.0)], h2d=[(0.0, 0.5)]).write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["device_kind"] == "GPU" and r["step_source"] == "step_markers ('train')"
    pct = r["breakdown_pct"]
    assert pct["device_compute"] == pytest.approx(90.0, abs=0.1)
    assert pct["host_to_device"] == pytest.approx(5.0, abs=0.1)
    assert pct["host_compute"] == pytest.approx(5.0, abs=0.1)
    assert r["bottleneck"] == "device" and r["cause"] == "model_compute"
    dev = r["devices"][0]
    assert dev["device"] == "/device:GPU:0" and dev["kernels"] == STEPS and dev["busy_pct"] == pytest.approx(95.0, abs=0.1)


def test_input_bound_step_with_device_gaps(tmp_path):
    gpu_space(kernels=[(0.0, 3.0)], getnext=[(3.0, 6.0)]).write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    pct = r["breakdown_pct"]
    assert pct["device_compute"] == pytest.approx(30.0, abs=0.1)
    assert pct["input"] == pytest.approx(60.0, abs=0.1)
    assert pct["host_compute"] == pytest.approx(10.0, abs=0.1)
    # No system metrics and no file reads in the trace: nothing says the input waits on storage.
    assert (r["bottleneck"], r["cause"]) == ("cpu", "input_preprocessing")
    gaps = r["devices"][0]["longest_gaps"]
    assert gaps[0]["duration_ms"] == pytest.approx(7.0, abs=0.001)
    assert any("waited for input 86% of the gap" in e for e in r["evidence"])  # 6 of the 7 ms


def test_launch_bound_step(tmp_path):
    # 100 kernels of 10 us, one every 100 us: the GPU computes 10 % while the host launches.
    gpu_space(kernels=[(i * 0.1, 0.01) for i in range(100)], launch_bound=True).write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    pct = r["breakdown_pct"]
    assert pct["device_compute"] == pytest.approx(10.0, abs=0.1)
    assert pct["kernel_launch"] == pytest.approx(90.0, abs=0.1)
    assert r["bottleneck"] == "cpu" and r["cause"] == "kernel_launch"
    assert any("300 kernels" in e and "median 10.0 us" in e and "90.0 us" in e for e in r["evidence"])


def test_collective_dominated_step_is_network_bound(tmp_path):
    gpu_space(kernels=[(0.0, 3.0)], nccl=[(3.0, 6.0)]).write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    pct = r["breakdown_pct"]
    assert pct["collective"] == pytest.approx(60.0, abs=0.1)
    assert pct["device_compute"] == pytest.approx(30.0, abs=0.1)
    assert r["bottleneck"] == "network" and r["cause"] == "gradient_sync"


def test_overlapping_kernels_on_two_streams_count_once(tmp_path):
    gpu_space(kernels=[(0.0, 6.0), (4.0, 4.0)], streams=2).write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["breakdown_pct"]["device_compute"] == pytest.approx(80.0, abs=0.1)


def multi_host_report(tmp_path, step_ms_by_host):
    for host, step_ms in step_ms_by_host:
        gpu_space(step_ms=step_ms, kernels=[(0.0, step_ms * 0.8)]).write(session_path(tmp_path, host=host))
    return analyze_one(tmp_path)


def test_a_clear_outlier_host_is_a_straggler(tmp_path):
    r = multi_host_report(tmp_path, (("worker-0", 10), ("worker-1", 15), ("worker-2", 10)))
    assert r["hosts"] == ["worker-0", "worker-1", "worker-2"]
    assert r["steps"]["step_time_ms"]["mean"] == pytest.approx(15.0)  # set by the slowest host
    assert [h["step_time_ms"] for h in r["per_host"]] == [10.0, 15.0, 10.0]
    assert [e for e in r["evidence"] if "straggler" in e] == [
        "Host worker-1 is a straggler: 15.0 ms per step against a median of 10.0 ms."]


def test_a_host_a_hair_slower_than_equal_hosts_is_no_straggler(tmp_path):
    # The defect this pins: a MAD of 0 gave any slower host an infinite z-score.
    r = multi_host_report(tmp_path, (("worker-0", 10), ("worker-1", 10.3), ("worker-2", 10)))
    assert r["per_host"][1]["step_time_ms"] == pytest.approx(10.3)
    assert not any("straggler" in e for e in r["evidence"])


@pytest.mark.parametrize("times,expected", [
    ((10, 11, 12, 13, 14), []),          # spread out: nobody stands apart
    ((10, 10, 10.3), []),                # equal hosts, one 3 % slower
    ((10, 10, 10.2), []),
    ((10, 10, 10, 10, 30), [4]),         # a clear outlier
    ((10, 15, 10), [1]),
    ((10, 11.9), []),                    # two hosts: 1.19x
    ((10, 12.1), [1]),                   # two hosts: 1.21x
    ((12.1, 10), [0]),
])
def test_straggler_rule(times, expected):
    assert multihost.stragglers(list(times)) == expected


def test_empty_device_plane_with_kernel_launches_is_unknown(tmp_path):
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    launcher = host.line("tf_gpu_private/1")
    for k in range(STEPS):
        py.event("train", k * 10 * MS, 10 * MS, step_num=k, _r=1)
        for i in range(20):
            launcher.event("cuLaunchKernel", k * 10 * MS + i * 100, 5)
        host.line("tf_data_iterator_get_next/9") if k == 0 else None
    b.plane("/device:GPU:0").plane_stat("device_vendor", "Nvidia")
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["bottleneck"] == "unknown" and r["cause"] == "device_trace_missing"
    assert any("launched 60 kernels" in e for e in r["evidence"])
    assert any("recorded nothing" in e for e in r["evidence"])
    assert "input" not in r["cause"]


def test_a_corrupt_host_file_does_not_hide_the_other_hosts(tmp_path):
    gpu_space(kernels=[(0.0, 8.0)]).write(session_path(tmp_path, host="worker-0"))
    bad = session_path(tmp_path, host="worker-1")
    with open(bad, "wb") as f:
        f.write(b"\x0a\xff\xff\xff\x7f")
    r = analyze_one(tmp_path)
    assert r["status"] == "ok" and r["hosts"] == ["worker-0", "worker-1"]
    assert len(r["warnings"]) == 1 and bad in r["warnings"][0]
    assert r["breakdown_pct"]["device_compute"] == pytest.approx(80.0, abs=0.1)


def test_device_planes_are_read_and_summarised(tmp_path):
    """devices.read_devices and devices.summarize on the device-bound trace: one GPU, its
    kernels, H2D copies and busy share over the steps."""
    from tfbneck_plugin.analysis.host_analysis import HostAnalysis
    from tfbneck_plugin.trace.tracefile import read_space
    space = read_space(gpu_space(kernels=[(0.5, 9.0)], h2d=[(0.0, 0.5)]).write(session_path(tmp_path)))
    assert devices.device_kind("/device:GPU:0") == "GPU" and devices.device_kind("/host:CPU") is None
    found = devices.read_devices(space)
    assert [d.kind for d in found] == ["GPU"]
    steps = HostAnalysis(space).steps  # the three 10 ms steps of the trace
    assert steps is not None and steps.count == STEPS
    rows = devices.summarize(found, steps.starts, steps.ends)
    assert rows[0]["device"] == "/device:GPU:0" and rows[0]["kernels"] == STEPS
    assert rows[0]["busy_pct"] == pytest.approx(95.0, abs=0.1)
