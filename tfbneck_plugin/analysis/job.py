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
4. The job's verdict: ordered rules (:data:`JOB_RULES`, the shape of the host rules of
   :mod:`.rules`) over one :class:`JobFindings` value. A worker that keeps the others waiting
   for at least :data:`STRAGGLER_WAIT_PCT` of the step, and :data:`DOMINANCE` times longer
   than any other worker does, stands out. When the others wait for it at least as long as
   the collectives' own cost, it is the straggler and its own limit is the job's (``cpu /
   input_preprocessing on worker 1``...). Otherwise, when the collectives' own cost is at
   least the collective rule's 20 %, ``network / gradient_sync`` (a worker that stands out
   is named as a second link). Otherwise the worker that stands out is the straggler; and
   when none does, the workers are limited by what each does itself: the slowest worker's
   own limit.

The job rules read the workers' ``sync`` sections through the report's types
(:class:`tfbneck_plugin.schema.SyncSection`): the workers of a job are often separate
sessions, analysed apart (and by the plugin, cached apart).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np

from .. import schema
from ..trace import timeline
from . import sync as syncmod
from .evidence import with_basis
from .thresholds import COLLECTIVE_BOUND_PCT
from .verdict import Verdict, confidence, evidence_details, first_verdict, verdict_fields

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
    report: schema.SessionDict

    @property
    def sync(self) -> Optional[schema.SyncSection]:
        return self.report.get("sync")

    @property
    def step_ms(self) -> float:
        return schema.step_time_ms(self.report) or 0.0


@dataclass
class Lateness:
    """The matched steps, as arrays of shape (n_workers, n_steps) in ms."""
    numbers: List[int]
    collective: np.ndarray
    duration: np.ndarray
    own: List[List[Dict[str, float]]]            # [worker][step] own_ms
    last: List[Optional[int]] = field(default_factory=list)   # per step: worker index or None
    wait: np.ndarray = field(default_factory=lambda: np.zeros(0))   # per step: mean wait of the others for the last (ms)

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
    by_worker = [syncmod.steps_by_number(_sync(w)) for w in workers]
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
    theirs = {c: timeline.median([o[c] for o in others]) for c in syncmod.OWN_CATEGORIES}
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


@dataclass
class JobFindings:
    """Every fact about a job that the job rules read, in one value (percentages, 0-100, are
    of the workers' median step time summed over the matched steps)."""
    workers: List[Worker]
    lat: Lateness
    late_pct: List[float]          # per worker: how long the others waited for it
    last_in: List[int]             # per worker: matched steps it arrived last in
    network_pct: float             # the collectives' own cost

    @property
    def suspect(self) -> int:
        """The worker the others waited for longest."""
        return int(np.argmax(self.late_pct))

    @property
    def stands_out(self) -> bool:
        """The suspect keeps the others waiting at least :data:`STRAGGLER_WAIT_PCT` of the step,
        and :data:`DOMINANCE` times longer than any other worker does."""
        s = self.suspect
        runner_up = max([p for i, p in enumerate(self.late_pct) if i != s], default=0.0)
        return self.late_pct[s] >= STRAGGLER_WAIT_PCT and self.late_pct[s] >= DOMINANCE * runner_up

    @property
    def slowest(self) -> int:
        """The worker with the longest mean step."""
        return int(np.argmax([w.step_ms for w in self.workers]))


def job_findings(workers: List[Worker]) -> Optional[JobFindings]:
    """The job's findings, or None when the workers' steps cannot be matched (:func:`match_steps`)."""
    lat = match_steps(workers)
    if lat is None:
        return None
    total = float(lat.step.sum())
    late_pct = [100.0 * float(sum(lat.wait[k] for k, j in enumerate(lat.last) if j == i)) / total
                for i in range(len(workers))]
    return JobFindings(workers=workers, lat=lat, late_pct=late_pct,
                       last_in=[sum(1 for j in lat.last if j == i) for i in range(len(workers))],
                       network_pct=100.0 * float(lat.network.sum()) / total)


@dataclass
class JobVerdict(Verdict):
    """A job's verdict: the host verdict's fields, the worker whose report stands for the
    job (``primary``) and the straggler's index (None when no worker is one)."""
    primary: int = 0
    straggler: Optional[int] = None


JobRule = Callable[[JobFindings], Optional[JobVerdict]]


def straggler_before_network(jf: JobFindings) -> Optional[JobVerdict]:
    """A worker stands out and the others wait for it at least as long as the collectives'
    own cost: it is the straggler, and its own limit is the job's."""
    if jf.stands_out and jf.late_pct[jf.suspect] >= jf.network_pct:
        return _straggler_verdict(jf)
    return None


def gradient_sync(jf: JobFindings) -> Optional[JobVerdict]:
    """The collectives' own cost is at least :data:`.rules.COLLECTIVE_BOUND_PCT` of the step:
    ``network / gradient_sync`` (a worker that stands out is named as a second link)."""
    if jf.network_pct >= COLLECTIVE_BOUND_PCT:
        return _network_verdict(jf, jf.suspect if jf.stands_out else None)
    return None


def straggler(jf: JobFindings) -> Optional[JobVerdict]:
    """A worker stands out (and the collectives are cheap): it is the straggler."""
    return _straggler_verdict(jf) if jf.stands_out else None


def own_limit(jf: JobFindings) -> JobVerdict:
    """No worker stands out and the collectives are cheap: the slowest worker's own limit."""
    return _own_limit_verdict(jf)


#: The job rules, tried in order (:func:`.verdict.first_verdict`); the last always applies.
JOB_RULES: List[JobRule] = [straggler_before_network, gradient_sync, straggler, own_limit]
#: ``job.root_cause`` of a report whose verdict the job rules gave.
ROOT_CAUSE = "lateness_at_collectives"


@dataclass
class JobDiagnosis:
    """The job's verdict, its ``job`` report section (straggler, lateness_pct, network_pct,
    matched_steps, steps, thresholds) and one part of ``per_host`` per worker
    (kept_others_waiting_pct, last_in_steps, matched_steps, collective_ms, own_limit,
    straggler)."""
    verdict: JobVerdict
    section: Dict[str, object]
    per_worker: List[schema.PerHostRow]

    @property
    def primary(self) -> int:
        return self.verdict.primary


def diagnose(workers: List[Worker]) -> Optional[JobDiagnosis]:
    """The job's diagnosis from its workers' reports (the first of :data:`JOB_RULES` that
    applies), or None when their steps cannot be matched (then each worker's own report
    stands). Percentages (0-100) are of the workers' median step time summed over the
    matched steps; times in ms.
    """
    jf = job_findings(workers)
    if jf is None:
        return None
    v = first_verdict(JOB_RULES, jf)
    lat, late_pct = jf.lat, jf.late_pct
    name = workers[v.straggler].name if v.straggler is not None else None
    section: Dict[str, object] = {"straggler": name, "lateness_pct": round(late_pct[jf.suspect], 2),
               "network_pct": round(jf.network_pct, 2), "matched_steps": lat.numbers,
               "steps": step_rows(workers, lat),
               "thresholds": {"straggler_wait_pct": STRAGGLER_WAIT_PCT, "network_pct": COLLECTIVE_BOUND_PCT}}
    per_worker: List[schema.PerHostRow] = [{"kept_others_waiting_pct": round(late_pct[i], 2), "last_in_steps": jf.last_in[i],
                   "matched_steps": len(lat.numbers), "collective_ms": round(float(lat.collective[i].mean()), 3),
                   "own_limit": _own_limit(w), "straggler": i == v.straggler}
                  for i, w in enumerate(workers)]
    return JobDiagnosis(verdict=v, section=section, per_worker=per_worker)


def merge_diagnosis(report: schema.SessionDict, d: JobDiagnosis, rows: List[schema.PerHostRow],
                    lead: Optional[str] = None) -> None:
    """Put a job's diagnosis into a report (modified in place): the verdict's fields
    (:func:`.verdict.verdict_fields`, after the sentence ``lead`` when given) and each
    worker's part in ``rows`` (its ``per_host`` rows, in the workers' order). The callers
    place ``d.section`` in the report's ``job`` with their own grouping facts."""
    fields = verdict_fields(d.verdict)
    if lead is not None:
        fields["evidence"] = [lead] + fields["evidence"]
        fields["evidence_detail"] = evidence_details([lead]) + fields["evidence_detail"]
    report.update(fields)
    for row, part in zip(rows, d.per_worker):
        row.update(part)


def _sync(w: Worker) -> schema.SyncSection:
    """The worker's ``sync`` section: the job rules run only when every worker has one."""
    assert w.sync is not None
    return w.sync


def _own_limit(w: Worker) -> Optional[Dict]:
    own = (w.sync or {}).get("own")
    if not own:
        return None
    return {k: own[k] for k in ("bottleneck", "cause", "confidence", "pct", "own_ms", "step_ms")}


def _prose(name: str, start: bool = False) -> str:
    """``worker:1`` -> ``worker 1`` (a task in a sentence; ``Worker 1`` to start one)."""
    text = name.replace(":", " ") if ":" in name else name
    return text[:1].upper() + text[1:] if start else text


def _own_evidence(w: Worker) -> List[str]:
    """The worker's own verdict's evidence, each sentence of its recorded basis."""
    return [with_basis(d["text"], d["basis"]) for d in _sync(w)["own"].get("evidence_detail") or []]


def _straggler_verdict(jf: JobFindings) -> JobVerdict:
    s = jf.suspect
    lat, w = jf.lat, jf.workers[s]
    own = _sync(w)["own"]
    name, n = _prose(w.name), len(lat.numbers)
    mine = [k for k, j in enumerate(lat.last) if j == s]
    evidence = [f"{own['bottleneck']} / {own['cause']} on {name}; the other workers wait for it in all-reduce for "
                f"{jf.late_pct[s]:.1f}% of the step (straggler from {STRAGGLER_WAIT_PCT:.0f}%).",
                f"Steps matched by step number across {len(jf.workers)} workers: {n} (steps {lat.numbers[0]}-"
                f"{lat.numbers[-1]}). {_prose(w.name, True)} arrived last at the collectives in {len(mine)} of them; "
                f"there the others waited {float(lat.wait[mine].mean()):.1f} ms for it, in steps of "
                f"{float(lat.step[mine].mean()):.1f} ms "
                f"(a worker's collective time less the last worker's: no clock is compared)."]
    reasons = late_reasons(lat, s, mine)
    if reasons:
        evidence.append(f"In those steps {name} spent " + "; ".join(
            f"{m:.1f} ms per step {WHY[c]} (the other workers: {t:.1f} ms)" for c, m, t in reasons) + ".")
    evidence.append(f"The collectives' own cost (the time the last worker to arrive still spends in them) is "
                    f"{jf.network_pct:.1f}% of the step.")
    evidence.extend(_own_evidence(w))
    conf = own["confidence"] - (SCATTERED_PENALTY if len(mine) < CONSISTENT_FRACTION * n else 0.0)
    recs: List[schema.Recommendation] = [{**r, "worker": w.name} for r in own.get("recommendations") or []]
    return JobVerdict(bottleneck=own["bottleneck"], cause=own["cause"], confidence=round(max(conf, 0.05), 2),
                      evidence=evidence, recommendations=recs, primary=s, straggler=s)


def _nobody(jf: JobFindings) -> str:
    """Why no worker is the straggler, in a clause."""
    return (f"the most any worker kept the others waiting is {max(jf.late_pct):.1f}% of the step; a straggler "
            f"keeps them waiting {STRAGGLER_WAIT_PCT:.0f}% or more and {DOMINANCE:.0f} times longer than any other "
            f"worker does")


def _network_verdict(jf: JobFindings, late: Optional[int] = None) -> JobVerdict:
    """``late``: a worker that keeps the others waiting, but less than the all-reduce itself."""
    lat, workers = jf.lat, jf.workers
    each = ", ".join(f"{_prose(w.name)} {float(lat.collective[i].mean()):.1f} ms"
                     for i, w in enumerate(workers))
    together = sum(1 for j in lat.last if j is None)
    who = f"not a late worker ({_nobody(jf)}; " if late is None else "more than any late worker ("
    evidence = [f"Every worker spends at least {jf.network_pct:.1f}% of the step in collectives, the last to "
                f"arrive included: the all-reduce itself takes the time, {who}network-bound from "
                f"{COLLECTIVE_BOUND_PCT:.0f}%).",
                f"Collective time per step: {each}; the workers arrived together in {together} of {len(lat.numbers)} "
                f"matched steps."]
    if late is not None:
        mine = [k for k, j in enumerate(lat.last) if j == late]
        why = why_late(lat, late, mine)
        evidence.append(f"{_prose(workers[late].name, True)} also keeps the others waiting, {jf.late_pct[late]:.1f}% "
                        f"of the step (last in {len(mine)} of {len(lat.numbers)} steps"
                        + (f", {WHY[why[0]]} {why[1] - why[2]:.1f} ms longer than the others" if why else "")
                        + "): less than the all-reduce's own cost, a second link after it.")
    primary = jf.slowest
    recs = _sync(workers[primary]).get("network_recommendations") or []
    return JobVerdict(bottleneck="network", cause="gradient_sync",
                      confidence=confidence(jf.network_pct, COLLECTIVE_BOUND_PCT), evidence=evidence,
                      recommendations=recs, primary=primary, straggler=None)


def _own_limit_verdict(jf: JobFindings) -> JobVerdict:
    primary = jf.slowest
    w = jf.workers[primary]
    own = _sync(w)["own"]
    evidence = [f"No worker stands out as the one the others wait for ({_nobody(jf)}) and the collectives' own "
                f"cost is {jf.network_pct:.1f}% of the step (network-bound from {COLLECTIVE_BOUND_PCT:.0f}%): "
                f"each worker is limited by its own work. "
                f"{_prose(w.name, True)}, the slowest, is limited by {own['bottleneck']} / {own['cause']}."]
    evidence.extend(_own_evidence(w))
    return JobVerdict(bottleneck=own["bottleneck"], cause=own["cause"], confidence=own["confidence"],
                      evidence=evidence, recommendations=own.get("recommendations") or [], primary=primary,
                      straggler=None)
