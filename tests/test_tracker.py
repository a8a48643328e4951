"""The step tracker (``tfbneck_plugin.capture.tracker``): which step training is at and when
windows open and close, without TensorFlow.

The driver below makes the calls BottleneckProfiler makes (Keras hooks: epoch begin, batch
begin per execution, epoch end, train end; custom loops: ``step()``), and plays the part
of the profiler: opening a window always works unless the test says otherwise. The
expected windows are those the real fits of ``tests/test_callback.py`` record (same
schedules, same ``steps_per_execution``), so a change here that would move a marker shows
up in microseconds.
"""
import subprocess
import sys

import pytest

from tfbneck_plugin.capture.schedule import profile_steps
from tfbneck_plugin.capture.tracker import NEVER, StepTracker


class Driver:
    """The callback's side of the protocol, recording what happened."""

    def __init__(self, schedule, refuse=(), max_steps=100):
        self.t = StepTracker(schedule, max_steps=max_steps)
        self.refuse = set(refuse)   # windows whose opening fails (e.g. another profiler)
        self.closed, self.skipped, self.marker_open = [], [], False

    # -- shared by fit and loops (capture.controller.WindowController.step_begin / step_end) -------------
    def begin(self, first, last):
        if self.t.window_passed(first):
            self.close()
        if self.t.window is None:
            win = self.t.window_to_open(first, last)
            if win is None:
                return
            if win in self.refuse:
                self.skipped.append(win)
                self.t.skip(win)
                return
            self.t.opened(win)
        self.t.step_began(first, last)
        self.marker_open = True

    def end(self, close_if_done=True):
        if not self.marker_open:
            return
        self.marker_open = False
        if self.t.step_ended() and close_if_done:
            self.close()

    def close(self):
        if self.marker_open:
            self.end(close_if_done=False)
        self.closed.append(self.t.close())

    # -- Keras fit --------------------------------------------------------------------
    def fit(self, epoch_batches, spe=1):
        self.t.spe = spe
        for epoch, n in enumerate(epoch_batches):
            self.t.begin_epoch(n, epoch)
            for batch in range(0, n, spe):
                step = self.t.fit_batch(batch)
                if step is not None:
                    self.end()
                    self.begin(*step)
            self.end()  # on_epoch_end
        self.end(close_if_done=False)  # on_train_end
        if self.t.window is not None:
            self.close()
        return self

    # -- custom loop ------------------------------------------------------------------
    def loop(self, steps):
        """``steps``: (step_num or None, batches) per ``with profiler.step(...)``."""
        for num, batches in steps:
            step = self.t.loop_step(num, batches)
            if step is not None:
                self.begin(*step)
            self.end()
        return self

    def result(self):
        return [(c.window, c.steps, c.markers, c.also_covered) for c in self.closed]


def windows(*ranges, **periodic):
    return profile_steps(*ranges, **periodic)


# ----------------------------------------------------------------------------------------
# Keras fit
# ----------------------------------------------------------------------------------------

def test_a_window_records_exactly_its_steps():
    d = Driver(windows((3, 5))).fit([8])
    assert d.result() == [((3, 5), (3, 5), [(3, 3), (4, 4), (5, 5)], [])]
    assert d.t.seen == 8 and d.t.next_start == NEVER and d.t.window is None


def test_steps_per_execution_covers_whole_executions():
    # Real fit (test_callback, spe4): (5, 8) is the second execution; (14, 15) lies in 13-16.
    d = Driver(windows((5, 8), (14, 15))).fit([24], spe=4)
    assert d.result() == [((5, 8), (5, 8), [(5, 8)], []), ((14, 15), (13, 16), [(13, 16)], [])]
    # (3, 5) straddles executions 1-4 and 5-8: both recorded, one marker each.
    d = Driver(windows((3, 5))).fit([24], spe=4)
    assert d.result() == [((3, 5), (1, 8), [(1, 4), (5, 8)], [])]
    # (3, 5) and (6, 8) share those executions: one window covers both requests.
    d = Driver(windows((3, 5), (6, 8))).fit([24], spe=4)
    assert d.result() == [((3, 5), (1, 8), [(1, 4), (5, 8)], [(6, 8)])]
    assert d.t.next_start == NEVER


def test_last_execution_of_an_epoch_is_clipped_to_the_epoch():
    # 10 batches per epoch with spe=4: executions 1-4, 5-8, 9-10, then 11-14 ...
    d = Driver(windows((9, 12))).fit([10, 10], spe=4)
    assert d.result() == [((9, 12), (9, 14), [(9, 10), (11, 14)], [])]


def test_periodic_windows_across_epochs():
    # Real fit (test_callback, periodic): epochs of 10 batches, every=6 length=2 start=4.
    d = Driver(windows(every=6, length=2, start=4)).fit([10, 10])
    assert [c[2] for c in d.result()] == [[(4, 4), (5, 5)], [(10, 10), (11, 11)], [(16, 16), (17, 17)]]
    assert d.t.next_start == 22


def test_windows_every_n_epochs_start_at_the_epochs_step():
    # profile_steps(every_epochs=2, length=3): steps 10-12 of epochs 1, 3, 5 (epochs of 20 batches).
    d = Driver(windows(every_epochs=2, length=3)).fit([20] * 5)
    assert [c[2] for c in d.result()] == [[(10, 10), (11, 11), (12, 12)], [(50, 50), (51, 51), (52, 52)],
                                          [(90, 90), (91, 91), (92, 92)]]
    # From epoch 2, at step 3 of the epoch, twice; with steps_per_execution=4 whole executions.
    d = Driver(windows(every_epochs=1, length=2, epoch_step=3, start_epoch=2, count=2)).fit([8] * 4, spe=4)
    assert [(c[0], c[1]) for c in d.result()] == [((11, 12), (9, 12)), ((19, 20), (17, 20))]
    # An epoch too short for step 10: its last `length` steps.
    d = Driver(windows(every_epochs=1, length=2)).fit([6, 6])
    assert [c[0] for c in d.result()] == [(5, 6), (11, 12)]
    # Epochs whose length Keras does not know (a dataset of unknown cardinality): from step 10 still.
    d = Driver(windows(every_epochs=1, length=2))
    d.t.spe = 1
    d.t.begin_epoch(None, 0)
    for batch in range(12):
        step = d.t.fit_batch(batch)
        if step is not None:
            d.end()
            d.begin(*step)
    d.end()
    assert [c.window for c in d.closed] == [(10, 11)]


def test_one_epoch_schedule_serves_two_profilers_apart():
    from tfbneck_plugin.capture.schedule import as_schedule
    shared = windows(every_epochs=1, length=2)
    a, b = Driver(as_schedule(shared)).fit([20, 20]), Driver(as_schedule(shared)).fit([20])
    assert [c.window for c in a.closed] == [(10, 11), (30, 31)] and [c.window for c in b.closed] == [(10, 11)]
    assert shared.epoch_windows == []


def test_window_length_cap_counts_executions():
    # Six executions of 32 batches (steps 32-224, 193 batches) are 6 marked steps: under the cap of 100.
    d = Driver(windows((32, 224)), max_steps=100).fit([320], spe=32)
    assert len(d.closed) == 1 and len(d.closed[0].markers) == 7 and d.closed[0].steps == (1, 224)
    # Without executions the cap cuts the window after 100 steps.
    d = Driver(windows((1, 150)), max_steps=100).fit([200])
    assert d.closed[0].steps == (1, 100) and len(d.closed[0].markers) == 100
    assert d.t.next_start == NEVER  # the rest of the cut window does not open a second one


def test_long_window_warnings_count_executions():
    from tfbneck_plugin.capture.schedule import long_window_warnings
    assert long_window_warnings(windows((32, 224)), 32, 100) == []
    [msg] = long_window_warnings(windows((1, 150)), 1, 100)
    assert "(1, 150) spans 150 steps, above max_window_steps=100: it is cut after 100" in msg
    [msg] = long_window_warnings(windows((1, 4000)), 32, 100)
    assert "spans 126 executions of 32 batches" in msg


def test_training_ending_inside_a_window_keeps_the_steps_recorded():
    d = Driver(windows((6, 12))).fit([8])
    assert d.result() == [((6, 12), (6, 8), [(6, 6), (7, 7), (8, 8)], [])]
    assert d.t.next_start == NEVER  # the rest of that window never opens another


def test_steps_count_on_across_fit_calls():
    d = Driver(windows((3, 5), (10, 11)))
    d.fit([4])            # steps 1-4: the window 3-5 ends with training at step 4
    d.fit([8])            # steps 5-12
    assert [(c[0], c[2]) for c in d.result()] == [((3, 5), [(3, 3), (4, 4)]),
                                                  ((10, 11), [(10, 10), (11, 11)])]


def test_a_window_that_cannot_open_is_skipped_and_the_next_one_opens():
    d = Driver(windows((3, 5), (8, 9)), refuse={(3, 5)}).fit([12])
    assert d.skipped == [(3, 5)]
    assert d.result() == [((8, 9), (8, 9), [(8, 8), (9, 9)], [])]


def test_nothing_to_do_outside_windows():
    t = StepTracker(windows((1000, 1001)))
    t.begin_epoch(None)
    assert all(t.fit_batch(b) is None for b in range(999)) and t.seen == 999
    assert t.fit_batch(999) == (1000, 1000)  # the window's first step asks the callback to act


# ----------------------------------------------------------------------------------------
# Custom loops
# ----------------------------------------------------------------------------------------

def test_custom_loop_counts_from_one_or_uses_given_numbers():
    d = Driver(windows((3, 5))).loop([(None, 1)] * 8)
    assert d.result() == [((3, 5), (3, 5), [(3, 3), (4, 4), (5, 5)], [])]
    d = Driver(windows((103, 105))).loop([(n, 1) for n in range(100, 110)])
    assert d.result() == [((103, 105), (103, 105), [(103, 103), (104, 104), (105, 105)], [])]


def test_custom_loop_with_several_batches_per_step():
    d = Driver(windows((5, 8))).loop([(None, 4)] * 4)  # steps of batches 1-4, 5-8, ...
    assert d.result() == [((5, 8), (5, 8), [(5, 8)], [])]


def test_custom_loop_jumping_past_a_window_closes_it_first():
    d = Driver(windows((3, 6), (20, 21))).loop([(3, 1), (4, 1), (20, 1), (21, 1)])
    assert d.result() == [((3, 6), (3, 4), [(3, 3), (4, 4)], []), ((20, 21), (20, 21), [(20, 20), (21, 21)], [])]


def test_a_step_cut_by_an_exception_is_not_recorded():
    d = Driver(windows((3, 6)))
    d.loop([(None, 1)] * 3)           # step 3 recorded
    step = d.t.loop_step()            # step 4 begins ...
    d.begin(*step)
    assert d.t.step_cut() == (4, 4)   # ... and raises
    d.marker_open = False
    closed = d.t.close()
    assert closed.markers == [(3, 3)] and closed.steps == (3, 3)
    assert d.t.next_start == NEVER    # the rest of 3-6 is given up, as the callback does


def test_close_without_an_open_window_is_an_error_and_stop_ends_everything():
    t = StepTracker(windows((3, 5)))
    with pytest.raises(RuntimeError, match="no window is open"):
        t.close()
    t.stop()
    assert t.next_start == NEVER and t.loop_step() is None and t.fit_batch(10) is None


def test_the_tracker_needs_no_tensorflow():
    code = ("import sys; from tfbneck_plugin.capture import tracker, schedule; from tfbneck_plugin.system import sampler; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
