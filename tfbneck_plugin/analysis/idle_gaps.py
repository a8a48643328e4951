"""The longest idle gaps of the devices, and what the host did during each: how much of
the gap the training step waited for input, which event held the training thread, how
busy the busiest tf.data thread was. Facts only (shares in %, times in ms)."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ..trace import timeline
from .activity import step_marker_ids
from .findings import GapFact
from .host import HostView

#: How many of the longest device gaps the evidence describes.
GAPS_DESCRIBED = 2
_INT64_MAX = 2 ** 63 - 1


def longest_gaps(view: Optional[HostView], devices: List[Dict], inp: timeline.Intervals,
                 origin_ps: int) -> List[GapFact]:
    """The ``GAPS_DESCRIBED`` longest idle gaps over the devices that computed.

    Args:
      devices: rows of :func:`.devices.summarize` (``longest_gaps``: start ps, duration ms).
      inp: the intervals the step waited for input (ps).
      origin_ps: start of the host window; gap starts are reported from it.
    """
    active = [d for d in devices if d["kernels"]]  # devices that computed (copies alone do not count)
    gaps = sorted(((g["duration_ms"], g["start_ps"], d["device"]) for d in active for g in d.get("longest_gaps", [])),
                  reverse=True)[:GAPS_DESCRIBED]
    out = []
    for dur_ms, start_ps, dev in gaps:
        if dur_ms <= 0:
            continue
        end_ps = min(start_ps + int(dur_ms * 1e9), _INT64_MAX)  # ms rounding must not leave int64
        out.append(_host_during(view, inp, dev, start_ps, end_ps, dur_ms, round(float(start_ps - origin_ps) / 1e9, 3)))
    return out


def _host_during(view, inp, device: str, start_ps: int, end_ps: int, dur_ms: float, start_ms: float) -> GapFact:
    fact = GapFact(device=device, start_ms=start_ms, duration_ms=dur_ms, input_wait_pct=0.0,
                   training_event=None, training_event_pct=0.0, tfdata_busy_pct=None)
    if view is None:
        fact.host_missing = True
        return fact
    span = max(end_ps - start_ps, 1)
    w = (np.array([start_ps]), np.array([end_ps]))
    fact.input_wait_pct = 100.0 * int(timeline.overlap_per_window(inp, *w)[0]) / span
    if view.training_line is not None:
        line = view.plane.lines[view.training_line]
        s, e = line.start_ps, line.start_ps + line.dur_ps
        inside = np.minimum(e, end_ps) - np.maximum(s, start_ps)
        inside[line.mask(step_marker_ids(view))] = 0
        if len(inside) and inside.max() > 0:
            k = int(np.argmax(inside))
            fact.training_event = view.plane.event_names.get(int(line.name_id[k]), "?")
            fact.training_event_pct = 100.0 * inside[k] / span
    if view.tfdata_lines:
        busy = 0
        for li in view.tfdata_lines:
            line = view.plane.lines[li]
            busy = max(busy, int(timeline.overlap_per_window((line.start_ps, line.start_ps + line.dur_ps), *w)[0]))
        fact.tfdata_busy_pct = 100.0 * busy / span
    return fact
