"""How a folder's PyTorch profiler traces become sessions (logdir.kineto_groups): the ranks of
one job are one session; a re-run into the same folder and each profiling cycle of one process
are sessions of their own; and analyze, the API, fleet, compare and the tab list the same ones.

The quick tests read real traces written once by tests/data/kineto_sessions/make.py
(torch 2.13.0+cpu, torch.profiler with tensorboard_trace_handler; gzipped); the test marked
``tf`` writes them again with torch here."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from urllib.parse import quote

import pytest

from conftest import SHARED, need_shared
from tfbneck_plugin import batch
from tfbneck_plugin.logdir import find_sessions
from tfbneck_plugin.trace.kineto_files import KinetoFileFacts, file_facts, kineto_groups, name_parts, one_job


HERE = os.path.dirname(os.path.abspath(__file__))
MADE = os.path.join(HERE, "data", "kineto_sessions")
TORCH_TRACES = os.path.join(SHARED, "realtraces-torch")
S = 1e9  # ns


def _logdir(tmp_path, *scenarios, plain=()):
    """The made traces of ``scenarios`` copied under ``tmp_path/logs`` (the files of the
    scenarios in ``plain`` decompressed, as the handler writes them without use_gzip)."""
    logs = tmp_path / "logs"
    for sc in scenarios:
        shutil.copytree(os.path.join(MADE, sc), logs / sc)
        if sc in plain:
            for f in (logs / sc).iterdir():
                (logs / sc / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
                f.unlink()
    return logs


def _found(path):
    return {(s.run, s.name): s.hosts for s in find_sessions(str(path)).sessions}


# ---- the rule ----------------------------------------------------------------------------------

def _ranked(r, w=(0, S)):
    return "w%d" % r, KinetoFileFacts(rank=r, world_size=2, window_ns=w)


def _bare(name, w):
    return name, KinetoFileFacts(window_ns=w)


def test_rule_on_what_the_files_say():
    ranked, bare = _ranked, _bare
    assert one_job(ranked(0), ranked(1))
    assert not one_job(ranked(0), ranked(0))                                  # the same rank twice: two runs
    assert one_job(ranked(0, (0, S)), ranked(1, (2 * S, 3 * S)))             # 1 s apart: clocks of two machines
    assert not one_job(ranked(0, (0, S)), ranked(1, (4 * S, 5 * S)))         # a later run's rank 1
    assert not one_job(ranked(0), ("w9", KinetoFileFacts(rank=1, world_size=4, window_ns=(0, S))))
    assert one_job(bare("a", (0, S)), bare("b", (S / 2, 2 * S)))              # overlapping processes
    assert not one_job(bare("a", (0, S)), bare("b", (1.1 * S, 2 * S)))        # a re-run, even 0.1 s later
    assert not one_job(bare("a", (0, S)), bare("a", (0, S)))                  # one worker: its cycles
    assert one_job(ranked(0, None), ranked(1, None))                          # the ranks say so
    assert not one_job(bare("a", None), bare("b", (0, S)))                    # a file that says nothing


def test_facts_read_from_the_real_files():
    ddp = os.path.join(MADE, "ddp")
    names = sorted(os.listdir(ddp))
    facts = [file_facts(os.path.join(ddp, n)) for n in names]
    assert [(f.rank, f.world_size) for f in facts] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert name_parts(names[0]) == ("vm_9089", 1796636605715273252)
    for n, f in zip(names, facts):  # the window ends before the handler names the file
        start, end = f.window_ns
        assert 0.1 * S < end - start < 1 * S and start < name_parts(n)[1]
    rerun = [file_facts(os.path.join(MADE, "rerun", n)) for n in sorted(os.listdir(os.path.join(MADE, "rerun")))]
    assert all(f.rank is None for f in rerun) and rerun[0].window_ns[1] < rerun[1].window_ns[0]


def test_a_file_that_is_no_trace_says_nothing(tmp_path):
    for name, data in (("a.pt.trace.json", b""), ("b.pt.trace.json", b"\x00\x01 not json"),
                       ("c.pt.trace.json.gz", b"not gzip")):
        (tmp_path / name).write_bytes(data)
        assert file_facts(str(tmp_path / name)) == KinetoFileFacts()


# ---- discovery ---------------------------------------------------------------------------------

def test_reruns_cycles_ranks_and_processes(tmp_path):
    logs = _logdir(tmp_path, "rerun", "cycles", "ddp", "together", plain=("rerun", "cycles"))
    assert _found(logs) == {
        ("rerun", "vm_9036.1796636592051681391"): ["vm_9036.1796636592051681391"],
        ("rerun", "vm_9064.1796636595646383422"): ["vm_9064.1796636595646383422"],
        ("cycles", "vm_9033.1796636598270829498"): ["vm_9033.1796636598270829498"],
        ("cycles", "vm_9033.1796636598492195146"): ["vm_9033.1796636598492195146"],
        # two ranks (distributedInfo), two cycles each: paired by time
        ("ddp", "vm_9089.1796636605715273252"): ["vm_9089.1796636605715273252", "vm_9090.1796636605717501929"],
        ("ddp", "vm_9089.1796636605976335111"): ["vm_9089.1796636605976335111", "vm_9090.1796636605976367264"],
        # two processes at once, no process group: their windows overlap
        ("together", "together"): ["vm_9141.1796636615081678277", "vm_9142.1796636615090704171"],
    }


def test_a_broken_file_beside_a_run_is_its_own_session(tmp_path):
    logs = _logdir(tmp_path, "rerun")
    (logs / "rerun" / "vm_1.1796636599000000000.pt.trace.json").write_text('{"traceEvents": [')
    found = _found(logs)
    assert len(found) == 3 and all(len(h) == 1 for h in found.values())


def test_the_real_jobs_stay_one_session(tmp_path):
    real = need_shared(TORCH_TRACES, "../shared/realtraces-torch (real PyTorch traces)")
    for folder, hosts in (("sampled_128gpu", ["rank-0", "rank-1"]), ("nccl_2gpu", ["nccl_data"]),
                          ("distributed_info_missing", ["distributed_info_not_found"])):
        [s] = find_sessions(os.path.join(real, folder)).sessions
        assert s.hosts == hosts
    # all three in one folder: the 128-GPU job's two ranks stay together, the others are apart
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for folder in ("sampled_128gpu", "nccl_2gpu", "distributed_info_missing"):
        for n in os.listdir(os.path.join(real, folder)):
            shutil.copy(os.path.join(real, folder, n), mixed / n)
    groups = kineto_groups([str(p) for p in mixed.iterdir()])
    assert sorted([os.path.basename(f) for f in g] for g in groups) == [
        ["distributed_info_not_found.pt.trace.json.gz"], ["nccl_data.pt.trace.json.gz"],
        ["rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"]]


# ---- every front door lists the same sessions ----------------------------------------------------

def test_analyze_and_the_api_list_each_cycle_and_each_rerun(tmp_path):
    from tfbneck_plugin import api
    logs = _logdir(tmp_path, "rerun", "cycles")
    reports, _ = batch.analyze_paths([str(logs)], use_cache=False, progress=False)
    got = {(r["run"], r["session"]): r for r in reports}
    assert set(got) == set(_found(logs))
    for r in reports:  # each its own verdict, of one host: no straggler among runs that are not ranks
        assert r["status"] == "ok" and len(r["hosts"]) == 1
        assert not any("straggler" in e for e in r["evidence"])
    assert sorted((s.run, s.session) for s in api.analyze(str(logs))) == sorted(got)


def test_fleet_counts_each_run_folder(tmp_path):
    from tfbneck_plugin.fleet_view.report import build, collect
    logs = _logdir(tmp_path, "rerun", "cycles", "ddp", "together")
    items, contexts, problems = collect([str(logs)], use_cache=False)
    fleet = build(items, contexts, problems=problems)
    assert fleet["sessions"] == 7 and fleet["runs_total"] == 4
    assert sorted((r["run"], r["path"], r["sessions"]) for r in fleet["runs"]) == [
        (sc, str(logs / sc), n) for sc, n in (("cycles", 2), ("ddp", 2), ("rerun", 2), ("together", 1))]
    assert sorted(g["group"] for g in fleet["groups"]) == ["cycles", "ddp", "rerun", "together"]


def test_fleet_names_cpu_compute_as_analyze_does(tmp_path):
    """CPU-only runs: the fleet's compute category is "Model compute on the CPU", as each
    report names it; runs of several device kinds keep "Device compute"."""
    from tfbneck_plugin.api import Fleet
    from tfbneck_plugin.fleet_view.render import to_markdown, to_table
    from tfbneck_plugin.fleet_view.report import build, collect
    from tfbneck_plugin.notebook.fleet import fleet_html
    logs = _logdir(tmp_path, "rerun", "cycles")
    items, contexts, problems = collect([str(logs)], use_cache=False)
    fleet = build(items, contexts, problems=problems)
    assert fleet["device_kind"] == "CPU"
    assert fleet["category_labels"]["device_compute"] == "Model compute on the CPU"
    for text in (to_table(fleet), to_markdown(fleet), fleet_html(Fleet(fleet))):
        assert "Model compute on the CPU" in text and "Device compute" not in text
    items[0] = dict(items[0], device_kind="GPU")
    mixed = build(items, contexts, problems=problems)
    assert mixed["device_kind"] is None and "Device compute" in to_table(mixed)


def test_compare_takes_the_latest_cycle(tmp_path):
    from tfbneck_plugin.comparison.compare import compare
    logs = _logdir(tmp_path, "rerun", "cycles")
    out = compare(str(logs / "rerun"), str(logs / "cycles"), use_trend=False)
    [c] = out["comparisons"]
    assert (c["baseline"]["run"], c["baseline"]["session"]) == ("rerun", "vm_9064.1796636595646383422")
    assert (c["candidate"]["run"], c["candidate"]["session"]) == ("cycles", "vm_9033.1796636598492195146")
    assert any(n.startswith(f"{logs / 'cycles'}: 2 sessions") for n in out["notes"])


def test_the_tab_lists_and_serves_each_cycle(tmp_path):
    from tensorboard.plugins import base_plugin

    from support.plugin_helpers import PREFIX, RecordingAnalyzer, wsgi_client
    from tfbneck_plugin.plugin import BottleneckPlugin
    logs = _logdir(tmp_path, "cycles")
    rec = RecordingAnalyzer()
    try:
        p = BottleneckPlugin(base_plugin.TBContext(logdir=str(logs)), analyze=rec)
        client = wsgi_client(p)
        p._index.current(wait_s=60)
        rows = json.loads(client.get(f"{PREFIX}/sessions").get_data(as_text=True))
        rows = rows["sessions"] if isinstance(rows, dict) else rows
        names = sorted(r["session"] for r in rows if r["run"] == "cycles")
        assert names == ["vm_9033.1796636598270829498", "vm_9033.1796636598492195146"]
        for name in names:  # each report is of its own file
            for _ in range(100):
                resp = client.get(f"{PREFIX}/report?run=cycles&session={quote(name, safe='')}")
                if resp.status_code != 202:
                    break
                rec.release.set()
            assert resp.status_code == 200, resp.get_data(as_text=True)
        analysed = {(run, name): [os.path.basename(f) for f in files] for run, name, files in rec.calls}
        assert analysed == {("cycles", n): [n + ".pt.trace.json.gz"] for n in names}
    finally:
        rec.release.set()


# ---- the unfinished cycle schedule() without repeat= leaves at exit --------------------------------

TAIL_KEPT = "vm_23165.1796647924809006988"
TAIL_CUT = "vm_23165.1796647924924226564.pt.trace.json.gz"


@pytest.mark.parametrize("plain", [False, True])
def test_a_cycle_cut_short_is_no_session_but_a_problem(tmp_path, plain):
    """make.py ``tail``: schedule(wait=1, warmup=1, active=3), no repeat=, seven steps. The
    second file holds one ProfilerStep#7 marker and no activity: not a session (it would be
    the run's latest, with no verdict), one problem line naming it, its cause and the fix."""
    logs = _logdir(tmp_path, "tail", plain=("tail",) if plain else ())
    cut = TAIL_CUT if not plain else TAIL_CUT[:-3]
    found = find_sessions(str(logs))
    assert [(s.run, s.name) for s in found.sessions] == [("tail", TAIL_KEPT)]
    [line] = found.problems
    assert line.startswith(str(logs / "tail" / cut) + ": left out: holds ProfilerStep#7 and no activity")
    assert "repeat=1" in line and "\n" not in line
    assert file_facts(str(logs / "tail" / cut)).markers_only == ("ProfilerStep#7",)
    assert file_facts(os.path.join(MADE, "tail", TAIL_KEPT + ".pt.trace.json.gz")).markers_only == ()


def test_a_cycle_cut_short_given_as_path_is_one_line(tmp_path):
    from tfbneck_plugin.logdir import DiscoveryError
    logs = _logdir(tmp_path, "tail")
    with pytest.raises(DiscoveryError, match=r"nothing to analyse: holds ProfilerStep#7 .*repeat=1"):
        find_sessions(str(logs / "tail" / TAIL_CUT))


def test_fleet_compare_and_the_api_take_the_cycle_with_a_verdict(tmp_path):
    """The run's latest session in fleet, compare and the API's ``r[run][-1]`` is the recorded
    cycle, not the marker-only file written after it."""
    from tfbneck_plugin import api
    from tfbneck_plugin.comparison.compare import compare
    from tfbneck_plugin.fleet_view.report import build, collect
    logs = _logdir(tmp_path, "tail", "rerun")
    items, contexts, problems = collect([str(logs)], use_cache=False)
    fleet = build(items, contexts, problems=problems)
    [row] = [r for r in fleet["runs"] if r["run"] == "tail"]
    assert (row["session"], row["status"], row["sessions"]) == (TAIL_KEPT, "ok", 1)
    out = compare(str(logs / "rerun"), str(logs / "tail"), use_trend=False)
    assert out["comparisons"][0]["candidate"]["session"] == TAIL_KEPT
    r = api.analyze(str(logs))
    assert r["tail"].get("session") == TAIL_KEPT and r["tail"].get("status") == "ok"  # its one session
    assert any("repeat=1" in p for p in r.problems)


# ---- a trace saved by prof.export_chrome_trace, named as PATH -------------------------------------

@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_a_trace_saved_by_export_chrome_trace_is_read_when_named(tmp_path, name):
    """make.py ``export``: prof.export_chrome_trace("trace.json"), the handler's JSON under the
    script's own name. Named as PATH it is one PyTorch session; a folder is still searched by
    the .pt.trace.json suffix only."""
    data = open(os.path.join(MADE, "export", "trace.json.gz"), "rb").read()
    (tmp_path / name).write_bytes(data if name.endswith(".gz") else gzip.decompress(data))
    [s] = find_sessions(str(tmp_path / name)).sessions
    assert (s.name, s.files) == ("trace", [str(tmp_path / name)])
    reports, _ = batch.analyze_paths([str(tmp_path / name)], use_cache=False, progress=False)
    [r] = reports
    assert r["status"] == "ok" and r["framework"] == "pytorch" and r["steps"]["count"] >= 2, r.get("error")
    assert find_sessions(str(tmp_path)).sessions == []


def test_other_json_named_as_path_is_the_same_one_line_error(tmp_path):
    from tfbneck_plugin.logdir import DiscoveryError
    for name, text in (("chrome.json", '{"traceEvents": [], "displayTimeUnit": "ms"}'),  # no kineto key
                       ("list.json", '[{"ph": "X"}]'), ("notes.json", '{"schemaVersion": 1}')):
        (tmp_path / name).write_text(text)
        with pytest.raises(DiscoveryError, match=r"neither an \.xplane\.pb trace file, a PyTorch profiler trace"):
            find_sessions(str(tmp_path / name))


def test_the_empty_folder_error_and_the_api_help_name_pytorch_traces(tmp_path):
    import tfbneck_plugin
    from tfbneck_plugin.logdir import DiscoveryError
    with pytest.raises(DiscoveryError) as err:
        batch.analyze_paths([str(tmp_path)])
    assert "*.pt.trace.json[.gz]" in str(err.value) and "*.xplane.pb" in str(err.value)
    assert ".pt.trace.json[.gz]" in tfbneck_plugin.analyze.__doc__ and "export_chrome_trace" in tfbneck_plugin.analyze.__doc__


# ---- made here with torch ------------------------------------------------------------------------

@pytest.mark.tf
def test_traces_made_with_torch_here(tmp_path):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, os.path.join(MADE, "make.py"), str(tmp_path), "rerun", "cycles"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    found = find_sessions(str(tmp_path)).sessions
    assert sorted((s.run, len(s.files)) for s in found) == [("cycles", 1), ("cycles", 1), ("rerun", 1), ("rerun", 1)]
    reruns = [s for s in found if s.run == "rerun"]
    assert len({name_parts(s.files[0])[0] for s in reruns}) == 2     # two pids
    cycles = [s for s in found if s.run == "cycles"]
    assert len({name_parts(s.files[0])[0] for s in cycles}) == 1     # one worker, two files
    reports, _ = batch.analyze_paths([str(tmp_path)], use_cache=False, progress=False)
    assert len(reports) == 4 and all(r["status"] == "ok" and len(r["hosts"]) == 1 for r in reports)


def test_compare_passes_over_a_later_tensorflow_window_without_a_verdict(tmp_path):
    """A run whose newest window was skipped (BottleneckProfiler's tfbneck_skipped.json, no
    trace): compare takes the latest window with a verdict, as fleet does, and says which it
    passed over and why; it raised CompareError ('cannot be compared') on the skipped one."""
    from support.paths import DEMO_LOGS
    from tfbneck_plugin.comparison.compare import compare
    runs = {}
    for name in ("pair_map_parallel", "pair_map_prefetch"):
        src = os.path.join(DEMO_LOGS, name)
        if not os.path.isdir(src):
            pytest.skip("demo_logs/ has no before/after pairs (python demo_logs/make_demo_logs.py)")
        runs[name] = tmp_path / name
        shutil.copytree(src, runs[name])
    skipped = runs["pair_map_prefetch"] / "plugins" / "profile" / "2099_01_01_00_00_00"
    skipped.mkdir()
    (skipped / "tfbneck_skipped.json").write_text(json.dumps({"reason": "training ended before the window"}))
    out = compare(str(runs["pair_map_parallel"]), str(runs["pair_map_prefetch"]), use_trend=False)
    [c] = out["comparisons"]
    assert c["candidate"]["session"] == "2026_11_30_12_20_39_steps6-10" and out["verdict"] != "error"
    [note] = [n for n in out["notes"] if "compared the latest with a verdict" in n]
    assert "2099_01_01_00_00_00, later, has none" in note and "training ended before the window" in note
