"""XLA executables in the op table (``analyze --ops``) and in ``compare``'s op diff, on real
TensorFlow 2.21 traces of this CPU host (tests/data/xla_jit, made by its make.py): a Keras 3
``fit`` of one MLP with ``jit_compile`` off and on, and a custom loop calling a
``tf.function(jit_compile=True)``.

Expected values come from the trace itself, read here without the op table: the runs of the
executable (``CpuExecutable::ExecuteAsyncOnStream`` events) that start in the analysed steps,
their wall time summed, per step; the HLO op events (``hlo_op`` stats), their durations summed.
"""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, tfbneck_cmd

from tfbneck_plugin.analysis import ops as opsmod
from tfbneck_plugin.analysis.host_analysis import HostAnalysis
from tfbneck_plugin.trace import tracefile

XLA = os.path.join(ROOT, "tests", "data", "xla_jit")


def _space(name):
    (path,) = glob.glob(os.path.join(XLA, name, "plugins", "profile", "*", "*.xplane.pb"))
    return tracefile.read_space(path)


def _events(space, name=None, stat=None):
    """(line index, start, duration, event name, stat value) of the host's events named ``name``
    or carrying ``stat``."""
    plane = space.plane("/host:CPU")
    out = []
    for li, line in enumerate(plane.lines):
        for k in range(len(line)):
            ev = plane.event_names.get(int(line.name_id[k]), "")
            value = plane.event_stats(line, k).get(stat) if stat else None
            if (name and ev == name) or (stat and isinstance(value, str)):
                out.append((li, int(line.start_ps[k]), int(line.dur_ps[k]), ev, value))
    return out


def _in_windows(t, analysis):
    s, e = analysis.windows
    return bool(((s <= t) & (t < e)).any())


def _ms_json(name, *extra):
    r = subprocess.run(tfbneck_cmd() + ["analyze", os.path.join(XLA, name), "--format", "json", *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (session,) = json.loads(r.stdout)["sessions"]
    return session


@pytest.mark.parametrize("name, function", [("fit_jit_on", "one_step_on_data"), ("loop_jit_on", "train_step")])
def test_xla_rows_add_up_to_the_executables_wall_time(name, function):
    space = _space(name)
    analysis = HostAnalysis(space)
    n = len(analysis.windows[0])
    runs = [d for _, s, d, _, _ in _events(space, name=opsmod.XLA_RUN) if _in_windows(s, analysis)]
    assert runs and n
    wall = sum(runs) / n
    rows = [r for r in analysis.ops.rows if r.type.startswith(opsmod.XLA_OP_PREFIX)]
    (exe,) = [r for r in rows if r.type == opsmod.XLA_TYPE]
    assert exe.name == f"{function} (XLA)" and exe.count == len(runs)
    assert exe.total_ps / n == pytest.approx(wall)
    assert sum(r.self_ps for r in rows) / n == pytest.approx(wall, rel=1e-9)  # the rows share the wall time
    # Each HLO op row's total: its events' durations on their threads.
    hlo = {}
    for _, s, d, ev, op in _events(space, stat="hlo_op"):
        if _in_windows(s, analysis):
            hlo[op] = hlo.get(op, 0) + d
    assert len(rows) - 1 == len(hlo)
    for r in rows:
        if r is not exe:
            assert r.name.startswith(f"{function} (XLA)/") and r.total_ps == hlo[r.name.split("/", 1)[1]]
    # The report says the same per step, in ms.
    report = _ms_json(name)
    (top,) = [r for r in report["top_ops"] if r["type"] == opsmod.XLA_TYPE]
    assert top["name"] == exe.name and top["where"] == "host"
    assert top["total_ms_per_step"] == pytest.approx(round(wall / 1e9, 3), abs=1e-3)


def test_the_launching_op_keeps_only_its_own_time():
    """The custom loop's eager call is an op event (``__inference_train_step_<n>``) around the
    executable's run: its self time leaves the run out (it is the XLA rows'), its total keeps it."""
    space = _space("loop_jit_on")
    analysis = HostAnalysis(space)
    plane = space.plane("/host:CPU")
    op_events = [(s, d) for _, s, d, ev, _ in _events(space, name=next(
        n for n in plane.event_names.values() if n.startswith("__inference_train_step") and ":" in n))]
    runs = [(s, d) for _, s, d, _, _ in _events(space, name=opsmod.XLA_RUN)]
    inside = [(s, d) for s, d in op_events if _in_windows(s, analysis)]
    nested = sum(rd for s, d in inside for rs, rd in runs if s <= rs and rs + rd <= s + d)
    (row,) = [r for r in analysis.ops.rows if r.name.startswith("__inference_train_step")]
    assert nested > 0
    assert row.total_ps == sum(d for _, d in inside)
    assert row.self_ps == row.total_ps - nested


def test_a_run_without_xla_has_no_xla_rows():
    analysis = HostAnalysis(_space("fit_jit_off"))
    assert analysis.ops.rows and not any(r.type.startswith(opsmod.XLA_OP_PREFIX) for r in analysis.ops.rows)


def test_ops_table_shows_the_executable_and_its_wall_time():
    r = subprocess.run(tfbneck_cmd() + ["analyze", os.path.join(XLA, "fit_jit_on"), "--ops"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    table = r.stdout[r.stdout.index("top ops over"):]
    first = table.splitlines()[4]
    assert first.startswith("one_step_on_data (XLA)") and "XLA executable" in first
    assert "one_step_on_data (XLA)/" in table  # its HLO ops
    assert "ms/step of XLA executable wall time in all" in table


def test_compare_lists_the_executable_that_took_the_tf_ops_place():
    r = subprocess.run(tfbneck_cmd() + ["compare", os.path.join(XLA, "fit_jit_off"), os.path.join(XLA, "fit_jit_on"),
                                        "--format", "json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ops = json.loads(r.stdout)["comparisons"][0]["op_changes"]["ops"]
    (exe,) = [o for o in ops if o["name"] == "one_step_on_data (XLA)"]
    assert exe["baseline_ms"] == 0 and exe["only_in"] == "candidate"
    # Its time: the executable's and its HLO ops' rows among the candidate's top ops, per batch.
    cand = _ms_json("fit_jit_on")
    xla = [t for t in cand["top_ops"] if t["name"].split("/")[0] == "one_step_on_data (XLA)"]
    per_step = np.sum([t["self_ms_steps"] for t in xla], axis=0)
    assert exe["candidate_ms"] == pytest.approx(float(per_step.mean()), abs=1e-3)
    gone = [o for o in ops if o["only_in"] == "baseline"]
    assert any(o["name"].endswith("MatMul") for o in gone) and all(o["candidate_ms"] == 0 for o in gone)
    assert not any("(XLA)/" in o["name"] for o in ops)  # HLO ops are the executable's, not rows of their own


@pytest.mark.parametrize("module, hlo_op, row", [
    ("a_inference_one_step_on_data_1155__.18", None, "one_step_on_data (XLA)"),
    ("a_inference_train_step_74__XlaMustCompile_true_config_proto_1356_executor_type_1116_.5", "MatMul.2",
     "train_step (XLA)/MatMul.2"),
    ("cluster_3", None, "cluster_3 (XLA)"),
    (None, None, "executable (XLA)"),
])
def test_xla_row_names(module, hlo_op, row):
    assert opsmod.xla_row_name(module, hlo_op) == row


@pytest.mark.tf
def test_a_fresh_jit_compiled_fit_has_its_executable_in_the_op_table(tmp_path):
    """The same fit remade here: TensorFlow still records XLA:CPU's runs and HLO ops as read."""
    pytest.importorskip("tensorflow")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    env.pop("TF_USE_LEGACY_KERAS", None)
    r = subprocess.run([sys.executable, os.path.join(XLA, "make.py"), "mlp", "1", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = glob.glob(os.path.join(str(tmp_path), "plugins", "profile", "*", "*.xplane.pb"))
    analysis = HostAnalysis(tracefile.read_space(path))
    (exe,) = [r for r in analysis.ops.rows if r.type == opsmod.XLA_TYPE]
    hlo = [r for r in analysis.ops.rows if r.type.startswith(opsmod.XLA_OP_PREFIX) and r is not exe]
    assert exe.name == "one_step_on_data (XLA)" and hlo
    assert exe.self_ps + sum(r.self_ps for r in hlo) == pytest.approx(exe.total_ps, rel=1e-9)


def test_compute_advice_on_a_step_xla_already_runs_does_not_offer_xla_fusion():
    """The op note on a compute-bound step: where the op table has the XLA rows, XLA's fusion is
    done; without them (the same model, jit_compile off) the note may still offer it."""
    from tfbneck_plugin.analysis.op_advice import name_ops
    rec = [{"fix": "use_gpu", "detail": "A GPU shortens the step."}]
    on = name_ops("model_compute", rec, _ms_json("fit_jit_on")["op_summary"], None, "CPU")[0]["detail"]
    assert "`one_step_on_data (XLA)`" in on or "`XLA executable`" in on
    assert "already runs compiled by XLA" in on and "fuses those" not in on
    off = name_ops("model_compute", rec, _ms_json("fit_jit_off")["op_summary"], None, "CPU")[0]["detail"]
    assert "already runs compiled by XLA" not in off and "MatMul/Conv ops are" in off
