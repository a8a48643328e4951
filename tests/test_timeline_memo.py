"""The interval primitives' shortcuts (timeline.union on a union, timeline.partition's
memo of its unions) give what the general path gives."""
import gc

import numpy as np
import pytest

from tfbneck_plugin.trace import timeline


def _reference_union(s, e):
    """The merge rule, by sorting, with no shortcut: what union returned before its fast paths."""
    s, e = np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return [], []
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    out_s, out_e = [int(s[0])], [int(e[0])]
    for a, b in zip(s[1:].tolist(), e[1:].tolist()):
        if a > out_e[-1]:
            out_s.append(a)
            out_e.append(b)
        else:
            out_e[-1] = max(out_e[-1], b)
    return out_s, out_e


@pytest.fixture(params=["C", "numpy"])
def path(request, monkeypatch):
    """Both ways the intervals are ordered and merged: the C helpers, and numpy."""
    if request.param == "numpy":
        monkeypatch.setattr(timeline, "_C", None)
    elif timeline._C is None:
        pytest.skip("the C fast path is not compiled here")
    return request.param


def test_union_equals_the_merge_rule_on_random_sets(path):
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 5, 50, 2000):
        for spread in (10, 1000):
            s = rng.integers(0, spread, n)
            e = s + rng.integers(-3, 30, n)
            by_start = np.argsort(s, kind="stable")
            for starts, ends in ((s, e), (np.sort(s), np.sort(s) + 5), (s[by_start], e[by_start]),
                                 (s[by_start][::-1].copy(), e[by_start][::-1].copy())):
                got = timeline.union(starts, ends)
                assert [x.tolist() for x in got] == list(_reference_union(starts, ends))
                again = timeline.union(*got)  # a union is its own union
                assert [x.tolist() for x in again] == [x.tolist() for x in got]


def test_union_of_a_union_is_returned_as_it_is_and_touching_ones_merge(path):
    s, e = np.array([0, 5, 9], dtype=np.int64), np.array([3, 8, 12], dtype=np.int64)
    got = timeline.union(s, e)
    assert got[0] is s and got[1] is e
    touching = timeline.union(np.array([0, 3]), np.array([3, 5]))  # sorted but touching: merged
    assert touching[0].tolist() == [0] and touching[1].tolist() == [5]
    assert timeline.is_disjoint(*touching) and not timeline.is_disjoint(np.array([0, 3]), np.array([3, 5]))


def _categories(rng, n=400):
    cats = {}
    for name in "abcd":
        s = rng.integers(0, 10_000, n)
        cats[name] = (s, s + rng.integers(0, 200, n))
    return cats


def test_partition_twice_on_the_same_categories_gives_the_same_split(path):
    rng = np.random.default_rng(1)
    cats = _categories(rng)
    w1 = (np.array([0, 2_000, 7_000]), np.array([1_500, 6_000, 10_500]))
    w2 = (np.array([100, 9_000]), np.array([800, 9_900]))
    first = timeline.partition(cats, list("abcd"), *w1)
    second = timeline.partition(cats, list("abcd"), *w2)  # the memo's unions, other windows
    fresh = {k: (a.copy(), b.copy()) for k, (a, b) in cats.items()}  # new arrays: no memo
    for windows, got in ((w1, first), (w2, second)):
        want = timeline.partition(fresh, list("abcd"), *windows)
        assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}
        assert (sum(got.values()) == windows[1] - windows[0]).all()


def test_partition_memo_follows_the_arrays_not_their_ids():
    rng = np.random.default_rng(2)
    cats = _categories(rng)
    windows = (np.array([0]), np.array([10_500]))
    timeline.partition(cats, list("abcd"), *windows)
    assert timeline._PREFIXES  # kept while its inputs live
    del cats
    gc.collect()
    assert not timeline._PREFIXES  # dropped with them: a long-lived process keeps nothing
    other = _categories(np.random.default_rng(3))  # new arrays (their ids may be the old ones')
    got = timeline.partition(other, list("abcd"), *windows)
    want = timeline.partition({k: (a.copy(), b.copy()) for k, (a, b) in other.items()}, list("abcd"), *windows)
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}
