"""``BottleneckProfiler``'s argument checks and the Keras facts it reads (which Keras and
which backend, ``steps_per_execution``), kept out of :mod:`.callback` so that it stays
readable. Imports Keras (:func:`keras_module`), and TensorFlow only for tf-keras or the
TensorFlow profiler's options class; JAX's options class on the JAX backend."""
from __future__ import annotations

import logging
import os
import sys

from .engines import BACKENDS
from .safety import logger
from .schedule import MAX_WINDOW_STEPS

PROFILER_OPTION_KEYS = ("host_tracer_level", "python_tracer_level", "device_tracer_level", "delay_ms")
#: The keys ``jax.profiler.ProfileOptions`` has of :data:`PROFILER_OPTION_KEYS`.
JAX_OPTION_KEYS = ("host_tracer_level", "python_tracer_level")


def keras_module():
    """``(keras, backend)``: the Keras whose ``Callback`` the profiler subclasses and the
    backend it runs on (``keras.backend.backend()``: ``tensorflow``, ``jax``, ``torch``...).

    tf-keras (``tf.keras`` when ``TF_USE_LEGACY_KERAS`` is ``1``/``true``/``True``, the test
    TensorFlow itself makes: tensorflow/python/util/lazy_loader.py) imports TensorFlow and runs
    on it; Keras 3 imports the backend ``KERAS_BACKEND`` names, and no other.
    """
    if os.environ.get("TF_USE_LEGACY_KERAS", None) in ("true", "True", "1"):
        import tensorflow as tf
        return tf.keras, "tensorflow"
    try:
        import keras
    except ImportError:  # a TensorFlow without Keras 3: its own tf.keras
        import tensorflow as tf
        return tf.keras, "tensorflow"
    backend = getattr(keras.backend, "backend", None)
    return keras, (backend() if callable(backend) else "tensorflow")


def check_backend(backend: str) -> str:
    """``backend`` if the profiler supports it.

    Raises:
      ValueError: another backend (``numpy``, ``openvino``: they do not train with ``fit``).
    """
    if backend not in BACKENDS:
        raise ValueError(f"BottleneckProfiler profiles Keras' {', '.join(BACKENDS)} backends but Keras runs on "
                         f"the '{backend}' backend; set KERAS_BACKEND to one of them before importing Keras")
    return backend


def check_log_dir(log_dir) -> str:
    """``log_dir`` as an absolute local path.

    Raises:
      ValueError: not a path, empty, a URL (sessions are moved into place atomically, which
        object stores cannot do), or an existing file.
    """
    if isinstance(log_dir, bytes) or not isinstance(log_dir, (str, os.PathLike)):
        raise ValueError(f"log_dir={log_dir!r}: pass a folder path (str or pathlib.Path), e.g. 'logs/run1'")
    path = os.fspath(log_dir)
    if not path:
        raise ValueError("log_dir='': pass a folder path, e.g. 'logs/run1'")
    if "://" in path:
        raise ValueError(f"log_dir={path!r}: BottleneckProfiler writes a local (or mounted) folder: the session "
                         f"folders are moved into place atomically and the sidecar is written beside the trace. "
                         f"Profile to a local path and copy it, or mount the bucket (e.g. gcsfuse)")
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"log_dir={path!r} is a file; pass a folder path")
    return path


def check_max_window_steps(value) -> int:
    """``max_window_steps`` checked. Raises ValueError unless it is a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_window_steps={value!r}: pass a positive int number of steps, e.g. {MAX_WINDOW_STEPS}")
    return value


def check_arguments(sample_interval_s, analyze, analysis_timeout_s, verbose) -> None:
    """The constructor's other arguments.

    Raises:
      ValueError: a value out of range (the message says what to pass).
    """
    if isinstance(sample_interval_s, bool) or not isinstance(sample_interval_s, (int, float)) \
            or not 0.01 <= sample_interval_s <= 10:
        raise ValueError(f"sample_interval_s={sample_interval_s!r}: pass seconds between 0.01 and 10, e.g. 0.1")
    if analyze not in (True, False, "process", "thread"):
        raise ValueError(f"analyze={analyze!r}: pass True or 'process' (analyse in a child process), "
                         f"'thread' (in this process), or False")
    if isinstance(analysis_timeout_s, bool) or not isinstance(analysis_timeout_s, (int, float)) \
            or analysis_timeout_s <= 0:
        raise ValueError(f"analysis_timeout_s={analysis_timeout_s!r}: pass a positive number of seconds")
    if verbose not in (0, 1, True, False):
        raise ValueError(f"verbose={verbose!r}: pass verbose=1 (log each window's verdict) or verbose=0 (problems only)")


def profiler_options(options, backend: str = "tensorflow"):
    """``profiler_options`` as the backend's options: ``tf.profiler.experimental.ProfilerOptions``,
    ``jax.profiler.ProfileOptions`` (keys :data:`JAX_OPTION_KEYS`), or None.

    Raises:
      ValueError: not a dict nor the backend's options class, a dict with unknown keys (or
        keys JAX's profiler has not), or any options on the PyTorch backend.
    """
    if options is None:
        return None
    if backend == "torch":
        raise ValueError("profiler_options: PyTorch's profiler takes none of these options (it records CPU "
                         "activity, and CUDA where available); pass profiler_options=None on the torch backend")
    if backend == "jax":
        return _jax_options(options)
    import tensorflow as tf
    if isinstance(options, tf.profiler.experimental.ProfilerOptions):
        return options
    if not isinstance(options, dict):
        raise ValueError(f"profiler_options={options!r}: pass a dict such as {{'host_tracer_level': 2}} or a "
                         f"tf.profiler.experimental.ProfilerOptions")
    unknown = sorted(set(options) - set(PROFILER_OPTION_KEYS))
    if unknown:
        raise ValueError(f"profiler_options: unknown key(s) {unknown}; known: {list(PROFILER_OPTION_KEYS)}")
    return tf.profiler.experimental.ProfilerOptions(**options)


def _jax_options(options):
    import jax
    if isinstance(options, jax.profiler.ProfileOptions):
        return options
    if not isinstance(options, dict) or set(options) - set(JAX_OPTION_KEYS):
        raise ValueError(f"profiler_options={options!r}: on the JAX backend pass a dict with any of "
                         f"{list(JAX_OPTION_KEYS)} (e.g. {{'python_tracer_level': 1}}) or a jax.profiler.ProfileOptions")
    out = jax.profiler.ProfileOptions()
    out.python_tracer_level = 0  # the engine's default (engines.JaxEngine)
    for key, value in options.items():
        setattr(out, key, value)
    return out


def is_tf_keras_model(model) -> bool:
    """Whether ``model`` is a tf-keras (Keras 2) model rather than a Keras 3 one."""
    return any(c.__module__.split(".")[0] == "tf_keras" for c in type(model).__mro__) if model is not None else False


def steps_per_execution(model) -> int:
    """The model's ``steps_per_execution`` (batches per call of the train function), 1 when unknown."""
    for name in ("steps_per_execution", "_steps_per_execution"):
        v = getattr(model, name, None)
        if v is None:
            continue
        try:
            n = int(v.numpy()) if hasattr(v, "numpy") else int(v)
            return max(n, 1)
        except (TypeError, ValueError):
            continue
    return 1


def check_step_time_every(value):
    """``step_time_every``: None or a positive int number of batches.

    Raises:
      ValueError: anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"step_time_every={value!r}: pass a positive int number of steps (e.g. 1000), or None "
                         f"for one value per epoch (every 1000 steps in custom loops)")
    return value


def check_system_interval(value) -> bool:
    """``system_interval_s``: None or 0 (off), or seconds between samples, 0.1 to 60.
    Returns whether the whole-run system view is on.

    Raises:
      ValueError: anything else.
    """
    if value is None or (not isinstance(value, bool) and value == 0):
        return False
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.1 <= value <= 60:
        raise ValueError(f"system_interval_s={value!r}: pass seconds between samples from 0.1 to 60 (default 1.0), "
                         f"or None to turn the whole-run system view off")
    return True


def check_port(value):
    """``profiler_server_port``: None or a TCP port 1-65535.

    Raises:
      ValueError: anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ValueError(f"profiler_server_port={value!r}: pass a TCP port number (1-65535), or None")
    return value


def check_step(step_num, batches) -> None:
    """The arguments of ``profiler.step()``: ``step_num`` None or an int from 1, ``batches`` an
    int from 1.

    Raises:
      ValueError: anything else.
    """
    if step_num is not None and (isinstance(step_num, bool) or not isinstance(step_num, int) or step_num < 1):
        raise ValueError(f"step(step_num={step_num!r}): pass a 1-based int step number, or None to count")
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise ValueError(f"step(batches={batches!r}): pass a positive int")


#: Written before a line on a terminal that Keras' progress bar may be drawing: a carriage
#: return and ECMA-48's Erase in Line (``CSI K``: from the cursor to the line's end), so the
#: line starts at the terminal's first column on a cleared line. The bar redraws itself on the
#: line below at its next update (it writes "\b"s and "\r", then the whole bar:
#: keras/src/utils/progbar.py); on a line that is already empty this writes nothing visible.
CLEAR_LINE = "\r\x1b[K"


def shares_a_terminal(stream, other) -> bool:
    """Both streams are terminals, the same one (the same device: the progress bar on
    ``other`` shows where ``stream`` writes). False for files, pipes, notebooks and closed or
    replaced streams."""
    try:
        return (stream.isatty() and other.isatty()
                and os.path.samestat(os.fstat(stream.fileno()), os.fstat(other.fileno())))
    except (AttributeError, OSError, ValueError):
        return False


class LineStartHandler(logging.StreamHandler):
    """A stream handler whose lines begin at the first column of a line of their own when its
    stream is the terminal standard output writes to. Keras' progress bar (``verbose=1``)
    redraws its line with "\r" and writes no newline until the epoch ends
    (keras/src/utils/progbar.py), so a line written in the meantime would continue the bar's
    text; :data:`CLEAR_LINE` first clears that line and starts this one there. Whether the
    bar is mid-line is not known from here (it writes to ``sys.stdout`` directly), and the
    clear is harmless on an empty line, so it is written before every line on such a terminal;
    a file, a pipe or a notebook gets the lines as they are (no blank line, no control codes).
    The check is made at each line: the user may redirect ``sys.stdout`` while training."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if os.environ.get("TERM") != "dumb" and shares_a_terminal(self.stream, sys.stdout):
            return CLEAR_LINE + text
        return text


def ensure_handler() -> None:
    """Make the verdict lines visible: a stderr handler on the 'tfbneck' logger
    (:class:`LineStartHandler`), unless the user configured one (then their configuration
    decides)."""
    if logger.handlers:
        return
    handler = LineStartHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tfbneck: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
