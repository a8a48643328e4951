"""The profiler of each Keras 3 backend, behind one interface the window capture
(:class:`.window.WindowCapture`) drives: start a session writing into a staging folder, mark
each step, stop it (the trace lands in ``<staging>/plugins/profile/<session>/``), or drop it.

=============  =============================================  ==========================================
backend        profiler and step marker                       trace file in the session folder
=============  =============================================  ==========================================
``tensorflow`` ``tf.profiler.experimental.start/stop``;       ``<host>.xplane.pb``
               ``tf.profiler.experimental.Trace('train',
               step_num=N, _r=1)``
``jax``        ``jax.profiler.start_trace/stop_trace``;       ``<host>.xplane.pb`` (the same XSpace
               ``jax.profiler.StepTraceAnnotation('train',    format: jax/_src/profiler.py exports
               step_num=N)``                                  through the same TSL profiler)
``torch``      ``torch.profiler.profile`` (CPU, and CUDA      ``<host>_<pid>.<ns>.pt.trace.json.gz``
               when ``torch.cuda.is_available()``),           (Kineto's Chrome trace, the name
               ``record_function('ProfilerStep#N')``          ``tensorboard_trace_handler`` gives)
=============  =============================================  ==========================================

Each step marker carries the step's 1-based global batch number, as on TensorFlow: the
analyzer's step finders read ``train`` markers (XSpace) and ``ProfilerStep#N`` annotations
(Kineto) with that number. Every framework is imported inside the engine that uses it, when
its first window opens or its first marker is made: a JAX or PyTorch fit imports no
TensorFlow here.

On JAX the callback also marks the wait for each batch (:data:`KERAS_INPUT_EVENT`), which
JAX's trace would otherwise show as unattributed time on the training thread
(:class:`MarkedIterator`); on PyTorch, Keras feeds the step from a
``torch.utils.data.DataLoader`` whose ``__next__`` PyTorch's profiler records by itself.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any, Iterator, Optional, Tuple

from ..errors import first_line
from ..trace.keras_marks import KERAS_BACKENDS as BACKENDS
from ..trace.keras_marks import KERAS_INPUT_EVENT, KERAS_STEP_WAIT_EVENT


Problem = Tuple[str, str]


def input_kind(adapter: Any) -> str:
    """What feeds a Keras fit, from its data adapter's class (keras/src/trainers/data_adapters/):
    ``tf.data``, ``PyDataset``, ``generator``, ``DataLoader`` (PyTorch's), ``arrays``
    (NumPy / tensors / pandas), ``grain``, or ``other``."""
    name = type(adapter).__name__ if adapter is not None else ""
    for prefix, kind in (("TFDataset", "tf.data"), ("PyDataset", "PyDataset"), ("Generator", "generator"),
                         ("TorchDataLoader", "DataLoader"), ("Array", "arrays"), ("Grain", "grain")):
        if name.startswith(prefix):
            return kind
    return "other"


class TensorFlowEngine:
    """TensorFlow's profiler (one session per process), exporting an XSpace.

    Args:
      options: ``tf.profiler.experimental.ProfilerOptions`` or None (its defaults).
    """
    backend = "tensorflow"

    def __init__(self, options: Any = None):
        self.options = options

    @staticmethod
    def _v2():
        try:  # the module-level session object tells whose profiler is running (private API)
            from tensorflow.python.profiler import profiler_v2
            return profiler_v2
        except Exception:  # noqa: BLE001 - a TensorFlow without it: rely on the public API only
            return None

    def disabled(self) -> Optional[str]:
        """Why profiling is off in this process (``TF_DISABLE_PROFILING``), or None."""
        env = os.environ.get("TF_DISABLE_PROFILING", "")
        if env.strip().lower() in ("1", "true"):
            return f"profiling is disabled in this process (TF_DISABLE_PROFILING={env})"
        return None

    def running(self) -> Any:
        """TensorFlow's current profiler session object (private API), or None."""
        v2 = self._v2()
        return getattr(v2, "_profiler", None) if v2 is not None else None

    def start(self, staging: str) -> Tuple[Any, Optional[Problem]]:
        """Start tracing into ``staging``: ``(session, None)`` or ``(None, (kind, reason))``."""
        import tensorflow as tf
        v2 = self._v2()
        before = self.running()
        try:
            if self.options is not None:
                tf.profiler.experimental.start(staging, options=self.options)
            else:
                tf.profiler.experimental.start(staging)
        except Exception as err:  # noqa: BLE001 - any refusal: the window is skipped with the reason
            already = isinstance(err, tf.errors.AlreadyExistsError)
            if v2 is not None and before is None and already:
                # TensorFlow keeps the session object its start() created when the C++ side
                # refuses (a profiler server capture is running): drop the dead object our
                # call made, so later starts are not refused for ever.
                with v2._profiler_lock:
                    if v2._profiler is not None:
                        v2._profiler = None
            if already:
                return None, ("other_profiler", "another profiler session was already running (the profiler "
                                                "refused to start: it allows one session per process)")
            return None, ("start_failed", f"the profiler could not start ({type(err).__name__}: {first_line(err)})")
        return self.running(), None

    def ours(self, session: Any) -> bool:
        """Whether the running session is ``session`` (True when TensorFlow cannot say)."""
        return self._v2() is None or self.running() is session

    def stop(self, staging: str, session: Any) -> Optional[str]:
        """Stop and export the trace; None, or why no trace was saved."""
        import tensorflow as tf
        if not self.ours(session):
            return "the profiler session was stopped by other code during the window"
        tf.profiler.experimental.stop()
        return None

    def drop(self, session: Any) -> None:
        """Stop without saving, if the running session is ``session``."""
        if self._v2() is not None and self.running() is session:
            import tensorflow as tf
            tf.profiler.experimental.stop(save=False)

    def marker(self, step: int) -> Any:
        """``Trace('train', step_num=step, _r=1)``, the marker XProf and ``tfbneck analyze`` find steps by."""
        import tensorflow as tf
        return tf.profiler.experimental.Trace("train", step_num=step, _r=1)

    def other_running(self) -> str:
        return ("another profiler session was already running in this process "
                "(tf.profiler.experimental.start, a TensorBoard callback's profile_batch, "
                "or a profiler server capture); BottleneckProfiler never stops a profiler "
                "it did not start")


class JaxEngine:
    """JAX's profiler (``jax.profiler.start_trace``: one trace per process), exporting an XSpace.

    Args:
      options: ``jax.profiler.ProfileOptions`` or None: then ``python_tracer_level=0`` (the
        Python tracer, on in JAX's defaults, records every Python call and slows each step
        several-fold; TensorFlow's profiler has it off by default too).
    """
    backend = "jax"

    def __init__(self, options: Any = None):
        self.options = options

    def disabled(self) -> Optional[str]:
        return None

    def running(self) -> Any:
        """JAX's running profiler session (private ``_profile_state``), or None."""
        state = getattr(sys.modules.get("jax._src.profiler"), "_profile_state", None)
        return getattr(state, "profile_session", None)

    def start(self, staging: str) -> Tuple[Any, Optional[Problem]]:
        import jax
        options = self.options
        if options is None:
            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0
        if self.running() is not None:
            return None, ("other_profiler", self.other_running())
        try:
            jax.profiler.start_trace(staging, profiler_options=options)
        except Exception as err:  # noqa: BLE001 - any refusal: the window is skipped with the reason
            return None, ("start_failed", f"the profiler could not start ({type(err).__name__}: {first_line(err)})")
        return self.running(), None

    def ours(self, session: Any) -> bool:
        return self.running() is session

    def stop(self, staging: str, session: Any) -> Optional[str]:
        import jax
        if not self.ours(session):
            return "the profiler session was stopped by other code during the window"
        jax.profiler.stop_trace()
        return None

    def drop(self, session: Any) -> None:
        # JAX's stop_trace always exports: the staging folder holding it is removed after.
        if session is not None and self.running() is session:
            import jax
            jax.profiler.stop_trace()

    def marker(self, step: int) -> Any:
        """``StepTraceAnnotation('train', step_num=step)``: the same ``train`` marker as TensorFlow's."""
        import jax
        return jax.profiler.StepTraceAnnotation("train", step_num=step)

    def other_running(self) -> str:
        return ("another JAX profiler trace was already running in this process (jax.profiler.start_trace, "
                "jax.profiler.trace, or a profiler server capture); BottleneckProfiler never stops a profiler "
                "it did not start")


class TorchEngine:
    """PyTorch's profiler (``torch.profiler.profile`` through Kineto: one per process),
    exporting a Chrome trace that ``tfbneck analyze`` reads as a Kineto trace.

    Only the thread that started it may stop it: stopped from another thread, PyTorch 2.13
    finds no session there ("disableProfiler called but no active profiling session found")
    and the process then dies of a segmentation fault (measured). :meth:`can_stop_here` says
    so, and a window whose ``fit`` was interrupted is closed by the training thread rather
    than by the owner watch (:meth:`.controller.WindowController.close_orphan`).
    """
    backend = "torch"

    def __init__(self, options: Any = None):
        self.options = options
        self._thread: Optional[int] = None  # the thread that started the running session

    def disabled(self) -> Optional[str]:
        return None

    def running(self) -> Any:
        """True while a PyTorch profiler runs in this process, else None."""
        torch = sys.modules.get("torch")
        try:
            return True if torch is not None and torch._C._autograd._profiler_enabled() else None
        except Exception:  # noqa: BLE001 - a build without it: rely on start() refusing
            return None

    def start(self, staging: str) -> Tuple[Any, Optional[Problem]]:
        import torch
        from torch.profiler import ProfilerActivity, profile
        if self.running() is not None:
            return None, ("other_profiler", self.other_running())
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        try:
            prof = profile(activities=activities)
            prof.start()
        except Exception as err:  # noqa: BLE001 - any refusal: the window is skipped with the reason
            return None, ("start_failed", f"the profiler could not start ({type(err).__name__}: {first_line(err)})")
        self._thread = threading.get_ident()
        return prof, None

    def can_stop_here(self) -> bool:
        """Whether the calling thread started the running session (or none runs)."""
        return self._thread is None or self._thread == threading.get_ident()

    def ours(self, session: Any) -> bool:
        return session is not None and self.running() is not None

    def stop(self, staging: str, session: Any) -> Optional[str]:
        if not self.can_stop_here():
            return "PyTorch's profiler can only be stopped by the thread that started it"
        self._thread = None
        session.stop()
        folder = os.path.join(staging, "plugins", "profile", time.strftime("%Y_%m_%d_%H_%M_%S"))
        os.makedirs(folder, exist_ok=True)
        name = f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json.gz"
        session.export_chrome_trace(os.path.join(folder, name))
        return None

    def drop(self, session: Any) -> None:
        if session is not None and self.can_stop_here():
            self._thread = None
            session.stop()

    def marker(self, step: int) -> Any:
        """``record_function('ProfilerStep#<step>')``: the annotation ``prof.step()`` writes."""
        from torch.profiler import record_function
        return record_function(f"ProfilerStep#{step}")

    def other_running(self) -> str:
        return ("another PyTorch profiler was already running in this process (torch.profiler.profile, "
                "torch.autograd.profiler); BottleneckProfiler never stops a profiler it did not start")


def make_engine(backend: str, options: Any = None):
    """The engine of ``backend`` (one of :data:`BACKENDS`). Raises ValueError for another."""
    if backend not in BACKENDS:
        raise ValueError(f"no profiler for the Keras backend {backend!r}: one of {BACKENDS}")
    return {"tensorflow": TensorFlowEngine, "jax": JaxEngine, "torch": TorchEngine}[backend](options)


class MarkedIterator:
    """Wraps a Keras fit's batch iterator on JAX: each ``next()`` runs inside the annotation
    ``tfbneck.keras_input/<kind>``, so that the trace shows the step waiting for its batch.

    Args:
      iterator: the iterator Keras' JAX trainer passes to ``train_function``.
      kind: the input's kind (:func:`input_kind`).
    """
    __slots__ = ("_it", "_name", "_annotation")

    def __init__(self, iterator: Iterator, kind: str):
        import jax
        self._it, self._name, self._annotation = iterator, f"{KERAS_INPUT_EVENT}/{kind}", jax.profiler.TraceAnnotation

    def __iter__(self):
        return self

    def __next__(self):
        with self._annotation(self._name):
            return next(self._it)


class JaxSteps:
    """A Keras fit's steps on JAX: the model's ``train_function`` wrapped for the whole fit
    (:meth:`remove` puts it back, only if it is still the wrapper).

    Keras' JAX trainer calls ``self.train_function(state, iterator)`` each step and fetches
    the batch inside it (keras/src/backend/jax/trainer.py, ``fit``), so wrapping is the one
    place the fetch can be marked without a change to Keras. JAX dispatches the jitted step
    asynchronously and returns at once, so:

    * **always**, a step returns only once the previous step's results are ready (``logs``:
      all outputs of one XLA execution become ready together): at most two steps are in
      flight, the next fetch still overlaps the step before it, and the time between two batch
      hooks is the step's own. Without it the steps before JAX's queue fills, and those after
      each window, are timed at their dispatch (measured on a 2-core CPU host: 0.34 ms per
      step for steps of 42 ms, for the first 35 steps and the 10 after a window), which would
      mislead the step-time trend and the slowdown trigger;
    * **while a window is open** (:meth:`marking`), each fetch runs inside
      ``tfbneck.keras_input/<kind>`` (:class:`MarkedIterator`) and the step waits for its own
      results inside :data:`KERAS_STEP_WAIT_EVENT`: each profiled step holds its fetch, its
      dispatch and its computation, one after the other.

    Args:
      model: the Keras model being trained.
      kind: what feeds the fit (:func:`input_kind`).
    """

    def __init__(self, model: Any, kind: str):
        import jax
        self.model, self.kind, self.marked = model, kind, False
        self.original = getattr(model, "train_function", None)
        self.wrapper = None
        if not callable(self.original):
            return
        original, wait, annotation = self.original, jax.block_until_ready, jax.profiler.TraceAnnotation
        previous: list = [None]

        def step(state, iterator, *args, **kwargs):
            if not self.marked:
                out = original(state, iterator, *args, **kwargs)
                if previous[0] is not None:
                    wait(previous[0])
                previous[0] = out[0] if isinstance(out, tuple) and out else out
                return out
            out = original(state, MarkedIterator(iterator, kind), *args, **kwargs)
            with annotation(KERAS_STEP_WAIT_EVENT):
                wait(out)
            previous[0] = None
            return out

        self.wrapper = step
        model.train_function = step

    def marking(self) -> "JaxSteps.Marking":
        """Mark the steps from now on (a window opened); the handle's ``remove()`` stops it."""
        return JaxSteps.Marking(self)

    class Marking:
        """A window's marking of the steps (:meth:`JaxSteps.marking`)."""

        def __init__(self, steps: "JaxSteps"):
            self.steps = steps
            steps.marked = True

        def remove(self) -> None:
            self.steps.marked = False

    def remove(self) -> None:
        """Put the model's own ``train_function`` back (the fit ended)."""
        self.marked = False
        if self.wrapper is not None and getattr(self.model, "train_function", None) is self.wrapper:
            self.model.train_function = self.original
        self.wrapper = None


def fit_input(frame: Any) -> Optional[str]:
    """What feeds the ``fit`` running in ``frame`` (Keras 3's ``fit`` holds its
    ``epoch_iterator``, whose ``data_adapter`` says: :func:`input_kind`), or None when the
    frame holds none (tf-keras, a frame not found). Never raises."""
    try:
        it = frame.f_locals.get("epoch_iterator") if frame is not None else None
        return input_kind(it.data_adapter) if it is not None and hasattr(it, "data_adapter") else None
    except Exception:  # noqa: BLE001 - a frame that cannot say: the input is not recorded
        return None
