"""The capture of one profiling window: a staging folder with its "incomplete" record,
the system sampler, the backend's profiler session (start, stop, export: :mod:`.engines`),
the sidecar, and publishing the finished session into ``<log_dir>/plugins/profile/``; or the
skip record of a window that could not be captured; and :class:`WindowProfiler` (with
:class:`TensorFlowProfiler`, :class:`JaxProfiler` and :class:`TorchProfiler`), what the window
controller (:mod:`.controller`) asks of the profiler. Imports no framework itself: the
engine imports its own when a window opens (TensorFlow only on the TensorFlow backend, and
for tf-keras' marker filter).

Sessions are written in ``<log_dir>/.tfbneck-staging/<pid>-<n>-<id>/`` first and moved
into ``plugins/profile/`` complete with their sidecar, so a reader never sees a trace
without its system metrics. The staging folder holds a record saying the window is
incomplete from the moment it opens: a process killed inside the window leaves it
behind, and ``tfbneck analyze`` reports it (:mod:`tfbneck_plugin.logdir`).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from typing import Any, Callable, Dict, Optional, Tuple

from ..errors import first_line
from ..records import FORMAT, SIDECAR_NAME, STAGING_DIR, VERSION, write_sidecar, write_skip_record
from ..system.sampler import SystemSampler
from .controller import WindowRecord
from .engines import JaxEngine, JaxSteps, TensorFlowEngine, TorchEngine, fit_input
from .job import job_info, session_suffix, with_job
from .tracker import ClosedWindow

#: The trace files a session folder holds: XSpace (TensorFlow, JAX) and Kineto (PyTorch).
TRACE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz", ".pt.trace.json", ".pt.trace.json.gz")
#: A saved trace above this size (bytes) gets a warning: TensorBoard, XProf and this
#: analyzer stall on traces of 1 GB (seen in the wild); 500 MiB leaves a margin.
LARGE_TRACE_BYTES = 500 * 1024 * 1024

Range = Tuple[int, int]
#: ``warn(key, message)``: the callback's one-warning-per-kind logger.
Warn = Callable[[str, str], None]


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


class LegacyKerasMarkerFilter:
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

    def install(self) -> "LegacyKerasMarkerFilter":
        """Replace tf-keras' ``Trace``; returns ``self``."""
        original: Any = self._module.Trace
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
        """Put tf-keras' ``Trace`` back (only if it is still ours)."""
        if self._replacement is not None and self._module.Trace is self._replacement:
            self._module.Trace = self._original
        self._original = self._replacement = None


def running_session(engine: Any = None):
    """The running profiler session of ``engine``'s framework (default TensorFlow's), or None."""
    return (engine or TensorFlowEngine()).running()


def precheck(log_dir_problem: Optional[str], engine: Any = None) -> Optional[Tuple[str, str]]:
    """Why a window cannot open now, as ``(kind, reason)``, or None."""
    engine = engine or TensorFlowEngine()
    off = engine.disabled()
    if off:
        return "disabled", off
    if log_dir_problem:
        return "log_dir", log_dir_problem
    holder = engine.running()
    own = WindowCapture.holding
    if holder is not None and own is not None and own.session is holder:
        w = own.window
        return "own_window", (f"the profiler is held by this process' own BottleneckProfiler window {own.record.index} "
                              f"(steps {w[0]}-{w[1]}, log_dir {own.log_dir}), still open because the training "
                              f"that owns it is still running")
    if holder is not None:
        return "other_profiler", engine.other_running()
    return None


class WindowCapture:
    """One open window: its staging folder, sampler, marker filter and profiler session.

    Build it with :meth:`open`; end it with :meth:`stop` then :meth:`publish`, or
    :meth:`abandon` after an internal error.
    """
    #: The window whose profiler session runs now (at most one per process), for the
    #: message of a window that cannot start: whose session holds the profiler.
    holding: Optional["WindowCapture"] = None

    def __init__(self, log_dir: str, record: WindowRecord, window: Range, warn: Warn, engine: Any = None):
        self.log_dir, self.record, self.window, self._warn = log_dir, record, window, warn
        self.engine = engine or TensorFlowEngine()
        self.staging = os.path.join(log_dir, STAGING_DIR, f"{os.getpid()}-{record.index}-{uuid.uuid4().hex[:8]}")
        self.session = None
        self.sampler: Optional[SystemSampler] = None
        self.marker_filter: Optional[LegacyKerasMarkerFilter] = None
        self.input_marks: Optional[JaxSteps.Marking] = None
        #: Written in the sidecar: the Keras backend (``backend``) and what fed the fit (``keras_input``).
        self.keras: Dict[str, str] = {}

    @classmethod
    def open(cls, log_dir: str, record: WindowRecord, window: Range, *, options=None, system_metrics: bool,
             sample_interval_s: float, filter_legacy: bool, warn: Warn, engine: Any = None
             ) -> Tuple[Optional["WindowCapture"], Optional[Tuple[str, str]]]:
        """Start capturing ``window``: staging folder + record, sampler, profiler (``engine``,
        :mod:`.engines`; default TensorFlow's with ``options``).

        Returns:
          ``(capture, None)``, or ``(None, (kind, reason))`` when the window cannot be
          captured (nothing is left behind then).
        """
        cap = cls(log_dir, record, window, warn, engine or TensorFlowEngine(options))
        try:
            os.makedirs(cap.staging)
        except OSError as err:
            return None, ("log_dir", f"cannot write to log_dir {log_dir} ({err.strerror or err})")
        try:
            write_skip_record(cap.staging, None, record.requested, incomplete=True)
        except OSError:  # the disk is full or read-only: the trace will fail too, and say so
            pass
        if system_metrics:
            try:
                cap.sampler = SystemSampler(sample_interval_s).start()
            except Exception as err:  # noqa: BLE001 - a thread that cannot start: trace without metrics
                warn("sampler", f"system sampler could not start ({type(err).__name__}: {err}); "
                                f"the trace is recorded without system metrics")
        if filter_legacy:
            cap.marker_filter = LegacyKerasMarkerFilter().install()
        problem = cap._start_profiler()
        return (None, problem) if problem else (cap, None)

    def _start_profiler(self) -> Optional[Tuple[str, str]]:
        try:
            self.session, problem = self.engine.start(self.staging)
        except Exception as err:  # noqa: BLE001 - the framework itself failed to import or start
            problem = ("start_failed", f"the profiler could not start ({type(err).__name__}: {first_line(err)})")
        if problem is not None:
            self._release()
            self._discard_staging()
            return problem
        WindowCapture.holding = self
        return None

    def _release(self) -> Optional[Dict]:
        """Uninstall the marker filter and the input marks, stop the sampler; returns the sampler's data."""
        if self.input_marks is not None:
            self.input_marks.remove()
            self.input_marks = None
        if self.marker_filter is not None:
            self.marker_filter.uninstall()
            self.marker_filter = None
        sampler, self.sampler = self.sampler, None
        return sampler.stop() if sampler is not None else None

    def _discard_staging(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        remove_empty(os.path.join(self.log_dir, STAGING_DIR))

    def stop(self, unfinished=None) -> Tuple[Optional[str], Optional[Dict]]:
        """Stop the profiler (it exports the trace into the staging folder), then end
        ``unfinished`` (a step marker cut by an exception: ended after the profiler
        stopped, so the trace holds complete steps only), the filter and the sampler.

        Returns:
          ``(problem, sidecar dict)``: problem is None when the trace was saved.
        """
        problem = None
        sysdata = None
        if WindowCapture.holding is self:
            WindowCapture.holding = None
        try:
            problem = self.engine.stop(self.staging, self.session)
        except Exception as err:  # noqa: BLE001 - export failed (disk full, ...): the window is skipped
            problem = f"the profiler could not save the trace ({type(err).__name__}: {first_line(err)})"
        finally:
            if unfinished is not None:
                unfinished.__exit__(None, None, None)
            sysdata = self._release()
        return problem, sysdata

    def publish(self, closed: ClosedWindow, spe: int, closed_by: str, sysdata: Optional[Dict]) -> Optional[str]:
        """Write the sidecar beside the exported trace and move the session into
        ``plugins/profile/<timestamp>_steps<A>-<B>``; the staging folder goes away.

        Returns:
          None on success (``record.status`` is then ``"profiled"`` and
          ``record.session_dir`` the published folder), else why it failed (the window is
          to be recorded as skipped).
        """
        exported = exported_session(self.staging)
        if exported is None:
            self._discard_staging()
            return "the profiler wrote no trace file"
        job = current_job()  # a multi-worker job: recorded in the sidecar, named in the folder
        sysdata = with_job(sysdata, job, FORMAT, VERSION)
        if sysdata is None and (self.record.trigger is not None or self.engine.backend != "tensorflow"):
            # why it opened, and which backend ran, are kept without metrics too
            sysdata = {"format": FORMAT, "version": VERSION, "samples": []}
        if sysdata is not None:
            self._write_sidecar(exported, closed, spe, closed_by, sysdata)
        parent = os.path.join(self.log_dir, "plugins", "profile")
        p0, p1 = closed.steps
        try:
            os.makedirs(parent, exist_ok=True)
            why = "_slowdown" if self.record.kind == "triggered" else ""  # the session list says why it exists
            final = unique_dir(parent, f"{os.path.basename(exported)}_steps{p0}-{p1}{why}{session_suffix(job)}",
                               create=False)
            os.rename(exported, final)
        except OSError as err:
            self._discard_staging()
            return f"could not move the trace into {parent} ({err.strerror or err})"
        self._discard_staging()
        self.record.status, self.record.session_dir = "profiled", final
        size = sum(os.path.getsize(os.path.join(final, f)) for f in os.listdir(final) if f.endswith(TRACE_SUFFIXES))
        if size > LARGE_TRACE_BYTES:
            self._warn("large_trace", f"the trace of steps {p0}-{p1} is {size / 2**20:.0f} MiB: tools stall on "
                                      f"traces this size; profile fewer steps per window")
        return None

    def _write_sidecar(self, folder: str, closed: ClosedWindow, spe: int, closed_by: str, sysdata: Dict) -> None:
        rec = self.record
        sysdata["source"] = "BottleneckProfiler"
        sysdata["backend"] = self.engine.backend
        if self.keras.get("input"):
            sysdata["keras_input"] = self.keras["input"]
        sysdata["window"] = {"index": rec.index, "requested_steps": [list(w) for w in rec.requested],
                             "profiled_steps": list(closed.steps), "markers": [list(m) for m in closed.markers],
                             "steps_per_execution": spe, "closed_by": closed_by,
                             "kind": rec.kind, "trigger": rec.trigger, "interrupted": rec.interrupted}
        try:
            write_sidecar(folder, sysdata, name=SIDECAR_NAME)
        except OSError as err:
            self._warn("sidecar", f"could not write the system metrics ({err.strerror or err}); "
                                  f"the trace is kept without them")
        if sysdata.get("sampler_error"):
            self._warn("sampler_error", f"the system sampler failed ({sysdata['sampler_error']}); the "
                                        f"window's system metrics are incomplete")

    def discard(self) -> None:
        """Remove the staging folder (the window is recorded as skipped elsewhere)."""
        self._discard_staging()

    def abandon(self) -> None:
        """After an internal error: stop what runs (the profiler only if it is ours), keep nothing."""
        if WindowCapture.holding is self:
            WindowCapture.holding = None
        self._release()
        try:
            self.engine.drop(self.session)
        except Exception:  # noqa: BLE001, S110 - best effort: profiling is off from here on
            pass
        shutil.rmtree(self.staging, ignore_errors=True)


class WindowProfiler:
    """One backend's side of the windows, for :class:`.controller.WindowController`: a
    window's capture, the step marker, the record of a window that could not be captured.

    Args:
      log_dir: the callback's ``log_dir``.
      engine: the backend's profiler (:mod:`.engines`).
      system_metrics: sample the system during windows.
      sample_interval_s: seconds between those samples.
      warn: ``warn(key, message)``, one warning per kind.

    Attributes:
      input: what feeds the running fit (:func:`.engines.input_kind`), or None.
      steps: on JAX, the running fit's steps (:class:`.engines.JaxSteps`), or None.
    """

    def __init__(self, log_dir: str, engine: Any, system_metrics: bool, sample_interval_s: float, warn: Warn):
        self.log_dir, self.engine, self.warn = log_dir, engine, warn
        self.system_metrics, self.sample_interval_s = system_metrics, sample_interval_s
        self.input: Optional[str] = None
        self.steps: Optional[JaxSteps] = None

    def fit_began(self, frame: Any, model: Any) -> None:
        """A ``fit`` began in ``frame`` (None when not found) with ``model``: what feeds it is
        noted; on JAX its steps are wrapped (:class:`.engines.JaxSteps`). Never raises."""
        self.fit_ended()
        self.input = fit_input(frame)
        if self.engine.backend == "jax" and model is not None:
            try:
                self.steps = JaxSteps(model, self.input or "other")
            except Exception as err:  # noqa: BLE001 - unmarked steps still profile; training goes on
                self.warn("jax_steps", f"the steps could not be wrapped ({type(err).__name__}: {first_line(err)}); "
                                       f"profiled steps may end before their computation")

    def fit_ended(self) -> None:
        """The ``fit`` ended: the model's own ``train_function`` is put back."""
        steps, self.steps = self.steps, None
        if steps is not None:
            steps.remove()

    @property
    def backend(self) -> str:
        """The Keras backend whose profiler this is (``tensorflow``, ``jax`` or ``torch``)."""
        return self.engine.backend

    def open(self, record: WindowRecord, window: Range, log_dir_problem: Optional[str],
             filter_legacy: bool) -> Tuple[Optional[WindowCapture], Optional[Tuple[str, str]]]:
        """Start capturing ``window`` (after stopping a profiler whose window's close was cut,
        :func:`release_cut_close`): ``(capture, None)``, or ``(None, (kind, reason))`` when it
        cannot (:func:`precheck`, :meth:`WindowCapture.open`)."""
        release_cut_close()
        problem = precheck(log_dir_problem, self.engine)
        if problem is not None:
            return None, problem
        cap, problem = WindowCapture.open(self.log_dir, record, window, system_metrics=self.system_metrics,
                                          sample_interval_s=self.sample_interval_s, filter_legacy=filter_legacy,
                                          warn=self.warn, engine=self.engine)
        if cap is not None:
            cap.keras = {"backend": self.backend, **({"input": self.input} if self.input else {})}
            if self.steps is not None:
                cap.input_marks = self.steps.marking()
        return cap, problem

    def marker(self, step: int) -> Any:
        """The step marker of the step beginning at batch ``step`` (:mod:`.engines`): the
        marker the analyzer (and XProf, for XSpace traces) finds steps by."""
        return self.engine.marker(step)

    def record_skip(self, record: WindowRecord, window: Range, reason: str) -> str:
        """:func:`record_skip` in ``log_dir``."""
        return record_skip(self.log_dir, record, window, reason)

    def can_stop_here(self) -> bool:
        """Whether this thread may stop the running profiler (:meth:`.engines.TorchEngine.can_stop_here`)."""
        return getattr(self.engine, "can_stop_here", lambda: True)()


class TensorFlowProfiler(WindowProfiler):
    """TensorFlow's side of the windows (:class:`WindowProfiler`); ``options``:
    ``tf.profiler.experimental.ProfilerOptions`` or None (the profiler's defaults)."""

    def __init__(self, log_dir: str, options: Any, system_metrics: bool, sample_interval_s: float, warn: Warn,
                 **kwargs):
        super().__init__(log_dir, TensorFlowEngine(options), system_metrics, sample_interval_s, warn, **kwargs)


class JaxProfiler(WindowProfiler):
    """JAX's side of the windows (:class:`WindowProfiler`); ``options``:
    ``jax.profiler.ProfileOptions`` or None (:class:`.engines.JaxEngine`)."""

    def __init__(self, log_dir: str, options: Any, system_metrics: bool, sample_interval_s: float, warn: Warn,
                 **kwargs):
        super().__init__(log_dir, JaxEngine(options), system_metrics, sample_interval_s, warn, **kwargs)


class TorchProfiler(WindowProfiler):
    """PyTorch's side of the windows (:class:`WindowProfiler`); no options."""

    def __init__(self, log_dir: str, options: Any, system_metrics: bool, sample_interval_s: float, warn: Warn,
                 **kwargs):
        super().__init__(log_dir, TorchEngine(options), system_metrics, sample_interval_s, warn, **kwargs)


#: The profiler class of each Keras backend.
PROFILERS = {"tensorflow": TensorFlowProfiler, "jax": JaxProfiler, "torch": TorchProfiler}


def release_cut_close() -> bool:
    """Stop the profiler of a window whose close was itself cut (a ``KeyboardInterrupt``
    between the callback letting go of the window and the profiler's stop): nothing owns
    that session any more. Its trace is dropped, its record says why. Returns True when
    there was one."""
    held = WindowCapture.holding
    if held is None or held.record.closed_by is None or not held.engine.ours(held.session):
        return False
    held.abandon()
    held.record.status, held.record.reason = "skipped", "the window's close was interrupted; its trace was dropped"
    return True


def current_job() -> Optional[Dict]:
    """The multi-worker job of this process (:func:`.job.job_info`: ``TF_CONFIG``, else the
    strategy in scope), or None. Never raises."""
    tf = sys.modules.get("tensorflow")  # a strategy exists only where TensorFlow was imported
    try:
        strategy = tf.distribute.get_strategy() if tf is not None else None
    except Exception:  # noqa: BLE001 - no strategy to ask: TF_CONFIG alone decides
        strategy = None
    return job_info(strategy)


def record_skip(log_dir: str, record: WindowRecord, window: Range, reason: str,
                session_name: Optional[str] = None) -> str:
    """Write the skip record of ``window`` in a new session folder
    ``plugins/profile/<timestamp>_steps<A>-<B>_skipped``; sets ``record.session_dir``.

    Returns:
      A clause for the warning: ``"; recorded in <folder>"`` or ``"; could not record it (<why>)"``.
    """
    name = session_name or f"{timestamp()}_steps{window[0]}-{window[1]}_skipped"
    folder = None
    try:
        folder = unique_dir(os.path.join(log_dir, "plugins", "profile"), name)
        write_skip_record(folder, reason, record.requested, trigger=record.trigger)
    except OSError as err:
        if folder is not None:
            remove_empty(folder)  # no empty session folder when the record cannot be written
        return f"; could not record it ({err.strerror or err})"
    record.session_dir = folder
    return f"; recorded in {folder}"


def exported_session(staging: str) -> Optional[str]:
    """The session folder the profiler wrote under ``<staging>/plugins/profile/``."""
    root = os.path.join(staging, "plugins", "profile")
    try:
        names = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    except OSError:
        return None
    for n in reversed(names):
        folder = os.path.join(root, n)
        if any(f.endswith(TRACE_SUFFIXES) for f in os.listdir(folder)):
            return folder
    return None


def timestamp() -> str:
    """Now, in the profiler's own session-name format (``YYYY_MM_DD_HH_MM_SS``)."""
    return time.strftime("%Y_%m_%d_%H_%M_%S")


def unique_dir(parent: str, name: str, create: bool = True) -> str:
    """``parent/name``, or ``parent/name_2``, ``_3``... when taken; created unless ``create`` is False."""
    os.makedirs(parent, exist_ok=True)
    candidate, n = os.path.join(parent, name), 2
    while os.path.exists(candidate):
        candidate, n = os.path.join(parent, f"{name}_{n}"), n + 1
    if create:
        os.makedirs(candidate)
    return candidate


def remove_empty(folder: str) -> None:
    """Remove ``folder`` if it is empty; otherwise leave it."""
    try:
        os.rmdir(folder)
    except OSError:
        pass
