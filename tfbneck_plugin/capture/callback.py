"""``BottleneckProfiler``: a Keras callback (and a step API for custom loops) that profiles
chosen training steps, records what the system did meanwhile, and says what limits
training.

One line in ``model.fit(callbacks=[...])`` gives, per window of steps:

* ``<log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>_steps<A>-<B>/<host>.xplane.pb``: the
  profiler's trace, with each profiled step wrapped in
  ``tf.profiler.experimental.Trace('train', step_num=<step>, _r=1)``, the step marker that
  XProf (TensorBoard's Profile tab) and ``tfbneck analyze`` both use to find steps;
* ``tfbneck_system_metrics.json`` beside it: CPU per core, the training process and its
  children, memory, disk, network and GPUs sampled every ~100 ms during the window (format
  in :mod:`tfbneck_plugin.records`), which the analyzer uses to tell a CPU-bound input
  pipeline from one that waits on storage;
* after the window, in the background: one log line with the verdict, the input share as the
  scalar ``bottleneck/input_pct`` and the verdict as the text ``bottleneck/verdict`` in
  ``<log_dir>`` (TensorBoard's Scalars and Text dashboards; :mod:`.summaries` lists every tag).

A window that could not be captured leaves ``tfbneck_skipped.json`` (``{"reason": ...}``)
in its session folder instead, which ``tfbneck analyze`` reports with the reason. A process
killed inside a window leaves the window's folder in ``<log_dir>/.tfbneck-staging/``, which
``tfbneck analyze`` reports as an incomplete window (its partial files are never read).

Every step is also timed (a monotonic clock read in the batch hook, no profiler): the
median and 90th percentile per epoch go to the scalars ``bottleneck/step_time_ms/p50`` and
``/p90`` and to ``<log_dir>/plugins/bottleneck/steptimes_*.json``, the trend the
TensorBoard tab draws with the windows marked. With ``on_slowdown=True`` a window opens by
itself when the step time departs from its recent baseline.

This class is a thin Keras adapter (hooks, ``step()``, ``close()``) over plain objects, each
with its own module and no TensorFlow: :mod:`.tracker` counts steps and decides when windows
open and close (timing them with :mod:`.steptime`, whose clock feeds the slowdown trigger);
:mod:`.controller` opens and closes the windows and their step markers, and closes a window
whose training went away (:mod:`.interrupts`); :mod:`.longjob` writes each step-time period
and tells, at the end, the slowdowns not captured; :mod:`.trend` keeps the trend file;
:mod:`.background` analyses each window afterwards; :mod:`.system_view` runs the whole run's
system view and the profiler server; :mod:`.loopstep` is ``with profiler.step():``;
:mod:`.safety` keeps every error out of training. The profiler's side is :mod:`.window` (one
window's capture: staging, sidecar, publishing, with :mod:`tfbneck_plugin.system.sampler`
sampling the system) over :mod:`.engines` (each Keras backend's profiler: TensorFlow's, JAX's,
PyTorch's), :mod:`.summaries` writes the TensorBoard summaries, :mod:`.arguments` checks the
constructor's arguments and finds Keras and its backend. This subpackage imports Keras and
the framework of the backend Keras runs on (no other); the rest of the package imports none.
"""
from __future__ import annotations

import atexit
import sys
from typing import Any, List, Optional

from .arguments import (check_arguments, check_backend, check_log_dir, check_max_window_steps, check_port, check_step,
                        check_step_time_every, check_system_interval, ensure_handler, is_tf_keras_model, keras_module,
                        logger, steps_per_execution)
from .arguments import profiler_options as _options_of
from .background import BackgroundAnalysis
from .controller import WindowController, WindowRecord
from .display import in_notebook
from .interrupts import WATCH, TrainingDriver, fit_frame
from .job import repeated_profiling_risk
from .longjob import StepTimeReporter, UncapturedSlowdowns
from .loopstep import NO_STEP_WARNING, LoopSteps, StepContext
from .safety import Guard, LogDirState, WarnOnce
from .schedule import (DEFAULT_WINDOW, MAX_WINDOW_STEPS, StepSchedule, as_schedule, long_window_warnings,
                       not_reached_warning, profile_steps, warnings_for)
from .steptime import SlowdownTrigger, TriggerHold, as_trigger
from .summaries import EventWriter
from .system_view import RunServices, RunSystemView
from .tracker import NEVER, StepTracker
from .trend import JobTrend
from .window import PROFILERS, current_job

__all__ = ["BottleneckProfiler", "WindowRecord", "profile_steps", "StepSchedule", "SlowdownTrigger"]

_keras, BACKEND = keras_module()  # Keras 3 on its backend, or tf-keras when TF_USE_LEGACY_KERAS=1
_Callback: Any = _keras.callbacks.Callback


@atexit.register
def _close_open_windows():  # pragma: no cover - exercised at interpreter exit
    for controller in WATCH.watched():
        controller.close_at_exit()


def _start_profiler_server(port: int) -> None:
    """The backend's profiler server on ``port``; PyTorch has none (RuntimeError, warned once)."""
    if BACKEND == "jax":
        import jax
        jax.profiler.start_server(port)
    elif BACKEND == "torch":
        raise RuntimeError("PyTorch has no profiler server: on-demand capture needs the TensorFlow or JAX backend")
    else:
        import tensorflow as tf
        tf.profiler.experimental.server.start(port)


class BottleneckProfiler(_Callback):
    """Profile chosen training steps, sample the system meanwhile, and diagnose each window.

    Each window of steps becomes its own profiling session under
    ``<log_dir>/plugins/profile/`` (TensorBoard shows it as a run named after
    ``log_dir``): the trace, with every step wrapped in the step marker
    ``Trace('train', step_num=<step>, _r=1)`` so that steps are found exactly by this
    analyzer and by TensorBoard's Profile plugin, plus ``tfbneck_system_metrics.json``.
    After a window the session is analysed in the background (training never waits): one
    log line with the verdict, the input share scalar and the verdict text in ``log_dir``.

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
        ``profile_steps(every=1000, length=5, start=100)`` for one window every 1000 steps,
        ``profile_steps(every_epochs=5, length=5)`` for steps 10-14 of every fifth epoch.
        Default ``(10, 14)``: step 1 traces and compiles the tf.function and the next few
        warm caches, allocators and the tf.data autotuner: their times mislead.
      max_window_steps: cap on a window's length (default 100) in marked steps (executions
        when ``steps_per_execution`` > 1): a longer one is cut there, said when ``fit`` begins;
        windows over 20 steps get a warning (traces grow with every step; 1 GB stalls tools).
      system_metrics: sample the system during windows (default True).
      sample_interval_s: seconds between samples (default 0.1; 0.01 to 10).
      analyze: after each window, analyse the session in the background: ``True`` or
        ``"process"`` (default; a child process at low priority: no GIL contention and no
        memory growth in the training process), ``"thread"`` (in this process), or
        ``False`` (no analysis: no verdict line, text or input share).
      write_scalars: write TensorBoard summaries to ``log_dir`` (default True), at most 8
        tags per run (:mod:`.summaries`): per analysed window, at its last step, the scalar
        ``bottleneck/input_pct`` (% of the step waiting for input) and the text
        ``bottleneck/verdict`` (the verdict, cause, confidence, step time and first fix);
        the step-time scalars (``step_time_every``) and system scalars (``system_interval_s``).
      analysis_timeout_s: give up on one window's analysis after this many seconds
        (default 600).
      profiler_options: ``tf.profiler.experimental.ProfilerOptions`` or a dict with any of
        ``host_tracer_level`` (default 2), ``python_tracer_level`` (0),
        ``device_tracer_level`` (1), ``delay_ms``.
      verbose: 1 (default) logs the verdict of each window; 0 logs only problems.
      on_slowdown: ``True`` (default thresholds), a :class:`SlowdownTrigger` (how much
        slower than the baseline, for how many consecutive steps and seconds, window
        length, cooldown, at most how many captures), or ``False`` (default). When the step
        time departs from its recent baseline a window of ``window_steps`` steps (at least
        ``window_seconds`` long) opens by itself (no step named for it); its sidecar says
        why (``window.trigger``: baseline and observed step times, the slow steps, when),
        its folder name ends in ``_slowdown``, and ``windows[i].kind`` is ``"triggered"``.
        Scheduled windows keep working; one beginning inside a triggered window is merged
        into it.
      step_time_every: write the step-time statistics every this many steps; default None:
        at each epoch's end (every 1000 steps in custom loops). Tags
        ``bottleneck/step_time_ms/p50`` and ``/p90`` (ms per step: the time between two
        consecutive step beginnings, per execution when ``steps_per_execution`` > 1; steps
        inside windows and the first 20 of the job are not counted), x axis the last step
        of the period; also in the trend file ``<log_dir>/plugins/bottleneck/steptimes_*.json``
        (format in :mod:`tfbneck_plugin.records`) that the Bottleneck tab draws.
      system_interval_s: sample the system all run long every this many seconds (default
        1.0; ``None`` or 0: off): machine CPU and the busiest core, the training process
        tree's cores, busiest thread and run-queue wait, accelerators (NVML), disk and
        network. Every 10 s the samples become scalars in ``log_dir`` (x axis: the step):
        ``system/cpu_pct`` (%), ``system/process_cores`` and ``system/other_cores`` (cores of
        the training process tree and of every other process) and, with accelerators,
        ``system/gpu_util_pct`` (the busiest one's, %); and a line of
        ``<log_dir>/plugins/bottleneck/system_*.json`` with every figure and the flowchart's
        triage (:mod:`tfbneck_plugin.system.triage`), which the tab's trend view draws.
        Sampling pauses between ``fit`` calls. Cost: docs/accuracy.md.
      profiler_server_port: start TensorFlow's profiler server on this port when training
        begins (``tf.profiler.experimental.server.start``), so that ``tfbneck watch
        --capture-port`` or the Profile tab's capture button can take a trace on demand.
      display: show each window's verdict in the notebook cell that runs ``fit``, once its
        background analysis finished (default: True inside a Jupyter kernel, else False);
        ``windows[i].report`` is a :class:`tfbneck_plugin.api.SessionReport` either way.

    Example::

        from tfbneck_plugin import BottleneckProfiler
        model.fit(ds, epochs=3, callbacks=[BottleneckProfiler("logs/run1", profile_steps=(10, 14))])
        # then: tfbneck analyze logs/run1   or   tensorboard --logdir logs

    Custom training loops (no ``fit``, or ``train_on_batch``, which never calls batch
    callbacks)::

        with BottleneckProfiler("logs/run1", profile_steps=(10, 14)) as profiler:
            it = iter(ds)
            for _ in range(num_steps):
                with profiler.step():          # counts steps from 1; or step(step_num=n)
                    x, y = next(it)            # fetched inside: its input wait is the step's
                    train_step(x, y)

    (Fetched outside ``step()``, the fetch is counted in the next step: docs/callback.md, "A custom training loop".)

    Never hurts training: when a window cannot be captured (another profiler session is
    already running in the process, ``TF_DISABLE_PROFILING`` is set, ``log_dir`` cannot
    be written, the profiler fails) training continues, one warning per kind of problem
    is logged (logger ``"tfbneck"``), and the window is recorded as skipped with the
    reason (``tfbneck_skipped.json``, and ``windows``). The callback never stops a
    profiler session it did not start. Training that ends inside a window saves the steps
    recorded so far; an exception or ``KeyboardInterrupt`` leaving ``fit`` or ``step()`` inside
    a window closes it within 0.25 s (:mod:`.interrupts`), its complete steps saved as a
    session marked interrupted. A failing sampler leaves the trace without (complete) system
    metrics, with a warning. Pending background analyses finish before the interpreter exits
    (at most ``analysis_timeout_s``). Outside windows each step costs a clock read and a few
    comparisons. The callback defines no ``on_train_batch_end`` (Keras 3 can keep dispatching
    batch-end hooks asynchronously where its backend allows it) and accepts tensor logs
    (tf-keras does not convert the logs to numpy, a device sync, for it).
    ``benchmarks/bench_steptime.py`` measures what timing every step costs (about 2 us per
    step with the trigger armed; docs/accuracy.md, "What the callback costs", has the figures).

    Caveats:
      * Keras' JAX and PyTorch backends: docs/keras_backends.md. The profiler is one per process:
        a window overlapping a ``TensorBoard(profile_batch=...)`` one loses to whichever started first.
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
        ``profiler_options``, ``on_slowdown``, ``step_time_every``, or Keras running on a
        backend other than TensorFlow, JAX or PyTorch.
    """

    def __init__(self, log_dir, profile_steps=DEFAULT_WINDOW, *, max_window_steps: int = MAX_WINDOW_STEPS,
                 system_metrics: bool = True, sample_interval_s: float = 0.1, analyze=True,
                 write_scalars: bool = True, analysis_timeout_s: float = 600.0, profiler_options=None,
                 verbose: int = 1, on_slowdown=False, step_time_every: Optional[int] = None, display=None,
                 system_interval_s: Optional[float] = 1.0, profiler_server_port: Optional[int] = None):
        super().__init__()
        self._supports_tf_logs = True  # tf-keras' __init__ sets False: logs would be synced to numpy per batch
        self.log_dir = check_log_dir(log_dir)
        self.max_window_steps = check_max_window_steps(max_window_steps)
        self.schedule: StepSchedule = as_schedule(profile_steps)  # lengths: in executions, at train begin
        check_arguments(sample_interval_s, analyze, analysis_timeout_s, verbose)
        self.backend = check_backend(BACKEND)  # "tensorflow", "jax" or "torch": keras.backend.backend()
        self.trigger: Optional[SlowdownTrigger] = as_trigger(on_slowdown)
        self.step_time_every = check_step_time_every(step_time_every)
        self.system_metrics = bool(system_metrics)
        self.sample_interval_s = float(sample_interval_s)
        self.analyze = "process" if analyze is True else analyze
        self.write_step_times = bool(write_scalars)
        self.write_scalars = bool(write_scalars) and bool(self.analyze)
        self.analysis_timeout_s = float(analysis_timeout_s)
        self.verbose = int(verbose)
        self.display = in_notebook() if display is None else bool(display)
        options = _options_of(profiler_options, self.backend)
        #: One WindowRecord per window reached, in order.
        self.windows: List[WindowRecord] = []
        self._warn = WarnOnce()
        self._guard = Guard(self._warn, cleanup=self._stop_after_error)
        self._log_dir = LogDirState(self.log_dir, self._warn)
        self._epoch: Optional[int] = None
        #: Step counting, step timing and window decisions (no TensorFlow): :class:`.tracker.StepTracker`.
        self.tracker = StepTracker(self.schedule, self.trigger, self.step_time_every, self.max_window_steps, self._warn)
        #: The trend file (step times per period, windows, verdicts): :class:`.trend.JobTrend`.
        self.trend = JobTrend(self.log_dir, self.windows, self.trigger.to_dict() if self.trigger else None,
                              self._warn, trigger_state_of=self.tracker.timer.trigger_state)
        self._events = EventWriter(self.log_dir, self._warn, tensorflow=self.backend == "tensorflow")
        write_values = self._events.write_values if self.write_step_times else None
        self._reporter = StepTimeReporter(self.tracker, self.trend, self._log_dir, write_values)
        self._slowdowns = UncapturedSlowdowns(self.tracker.timer, self.windows, self.trend.path, self._guard,
                                              self._warn, self._reporter.write_trend)
        self._analysis = BackgroundAnalysis(
            self.log_dir, self.analyze or "thread", self.analysis_timeout_s, self.write_scalars, bool(self.verbose),
            self._warn, logger.info, on_report=self._reporter.window_analysed, on_done=self._reporter.analysis_ended,
            writer=self._events, display=self.display,
            hold=TriggerHold(self.tracker.timer) if self.analyze == "thread" else None)
        self.profiler_server_port = check_port(profiler_server_port)
        #: The whole run's system view (None when ``system_interval_s`` is off).
        self.system_view: Optional[RunSystemView] = None
        if system_interval_s is not None and check_system_interval(system_interval_s):
            self.system_view = RunSystemView(self.log_dir, float(system_interval_s), write_values,
                                             lambda: self.tracker.seen, self._warn)
        self._services = RunServices(self.system_view, self._events.prepare if self.write_step_times else None,
                                     self.profiler_server_port, _start_profiler_server, self._guard, self._log_dir,
                                     self._warn)
        self._driver = TrainingDriver()
        self._profiler = PROFILERS[self.backend](self.log_dir, options, self.system_metrics, self.sample_interval_s, self._warn)
        self._windows = WindowController(
            self.tracker, self.windows, self._profiler, self._driver, self._log_dir, WATCH, self._guard, self._warn,
            model_of=lambda: self.model, on_published=self._analysis.start if self.analyze else None,
            on_change=self._reporter.write_trend)
        self._loop = LoopSteps(self.tracker, self._driver, self._windows, self._guard, self._services.start,
                               self._reporter.end_period)
        ensure_handler()
        for message in warnings_for(self.schedule):
            self._warn("schedule:" + message[:40], message)

    # -- tf-keras compatibility (its CallbackList asks these; Keras 3 ignores them) ----------
    def _implements_train_batch_hooks(self):
        return True

    def _implements_test_batch_hooks(self):
        return False

    def _implements_predict_batch_hooks(self):
        return False

    # -- Keras hooks ------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        """Keras hook: a ``fit`` begins."""
        self._guard(self._train_begin)

    def _train_begin(self):
        # A window still open: a previous fit (or loop) ended inside it without on_train_end, an exception.
        self._windows.interrupt(None, "the next fit began")
        risk = repeated_profiling_risk(current_job(), len(list(self.schedule.iter_windows(limit=2))), bool(self.trigger))
        if risk:
            self._warn("multiworker_risk", risk)
        frame = fit_frame(sys._getframe(2))
        self._driver.fit_began(frame, is_tf_keras_model(self.model))
        self._profiler.fit_began(frame, self.model)
        self.tracker.spe = steps_per_execution(self.model)
        for message in long_window_warnings(self.schedule, self.tracker.spe, self.max_window_steps):
            self._warn("cut:" + message[:40], message)  # windows cut at max_window_steps executions
        self.tracker.timer.restart()
        self.trend.ended = False
        if self._guard.disabled is None:  # step times are written by every fit, windows or not
            self._log_dir.check()
        self._services.start()

    def on_epoch_begin(self, epoch, logs=None):
        """Keras hook: an epoch begins (steps keep counting across epochs)."""
        self._epoch = epoch
        steps = (self.params or {}).get("steps")
        self.tracker.begin_epoch(steps if isinstance(steps, int) else None, epoch)
        if self.tracker.spe != 1 or self._driver.tf_keras:
            self.tracker.spe = steps_per_execution(self.model)  # tf-keras may autotune it

    def on_train_batch_begin(self, batch, logs=None):
        """Keras hook: a step begins. Outside windows: a clock read and a few comparisons."""
        step = self.tracker.fit_batch(batch)
        if step is not None:
            self._guard(self._fit_step, *step)

    def _fit_step(self, first, last):
        self._windows.step_end()
        if self.tracker.flush_due:
            self._reporter.end_period(first - 1, self._epoch)
        self._windows.step_begin(first, last)

    def on_test_begin(self, logs=None):
        """Keras hook: validation inside fit is not a training step; end the step marker."""
        if self._windows.marker is not None:
            self._guard(self._windows.step_end)

    def on_epoch_end(self, epoch, logs=None):
        """Keras hook: an epoch ended; end the step marker; the epoch's step times go to
        the scalars and the trend file (unless ``step_time_every`` is set)."""
        if self._windows.marker is not None:
            self._guard(self._windows.step_end)
        if self.tracker.flush_every is None:
            self._guard(self._reporter.end_period, self.tracker.seen, epoch)

    def on_train_end(self, logs=None):
        """Keras hook: ``fit`` ended; a window still open is saved with the steps it recorded."""
        self._guard(self._train_end)

    def _train_end(self):
        self._driver.fit_ended()
        self._services.pause()
        self._windows.training_ended()
        self._profiler.fit_ended()
        if self.tracker.flush_every is not None:
            self._reporter.end_period(self.tracker.seen, self._epoch)
        self._slowdowns.at_end("training ended")
        self.trend.ended = True
        seen = self.tracker.seen
        if self._log_dir.problem is None and seen:
            self.trend.write()
        if not self.windows and self._guard.disabled is None and self.tracker.next_start != NEVER and seen:
            self._warn("not_reached", not_reached_warning(seen, self.tracker.first_window()))

    # -- custom loops and the end ----------------------------------------------------------
    def step(self, step_num: Optional[int] = None, batches: int = 1) -> StepContext:
        """Context manager around one training step of a custom loop.

        Args:
          step_num: this step's number (1-based, as in ``profile_steps``); default: the
            previous step's last batch + 1 (the first call is step 1).
          batches: batches this step processes (a ``tf.function`` looping over several
            batches per call); they count toward the schedule like Keras'
            ``steps_per_execution``.

        Example (the batch fetched inside the step, so its input wait counts in it)::

            with profiler.step():
                x, y = next(it)
                loss = train_step(x, y)

        Raises:
          ValueError: ``step_num`` below 1 or ``batches`` below 1.
        """
        check_step(step_num, batches)
        return StepContext(self._loop, step_num, batches)

    def close(self, wait: bool = True, timeout: Optional[float] = None) -> None:
        """End any open window (saving its trace) and, with ``wait``, wait for the
        background analyses (at most ``timeout`` seconds). Safe to call more than once.

        A profiler closed without having seen a single training step warns once: it was
        neither passed to ``fit`` nor driven by :meth:`step` (a loop over
        ``model.train_on_batch``, which calls no callbacks, needs ``with profiler.step():``).
        """
        if self._windows.marker is not None:
            self._guard(self._windows.step_end, False)
        if self._windows.capture is not None:
            self._guard(self._windows.close, "closed")
        if self.tracker.flush_every is not None and not self._driver.in_fit:
            self._guard(self._reporter.end_period, self.tracker.seen, None)
        self._guard(self._slowdowns.at_end, "the profiler was closed")
        if self._log_dir.problem is None and self.tracker.seen:
            self.trend.ended = True
            self._guard(self.trend.write)
        self._guard(self._services.pause)
        if self.tracker.seen == 0 and self._guard.disabled is None:
            self._warn("no_step", NO_STEP_WARNING)
        if wait:
            self.wait_for_analysis(timeout)
        self._events.flush()

    def wait_for_analysis(self, timeout: Optional[float] = None) -> bool:
        """Wait for the background analyses started so far; True when all finished."""
        return self._analysis.wait(timeout)

    def __enter__(self) -> "BottleneckProfiler":
        return self

    def __exit__(self, *exc):
        self.close(wait=False)
        return False

    @property
    def _capture(self):
        """The open window's capture (:attr:`.controller.WindowController.capture`), None between windows."""
        return self._windows.capture

    def _stop_after_error(self, reason: str) -> None:
        """The guard's cleanup: no window opens any more, the open one is dropped."""
        self._windows.abandon(reason)
