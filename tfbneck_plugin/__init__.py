"""tfbneck: tells a TensorFlow user why training is slow.

    import tfbneck_plugin as tfb
    r = tfb.analyze("logs")     # a Report: one SessionReport per profiling session
    r                           # in a notebook: verdicts, step-time chart, tf.data stages, fixes
    tfb.compare("logs/before", "logs/after")["verdict"]   # "faster", "slower" or "no_change"
    tfb.fleet("logs")           # across runs: time per category, runs ranked by recoverable time

The analyzer (``tfbneck analyze``, :func:`analyze`), the TensorBoard plugin and this
package's import never import TensorFlow; only ``BottleneckProfiler`` (the Keras callback)
does, lazily. The public names below (``__version__`` too) are imported on first use: this
module imports nothing from the package when it is imported, so that no module that imports
a submodule comes back here.
"""

# No __all__: `from tfbneck_plugin import *` would then import TensorFlow (or fail without it).
_LAZY = ("BottleneckProfiler", "Fleet", "Report", "SessionReport", "SlowdownTrigger", "TfbneckError", "analyze",
         "compare", "fleet", "measure_input_cost", "profile_steps")


def __getattr__(name):
    if name == "__version__":
        from .version import __version__
        return __version__
    # The callback needs TensorFlow: import it only when asked for.
    if name == "BottleneckProfiler":
        return _bottleneck_profiler()
    if name == "profile_steps":  # building a schedule needs no TensorFlow
        from .capture.schedule import profile_steps
        return profile_steps
    if name == "SlowdownTrigger":  # nor do the slowdown thresholds
        from .capture.steptime import SlowdownTrigger
        return SlowdownTrigger
    if name == "measure_input_cost":  # an ablation: imports Keras (the user's backend) when called, not here
        from .capture.input_cost import measure_input_cost
        return measure_input_cost
    if name == "compare":  # tfbneck compare, as a function: the comparison's JSON dict
        from .comparison.compare import compare
        return compare
    if name == "TfbneckError":  # the base of the errors raised for input tfbneck cannot use
        from .errors import TfbneckError
        return TfbneckError
    if name in ("analyze", "Report", "SessionReport", "fleet", "Fleet"):  # no TensorFlow either
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'tfbneck_plugin' has no attribute {name!r}")


def _bottleneck_profiler():
    try:
        from .capture import callback
    except ModuleNotFoundError as e:  # one line naming the extra, not a bare "No module named 'tensorflow'"
        if e.name not in ("tensorflow", "keras", "tf_keras"):
            raise
        raise ImportError("BottleneckProfiler needs TensorFlow: pip install '.[tensorflow]' in the tfbneck clone "
                          "(or any TensorFlow >= 2.16 with tf-keras); the analyzer, CLI and tab do not") from None
    return callback.BottleneckProfiler


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})
