"""What the breakdown counts: the interval sets (ps) of each category on one host.

Device activity comes from the device planes (:mod:`.devices`); host activity from the host
plane (:mod:`.host`). Without recorded device activity the host ran the model math (or the
device trace is missing, which :mod:`.placement` tells apart): the training function's ops
on host threads then count as device compute, as on a CPU-only host.
"""
from __future__ import annotations

from typing import List, Optional

from ..trace import timeline
from . import breakdown
from .devices import Device
from .host import HostView
from .placement import Placement



def step_marker_ids(view: HostView):
    """Metadata ids of the step markers on the host plane (:meth:`.host.HostView.marker_ids`)."""
    return view.marker_ids()


def gather_activity(view: Optional[HostView], devices: List[Device], placement: Placement) -> breakdown.Activity:
    """The interval sets of every breakdown category (see :mod:`.breakdown` for their meaning)."""
    d_comp, d_h2d, d_d2h, d_coll = breakdown.gather_device_activity(devices)
    empty = timeline.empty()
    if view is None:
        return breakdown.Activity(d_coll, d_comp, d_h2d, d_d2h, empty, empty, empty)
    inp = view.get_next_intervals()
    model_exec = view.model_executor_intervals()
    train_thread = view.training_thread_intervals(step_marker_ids(view))
    host_coll = view.collective_op_intervals()
    if placement.device_events:
        return breakdown.Activity(collective=timeline.concat([d_coll, host_coll]), device_compute=d_comp,
                                  host_to_device=d_h2d, device_to_host=d_d2h, input=inp,
                                  kernel_launch=timeline.concat([model_exec, view.launch_intervals()]),
                                  host_compute=train_thread)
    eager_ops = view.eager_op_intervals()
    has_function = bool(view.training_function_runs())
    # Eager op dispatch counts as model math only in pure eager programs: inside a
    # tf.function call, EagerKernelExecute spans the whole call, waits included.
    cpu_model = model_exec if has_function else timeline.concat([model_exec, eager_ops])
    if placement.state == "untraced_pluggable":
        # While the training function runs (and is not blocked on input) the step waits
        # on the untraced device: that is the device's compute time, inferred.
        cpu_model = timeline.concat([cpu_model, timeline.difference(eager_ops, inp)])
    return breakdown.Activity(collective=host_coll, device_compute=cpu_model, host_to_device=empty,
                              device_to_host=empty, input=inp, kernel_launch=empty,
                              host_compute=timeline.concat([train_thread, model_exec]))


def runs_eagerly(view: Optional[HostView], placement: Placement) -> bool:
    """The model runs op by op from Python (eager ops on the training thread, no training
    tf.function) on a host without recorded device activity."""
    if view is None or placement.device_events:
        return False
    return bool(len(view.eager_op_intervals()[0])) and not view.training_function_runs()
