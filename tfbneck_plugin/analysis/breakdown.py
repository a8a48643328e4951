"""Step-time breakdown: each instant of each step goes to exactly one category.

Categories (the report contract's ``breakdown_pct`` keys), and what covers an instant:

``collective``      a collective kernel (NCCL/RCCL, XLA all-reduce...) on any device.
``device_compute``  a kernel on any accelerator; on a host without accelerator activity,
                    the training function's ops executing on host threads (the CPU is the
                    device there), minus the time those threads block in IteratorGetNext.
``host_to_device``  an H2D copy on any device.   ``device_to_host``  a D2H copy.
``input``           the step blocked in ``IteratorGetNext`` (waiting for tf.data). Counted
                    only where none of the above runs: input wait hidden behind compute
                    costs nothing.
``kernel_launch``   accelerator hosts only: the host dispatching the training function's
                    ops (executor activity, launch API calls) while the device is idle.
``host_compute``    any other activity of the training thread or the model's executor
                    (Python, Keras, eager dispatch, framework overhead).
``idle``            none of the above was recorded.

Priority is the order above (first wins). It follows the step-time decomposition of
XProf's input-pipeline analysis (xprof: convert/op_stats_to_input_pipeline_analysis.cc,
``GenericStepTimeBreakdown``), which also counts input only when the device waits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import numpy as np

from ..trace import timeline
from .devices import Device

CATEGORIES = ["collective", "device_compute", "host_to_device", "device_to_host", "input",
              "kernel_launch", "host_compute", "idle"]


@dataclass
class Activity:
    """Everything the breakdown needs, as interval sets (ps)."""
    collective: timeline.Intervals
    device_compute: timeline.Intervals
    host_to_device: timeline.Intervals
    device_to_host: timeline.Intervals
    input: timeline.Intervals
    kernel_launch: timeline.Intervals
    host_compute: timeline.Intervals

    def as_dict(self) -> Dict[str, timeline.Intervals]:
        """Category -> interval set, for every category but ``idle``."""
        return {c: getattr(self, c) for c in CATEGORIES if c != "idle"}


def gather_device_activity(devices: List[Device]):
    """Union over the devices of their compute, H2D, D2H and collective intervals (ps)."""
    def cat(attr):
        return timeline.union(*timeline.concat([getattr(d, attr) for d in devices]))
    return cat("compute"), cat("h2d"), cat("d2h"), cat("collective")


def per_step(activity: Activity, starts: np.ndarray, ends: np.ndarray) -> Dict[str, np.ndarray]:
    """ps per category per step; each step's values sum to its duration."""
    return timeline.partition(activity.as_dict(), CATEGORIES[:-1], starts, ends, rest="idle")


def percentages(parts: Dict[str, np.ndarray]) -> Dict[str, float]:
    """Share (%) of each category over all steps, rounded to 0.01; 0 everywhere for an empty window."""
    total = sum(int(v.sum()) for v in parts.values())
    if total <= 0:
        return {c: 0.0 for c in CATEGORIES}
    return {c: round(100.0 * int(parts[c].sum()) / total, 2) for c in CATEGORIES}
