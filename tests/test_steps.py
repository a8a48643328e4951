"""Step finders, one synthetic trace per kind of evidence (tests/support/xspace_builder.py); graph
building and warm-up; the step cases of ../shared/cases."""
import os

import numpy as np
import pytest
from conftest import SHARED
from support.xspace_builder import SpaceBuilder, session_path

from tfbneck_plugin.analysis import host as hostmod
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.analysis.steps import find_steps, host_window, warmup_steps
from tfbneck_plugin.logdir import find_sessions
from tfbneck_plugin.trace import tracefile


def analyze_one(root):
    return analyze_session(find_sessions(str(root)).sessions[0])


def test_markers_win_over_function_calls_and_count_batches_per_step(tmp_path):
    """steps_per_execution=4: one marker covers four get-next calls."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, gn = host.line("python"), host.line("tf_data_iterator_get_next/1")
    for k in range(3):
        t = k * 8000
        py.event("train", t, 8000, step_num=4 * k + 1, _r=1)
        py.event("multi_step_on_iterator", t + 10, 7900)
        for j in range(4):
            gn.event("IteratorGetNextOp::DoCompute", t + 100 + j * 1900, 100)
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["step_source"] == "step_markers ('train')"
    assert [i["step"] for i in r["steps"]["items"]] == [1, 5, 9]
    assert r["steps"]["batches_per_step"] == 4
    assert r["steps"]["time_per_batch_ms"] == pytest.approx(2.0)


def test_train_function_calls_drop_the_last_call(tmp_path):
    b = SpaceBuilder()
    py = b.plane("/host:CPU").line("python")
    for k in range(4):
        py.event("__inference_train_function_1234", k * 5000, 4000)
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["step_source"] == "train_function_calls"
    assert r["steps"]["count"] == 3 and r["steps"]["dropped_partial"] == 1
    assert r["steps"]["step_time_ms"]["mean"] == pytest.approx(5.0)
    tried = [t["finder"] for t in r["steps"]["tried"]]
    assert tried == ["step_markers", "trace_context", "keras_profiled_batch", "user_step_annotations", "session_run"]


def test_iterator_cadence_is_the_last_resort(tmp_path):
    b = SpaceBuilder()
    gn = b.plane("/host:CPU").line("tf_data_iterator_get_next/1")
    for k in range(5):
        gn.event("IteratorGetNextOp::DoCompute", k * 3000, 1000)
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["step_source"] == "iterator_cadence"
    assert r["steps"]["count"] == 4
    assert r["breakdown_pct"]["input"] == pytest.approx(100 / 3, abs=0.1)
    assert any("cadence" in e for e in r["evidence"])


def test_validation_markers_do_not_replace_training_steps(tmp_path):
    b = SpaceBuilder()
    py = b.plane("/host:CPU").line("python")
    for k in range(3):
        py.event("train", k * 1000, 900, step_num=k, _r=1)
    for k in range(5):
        py.event("test", 5000 + k * 100, 90, step_num=k, _r=1)
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["step_source"] == "step_markers ('train')" and r["steps"]["count"] == 3


def test_nested_markers_of_one_step_count_once(tmp_path):
    b = SpaceBuilder()
    py = b.plane("/host:CPU").line("python")
    for k in range(3):
        py.event("train", k * 1000, 900, step_num=k, _r=1)            # the user's own marker
        py.event("train", k * 1000 + 10, 880, step_num=k, _r=1)       # Keras' marker inside it
    b.write(session_path(tmp_path))
    r = analyze_one(tmp_path)
    assert r["steps"]["count"] == 3 and r["steps"]["step_time_ms"]["mean"] == pytest.approx(0.9)


# ----------------------------------------------------------------------------------------
# User annotations without _r, graph-mode session runs, graph building and warm-up
# ----------------------------------------------------------------------------------------
US = 10 ** 6  # ps per us
CASES = os.path.join(SHARED, "cases")


def search(builder, tmp_path):
    space = tracefile.read_space(builder.write(session_path(tmp_path)))
    view = hostmod.host_view(space)
    return find_steps(space, view), view


def test_user_annotations_without_r_are_steps_numbered_by_the_user(tmp_path):
    """Trace('batch_step', step_num=100 + k) around three function calls (gradient accumulation)."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, other = host.line("python"), host.line("logger")
    for k in range(4):
        t = k * 1000
        py.event("batch_step", t, 900, step_num=100 + k)
        for j in range(3):
            py.event("grads", t + 10 + j * 250, 200)
            py.event("FunctionRun", t + 20 + j * 250, 150)
        other.event("log_line", t + 50, 10, step_num=k)  # numbered, but no training work inside
    found, view = search(b, tmp_path)
    st = found.steps
    assert st.source == "user_step_annotations ('batch_step')"
    assert st.numbers.tolist() == [100, 101, 102, 103]
    assert (st.durations_ps == 900 * US).all()
    assert any("3 function launches" in n for n in st.notes)
    assert view.plane.lines[found.training_line].name == "python"
    assert [f for f, _ in found.tried] == ["step_markers", "trace_context", "keras_profiled_batch"]


def test_annotations_enclosing_no_training_work_are_not_steps(tmp_path):
    b = SpaceBuilder()
    py = b.plane("/host:CPU").line("python")
    py.event("epoch_marker", 0, 50, step_num=7)
    for k in range(4):
        py.event("__inference_train_function_12", 100 + k * 500, 400)
    found, _ = search(b, tmp_path)
    assert found.steps.source == "train_function_calls"
    why = dict(found.tried)["user_step_annotations"]
    assert "'epoch_marker'" in why and "no training work" in why


def test_session_runs_are_steps_in_graph_mode(tmp_path):
    """tf.compat.v1.Session: SessionRun carries _r and id, no step_num; step i runs from run i to run i+1."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py, pool = host.line("python"), host.line("tf_Compute/1")
    for k in range(5):
        py.event("SessionRun", k * 1200, 800, id=53 + k, _r=1)
        pool.event("ExecutorState::Process", k * 1200 + 100, 600)
    found, view = search(b, tmp_path)
    st = found.steps
    assert st.source == "session_run"
    assert st.numbers.tolist() == [0, 1, 2, 3] and st.dropped_partial == 1
    assert (st.durations_ps == 1200 * US).all()
    assert view.plane.lines[found.training_line].name == "python"
    assert dict(found.tried)["user_step_annotations"] == "no such events in the trace"


def test_graph_builds_are_tracing_instantiation_and_compilation(tmp_path):
    b = SpaceBuilder()
    py = b.plane("/host:CPU").line("python")
    py.event("train", 0, 100, step_num=0, _r=1)
    py.event("train_step", 1, 98)                                  # the tf.function call
    py.event("tf.function-graph_building", 5, 55)                  # tracing: 5..60
    py.event("one_step", 10, 10)
    py.event("tf.function-graph_building", 11, 8)                  # an inner function: inside the outer one
    py.event("EagerLocalExecute: __inference_train_step_9", 62, 37)
    py.event("EagerKernelExecute", 80, 18)                         # instantiation: 60..80
    py.event("CpuCompiler::RunBackend", 82, 8)                     # XLA compile inside the run
    py.event("train", 100, 10, step_num=1, _r=1)
    found, view = search(b, tmp_path)
    gb = view.graph_builds()
    t0 = host_window(view)[0]  # the first event's start: 0 us
    assert int((gb.tracing[1] - gb.tracing[0]).sum()) == 55 * US
    assert (gb.instantiation[0] - t0).tolist() == [60 * US] and (gb.instantiation[1] - t0).tolist() == [80 * US]
    assert int((gb.compilation[1] - gb.compilation[0]).sum()) == 8 * US
    assert gb.traced_names == ["train_step"]
    st = found.steps
    assert st.graph_build_ps.tolist() == [83 * US, 0]
    assert st.warmup.tolist() == [True, False]
    assert "step 0 is warm-up" in st.warmup_reason and "`train_step`" in st.warmup_reason
    assert "graph building took 0.083 ms of 0.100 ms (83%" in st.warmup_reason
    assert ("tracing (`tf.function-graph_building` of `train_step`) 0.055 ms, instantiation of the newly traced "
            "function 0.020 ms, XLA compilation 0.008 ms") in st.warmup_reason


@pytest.mark.parametrize("durations, builds, expected", [
    ([50, 5, 5, 5], [40, 0, 0, 0], 1),           # one graph build at the start: warm-up
    ([50, 5, 5, 5], [10, 0, 0, 0], 1),           # a fifth of the step, but 10x the steady steps
    ([6, 5, 5, 5], [1, 0, 0, 0], 0),             # a small build in a normal-length step
    ([50, 40, 5, 5, 5], [40, 30, 0, 0, 0], 2),   # two leading builds (e.g. a relaxed shape traced again)
    ([50, 45, 45, 45], [40, 40, 40, 40], 0),     # builds in every step: retracing
    ([50, 9, 9, 9], [40, 4, 4, 0], 0),           # builds recur after the first: retracing
    ([50, 5, 5, 9, 5], [40, 0, 0, 4, 0], 1),     # one later build in four steps: still warm-up
    ([50], [40], 0),                             # nothing steady to compare with
    ([5, 50, 5], [0, 40, 0], 0),                 # a build that is not at the start
])
def test_warmup_rule(durations, builds, expected):
    assert warmup_steps(np.array(durations, dtype=np.int64), np.array(builds, dtype=np.int64)) == expected


# ---- the cases the product got wrong (../shared/cases/README.md) -------------------------

def case(name):
    path = os.path.join(CASES, name)
    if not os.path.isdir(path):
        pytest.skip(f"{path} is absent (../shared/cases sits beside the project in the team's checkout, "
                    "not in a user's clone)")
    files = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".xplane.pb")]
    assert len(files) == 1
    space = tracefile.read_space(files[0])
    view = hostmod.host_view(space)
    return find_steps(space, view)


def test_case_step_annotation_no_r():
    st = case("step_annotation_no_r").steps
    assert st.source == "user_step_annotations ('batch_step')"
    assert st.count in (11, 12) and st.numbers.tolist() == list(range(112 - st.count, 112))
    assert any("3 function launches" in n for n in st.notes) and st.batches_per_step == 3
    assert not st.warmup.any() and (st.graph_build_ps == 0).all()  # traced before the window


def test_case_graph_mode():
    found = case("graph_mode")
    st = found.steps
    assert st.source == "session_run" and 45 <= st.count <= 50
    assert [f for f, _ in found.tried] == ["step_markers", "trace_context", "keras_profiled_batch",
                                           "user_step_annotations"]


def test_case_retracing_builds_a_graph_every_step_and_is_not_warmup():
    st = case("retracing").steps
    assert st.source == "step_markers ('train')" and st.count == 20
    assert (st.graph_build_ps > 0).all()
    assert (st.graph_build_ps > 0.5 * st.durations_ps).all()  # mostly host time spent tracing
    assert not st.warmup.any() and st.warmup_reason is None


def test_the_step_search_leaves_the_host_view_alone(tmp_path):
    """No side effect between stages: find_steps returns the training thread, the view it
    was given is not modified."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    for k in range(3):
        py.event("FunctionRun", k * 1000 + 20, 150)
        py.event("__inference_train_function_7", k * 1000 + 10, 800)
    found, view = search(b, tmp_path)
    assert found.steps is not None and found.training_line is not None
    assert found.steps.training_line == found.training_line
    assert view.training_line is None
