"""Step finders, one synthetic trace per kind of evidence (tests/xspace_builder.py)."""
import pytest

from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions
from xspace_builder import SpaceBuilder, session_path


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
    assert tried == ["step_markers", "trace_context", "keras_profiled_batch"]


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
