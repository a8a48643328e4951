"""The analysis's own ways to numbers numpy also gives (timeline.ms_list, median, percentile,
distinct, member) give numpy's and Python's values exactly, on a real trace's values and on
the cases where a shortcut could differ (ties, NaN, infinities, the ends of the range); a cold
analysis imports no numpy.ma; the host lines' bounds and the function links' kept answers are
what computing them afresh gives."""
import os
import subprocess
import sys

import numpy as np
import pytest

from support.paths import DATA
from tfbneck_plugin.analysis.host_analysis import HostAnalysis
from tfbneck_plugin.trace import timeline, xspace
from tfbneck_plugin.trace.tracefile import read_space

#: A real Keras trace of the test data: its steps, stages and executor links.
TRACE = os.path.join(DATA, "cache_filling_window", "plugins", "profile", "2026_11_30_12_21_08_steps6-10",
                     "vm.xplane.pb")


@pytest.fixture(scope="module")
def host():
    h = HostAnalysis(read_space(TRACE))
    h.report()
    return h


def _same(a, b) -> bool:
    """Equal as the report would print them (repr), NaN equal to NaN, -0.0 apart from 0.0."""
    return repr(float(a)) == repr(float(b))


def _arrays():
    rng = np.random.default_rng(7)
    out = []
    for n in [1, 2, 3, 4, 5, 10, 11, 100, 101, 2734]:
        out += [rng.random(n) * 10, rng.integers(0, 10 ** 12, n) / 1e9, rng.integers(0, 4, n).astype(np.float64),
                rng.standard_normal(n) * 1e6]
        with_nan = rng.random(n)
        with_nan[rng.integers(0, n)] = np.nan
        out.append(with_nan)
    return out + [np.array([np.inf, 1.0, 2.0]), np.array([-np.inf, np.inf]), np.array([1e308, -1e308, 1e308])]


def test_ms_list_is_ms_of_each_value(host):
    steps = host.steps
    real = [steps.starts - host.origin, steps.ends - steps.starts, *host.parts.values()]
    rng = np.random.default_rng(3)
    ties = rng.integers(0, 10 ** 9, 20000) * 10 ** 6 + 5 * 10 ** 5  # x.xxx5 ms: a tie in decimal
    edge = [ties, ties + rng.integers(-3, 4, 20000), rng.integers(-2 ** 63, 2 ** 63 - 1, 20000, dtype=np.int64),
            np.array([0, 1, -1, 5 * 10 ** 5, 15 * 10 ** 5, 62_500_000, 2 ** 62, -2 ** 63, 2 ** 63 - 1]),
            rng.random(20000) * 1e20, np.array([np.nan, np.inf, -np.inf, -0.0, 1e300, -1e-300])]
    for values in real + edge:
        want = [timeline.ms(v) for v in values]
        got = timeline.ms_list(values)
        assert [repr(v) for v in got] == [repr(v) for v in want]


def test_median_and_percentile_are_numpys():
    for a in _arrays():
        with np.errstate(all="ignore"):
            assert _same(timeline.median(a), np.median(a)), a[:5]
            for q in (0, 1, 10, 25, 33.3, 50, 75, 90, 99, 100):
                assert _same(timeline.percentile(a, q), np.percentile(a, q)), (q, a[:5])
    ints = np.array([5, 1, 4, 4, 9, 2], dtype=np.int64)
    assert _same(timeline.median(ints), np.median(ints)) and _same(timeline.median([3.5, 1.0]), np.median([3.5, 1.0]))


def test_distinct_and_member_are_numpys(host):
    line = host.view.plane.lines[0]
    rng = np.random.default_rng(11)
    for values in [line.name_id, line.start_ps, np.zeros(0, np.int64), np.array([3]), rng.integers(0, 9, 500)]:
        got, want = timeline.distinct(values), np.unique(values)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    for dtype in (np.int64, np.uint64):
        v, t = rng.integers(0, 3000, 20000).astype(dtype), rng.integers(0, 3000, 700).astype(dtype)
        assert timeline.member(v, t).tolist() == np.isin(v, t).tolist()
        assert not timeline.member(v, t[:0]).any()


def test_a_cold_analysis_imports_no_numpy_ma():
    """numpy 2 imports numpy.ma (~16 ms) the first time a median of floats, a percentile, a
    plain unique or an isin runs: the analysis of a trace uses none of them. numpy 1.x imports
    numpy.ma with numpy itself (the lowest-versions job's 1.23.5), where the analysis can only
    import what numpy already did."""
    bare = subprocess.run([sys.executable, "-c", "import sys, numpy; print('numpy.ma' in sys.modules)"],
                          capture_output=True, text=True, timeout=120)
    assert bare.stdout.split() in (["True"], ["False"]), bare.stderr[-2000:]
    code = ("import runpy, sys\n"
            f"sys.argv = ['tfbneck', 'analyze', {TRACE!r}, '--no-cache', '--output', '/dev/null']\n"
            "try:\n    runpy.run_module('tfbneck_plugin.cli', run_name='__main__')\n"  # as python -m tfbneck_plugin.cli
            "except SystemExit as end:\n    rc = end.code\n"
            "print(rc, 'numpy.ma' in sys.modules, 'tfbneck_plugin.analysis.host_analysis' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["0", bare.stdout.split()[0], "True"], r.stdout + r.stderr[-2000:]


def test_line_bounds_are_the_first_start_and_last_end(host, monkeypatch):
    lines = [line for line in host.space.planes[0].lines if len(line)]
    want = [(int(line.start_ps.min()), int((line.start_ps + line.dur_ps).max())) for line in lines]
    assert [line.bounds() for line in lines] == want  # as the decoder found them
    monkeypatch.setattr(xspace, "_CHUNK", 1000)  # the ends a thousand at a time
    for line in lines:
        line._bounds = None
    assert [line.bounds() for line in lines] == want


def test_owner_of_keeps_its_answer_for_the_same_column_only(host):
    view, links = host.view, host.pipeline.links
    selection = view.select(view.ids_named(["ExecutorState::Process"]))
    assert selection and links.owners  # the trace links executor events to its stages
    for li, idx in selection:
        consumers, present = view.stat_ints(li, idx, "_c")
        first = links.owner_of(consumers, present)
        assert links.owner_of(consumers, present.copy()) is first  # the same column: kept
        fresh = type(links)(links.producers, links.owner, links.owners, links.paths)
        assert fresh.owner_of(consumers, present).tolist() == first.tolist()
        none = np.zeros_like(present)
        assert (links.owner_of(consumers, none) == -1).all()  # another mask: answered again
        assert not first.flags.writeable
