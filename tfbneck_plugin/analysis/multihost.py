"""Sessions with several hosts: the slowest host sets the step time, each host's own
verdict goes to ``per_host``, and hosts slower than the others are named as stragglers."""
from __future__ import annotations

from typing import List

import numpy as np

from .. import schema
from ..trace import timeline

#: Modified z-score above which a host's step time is an outlier (Iglewicz & Hoaglin,
#: "How to Detect and Handle Outliers", 1993: 0.6745 (x - median) / MAD > 3.5).
STRAGGLER_Z = 3.5
#: Floor of the spread (MAD) as a fraction of the median step time. In synchronous
#: training most hosts have the same step time, so the MAD is often 0 and any host a hair
#: slower would score an infinite z (our choice: 5 %, about the run-to-run jitter of a step).
MIN_SPREAD_FRACTION = 0.05
#: A straggler is also at least this much slower than the median (our choice: 10 %): a
#: host 3 % slower is noise, whatever the spread of the others.
MIN_LATENESS_RATIO = 1.10
#: With two hosts there is no robust spread: the slower one straggles when it is 20 %
#: slower (our choice).
STRAGGLER_RATIO_OF_TWO = 1.2


def mean_step_ms(host: schema.SessionDict) -> float:
    """The host report's mean step time (ms), 0.0 without steps."""
    return schema.step_time_ms(host) or 0.0


def slowest(hosts: List[schema.HostReport]) -> schema.HostReport:
    """Step time is set by the slowest host; its view is reported at the top level."""
    return max(hosts, key=mean_step_ms)


def host_fields(host: schema.HostReport, with_sync: bool = True) -> schema.HostReport:
    """A copy of a host report less its ``host`` name (and its ``sync`` section unless
    ``with_sync``): the fields a session report takes from the host that stands for it."""
    out = host.copy()
    out.pop("host", None)
    if not with_sync:
        out.pop("sync", None)
    return out


def per_host_rows(hosts: List[schema.HostReport]) -> List[schema.PerHostRow]:
    """One ``per_host`` row per host: its step time (ms), breakdown (%) and verdict."""
    return [{"host": h["host"], "step_time_ms": schema.step_time_ms(h),
             "breakdown_pct": h["breakdown_pct"], "bottleneck": h["bottleneck"]} for h in hosts]


def stragglers(times_ms: List[float]) -> List[int]:
    """Indices of the hosts whose step time (ms) is an outlier above the others.

    Two hosts: the slower one when it is ``STRAGGLER_RATIO_OF_TWO`` times the faster.
    More: modified z-score > ``STRAGGLER_Z`` with the spread floored at
    ``MIN_SPREAD_FRACTION`` of the median, and at least ``MIN_LATENESS_RATIO`` x the median.
    """
    t = np.asarray(times_ms, dtype=np.float64)
    if len(t) < 2 or t.max() <= 0:
        return []
    if len(t) == 2:
        return [int(np.argmax(t))] if t.max() > STRAGGLER_RATIO_OF_TWO * t.min() else []
    med = timeline.median(t)
    mad = max(timeline.median(np.abs(t - med)), MIN_SPREAD_FRACTION * med)
    z = 0.6745 * (t - med) / mad
    return [int(i) for i in np.flatnonzero((z > STRAGGLER_Z) & (t >= MIN_LATENESS_RATIO * med))]


def straggler_evidence(hosts: List[schema.HostReport]) -> List[str]:
    """A sentence per straggler host (see :func:`stragglers`)."""
    times = [mean_step_ms(h) for h in hosts]
    med = timeline.median(times) if times else 0.0
    return [f"Host {hosts[i]['host']} is a straggler: {times[i]:.1f} ms per step against a median of {med:.1f} ms."
            for i in stragglers(times)]


def merge(report: schema.SessionDict, hosts: List[schema.HostReport]) -> None:
    """Several hosts in one session report: ``per_host`` rows, and the verdict across them.

    When every host's steps hold collectives (a synchronous job traced in one session),
    lateness at the collectives names the straggler and sets the verdict (:mod:`.job`): the
    report then takes that host's view, ``job`` holds the root cause, and each ``per_host``
    row its part in it. Otherwise the step-time rule (:func:`stragglers`) adds evidence.

    Args:
      report: the session report, filled from the slowest host (modified in place).
      hosts: the host reports (each with ``host``, and ``sync`` when its steps held collectives).
    """
    from . import job  # job reads this module's thresholds' neighbours; imported here to keep one direction
    report["per_host"] = per_host_rows(hosts)
    report.pop("sync", None)  # one host's: the job section below speaks for all of them
    names = [(h.get("sync") or {}).get("task") or h["host"] for h in hosts]
    if len(set(names)) != len(names):
        names = [h["host"] for h in hosts]
    d = job.diagnose([job.Worker(n, h) for n, h in zip(names, hosts)])
    if d is None:
        report["evidence"] = list(report["evidence"]) + straggler_evidence(hosts)
        return
    primary = d.primary
    report.update(host_fields(hosts[primary], with_sync=False))
    job.merge_diagnosis(report, d, report["per_host"])
    report["job"] = dict(d.section, grouped_by="one_session", root_cause=job.ROOT_CAUSE, workers=names)
    for row, name in zip(report["per_host"], names):
        row["task"] = name
    link = report.get("trace_viewer")
    if isinstance(link, dict):
        link["host"] = hosts[primary]["host"]
