"""The machine seen from outside the trace, with no TensorFlow: ``sampler`` (what the machine,
the training process tree and the GPUs do, sampled with psutil and NVML), ``triage`` (the
flowchart's first diagnosis from those samples) and ``run`` (the sampler running for a whole
run, its samples rolled into triaged intervals: the system record). Used by the callback
(``capture/``) and by ``tfbneck watch``."""
