"""``BottleneckProfiler``: a Keras callback (and a step API for custom loops) that profiles
chosen training steps, records what the system did meanwhile, and says what limits
training.

One line in ``model.fit(callbacks=[...])`` gives, per window of steps:

* ``<log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>_steps<A>-<B>/<host>.xplane.pb``: the
  profiler's trace, with each profiled step wrapped in
  ``tf.profiler.experimental.Trace('train', step_num=<step>, _r=1)``, the step marker that
  XProf (TensorBoard's Profile tab) and ``tfbneck analyze`` both use to find steps;
* ``tfbneck_system_metrics.json`` beside it: CPU per core, this process, memory, disk,
  network and GPUs sampled every ~100 ms during the window (format in
  :mod:`tfbneck_plugin.records`), which the analyzer uses to tell a CPU-bound input
  pipeline from one that waits on storage;
* after the window, in the background: one log line with the verdict and scalars
  ``bottleneck/*`` in ``<log_dir>`` (TensorBoard's Scalars tab shows the trend over a long job).

A window that could not be captured leaves ``tfbneck_skipped.json`` (``{"reason": ...}``)
in its session folder instead, which ``tfbneck analyze`` reports with the reason. A process
killed inside a window leaves the window's folder in ``<log_dir>/.tfbneck-staging/``, which
``tfbneck analyze`` reports as an incomplete window (its partial files are never read).

This module imports TensorFlow; the rest of the package does not.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from ..records import SIDECAR_NAME, SKIPPED_NAME, STAGING_DIR, write_sidecar
from .schedule import (DEFAULT_WINDOW, MAX_WINDOW_STEPS, StepSchedule, as_schedule, profile_steps,
                       warnings_for)
from .sampler import SystemSampler

try:  # the module-level session object tells whose profiler is running (private API)
    from tensorflow.python.profiler import profiler_v2 as _profiler_v2
except Exception:  # pragma: no cover - a TensorFlow without it: rely on the public API only
    _profiler_v2 = None

__all__ = ["BottleneckProfiler", "WindowRecord", "profile_steps", "StepSchedule"]

#: Messages go to this logger: problems at WARNING, the per-window verdict at INFO.
logger = logging.getLogger("tfbneck")

_keras = tf.keras  # Keras 3 (TensorFlow backend) or tf-keras when TF_USE_LEGACY_KERAS=1
_INF = float("inf")
# Profiler sessions are written in STAGING_DIR first, then moved into plugins/profile/ complete
# with their sidecar (a reader never sees a trace without its system metrics). Each window's
# staging folder holds a record saying the window is incomplete from the moment it opens: a
# process killed inside the window leaves it behind, and `tfbneck analyze` reports it.
#: A saved trace above this size (bytes) gets a warning: tools stall on such files.
LARGE_TRACE_BYTES = 500 * 1024 * 1024
_PROFILER_OPTION_KEYS = ("host_tracer_level", "python_tracer_level", "device_tracer_level", "delay_ms")


@dataclass
class WindowRecord:
    """What happened to one profiling window (``BottleneckProfiler.windows``).

    Attributes:
      index: 0-based, in the order windows were reached.
      requested: the windows asked for (``(start, stop)``, 1-based steps) that it covers.
      status: ``"open"``, ``"profiled"`` or ``"skipped"``.
      reason: why it was skipped (None otherwise).
      session_dir: the session folder (trace + sidecar, or the skipped record); None when
        nothing could be written.
      steps: ``(first, last)`` batch recorded (whole executions when ``steps_per_execution``
        > 1, so it may be wider than ``requested``).
      markers: one ``(first, last)`` batch range per step marker in the trace.
      closed_by: ``"completed"``, ``"training_ended"``, ``"closed"``, ``"interrupted"``.
      report: the analyzer's session report (dict, see the README "Report") once the
        background analysis finished; None before or without analysis.
      analysis_error: why the analysis failed, when it did.
    """
    index: int
    requested: List[Tuple[int, int]]
    status: str = "open"
    reason: Optional[str] = None
    session_dir: Optional[str] = None
    steps: Optional[Tuple[int, int]] = None
    markers: List[Tuple[int, int]] = field(default_factory=list)
    closed_by: Optional[str] = None
    report: Optional[Dict] = None
    analysis_error: Optional[str] = None


@dataclass
class _Open:
    record: WindowRecord
    window: Tuple[int, int]
    staging: str
    session: object
    sampler: Optional[SystemSampler]
    marker_filter: Optional["_LegacyKerasMarkerFilter"]


class _NullTrace:
    """Stands in for tf-keras' own per-step TraceMe while a window is open."""
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set_metadata(self, **kwargs):
        pass


_NULL_TRACE = _NullTrace()


class _LegacyKerasMarkerFilter:
    """tf-keras' ``fit`` wraps every step in ``Trace('train', epoch_num=, step_num=<0-based
    step of the epoch>, batch_size=, _r=1)``. With our own marker (global 1-based step)
    the trace would hold two ``train`` roots per step with different numbers. While a
    window is open, this replaces ``tensorflow.compat.v2.profiler.experimental.Trace`` (the
    name tf-keras calls; user code calls ``tf.profiler.experimental.Trace``, a different
    module object) by a subclass that returns a no-op for exactly tf-keras' signature and
    behaves as ``Trace`` for everything else."""

    def __init__(self):
        import tensorflow.compat.v2 as tfc
        self._module = tfc.profiler.experimental
        self._original = None
        self._replacement = None

    def install(self) -> "_LegacyKerasMarkerFilter":
        original = self._module.Trace
        if getattr(original, "_tfbneck_filter", False):
            return self  # another profiler instance already filters

        class Trace(original):  # noqa: D401 - same name for readable tracebacks
            _tfbneck_filter = True

            def __new__(cls, name, **kwargs):
                if name == "train" and "epoch_num" in kwargs and "batch_size" in kwargs:
                    return _NULL_TRACE
                return super().__new__(cls)

        self._original, self._replacement = original, Trace
        self._module.Trace = Trace
        return self

    def uninstall(self) -> None:
        if self._replacement is not None and self._module.Trace is self._replacement:
            self._module.Trace = self._original
        self._original = self._replacement = None


class _StepContext:
    """Returned by :meth:`BottleneckProfiler.step`; ``with`` it around one training step."""
    __slots__ = ("_p", "_num", "_batches")

    def __init__(self, profiler, step_num, batches):
        self._p, self._num, self._batches = profiler, step_num, batches

    def __enter__(self):
        p = self._p
        first = p._seen + 1 if self._num is None else self._num
        last = first + self._batches - 1
        if last > p._seen:
            p._seen = last
        if p._trace is None and p._active is None and last < p._next_start:
            return self
        p._guard(p._step_begin, first, last)
        return self

    def __exit__(self, *exc):
        if self._p._trace is not None:
            self._p._guard(self._p._step_end)
        return False


# Profilers with an open window, closed (trace saved) if the interpreter exits first.
_OPEN_AT_EXIT: "weakref.WeakSet[BottleneckProfiler]" = weakref.WeakSet()


@atexit.register
def _close_open_windows():  # pragma: no cover - exercised at interpreter exit
    for p in list(_OPEN_AT_EXIT):
        p._exiting = True
        p._guard(p._close_window, "interpreter_exit")


class BottleneckProfiler(_keras.callbacks.Callback):
    """Profile chosen training steps, sample the system meanwhile, and diagnose each window.

    Each window of steps becomes its own profiling session under
    ``<log_dir>/plugins/profile/`` (TensorBoard shows it as a run named after
    ``log_dir``): the trace, with every step wrapped in the step marker
    ``Trace('train', step_num=<step>, _r=1)`` so that steps are found exactly by this
    analyzer and by TensorBoard's Profile plugin, plus ``tfbneck_system_metrics.json``.
    After a window the session is analysed in the background (training never waits): one
    log line with the verdict, and scalars ``bottleneck/*`` in ``log_dir``.

    Steps are counted in batches from 1, across ``fit`` calls made with the same callback
    (a second ``fit`` continues the count). Keras calls batch hooks once per execution when
    ``steps_per_execution`` > 1: a window then covers the whole executions that contain its
    steps, and there is one marker per execution (``step_num`` = its first batch).

    Args:
      log_dir: local (or mounted) folder; created when the first window opens. The trace,
        sidecar and skipped records go to ``<log_dir>/plugins/profile/<session>/``, the
        scalars to event files in ``<log_dir>`` itself.
      profile_steps: which steps to profile (1-based, both ends included). An int ``n``
        (one step), a pair ``(start, stop)``, several pairs ``[(10, 14), (500, 504)]``, a
        string ``"10,14"``, or a schedule from :func:`tfbneck_plugin.profile_steps`, e.g.
        ``profile_steps(every=1000, length=5, start=100)`` for one window every 1000 steps.
        Default ``(10, 14)``: step 1 traces and compiles the tf.function (seconds, often)
        and the next few still warm caches, allocators and the tf.data autotuner, so their
        times mislead.
      max_window_steps: hard cap on a window's length in steps (default 100); windows
        longer than 20 steps get a warning (the trace grows with every step; 1 GB traces
        stall every tool).
      system_metrics: sample the system during windows (default True).
      sample_interval_s: seconds between samples (default 0.1; 0.01 to 10).
      analyze: after each window, analyse the session in the background: ``True`` or
        ``"process"`` (default; a child process at low priority: no GIL contention and no
        memory growth in the training process), ``"thread"`` (in this process), or
        ``False`` (no analysis, no verdict line, no scalars).
      write_scalars: write the verdict's numbers as TensorBoard scalars (default True).
        Tags: ``bottleneck/step_time_ms``, ``bottleneck/input_pct`` and the other
        breakdown shares (``device_compute_pct``, ``host_compute_pct``,
        ``kernel_launch_pct``, ``collective_pct``, ``transfer_pct``, ``idle_pct``, in % of
        the step), ``bottleneck/confidence`` (0-1), ``bottleneck/is_cpu``, ``is_device``,
        ``is_io``, ``is_network``, ``is_unknown`` (1 for the verdict, else 0), and from the
        sidecar ``bottleneck/system_cpu_pct``, ``system_busiest_core_pct``,
        ``system_proc_cpu_cores`` and ``system_gpu_util_pct``. The x axis is the last
        step of the window.
      analysis_timeout_s: give up on one window's analysis after this many seconds
        (default 600).
      profiler_options: ``tf.profiler.experimental.ProfilerOptions`` or a dict with any of
        ``host_tracer_level`` (default 2), ``python_tracer_level`` (0),
        ``device_tracer_level`` (1), ``delay_ms``.
      verbose: 1 (default) logs the verdict of each window; 0 logs only problems.

    Example::

        from tfbneck_plugin import BottleneckProfiler
        model.fit(ds, epochs=3, callbacks=[BottleneckProfiler("logs/run1", profile_steps=(10, 14))])
        # then: tfbneck analyze logs/run1   or   tensorboard --logdir logs

    Custom training loops (no ``fit``, or ``train_on_batch``, which never calls batch
    callbacks)::

        with BottleneckProfiler("logs/run1", profile_steps=(10, 14)) as profiler:
            for x, y in ds:
                with profiler.step():          # counts steps from 1; or step(step_num=n)
                    train_step(x, y)

    Never hurts training: when a window cannot be captured (another profiler session is
    already running in the process, ``TF_DISABLE_PROFILING`` is set, ``log_dir`` cannot
    be written, the profiler fails) training continues, one warning per kind of problem
    is logged (logger ``"tfbneck"``), and the window is recorded as skipped with the
    reason (``tfbneck_skipped.json``, and ``windows``). The callback never stops a
    profiler session it did not start. Training that ends inside a window saves the steps
    recorded so far; a ``fit`` cut by an exception inside a window leaves it open until the
    next ``fit`` with this callback, ``close()``, or interpreter exit, which save its
    complete steps. An exception in the sampler leaves the trace without (complete)
    system metrics, with a warning. Pending background analyses finish before the
    interpreter exits (at most ``analysis_timeout_s``). Outside windows each step costs a few integer
    comparisons. The callback defines no ``on_train_batch_end`` (Keras 3 can keep
    dispatching batch-end hooks asynchronously where its backend allows it) and accepts
    tensor logs (tf-keras does not convert the logs to numpy, a device sync, for it).

    Caveats:
      * TensorFlow's profiler is one per process: a window overlapping a stock
        ``TensorBoard(profile_batch=...)`` window loses to whichever started first.
      * With tf-keras, whose ``fit`` marks every step ``train`` with an epoch-local step
        number, those markers are suppressed while a window is open so that the trace
        holds exactly one marker per step.
      * Under ``tf.distribute`` one host's trace is written per worker process.
      * Messages use the ``logging`` logger ``"tfbneck"``; when it has no handler the
        callback adds one writing ``tfbneck: <message>`` to stderr. Add your own handler
        first to route them elsewhere.

    Raises:
      ValueError: invalid ``log_dir``, ``profile_steps`` (e.g. ``(0, 3)``: steps start at
        1), ``max_window_steps``, ``sample_interval_s``, ``analyze``,
        ``profiler_options``, or Keras running on a backend other than TensorFlow.
    """

    def __init__(self, log_dir, profile_steps=DEFAULT_WINDOW, *, max_window_steps: int = MAX_WINDOW_STEPS,
                 system_metrics: bool = True, sample_interval_s: float = 0.1, analyze=True,
                 write_scalars: bool = True, analysis_timeout_s: float = 600.0, profiler_options=None,
                 verbose: int = 1):
        super().__init__()
        self._supports_tf_logs = True  # tf-keras' __init__ sets False: logs would be synced to numpy per batch
        self.log_dir = _check_log_dir(log_dir)
        if isinstance(max_window_steps, bool) or not isinstance(max_window_steps, int) or max_window_steps < 1:
            raise ValueError(f"max_window_steps={max_window_steps!r}: pass a positive int number of steps, "
                             f"e.g. {MAX_WINDOW_STEPS}")
        self.schedule: StepSchedule = as_schedule(profile_steps, max_window_steps)
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
            raise ValueError(f"verbose={verbose!r}: pass 1 (log each window's verdict) or 0 (problems only)")
        backend = getattr(_keras.backend, "backend", None)
        if callable(backend) and backend() != "tensorflow":
            raise ValueError(f"BottleneckProfiler drives TensorFlow's profiler but Keras runs on the "
                             f"'{backend()}' backend; set KERAS_BACKEND=tensorflow before importing Keras")
        self.system_metrics = bool(system_metrics)
        self.sample_interval_s = float(sample_interval_s)
        self.analyze = "process" if analyze is True else analyze
        self.write_scalars = bool(write_scalars) and bool(self.analyze)
        self.analysis_timeout_s = float(analysis_timeout_s)
        self.verbose = int(verbose)
        self._options = _profiler_options(profiler_options)
        #: One WindowRecord per window reached, in order.
        self.windows: List[WindowRecord] = []

        # Step bookkeeping (1-based global batch numbers).
        self._seen = 0            # last batch begun
        self._epoch_offset = 0    # batches before the current epoch
        self._epoch_end: Optional[int] = None
        self._spe = 1
        self._consumed = 0        # last step covered by a window already handled
        first = self.schedule.first_start()
        self._next_start = first if first is not None else _INF
        self._active: Optional[_Open] = None
        self._trace = None
        self._step: Tuple[int, int] = (0, 0)

        self._in_fit = False
        self._fit_legacy = False
        self._log_dir_problem: Optional[str] = None
        self._disabled: Optional[str] = None
        self._warned = set()
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._writer = None
        self._writer_lock = threading.Lock()
        self._exiting = False
        _ensure_handler()
        for message in warnings_for(self.schedule):
            self._warn("schedule:" + message[:40], message)

    # ------------------------------------------------------------------------------------
    # tf-keras compatibility (its CallbackList asks these; Keras 3 ignores them)
    # ------------------------------------------------------------------------------------
    def _implements_train_batch_hooks(self):
        return True

    def _implements_test_batch_hooks(self):
        return False

    def _implements_predict_batch_hooks(self):
        return False

    # ------------------------------------------------------------------------------------
    # Keras hooks
    # ------------------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self._guard(self._train_begin)

    def _train_begin(self):
        if self._trace is not None or self._active is not None:
            # A previous fit (or loop) ended inside a window without on_train_end: an exception.
            self._warn("interrupted", "a previous training run ended inside a profiling window without "
                                      "finishing (an exception?); saving the steps it completed")
            self._close_window("interrupted")
        self._in_fit = True
        self._fit_legacy = _is_tf_keras_model(self.model)
        self._spe = _steps_per_execution(self.model)
        if self._disabled is None and self._next_start != _INF:
            self._log_dir_problem = _writable_problem(self.log_dir)
            if self._log_dir_problem:
                self._warn("log_dir", f"{self._log_dir_problem}: no profiling window will be recorded "
                                      f"(training continues)")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_offset = self._seen
        steps = (self.params or {}).get("steps")
        self._epoch_end = self._epoch_offset + int(steps) if isinstance(steps, int) and steps > 0 else None
        if self._spe != 1 or self._fit_legacy:
            self._spe = _steps_per_execution(self.model)  # tf-keras may autotune it

    def on_train_batch_begin(self, batch, logs=None):
        # Hot path: a few integer operations outside windows.
        first = self._epoch_offset + batch + 1
        last = first + self._spe - 1
        end = self._epoch_end
        if end is not None and last > end >= first:
            last = end
        self._seen = last
        if self._trace is None and self._active is None and last < self._next_start:
            return
        self._guard(self._fit_step, first, last)

    def _fit_step(self, first, last):
        self._step_end()
        self._step_begin(first, last)

    def on_test_begin(self, logs=None):
        # Validation inside fit is not a training step: end the current step marker.
        if self._trace is not None:
            self._guard(self._step_end)

    def on_epoch_end(self, epoch, logs=None):
        if self._trace is not None:
            self._guard(self._step_end)

    def on_train_end(self, logs=None):
        self._guard(self._train_end)

    def _train_end(self):
        self._in_fit = False
        if self._trace is not None:
            self._step_end(close_if_done=False)
        if self._active is not None:
            a = self._active
            got = a.record.markers
            upto = got[-1][1] if got else a.window[0]
            self._warn("ended_inside", f"training ended inside the window of steps {a.window[0]}-{a.window[1]} "
                                       f"after step {upto}: the session holds the steps recorded so far")
            self._close_window("training_ended")
        if not self.windows and self._disabled is None and self._next_start != _INF and self._seen:
            first = self.schedule.window_for(1, 1 << 62)
            hint = "(3, 5)" if self._seen >= 5 else f"(1, {self._seen})"
            self._warn("not_reached", f"training stopped at step {self._seen}, before the first profiling window "
                                      f"({first[0]}-{first[1]}): nothing was profiled yet (steps count on across "
                                      f"fit calls with this callback). For a shorter run pass an earlier window, "
                                      f"e.g. profile_steps={hint}")

    # ------------------------------------------------------------------------------------
    # Custom loops
    # ------------------------------------------------------------------------------------
    def step(self, step_num: Optional[int] = None, batches: int = 1) -> _StepContext:
        """Context manager around one training step of a custom loop.

        Args:
          step_num: this step's number (1-based, as in ``profile_steps``); default: the
            previous step's last batch + 1 (the first call is step 1).
          batches: batches this step processes (a ``tf.function`` looping over several
            batches per call); they count toward the schedule like Keras'
            ``steps_per_execution``.

        Example::

            for x, y in ds:
                with profiler.step():
                    loss = train_step(x, y)

        Raises:
          ValueError: ``step_num`` below 1 or ``batches`` below 1.
        """
        if step_num is not None and (isinstance(step_num, bool) or not isinstance(step_num, int) or step_num < 1):
            raise ValueError(f"step(step_num={step_num!r}): pass a 1-based int step number, or None to count")
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise ValueError(f"step(batches={batches!r}): pass a positive int")
        return _StepContext(self, step_num, batches)

    def close(self, wait: bool = True, timeout: Optional[float] = None) -> None:
        """End any open window (saving its trace) and, with ``wait``, wait for the
        background analyses (at most ``timeout`` seconds). Safe to call more than once."""
        if self._trace is not None:
            self._guard(self._step_end, False)
        if self._active is not None:
            self._guard(self._close_window, "closed")
        if wait:
            self.wait_for_analysis(timeout)
        with self._writer_lock:
            if self._writer is not None:
                try:
                    self._writer.flush()
                except Exception:
                    pass

    def wait_for_analysis(self, timeout: Optional[float] = None) -> bool:
        """Wait for the background analyses started so far; True when all finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    def __enter__(self) -> "BottleneckProfiler":
        return self

    def __exit__(self, *exc):
        self.close(wait=False)
        return False

    # ------------------------------------------------------------------------------------
    # Windows
    # ------------------------------------------------------------------------------------
    def _guard(self, fn, *args):
        """Run ``fn``; an unexpected error turns the callback off, never reaches training."""
        if self._disabled is not None:
            return None
        try:
            return fn(*args)
        except Exception as err:  # never let profiling stop training
            self._disabled = f"{type(err).__name__}: {err}"
            self._next_start = _INF
            logger.debug("BottleneckProfiler internal error", exc_info=True)
            self._warn("internal", f"internal error, profiling is off for the rest of this run "
                                   f"(training continues): {self._disabled}")
            try:
                self._cleanup_after_error()
            except Exception:
                logger.debug("BottleneckProfiler cleanup error", exc_info=True)
            return None

    def _cleanup_after_error(self):
        tr, self._trace = self._trace, None
        a, self._active = self._active, None
        try:
            if tr is not None:
                tr.__exit__(None, None, None)
        except Exception:
            pass
        if a is None:
            return
        _OPEN_AT_EXIT.discard(self)
        if a.marker_filter is not None:
            a.marker_filter.uninstall()
        if a.sampler is not None:
            a.sampler.stop()
        if _profiler_v2 is not None and getattr(_profiler_v2, "_profiler", None) is a.session:
            try:
                tf.profiler.experimental.stop(save=False)
            except Exception:
                pass
        a.record.status, a.record.reason = "skipped", f"internal error: {self._disabled}"
        shutil.rmtree(a.staging, ignore_errors=True)

    def _step_begin(self, first: int, last: int) -> None:
        if self._active is not None and first > self._active.window[1]:
            self._close_window("completed")  # a custom loop jumped past the window's end
        if self._active is None:
            if last < self._next_start:
                return
            lo = max(first, self._consumed + 1)
            win = self.schedule.window_for(lo, last) if lo <= last else None
            if win is None:
                nxt = self.schedule.next_start(max(last, self._consumed))
                self._next_start = nxt if nxt is not None else _INF
                return
            if not self._open_window(win):
                return
        self._trace = tf.profiler.experimental.Trace("train", step_num=first, _r=1)
        self._trace.__enter__()
        self._step = (first, last)

    def _step_end(self, close_if_done: bool = True) -> None:
        tr = self._trace
        if tr is None:
            return
        self._trace = None
        tr.__exit__(None, None, None)
        a = self._active
        if a is None:
            return
        a.record.markers.append(self._step)
        if close_if_done and self._step[1] >= a.window[1]:
            self._close_window("completed")

    def _precheck(self) -> Optional[Tuple[str, str]]:
        env = os.environ.get("TF_DISABLE_PROFILING", "")
        if env.strip().lower() in ("1", "true"):
            return "disabled", f"profiling is disabled in this process (TF_DISABLE_PROFILING={env})"
        if self._log_dir_problem:
            return "log_dir", self._log_dir_problem
        if _profiler_v2 is not None and getattr(_profiler_v2, "_profiler", None) is not None:
            return "other_profiler", ("another profiler session was already running in this process "
                                      "(tf.profiler.experimental.start, a TensorBoard callback's profile_batch, "
                                      "or a profiler server capture); BottleneckProfiler never stops a profiler "
                                      "it did not start")
        return None

    def _open_window(self, win: Tuple[int, int]) -> bool:
        rec = WindowRecord(index=len(self.windows), requested=[win])
        self.windows.append(rec)
        problem = self._precheck()
        if problem is None:
            staging = os.path.join(self.log_dir, STAGING_DIR, f"{os.getpid()}-{rec.index}-{uuid.uuid4().hex[:8]}")
            try:
                os.makedirs(staging)
            except OSError as err:
                problem = ("log_dir", f"cannot write to log_dir {self.log_dir} ({err.strerror or err})")
            else:
                _write_open_record(staging, rec)
        if problem is not None:
            self._skip(rec, win, *problem)
            return False
        sampler = None
        if self.system_metrics:
            try:
                sampler = SystemSampler(self.sample_interval_s).start()
            except Exception as err:  # a thread that cannot start: trace without metrics
                self._warn("sampler", f"system sampler could not start ({type(err).__name__}: {err}); "
                                      f"the trace is recorded without system metrics")
        marker_filter = None
        if self._in_fit and self._fit_legacy:
            marker_filter = _LegacyKerasMarkerFilter().install()
        before = getattr(_profiler_v2, "_profiler", None) if _profiler_v2 is not None else None
        try:
            if self._options is not None:
                tf.profiler.experimental.start(staging, options=self._options)
            else:
                tf.profiler.experimental.start(staging)
        except Exception as err:
            if _profiler_v2 is not None and before is None:
                # TensorFlow keeps the session object its start() created when the C++ side
                # refuses (a profiler server capture is running): drop the dead object our
                # call made, so later starts are not refused for ever.
                with _profiler_v2._profiler_lock:
                    if _profiler_v2._profiler is not None and isinstance(err, tf.errors.AlreadyExistsError):
                        _profiler_v2._profiler = None
            if marker_filter is not None:
                marker_filter.uninstall()
            if sampler is not None:
                sampler.stop()
            shutil.rmtree(staging, ignore_errors=True)
            _remove_empty(os.path.join(self.log_dir, STAGING_DIR))
            if isinstance(err, tf.errors.AlreadyExistsError):
                self._skip(rec, win, "other_profiler", "another profiler session was already running "
                                                       "(the profiler refused to start: it allows one session per process)")
            else:
                self._skip(rec, win, "start_failed", f"the profiler could not start ({type(err).__name__}: "
                                                     f"{str(err).splitlines()[0] if str(err) else ''})")
            return False
        session = getattr(_profiler_v2, "_profiler", None) if _profiler_v2 is not None else None
        self._active = _Open(rec, win, staging, session, sampler, marker_filter)
        _OPEN_AT_EXIT.add(self)
        return True

    def _advance_past(self, upto: int) -> None:
        self._consumed = max(self._consumed, upto)
        nxt = self.schedule.next_start(self._consumed)
        self._next_start = nxt if nxt is not None else _INF

    def _skip(self, rec: WindowRecord, win: Tuple[int, int], kind: str, reason: str,
              session_name: Optional[str] = None) -> None:
        rec.status, rec.reason, rec.closed_by = "skipped", reason, rec.closed_by or "skipped"
        self._advance_past(win[1])
        where = ""
        if kind != "log_dir":
            name = session_name or f"{_timestamp()}_steps{win[0]}-{win[1]}_skipped"
            folder = None
            try:
                folder = _unique_dir(os.path.join(self.log_dir, "plugins", "profile"), name)
                data = {"format": "tfbneck.skipped", "version": 1, "reason": reason,
                        "requested_steps": [list(w) for w in rec.requested], "host": socket.gethostname(),
                        "pid": os.getpid(), "time_unix_ns": time.time_ns(), "source": "BottleneckProfiler"}
                write_sidecar(folder, data, name=SKIPPED_NAME)
                rec.session_dir = folder
                where = f"; recorded in {folder}"
            except OSError as err:
                if folder is not None:
                    _remove_empty(folder)  # no empty session folder when the record cannot be written
                where = f"; could not record it ({err.strerror or err})"
        self._warn(kind if kind == "log_dir" else "skip:" + kind, f"steps {win[0]}-{win[1]} were not profiled: {reason}. "
                                   f"Training continues{where}",
                   repeat=f"steps {win[0]}-{win[1]} were not profiled: {reason}{where}")

    def _close_window(self, closed_by: str) -> None:
        a = self._active
        if a is None:
            return
        unfinished = None
        if self._trace is not None:
            if closed_by == "interrupted":
                # The step was cut by an exception: end its marker only after the profiler
                # stopped, so that the trace holds complete steps only.
                unfinished, self._trace = self._trace, None
            else:
                self._step_end(close_if_done=False)
        self._active = None
        _OPEN_AT_EXIT.discard(self)
        rec = a.record
        rec.closed_by = closed_by
        problem = None
        sysdata = None
        try:
            if _profiler_v2 is None or getattr(_profiler_v2, "_profiler", None) is a.session:
                tf.profiler.experimental.stop()
            else:
                problem = "the profiler session was stopped by other code during the window"
        except Exception as err:
            problem = f"the profiler could not save the trace ({type(err).__name__}: " \
                      f"{str(err).splitlines()[0] if str(err) else ''})"
        finally:
            if unfinished is not None:
                unfinished.__exit__(None, None, None)
            if a.marker_filter is not None:
                a.marker_filter.uninstall()
            if a.sampler is not None:
                sysdata = a.sampler.stop()
        markers = rec.markers
        p0, p1 = (markers[0][0], markers[-1][1]) if markers else a.window
        rec.steps = (p0, p1)
        # Later requested windows entirely inside what was recorded (steps_per_execution > 1).
        lo = a.window[1] + 1
        while lo <= p1:
            w = self.schedule.window_for(lo, p1)
            if w is None or w[1] > p1:
                break
            rec.requested.append(w)
            lo = w[1] + 1
        self._advance_past(max(a.window[1], p1))
        staging_root = os.path.join(self.log_dir, STAGING_DIR)
        exported = _exported_session(a.staging) if problem is None else None
        if problem is None and exported is None:
            problem = "the profiler wrote no trace file"
        if problem is not None:
            shutil.rmtree(a.staging, ignore_errors=True)
            _remove_empty(staging_root)
            self._skip(rec, a.window, "save_failed", problem)
            return
        ts = os.path.basename(exported)
        if sysdata is not None:
            sysdata["source"] = "BottleneckProfiler"
            sysdata["window"] = {"index": rec.index, "requested_steps": [list(w) for w in rec.requested],
                                 "profiled_steps": [p0, p1], "markers": [list(m) for m in markers],
                                 "steps_per_execution": self._spe, "closed_by": closed_by}
            try:
                write_sidecar(exported, sysdata, name=SIDECAR_NAME)
            except OSError as err:
                self._warn("sidecar", f"could not write the system metrics ({err.strerror or err}); "
                                      f"the trace is kept without them")
            if sysdata.get("sampler_error"):
                self._warn("sampler_error", f"the system sampler failed ({sysdata['sampler_error']}); the "
                                            f"window's system metrics are incomplete")
        parent = os.path.join(self.log_dir, "plugins", "profile")
        try:
            os.makedirs(parent, exist_ok=True)
            final = _unique_dir(parent, f"{ts}_steps{p0}-{p1}", create=False)
            os.rename(exported, final)
        except OSError as err:
            shutil.rmtree(a.staging, ignore_errors=True)
            _remove_empty(staging_root)
            self._skip(rec, a.window, "save_failed", f"could not move the trace into {parent} ({err.strerror or err})")
            return
        shutil.rmtree(a.staging, ignore_errors=True)
        _remove_empty(staging_root)
        rec.status, rec.session_dir = "profiled", final
        size = sum(os.path.getsize(os.path.join(final, f)) for f in os.listdir(final) if ".xplane.pb" in f)
        if size > LARGE_TRACE_BYTES:
            self._warn("large_trace", f"the trace of steps {p0}-{p1} is {size / 2**20:.0f} MiB: tools stall on "
                                      f"traces this size; profile fewer steps per window")
        if self.analyze and not self._exiting:
            self._start_analysis(rec)

    # ------------------------------------------------------------------------------------
    # Background analysis
    # ------------------------------------------------------------------------------------
    def _start_analysis(self, rec: WindowRecord) -> None:
        t = threading.Thread(target=self._analysis_worker, args=(rec,), name=f"tfbneck-analysis-{rec.index}")
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def _analysis_worker(self, rec: WindowRecord) -> None:
        try:
            report = (_analyze_in_child(rec.session_dir, self.analysis_timeout_s) if self.analyze == "process"
                      else _analyze_here(rec.session_dir))
        except Exception as err:
            rec.analysis_error = f"{type(err).__name__}: {err}"
            self._warn("analysis", f"analysis of {rec.session_dir} failed ({rec.analysis_error}); the trace is "
                                   f"kept: run `tfbneck analyze {rec.session_dir}`")
            return
        rec.report = report
        if report.get("status") != "ok":
            rec.analysis_error = report.get("error") or "analysis failed"
            self._warn("analysis", f"steps {rec.steps[0]}-{rec.steps[1]}: {rec.analysis_error}")
            return
        if self.verbose:
            logger.info(_verdict_line(rec, report))
        if self.write_scalars:
            try:
                self._write_scalars(rec, report)
            except Exception as err:
                self._warn("scalars", f"could not write scalars to {self.log_dir} ({type(err).__name__}: {err})")

    def _write_scalars(self, rec: WindowRecord, report: Dict) -> None:
        values = scalars_from_report(report)
        with self._writer_lock:
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(self.log_dir)
            with self._writer.as_default():
                for tag, value in values.items():
                    tf.summary.scalar(tag, value, step=rec.steps[1])
            self._writer.flush()

    # ------------------------------------------------------------------------------------
    def _warn(self, key: str, message: str, repeat: Optional[str] = None) -> None:
        """One WARNING per kind of problem; repeats of it go to DEBUG (``repeat`` text)."""
        if key in self._warned:
            if repeat:
                logger.debug(repeat)
            return
        self._warned.add(key)
        logger.warning(message)


# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------

def scalars_from_report(report: Dict) -> Dict[str, float]:
    """The ``bottleneck/*`` scalars written for one analysed session (see the class doc)."""
    out: Dict[str, float] = {}
    st = (report.get("steps") or {}).get("step_time_ms") or {}
    if st.get("mean") is not None:
        out["bottleneck/step_time_ms"] = float(st["mean"])
    pct = report.get("breakdown_pct") or {}
    for key in ("input", "device_compute", "host_compute", "kernel_launch", "collective", "idle"):
        if key in pct:
            out[f"bottleneck/{key}_pct"] = float(pct[key])
    if "host_to_device" in pct or "device_to_host" in pct:
        out["bottleneck/transfer_pct"] = float(pct.get("host_to_device", 0.0)) + float(pct.get("device_to_host", 0.0))
    if report.get("confidence") is not None:
        out["bottleneck/confidence"] = float(report["confidence"])
    verdict = report.get("bottleneck", "unknown")
    for kind in ("cpu", "device", "io", "network", "unknown"):
        out[f"bottleneck/is_{kind}"] = 1.0 if verdict == kind else 0.0
    system = report.get("system_metrics") or {}
    for src, tag in (("cpu_mean_pct", "system_cpu_pct"), ("busiest_core_mean_pct", "system_busiest_core_pct"),
                     ("proc_cpu_cores", "system_proc_cpu_cores"), ("gpu_util_pct", "system_gpu_util_pct")):
        if system.get(src) is not None:
            out[f"bottleneck/{tag}"] = float(system[src])
    return out


def _verdict_line(rec: WindowRecord, report: Dict) -> str:
    st = ((report.get("steps") or {}).get("step_time_ms") or {}).get("mean")
    pct = report.get("breakdown_pct") or {}
    recs = report.get("recommendations") or []
    kind = report.get("bottleneck", "unknown")
    head = f"{kind}-bound" if kind != "unknown" else "no verdict"
    parts = [f"steps {rec.steps[0]}-{rec.steps[1]}: {head} ({report.get('cause', '')}, "
             f"confidence {float(report.get('confidence') or 0):.2f})"]
    if st is not None:
        parts.append(f"{st:.1f} ms/step, {float(pct.get('input', 0.0)):.0f}% waiting for input")
    if recs:
        parts.append(f"fix first: {recs[0].get('title')}")
    return "; ".join(parts) + f" [{rec.session_dir}]"


_CHILD = r"""
import json, os, sys
try:
    os.nice(10)
except Exception:
    pass
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions
found = find_sessions(sys.argv[1]).sessions
if not found:
    print(json.dumps({"status": "error", "error": sys.argv[1] + ": no session found"}))
else:
    print(json.dumps(analyze_session(found[0]), default=lambda o: o.item() if hasattr(o, "item") else str(o)))
"""


def _analyze_in_child(session_dir: str, timeout_s: float) -> Dict:
    if not sys.executable:
        return _analyze_here(session_dir)
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-c", _CHILD, session_dir], capture_output=True, timeout=timeout_s,
                          env=env, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"analyzer exited with status {proc.returncode}: {tail[0]}")
    return json.loads(proc.stdout.decode("utf-8").strip().splitlines()[-1])


def _analyze_here(session_dir: str) -> Dict:
    from ..analysis.session import analyze_session
    from ..logdir import find_sessions
    found = find_sessions(session_dir).sessions
    if not found:
        return {"status": "error", "error": f"{session_dir}: no session found"}
    return analyze_session(found[0])


def _check_log_dir(log_dir) -> str:
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


def _profiler_options(options):
    if options is None:
        return None
    if isinstance(options, tf.profiler.experimental.ProfilerOptions):
        return options
    if not isinstance(options, dict):
        raise ValueError(f"profiler_options={options!r}: pass a dict such as {{'host_tracer_level': 2}} or a "
                         f"tf.profiler.experimental.ProfilerOptions")
    unknown = sorted(set(options) - set(_PROFILER_OPTION_KEYS))
    if unknown:
        raise ValueError(f"profiler_options: unknown key(s) {unknown}; known: {list(_PROFILER_OPTION_KEYS)}")
    return tf.profiler.experimental.ProfilerOptions(**options)


def _writable_problem(log_dir: str) -> Optional[str]:
    """None when ``log_dir`` can hold sessions, else a one-line reason."""
    probe = None
    try:
        folder = os.path.join(log_dir, "plugins", "profile")
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".tfbneck-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        with open(probe, "w") as f:
            f.write("ok")
        os.unlink(probe)
        return None
    except OSError as err:
        if probe is not None:  # created, but the write failed (disk full): do not leave it behind
            try:
                os.unlink(probe)
            except OSError:
                pass
        return f"log_dir {log_dir} is not writable ({type(err).__name__}: {err.strerror or err})"


def _is_tf_keras_model(model) -> bool:
    return any(c.__module__.split(".")[0] == "tf_keras" for c in type(model).__mro__) if model is not None else False


def _steps_per_execution(model) -> int:
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


def _exported_session(staging: str) -> Optional[str]:
    """The session folder the profiler wrote under ``<staging>/plugins/profile/``."""
    root = os.path.join(staging, "plugins", "profile")
    try:
        names = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    except OSError:
        return None
    for n in reversed(names):
        folder = os.path.join(root, n)
        if any(f.endswith((".xplane.pb", ".xplane.pb.gz")) for f in os.listdir(folder)):
            return folder
    return None


def _write_open_record(staging: str, rec: WindowRecord) -> None:
    """The record left in a window's staging folder while it is open (removed with the folder
    when the window closes). Read only if the process dies inside the window."""
    host, pid = socket.gethostname(), os.getpid()
    steps = ", ".join(f"{a}-{b}" for a, b in rec.requested)
    data = {"format": "tfbneck.skipped", "version": 1, "incomplete": True,
            "reason": f"the training process (pid {pid} on {host}) stopped inside the window of steps {steps} "
                      f"before its trace was saved (killed, crashed or out of memory); files left in this folder "
                      f"are partial. Delete the folder to dismiss this entry",
            "requested_steps": [list(w) for w in rec.requested], "host": host, "pid": pid,
            "time_unix_ns": time.time_ns(), "source": "BottleneckProfiler"}
    try:
        write_sidecar(staging, data, name=SKIPPED_NAME)
    except OSError:  # the disk is full or read-only: the trace will fail too, and say so
        pass


def _timestamp() -> str:
    return time.strftime("%Y_%m_%d_%H_%M_%S")  # the profiler's own session-name format


def _unique_dir(parent: str, name: str, create: bool = True) -> str:
    os.makedirs(parent, exist_ok=True)
    candidate, n = os.path.join(parent, name), 2
    while os.path.exists(candidate):
        candidate, n = os.path.join(parent, f"{name}_{n}"), n + 1
    if create:
        os.makedirs(candidate)
    return candidate


def _remove_empty(folder: str) -> None:
    try:
        os.rmdir(folder)
    except OSError:
        pass


def _ensure_handler() -> None:
    """Make the verdict lines visible: a stderr handler on the 'tfbneck' logger, unless the
    user configured one (then their configuration decides)."""
    if logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tfbneck: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
