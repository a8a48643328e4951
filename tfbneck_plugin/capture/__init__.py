"""The capture side: what runs inside the training process, and the only subpackage that
imports TensorFlow (``callback``, ``window``, ``arguments``; ``summaries`` only when it writes
the TensorBoard summaries). ``callback`` is a thin Keras adapter over collaborators that need no
TensorFlow: ``tracker`` (step counting), ``schedule``, ``controller`` (the windows),
``longjob``, ``trend``, ``background``, ``system_view``, ``loopstep``, ``interrupts``,
``safety``; the system sampler it runs beside the trace is :mod:`tfbneck_plugin.system`."""
