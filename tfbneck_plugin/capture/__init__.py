"""The capture side: what runs inside the training process, and the only subpackage that
imports TensorFlow (``callback``, ``window``; ``background`` only to write the TensorBoard summaries).
``tracker`` (step counting) and ``schedule`` need no TensorFlow; the system sampler it runs
beside the trace is :mod:`tfbneck_plugin.system`."""
