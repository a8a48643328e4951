"""The breakdown's thresholds: the share of the step (%) from which each category limits it.

The verdict rules (:mod:`.rules`, :mod:`.input_rules`) compare the step breakdown
(:mod:`.breakdown`) with these levels; each level gives its source.
"""
from __future__ import annotations

#: Input share (%) above which a step is input-bound. XProf uses the same two levels,
#: "HIGHLY input-bound" above 20 % and "MODERATELY" above 5 %
#: (xprof: convert/op_stats_to_input_pipeline_analysis.cc, kHighlyInfeedBoundThresholdInPercent
#: and kModeratelyInfeedBoundThresholdInPercent).
INPUT_BOUND_PCT = 20.0
INPUT_MODERATE_PCT = 5.0
#: Collective share (%) above which a step is network-bound: the same 20 % rule applied
#: to time the devices spend in collectives (our choice, by analogy with the input rule).
COLLECTIVE_BOUND_PCT = 20.0
#: Kernel-launch share (%) above which a GPU step is launch-bound (same 20 % rule).
KERNEL_LAUNCH_BOUND_PCT = 20.0
#: Host-overhead share (%) above which Python/framework overhead limits the step
#: (our choice: a third of the step with neither device nor input active).
HOST_OVERHEAD_PCT = 30.0
#: Transfer share (%) above which host<->device copies limit the step (same 20 % rule).
TRANSFER_BOUND_PCT = 20.0
#: Unrecorded share (%) above which the trace cannot support any verdict.
UNRECORDED_PCT = 50.0
#: Device-compute share (%) from which the confidence of a device-bound verdict rises.
DEVICE_BOUND_PCT = 50.0
