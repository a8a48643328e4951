"""The callback's collaborators, each driven directly without TensorFlow: ``BottleneckProfiler``
(``tfbneck_plugin/capture/callback.py``) is a Keras adapter over them.

* ``capture.controller``: the window controller with the real step tracker, a recording stand-in
  for TensorFlow's side (its capture writes a real session folder, its skip record the real
  record) and its own owner watch: the windows a schedule opens, a window the profiler refuses,
  an interrupted window, an internal error;
* ``capture.longjob``: the step-time period written to a real trend file and as scalars, and a
  slowdown that training ended before it was confirmed;
* ``capture.safety``: one warning per kind, the guard, an unwritable ``log_dir``;
* ``capture.interrupts``: which owner a window takes; ``capture.steptime.TriggerHold``;
  ``capture.system_view.RunServices``' profiler server.

The real fits that drive them through Keras are ``tests/test_callback.py``,
``tests/test_interrupts.py`` and ``tests/test_slowdown.py``.
"""
import logging
import os
import subprocess
import sys
import threading

import pytest

from support.paths import ROOT
from test_steptime import Clock, run_steps, trig
from tfbneck_plugin.capture.controller import WindowController, WindowRecord
from tfbneck_plugin.capture.interrupts import OwnerWatch, TrainingDriver
from tfbneck_plugin.capture.longjob import StepTimeReporter, UncapturedSlowdowns
from tfbneck_plugin.capture.safety import Guard, LogDirState, WarnOnce
from tfbneck_plugin.capture.schedule import profile_steps
from tfbneck_plugin.capture.steptime import StepTimer, TriggerHold
from tfbneck_plugin.capture.system_view import RunServices
from tfbneck_plugin.capture.tracker import NEVER, StepTracker
from tfbneck_plugin.capture.trend import JobTrend
from tfbneck_plugin.records import (FORMAT, SIDECAR_NAME, SKIPPED_NAME, VERSION, read_sidecar, read_skip_record,
                                    read_step_times, write_sidecar, write_skip_record)

#: The collaborators' modules: none of them may import TensorFlow.
PARTS = ["controller", "longjob", "safety", "interrupts", "loopstep", "steptime", "system_view", "trend",
         "tracker", "background", "summaries"]


class Warnings:
    """A ``warn(key, message, repeat=None)`` that keeps what it was told."""

    def __init__(self):
        self.said = []

    def __call__(self, key, message, repeat=None):
        self.said.append((key, message))

    def keys(self):
        return [k for k, _ in self.said]


class Marker:
    """A step marker that logs its enter and exit."""

    def __init__(self, log, step):
        self.log, self.step = log, step

    def __enter__(self):
        self.log.append(("marker+", self.step))
        return self

    def __exit__(self, *exc):
        self.log.append(("marker-", self.step))
        return False


class Capture:
    """One window's capture as TensorFlow's side would do it, without a profiler: ``publish``
    writes a real session folder with the sidecar under ``<log_dir>/plugins/profile/``."""

    def __init__(self, log, log_dir, record, window):
        self.log, self.log_dir, self.record, self.window = log, log_dir, record, window

    def stop(self, unfinished=None):
        self.log.append(("stop", self.window))
        if unfinished is not None:
            unfinished.__exit__(None, None, None)
        return None, {"format": FORMAT, "version": VERSION, "samples": []}

    def publish(self, closed, spe, closed_by, sysdata):
        folder = os.path.join(self.log_dir, "plugins", "profile", f"s_steps{closed.steps[0]}-{closed.steps[1]}")
        os.makedirs(folder)
        sysdata["window"] = {"profiled_steps": list(closed.steps), "markers": [list(m) for m in closed.markers],
                             "closed_by": closed_by, "steps_per_execution": spe}
        write_sidecar(folder, sysdata, name=SIDECAR_NAME)
        self.record.status, self.record.session_dir = "profiled", folder
        return None

    def discard(self):
        self.log.append(("discard", self.window))

    def abandon(self):
        self.log.append(("abandon", self.window))


class Profiler:
    """TensorFlow's side of the windows (``window.TensorFlowProfiler``), recording its calls;
    ``refuse``: windows whose capture cannot start, with why."""

    def __init__(self, log_dir, refuse=None):
        self.log_dir, self.refuse, self.log = log_dir, dict(refuse or {}), []

    def open(self, record, window, log_dir_problem, filter_legacy):
        self.log.append(("open", window, filter_legacy))
        if window in self.refuse:
            return None, self.refuse[window]
        return Capture(self.log, self.log_dir, record, window), None

    def marker(self, step):
        return Marker(self.log, step)

    def record_skip(self, record, window, reason):
        folder = os.path.join(self.log_dir, "plugins", "profile", f"s_steps{window[0]}-{window[1]}_skipped")
        os.makedirs(folder)
        write_skip_record(folder, reason, record.requested, trigger=record.trigger)
        record.session_dir = folder
        return f"; recorded in {folder}"


def controller(tmp_path, schedule, refuse=None):
    """A window controller as the callback builds one, over the real step tracker."""
    warn = Warnings()
    tracker = StepTracker(schedule)
    windows, published, changes = [], [], []
    prof = Profiler(str(tmp_path), refuse)
    ctl = {}
    guard = Guard(warn, cleanup=lambda reason: ctl["c"].abandon(reason))
    ctl["c"] = WindowController(tracker, windows, prof, TrainingDriver(), LogDirState(str(tmp_path), warn),
                                OwnerWatch(), guard, warn, model_of=lambda: None, on_published=published.append,
                                on_change=lambda: changes.append(len(windows)))
    return ctl["c"], tracker, windows, prof, warn, guard, published, changes


def fit_steps(ctl, tracker, batches):
    """What the callback does for one epoch of ``batches`` batches in ``fit`` (spe 1)."""
    tracker.begin_epoch(batches, 0)
    for batch in range(batches):
        step = tracker.fit_batch(batch)
        if step is not None:
            ctl.step_end()
            ctl.step_begin(*step)
    ctl.step_end()


def test_a_scheduled_window_wraps_exactly_its_steps_and_is_published(tmp_path):
    ctl, tracker, windows, prof, warn, _, published, changes = controller(tmp_path, profile_steps((3, 5)))
    fit_steps(ctl, tracker, 8)
    (rec,) = windows
    assert (rec.index, rec.requested, rec.steps, rec.markers) == (0, [(3, 5)], (3, 5), [(3, 3), (4, 4), (5, 5)])
    assert (rec.status, rec.closed_by, rec.kind, rec.trigger) == ("profiled", "completed", "scheduled", None)
    # Each step's marker opens at its beginning and ends before the next; the profiler stops after the last.
    assert prof.log == [("open", (3, 5), False), ("marker+", 3), ("marker-", 3), ("marker+", 4), ("marker-", 4),
                        ("marker+", 5), ("marker-", 5), ("stop", (3, 5))]
    side = read_sidecar(os.path.join(rec.session_dir, SIDECAR_NAME))
    assert side["window"]["markers"] == [[3, 3], [4, 4], [5, 5]] and side["window"]["closed_by"] == "completed"
    assert published == [rec] and changes == [1] and warn.said == []
    assert ctl.capture is None and ctl.marker is None and ctl.owner is None and tracker.next_start == NEVER


def test_a_window_the_profiler_refuses_is_recorded_as_skipped_and_the_next_one_opens(tmp_path):
    reason = "another profiler session was already running in this process"
    ctl, tracker, windows, prof, warn, _, published, changes = controller(
        tmp_path, profile_steps((2, 3), (6, 7)), refuse={(2, 3): ("other_profiler", reason)})
    fit_steps(ctl, tracker, 10)
    skipped, profiled = windows
    assert (skipped.status, skipped.reason, skipped.closed_by) == ("skipped", reason, "skipped")
    record = read_skip_record(os.path.join(skipped.session_dir, SKIPPED_NAME))
    assert record.reason == reason and record.requested_steps == [(2, 3)]
    assert warn.said == [("skip:other_profiler", f"steps 2-3 were not profiled: {reason}. Training continues; "
                                                 f"recorded in {skipped.session_dir}")]
    assert (profiled.index, profiled.steps, profiled.status) == (1, (6, 7), "profiled")
    assert published == [profiled] and changes == [2]


def test_an_interrupted_window_keeps_its_complete_steps_and_says_how(tmp_path):
    ctl, tracker, windows, prof, warn, _, published, _ = controller(tmp_path, profile_steps((3, 6)))
    for n in (1, 2, 3, 4):  # a custom loop: step 4 raises inside the window
        step = tracker.loop_step(None, 1)
        if step is not None:
            ctl.step_end()
            ctl.step_begin(*step)
    ctl.interrupt("KeyboardInterrupt", "the exception left profiler.step()")
    (rec,) = windows
    assert rec.closed_by == "interrupted" and rec.steps == (3, 3) and rec.markers == [(3, 3)]
    assert rec.interrupted == {"steps_recorded": 1, "markers_recorded": 1, "exception": "KeyboardInterrupt",
                               "detected": "the exception left profiler.step()"}
    # The cut step's marker ends only after the profiler stopped: the trace holds complete steps.
    assert prof.log[-2:] == [("stop", (3, 6)), ("marker-", 4)]
    assert warn.keys() == ["interrupted"] and "after step 3, with KeyboardInterrupt" in warn.said[0][1]
    assert published == [rec]


def test_an_internal_error_turns_profiling_off_and_drops_the_open_window(tmp_path):
    ctl, tracker, windows, prof, warn, guard, published, _ = controller(tmp_path, profile_steps((2, 4), (8, 9)))
    tracker.begin_epoch(10, 0)
    for batch in range(2):
        step = tracker.fit_batch(batch)
        if step is not None:
            guard(ctl.step_end)
            guard(ctl.step_begin, *step)

    def broken():
        raise RuntimeError("disk on fire")
    assert guard(broken) is None and guard.disabled == "RuntimeError: disk on fire"
    (rec,) = windows
    assert (rec.status, rec.reason) == ("skipped", "internal error: RuntimeError: disk on fire")
    assert prof.log[-1] == ("abandon", (2, 4)) and ctl.capture is None and ctl.marker is None
    assert tracker.next_start == NEVER and tracker.stopped  # no window opens any more
    assert guard(ctl.step_begin, 8, 8) is None and len(windows) == 1 and published == []
    assert warn.keys() == ["internal"]


def period_tracker(step_s, steps):
    """A step tracker whose clock is a test clock; ``steps`` loop steps of ``step_s`` seconds each."""
    clock = Clock()
    tracker = StepTracker(profile_steps((10 ** 8, 10 ** 8)))
    tracker.timer = StepTimer(None, warmup_steps=0, clock=clock)
    for _ in range(steps):
        tracker.loop_step(None, 1)
        clock.t += step_s
    return tracker


def test_a_period_goes_to_the_trend_file_and_the_scalars(tmp_path):
    tracker = period_tracker(0.010, 11)  # 11 ticks: 10 timed steps of 10 ms
    windows, warn, written = [], Warnings(), []
    trend = JobTrend(str(tmp_path), windows, None, warn)
    reporter = StepTimeReporter(tracker, trend, LogDirState(str(tmp_path), warn),
                                lambda values, step: written.append((values, step)))
    reporter.end_period(10, 0)
    (point,) = read_step_times(trend.path)["points"]
    assert (point["step"], point["first_step"], point["epoch"], point["n"]) == (10, 1, 0, 10)
    assert point["p50_ms"] == pytest.approx(10.0) and point["p90_ms"] == pytest.approx(10.0)
    assert written == [({"bottleneck/step_time_ms/p50": point["p50_ms"],
                         "bottleneck/step_time_ms/p90": point["p90_ms"]}, 10)]
    assert reporter.first == 11 and warn.said == []


def test_nothing_is_written_while_log_dir_cannot_be_written(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    warn, written = Warnings(), []
    state = LogDirState(str(blocked), warn)
    assert state.check() is not None and state.problem.startswith(f"log_dir {blocked} is not writable")
    assert warn.keys() == ["log_dir"] and "no profiling window will be recorded" in warn.said[0][1]
    trend = JobTrend(str(blocked), [], None, warn)
    reporter = StepTimeReporter(period_tracker(0.010, 11), trend, state,
                                lambda values, step: written.append(values))
    reporter.end_period(10, 0)
    reporter.write_trend()
    assert written == [] and trend.points == [] and blocked.read_text() == "not a folder"


def test_a_slowdown_training_ended_inside_is_a_window_that_came_too_late(tmp_path):
    clock = Clock()
    timer = StepTimer(trig(min_seconds=10.0), clock=clock)
    run_steps(timer, clock, [0.5] * 5 + [0.010] * 100 + [0.100] * 60)  # 5.9 s slow: not 10 s yet
    windows, warn, rewrites = [WindowRecord(index=0, requested=[(3, 5)])], Warnings(), []
    guard = Guard(warn, cleanup=lambda reason: None)
    UncapturedSlowdowns(timer, windows, "trend.json", guard, warn, lambda: rewrites.append(1)).at_end("training ended")
    late = windows[1]
    assert (late.index, late.requested, late.steps) == (1, [(106, 164)], (106, 164))
    assert (late.status, late.closed_by, late.kind) == ("skipped", "too_late", "triggered")
    assert late.trigger["outcome"] == "too_late" and late.trigger["slow_step_count"] == 59
    assert late.reason.startswith("training ended while the steps were slow") and "for 59 steps" in late.reason
    assert warn.said == [("too_late", late.reason)] and rewrites == [1]
    assert timer.unfinished_run() is None  # told once


def test_one_warning_per_kind_then_debug(caplog):
    log = logging.getLogger("test_capture_parts.warnings")  # not under "tfbneck", whose propagation a handler may stop
    warn = WarnOnce(log)
    with caplog.at_level(logging.DEBUG, logger=log.name):
        warn("disk", "the disk is full")
        warn("disk", "the disk is full again", repeat="still full")
        warn("disk", "and again")
        warn("port", "port taken")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "the disk is full"), ("DEBUG", "still full"), ("WARNING", "port taken")]
    assert warn.said == {"disk", "port"}


def test_the_guard_runs_until_the_first_error_and_cleans_up_once():
    warn, cleaned = Warnings(), []
    guard = Guard(warn, cleanup=cleaned.append)
    assert guard(lambda a, b: a + b, 2, 3) == 5 and guard.disabled is None
    assert guard(int, "x") is None
    assert guard.disabled == "ValueError: invalid literal for int() with base 10: 'x'"
    assert cleaned == [guard.disabled]
    assert warn.said == [("internal", "internal error, profiling is off for the rest of this run (training "
                                      f"continues): {guard.disabled}")]
    assert guard(lambda: 1) is None and cleaned == [guard.disabled]  # off: nothing runs any more


def test_a_window_takes_the_owner_of_the_training_that_drives_it():
    driver = TrainingDriver()
    assert driver.owner() is None and not driver.filter_legacy
    here = sys._getframe()
    loop = driver.loop_stepped(here)
    assert driver.owner() is loop and loop.kind == "loop" and loop.thread_id == threading.get_ident()
    driver.fit_began(here, tf_keras=True)
    assert driver.owner() is driver.fit and driver.fit.kind == "fit" and driver.filter_legacy
    assert driver.loop_stepped(here) is None  # inside fit the fit frame owns the windows
    driver.fit_ended()
    assert driver.owner() is loop and not driver.filter_legacy
    driver.fit_began(None, tf_keras=False)  # no fit frame found: the window has no owner to watch
    assert driver.owner() is None


def test_the_trigger_is_held_while_analyses_run():
    timer = StepTimer(None, clock=Clock())
    hold = TriggerHold(timer)
    hold.start()
    hold.start()
    assert timer.holds == 2
    hold.end()
    hold.end()
    hold.end()
    assert timer.holds == 0


def test_the_profiler_server_starts_once_and_a_failure_is_said_once():
    warn, ports = Warnings(), []
    guard = Guard(warn, cleanup=lambda reason: None)

    def refuse(port):
        ports.append(port)
        raise OSError("address in use")
    services = RunServices(None, None, 6009, refuse, guard, LogDirState("unused", warn), warn)
    services.start()
    services.start()
    services.pause()
    assert ports == [6009] and services.server_started
    assert warn.said == [("profiler_server", "the profiler server could not start on port 6009 "
                                             "(OSError: address in use)")]


def test_the_collaborators_import_no_tensorflow():
    code = ("import sys\n"
            + "".join(f"import tfbneck_plugin.capture.{m}\n" for m in PARTS)
            + "bad = [m for m in sys.modules if m == 'tensorflow' or m.startswith(('tensorflow.', 'keras'))]\n"
              "assert not bad, bad[:5]\nprint('ok')")
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=path))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
