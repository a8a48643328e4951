"""PyTorch's profiler traces (Kineto JSON): the reader (trace.kineto) on small files written
here, the PyTorch host view, steps and advice (analysis.torch_host, torch_advice,
torch_whatif) through the analyzer, the six real traces of ../shared/realtraces-torch, and
the CLI's formats carrying the same fields for a PyTorch and a TensorFlow session."""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
from urllib.parse import quote

import numpy as np
import pytest

from conftest import DEMO_LOGS, SHARED, need_shared
from tfbneck_plugin.analysis.session import analyze_session, analyze_space
from tfbneck_plugin.logdir import find_sessions
from tfbneck_plugin.trace.kineto import KinetoSpace, read_kineto
from tfbneck_plugin.trace.xspace import TraceReadError

TORCH_TRACES = os.path.join(SHARED, "realtraces-torch")
PID, TID = 4242, 4242


def _x(cat, name, ts, dur, pid=PID, tid=TID, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _loop(steps=4, step_us=10_000.0, wait_us=6_000.0, iterator="_SingleProcessDataLoaderIter", spelling="new",
          h2d_us=0.0):
    """A training loop as Kineto writes it: each step waits ``wait_us`` in the DataLoader,
    then runs ops that launch one kernel each (fractional microseconds on purpose)."""
    op, rt, kern, cpy = (("cpu_op", "cuda_runtime", "kernel", "gpu_memcpy") if spelling == "new"
                         else ("Operator", "Runtime", "Kernel", "Memcpy"))
    stream = 7 if spelling == "new" else "stream 7"
    base = 4_458_676_522_690.655  # since boot, as many traces have it: a double holds its nanoseconds
    ev = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "python3"}}]
    for k in range(steps):
        t0 = base + k * step_us
        ev.append(_x("user_annotation", f"ProfilerStep#{k + 10}", t0, step_us))
        ev.append(_x("user_annotation", f"enumerate(DataLoader)#{iterator}.__next__", t0 + 0.5, wait_us))
        ev.append(_x(op, "aten::stack", t0 + 1.0, wait_us / 2))  # collate inside the wait: input, not model
        t = t0 + wait_us + 1.0
        if h2d_us:
            ev.append(_x(op, "aten::copy_", t, h2d_us + 5))
            ev.append(_x(rt, "cudaMemcpyAsync", t + 1, h2d_us + 3))
            ev.append(_x(cpy, "Memcpy HtoD (Pageable -> Device)", t + 2, h2d_us, pid=0, tid=stream,
                         device=0, stream=7))
            t += h2d_us + 6
        while t + 300 < t0 + step_us:
            ev.append(_x(op, "aten::mm", t, 100.25))
            ev.append(_x(rt, "cudaLaunchKernel", t + 10.5, 20.0))
            ev.append(_x(kern, "volta_sgemm_128x64_nn", t + 40.0, 200.0, pid=0, tid=stream, device=0, stream=7))
            ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": PID, "tid": TID, "ts": t + 10.5, "id": 1})
            t += 250.0
    ev.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
               "ts": base - 10, "dur": steps * step_us + 20})
    return ev


def _write(path, events, gz=False, **top):
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}],
           "traceEvents": events, **top}
    data = json.dumps(doc).encode()
    with open(path, "wb") as f:
        f.write(gzip.compress(data) if gz else data)
    return str(path)


# ---- the reader ---------------------------------------------------------------------------------

def test_fractional_microseconds_become_exact_ps_and_devices_come_from_args(tmp_path):
    space = read_kineto(_write(tmp_path / "w.1.pt.trace.json", _loop(steps=1)))
    assert isinstance(space, KinetoSpace)
    host = space.plane("/host:CPU")
    gpu = space.plane("/device:GPU:0")
    assert host is not None and gpu is not None and [p.name for p in space.planes] == ["/host:CPU", "/device:GPU:0"]
    line = host.lines[0]
    assert line.name == "python3"
    names = [host.event_names[int(i)] for i in line.name_id]
    step = names.index("ProfilerStep#10")
    # .655 us: the nanoseconds are kept (to the double's resolution, 1 ns at 4.5e12 us)
    assert abs(int(line.start_ps[step]) % 1_000_000 - 655_000) <= 1_000 and int(line.dur_ps[step]) == 10_000 * 10 ** 6
    mm = names.index("aten::mm")
    assert int(line.dur_ps[mm]) == 100_250_000
    assert gpu.plane_stats() == {"device_vendor": "Nvidia"}
    assert [l.name for l in gpu.lines] == ["Stream #7"]
    # flows, the whole-window "Trace" span and metadata are not events
    assert "ac2g" not in names and "PyTorch Profiler (0)" not in names
    assert space.distributed == {}


def test_old_spellings_read_as_the_new(tmp_path):
    new = analyze_space(read_kineto(_write(tmp_path / "a.1.pt.trace.json", _loop())))
    old = analyze_space(read_kineto(_write(tmp_path / "b.1.pt.trace.json", _loop(spelling="old"))))
    assert new["breakdown_pct"] == old["breakdown_pct"]
    assert [d["kernels"] for d in old["devices"]] == [d["kernels"] for d in new["devices"]] and old["devices"][0]["kernels"] > 0


def test_distributed_info_present_partial_absent(tmp_path):
    full = {"backend": "nccl", "rank": 3, "world_size": 8, "pg_count": 1}
    assert read_kineto(_write(tmp_path / "f.1.pt.trace.json", _loop(1), distributedInfo=full)).distributed == \
        {"backend": "nccl", "rank": 3, "world_size": 8}
    assert read_kineto(_write(tmp_path / "p.1.pt.trace.json", _loop(1), distributedInfo={"rank": 0})).distributed == \
        {"rank": 0}
    assert read_kineto(_write(tmp_path / "n.1.pt.trace.json", _loop(1))).distributed == {}


@pytest.mark.parametrize("content, kind, words", [
    (None, "corrupt", "not valid JSON"),                     # truncated
    (b'{"traceEvents": {"a": 1}}', "corrupt", "no traceEvents list"),
    (b'{"traceEvents": [{"ph": "X", "ts": "soon"}]}', "corrupt", "numeric time"),
    (b'[]', "corrupt", "no complete (ph X) events"),
])
def test_bad_files_are_one_line_naming_the_file(tmp_path, content, kind, words):
    path = tmp_path / "bad.1.pt.trace.json.gz"
    full = gzip.decompress(open(_write(tmp_path / "ok.pt.trace.json.gz", _loop(2), gz=True), "rb").read())
    data = full[: len(full) // 2] if content is None else content
    path.write_bytes(gzip.compress(data))
    with pytest.raises(TraceReadError) as err:
        read_kineto(str(path))
    assert err.value.kind == kind and words in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)
    # the session report says the same, never a traceback
    [session] = [s for s in find_sessions(str(path)).sessions]
    report = analyze_session(session)
    assert report["status"] == "error" and report["error_kind"] == kind and str(path) in report["error"]


def test_truncated_gzip_is_one_line(tmp_path):
    path = _write(tmp_path / "t.1.pt.trace.json.gz", _loop(2), gz=True)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(TraceReadError) as err:
        read_kineto(path)
    assert "not a valid gzip file" in str(err.value) and path in str(err.value)


# ---- the analysis of a PyTorch loop -------------------------------------------------------------

def test_single_process_dataloader_is_input_bound_with_pytorch_fixes(tmp_path):
    r = analyze_space(read_kineto(_write(tmp_path / "w.1.pt.trace.json", _loop(steps=6))))
    assert r["framework"] == "pytorch" and r["step_source"] == "profiler_step"
    assert r["steps"]["count"] == 6 and r["steps"]["step_time_ms"]["mean"] == pytest.approx(10.0)
    # 6 ms of each 10 ms step in the DataLoader's __next__ while the GPU idles
    assert r["breakdown_pct"]["input"] == pytest.approx(60.0, abs=0.1)
    assert (r["bottleneck"], r["cause"]) == ("cpu", "input_preprocessing")
    assert any("_SingleProcessDataLoaderIter" in e and "num_workers=0" in e for e in r["evidence"])
    first = r["recommendations"][0]
    assert first["fix"] == "num_workers" and "num_workers=4" in first["code"]
    # 4 workers beside a 4 ms rest: max(4, 6/4) = 4 ms per batch
    assert first["predicted"]["time_per_batch_ms"] == pytest.approx(4.0, abs=0.01)
    assert not any("tf.data" in (rec["code"] or "") + rec["detail"] for rec in r["recommendations"])


def test_a_last_step_that_only_fetched_is_left_out(tmp_path):
    """The loop ended (or the profiler stopped) inside a step prof.step() had opened: a fetch
    and nothing else. It is no training step: dropped, counted in dropped_partial; a last step
    that trains is kept."""
    ev = _loop(steps=4)
    t0 = max(e["ts"] + e.get("dur", 0) for e in ev if e.get("ph") == "X" and e["cat"] != "Trace") + 5
    ev += [_x("user_annotation", "ProfilerStep#14", t0, 9_000.0),
           _x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 0.5, 6_000.0),
           _x("cpu_op", "aten::stack", t0 + 1.0, 3_000.0)]
    r = analyze_space(read_kineto(_write(tmp_path / "w.1.pt.trace.json", ev)))
    assert r["steps"]["count"] == 4 and r["steps"]["dropped_partial"] == 1
    assert r["steps"]["step_time_ms"]["mean"] == pytest.approx(10.0)
    kept = analyze_space(read_kineto(_write(tmp_path / "w.2.pt.trace.json", _loop(steps=4))))
    assert kept["steps"]["count"] == 4 and kept["steps"]["dropped_partial"] == 0


def test_worker_processes_get_no_num_workers_model_but_a_bound(tmp_path):
    r = analyze_space(read_kineto(_write(tmp_path / "w.1.pt.trace.json",
                                         _loop(steps=6, iterator="_MultiProcessingDataLoaderIter"))))
    assert r["cause"] == "input_preprocessing"
    fixes = {rec["fix"]: rec for rec in r["recommendations"]}
    assert "num_workers" not in fixes and fixes["more_workers"]["predicted"] is None
    assert fixes["more_workers"]["bound_ms"] == pytest.approx(4.0, abs=0.01)


def test_host_to_device_copies_get_non_blocking(tmp_path):
    r = analyze_space(read_kineto(_write(tmp_path / "w.1.pt.trace.json",
                                         _loop(steps=4, wait_us=100.0, h2d_us=4_000.0))))
    assert r["breakdown_pct"]["host_to_device"] == pytest.approx(40.0, abs=0.5)
    assert r["cause"] == "host_device_transfer"
    rec = r["recommendations"][0]
    assert rec["fix"] == "non_blocking" and "non_blocking=True" in rec["code"]
    assert rec["predicted"]["time_per_batch_ms"] == pytest.approx(6.0, abs=0.05)


def test_no_profiler_steps_says_why(tmp_path):
    ev = [e for e in _loop(2) if not str(e.get("name", "")).startswith("ProfilerStep")]
    r = analyze_space(read_kineto(_write(tmp_path / "w.1.pt.trace.json", ev)))
    assert r["step_source"] == "none" and "ProfilerStep#N" in r["evidence"][0]


# ---- discovery and the six real traces ----------------------------------------------------------

def test_discovery_groups_ranks_and_splits_repeated_workers(tmp_path):
    run = tmp_path / "logs" / "resnet"
    run.mkdir(parents=True)
    _write(run / "host_1.100.pt.trace.json", _loop(1))
    _write(run / "host_2.101.pt.trace.json.gz", _loop(1), gz=True)
    again = tmp_path / "logs" / "cycles"
    again.mkdir()
    _write(again / "host_1.100.pt.trace.json", _loop(1))
    _write(again / "host_1.200.pt.trace.json", _loop(1))
    found = {(s.run, s.name): s.hosts for s in find_sessions(str(tmp_path / "logs")).sessions}
    assert found == {("resnet", "resnet"): ["host_1.100", "host_2.101"],
                     ("cycles", "host_1.100"): ["host_1.100"], ("cycles", "host_1.200"): ["host_1.200"]}


#: What each real trace shows, read from the file by hand (SOURCES.md describes them).
REAL = {
    "amd_mi250_minitoy": dict(steps=1, vendor="AMD", cause=None),  # ProfilerStep#2 holds nothing: a cut last step
    "distributed_info_missing": dict(steps=1, vendor=None, cause="device_trace_missing"),
    "nccl_2gpu": dict(steps=3, vendor="Nvidia", cause=None),
    "ns_resolution_rank0": dict(steps=5, vendor="Nvidia", cause="model_compute"),
    "sampled_128gpu": dict(steps=2, vendor="Nvidia", cause="gradient_sync"),
    "simple_add_no_steps": dict(steps=0, vendor="Nvidia", cause=None),
}


@pytest.mark.parametrize("folder", sorted(REAL))
def test_real_torch_traces_report(folder):
    path = os.path.join(need_shared(TORCH_TRACES, "../shared/realtraces-torch (real PyTorch traces)"), folder)
    [session] = find_sessions(path).sessions
    r = analyze_session(session)
    assert r["status"] == "ok", r.get("error")
    want = REAL[folder]
    assert r["framework"] == "pytorch"
    assert r["steps"]["count"] == want["steps"]
    assert r["step_source"] == ("profiler_step" if want["steps"] else "none")
    if want["vendor"]:
        assert {d["vendor"] for d in r["devices"]} == {want["vendor"]}
    else:
        assert r["devices"] == []
    if want["cause"]:
        assert r["cause"] == want["cause"]
    assert sum(r["breakdown_pct"].values()) == pytest.approx(100.0, abs=0.1)
    assert r["recommendations"] and all(rec["fix"] for rec in r["recommendations"])


def test_the_128gpu_ranks_are_one_session_of_two_hosts():
    path = os.path.join(need_shared(TORCH_TRACES, "../shared/realtraces-torch (real PyTorch traces)"), "sampled_128gpu")
    [session] = find_sessions(path).sessions
    assert session.hosts == ["rank-0", "rank-1"]
    r = analyze_session(session)
    assert r["status"] == "ok" and len(r["per_host"]) == 2
    # the job's network fixes are fitted as a host verdict's are: a best case from the
    # collectives' share (no model of bucket sizes), never an empty worth
    assert r["cause"] == "gradient_sync"
    first = r["recommendations"][0]
    now = r["steps"]["time_per_batch_ms"]
    assert first["fix"] == "ddp_buckets" and first["predicted"] is None and first["predicted_why_not"]
    assert first["worth"].startswith("at best") and first["bound_ms"] < now


# ---- the CLI's formats: the same fields for both frameworks -------------------------------------

def _cli(*args):
    r = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "analyze", "--no-cache", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return r.stdout


def test_cli_formats_carry_the_same_fields_for_pytorch_and_tensorflow(tmp_path):
    torch_run = tmp_path / "torchrun"
    torch_run.mkdir()
    _write(torch_run / "w.1.pt.trace.json", _loop(steps=4))
    tf_run = os.path.join(DEMO_LOGS, "compute_bound")
    assert os.path.isdir(tf_run)
    docs = json.loads(_cli("--format", "json", str(torch_run), tf_run))
    sessions = docs["sessions"] if isinstance(docs, dict) else docs
    by_fw = {s["framework"]: s for s in sessions}
    assert set(by_fw) == {"pytorch", "tensorflow"}
    common = {"status", "bottleneck", "cause", "confidence", "evidence", "recommendations", "breakdown_pct", "steps",
              "devices", "step_source", "framework", "top_ops", "op_summary"}
    for s in by_fw.values():
        assert common <= set(s), common - set(s)
    rows = list(csv.DictReader(io.StringIO(_cli("--format", "csv", str(torch_run), tf_run))))
    assert len(rows) == 2 and all(r["cause"] and r["bottleneck"] for r in rows)
    assert {r["cause"] for r in rows} == {by_fw["pytorch"]["cause"], by_fw["tensorflow"]["cause"]}
    md = _cli("--format", "markdown", str(torch_run), tf_run)
    table = _cli(str(torch_run), tf_run)
    for text in (md, table):
        assert by_fw["pytorch"]["cause"] in text and by_fw["tensorflow"]["cause"] in text
        assert "torchrun" in text and "compute_bound" in text


def test_reader_columns_are_sorted_for_nesting(tmp_path):
    ev = [_x("cpu_op", "inner", 10.0, 1.0), _x("cpu_op", "outer", 10.0, 5.0), _x("cpu_op", "first", 2.0, 1.0)]
    line = read_kineto(_write(tmp_path / "n.1.pt.trace.json", ev)).planes[0].lines[0]
    assert np.all(np.diff(line.start_ps) >= 0)
    names = read_kineto(_write(tmp_path / "n.1.pt.trace.json", ev)).planes[0].event_names
    assert [names[int(i)] for i in line.name_id] == ["first", "outer", "inner"]


# ---- large files: parsed a slice of events at a time --------------------------------------------

def _columns(space):
    return [(p.name, l.name, l.start_ps.tolist(), l.dur_ps.tolist(), [p.event_names[int(i)] for i in l.name_id])
            for p in space.planes for l in p.lines]


def _tricky_events():
    """Names with what the slicer must not take for structure: escaped quotes and backslashes
    before them, brackets, braces and commas inside strings, nested args."""
    ev = _loop(steps=3)
    odd = ['say \\"hi\\", [then] {go}', 'ends in a backslash \\\\', '\\\\\\"', "comma, ] } [ {", "ünïcode ,]"]
    for k, name in enumerate(odd):
        ev.append(_x("cpu_op", json.loads(f'"{name}"'), 4_458_676_522_690.655 + 5 * k, 1.0,
                     **{"Input Dims": [[1, 2], []], "nested": {"a": [1, {"b": "]"}]}}))
    return ev


@pytest.mark.parametrize("form", ["object", "bare_list", "gz"])
def test_sliced_parse_reads_what_the_whole_parse_reads(tmp_path, monkeypatch, form):
    import tfbneck_plugin.trace.kineto as kineto
    ev = _tricky_events()
    if form == "bare_list":
        path = tmp_path / "b.1.pt.trace.json"
        path.write_bytes(json.dumps(ev, ensure_ascii=False).encode())
        path = str(path)
    else:
        path = _write(tmp_path / ("o.1.pt.trace.json" + (".gz" if form == "gz" else "")), ev, gz=form == "gz",
                      distributedInfo={"backend": "gloo", "rank": 1, "world_size": 2})
    whole = read_kineto(path)
    monkeypatch.setattr(kineto, "CHUNKED_MIN_BYTES", 0)
    monkeypatch.setattr(kineto, "EVENTS_PER_SLICE", 7)
    monkeypatch.setattr(kineto, "SCAN_WINDOW", 97)  # windows that cut strings and escapes
    data = gzip.decompress(open(path, "rb").read()) if path.endswith(".gz") else open(path, "rb").read()
    assert kineto.event_slices(data) is not None
    sliced = read_kineto(path)
    assert _columns(sliced) == _columns(whole)
    assert (sliced.distributed, sliced.categories, sliced.device_names) == \
        (whole.distributed, whole.categories, whole.device_names)


def test_sliced_parse_of_bad_files_says_what_the_whole_parse_says(tmp_path, monkeypatch):
    import tfbneck_plugin.trace.kineto as kineto
    monkeypatch.setattr(kineto, "CHUNKED_MIN_BYTES", 0)
    full = json.dumps({"traceEvents": _loop(2)}).encode()
    cut = tmp_path / "cut.1.pt.trace.json"
    cut.write_bytes(full[: len(full) // 2])
    assert kineto.event_slices(full[: len(full) // 2]) is None   # unbalanced: the whole parse reports it
    with pytest.raises(TraceReadError) as err:
        read_kineto(str(cut))
    assert "not valid JSON" in str(err.value)
    empty = tmp_path / "e.1.pt.trace.json"
    empty.write_bytes(b'{"traceEvents": [ ], "distributedInfo": {"rank": 0}}')
    with pytest.raises(TraceReadError) as err:
        read_kineto(str(empty))
    assert "no complete (ph X) events" in str(err.value)


def test_sliced_parse_of_the_real_traces(monkeypatch):
    import tfbneck_plugin.trace.kineto as kineto
    root = need_shared(TORCH_TRACES, "../shared/realtraces-torch (real PyTorch traces)")
    for folder in sorted(REAL):
        for name in os.listdir(os.path.join(root, folder)):
            path = os.path.join(root, folder, name)
            monkeypatch.setattr(kineto, "CHUNKED_MIN_BYTES", 1 << 40)
            whole = read_kineto(path)
            monkeypatch.setattr(kineto, "CHUNKED_MIN_BYTES", 0)
            monkeypatch.setattr(kineto, "EVENTS_PER_SLICE", 1000)
            assert _columns(read_kineto(path)) == _columns(whole), path


# ---- the tab's /kineto_trace route (the bytes the Perfetto UI link posts) ---------------------

def test_kineto_trace_route_serves_the_hosts_json(tmp_path):
    from tensorboard.plugins import base_plugin

    from support.plugin_helpers import PREFIX, RecordingAnalyzer, wsgi_client
    from tfbneck_plugin.plugin import BottleneckPlugin
    logdir = tmp_path / "logs"
    run = logdir / "torchrun"
    run.mkdir(parents=True)
    _write(run / "host_1.100.pt.trace.json.gz", _loop(2), gz=True)
    _write(run / "host_2.101.pt.trace.json", _loop(3))
    shutil.copytree(os.path.join(DEMO_LOGS, "compute_bound"), logdir / "tf")
    rec = RecordingAnalyzer()
    try:
        p = BottleneckPlugin(base_plugin.TBContext(logdir=str(logdir)), analyze=rec)
        client = wsgi_client(p)
        p._index.current(wait_s=60)  # the first scan, done
        sessions = {s.run: s for s in find_sessions(str(logdir)).sessions}
        torch_s, tf_s = sessions["torchrun"], sessions["tf"]
        url = f"{PREFIX}/kineto_trace?run=torchrun&session={quote(torch_s.name, safe='')}"
        for host, file in (("host_1.100", "host_1.100.pt.trace.json.gz"), ("host_2.101", "host_2.101.pt.trace.json")):
            resp = client.get(f"{url}&host={host}")
            assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("application/json")
            raw = open(run / file, "rb").read()
            assert resp.get_data() == (gzip.decompress(raw) if file.endswith(".gz") else raw)
        assert client.get(url).get_data() == gzip.decompress(open(run / "host_1.100.pt.trace.json.gz", "rb").read())
        refused = {
            f"{url}&host=nohost": 404,
            f"{PREFIX}/kineto_trace?run=tf&session={quote(tf_s.name, safe='')}": 400,   # XSpace: XProf's
            f"{PREFIX}/kineto_trace?run=nothere&session=x": 404,
            f"{PREFIX}/kineto_trace?run=torchrun": 400,
            f"{PREFIX}/kineto_trace?run=..%2F..&session=x": 400,
        }
        for bad, status in refused.items():
            resp = client.get(bad)
            body = json.loads(resp.get_data(as_text=True))
            assert (resp.status_code, set(body)) == (status, {"error", "error_kind"}), (bad, body)
        assert client.post(url).status_code == 405
        assert rec.calls == []   # serving a trace analyses nothing
    finally:
        rec.release.set()
