"""Every decision of the slowdown trigger, as JSON lines: the safety net of a change to the
trigger's code that must not change its behaviour (run it before and after; the outputs must
be byte-identical).

    python benchmarks/trigger_replay.py [--corpus DIR] > decisions.jsonl

Without TensorFlow. Two sources of step times:

* synthetic scenarios (:data:`SCENARIOS`): a clock the replay advances and CPU counters that
  grow at the rates each phase sets (the job's cores, other processes', the profiler's own
  analysis children's), fed through :class:`~tfbneck_plugin.capture.tracker.StepTracker` as the
  callback drives it (windows opened and closed, the user's one-line notices): steady runs,
  slowdowns of 1.5-10x, bursts, a busy machine switching levels, CPU taken by other processes,
  the job's own heavier work under load, a speed-up, a return to the usual level, a slowdown
  begun before the baseline armed, a stretch held by an analysis, executions of 8 batches,
  training that ends while slow, ``max_captures``;
* with ``--corpus``, the recorded runs of ``benchmarks/slowdown_corpus.py run`` (their own
  step clock and CPU, :func:`slowdown_table.recorded_cpu`), replayed as
  ``slowdown_table.replay_one`` does, with the default thresholds, the CPU check off, and a
  shorter confirmation.

Each line is one tick at which something was decided: the tick's result (1 fired, 2 a
notice), the trigger's new log entries, what a firing saw, the baseline when it changed,
windows opened and closed, notices told; the last line of a scenario is the trigger's state,
its baseline and the stretch left unfinished when training ended. Wall-clock stamps
(``t_unix_ns``, ``detected_unix_ns``) read 0.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from tfbneck_plugin.capture.cpu_taken import CpuTaken  # noqa: E402
from tfbneck_plugin.capture.schedule import profile_steps  # noqa: E402
from tfbneck_plugin.capture.steptime import SlowdownTrigger, StepTimer  # noqa: E402
from tfbneck_plugin.capture.tracker import StepTracker  # noqa: E402


class Machine:
    """A clock and CPU counters: ``own``, ``others``, ``ours`` are the cores in use now."""

    def __init__(self, own: float = 1.2, others: float = 0.05, ours: float = 0.0) -> None:
        self.t, self.own_s, self.busy_s, self.ours_s = 1000.0, 0.0, 0.0, 0.0
        self.own, self.others, self.ours = own, others, ours

    def __call__(self) -> float:
        return self.t

    def read(self) -> Tuple[float, float, float]:
        return self.own_s, self.busy_s, self.ours_s

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.own_s += self.own * seconds
        self.ours_s += self.ours * seconds
        self.busy_s += (self.own + self.others + self.ours) * seconds


#: A phase: (step times in seconds, {"own", "others", "ours", "holds", "epoch"} set at its start).
Phase = Tuple[List[float], Dict]


def noisy(rng, seconds: float, dt: float, rel: float = 0.1) -> List[float]:
    """About ``seconds`` of steps of ``dt`` s, normal jitter of ``rel`` x ``dt`` (at least 5% of dt)."""
    return [max(0.05 * dt, float(v)) for v in rng.normal(dt, rel * dt, max(1, int(seconds / dt)))]


def switching(rng, seconds: float, fast: float, slow: float, longest: float) -> List[float]:
    """A busy machine's job: two levels, each held 0.05 s to ``longest`` s at a time."""
    out: List[float] = []
    spent, is_slow = 0.0, False
    while spent < seconds:
        level = slow if is_slow else fast
        n = max(1, int(rng.uniform(0.05, longest) / level))
        out += noisy(rng, n * level, level)
        spent += n * level
        is_slow = not is_slow
    return out


def _scenarios() -> Iterator[Tuple[str, Dict, List[Phase]]]:
    """(name, {"trigger": kwargs, "schedule": [(a, b)], "spe", "cpu": False (no CPU check)}, phases)."""
    rng = np.random.RandomState(7)
    idle, busy = {"own": 1.2, "others": 0.05}, {"own": 0.7, "others": 1.3}
    w = [0.5] * 20
    yield "steady-10ms", {}, [(w + noisy(rng, 20, 0.010), idle)]
    yield "steady-1ms-busy", {}, [(w, busy), (switching(rng, 25, 0.0011, 0.0018, 0.5), {})]
    yield "x2-10s-1ms", {}, [(w + noisy(rng, 6, 0.001), idle), (noisy(rng, 10, 0.002), {"own": 1.3}),
                             (noisy(rng, 4, 0.001), {"own": 1.2})]
    yield "x2-10s-15ms-sched", {"schedule": [(40, 44), (900, 902)]}, [
        (w + noisy(rng, 6, 0.015), idle), (noisy(rng, 10, 0.030), {}), (noisy(rng, 4, 0.015), {})]
    yield "x4-100ms", {}, [(w + noisy(rng, 8, 0.1), idle), (noisy(rng, 8, 0.4), {}), (noisy(rng, 3, 0.1), {})]
    yield "x1.5-15ms", {}, [(w + noisy(rng, 6, 0.015), idle), (noisy(rng, 15, 0.0225), {})]
    yield "bursts-10ms", {"trigger": {"min_seconds": 1.0, "consecutive": 20}}, [
        (w + noisy(rng, 3, 0.010), idle)] + [(noisy(rng, 0.6, 0.030) + noisy(rng, 1.5, 0.010), {}) for _ in range(8)]
    yield "stall-10ms", {}, [(w + noisy(rng, 3, 0.010) + [0.03] * 5 + [5.0] + [0.03] * 5 + noisy(rng, 3, 0.01),
                              idle)]
    yield "recovers-returns-cooldown", {"trigger": {"min_seconds": 1.0, "cooldown_steps": 10}}, [
        (w + ([0.010] * 300 + [0.040] * 100) * 3 + [0.010] * 100, idle)]
    yield "max-captures-1", {"trigger": {"min_seconds": 1.0, "max_captures": 1, "cooldown_steps": 0}}, [
        (w + [0.010] * 100 + [0.040] * 20 + [0.010] * 100 + [0.050] * 60 + [0.010] * 200 + [0.050] * 60, idle)]
    yield "cpu-taken-then-own", {}, [(w + noisy(rng, 5, 0.001, 0.02), idle),
                                     (noisy(rng, 4, 0.0022, 0.02), {"own": 0.6, "others": 1.4}),
                                     (noisy(rng, 6, 0.001, 0.02), {"own": 1.2, "others": 0.05}),
                                     (noisy(rng, 5, 0.0025, 0.02), {"own": 1.7})]
    yield "cpu-taken-check-off", {"trigger": {"cpu_check": False}}, [
        (w + noisy(rng, 5, 0.001, 0.02), idle), (noisy(rng, 4, 0.0022, 0.02), {"own": 0.6, "others": 1.4})]
    yield "cpu-taken-twice-lasting", {}, [(w + noisy(rng, 6, 0.002, 0.02), idle),
                                          (noisy(rng, 4, 0.004, 0.02), {"own": 0.7, "others": 1.3}),
                                          (noisy(rng, 3, 0.003, 0.02), {"own": 0.9}),
                                          (noisy(rng, 5, 0.005, 0.02), {"own": 0.6}),
                                          (noisy(rng, 6, 0.002, 0.02), {"own": 1.2, "others": 0.05})]
    yield "niced-heavier-map", {}, [(w + noisy(rng, 6, 0.02, 0.02), {"own": 1.27, "others": 0.6}),
                                    (noisy(rng, 6, 0.14, 0.02), {"own": 1.05, "others": 1.0})]
    for own_during in (0.95, 0.45):
        phases: List[Phase] = [(w + noisy(rng, 6, 0.001, 0.02), busy)]
        for k in range(6):
            phases += [(noisy(rng, 0.9, 0.0018, 0.02), {"own": own_during} if k == 0 else {}),
                       (noisy(rng, 0.5, 0.00135, 0.02), {})]
        yield f"own-work-hovers-{own_during}", {}, phases
    for own_during, others in ((0.96, 1.1), (0.51, 1.1), (0.51, 0.05)):
        during = {"own": own_during, "others": 2.0 - own_during if others > 1 else others}
        yield f"usual-level-{own_during}-{others}", {}, [
            (w + noisy(rng, 7, 0.007, 0.02), {"own": 0.9, "others": others}), (noisy(rng, 10, 0.004, 0.02), {}),
            (noisy(rng, 5, 0.007, 0.02), during)]
        yield f"speedup-slowdown-{own_during}-{others}", {}, [
            (w + noisy(rng, 7, 0.007, 0.02), {"own": 0.9, "others": others}), (noisy(rng, 2.5, 0.004, 0.02), {}),
            (noisy(rng, 8, 0.007, 0.02), during)]
    for kind in ("switching", "steady"):
        usual = (switching(rng, 8, 0.0011, 0.0019, 0.5) if kind == "switching" else noisy(rng, 8, 0.0016))
        fast, back = (0.00105, 0.0019) if kind == "switching" else (0.0010, 0.0017)
        yield f"interlude-{kind}", {}, [(w + usual, busy), (noisy(rng, 5, fast), {}), (noisy(rng, 5, back), {}),
                                       (noisy(rng, 4, 2 * back, 0.2), {})]
    yield "busy-baseline-waits", {}, [(w + [0.001] * 500, {"own": 0.7, "others": 1.3}), ([0.0025] * 4000, {})]
    yield "ours-not-busy", {}, [(w + [0.001] * 500, {"own": 0.7, "others": 0.05, "ours": 1.0}), ([0.0025] * 4000, {})]
    yield "slow-tail-before-armed", {"trigger": {"consecutive": 5, "min_seconds": 3.0, "warmup_steps": 3}}, [
        ([0.5] * 3 + [0.33] * 3 + [1.2] * 8 + [0.33] * 10, idle)]
    yield "long-steps-arm-on-8", {"trigger": {"consecutive": 5, "min_seconds": 3.0, "warmup_steps": 3}}, [
        ([0.5] * 3 + [0.120] * 14 + [0.480] * 20, idle)]
    yield "held-by-analysis", {}, [(w + noisy(rng, 5, 0.01), idle), (noisy(rng, 4, 0.03), {"holds": 1}),
                                   (noisy(rng, 2, 0.03), {"holds": 0}), (noisy(rng, 3, 0.01), {})]
    yield "spe8-x2", {"spe": 8, "schedule": [(40, 44)]}, [
        (w + noisy(rng, 6, 0.008), idle), (noisy(rng, 8, 0.016), {}), (noisy(rng, 3, 0.008), {})]
    yield "epochs-x3", {}, [(w + noisy(rng, 5, 0.015), idle), (noisy(rng, 5, 0.015), {"epoch": True}),
                            (noisy(rng, 5, 0.045), {"epoch": True}), (noisy(rng, 5, 0.045), {"epoch": True})]
    yield "ends-while-slow", {}, [(w + noisy(rng, 5, 0.01), idle), (noisy(rng, 2.2, 0.03), {})]
    yield "buffered-after-window", {}, [(w + [0.025] * 300, {"own": 1.7, "others": 0.02}),
                                        ([0.09] * 60 + [0.052] * 10 + [0.09] * 150, {})]
    yield "x10-late-1ms", {}, [(w + noisy(rng, 6, 0.001), idle), (noisy(rng, 5, 0.01), {})]
    yield "held-by-analysis-ends", {}, [(w + noisy(rng, 5, 0.01), idle), (noisy(rng, 5, 0.03), {"holds": 1}),
                                        (noisy(rng, 3, 0.01), {}), (noisy(rng, 2, 0.01), {"holds": 0})]
    yield "held-by-cooldown-ends", {"trigger": {"min_seconds": 1.0, "cooldown_steps": 2000}}, [
        (w + [0.010] * 300 + [0.040] * 60 + [0.010] * 300 + [0.040] * 40 + [0.010] * 300 + [0.040] * 60, idle)]
    yield "short-faster-stretches", {}, [(w + noisy(rng, 4, 0.01), idle)] + [
        (noisy(rng, 0.1, 0.004) + noisy(rng, 1, 0.01), {}) for _ in range(5)]
    for seed in range(2):
        r2 = np.random.RandomState(100 + seed)
        for kind in ("switching", "steady"):
            usual = (switching(r2, 8, 0.0011, 0.0019, 0.5) if kind == "switching" else noisy(r2, 8, 0.0016))
            fast, back = (0.00105, 0.0019) if kind == "switching" else (0.0010, 0.0017)
            yield f"interlude-{kind}-nocpu-{seed}", {"cpu": False}, [
                (w + usual, {}), (noisy(r2, 5, fast), {}), (noisy(r2, 5, back), {}), (noisy(r2, 4, 2 * back, 0.2), {})]
        yield f"switching-then-x2-nocpu-{seed}", {"cpu": False}, [
            (w + switching(r2, 20, 0.0011, 0.0018, 0.5) + noisy(r2, 1.6, 0.0018)
             + switching(r2, 20, 0.0011, 0.0018, 0.5), {}), (noisy(r2, 8, 0.0029), {})]
    yield "fast-step-inside-nocpu", {"cpu": False}, [([0.5] * 21 + [0.017] * 58 + [0.1] * 51 + [0.03] + [0.1] * 28, {})]
    yield "quick-confirmation-nocpu", {"cpu": False}, [([0.5] * 21 + [0.001] * 500 + [0.002] * 3000, {})]
    yield "horizon-64-nocpu", {"cpu": False, "trigger": {"horizon_steps": 64, "warmup_steps": 5, "consecutive": 20,
                                                         "min_seconds": 1.0}}, [
        ([0.5] * 5 + noisy(rng, 3, 0.01) + noisy(rng, 2, 0.1) + noisy(rng, 3, 0.01) + noisy(rng, 2, 0.02), {})]


SCENARIOS = list(_scenarios())


def _zero_stamps(obj):
    """A copy of a record with its wall-clock stamps at 0 (they differ from run to run)."""
    if isinstance(obj, dict):
        return {k: (0 if k in ("t_unix_ns", "detected_unix_ns") else _zero_stamps(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_zero_stamps(v) for v in obj]
    return obj


class Recorder:
    """Wraps a StepTimer's tick and reads what changed after each."""

    def __init__(self, timer: StepTimer, name: str, out: Callable[[str], None]) -> None:
        self.timer, self.name, self.out = timer, name, out
        self.seen: List[Dict] = []      # every log entry printed (kept: their ids stay unique)
        self.seen_ids: set = set()
        self.baseline: Optional[Dict] = None
        self.result = 0
        tick = timer.tick

        def recorded(first: int, last: int) -> int:
            self.result = tick(first, last)
            return self.result
        timer.tick = recorded  # type: ignore[method-assign]

    def after(self, i: int, step: int, extra: Dict) -> None:
        line: Dict = {}
        state = self.timer.trigger_state()
        new = [e for e in (state or {}).get("log", []) if id(e) not in self.seen_ids]
        for e in new:
            self.seen.append(e)
            self.seen_ids.add(id(e))
        if new:
            line["log"] = new
        if self.result:
            line["tick"] = self.result
        if self.result == 1:
            line["fired"] = self.timer.fired
        b = self.timer.baseline()
        if b != self.baseline:
            line["baseline"] = self.baseline = b
        line.update({k: v for k, v in extra.items() if v})
        if line:
            self.out(json.dumps(_zero_stamps({"scenario": self.name, "i": i, "step": step, **line}), sort_keys=True))
        self.result = 0

    def end(self) -> None:
        self.out(json.dumps(_zero_stamps({"scenario": self.name, "end": True, "state": self.timer.trigger_state(),
                                          "baseline": self.timer.baseline(), "captures": self.timer.captures,
                                          "unfinished": self.timer.unfinished_run(),
                                          "after": self.timer.trigger_state()}), sort_keys=True))


def replay_scenario(name: str, opts: Dict, phases: List[Phase], out: Callable[[str], None]) -> None:
    """The callback's side of a custom loop (``StepTracker.loop_step``), each step lasting
    its phase's step time, windows opened as soon as asked and closed when complete."""
    m = Machine()
    trigger = SlowdownTrigger(**opts.get("trigger", {}))
    spe = opts.get("spe", 1)
    warned: List = []
    tr = StepTracker(profile_steps(*(opts.get("schedule") or [(10 ** 8, 10 ** 8)])), trigger,
                     warn=lambda *a: warned.append(list(a)))
    tr.timer = StepTimer(trigger, clock=m,
                         cpu=CpuTaken(m.read, children=lambda: False) if opts.get("cpu", True) else None)
    rec = Recorder(tr.timer, name, out)
    i = 0
    for durations, setting in phases:
        for key in ("own", "others", "ours"):
            if key in setting:
                setattr(m, key, setting[key])
        if "holds" in setting:
            tr.timer.holds = setting["holds"]
        if setting.get("epoch"):
            tr.timer.restart()
        for d in durations:
            extra: Dict = {}
            step = tr.loop_step(batches=spe)
            if step is not None:
                if tr.step is not None and tr.step_ended():
                    c = tr.close()
                    extra["closed"] = [c.window, c.steps, c.also_covered, c.trigger is not None]
                if tr.window is None:
                    win = tr.window_to_open(*step)
                    if win is not None:
                        extra["opened"] = [win, tr.opening is not None]
                        tr.opened(win)
                if tr.window is not None:
                    tr.step_began(*step)
            extra["warn"], warned[:] = list(warned), []
            rec.after(i, step[0] if step else tr.seen, extra)
            m.advance(d * spe)
            i += 1
    rec.end()


def replay_corpus(folder: str, out: Callable[[str], None]) -> None:
    """Each recorded run of the corpus, as ``slowdown_table.replay_one`` feeds it, with the
    default thresholds, the CPU check off, and a 1.5 s confirmation."""
    from slowdown_table import _exec_of, load, recorded_cpu  # beside this file
    for r in load(folder):
        for label, kw, cpu_rule in (("defaults", {}, True), ("cpu-off", {}, False),
                                    ("min1.5", {"min_seconds": 1.5, "quick_seconds": 1.0}, True)):
            t, spe = r["step_begin_s"], r["spec"].get("spe", 1)
            now, at = [t[0]], [0]
            timer = StepTimer(SlowdownTrigger(**kw), clock=lambda: now[0],
                              cpu=recorded_cpu(r, at) if cpu_rule else None)
            rec = Recorder(timer, f"{r['spec']['name']}/{label}", out)
            sched = r["spec"]["profile_steps"]
            skip_until = -1
            for i, ti in enumerate(t):
                now[0], at[0] = ti, i
                first = i * spe + 1
                timer.tick(first, first + spe - 1)
                if rec.result == 1:
                    _exec_of(timer.fired["slow_steps"][0], spe)
                    skip_until = i + max(1, 5 // spe) + 1
                rec.after(i, first, {})
                if (first <= sched[1] + spe and first + spe - 1 >= sched[0]) or i <= skip_until:
                    timer.not_timed()
            rec.end()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=None, help="a folder of slowdown_corpus.py run's results")
    ap.add_argument("--only", default="", help="comma-separated synthetic scenario names")
    a = ap.parse_args(argv)
    time.time_ns = lambda: 0  # the records' wall-clock stamps: the same in every replay
    names = [n for n in a.only.split(",") if n]
    lines = 0

    def out(text: str) -> None:
        nonlocal lines
        lines += 1
        sys.stdout.write(text + "\n")
    for name, opts, phases in SCENARIOS:
        if not names or name in names:
            replay_scenario(name, opts, phases, out)
    if a.corpus:
        replay_corpus(a.corpus, out)
    sys.stderr.write(f"{lines} decision lines\n")


if __name__ == "__main__":
    main()
