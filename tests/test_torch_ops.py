"""The top-ops table of PyTorch (Kineto) traces (analysis.torch_host): host rows per event
name with self and total time from the nesting on each thread, device rows credited to the
op that launched each kernel (by correlation id). Checked against a plain reading of the
JSON on real traces of ../shared/realtraces-torch, and against torch's own
``prof.key_averages()`` on a run profiled here (tf-marked: it needs torch)."""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from collections import defaultdict

import pytest

from conftest import SHARED, need_shared
from tfbneck_plugin.analysis.session import analyze_space
from tfbneck_plugin.analysis.torch_host import TorchHostAnalysis
from tfbneck_plugin.render.op_table import to_text
from tfbneck_plugin.trace.kineto import read_kineto

TORCH_TRACES = os.path.join(SHARED, "realtraces-torch")
REAL = {
    "amd_mi250_minitoy": "mi250_minitoy_train_ROCm6_2_kineto.pt.trace.json.gz",   # ROCm: hipLaunchKernel
    "ns_resolution_rank0": "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",        # CUDA, backward thread
}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
NOT_ROWS = {"python_function", "gpu_user_annotation", "cuda_sync", "Trace", "ac2g", "fwdbwd"}


def _reference(path):
    """Per op name over the ProfilerStep windows, read plainly from the JSON with torch's stack
    per thread (torch/autograd/profiler_util.py ``_populate_cpu_children``): host {name: [self
    us, total us, calls]}, device {op: total us of its kernels}."""
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation")
    # A last step with no event inside is no training step (the profiler stopped in it): left out.
    if len(steps) >= 2 and not any(steps[-1][0] <= e["ts"] < steps[-1][1] for e in events
                                   if not e["name"].startswith("ProfilerStep#")):
        steps = steps[:-1]

    def inside(t):
        return any(a <= t < b for a, b in steps)

    threads = defaultdict(list)
    for e in events:
        if e.get("cat") not in DEVICE_CATS and e.get("cat") not in NOT_ROWS:
            threads[(e["pid"], e["tid"])].append(e)
    host = defaultdict(lambda: [0.0, 0.0, 0])
    launcher = {}
    for evs in threads.values():
        evs.sort(key=lambda e: (e["ts"], -e["ts"] - e["dur"]))
        stack, child = [], defaultdict(float)
        for k, e in enumerate(evs):
            while stack and (e["ts"] >= evs[stack[-1]]["ts"] + evs[stack[-1]]["dur"]
                             or e["ts"] + e["dur"] > evs[stack[-1]]["ts"] + evs[stack[-1]]["dur"]):
                stack.pop()
            if stack:
                child[stack[-1]] += e["dur"]
            if e.get("cat") in RUNTIME_CATS and "correlation" in e.get("args", {}):
                up = evs[stack[-1]]["name"] if stack else None
                launcher[e["args"]["correlation"]] = None if up and up.startswith("ProfilerStep#") else up
            stack.append(k)
        for k, e in enumerate(evs):
            if inside(e["ts"]) and not e["name"].startswith("ProfilerStep#"):
                row = host[e["name"]]
                row[0] += e["dur"] - child[k]
                row[1] += e["dur"]
                row[2] += 1
    device = defaultdict(float)
    for e in events:
        if e.get("cat") in DEVICE_CATS and inside(e["ts"]):
            op = launcher.get(e.get("args", {}).get("correlation"))
            device[op if op is not None else e["name"]] += e["dur"]
    return len(steps), host, device


@pytest.mark.parametrize("folder", sorted(REAL))
def test_real_trace_ops_agree_with_a_plain_reading(folder):
    path = need_shared(os.path.join(TORCH_TRACES, folder, REAL[folder]), "real PyTorch traces")
    n, host, device = _reference(path)
    r = analyze_space(read_kineto(path))
    summary, ops = r["op_summary"], r["top_ops"]
    assert summary["steps"] == n  # every step steady in these traces: the same windows
    mine = {o["name"]: o for o in ops if o["where"] == "host"}
    assert mine and all(o["type"] == o["name"] and o["scope"] is None for o in ops if o["where"] == "host")
    best = sorted(host, key=lambda k: -host[k][0])[:10]
    assert [o["name"] for o in ops if o["where"] == "host"][:5] == best[:5]
    for name in best:
        self_us, total_us, calls = host[name]
        o = mine[name]
        assert o["self_ms_per_step"] == pytest.approx(self_us / 1e3 / n, abs=2e-3), name
        assert o["total_ms_per_step"] == pytest.approx(total_us / 1e3 / n, abs=2e-3), name
        assert o["count_per_step"] == pytest.approx(calls / n, abs=0.01), name
    dev = {o["name"]: o for o in ops if o["where"] == "device"}
    top = sorted(device, key=lambda k: -device[k])[:5]
    assert top and all(k.startswith("aten::") for k in top[:3])  # kernels credited to aten ops
    for name in top:
        assert dev[name]["total_ms_per_step"] == pytest.approx(device[name] / 1e3 / n, rel=0.01, abs=2e-3), name
        assert dev[name]["kernels"] and dev[name]["type"] == name


def test_real_trace_ops_text_names_pytorch():
    path = need_shared(os.path.join(TORCH_TRACES, "ns_resolution_rank0", REAL["ns_resolution_rank0"]),
                       "real PyTorch traces")
    r = analyze_space(read_kineto(path))
    r.update(run="ns_resolution_rank0", session="rank-0")
    text = to_text(r, row_limit=8)
    assert "aten::convolution_backward" in text and "cudaLaunchKernel" in text
    header = next(line for line in text.splitlines() if line.startswith("Name"))
    assert header.split()[:2] == ["Name", "Where"]  # a PyTorch op's type is its name: no Type column
    assert "TensorFlow" not in text
    # the advice names the ops that take the device's time, aten's convolutions counted as matrix math
    assert "`aten::convolution_backward` 44 % of the device's busy time" in json.dumps(r)
    share = re.search(r"MatMul/Conv ops are (\d+) % of the op time", json.dumps(r))
    assert share and int(share.group(1)) >= 60


def test_empty_table_is_worded_per_framework():
    base = {"run": "r", "session": "s", "top_ops": [], "op_summary": {}}
    assert to_text({**base, "framework": "pytorch"}) == "r/s: no PyTorch ops in the steady steps\n"
    assert to_text({**base, "framework": "tensorflow"}) == "r/s: no TensorFlow ops in the steady steps\n"


MAKE = textwrap.dedent("""
    import json, sys, torch, torch.nn as nn
    from torch.profiler import profile, ProfilerActivity, schedule
    torch.manual_seed(0); torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    loss_fn = nn.CrossEntropyLoss()
    def ready(prof):
        prof.export_chrome_trace(sys.argv[1])
        json.dump({e.key: [e.self_cpu_time_total, e.count] for e in prof.key_averages()}, open(sys.argv[2], "w"))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=8),
                 on_trace_ready=ready, with_stack=True, with_modules=True) as prof:
        for _ in range(9):
            opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step(); prof.step()
""")


@pytest.mark.tf
def test_self_cpu_time_agrees_with_key_averages(tmp_path):
    """The host rows against ``prof.key_averages()`` of the same run (recorded with its Python
    stack and modules): the top two ops in the same order (the next ones can lie within a
    point of each other), the top five among ours, each one's share of the self CPU time
    within 2 points and its self time per call within 5 %; the ops inside each Linear have its
    layer scope."""
    pytest.importorskip("torch")
    trace, ka_file = tmp_path / "w.1.pt.trace.json", tmp_path / "ka.json"
    script = tmp_path / "make.py"
    script.write_text(MAKE)
    run = subprocess.run([sys.executable, str(script), str(trace), str(ka_file)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    ka = {k: v for k, v in json.loads(ka_file.read_text()).items() if not k.startswith("ProfilerStep")}
    analysis = TorchHostAnalysis(read_kineto(str(trace)))
    table = analysis.ops
    assert analysis.step_search.steps is not None and table.steps == 8
    mine = defaultdict(lambda: [0.0, 0])  # rows kept apart by layer scope, summed by name as key_averages() groups
    for row in table.rows:
        if row.where == "host":
            mine[row.name][0] += row.self_ps / 1e6  # us, all steps
            mine[row.name][1] += row.count
    theirs = sorted(ka, key=lambda k: -ka[k][0])[:5]
    ours = sorted(mine, key=lambda k: -mine[k][0])
    assert ours[:2] == theirs[:2] and set(theirs) <= set(ours[:8])
    their_total, my_total = sum(v[0] for v in ka.values()), sum(v[0] for v in mine.values())
    for name in theirs:
        self_us, calls = mine[name]
        assert calls == ka[name][1], name
        # Shares within 2 points (1 on an idle machine; a run beside other work records more
        # near-coincident event ends, which the tree rule and key_averages() settle apart, and
        # the totals over all rows move with them: 50.2 against 48.3 under a load of 4-6).
        assert 100 * self_us / my_total == pytest.approx(100 * ka[name][0] / their_total, abs=2.0), name
        assert self_us / calls == pytest.approx(ka[name][0] / ka[name][1], rel=0.05, abs=0.5), name
    report = analysis.report()
    scopes = {g["scope"] for g in report["op_summary"]["by_scope"]}
    assert {"Sequential_0/Linear_0", "Sequential_0/Linear_1", "Sequential_0/Linear_2"} <= scopes
    assert next(o for o in report["top_ops"] if o["name"] == "aten::addmm")["scope"].startswith("Sequential_0/Linear_")
    report.update(run="made", session="w")
    header = next(line for line in to_text(report).splitlines() if line.startswith("Name"))
    assert header.split()[:3] == ["Name", "Module", "Where"]
