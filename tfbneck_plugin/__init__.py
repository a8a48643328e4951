"""tfbneck: tells a TensorFlow user why training is slow.

The analyzer (``tfbneck analyze``), the TensorBoard plugin and this package's import never
import TensorFlow; only ``BottleneckProfiler`` (the Keras callback) does, lazily.
"""
__version__ = "0.1.0"


def __getattr__(name):
    # The callback needs TensorFlow: import it only when asked for.
    if name == "BottleneckProfiler":
        from .capture import callback
        return callback.BottleneckProfiler
    if name == "profile_steps":  # building a schedule needs no TensorFlow
        from .capture.schedule import profile_steps
        return profile_steps
    raise AttributeError(name)
