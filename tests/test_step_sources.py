"""Every step finder on a small real trace committed in tests/data/ (tests/data/make_traces.py):
these run in any clone, without ``../shared``.

For each trace the expected steps are pinned (numbers and times, read once from the file) and
derived again here from the raw XSpace by the finder's documented rule, through protobuf's
own parser (not the analyzer's column decoder): a finder that picks other events, numbers
steps differently or cuts them elsewhere fails, and so does a changed data file. XProf's own
converter is asked about the same files where the README compares with it.
"""
import glob
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import DATA, tfbneck_cmd, xprof_input_pipeline
from tfbneck_plugin.trace import xspace
from support.xspace_builder import SpaceBuilder, session_path

PS_PER_MS = 10 ** 9

#: folder -> step_source, step numbers, step times (ms, as the report rounds them), partial
#: steps dropped at the window's edges.
CASES = {
    "step_markers_tf_keras": ("step_markers ('train')", [3, 4, 5], [0.926, 1.66, 0.897], 0),
    "trace_context_tf24": ("trace_context ('TraceContext')", [116, 117, 118], [7.708, 6.604, 7.834], 0),
    "keras_profiled_batch": ("keras_profiled_batch ('Profiled batch')", [3, 4, 5], [1.167, 0.945, 0.858], 0),
    "user_step_annotations": ("user_step_annotations ('training_step')", [50, 51, 52, 53],
                              [5.06, 3.568, 3.612, 3.143], 0),
    "session_run": ("session_run", [0, 1, 2, 3], [0.362, 0.273, 0.397, 0.31], 1),
    "train_function_calls": ("train_function_calls", [0, 1, 2], [0.907, 0.716, 0.812], 1),
    "device_steps_gpu_tf24": ("device_steps_line (/device:GPU:4)", [0], [19.865], 0),
    "iterator_cadence": ("iterator_cadence", [0, 1, 2, 3, 4], [1.275, 1.149, 1.01, 1.126, 1.0], 1),
}


def trace_file(name: str) -> str:
    files = glob.glob(os.path.join(DATA, name, "plugins", "profile", "*", "*.xplane.pb*"))
    assert len(files) == 1, (name, files)
    return files[0]


@pytest.fixture(scope="module")
def report():
    """``tfbneck analyze tests/data --format json``: one session per folder (the run name)."""
    res = subprocess.run(tfbneck_cmd() + ["analyze", DATA, "--format", "json"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return {s["run"]: s for s in json.loads(res.stdout)["sessions"]}


# ----------------------------------------------------------------------------------------
# The finders' rules, applied to the raw protobuf
# ----------------------------------------------------------------------------------------

def _raw_events(name: str):
    """(plane name, line name, event name, start ps, duration ps, {stat name: value}) of every event."""
    import gzip
    path = trace_file(name)
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        space = xspace.XSpace.FromString(f.read())
    for plane in space.planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                stats = {stat_names.get(s.metadata_id): getattr(s, s.WhichOneof("value") or "int64_value")
                         for s in e.stats}
                yield (plane.name, line.name, plane.event_metadata[e.metadata_id].name,
                       line.timestamp_ns * 1000 + e.offset_ps, e.duration_ps, stats)


def _marked(name, event, require_r):
    """Steps of events called ``event`` that carry step_num (and ``_r`` if asked): their own spans."""
    rows = sorted((s, d, st["step_num"]) for p, _, n, s, d, st in _raw_events(name)
                  if p == "/host:CPU" and n == event and "step_num" in st and (("_r" in st) == require_r))
    return [r[2] for r in rows], [r[1] for r in rows]


def _between_starts(starts):
    """One step from each start to the next (the last start opens a step whose end is not recorded)."""
    starts = np.sort(np.array(starts, dtype=np.int64))
    return list(range(len(starts) - 1)), list(np.diff(starts))


def raw_steps(name: str):
    """(step numbers, step durations in ps) by the rule of the finder that ``name`` exercises."""
    if name == "step_markers_tf_keras":
        return _marked(name, "train", require_r=True)
    if name == "trace_context_tf24":
        return _marked(name, "TraceContext", require_r=False)
    if name == "keras_profiled_batch":
        return _marked(name, "Profiled batch", require_r=False)
    if name == "user_step_annotations":
        return _marked(name, "training_step", require_r=False)
    if name == "session_run":
        return _between_starts([s for p, l, n, s, d, st in _raw_events(name) if l == "python" and n == "SessionRun"])
    if name == "train_function_calls":
        return _between_starts([s for p, l, n, s, d, st in _raw_events(name)
                                if l == "python" and n == "multi_step_on_iterator"])
    if name == "device_steps_gpu_tf24":
        rows = sorted((s, int(n), d) for p, l, n, s, d, st in _raw_events(name)
                      if p == "/device:GPU:4" and l == "Steps")
        return [r[1] for r in rows], [r[2] for r in rows]
    if name == "iterator_cadence":
        return _between_starts([s for p, l, n, s, d, st in _raw_events(name) if n == "IteratorGetNextOp::DoCompute"])
    raise KeyError(name)


# ----------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------

def test_every_step_finder_has_a_committed_trace(tmp_path):
    """The finders the analyzer tries (all of them are listed on a trace without steps) each
    have a trace here: a new finder needs one too (tests/data/make_traces.py)."""
    b = SpaceBuilder()
    b.plane("/host:CPU").line("tf_Compute/1").event("ExecutorState::Process", 0, 100)
    b.write(session_path(tmp_path))
    res = subprocess.run(tfbneck_cmd() + ["analyze", str(tmp_path), "--format", "json"], capture_output=True,
                         text=True, timeout=120)
    s = json.loads(res.stdout)["sessions"][0]
    assert s["step_source"] == "none"
    finders = [t["finder"] for t in s["steps"]["tried"]]
    covered = {CASES[c][0].split(" ")[0] for c in CASES}
    assert len(finders) >= 8 and set(finders) <= covered, f"no committed trace for {set(finders) - covered}"


@pytest.mark.parametrize("name", list(CASES))
def test_committed_trace_holds_the_pinned_steps(name):
    """The pinned values are what the file holds by the finder's rule (not the analyzer's answer)."""
    assert os.path.getsize(trace_file(name)) < 300_000
    numbers, durations = raw_steps(name)
    _, want_numbers, want_ms, _ = CASES[name]
    assert numbers == want_numbers
    assert [d / PS_PER_MS for d in durations] == pytest.approx(want_ms, abs=0.0006)


def test_committed_traces_stay_small():
    total = sum(os.path.getsize(trace_file(name)) for name in CASES)
    assert total < 1_500_000


@pytest.mark.parametrize("name", list(CASES))
def test_finder_on_a_real_trace(report, name):
    source, numbers, ms, dropped = CASES[name]
    s = report[name]
    assert s["status"] == "ok", s.get("error")
    assert s["step_source"] == source
    steps = s["steps"]
    assert steps["count"] == len(numbers)
    assert [i["step"] for i in steps["items"]] == numbers
    assert [i["duration_ms"] for i in steps["items"]] == pytest.approx(ms, abs=0.0015)
    assert steps["step_time_ms"]["mean"] == pytest.approx(np.mean(ms), abs=0.0015)
    assert steps["dropped_partial"] == dropped
    # The finders before the one that won were tried and said why they did not apply.
    tried = [t["finder"] for t in steps["tried"]]
    assert source.split(" ")[0] not in tried and all(t["why_not"] for t in steps["tried"])


def test_device_steps_line_trace_keeps_the_readme_split(report):
    """The README's split of XProf's 'All Others' on xprof-demo/GPU-multi-worker holds on the
    committed cut (its one step, whole)."""
    s = report["device_steps_gpu_tf24"]
    pct = s["breakdown_pct"]
    assert s["device_kind"] == "GPU"
    assert pct["input"] == pytest.approx(11.5, abs=0.3)
    assert pct["kernel_launch"] == pytest.approx(11.6, abs=0.3)
    assert pct["device_compute"] == pytest.approx(74.6, abs=0.3)
    assert (s["bottleneck"], s["cause"]) == ("device", "model_compute")
    assert any("moderate" in e and "11.5%" in e for e in s["evidence"])


def test_trace_context_trace_is_kernel_launch_bound(report):
    """Its profiler put 56.9 % of step time in kernel launch (over 19 steps; these are 3 of them)."""
    s = report["trace_context_tf24"]
    assert s["device_kind"] == "GPU"
    assert (s["bottleneck"], s["cause"]) == ("cpu", "kernel_launch")
    assert s["breakdown_pct"]["kernel_launch"] == pytest.approx(56.9, abs=5)


@pytest.mark.parametrize("name", ["keras_profiled_batch", "train_function_calls", "iterator_cadence"])
def test_xprof_finds_no_step_where_we_do(report, name, tmp_path):
    """README: XProf answers "No step time measured" for a Keras 3 fit and for runs without markers."""
    xp = xprof_input_pipeline(trace_file(name), tmp_path)
    assert xp["rows"] == 0
    assert xp["p"]["input_conclusion"].startswith("No step time measured")
    assert report[name]["steps"]["count"] == len(CASES[name][1]) >= 3


def test_xprof_agrees_on_tf_keras_steps(report, tmp_path):
    xp = xprof_input_pipeline(trace_file("step_markers_tf_keras"), tmp_path)
    s = report["step_markers_tf_keras"]
    assert xp["rows"] == s["steps"]["count"] == 3
    # XProf prints its averages with one decimal.
    assert float(xp["p"]["steptime_ms_average"]) == pytest.approx(s["steps"]["step_time_ms"]["mean"], abs=0.051)


def test_xprof_all_others_is_our_input_and_launch_split(report, tmp_path):
    """README, 'Compared with XProf': XProf finds no input on GPU-multi-worker and puts the time
    in 'All Others'; tfbneck's input + kernel launch + host + unrecorded is that time."""
    xp = xprof_input_pipeline(trace_file("device_steps_gpu_tf24"), tmp_path)
    p, ours = xp["p"], report["device_steps_gpu_tf24"]
    step = float(p["steptime_ms_average"])
    assert xp["rows"] == 1 and step == pytest.approx(ours["steps"]["step_time_ms"]["mean"], abs=0.051)
    assert float(p["infeed_time_ms_avg"]) == 0.0
    pct = ours["breakdown_pct"]
    others = pct["input"] + pct["kernel_launch"] + pct["host_compute"] + pct["idle"]
    assert 100 * float(p["other_time_ms_avg"]) / step == pytest.approx(others, abs=1.0)
    assert 100 * float(p["device_compute_time_ms_avg"]) / step == pytest.approx(pct["device_compute"], abs=1.0)
