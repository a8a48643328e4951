"""The slowdown trigger's check that other processes took the job's CPU
(``tfbneck_plugin.capture.cpu_taken``, issue 24), without TensorFlow: a clock the test
advances, and CPU counters that grow at the rates each test sets (the job's cores and other
processes' cores, CPU seconds per second). The real run (two spinners beside a steady fit)
is ``tests/test_slowdown.py::test_cpu_taken_by_other_processes_is_named_not_captured``.
"""
import subprocess

import pytest

from tfbneck_plugin.capture import cpu_taken
from tfbneck_plugin.capture.cpu_taken import CpuTaken
from tfbneck_plugin.capture.steptime import FIRED, NOTICE, SlowdownTrigger, StepTimer


class Machine:
    """A clock and the CPU counters: ``own``, ``others`` and ``ours`` (the profiler's own
    analysis children, inside the machine's busy time too) are the cores in use now."""

    def __init__(self, own=1.2, others=0.1, ours=0.0):
        self.t, self.own_s, self.busy_s, self.ours_s = 1000.0, 0.0, 0.0, 0.0
        self.own, self.others, self.ours = own, others, ours

    def __call__(self):
        return self.t

    def read(self):
        return self.own_s, self.busy_s, self.ours_s

    def advance(self, seconds):
        self.t += seconds
        self.own_s += self.own * seconds
        self.ours_s += self.ours * seconds
        self.busy_s += (self.own + self.others + self.ours) * seconds


def sampled(m, cpu, seconds, step=0.01):
    for _ in range(int(round(seconds / step))):
        cpu.tick(m.t)
        m.advance(step)


def stretch(before, during, calm_s=5.0, during_s=2.0):
    """(machine, CpuTaken, the stretch's start): ``calm_s`` at the (own, others) cores of
    ``before``, then ``during_s`` at those of ``during``."""
    m = Machine(*before)
    cpu = CpuTaken(m.read, children=lambda: False)
    sampled(m, cpu, calm_s)
    start = m.t
    m.own, m.others = during
    sampled(m, cpu, during_s)
    return m, cpu, start


def test_cores_taken_by_other_processes_are_told_from_the_jobs_own_slowdowns():
    m = Machine(own=1.2, others=0.1)
    cpu = CpuTaken(m.read, children=lambda: False)
    sampled(m, cpu, 5.0)
    start = m.t
    m.own, m.others = 0.7, 1.3  # two spinners take the cores
    sampled(m, cpu, 2.0)
    got = cpu.taken_by_others(start, m.t)
    assert got["taken"] is True
    # The stretch's span begins at the last sample before it: up to SAMPLE_SECONDS (0.25 s)
    # of the calm rates in its 2 s.
    assert got["own_cores_before"] == pytest.approx(1.2, abs=0.01) and 0.7 <= got["own_cores_during"] <= 0.77
    assert got["others_cores_before"] == pytest.approx(0.1, abs=0.01) and 1.16 <= got["others_cores_during"] <= 1.3


@pytest.mark.parametrize("before, during, why", [
    ((1.2, 0.1), (1.6, 0.05), "a heavier map on an idle machine: more cores for the job"),
    ((0.8, 1.2), (1.0, 1.0), "a heavier map under load: the job takes cores from the others"),
    ((1.2, 0.1), (0.6, 0.1), "the job waits (storage) on an idle machine: nobody took its cores"),
    ((1.2, 0.1), (1.1, 1.3), "the others rose but the job kept 0.92x its cores (over OWN_CORES_RATIO)"),
])
def test_a_slowdown_of_the_jobs_own_is_not_taken(before, during, why):
    (own, others) = during
    m = Machine(*before)
    cpu = CpuTaken(m.read, children=lambda: False)
    sampled(m, cpu, 5.0)
    start = m.t
    m.own, m.others = own, others
    sampled(m, cpu, 2.0)
    assert cpu.taken_by_others(start, m.t)["taken"] is False, why


def test_with_child_processes_or_too_few_samples_it_cannot_tell():
    m = Machine()
    with_children = CpuTaken(m.read, children=lambda: True)
    sampled(m, with_children, 5.0)
    start = m.t
    m.own, m.others = 0.5, 1.5
    sampled(m, with_children, 2.0)
    assert with_children.taken_by_others(start, m.t) is None  # PyDataset workers count as others
    m2 = Machine()
    young = CpuTaken(m2.read, children=lambda: False)
    sampled(m2, young, cpu_taken.MIN_SPAN_SECONDS / 2)
    start = m2.t
    m2.own, m2.others = 0.5, 1.5
    sampled(m2, young, 2.0)
    assert young.taken_by_others(start, m2.t) is None
    off = CpuTaken(lambda: None, children=lambda: False)
    sampled(m, off, 5.0)
    assert off.taken_by_others(m.t - 2, m.t) is None


def test_the_profilers_own_analysis_children_are_other_processes_not_the_jobs():
    # A real child process: the job's own (a PyDataset worker would be) turns the check off;
    # once it is known as the profiler's analysis child (background.py registers those), it
    # does not: its CPU is another process's to the check.
    from tfbneck_plugin.system.sampler import NOT_TRAINING_PIDS
    assert cpu_taken.has_children() is False
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert cpu_taken.has_children() is True
        NOT_TRAINING_PIDS.add(child.pid)
        assert cpu_taken.has_children() is False
    finally:
        NOT_TRAINING_PIDS.discard(child.pid)
        child.kill()
        child.wait()


def test_under_lasting_contention_a_later_stretch_is_compared_with_the_calm_seconds_too():
    # A real run (two spinners for 12 s): the second slow stretch, compared with the
    # contended seconds before it, showed the job at 0.90x its cores; against the calm ones,
    # 0.58x.
    m, cpu, start = stretch((1.2, 0.1), (0.75, 1.2))
    assert cpu.taken_by_others(start, m.t)["taken"]
    sampled(m, cpu, 4.0)
    start = m.t
    m.own, m.others = 0.68, 1.3  # the job's level swings while the spinners stay
    sampled(m, cpu, 2.0)
    got = cpu.taken_by_others(start, m.t)
    assert got["taken"] and got["own_cores_before"] == pytest.approx(1.2, abs=0.02)
    # The spinners end; later the job's own slowdown (the same cores, the others idle) is
    # its own again: the calm figures were dropped when the others gave the cores back.
    m.own, m.others = 1.2, 0.1
    sampled(m, cpu, 5.0)
    start = m.t
    m.own, m.others = 1.15, 0.1
    sampled(m, cpu, 2.0)
    assert cpu.taken_by_others(start, m.t)["taken"] is False


def _timer_on(m):
    return StepTimer(SlowdownTrigger(), clock=m, cpu=CpuTaken(m.read, children=lambda: False))


def _steps(timer, m, n, dt, start):
    ticks = []
    for i in range(n):
        ticks.append(timer.tick(start + i, start + i))
        m.advance(dt)
    return ticks


def test_the_trigger_names_the_taken_cpu_instead_of_capturing_and_still_catches_the_jobs_own():
    m = Machine(own=1.2, others=0.05)
    timer = _timer_on(m)
    ticks = _steps(timer, m, 5000, 0.001, 1)  # 5 s of 1 ms steps: armed
    assert FIRED not in ticks and NOTICE not in ticks
    m.own, m.others = 0.6, 1.4  # other processes take the cores: steps of 2.2 ms for 4 s
    ticks = _steps(timer, m, 1800, 0.0022, 5001)
    assert FIRED not in ticks and ticks.count(NOTICE) == 1
    (entry,) = [e for e in timer.trigger_state()["log"] if e.get("outcome") == "not captured: CPU taken by other processes"]
    # 0.6 cores, with up to a sample's 0.25 s of the calm 1.2 in the span
    assert entry["cpu"]["taken"] and 0.6 <= entry["cpu"]["own_cores_during"] <= 0.7
    assert entry["first_step"] in range(5001, 5010)
    # They leave; steps are fast again, then the job's own input slows 2.5x (more cores).
    m.own, m.others = 1.2, 0.05
    assert FIRED not in _steps(timer, m, 6000, 0.001, 6801)
    m.own = 1.7
    ticks = _steps(timer, m, 2000, 0.0025, 12801)
    assert ticks.count(FIRED) == 1 and timer.fired["cpu"]["taken"] is False


@pytest.mark.parametrize("own_during, slowdown, taken", [(1.05, 1.7, True), (1.05, 2.4, True), (1.05, 2.6, False),
                                                       (1.05, 7.0, False), (0.16, 23.0, True)])
def test_a_job_whose_cpu_per_step_grew_with_its_cores_kept_is_its_own_slowdown(own_during, slowdown, taken):
    """A niced job beside a busy neighbour (a newcomer's trial): the job had 1.27 cores, then
    1.05 while the neighbour took 0.4 more. Its CPU seconds per step over those before are
    1.05 / 1.27 x the slowdown: under OWN_WORK_RATIO (2) the same work done later, CPU taken;
    at 2 or more its own work grew (a 6-10x heavier map), so the trigger may capture it. A job
    left 0.13x its cores (four spinners at nice -10, the real run) was 23x slower and spun
    2.9x the CPU per step: the cores it lost explain its slowdown, CPU taken."""
    m = Machine(own=1.27, others=0.6)
    cpu = CpuTaken(m.read, children=lambda: False)
    sampled(m, cpu, 5.0)
    start = m.t
    m.own, m.others = own_during, 1.0 if own_during > 1 else 1.7
    sampled(m, cpu, 3.0)
    got = cpu.taken_by_others(start, m.t, slowdown)
    assert got["taken"] is taken
    # "own_work": cores were taken, but its own work grew (the two first cases took cores only).
    assert got["own_work"] is (not taken)
    assert got["own_cpu_per_step_ratio"] == pytest.approx(got["own_cores_during"] / got["own_cores_before"] * slowdown, abs=0.01)


@pytest.mark.parametrize("clean_ratio, taken", [(None, True), (1.59, True), (2.26, False)])
def test_cpu_per_step_against_the_clean_steps_also_tells_the_jobs_own_work(clean_ratio, taken):
    """Corpus pass 12's `speedup-tfk-15ms-x2.3-load` (a 2.2x heavier map under under-load -j 2,
    just after a speed-up): the job kept 0.84x its cores while the load's swing took 0.2 more,
    and its CPU per step against the 3 s before (the fast steps after the speed-up) was only
    1.55x, so the stretch was called CPU taken and missed. Against its clean steps it was
    2.26x: its own work, captured. The steady runs' holds reached at most 1.59x there."""
    m, cpu, start = stretch((1.2, 0.8), (1.0, 1.0), during_s=3.0)
    got = cpu.taken_by_others(start, m.t, 1.85, 1.5, clean_ratio)
    assert got["own_cpu_per_step_ratio"] < 1.6   # the 3 s before alone: under OWN_WORK_RATIO
    assert got["taken"] is taken and got["own_work"] is (not taken)


def test_the_trigger_captures_a_heavier_map_of_a_niced_job_that_lost_cores():
    m = Machine(own=1.27, others=0.6)
    timer = _timer_on(m)
    assert FIRED not in _steps(timer, m, 300, 0.02, 1)  # 6 s of 20 ms steps: armed
    m.own, m.others = 1.05, 1.0  # the map is 7x heavier; the neighbour takes what the job frees
    ticks = _steps(timer, m, 40, 0.14, 301)
    assert ticks.count(FIRED) == 1 and NOTICE not in ticks
    cpu = timer.fired["cpu"]
    assert cpu["taken"] is False and cpu["own_work"] is True and cpu["own_cores_during"] < 0.85 * cpu["own_cores_before"]
    assert 5 <= cpu["own_cpu_per_step_ratio"] <= 6.5


def _armed(timer):
    (entry,) = [e for e in timer.trigger_state()["log"] if e.get("event") == "armed"][:1]
    return entry


@pytest.mark.parametrize("others, ours, busy", [(0.05, 0.0, False), (1.3, 0.0, True), (0.05, 1.0, False)])
def test_on_a_busy_machine_the_baseline_outlasts_its_swings(others, ours, busy):
    """A job of 1 ms steps whose first half second after warm-up is a fast moment (1 ms) before
    its usual level (2.5 ms, as a busy machine swings it): on an idle machine the baseline arms
    on 0.25 s of steps and the usual level reads as a slowdown; with other processes on 1.3
    cores it waits for 2 s of steps (BUSY_BASELINE_SECONDS), learns the usual level, and no
    window opens. The profiler's own analysis child on a core is not a busy machine: a
    slowdown soon after a scheduled window is compared with the steps before it."""
    from tfbneck_plugin.capture.slowdown.baseline import BUSY_BASELINE_SECONDS, MIN_BASELINE_SECONDS
    m = Machine(own=0.7, others=others, ours=ours)
    timer = _timer_on(m)
    ticks = _steps(timer, m, 500, 0.001, 1) + _steps(timer, m, 4000, 0.0025, 501)
    armed = _armed(timer)
    if busy:
        assert armed["step"] > 500 + (BUSY_BASELINE_SECONDS - 0.5) / 0.0025 and armed["baseline_mean_ms"] > 1.5
        assert FIRED not in ticks
    else:
        assert armed["step"] <= 20 + 2 * MIN_BASELINE_SECONDS / 0.001 and armed["baseline_mean_ms"] == pytest.approx(1.0)
        assert FIRED in ticks


@pytest.mark.parametrize("others, fired_after_s", [(0.05, 2.0), (1.3, 3.0)])
def test_on_a_busy_machine_a_stretch_of_short_steps_must_last_min_seconds(others, fired_after_s):
    """A job of 1 ms steps, then 1.7 ms with its cores unchanged: idle, 300 such steps lasting
    2 s confirm it (quick_seconds); with other processes on 1.3 cores, which hold such a job
    1.5-1.7x slower for up to 2 s at a time (a steady run of the corpus under -j 1), it must
    last min_seconds (3 s), and a 2.5 s hold opens no window."""
    m = Machine(own=1.0, others=others)
    timer = _timer_on(m)
    assert FIRED not in _steps(timer, m, 4000, 0.001, 1)
    hold = _steps(timer, m, int(2.5 / 0.0017), 0.0017, 4001)
    if others > 1:
        assert FIRED not in hold
        ticks = _steps(timer, m, 2000, 0.001, 4001 + len(hold))  # back: then a lasting slowdown
        assert FIRED not in ticks
        hold = _steps(timer, m, int(5 / 0.0017), 0.0017, 6001 + len(hold))
    fired = timer.fired
    assert FIRED in hold and fired["cpu"]["taken"] is False
    assert fired_after_s <= fired["slow_for_s"] <= fired_after_s + 0.2


def test_contention_that_came_in_bursts_before_a_stretch_is_still_named():
    """Bursts of contention shorter than a confirmation join the baseline, so the 3 s before
    the stretch that is confirmed were contended already (a CI run: the job at 0.71 cores
    against them, 0.70 during): it is compared with the quietest span of the samples kept."""
    m = Machine(own=1.2, others=0.1)
    cpu = CpuTaken(m.read, children=lambda: False)
    sampled(m, cpu, 10.0)
    m.own, m.others = 0.7, 1.3
    sampled(m, cpu, 5.0)  # the bursts, joined into one: the 3 s before are contended
    start = m.t
    sampled(m, cpu, 2.0)
    got = cpu.taken_by_others(start, m.t)
    assert got["taken"] is True
    assert got["own_cores_before"] == pytest.approx(1.2, abs=0.01) and got["others_cores_before"] == pytest.approx(0.1, abs=0.01)
    # The job's own slowdown on a machine as busy for as long as the samples go back is not named.
    m2 = Machine(own=0.7, others=1.3)
    cpu2 = CpuTaken(m2.read, children=lambda: False)
    sampled(m2, cpu2, 15.0)
    start = m2.t
    m2.own = 0.75  # a heavier map takes a little more
    sampled(m2, cpu2, 2.0)
    assert cpu2.taken_by_others(start, m2.t)["taken"] is False


def test_with_cpu_check_off_a_stretch_of_cores_taken_is_captured_like_any_other():
    """SlowdownTrigger(cpu_check=False): the same contention the trigger names above
    (1 ms steps, then 2.2 ms while other processes take the cores) opens a window, whose
    trigger record says the check was not made (cpu None) and the thresholds say it was off."""
    m = Machine(own=1.2, others=0.05)
    timer = StepTimer(SlowdownTrigger(cpu_check=False), clock=m, cpu=CpuTaken(m.read, children=lambda: False))
    assert FIRED not in _steps(timer, m, 5000, 0.001, 1)
    m.own, m.others = 0.6, 1.4
    ticks = _steps(timer, m, 1800, 0.0022, 5001)
    assert ticks.count(FIRED) == 1 and NOTICE not in ticks and timer.fired["cpu"] is None
    with pytest.raises(ValueError, match="cpu_check"):
        SlowdownTrigger(cpu_check="no")


@pytest.mark.parametrize("own_during, fired", [(0.95, True), (0.45, False)])
def test_a_slowdown_of_the_jobs_own_work_that_hovers_at_the_threshold_is_held_open(own_during, fired):
    """A job of 1 ms steps on a busy machine (other processes on 1.3 cores) whose map turns
    heavier: its level swings between 1.8 ms for 0.9 s and 1.35 ms for 0.5 s, about the
    threshold (1.5 ms): each dip ended the stretch before min_seconds (3 s) and its steps
    joined the baseline, which rose until nothing was slow (a corpus scenario under -j 2,
    missed in 5 of 10 repeats). With its cores up from 0.7 to 0.95 its CPU seconds per step
    doubled (0.95 x ~1.6 ms over 0.7 x 1 ms): the stretch is held open down to the middle
    line (1.22 ms) and captured once it lasted 3 s. With 0.45 cores, the same step times are
    the same work per step (a busy machine's swing): the dips end it, and no window opens."""
    from tfbneck_plugin.capture.cpu_taken import WORK_HOLD_RATIO
    m = Machine(own=0.7, others=1.3)
    timer = _timer_on(m)
    assert FIRED not in _steps(timer, m, 6000, 0.001, 1)
    m.own = own_during
    ticks, step = [], 6001
    for _ in range(6):
        for dt, seconds in ((0.0018, 0.9), (0.00135, 0.5)):
            n = int(seconds / dt)
            ticks += _steps(timer, m, n, dt, step)
            step += n
    runs = [e for e in timer.trigger_state()["log"] if e.get("event") == "run"]
    if fired:
        assert ticks.count(FIRED) == 1
        (run,) = [e for e in runs if e["outcome"] == "captured"]
        assert run["first_step"] < 6001 + 0.9 / 0.0018 and 3.0 <= timer.fired["slow_for_s"] <= 3.3
        assert run["cpu_per_step_ratio"] >= WORK_HOLD_RATIO and timer.fired["cpu"]["taken"] is False
    else:
        assert FIRED not in ticks
        assert runs and all(e["outcome"] == "ended: fast_steps: too short" for e in runs)
        assert all(e["cpu_per_step_ratio"] is None or e["cpu_per_step_ratio"] < WORK_HOLD_RATIO for e in runs)


@pytest.mark.parametrize("own_during, others, fired", [(0.96, 1.1, True), (0.51, 1.1, False), (0.51, 0.05, True)])
def test_a_slowdown_back_at_a_slow_first_level_is_captured_unless_the_busy_machine_set_it(own_during, others, fired):
    """A newcomer's fit under under-load -j 2: its first seconds ran at 7 ms (a level the
    baseline held), then 4 ms, then its map turned 2x heavier: 7 ms again, which is within
    factor of that first level, "back to the usual level", not captured. With its CPU per
    step 1.87x that of the 4 ms steps it is the job's own work, and captured; with the same
    step times at unchanged CPU per step (the machine's pace), still the usual level. On an
    idle machine (another newcomer's sleep in a callback after a slow first epoch) nothing
    else sets the job's pace: captured."""
    m = Machine(own=0.9, others=others)
    timer = _timer_on(m)
    assert FIRED not in _steps(timer, m, 1000, 0.007, 1)      # 7 s at 7 ms: armed, a held level
    assert FIRED not in _steps(timer, m, 2500, 0.004, 1001)   # 10 s at 4 ms: the baseline follows
    m.own, m.others = own_during, (2.0 - own_during if others > 1 else others)
    ticks = _steps(timer, m, 700, 0.007, 3501)                # 4.9 s at 7 ms
    runs = [e for e in timer.trigger_state()["log"] if e.get("event") == "run" and e["first_step"] >= 3490]
    if fired:
        assert ticks.count(FIRED) == 1 and timer.fired["cpu"]["taken"] is False
        assert [e["outcome"] for e in runs] == ["captured"]
        assert (runs[0]["cpu_per_step_ratio"] or 1.0) >= 1.4 or others < 1
    else:
        assert FIRED not in ticks
        assert [e["outcome"] for e in runs] == ["not captured: back to the usual level"]


@pytest.mark.parametrize("own_during, others, fired", [(0.96, 1.1, True), (0.51, 1.1, False), (0.51, 0.05, True)])
def test_a_slowdown_right_after_a_speed_up_is_compared_with_the_faster_level(own_during, others, fired):
    """A newcomer's fit under under-load -j 2: a slower first epoch (7 ms steps), then 4 ms,
    and its map turned heavier 23 steps after the trigger took the 4 ms steps for a new
    level. The baseline was learnt again from the next steps only: on a busy machine it armed
    2 s later, on mostly slow steps, and the 13 s slowdown was its level (2 of 3 runs).
    Now the faster stretch's own steps are the baseline, armed at once: the slowdown is
    compared with 4 ms, captured when the job's CPU per step grew (or on an idle machine);
    at unchanged CPU per step on a busy machine it is the job back at its first level."""
    m = Machine(own=0.9, others=others)
    timer = _timer_on(m)
    assert FIRED not in _steps(timer, m, 1000, 0.007, 1)   # 7 s at 7 ms: armed, a held level
    step = 1001

    def relearnt():
        return any(e.get("why") == "the steps got faster" for e in timer.trigger_state()["log"])
    while not relearnt():
        assert FIRED not in _steps(timer, m, 1, 0.004, step)
        step += 1
        assert step < 4000, "the faster level was never taken"
    armed = timer.trigger_state()["log"][-1]
    assert armed["event"] == "armed" and 3.9 < armed["baseline_mean_ms"] < 4.3  # at once, on the faster steps
    assert FIRED not in _steps(timer, m, 25, 0.004, step)    # 0.1 s more at 4 ms
    step += 25
    m.own, m.others = own_during, (2.0 - own_during if others > 1 else others)
    ticks = _steps(timer, m, 1200, 0.007, step)               # 8.4 s at 7 ms
    runs = [e for e in timer.trigger_state()["log"] if e.get("event") == "run" and e["first_step"] >= step - 5]
    if fired:
        assert ticks.count(FIRED) == 1 and 1.6 < timer.fired["slower_by"] < 1.9
        assert timer.fired["slow_steps"][0] <= step + 5 and [e["outcome"] for e in runs] == ["captured"]
    else:
        assert FIRED not in ticks
        assert [e["outcome"] for e in runs] == ["not captured: back to the usual level"]


def test_the_buffered_steps_after_a_window_do_not_become_the_slow_levels_baseline():
    """A newcomer's custom loop (a parallel map and a prefetch, the map 3.7x heavier): after the
    triggered window its first steps drew on the batches buffered while the window ran (52 ms
    against 90 ms), the baseline re-armed on them with the slow level as a "slow tail" before
    them left out, and the same slowdown opened a second window 9 s later. After a capture
    the new level is the slowdown's own: it is learnt whole, slow steps and all."""
    m = Machine(own=1.7, others=0.02)
    timer = _timer_on(m)
    assert FIRED not in _steps(timer, m, 300, 0.025, 1)           # 7.5 s at 25 ms: armed
    step = 301
    while FIRED not in _steps(timer, m, 1, 0.09, step):           # the map turns heavy: 90 ms
        step += 1
        assert step < 400, "the slowdown was never captured"
    step += 1
    ticks = _steps(timer, m, 10, 0.052, step)                     # the window's buffered batches
    ticks += _steps(timer, m, 150, 0.09, step + 10)               # 13.5 s more of the slow level
    assert FIRED not in ticks, [e for e in timer.trigger_state()["log"] if e.get("event") in ("armed", "run")]
    armed = [e for e in timer.trigger_state()["log"] if e.get("event") == "armed"][-1]
    assert armed["slow_tail_steps"] == 0
