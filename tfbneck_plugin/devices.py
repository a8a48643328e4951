"""Accelerator planes: what each GPU/TPU did, as intervals (ps).

Device planes are named ``/device:GPU:N`` / ``/device:TPU:N`` (tsl/profiler/utils/
xplane_schema.h: kGpuPlanePrefix, kTpuPlanePrefix). On GPUs the recorded activity is on
the stream lines (``Stream #N(...)``, one per CUDA/HIP stream, written by CUPTI or
roctracer); the profiler also derives lines from them (``TensorFlow Ops``, ``TensorFlow
Name Scope``, ``XLA Ops``, ``XLA Modules``, ``Steps``, ``Source``) which repeat the same
time and are not counted again. TPU planes have no stream lines; their ``XLA Ops`` line is
the activity.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from . import timeline
from .xspace import Plane, Space

#: Lines derived from the streams (xprof: utils/xplane_schema.h kXlaOpLineName and
#: friends; derived_timeline.cc). Never counted as activity on GPUs.
DERIVED_LINES = {"TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules", "Steps",
                 "Source", "XLA TraceMe", "Async XLA Ops", "TC Overlay", "_counters_",
                 "Framework Ops", "Framework Name Scope", "SparseCore", "Launch Stats"}
_H2D = re.compile(r"MemcpyH2D|HtoD|memcpy.*h2d", re.I)
_D2H = re.compile(r"MemcpyD2H|DtoH|memcpy.*d2h", re.I)
#: Collective kernels: NCCL/RCCL (ncclKernel*, ncclDevKernel*), XLA collectives
#: (all-reduce, all-gather, reduce-scatter, collective-permute, all-to-all).
COLLECTIVE_RE = re.compile(r"nccl|rccl|all-?reduce|all-?gather|reduce-?scatter|"
                           r"collective-?permute|all-?to-?all|allreduce|CollectiveReduce", re.I)


@dataclass
class Device:
    """One accelerator: its busy intervals by kind (ps), and kernel statistics."""
    name: str
    kind: str            # "GPU" | "TPU"
    vendor: str
    compute: timeline.Intervals
    h2d: timeline.Intervals
    d2h: timeline.Intervals
    collective: timeline.Intervals
    kernel_durations_ps: np.ndarray
    n_events: int

    @property
    def busy(self) -> timeline.Intervals:
        return timeline.union(*timeline.concat([self.compute, self.h2d, self.d2h, self.collective]))


def device_kind(plane_name: str) -> Optional[str]:
    if plane_name.startswith("/device:GPU:"):
        return "GPU"
    if plane_name.startswith("/device:TPU:"):
        return "TPU"
    return None


def _activity_lines(plane: Plane, kind: str):
    streams = [l for l in plane.lines if l.name not in DERIVED_LINES]
    if kind == "TPU" or not streams:
        # TPU: the XLA Ops line is the op-level activity (Tensor Core lines are bundles).
        ops = [l for l in plane.lines if l.name == "XLA Ops"]
        if ops:
            return ops
        return [l for l in plane.lines if l.name not in DERIVED_LINES or l.name == "Tensor Core"]
    return streams


def read_devices(space: Space) -> List[Device]:
    devices = []
    for plane in space.planes:
        kind = device_kind(plane.name)
        if kind is None:
            continue
        vendor = str(plane.plane_stats().get("device_vendor", "")) or ("Google" if kind == "TPU" else "")
        comp, h2d, d2h, coll, kdur = [], [], [], [], []
        n = 0
        for line in _activity_lines(plane, kind):
            if len(line) == 0:
                continue
            n += len(line)
            names = plane.event_names
            uniq = np.unique(line.name_id)
            cls = {}
            for mid in uniq:
                nm = names.get(int(mid), "")
                cls[int(mid)] = ("h2d" if _H2D.search(nm) else "d2h" if _D2H.search(nm)
                                 else "coll" if COLLECTIVE_RE.search(nm) else "comp")
            kinds = np.array([cls[int(m)] for m in line.name_id]) if len(uniq) > 1 else \
                np.full(len(line), cls[int(uniq[0])])
            s, e = line.start_ps, line.start_ps + line.dur_ps
            for label, bucket in (("h2d", h2d), ("d2h", d2h), ("coll", coll), ("comp", comp)):
                m = kinds == label
                if m.any():
                    bucket.append((s[m], e[m]))
            kdur.append(line.dur_ps[kinds == "comp"])
        devices.append(Device(
            name=plane.name, kind=kind, vendor=vendor,
            compute=timeline.union(*timeline.concat(comp)), h2d=timeline.union(*timeline.concat(h2d)),
            d2h=timeline.union(*timeline.concat(d2h)), collective=timeline.union(*timeline.concat(coll)),
            kernel_durations_ps=np.concatenate(kdur) if kdur else np.zeros(0, dtype=np.int64), n_events=n))
    return devices


def summarize(devices: List[Device], window: Optional[tuple]) -> List[Dict]:
    """Per-device summary for the report: busy share of the window (%), kernel count, median kernel (us)."""
    out = []
    for d in devices:
        span = (window[1] - window[0]) if window else 0
        busy = timeline.total(d.busy) if span else 0
        out.append({
            "device": d.name, "kind": d.kind, "vendor": d.vendor, "events": d.n_events,
            "busy_pct": round(100.0 * busy / span, 2) if span else 0.0,
            "kernels": int(len(d.kernel_durations_ps)),
            "median_kernel_us": round(float(np.median(d.kernel_durations_ps)) / 1e6, 3) if len(d.kernel_durations_ps) else None,
        })
    return out
