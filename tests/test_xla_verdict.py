"""A training step compiled by XLA on a CPU host is the model's compute, not eager execution or
host overhead: the verdict and the breakdown of the real TensorFlow 2.21 traces of
tests/data/xla_jit (made by its make.py).

A ``tf.function(jit_compile=True)`` called from a custom loop runs as one eager op whose work is
an XLA:CPU executable's run (``CpuExecutable::ExecuteAsyncOnStream``, its HLO ops inside
``ThunkExecutor::Execute`` events) on the calling thread, with no ``FunctionRun``. Expected values
are read here from the trace's own events, without the analyzer's interval code.
"""
import glob
import os

import pytest
from conftest import ROOT

from tfbneck_plugin.analysis.host_analysis import HostAnalysis
from tfbneck_plugin.trace import tracefile

XLA = os.path.join(ROOT, "tests", "data", "xla_jit")
RUN, THUNKS = "CpuExecutable::ExecuteAsyncOnStream", "ThunkExecutor::Execute"


def _analysis(name):
    (path,) = glob.glob(os.path.join(XLA, name, "plugins", "profile", "*", "*.xplane.pb"))
    return HostAnalysis(tracefile.read_space(path))


def _events(analysis, names):
    """{line name: [(start, end) in ps]} of the host's events named one of ``names``."""
    plane = analysis.space.plane("/host:CPU")
    out = {}
    for line in plane.lines:
        for k in range(len(line)):
            if plane.event_names.get(int(line.name_id[k]), "") in names:
                s = int(line.start_ps[k])
                out.setdefault(line.name, []).append((s, s + int(line.dur_ps[k])))
    return out


def _merged(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _covered(spans, lo, hi):
    """ps of [lo, hi) covered by the union of ``spans``."""
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in _merged(spans))


@pytest.mark.parametrize("name", ["loop_jit_on", "fit_jit_on"])
def test_a_step_compiled_by_xla_is_not_eager(name):
    analysis = _analysis(name)
    assert _events(analysis, {RUN})
    assert analysis.findings.eager is False
    assert analysis.verdict.cause != "eager_execution"


def test_the_custom_loops_executable_runs_are_its_model_compute():
    """The loop's trace has no executor events: each step's model compute is exactly the time its
    executable's runs and thunk executors cover."""
    analysis = _analysis("loop_jit_on")
    assert not _events(analysis, {"ExecutorState::Process", "FunctionRun"})
    xla = [sp for spans in _events(analysis, {RUN, THUNKS}).values() for sp in spans]
    starts, ends = analysis.windows
    runs = [sp for sp in _events(analysis, {RUN}).values() for sp in sp]
    for k, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist())):
        assert sum(1 for s, _ in runs if lo <= s < hi) == 1  # one executable run per step
        assert int(analysis.parts["device_compute"][k]) == _covered(xla, lo, hi) > 0
    # The loop is tiny (a 32x64 by 64x4 matmul): its run is a few % of the step, the rest is
    # Python and dispatch on the training thread, as the events show.
    assert analysis.breakdown_pct["device_compute"] < 15 and analysis.breakdown_pct["host_compute"] > 40
    assert analysis.verdict.cause == "python_overhead"


def test_the_model_cpu_time_counts_each_thread_of_the_executable():
    """The what-if models' model CPU time: per thread, the executor events and XLA events
    merged, added over threads (the loop: the training thread's runs)."""
    analysis = _analysis("loop_jit_on")
    starts, ends = analysis.windows
    lo, hi = int(starts.min()), int(ends.max())
    want = sum(_covered(spans, lo, hi) for spans in _events(analysis, {RUN, THUNKS}).values())
    assert analysis.findings.timing.model_cpu_ms == pytest.approx(want / len(starts) / 1e9)


def test_a_fits_executable_runs_lie_inside_its_model_compute():
    """Keras' fit runs the executable inside the function's executor event; its HLO ops run on the
    Eigen pool's threads. Every instant of a run or thunk executor in a step is model compute."""
    analysis = _analysis("fit_jit_on")
    xla = [sp for spans in _events(analysis, {RUN, THUNKS}).values() for sp in spans]
    runs = [sp for spans in _events(analysis, {RUN}).values() for sp in spans]
    starts, ends = analysis.windows
    for k, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist())):
        wall = sum(min(e, hi) - s for s, e in runs if lo <= s < hi)
        assert wall > 0
        assert int(analysis.parts["device_compute"][k]) >= _covered(xla, lo, hi) >= wall


def test_a_run_without_xla_keeps_its_breakdown():
    """jit_compile off: no XLA events, the model's compute is the function's executor events."""
    analysis = _analysis("fit_jit_off")
    assert not _events(analysis, {RUN, THUNKS})
    assert analysis.view.xla_intervals() == {}
    assert not analysis.findings.eager
