"""A synchronous multi-worker job as one diagnosis: who the workers wait for, and why.

When one worker of a synchronous job is slow, every other worker waits for it inside the
all-reduce, so each of their traces says "collectives". This module reads the workers'
``sync`` sections (:mod:`.sync`) side by side:

1. Steps are matched across workers by step number.
2. In each matched step, a worker's time in collectives is the transfer plus its wait for
   the last worker to arrive, and the last one waits least. So the least collective time of
   the step is the collective's own cost (``network_ms``: what remains when every worker
   has arrived), the worker with it arrived last, and each other worker waited its own
   collective time less that least one. No clock is compared: workers on different
   machines are judged as well as workers on one.
3. Why the last worker was late: the category of its own time (:data:`.sync.SYNC_ORDER`,
   input wait measured before collectives) that exceeds the other workers' most.
4. The job's verdict: a worker that keeps the others waiting for at least
   :data:`STRAGGLER_WAIT_PCT` of the step, and :data:`DOMINANCE` times longer than any other
   worker does, stands out. When the others wait for it at least as long as the collectives'
   own cost, it is the straggler and its own limit is the job's (``cpu / input_preprocessing
   on worker 1``...). Otherwise, when the collectives' own cost is at least the collective
   rule's 20 %, ``network / gradient_sync`` (a worker that stands out is named as a second
   link). Otherwise the worker that stands out is the straggler; and when none does, the
   workers are limited by what each does itself: the slowest worker's own limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..causes import cause_text
from . import sync as syncmod
from .rules import COLLECTIVE_BOUND_PCT
from .verdict import confidence

#: Share (%) of the step time that the other workers spend waiting for one worker (summed
#: over the steps it arrived last) from which it is the job's straggler (our choice: 10 %,
#: the gap at which multihost.MIN_LATENESS_RATIO calls a host slower than the others).
STRAGGLER_WAIT_PCT = 10.0
#: ... and keeps them waiting at least this many times longer than any other worker does:
#: in a balanced job each worker is last in some steps by chance, and no one stands out
#: (our choice).
DOMINANCE = 2.0
#: Within one step, a spread of the workers' collective times below this share of the step
#: (%) means they arrived together: nobody was last (our choice: run-to-run jitter of a step).
TOGETHER_PCT = 2.0
#: The straggler should arrive last in at least this fraction of the matched steps; when it
#: does not, its lateness is concentrated in a few steps and the verdict is less sure by
#: :data:`SCATTERED_PENALTY` (our choices).
CONSISTENT_FRACTION = 2.0 / 3.0
SCATTERED_PENALTY = 0.1
#: A step's lateness is put down to a category only when the last worker's excess in it
#: covers at least this fraction of the others' wait (our choice: most of it).
EXPLAINED_FRACTION = 0.5
#: The reasons the evidence gives for a straggler's lateness: each category in which it
#: exceeds the others by at least this share of their wait for it (our choice: a quarter).
REASON_SHARE = 0.25
#: Why a worker was late, by the own-time category in which it exceeded the others.
WHY = {"input": "waiting for its input pipeline", "device_compute": "computing",
       "host_to_device": "copying to the device", "device_to_host": "copying from the device",
       "kernel_launch": "launching kernels", "host_compute": "in host overhead (Python, framework)",
       "idle": "in time the trace does not explain"}


@dataclass
class Worker:
    """One worker: its name (``worker:1``, or a host name) and its report (a host report or
    a one-host session report) holding a ``sync`` section (or None when its steps held no
    collective)."""
    name: str
    report: Dict

    @property
    def sync(self) -> Optional[Dict]:
        return self.report.get("sync")

    @property
    def step_ms(self) -> float:
        return ((self.report.get("steps") or {}).get("step_time_ms") or {}).get("mean") or 0.0


@dataclass
class Lateness:
    """The matched steps, as arrays of shape (n_workers, n_steps) in ms."""
    numbers: List[int]
    collective: np.ndarray
    duration: np.ndarray
    own: List[List[Dict[str, float]]]            # [worker][step] own_ms
    last: List[Optional[int]] = field(default_factory=list)   # per step: worker index or None
    wait: np.ndarray = None                      # per step: mean wait of the others for the last (ms)

    @property
    def network(self) -> np.ndarray:
        return self.collective.min(axis=0)

    @property
    def step(self) -> np.ndarray:
        return np.median(self.duration, axis=0)


def match_steps(workers: List[Worker]) -> Optional[Lateness]:
    """The steps every worker recorded (by step number), with who arrived last at each; None
    when a worker has no ``sync`` section or no step is shared."""
    if len(workers) < 2 or any(w.sync is None for w in workers):
        return None
    by_worker = [syncmod.steps_by_number(w.sync) for w in workers]
    numbers = sorted(set.intersection(*(set(b) for b in by_worker)))
    if not numbers:
        return None
    rows = [[b[n] for n in numbers] for b in by_worker]
    lat = Lateness(numbers=numbers,
                   collective=np.array([[r["collective_ms"] for r in w] for w in rows], dtype=np.float64),
                   duration=np.array([[r["duration_ms"] for r in w] for w in rows], dtype=np.float64),
                   own=[[r["own_ms"] for r in w] for w in rows])
    lat.wait = np.zeros(len(numbers))
    for k in range(len(numbers)):
        c = lat.collective[:, k]
        i = int(np.argmin(c))
        others = np.delete(c, i) - c[i]
        if others.mean() < TOGETHER_PCT / 100.0 * lat.step[k]:
            lat.last.append(None)  # arrived together: the collective itself took the time
            continue
        lat.last.append(i)
        lat.wait[k] = float(others.mean())
    return lat


def _excess(lat: Lateness, i: int, steps: List[int]):
    """(categories by worker ``i``'s excess over the others' median, largest first, as
    (excess ms, category); its mean ms per category; the others' median ms per category)
    over the step indices ``steps``."""
    mine = syncmod.own_means([lat.own[i][k] for k in steps])
    others = [syncmod.own_means([lat.own[j][k] for k in steps]) for j in range(len(lat.own)) if j != i]
    theirs = {c: float(np.median([o[c] for o in others])) for c in syncmod.OWN_CATEGORIES}
    return sorted(((mine[c] - theirs[c], c) for c in syncmod.OWN_CATEGORIES), reverse=True), mine, theirs


def why_late(lat: Lateness, i: int, steps: List[int]) -> Optional[tuple]:
    """(category, its ms per step on worker ``i``, the others' median ms) of the own-time
    category in which worker ``i`` exceeded the others most over the step indices
    ``steps``; None when it exceeded them in none."""
    if not steps:
        return None
    ranked, mine, theirs = _excess(lat, i, steps)
    x, c = ranked[0]
    return (c, mine[c], theirs[c]) if x > 0 else None


def late_reasons(lat: Lateness, i: int, steps: List[int]) -> List[tuple]:
    """Every own-time category in which worker ``i`` exceeded the others by at least
    :data:`REASON_SHARE` of their mean wait for it over the step indices ``steps`` (the
    largest first, at most three), as ``(category, its ms per step, the others' median ms)``;
    the largest excess alone when none is that large; [] when it exceeded them in none."""
    if not steps:
        return []
    ranked, mine, theirs = _excess(lat, i, steps)
    floor = REASON_SHARE * float(lat.wait[steps].mean())
    chosen = [c for x, c in ranked if x >= floor and x > 0][:3] or [c for x, c in ranked[:1] if x > 0]
    return [(c, mine[c], theirs[c]) for c in chosen]


def step_rows(workers: List[Worker], lat: Lateness) -> List[Dict]:
    """The report's per-step table: who arrived last, how long the others waited, the
    collective's own cost, and why the last one was late."""
    out = []
    for k, n in enumerate(lat.numbers):
        i = lat.last[k]
        why = why_late(lat, i, [k]) if i is not None else None
        if why and why[1] - why[2] < EXPLAINED_FRACTION * lat.wait[k]:
            why = None  # the step's own time does not explain the lateness (e.g. it started late)
        out.append({"step": n, "step_ms": round(float(lat.step[k]), 3), "last": workers[i].name if i is not None else None,
                    "wait_ms": round(float(lat.wait[k]), 3), "network_ms": round(float(lat.network[k]), 3),
                    "why": why[0] if why else None})
    return out


def diagnose(workers: List[Worker]) -> Optional[Dict]:
    """The job's verdict from its workers' reports, or None when their steps cannot be
    matched (then each worker's own report stands).

    Returns:
      ``{"bottleneck", "cause", "cause_text", "confidence", "evidence", "evidence_detail",
      "recommendations", "primary": index of the worker whose report stands for the job,
      "job": {"straggler", "lateness_pct", "network_pct", "matched_steps", "steps", ...},
      "per_worker": [{"kept_others_waiting_pct", "last_in_steps", "matched_steps",
      "collective_ms", "own_limit", "straggler"}]}``. Percentages (0-100) are of the workers'
      median step time summed over the matched steps; times in ms.
    """
    lat = match_steps(workers)
    if lat is None:
        return None
    total = float(lat.step.sum())
    late_pct = [100.0 * float(sum(lat.wait[k] for k, j in enumerate(lat.last) if j == i)) / total
                for i in range(len(workers))]
    last_in = [sum(1 for j in lat.last if j == i) for i in range(len(workers))]
    network_pct = 100.0 * float(lat.network.sum()) / total
    s = int(np.argmax(late_pct))
    facts = {"late_pct": late_pct, "last_in": last_in, "network_pct": network_pct, "lat": lat}
    runner_up = max([p for i, p in enumerate(late_pct) if i != s], default=0.0)
    stands_out = late_pct[s] >= STRAGGLER_WAIT_PCT and late_pct[s] >= DOMINANCE * runner_up
    if stands_out and late_pct[s] >= network_pct:  # the others wait for it more than for the transfer
        out = _straggler_verdict(workers, s, facts)
    elif network_pct >= COLLECTIVE_BOUND_PCT:
        out = _network_verdict(workers, facts, s if stands_out else None)
    elif stands_out:
        out = _straggler_verdict(workers, s, facts)
    else:
        out = _own_limit_verdict(workers, facts)
    straggler = workers[s].name if out.pop("straggler") else None
    out["job"] = {"straggler": straggler, "lateness_pct": round(late_pct[s], 2) if straggler else
                  round(max(late_pct), 2), "network_pct": round(network_pct, 2),
                  "matched_steps": lat.numbers, "steps": step_rows(workers, lat),
                  "thresholds": {"straggler_wait_pct": STRAGGLER_WAIT_PCT, "network_pct": COLLECTIVE_BOUND_PCT}}
    out["per_worker"] = [{"kept_others_waiting_pct": round(late_pct[i], 2), "last_in_steps": last_in[i],
                          "matched_steps": len(lat.numbers),
                          "collective_ms": round(float(lat.collective[i].mean()), 3),
                          "own_limit": _own_limit(w), "straggler": w.name == straggler}
                         for i, w in enumerate(workers)]
    out["cause_text"] = cause_text(out["cause"])
    out["evidence_detail"] = [{"text": str(t), "basis": b} for t, b in out.pop("basis")]
    out["evidence"] = [d["text"] for d in out["evidence_detail"]]
    return out


def _own_limit(w: Worker) -> Optional[Dict]:
    own = (w.sync or {}).get("own")
    if not own:
        return None
    return {k: own[k] for k in ("bottleneck", "cause", "confidence", "pct", "own_ms", "step_ms")}


def _prose(name: str, start: bool = False) -> str:
    """``worker:1`` -> ``worker 1`` (a task in a sentence; ``Worker 1`` to start one)."""
    text = name.replace(":", " ") if ":" in name else name
    return text[:1].upper() + text[1:] if start else text


def _own_detail(w: Worker) -> List[tuple]:
    own = w.sync["own"]
    return [(d["text"], d["basis"]) for d in own.get("evidence_detail") or []]


def _straggler_verdict(workers: List[Worker], s: int, facts: Dict) -> Dict:
    lat, w = facts["lat"], workers[s]
    own = w.sync["own"]
    name, n = _prose(w.name), len(lat.numbers)
    mine = [k for k, j in enumerate(lat.last) if j == s]
    basis = [(f"{own['bottleneck']} / {own['cause']} on {name}; the other workers wait for it in all-reduce for "
              f"{facts['late_pct'][s]:.1f}% of the step (straggler from {STRAGGLER_WAIT_PCT:.0f}%).", "trace"),
             (f"Steps matched by step number across {len(workers)} workers: {n} (steps {lat.numbers[0]}-"
              f"{lat.numbers[-1]}). {_prose(w.name, True)} arrived last at the collectives in {len(mine)} of them; "
              f"there the others waited {float(lat.wait[mine].mean()):.1f} ms for it, in steps of "
              f"{float(lat.step[mine].mean()):.1f} ms "
              f"(a worker's collective time less the last worker's: no clock is compared).", "trace")]
    reasons = late_reasons(lat, s, mine)
    if reasons:
        basis.append((f"In those steps {name} spent " + "; ".join(
            f"{m:.1f} ms per step {WHY[c]} (the other workers: {t:.1f} ms)" for c, m, t in reasons) + ".", "trace"))
    basis.append((f"The collectives' own cost (the time the last worker to arrive still spends in them) is "
                  f"{facts['network_pct']:.1f}% of the step.", "trace"))
    basis.extend(_own_detail(w))
    conf = own["confidence"] - (SCATTERED_PENALTY if len(mine) < CONSISTENT_FRACTION * n else 0.0)
    recs = [dict(r, worker=w.name) for r in own.get("recommendations") or []]
    return {"bottleneck": own["bottleneck"], "cause": own["cause"], "confidence": round(max(conf, 0.05), 2),
            "basis": basis, "recommendations": recs, "primary": s, "straggler": True}


def _nobody(facts: Dict) -> str:
    """Why no worker is the straggler, in a clause."""
    return (f"the most any worker kept the others waiting is {max(facts['late_pct']):.1f}% of the step; a straggler "
            f"keeps them waiting {STRAGGLER_WAIT_PCT:.0f}% or more and {DOMINANCE:.0f} times longer than any other "
            f"worker does")


def _network_verdict(workers: List[Worker], facts: Dict, late: Optional[int] = None) -> Dict:
    """``late``: a worker that keeps the others waiting, but less than the all-reduce itself."""
    lat = facts["lat"]
    each = ", ".join(f"{_prose(w.name)} {float(lat.collective[i].mean()):.1f} ms"
                     for i, w in enumerate(workers))
    together = sum(1 for j in lat.last if j is None)
    who = f"not a late worker ({_nobody(facts)}; " if late is None else "more than any late worker ("
    basis = [(f"Every worker spends at least {facts['network_pct']:.1f}% of the step in collectives, the last to "
              f"arrive included: the all-reduce itself takes the time, {who}network-bound from "
              f"{COLLECTIVE_BOUND_PCT:.0f}%).", "trace"),
             (f"Collective time per step: {each}; the workers arrived together in {together} of {len(lat.numbers)} "
              f"matched steps.", "trace")]
    if late is not None:
        mine = [k for k, j in enumerate(lat.last) if j == late]
        why = why_late(lat, late, mine)
        basis.append((f"{_prose(workers[late].name, True)} also keeps the others waiting, {facts['late_pct'][late]:.1f}% "
                      f"of the step (last in {len(mine)} of {len(lat.numbers)} steps"
                      + (f", {WHY[why[0]]} {why[1] - why[2]:.1f} ms longer than the others" if why else "")
                      + "): less than the all-reduce's own cost, a second link after it.", "trace"))
    primary = int(np.argmax([w.step_ms for w in workers]))
    recs = workers[primary].sync.get("network_recommendations") or []
    return {"bottleneck": "network", "cause": "gradient_sync",
            "confidence": confidence(facts["network_pct"], COLLECTIVE_BOUND_PCT), "basis": basis,
            "recommendations": recs, "primary": primary, "straggler": False}


def _own_limit_verdict(workers: List[Worker], facts: Dict) -> Dict:
    primary = int(np.argmax([w.step_ms for w in workers]))
    w = workers[primary]
    own = w.sync["own"]
    basis = [(f"No worker stands out as the one the others wait for ({_nobody(facts)}) and the collectives' own "
              f"cost is {facts['network_pct']:.1f}% of the step (network-bound from {COLLECTIVE_BOUND_PCT:.0f}%): "
              f"each worker is limited by its own work. "
              f"{_prose(w.name, True)}, the slowest, is limited by {own['bottleneck']} / {own['cause']}.", "trace")]
    basis.extend(_own_detail(w))
    return {"bottleneck": own["bottleneck"], "cause": own["cause"], "confidence": own["confidence"],
            "basis": basis, "recommendations": own.get("recommendations") or [], "primary": primary,
            "straggler": False}
