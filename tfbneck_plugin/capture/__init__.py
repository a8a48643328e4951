"""The capture side: what runs inside the training process, and the only subpackage that
imports a framework: Keras and the one its backend runs on (``callback`` and ``arguments`` at
import; ``engines`` each backend's profiler when a window opens, ``window`` tf-keras' marker
filter, ``summaries`` TensorFlow's summary API on the TensorFlow backend only). ``callback``
is a thin Keras adapter over collaborators that need no framework: ``tracker`` (step
counting), ``schedule``, ``controller`` (the windows), ``longjob``, ``trend``,
``background``, ``system_view``, ``loopstep``, ``interrupts``, ``safety``; the system
sampler it runs beside the trace is :mod:`tfbneck_plugin.system`."""
