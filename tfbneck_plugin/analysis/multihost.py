"""Sessions with several hosts: the slowest host sets the step time, each host's own
verdict goes to ``per_host``, and hosts slower than the others are named as stragglers."""
from __future__ import annotations

from typing import Dict, List

import numpy as np

#: Modified z-score above which a host's step time is an outlier (Iglewicz & Hoaglin,
#: "How to Detect and Handle Outliers", 1993: 0.6745 (x - median) / MAD > 3.5).
STRAGGLER_Z = 3.5
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


def straggler_evidence(hosts: List[Dict]) -> List[str]:
    times = np.array([mean_step_ms(h) for h in hosts])
    if len(times) < 2 or times.max() <= 0:
        return []
    med = float(np.median(times))
    mad = float(np.median(np.abs(times - med))) or 1e-9
    out = []
    for h, t in zip(hosts, times):
        z = 0.6745 * (t - med) / mad
        if z > STRAGGLER_Z or (len(times) == 2 and t > STRAGGLER_RATIO_OF_TWO * min(times)):
            out.append(f"Host {h['host']} is a straggler: {t:.1f} ms per step against a median of {med:.1f} ms.")
    return out
