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

from ..trace import timeline
from ..trace.xspace import Plane, Space

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
        """Union of compute, copies and collectives (ps)."""
        return timeline.union(*timeline.concat([self.compute, self.h2d, self.d2h, self.collective]))


def device_kind(plane_name: str) -> Optional[str]:
    """``GPU`` or ``TPU`` from a plane name (``/device:GPU:0``), None for other planes."""
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
    """Every GPU/TPU plane of the space as a :class:`Device` (empty planes included)."""
    devices = []
    for plane in space.planes:
        kind = device_kind(plane.name)
        if kind is None:
            continue
        vendor = str(plane.plane_stats().get("device_vendor", "")) or ("Google" if kind == "TPU" else "")
        comp: List = []
        h2d: List = []
        d2h: List = []
        coll: List = []
        kdur: List = []
        n = 0
        for line in _activity_lines(plane, kind):
            if len(line) == 0:
                continue
            n += len(line)
            names = plane.event_names
            uniq = timeline.distinct(line.name_id)
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


def summarize(devices: List[Device], starts: np.ndarray, ends: np.ndarray, top_gaps: int = 3) -> List[Dict]:
    """Per-device report over the analysed windows ``[starts[i], ends[i])`` (ps).

    For each device: busy share (%) of the windows (union of kernels and copies),
    compute / copy / collective shares (%), kernel count and median kernel duration (us),
    median idle gap between consecutive busy intervals (us), and the ``top_gaps`` longest
    idle gaps inside the windows (start relative to the first window, ms).
    """
    out = []
    span = int((ends - starts).sum()) if len(starts) else 0
    for d in devices:
        row = {"device": d.name, "kind": d.kind, "vendor": d.vendor, "events": d.n_events,
               "kernels": int(len(d.kernel_durations_ps)),
               "median_kernel_us": round(float(np.median(d.kernel_durations_ps)) / 1e6, 3)
               if len(d.kernel_durations_ps) else None}
        if span:
            def share(iv):
                return round(100.0 * int(timeline.overlap_per_window(iv, starts, ends).sum()) / span, 2)
            row.update(busy_pct=share(d.busy), compute_pct=share(d.compute), h2d_pct=share(d.h2d),
                       d2h_pct=share(d.d2h), collective_pct=share(d.collective))
            gaps = [timeline.gaps(d.busy, int(a), int(b)) for a, b in zip(starts, ends)] if d.n_events else []
            gs, ge = timeline.concat(gaps) if gaps else timeline.empty()
            busy_s, busy_e = d.busy
            inner = busy_s[1:] - busy_e[:-1]
            row["median_gap_us"] = round(float(np.median(inner)) / 1e6, 3) if len(inner) else None
            order = np.argsort(ge - gs)[::-1][:top_gaps]
            row["longest_gaps"] = [{"start_ps": int(gs[k]), "duration_ms": round(float(ge[k] - gs[k]) / 1e9, 3)}
                                   for k in order]
        else:
            row.update(busy_pct=0.0, compute_pct=0.0, h2d_pct=0.0, d2h_pct=0.0, collective_pct=0.0,
                       median_gap_us=None, longest_gaps=[])
        out.append(row)
    return out
