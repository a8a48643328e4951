"""Interval arithmetic on event columns (all times int64 ps, arrays of shape (n,)).

Everything the breakdown needs reduces to three operations on sets of half-open
intervals ``[start, end)``: their union, the part of a union that falls inside each
step, and an exclusive partition of time among categories with a priority order.
All are vectorised with numpy (sort + cumulative sums), O(n log n).
"""
from __future__ import annotations

import math
import weakref
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import wire

Intervals = Tuple[np.ndarray, np.ndarray]  # (starts, ends), int64 ps, same shape

#: The C helpers (``_wirescan.interval_order``, ``merge_sorted``), None without them (the
#: numpy path gives the same results; an extension built before them has none).
_C = wire._wirescan if wire.FAST and hasattr(wire._wirescan, "merge_sorted") else None

#: Picoseconds per millisecond: the trace's unit to the report's.
PS_PER_MS = 1e9


def ms(ps) -> float:
    """ps -> ms, rounded to 3 decimals (1 ns): every time the report gives."""
    return round(float(ps) / PS_PER_MS, 3)


def ms_list(ps) -> List[float]:
    """:func:`ms` of each value of an array, as a list of the same floats, without a
    ``round`` per value (~0.5 us each: most of a 3,000-step report's step table).

    ``round(x, 3)`` is the double nearest to the decimal ``k / 1000``, ``k`` the integer
    nearest to the exact ``1000 x`` (ties to even); ``k / 1000.0`` in floating point is that
    same double (one correctly rounded division of exact integers). ``k`` is ``rint`` of the
    computed ``1000 x``, off the exact product by under 2**-52 of it: the same integer
    unless the product lies that close to a half (a tie, or nearly), or beyond 2**52; those
    few values are rounded by ``round`` itself."""
    x = np.asarray(ps, dtype=np.float64) / PS_PER_MS
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf are left to round
        scaled = x * 1000.0
        out = (np.rint(scaled) / 1000.0).tolist()
        size = np.abs(scaled)
        from_half = np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5)
        unsure = ~((from_half > size * 2.0 ** -50) & (size < 2.0 ** 52))
    if unsure.any():
        values = x.tolist()
        for i in np.flatnonzero(unsure).tolist():
            out[i] = round(values[i], 3)
    return out


def time_stats(values_ms: np.ndarray) -> Dict[str, float]:
    """``mean``, ``p50`` and ``p90`` of times (ms), each rounded to 3 decimals."""
    v = np.asarray(values_ms, dtype=np.float64)
    return {"mean": round(float(v.mean()), 3), "p50": round(percentile(v, 50), 3),
            "p90": round(percentile(v, 90), 3)}


# numpy's median of floats, percentile, plain unique and isin read ``np.ma`` (a NaN check, a
# masked-array check), whose first use imports numpy.ma: ~16 ms of a cold ``tfbneck analyze``
# of a 64 MB trace (2-core VM), more than the analysis of many a step. The four below give
# numpy's own values of one-dimensional arrays without it.

def median(values) -> float:
    """``float(np.median(values))`` of a one-dimensional array (NaN if it holds one): the
    middle order statistic, or ``np.mean`` of the two middle ones, as numpy takes them."""
    v = np.asarray(values).ravel()
    n = len(v)
    if not n or v.dtype.kind not in "fc":  # empty, or no NaN to look for: numpy's median reads no np.ma
        return float(np.median(v))
    h = n // 2
    part = np.partition(v, [h - 1, h, n - 1] if n % 2 == 0 else [h, n - 1])
    if np.isnan(part[n - 1]):  # NaN sorts last
        return float("nan")
    return float(np.mean(part[h - 1:h + 1] if n % 2 == 0 else part[h:h + 1]))


def percentile(values, q: float) -> float:
    """``float(np.percentile(values, q))`` of a one-dimensional array, numpy's default
    ("linear") method step by step: virtual index ``(n - 1) * q / 100`` between order
    statistics ``a`` (below, or the last one at or past the end) and ``b`` (above), weight
    ``g`` (the index less ``a``'s), ``b - (b - a) * (1 - g)`` from ``g = 0.5`` up, else
    ``a + (b - a) * g``; NaN if the array holds one."""
    v = np.asarray(values, dtype=np.float64).ravel()
    n = len(v)
    if not n:
        return float(np.percentile(v, q))  # numpy's error for an empty array
    at = (n - 1) * (q / 100)
    lo = math.floor(at)
    if at >= n - 1:
        lo = hi = -1
    elif at < 0:
        lo = hi = 0
    else:
        hi = lo + 1
    g = at - lo
    part = np.partition(v, sorted({lo % n, hi % n, n - 1}))
    if math.isnan(part[n - 1]):
        return float("nan")
    a, b = float(part[lo]), float(part[hi])
    diff = b - a
    return b - diff * (1 - g) if g >= 0.5 else a + diff * g


def member(values, table) -> np.ndarray:
    """``np.isin(values, table)`` of integers of one dtype: a bool mask, shape of ``values``,
    of the values found in ``table`` (a sort of ``table`` and a binary search of each value)."""
    values = np.asarray(values)
    t = np.sort(np.asarray(table).ravel())
    if not len(t):
        return np.zeros(values.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(t, values), len(t) - 1)
    return t[pos] == values


def distinct(values) -> np.ndarray:
    """``np.unique(values)`` of integers: the distinct values, ascending."""
    v = np.sort(np.asarray(values).ravel())
    if len(v) < 2:
        return v
    keep = np.empty(len(v), dtype=bool)
    keep[0] = True
    np.not_equal(v[1:], v[:-1], out=keep[1:])
    return v[keep]


def outermost(starts: np.ndarray, ends: np.ndarray, *cols: np.ndarray) -> Tuple[np.ndarray, ...]:
    """Sort intervals by start and drop those nested in an earlier kept one (an event inside
    another of the same kind counts once). Returns (starts, ends, *cols), ``cols`` (arrays
    of the same length) reordered and filtered alike."""
    order = np.lexsort((-ends, starts))
    starts, ends = starts[order], ends[order]
    outer = np.ones(len(starts), dtype=bool)
    outer[1:] = starts[1:] >= np.maximum.accumulate(ends)[:-1]
    return (starts[outer], ends[outer]) + tuple(c[order][outer] for c in cols)


def empty() -> Intervals:
    """An empty interval set."""
    z = np.zeros(0, dtype=np.int64)
    return z, z


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge overlapping or touching intervals. Returns disjoint, sorted (starts, ends),
    with a gap between consecutive intervals; intervals already so are returned as they
    are (the same arrays: read them, never write them)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    order = _order(starts, ends)
    if order == _UNION:  # a union already (the breakdown unions its own unions)
        return starts, ends
    if order == _UNSORTED:
        keep = ends > starts
        if not keep.all():
            starts, ends = starts[keep], ends[keep]
        by_start = np.argsort(starts, kind="stable")
        starts, ends = starts[by_start], ends[by_start]
    if len(starts) == 0:
        return empty()
    return _merge_sorted(starts, ends)


#: What :func:`_order` says of a set of intervals.
_UNION, _SORTED, _UNSORTED = 0, 1, 2


def _order(starts: np.ndarray, ends: np.ndarray) -> int:
    """:data:`_UNION` (what :func:`union` returns: none empty, sorted by start, each
    starting after the previous one ended), :data:`_SORTED` (by start) or :data:`_UNSORTED`.
    One pass in C (``_wirescan.interval_order``) where the extension is compiled."""
    if len(starts) == 0:
        return _UNION
    if _C is not None:
        return _C.interval_order(np.ascontiguousarray(starts), np.ascontiguousarray(ends))
    if not bool((starts[1:] >= starts[:-1]).all()):
        return _UNSORTED
    return _UNION if bool((ends > starts).all()) and bool((starts[1:] > ends[:-1]).all()) else _SORTED


def _merge_sorted(s: np.ndarray, e: np.ndarray) -> Intervals:
    """The union of intervals sorted by start (empty ones left out)."""
    if _C is not None:
        ms, me = _C.merge_sorted(np.ascontiguousarray(s), np.ascontiguousarray(e))
        return np.frombuffer(ms, dtype=np.int64), np.frombuffer(me, dtype=np.int64)
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if len(s) == 0:
        return empty()
    running_end = np.maximum.accumulate(e)
    # A new merged interval begins where the start is beyond every earlier end.
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > running_end[:-1]
    idx = np.flatnonzero(new)
    last = np.append(idx[1:], len(s)) - 1
    return s[idx], running_end[last]


def is_disjoint(starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether the intervals are what :func:`union` returns: none empty, sorted by start,
    each starting after the previous one ended (int64 arrays of shape (n,))."""
    return _order(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)) == _UNION


def concat(parts: Sequence[Intervals]) -> Intervals:
    """The intervals of several sets together (not merged: overlaps stay)."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return empty()
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def total(iv: Intervals) -> int:
    """Length (ps) of the union of the intervals."""
    s, e = union(*iv)
    return int((e - s).sum())


def overlap_per_window(iv: Intervals, win_starts: np.ndarray, win_ends: np.ndarray) -> np.ndarray:
    """Length (ps) of the union of ``iv`` inside each window; shape (n_windows,)."""
    s, e = union(*iv)
    out = np.zeros(len(win_starts), dtype=np.int64)
    if len(s) == 0:
        return out
    # Covered length up to time t: cumulative length of merged intervals clipped at t.
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_until(t):
        i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        base = cum[np.maximum(i - 1, 0)]
        partial = np.where(i > 0, np.minimum(t, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0)
        return np.where(i > 0, base + partial, 0)

    out = covered_until(np.asarray(win_ends, dtype=np.int64)) - covered_until(np.asarray(win_starts, dtype=np.int64))
    return out.astype(np.int64)


def partition(categories: Dict[str, Intervals], priority: List[str],
              win_starts: np.ndarray, win_ends: np.ndarray, rest: str = "idle") -> Dict[str, np.ndarray]:
    """Split each window's time exclusively among categories.

    Each instant of a window goes to the first category in ``priority`` whose intervals
    cover it, else to ``rest``. Returns name -> ps per window, shape (n_windows,); for
    each window the values sum exactly to its length.
    """
    win_starts = np.asarray(win_starts, dtype=np.int64)
    win_ends = np.asarray(win_ends, dtype=np.int64)
    result: Dict[str, np.ndarray] = {}
    claimed = np.zeros(len(win_starts), dtype=np.int64)
    for name, covered_so_far in zip(priority, _covered_prefixes(categories, priority)):
        now = overlap_per_window(covered_so_far, win_starts, win_ends)
        result[name] = now - claimed
        claimed = now
    result[rest] = (win_ends - win_starts) - claimed
    return result


#: The last :func:`_covered_prefixes` result: (key, weak references to its inputs, prefixes).
_PREFIXES: Dict[str, tuple] = {}


def _covered_prefixes(categories: Dict[str, Intervals], priority: List[str]) -> List[Intervals]:
    """The union of the first k categories of ``priority``, for k = 1..len(priority).

    The analysis partitions the same categories over several sets of windows (the steady
    steps, the odd ones, those left out): the unions of the last call are kept while its
    input arrays live (weak references; the memo is dropped when one of them is freed) and
    reused when the same arrays come again."""
    ivs = [categories.get(name) for name in priority]
    arrays = [a for iv in ivs if iv is not None for a in iv]
    key = (tuple(priority), tuple(iv is None for iv in ivs), tuple(id(a) for a in arrays))
    hit = _PREFIXES.get("last")
    if hit is not None and hit[0] == key and all(ref() is a for ref, a in zip(hit[1], arrays)):
        return hit[2]
    out, covered = [], empty()
    for iv in ivs:
        if iv is not None:
            covered = union(*concat([covered, union(*iv)]))
        out.append(covered)
    try:
        refs = [weakref.ref(a) for a in arrays]
    except TypeError:  # not numpy arrays (lists): nothing to key a memo on
        return out
    _PREFIXES["last"] = (key, refs, out)
    for a in arrays:
        weakref.finalize(a, _forget_prefixes, key)
    return out


def _forget_prefixes(key) -> None:
    hit = _PREFIXES.get("last")
    if hit is not None and hit[0] == key:
        del _PREFIXES["last"]


def gaps(iv: Intervals, start: int, end: int) -> Intervals:
    """Complement of ``iv`` inside [start, end): the idle gaps, as disjoint intervals."""
    s, e = union(*iv)
    s = np.clip(s, start, end)
    e = np.clip(e, start, end)
    keep = e > s
    s, e = s[keep], e[keep]
    gs = np.concatenate([[start], e])
    ge = np.concatenate([s, [end]])
    keep = ge > gs
    return gs[keep], ge[keep]


def difference(a: Intervals, b: Intervals) -> Intervals:
    """The part of ``a`` not covered by ``b``, as disjoint sorted intervals."""
    a_s, a_e = union(*a)
    b_s, b_e = union(*b)
    if len(a_s) == 0 or len(b_s) == 0:
        return a_s, a_e
    # Boundaries of both sets; keep elementary segments inside a and outside b.
    points = distinct(np.concatenate([a_s, a_e, b_s, b_e]))
    seg_s, seg_e = points[:-1], points[1:]
    in_a = np.searchsorted(a_s, seg_s, side="right") - np.searchsorted(a_e, seg_s, side="right") > 0
    in_b = np.searchsorted(b_s, seg_s, side="right") - np.searchsorted(b_e, seg_s, side="right") > 0
    keep = in_a & ~in_b
    return union(seg_s[keep], seg_e[keep])


def nesting_order(starts: np.ndarray, ends: np.ndarray) -> Optional[np.ndarray]:
    """The order that puts intervals by start, enclosing ones first (``np.lexsort((-ends,
    starts))``), or None when they are in that order already: a thread's events as the
    profiler writes them (checked in one pass, no sort)."""
    if len(starts) < 2:
        return None
    s0, s1, e0, e1 = starts[:-1], starts[1:], ends[:-1], ends[1:]
    if bool(np.all((s1 > s0) | ((s1 == s0) & (e1 <= e0)))):
        return None
    return np.lexsort((-ends, starts))


def nesting_parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Parent of each interval in a properly nested set (one thread's TraceMe events):
    the innermost other interval that encloses it, as an index into the input; -1 at top
    level. Depth from counts of opened and closed intervals; the parent is the last
    earlier interval one level up. Shape (n,).

    Linear after one sort of the ends: a scan in C (``_wirescan.nest``) where the extension
    is compiled (:data:`.wire.FAST`), else the same rule vectorised with numpy."""
    n = len(starts)
    if n == 0:
        return np.full(0, -1, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    order = nesting_order(starts, ends)  # enclosing intervals come before what they enclose
    s, e = (starts, ends) if order is None else (starts[order], ends[order])
    scan = getattr(wire._wirescan, "nest", None) if wire.FAST else None  # None: an extension built before it
    if scan is not None:
        sorted_parent = np.frombuffer(bytearray(scan(np.ascontiguousarray(s), np.sort(e))), dtype=np.int64)
    else:
        sorted_parent = _nest_numpy(s, e)
    if order is None:
        return sorted_parent
    parent = np.full(n, -1, dtype=np.int64)
    has = sorted_parent >= 0
    parent[order[has]] = order[sorted_parent[has]]
    return parent


def _nest_numpy(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """:func:`nesting_parents` of intervals already in nesting order, with numpy."""
    n = len(s)
    pos = np.arange(n)
    # Intervals before k in this order that already closed when k starts.
    # (Zero-length intervals starting at s itself may be counted too: clamp, never negative.)
    closed = np.minimum(np.searchsorted(np.sort(e), s, side="right"), pos)
    depth = pos - closed
    # The parent of k is the last interval before k one level up. One search over all
    # levels at once (a loop per level is quadratic when thousands of events nest):
    # positions grouped by depth, in order, are sorted keys depth * (n + 1) + position;
    # the children's queries, taken in that same grouping, are sorted too.
    by_depth = np.argsort(depth.astype(np.uint16) if int(depth.max()) < 2 ** 16 else depth, kind="stable")
    d_sorted = depth[by_depth]
    keys = d_sorted * (n + 1) + by_depth
    is_child = d_sorted > 0
    child, dc = by_depth[is_child], d_sorted[is_child]
    j = np.searchsorted(keys, (dc - 1) * (n + 1) + child) - 1
    ok = j >= 0
    ok[ok] = d_sorted[j[ok]] == dc[ok] - 1
    sorted_parent = np.full(n, -1, dtype=np.int64)
    sorted_parent[child[ok]] = by_depth[j[ok]]
    return sorted_parent
