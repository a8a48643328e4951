"""Where the model's ops ran, from what the trace shows: the device planes and their
events, the allocators that held the tensors, copies to a device and kernel launches on the
host, and how long TensorFlow ops ran on host threads.

These facts separate four situations that all show "no device activity" (the verdict rules
in :mod:`.rules` read ``Placement.state``):

* ``traced``: device planes hold events (the normal GPU/TPU trace).
* ``untraced_pluggable``: a PluggableDevice (e.g. tensorflow-metal on Apple GPUs) ran the
  ops; such devices leave no plane, but allocate host memory through
  ``pluggable_device_host_bfc`` (tensorflow/core/common_runtime/pluggable_device/
  pluggable_device_process_state.cc).
* ``trace_missing``: a CUDA/ROCm GPU ran the model but the device tracer recorded nothing
  (CUPTI missing or not permitted): tensors were allocated by the GPU's BFC allocator
  ``GPU_<n>_bfc`` (tensorflow/core/common_runtime/gpu/gpu_process_state.cc), or the host
  launched kernels, yet the device planes are empty or absent.
* ``model_on_cpu``: a GPU plane exists but is empty, no tensor lived on the GPU, and the
  model's ops ran as long kernels on host threads.
* ``host_only``: no accelerator anywhere: the CPU is the device.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..trace import timeline
from .devices import Device
from .host import GET_NEXT_OPS, LAUNCH_API_RE, HostView, is_op_name, op_type

#: Allocator of a GPU's own memory: ``GPU_<id>_bfc`` (gpu_process_state.cc, GetGPUAllocator).
DEVICE_ALLOCATOR_RE = re.compile(r"^GPU_\d+_bfc$")
#: Host allocator of PluggableDevices (pluggable_device_process_state.cc).
PLUGGABLE_HOST_ALLOCATOR = "pluggable_device_host_bfc"
#: Host-side records of copies to or from a GPU: the executor's ``_Send``/``_Recv`` TraceMe
#: names the devices (core/common_runtime/rendezvous_mgr.cc), ``MemcpyH2D``/``MemcpyD2H``
#: annotations (core/common_runtime/gpu/gpu_util.cc).
DEVICE_COPY_RE = re.compile(r"^(_Send|_Recv)\b.*device:GPU|^Memcpy(H2D|D2H)$")
#: Allocation TraceMe (core/framework/tracking_allocator / bfc_allocator.cc) and its stat.
ALLOCATION_EVENT = "MemoryAllocation"


@dataclass
class Placement:
    """Facts on where the model ran (times in ps, counts of events)."""
    device_kind: Optional[str]            # kind of the device planes ("GPU"/"TPU"), None without any
    device_planes: int
    device_events: int
    allocations: Dict[str, int] = field(default_factory=dict)   # allocator name -> allocations
    device_copies: int = 0                # host-side records of copies to/from a GPU
    launch_calls: int = 0                 # cudaLaunchKernel / hipLaunchKernel... on host threads
    nccl_calls: int = 0                   # NCCL collectives on host threads (PyTorch's ``nccl:`` annotations)
    host_op_ps: int = 0                   # TF ops executed on host threads (union per thread)
    host_op_median_us: Optional[float] = None

    @property
    def device_allocators(self) -> List[str]:
        """Names of the GPU allocators (``GPU_<n>_bfc``) that allocated tensors."""
        return sorted(n for n in self.allocations if DEVICE_ALLOCATOR_RE.match(n))

    @property
    def pluggable(self) -> bool:
        """Tensors went through a PluggableDevice's host allocator."""
        return PLUGGABLE_HOST_ALLOCATOR in self.allocations

    @property
    def gpu_used(self) -> bool:
        """The trace shows the GPU held tensors or received kernels."""
        return bool(self.device_allocators) or self.launch_calls > 0 or self.nccl_calls > 0

    @property
    def device_allocations(self) -> int:
        """Allocations made by the GPU allocators."""
        return sum(self.allocations[n] for n in self.device_allocators)

    @property
    def state(self) -> str:
        """``traced``, ``untraced_pluggable``, ``trace_missing``, ``model_on_cpu`` or ``host_only``."""
        if self.device_events:
            return "traced"
        if self.pluggable and not self.device_planes:
            return "untraced_pluggable"
        if self.gpu_used:
            return "trace_missing"
        if self.device_planes:
            return "model_on_cpu" if self.host_op_ps else "trace_missing"
        return "host_only"


def find_placement(view: Optional[HostView], devices: List[Device]) -> Placement:
    """Collects the placement facts of one host (``view`` may be None: no host plane)."""
    out = Placement(device_kind=devices[0].kind if devices else None, device_planes=len(devices),
                    device_events=sum(d.n_events for d in devices))
    if view is None:
        return out
    out.allocations = _allocations(view)
    copies = view.ids(("device-copies",), lambda n: bool(DEVICE_COPY_RE.search(n)))
    out.device_copies = sum(len(idx) for _li, idx in view.select(copies))
    launches = view.ids(("launch",), lambda n: bool(LAUNCH_API_RE.match(n)))
    out.launch_calls = sum(len(idx) for _li, idx in view.select(launches))
    ops = view.ids(("host-model-ops",), lambda n: is_op_name(n) and op_type(n) not in GET_NEXT_OPS)
    sel = view.select(ops, view.non_data_lines)
    if sel:
        out.host_op_ps = sum(timeline.total(view.intervals([s])) for s in sel)
        durations = np.concatenate([view.plane.lines[li].dur_ps[idx] for li, idx in sel])
        out.host_op_median_us = round(float(np.median(durations)) / 1e6, 3)
    return out


def _allocations(view: HostView) -> Dict[str, int]:
    """Allocator name -> number of allocation events (the ``allocator_name`` stat)."""
    counts: Dict[str, int] = {}
    for li, idx in view.select(view.ids_named([ALLOCATION_EVENT])):
        for name in view.stat_column(li, idx, "allocator_name"):
            if isinstance(name, str):
                counts[name] = counts.get(name, 0) + 1
    return counts
