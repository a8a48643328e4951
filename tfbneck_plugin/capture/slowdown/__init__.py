"""The slowdown trigger's state machine, pure Python (no TensorFlow): the thresholds a user
passes (:mod:`.thresholds`), the levels step times are read by (:mod:`.levels`), the
:class:`~.baseline.Baseline`, the :class:`~.stretch.Stretch`, the confirmation as ordered gates
(:mod:`.gates`), the CPU reads they use (:mod:`.cpu_reads`) and the
:class:`~.watch.SlowdownWatch` that runs them step by step. Fed by
:class:`~tfbneck_plugin.capture.steptime.StepTimer`. How it decides, how its defaults were
chosen and what it records: docs/slowdown_trigger.md."""
