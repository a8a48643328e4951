"""Which operations take the time (issue 27): ``top_ops`` / ``op_summary`` against XProf's own
``framework_op_stats`` on real CPU traces, device ops against the device's busy time on real
GPU traces, the demo runs' expected ops, ``analyze --ops``, and ``compare`` at op level on two
real runs that differ in one layer's width."""
import glob
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser

import pytest

from conftest import DEMO_LOGS, HERE, SHARED, need_shared, tfbneck_cmd

#: Committed demo runs (real TensorFlow 2.21 CPU runs, demo_logs/make_demo_logs.py) whose host
#: op types are compared with XProf's.
XPROF_DEMOS = ("compute_bound", "cpu_bound_input", "pair_map_parallel", "pair_compiled", "slow_file_reads")
#: XProf's op types that are not ops: ``IDLE`` (host time without ops) and ``Dataset`` (tf.data
#: iterator events, which the report lists as stages in ``input_pipeline.stages``).
NOT_OPS = ("IDLE", "Dataset")
#: Two op types whose times are within this fraction of each other may come in either order:
#: XProf totals the whole trace, the report the steady steps only (warm-up excluded).
NEAR_TIE = 0.15
WIDTH_JOB = os.path.join(HERE, "tf_jobs", "width_fit.py")


def analyze(path, *extra):
    r = subprocess.run(tfbneck_cmd() + ["analyze", str(path), "--format", "json", *extra], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["sessions"]


def xprof_host_types(xplane, workdir):
    """XProf's ``framework_op_stats`` on a copy of ``xplane`` (XProf writes its cache beside the
    trace): total self time (us) per host op type, ``NOT_OPS`` left out, largest first."""
    pytest.importorskip("xprof.convert.raw_to_tool_data",
                        reason="XProf's converter (tensorboard-plugin-profile >= 2.19, package xprof) is not installed")
    dest = os.path.join(str(workdir), "xprof_copy", "plugins", "profile", "session")
    os.makedirs(dest, exist_ok=True)
    copy = shutil.copy(xplane, os.path.join(dest, os.path.basename(xplane)))
    code = ("import sys, json\n"
            "from xprof.convert import raw_to_tool_data as r\n"
            "data, _ = r.xspace_to_tool_data([sys.argv[1]], 'framework_op_stats', {})\n"
            "d = json.loads(data)\n"
            "d = d[0] if isinstance(d, list) else d\n"
            "cols = [c['id'] for c in d['cols']]\n"
            "rows = [dict(zip(cols, [c.get('v') for c in row['c']])) for row in d['rows']]\n"
            "print('RESULT', json.dumps([[r['host_or_device'], r['type'], r['total_self_time']] for r in rows]))\n")
    r = subprocess.run([sys.executable, "-c", code, copy], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3"))
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    assert r.returncode == 0 and line, f"XProf's converter failed on {xplane}: {r.stderr[-2000:]}"
    totals = Counter()
    for where, kind, self_us in json.loads(line[0][len("RESULT "):]):
        if where == "Host" and kind not in NOT_OPS:
            totals[kind] += self_us
    return totals.most_common()


def our_host_types(session):
    """The report's host op types (host and tf.data functions together, as XProf's Host rows)."""
    totals = Counter()
    for g in session["op_summary"]["by_type"]:
        if g["where"] in ("host", "input_pipeline"):
            totals[g["type"]] += g["self_ms_per_step"]
    return totals.most_common()


def assert_ranking_agrees(ours, theirs, top=5):
    """XProf's ``top`` types are among our ``top + 3`` and in XProf's order, except near ties."""
    want = [k for k, _ in theirs[:top]]
    mine = dict(ours)
    ranked = [k for k, _ in ours[:top + 3]]
    assert set(want) <= set(ranked), (want, ours[:top + 3])
    theirs_d = dict(theirs)
    for i, a in enumerate(want):
        for b in want[i + 1:]:
            if theirs_d[b] < (1 - NEAR_TIE) * theirs_d[a]:  # XProf separates them clearly
                assert mine[a] > mine[b], (a, b, mine[a], mine[b], theirs[:top])


def _xplane(folder):
    (path,) = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    return path


@pytest.mark.parametrize("demo", XPROF_DEMOS)
def test_host_op_type_ranking_agrees_with_xprof_on_demo_runs(demo, tmp_path):
    """Acceptance 1: XProf's top 5 host op types by self time (IDLE out), in the same order."""
    folder = os.path.join(DEMO_LOGS, demo)
    theirs = xprof_host_types(_xplane(folder), tmp_path)
    (s,) = analyze(folder)
    assert_ranking_agrees(our_host_types(s), theirs)


def test_compute_bound_top_host_op_is_matmul_with_the_largest_share():
    """Acceptance 2: the model math of the CPU-bound MLP is its MatMuls."""
    (s,) = analyze(os.path.join(DEMO_LOGS, "compute_bound"))
    host = [r for r in s["top_ops"] if r["where"] == "host"]
    assert "MatMul" in host[0]["type"] and host[0]["pct"] == max(r["pct"] for r in host)
    types = [g for g in s["op_summary"]["by_type"] if g["where"] == "host"]
    assert "MatMul" in types[0]["type"] and types[0]["pct"] > 2 * types[1]["pct"]
    # Self times average over the steady steps: the per-step values add up to the mean.
    for r in host[:5]:
        assert sum(r["self_ms_steps"]) / s["op_summary"]["steps"] == pytest.approx(r["self_ms_per_step"], abs=2e-3)
    assert s["op_summary"]["steps"] == s["steps"]["count"]


def test_cpu_bound_input_blocking_stage_ops_are_the_map_functions_sin_and_cos():
    """Acceptance 2: the blocking Map stage's function is 200 sin/cos passes (make_demo_logs.py)."""
    (s,) = analyze(os.path.join(DEMO_LOGS, "cpu_bound_input"))
    stage = s["input_pipeline"]["bottleneck_stage"]
    mine = [g for g in s["op_summary"]["by_type"] if g["where"] == "input_pipeline" and g["stage"] == stage]
    assert {g["type"] for g in mine[:2]} == {"Sin", "Cos"}
    ops = [r for r in s["top_ops"] if r["where"] == "input_pipeline"]
    assert ops and all(r["stage"] == stage for r in ops) and ops[0]["type"] in ("Sin", "Cos")
    first = s["recommendations"][0]["detail"]
    assert "`Sin`" in first and "`Cos`" in first and f"`{stage.split('::')[-1]}`" in first


def test_an_input_stage_whose_ops_the_trace_lacks_is_said_not_silent():
    """TensorFlow's profiler sometimes records a tf.data function's calls without one op inside
    (default-option `.map(f).batch(b)`, 3 of 6 windows of one program here): the first
    recommendation says its ops cannot be named, instead of saying nothing. The summary is the
    demo run's own with its tf.data op types taken out, as such a window's is."""
    from tfbneck_plugin.analysis.op_advice import name_ops
    (s,) = analyze(os.path.join(DEMO_LOGS, "cpu_bound_input"))
    stage = s["input_pipeline"]["bottleneck_stage"]
    without = dict(s["op_summary"], by_type=[g for g in s["op_summary"]["by_type"] if g["where"] != "input_pipeline"])
    recs = [{"fix": "parallel_map", "title": "t", "detail": "d", "code": None}]
    (first,) = name_ops("input_preprocessing", recs, without, stage)
    assert first["detail"].startswith("d The trace holds no op events inside `") and "cannot be named" in first["detail"]
    (named,) = name_ops("input_preprocessing", recs, s["op_summary"], stage)
    assert "costliest ops" in named["detail"] and "no op events" not in named["detail"]


def _gpu_sessions():
    root = need_shared(os.path.join(SHARED, "realtraces-gpu"), "real GPU traces")
    return [d for d in glob.glob(os.path.join(root, "**", "plugins", "profile", "*"), recursive=True)
            if glob.glob(os.path.join(d, "*.xplane.pb"))]


def test_gpu_device_ops_have_kernels_and_add_up_to_the_busy_time():
    """Acceptance 1, beyond XProf (2.24.2's framework_op_stats gives only IDLE on these traces)."""
    sessions = _gpu_sessions()
    assert len(sessions) >= 5
    for folder in sessions:
        (s,) = analyze(folder)
        summary, (dev,) = s["op_summary"], s["devices"]
        busy = summary["device_busy_ms_per_step"]
        # The device rows share out the busy time: their sum is it, and it is the busy share
        # devices.summarize measures from the union of the device's intervals.
        assert summary["self_ms_per_step"]["device"] == pytest.approx(busy, abs=2e-3)
        assert 100 * busy / summary["step_ms"] == pytest.approx(dev["busy_pct"], abs=0.05)
        top = [r for r in s["top_ops"] if r["where"] == "device"][:5]
        assert top and all(r["kernels"] for r in top)
        assert all(r["type"] != "(no op recorded)" for r in top)  # the trace links each to its TF op
        compute = [r for r in top if not r["type"].startswith(("_Recv", "_Send", "Memcpy"))]
        assert compute and all(r["tensor_core"] in (True, False) for r in compute)


def test_analyze_ops_table_shows_the_json_numbers_sorted_and_limited():
    folder = os.path.join(DEMO_LOGS, "cpu_bound_input")
    (s,) = analyze(folder)
    for sort, places in (("host", ("host", "input_pipeline")), ("self", ("host", "input_pipeline"))):
        r = subprocess.run(tfbneck_cmd() + ["analyze", folder, "--ops", "--sort", sort, "--row-limit", "4"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        head = next(i for i, l in enumerate(lines) if l.startswith("Name "))
        body = lines[head + 2:head + 2 + 4]
        want = sorted((x for x in s["top_ops"] if x["where"] in places), key=lambda x: -x["self_ms_per_step"])[:4]
        assert len(body) == 4 and lines[head + 6].startswith("---")
        for line, row in zip(body, want):
            assert line.startswith(row["name"][:50]) and f"{row['self_ms_per_step']:.3f}" in line
    r = subprocess.run(tfbneck_cmd() + ["analyze", folder, "--ops", "--sort", "device"], capture_output=True,
                       text=True, timeout=120)
    assert "no TensorFlow ops" in r.stdout  # a CPU-only run has no device ops


def _need_tf():
    import importlib.util
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed (pip install 'tfbneck-plugin[tensorflow]')")


@pytest.fixture(scope="module")
def width_pair(tmp_path_factory):
    """Two real runs (BottleneckProfiler) of one MLP whose ``wide`` layer has 128 then 2048 units."""
    _need_tf()
    out = []
    for width in (128, 2048):
        logdir = tmp_path_factory.mktemp(f"w{width}")
        r = subprocess.run([sys.executable, WIDTH_JOB, str(logdir), str(width)], capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-3000:]
        out.append(str(logdir))
    return out


@pytest.mark.tf
def test_compare_names_the_widened_layer_as_the_largest_change(width_pair):
    """Acceptance 3."""
    r = subprocess.run(tfbneck_cmd() + ["compare", *width_pair, "--format", "json"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (c,) = json.loads(r.stdout)["comparisons"]
    changes = c["op_changes"]
    top_scope = changes["scopes"][0]
    assert top_scope["scope"].split("/")[-1].startswith("wide"), changes["scopes"][:3]
    assert top_scope["change_ms"] > 0 and top_scope["p_value"] < 0.05
    grown = [o for o in changes["ops"] if o["change_ms"] > 0]
    assert "/wide" in grown[0]["name"], changes["ops"][:5]
    grown_types = [t for t in changes["types"] if t["change_ms"] > 0]
    assert "MatMul" in grown_types[0]["type"], changes["types"][:5]  # a wider layer: more matrix math
    text = subprocess.run(tfbneck_cmd() + ["compare", *width_pair], capture_output=True, text=True, timeout=300).stdout
    assert f"{top_scope['scope']}: {top_scope['baseline_ms']:.3f} -> {top_scope['candidate_ms']:.3f}" in text


@pytest.mark.tf
def test_host_op_type_ranking_agrees_with_xprof_on_a_fresh_run(width_pair, tmp_path):
    """Acceptance 1 on a run made now with BottleneckProfiler."""
    folder = width_pair[1]
    theirs = xprof_host_types(_xplane(folder), tmp_path)
    (s,) = analyze(folder)
    assert_ranking_agrees(our_host_types(s), theirs)


class _OpsTable(HTMLParser):
    """The rows of the notebook display's top-ops table: (data-where, data-op, cell texts)."""

    def __init__(self):
        super().__init__()
        self.rows, self._in, self._cell = [], False, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "tfb-ops-table" in (a.get("class") or ""):
            self._in = True
        elif self._in and tag == "tr" and "data-op" in a:
            self.rows.append([a["data-where"], a["data-op"], []])
        elif self._in and tag == "td" and self.rows:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self._in = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1][2].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


@pytest.mark.parametrize("demo", ["compute_bound", "cpu_bound_input"])
def test_notebook_display_shows_the_json_numbers(demo):
    """Acceptance 4: the notebook display (notebook.session_html, what ``display(report)``
    renders) shows the first ``top_ops`` rows with the JSON's numbers."""
    from tfbneck_plugin.notebook.session import session_html
    from tfbneck_plugin.notebook.ops import MAX_OPS
    (s,) = analyze(os.path.join(DEMO_LOGS, demo))
    parser = _OpsTable()
    parser.feed(session_html(s))
    want = s["top_ops"][:MAX_OPS]
    assert len(parser.rows) == len(want) == MAX_OPS
    for (where, op, cells), r in zip(parser.rows, want):
        assert (where, op) == (r["where"], r["name"])
        assert cells[0] == r["name"] and cells[1] == r["type"]
        assert [float(c) for c in cells[3:6]] == [r["self_ms_per_step"], r["pct"], r["count_per_step"]]


def test_eager_ops_are_host_ops_named_by_type():
    """An eager program (demo_logs/pair_eager: the same MLP run op by op) has no op TraceMes:
    its ops are its ``EagerExecute`` events, named by their ``eager_op`` type; the MLP's
    MatMuls come first, as in the compiled run (XProf's framework_op_stats lists none of them)."""
    (s,) = analyze(os.path.join(DEMO_LOGS, "pair_eager"))
    host = [r for r in s["top_ops"] if r["where"] == "host"]
    assert host[0]["name"] == "MatMul (eager)" and host[0]["type"] == "MatMul"
    assert all(r["name"] == f"{r['type']} (eager)" for r in host)
    assert host[0]["count_per_step"] >= 2  # the forward and backward MatMuls of each Dense layer


@pytest.mark.parametrize("kernel, tensor_core, reduced", [
    ("volta_sgemm_128x64_nn", False, False),                       # fp32 SGEMM (the shared GPU traces)
    ("volta_h884gemm_64x64_ldg8_nn", True, True),                  # Volta half-precision MMA
    ("turing_fp16_s1688cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", True, True),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16", True, True),
    ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", True, False),   # TF32 on Tensor Cores
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>", False, False),
])
def test_tensor_core_and_reduced_precision_from_kernel_names(kernel, tensor_core, reduced):
    """XProf's kernel_stats rule (MMA shapes 884/1688, hmma/xmma) and the 16-bit type in the name."""
    from tfbneck_plugin.analysis.op_report import REDUCED_PRECISION_RE, TENSOR_CORE_RE
    assert bool(TENSOR_CORE_RE.search(kernel)) is tensor_core
    assert bool(REDUCED_PRECISION_RE.search(kernel)) is reduced
