"""``compare`` at op level: which ops' (and which layer scopes') time per batch changed most
between two session reports, in ms and %, each with the per-step significance test the
step-time comparison uses (:func:`.comparison.significance`, Mann-Whitney U over the steps).

Reads each side's ``top_ops`` rows: their ``self_ms_steps`` (self ms in each steady step),
divided by the batches per step; a layer scope's or op type's time is that of its ops among
those rows. An op kept in one side's ``top_ops`` only (below the other side's cut) counts 0 ms
there and is flagged ``only_in``.

Ops and scopes are matched by layer path, not by the names one trace gave them: function and
control-flow wrappers are left out (``steps_per_execution`` runs the step inside
``while/body/...``) and so are instance numbers (Keras names the second model of a process
``sequential_1`` and its layers ``dense_3``..., TensorFlow's name scopes add ``_1``, ``_2`` to a
scope used again, ``dense_1_2``; a scope's second op is ``Sub_1``). A layer is paired by its place
among the layers of its name under the same parent: where both sides' kept ops show the same number
of them, the k-th of each side (ordered by their instance numbers, which follow the order Keras made
them in) is one row, named ``dense`` for the first and ``dense[k]`` for the others
(``sequential/dense[1]/MatMul``: the second Dense layer's MatMul ops on both sides, whatever each
trace called it); where the counts differ (a layer whose ops one side did not keep among its top
ops), they are summed under the bare name, ``sequential/dense/MatMul``. An op's own instance number
is left out: the ops of one layer and type are summed. An XLA
executable's rows (its own and its HLO ops', :func:`..analysis.ops.xla_ops`) are one op, the
executable (``one_step_on_data (XLA)``): turning XLA on reads as the TensorFlow ops that went to
0 and the executable that took their place (its HLO ops among the rows kept in ``top_ops``).
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..analysis.ops import XLA_OP_PREFIX, layer_path, scope_of

#: Rows of each list in the comparison.
LIMIT = 10


_INSTANCE = re.compile(r"(?:_\d+)+$")


def matched_name(name: str) -> str:
    """An op name as both sides of a comparison match it: its layer path
    (:func:`..analysis.ops.layer_path`) without instance numbers,
    ``StatefulPartitionedCall/sequential_1/dense_1_2/MatMul_1`` -> ``sequential/dense/MatMul``."""
    return _without_instances(layer_path(name))


def _without_instances(parts: List[str]) -> str:
    return "/".join(_INSTANCE.sub("", part) or part for part in parts)


def _instance_key(part: str) -> Tuple[int, ...]:
    """The instance numbers of a scope (``dense_1_2`` -> (1, 2); ``dense`` -> ())."""
    m = _INSTANCE.search(part)
    return tuple(int(n) for n in m.group(0)[1:].split("_")) if m else ()


Layers = Dict[Tuple[str, ...], Tuple[str, ...]]


def paired_layers(before: List[List[str]], after: List[List[str]]) -> Tuple[Layers, Layers]:
    """Each side's layer scopes (``before``, ``after``: scope lists, wrappers left out, outermost
    first) mapped to the name both sides share: {raw scope path: paired path}, prefixes included.

    Level by level, the scopes of one bare name under one paired parent are ordered by their
    instance numbers (:func:`_instance_key`); where both sides have as many of them, the k-th is
    ``name`` (k = 0) or ``name[k]``, else each is the bare ``name`` (summed)."""
    maps: Tuple[Layers, Layers] = ({(): ()}, {(): ()})
    sides = [{tuple(p[:d]) for p in paths for d in range(1, len(p) + 1)} for paths in (before, after)]
    for depth in range(1, max((len(p) for s in sides for p in s), default=0) + 1):
        groups: List[Dict[Tuple, List[Tuple[str, ...]]]] = [{}, {}]
        for side, seen, group in zip(maps, sides, groups):
            for path in seen:
                if len(path) == depth:
                    base = _INSTANCE.sub("", path[-1]) or path[-1]
                    group.setdefault((side[path[:-1]], base), []).append(path)
        for side, group, other in ((maps[0], groups[0], groups[1]), (maps[1], groups[1], groups[0])):
            for (parent, base), members in group.items():
                ranked = len(members) == len(other.get((parent, base), ()))
                members.sort(key=lambda p: (_instance_key(p[-1]), p))
                for k, path in enumerate(members):
                    side[path] = parent + (f"{base}[{k}]" if ranked and k else base,)
    return maps


def _paired_name(name: str, layers: Layers) -> str:
    """An op name as :func:`paired_layers` pairs its layer, its own name without instance numbers."""
    *scopes, op = layer_path(name)
    path = layers.get(tuple(scopes))
    if path is None:
        return matched_name(name)
    return "/".join(path + (_INSTANCE.sub("", op) or op,))


def _scope_paths(report: Dict) -> List[List[str]]:
    """The layer scopes of a report's TensorFlow op rows (XLA rows' are their executable's)."""
    return [layer_path(r["name"])[:-1] for r in report.get("top_ops") or []
            if not (r.get("type") or "").startswith(XLA_OP_PREFIX) and r.get("name")]


def _per_batch(report: Dict) -> int:
    return max(int((report.get("steps") or {}).get("batches_per_step") or 1), 1)


def _series(report: Dict, key) -> Dict[Tuple[str, str], np.ndarray]:
    """(where, name) -> self ms per batch in each steady step, summed over the rows ``key`` maps to it."""
    out: Dict[Tuple[str, str], np.ndarray] = {}
    bps = _per_batch(report)
    for r in report.get("top_ops") or []:
        k = key(r)
        steps = np.asarray(r.get("self_ms_steps") or [], dtype=np.float64) / bps
        if k is None or not len(steps):
            continue
        out[k] = out[k] + steps if k in out and len(out[k]) == len(steps) else steps
    return out


def _order(r: Dict, alpha: float) -> Tuple[bool, float]:
    """Changes the test supports (p < ``alpha``) or an op that left or entered a side's top ops
    first, then the rest; each group largest absolute change first. A large change of an op
    whose per-step times overlap is noise until shown otherwise."""
    shown = r.get("only_in") is not None or (r.get("p_value") is not None and r["p_value"] < alpha)
    return (not shown, -abs(r["change_ms"]))


def _changes(before: Dict, after: Dict, label: str, significance, alpha: float) -> List[Dict]:
    rows = []
    for k in set(before) | set(after):
        b, a = before.get(k), after.get(k)
        mb = float(b.mean()) if b is not None else 0.0
        ma = float(a.mean()) if a is not None else 0.0
        row = {"where": k[0], label: k[1], "baseline_ms": round(mb, 3), "candidate_ms": round(ma, 3),
               "change_ms": round(ma - mb, 3), "change_pct": round(100.0 * (ma - mb) / mb, 1) if mb > 0 else None,
               "p_value": round(significance(b, a), 6) if b is not None and a is not None else None}
        if b is None or a is None:
            row["only_in"] = "candidate" if b is None else "baseline"
        rows.append(row)
    rows.sort(key=lambda r: _order(r, alpha))
    return rows[:LIMIT]


def op_changes(baseline: Dict, candidate: Dict, significance, alpha: float) -> Dict[str, List[Dict]]:
    """``{"ops": [...], "scopes": [...], "types": [...]}``: the ops, layer scopes and op types
    whose self time per batch changed most (``baseline_ms``, ``candidate_ms``, ``change_ms``, ``change_pct``,
    ``p_value``): those with ``p_value`` below ``alpha`` (the comparison's significance level)
    or ``only_in`` one side first, then the others, each group largest absolute change first;
    ``types`` empty where every op's type is its name (PyTorch's rows: the ops' list again).
    ``significance(a, b) -> p``."""
    mine_b, mine_a = paired_layers(_scope_paths(baseline), _scope_paths(candidate))

    def both(fn) -> Tuple[Dict, Dict]:  # each side's series, its rows keyed by ``fn(row, that side's paired layers)``
        return _series(baseline, lambda r: fn(r, mine_b)), _series(candidate, lambda r: fn(r, mine_a))

    def op(r, mine):  # an XLA row: its executable's
        if (r.get("type") or "").startswith(XLA_OP_PREFIX):
            return (r["where"], r["name"].split("/")[0])
        return (r["where"], _paired_name(r["name"], mine))

    def scope(r, mine):  # the report's own (PyTorch's modules, TensorFlow's name scopes), else from the name
        s = r["scope"] if "scope" in r else scope_of(r["name"])
        if not s:
            return None
        path = mine.get(tuple(s.split("/")))
        return (r["where"], "/".join(path) if path is not None else _without_instances(s.split("/")))

    def kind(r):
        return (r["where"], r["type"])

    # Op types match where names do not (Keras 3 and tf-keras name the same layers differently);
    # where every op's type is its name (PyTorch's aten ops) they would repeat the ops' list.
    rows = (baseline.get("top_ops") or []) + (candidate.get("top_ops") or [])
    named_by_type = all(r.get("type") == r.get("name") for r in rows)
    return {"ops": _changes(*both(op), "name", significance, alpha),
            "scopes": _changes(*both(scope), "scope", significance, alpha),
            "types": [] if named_by_type else _changes(_series(baseline, kind), _series(candidate, kind), "type",
                                                       significance, alpha)}


def _line(r: Dict, label: str, alpha: float) -> str:
    pct = f", {r['change_pct']:+.1f} %" if r.get("change_pct") is not None else ""
    p = f", p = {r['p_value']:.4g}" if r.get("p_value") is not None else ""
    if r.get("p_value") is not None and r["p_value"] >= alpha:
        p += ", not significant"
    only = f" (in the {r['only_in']}'s top ops only)" if r.get("only_in") else ""
    return (f"{r['where']} {r[label]}: {r['baseline_ms']:.3f} -> {r['candidate_ms']:.3f} ms per batch "
            f"({r['change_ms']:+.3f} ms{pct}{p}){only}")


def text_lines(changes: Optional[Dict], alpha: float, limit: int = 5) -> List[str]:
    """The op-level part of the comparison, as lines of text; a change whose p-value is not
    below ``alpha`` says so."""
    if not changes or not (changes.get("ops") or changes.get("scopes")):
        return []
    out = ["  ops that changed most (self time per batch):"]
    out += [f"    {_line(r, 'name', alpha)}" for r in changes["ops"][:limit]]
    for key, title in (("scopes", "layer scopes"), ("types", "op types")):
        if changes.get(key):
            out.append(f"  {title} that changed most:")
            out += [f"    {_line(r, key[:-1], alpha)}" for r in changes[key][:limit]]
    return out
