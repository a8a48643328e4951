"""Sessions with several hosts: the slowest host sets the step time, each host's own
verdict goes to ``per_host``, and hosts slower than the others are named as stragglers."""
from __future__ import annotations

from typing import Dict, List

import numpy as np

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


def mean_step_ms(host: Dict) -> float:
    """The host report's mean step time (ms), 0.0 without steps."""
    return ((host.get("steps") or {}).get("step_time_ms") or {}).get("mean") or 0.0


def slowest(hosts: List[Dict]) -> Dict:
    """Step time is set by the slowest host; its view is reported at the top level."""
    return max(hosts, key=mean_step_ms)


def per_host_rows(hosts: List[Dict]) -> List[Dict]:
    return [{"host": h["host"], "step_time_ms": (h["steps"]["step_time_ms"] or {}).get("mean"),
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
    med = float(np.median(t))
    mad = max(float(np.median(np.abs(t - med))), MIN_SPREAD_FRACTION * med)
    z = 0.6745 * (t - med) / mad
    return [int(i) for i in np.flatnonzero((z > STRAGGLER_Z) & (t >= MIN_LATENESS_RATIO * med))]


def straggler_evidence(hosts: List[Dict]) -> List[str]:
    times = [mean_step_ms(h) for h in hosts]
    med = float(np.median(times)) if times else 0.0
    return [f"Host {hosts[i]['host']} is a straggler: {times[i]:.1f} ms per step against a median of {med:.1f} ms."
            for i in stragglers(times)]
