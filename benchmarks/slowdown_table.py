"""The tables of ``benchmarks/slowdown_corpus.py`` (issue 24): what the trigger captured in
the real runs, and the offline replay that chose the confirmation defaults. Reads only the
``result.json`` files the runs wrote; no TensorFlow.

Terms, all from the job's own clock (a callback placed before the profiler: the begin time
of every step, ``result["step_begin_s"]``) and from its input pipeline (``result["phases"]``:
the first and last batch it made slow):

* the *slow phase*: the steps from the first slow batch to the last; its *slowdown* is the
  median step time inside it over the median of the steps in the 3 s before it (at least 5;
  after a scenario's slower start, only those after it: ``result["prelude_last"]``);
* *required*: a slowdown >= 2x lasting >= 8 s, the phases issue 24 wants captured;
* *captured*: a triggered window begins at a step inside the slow phase; the *delay* is the
  steps and seconds from the phase's first step to the window's first;
* *input named*: the window's verdict is ``cpu / input_preprocessing`` (or
  ``cpu_contention``, the input pipeline's cores taken by other processes: counted apart).
"""
from __future__ import annotations

import bisect
import contextlib
import json
import os
import statistics
from typing import Dict, List, Optional, Tuple

INPUT_CAUSES = ("input_preprocessing",)
REQUIRED_FACTOR, REQUIRED_SECONDS = 2.0, 8.0


def load_jobs(spec: Dict) -> int:
    """Spinning processes of ``under-load`` for a scenario (``load``: True is 2, or a count)."""
    return 2 if spec["load"] is True else int(spec["load"])


def load(out: str) -> List[Dict]:
    """The runs' results (sorted by scenario name), each with ``_load``: the machine's load
    average before and after the run (``job.log``'s first line)."""
    rows = []
    for name in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        path = os.path.join(out, name, "result.json")
        if os.path.exists(path):
            with open(path) as f:
                r = json.load(f)
            try:
                with open(os.path.join(out, name, "job.log")) as f:
                    words = f.readline().split()
                r["_load"] = f"{float(words[3].strip(',')):.0f}-{float(words[5]):.0f}"
            except (OSError, IndexError, ValueError):
                r["_load"] = "?"
            rows.append(r)
    return rows


def _exec_of(batch: int, spe: int) -> int:
    return (batch - 1) // spe  # index into the job's clock (one tick per execution)


def phases_of(r: Dict) -> List[Dict]:
    """The slow phases of a run as the job's clock saw them."""
    t, spe = r["step_begin_s"], r["spec"].get("spe", 1)
    # after a slower start (the scenario's prelude), the steps before a phase are those after it
    floor = _exec_of(r["prelude_last"], spe) + 1 if r.get("prelude_last") else 0
    out = []
    for first, last, _, _ in r.get("phases") or []:
        if first is None:
            continue
        a, b = _exec_of(first, spe), min(_exec_of(last, spe), len(t) - 2)
        if b < a:
            continue
        d = [t[i + 1] - t[i] for i in range(len(t) - 1)]
        before = [d[i] for i in range(a - 1, floor - 1, -1) if t[a] - t[i] <= 3.0] or d[max(floor, a - 5):a]
        if len(before) < 5:
            before = d[max(floor, a - 5):a]
        slow = statistics.median(d[a:b + 1])
        base = statistics.median(before) if before else None
        out.append({"first": first, "last": last, "a": a, "b": b, "t0": t[a], "t1": t[b + 1],
                    "seconds": t[b + 1] - t[a], "steps": last - first + 1,
                    "slowdown": slow / base if base else None, "base_ms": 1e3 * base / spe if base else None})
    return out


def required(ph: Dict) -> bool:
    """A phase the acceptance requires a capture of: slowed :data:`REQUIRED_FACTOR` x or more
    for :data:`REQUIRED_SECONDS` or more (a :func:`phases_of` entry)."""
    return bool(ph["slowdown"] and ph["slowdown"] >= REQUIRED_FACTOR and ph["seconds"] >= REQUIRED_SECONDS)


def windows_in(r: Dict, ph: Dict) -> Optional[Dict]:
    """The first triggered window that begins inside the phase (with its delay), else None."""
    t, spe = r["step_begin_s"], r["spec"].get("spe", 1)
    for w in r["windows"]:
        if w["kind"] != "triggered" or not w["steps"] or w["status"] != "profiled":
            continue
        e = _exec_of(w["steps"][0], spe)
        if ph["a"] <= e <= ph["b"] + 1 and e < len(t):
            return {"window": w, "steps": w["steps"][0] - ph["first"], "seconds": t[e] - t[ph["a"]]}
    return None


def _verdict(w: Dict) -> str:
    return f"{w.get('bottleneck')}/{w.get('cause')}" if w.get("bottleneck") else "(no verdict)"


def table_report(out: str) -> str:
    rows = load(out)
    lines = ["| scenario | under-load | load avg | slow phase (steps, s, slowdown) | required | captured | "
             "delay (steps, s) | window verdict |", "|---|---|---|---|---|---|---|---|"]
    tot = {"required": 0, "req_captured": 0, "req_input": 0, "req_contention": 0, "phases": 0, "captured": 0,
           "steady": 0, "steady_windows": 0, "late": 0, "other_captured": 0, "other_not_input": 0}
    delays = []
    for r in rows:
        spec = r["spec"]
        load_word = (f"-j {load_jobs(spec)}" if spec["load"] else "no") + f" | {r.get('_load', '?')}"
        trig = [w for w in r["windows"] if w["kind"] == "triggered"]
        if not spec["phases"]:
            tot["steady"] += 1
            n = len([w for w in trig if w["status"] == "profiled"])
            tot["steady_windows"] += n
            steps = len(r["step_begin_s"])
            lines.append(f"| {spec['name']} | {load_word} | steady, {steps} steps, "
                         f"{r['step_begin_s'][-1] - r['step_begin_s'][0]:.0f} s | - | "
                         f"{'**' + str(n) + ' triggered**' if n else 'none (right)'} | - | - |")
            continue
        for i, ph in enumerate(phases_of(r)):
            tot["phases"] += 1
            req = required(ph)
            hit = windows_in(r, ph)
            tot["required"] += req
            tot["captured"] += hit is not None
            verdict = _verdict(hit["window"]) if hit else "-"
            if hit and req:
                tot["req_captured"] += 1
                tot["req_input"] += hit["window"].get("cause") in INPUT_CAUSES
                tot["req_contention"] += hit["window"].get("cause") == "cpu_contention"
                delays.append(hit["seconds"])
            elif hit:  # a phase under 2x or shorter than 8 s: the verdict's limit below
                tot["other_captured"] += 1
                tot["other_not_input"] += hit["window"].get("cause") not in INPUT_CAUSES
            late = [w for w in trig if w.get("closed_by") == "too_late"]
            cap = "yes" if hit else ("too late (recorded)" if late else "no")
            tot["late"] += bool(late and not hit)
            name = spec["name"] + (f" (phase {i + 1})" if len(spec["phases"]) > 1 else "")
            lines.append(f"| {name} | {load_word} | {ph['steps']} steps, {ph['seconds']:.1f} s, "
                         f"{ph['slowdown']:.2f}x of {ph['base_ms']:.3g} ms | {'yes' if req else 'no'} | {cap} | "
                         + (f"{hit['steps']}, {hit['seconds']:.1f} s" if hit else "-") + f" | {verdict} |")
    lines += ["", f"Required phases (>= {REQUIRED_FACTOR:g}x for >= {REQUIRED_SECONDS:g} s): {tot['required']}; "
              f"captured inside the phase: {tot['req_captured']}; verdict input_preprocessing: {tot['req_input']}, "
              f"cpu_contention: {tot['req_contention']}.",
              f"All slow phases: {tot['phases']}, captured {tot['captured']}; too late (recorded, training ended): "
              f"{tot['late']}; captured phases under {REQUIRED_FACTOR:g}x or shorter than {REQUIRED_SECONDS:g} s "
              f"whose verdict is not the input: {tot['other_not_input']} of {tot['other_captured']}.",
              f"Steady runs: {tot['steady']}; triggered windows in them: {tot['steady_windows']}."]
    if delays:
        delays.sort()
        lines.append(f"Delay from onset to window (required phases): median {statistics.median(delays):.1f} s, "
                     f"max {delays[-1]:.1f} s.")
    return "\n".join(lines) + "\n"


#: The README's block that ``slowdown_corpus.py ... --readme README.md`` rewrites.
README_BEGIN = "<!-- slowdown-corpus:begin (written by benchmarks/slowdown_corpus.py --readme) -->"
README_END = "<!-- slowdown-corpus:end -->"


def readme_block(out: str) -> str:
    """The README's copy of the captures table (:func:`table_report`): its totals in the open,
    the table of every run folded below them, between :data:`README_BEGIN` and
    :data:`README_END`."""
    table, _, totals = table_report(out).partition("\n\n")
    return (f"{README_BEGIN}\n{totals.strip()}\n\n<details><summary>Every run of the corpus: slow phase, "
            f"captured or not, delay, verdict</summary>\n\n{table.strip()}\n\n</details>\n{README_END}")


def write_readme_block(out: str, readme: str) -> None:
    """Replaces the block between :data:`README_BEGIN` and :data:`README_END` in ``readme``
    with :func:`readme_block`. Raises SystemExit (one line) when the file has no such block."""
    text = open(readme, encoding="utf-8").read()
    a, b = text.find(README_BEGIN), text.find(README_END)
    if a < 0 or b < a:
        raise SystemExit(f"{readme}: no '{README_BEGIN}' ... '{README_END}' block to rewrite")
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text[:a] + readme_block(out) + text[b + len(README_END):])


# ----------------------------------------------------------------------------------------
# Offline replay: the recorded step times through the trigger
# ----------------------------------------------------------------------------------------

def recorded_cpu(r: Dict, at: List[int]):
    """A :class:`~tfbneck_plugin.capture.cpu_taken.CpuTaken` fed from the run's recording
    (the job's CPU seconds at every step, the machine's busy jiffies every 16, interpolated)
    at the step index ``at[0]``; None for runs recorded without them."""
    from tfbneck_plugin.capture.cpu_taken import CpuTaken
    cpu, machine = r.get("cpu_s"), r.get("machine_jiffies")
    if not cpu or not machine or len(machine) < 2:
        return None
    tck = float(r.get("clk_tck") or 100)
    idx = [m[0] for m in machine]
    busy = [m[1] / tck for m in machine]

    def read():
        i = min(at[0], len(cpu) - 1)
        k = min(max(bisect.bisect_right(idx, i) - 1, 0), len(idx) - 2)
        share = min(1.0, max(0.0, (i - idx[k]) / (idx[k + 1] - idx[k])))
        return cpu[i], busy[k] + share * (busy[k + 1] - busy[k])
    return CpuTaken(read, children=lambda: False)


def replay_one(r: Dict, cpu_rule: bool = True, **trigger_kw) -> Dict:
    """Feed the run's own step times to a StepTimer with these thresholds (the scheduled
    window's steps are left out as the callback leaves them out), and with ``cpu_rule`` its
    recorded CPU (:func:`recorded_cpu`). Returns the steps at which it fired, the stretches
    that fired (first and last step index) and the run's phases."""
    from tfbneck_plugin.capture.steptime import FIRED, SlowdownTrigger, StepTimer
    t, spe = r["step_begin_s"], r["spec"].get("spe", 1)
    now, at = [t[0]], [0]
    timer = StepTimer(SlowdownTrigger(**trigger_kw), clock=lambda: now[0],
                      cpu=recorded_cpu(r, at) if cpu_rule else None)
    sched = r["spec"]["profile_steps"]
    fired, stretches = [], []
    skip_until = -1
    for i, ti in enumerate(t):
        now[0], at[0] = ti, i
        first = i * spe + 1
        if timer.tick(first, first + spe - 1) == FIRED:
            fired.append(i)
            stretches.append((_exec_of(timer.fired["slow_steps"][0], spe), i))
            skip_until = i + max(1, 5 // spe) + 1
        # Every execution the scheduled window covers, and the one after it (its closing
        # tick), is not timed: with steps_per_execution 8 a window at batches 40-44 spans
        # the executions of batches 33-48 (the callback's markers), 49-56 closes it.
        if (first <= sched[1] + spe and first + spe - 1 >= sched[0]) or i <= skip_until:
            timer.not_timed()
    return {"fired": fired, "stretches": stretches, "phases": phases_of(r), "log": timer.watch.log}


def _cpu_of(r: Dict, a: int, b: int) -> Optional[Dict]:
    """The job's own CPU between its steps ``a`` and ``b`` (indices of the job's clock):
    process cores (CPU seconds of all its threads per wall second), CPU seconds per step,
    and the cores other processes kept busy (the machine's busy jiffies less the job's)."""
    t, cpu = r["step_begin_s"], r.get("cpu_s") or []
    if b >= len(cpu) or a < 0 or b - a < 2:
        return None
    wall = t[b] - t[a]
    own = (cpu[b] - cpu[a]) / wall
    jiffies = [m for m in r.get("machine_jiffies") or [] if a <= m[0] <= b]
    others = None
    if len(jiffies) >= 2 and jiffies[-1][2] > jiffies[0][2]:
        (i0, busy0, total0), (i1, busy1, total1) = jiffies[0], jiffies[-1]
        ncores = os.cpu_count() or 1
        machine = ncores * (busy1 - busy0) / (total1 - total0)
        others = machine - (cpu[i1] - cpu[i0]) / (t[i1] - t[i0])
    return {"cores": own, "cpu_per_step": (cpu[b] - cpu[a]) / (b - a), "step": wall / (b - a), "others": others}


def _before(r: Dict, a: int, seconds: float = 3.0) -> int:
    """The first step index of the ``seconds`` before step ``a``."""
    t = r["step_begin_s"]
    i = a
    while i > 0 and t[a] - t[i - 1] <= seconds:
        i -= 1
    return i


def cpu_report(rows: List[Dict]) -> str:
    """For each required phase and for the longest hold of each steady run (the stretch the
    replay confirms at the run's highest firing factor): the job's step time, its own CPU
    and other processes' CPU, during the stretch against the 3 s before it. Whether the
    job's own CPU accounting could tell a slowdown of its own from a busy machine's hold."""
    kw = _defaults(with_factor=True)
    lines = ["| run | stretch | step time x | job's cores before -> during | CPU per step x | "
             "other processes' cores before -> during |", "|---|---|---|---|---|---|"]
    for r in rows:
        if not r.get("cpu_s"):
            continue
        name = r["spec"]["name"]
        spans = []
        if not r["spec"]["phases"]:
            f = highest_factor(r, kw)
            if f:
                rep = replay_one(r, **dict(kw, factor=f))
                spans = [("steady: its longest hold, confirmed at factor " + f"{f:.2f}", *rep["stretches"][0])]
        else:
            spans = [(f"phase {ph['slowdown']:.1f}x, {ph['seconds']:.0f} s", ph["a"], ph["b"])
                     for ph in phases_of(r) if ph["slowdown"]]
        for what, a, b in spans:
            before, during = _cpu_of(r, _before(r, a), a), _cpu_of(r, a, b)
            if not before or not during:
                continue
            oth = (f"{before['others']:.2f} -> {during['others']:.2f}"
                   if before["others"] is not None and during["others"] is not None else "-")
            lines.append(f"| {name} | {what} | {during['step'] / before['step']:.2f} | {before['cores']:.2f} -> "
                         f"{during['cores']:.2f} | {during['cpu_per_step'] / before['cpu_per_step']:.2f} | {oth} |")
    return "\n".join(lines) + "\n"


GRID = [dict(min_seconds=m, quick_seconds=q, quick_steps=n)
        for m in (1.5, 2.0, 3.0, 4.0, 5.0) for q in (1.0, 1.5, 2.0) for n in (300, 1000) if q < m]


def _score(rows: List[Dict], kw: Dict, cpu_rule: bool = True) -> Dict:
    hits = req = false = delay = 0.0
    phases = phases_hit = 0
    for r in rows:
        rep = replay_one(r, cpu_rule, **kw)
        if not r["spec"]["phases"]:
            false += len(rep["fired"])
            continue
        for ph in rep["phases"]:
            phases += 1
            phases_hit += any(ph["a"] <= i <= ph["b"] for i in rep["fired"])
            if not required(ph):
                continue
            req += 1
            inside = [i for i in rep["fired"] if ph["a"] <= i <= ph["b"]]
            if inside:
                hits += 1
                delay += r["step_begin_s"][inside[0]] - ph["t0"]
    return {"recall": hits / req if req else None, "required": int(req), "false": int(false),
            "mean_delay_s": delay / hits if hits else None, "phases": phases, "phases_captured": phases_hit}


def cpu_rule_report(rows: List[Dict]) -> str:
    """The defaults replayed with and without the check that other processes took the job's
    CPU (capture/cpu_taken.py), on each half and on all runs."""
    kw = _defaults()
    halves = {"fit": [r for i, r in enumerate(rows) if i % 2 == 0], "judge": [r for i, r in enumerate(rows) if i % 2 == 1],
              "all": rows}
    lines = ["| runs | the CPU check | required phases captured | all slow phases captured | windows in steady runs |",
             "|---|---|---|---|---|"]
    for name, rs in halves.items():
        steady = len([r for r in rs if not r["spec"]["phases"]])
        for on in (True, False):
            sc = _score(rs, kw, cpu_rule=on)
            lines.append(f"| {name} ({len(rs)}, {steady} steady) | {'on (the default)' if on else 'off'} | "
                         f"{_caught(sc)} of {sc['required']} | "
                         f"{sc['phases_captured']} of {sc['phases']} | {sc['false']} |")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def held_at(ratio: float):
    """The replays inside use ``ratio`` as the trigger's
    :data:`~tfbneck_plugin.capture.cpu_taken.WORK_HOLD_RATIO` (``inf``: the rule off)."""
    from tfbneck_plugin.capture.slowdown import cpu_reads  # where the trigger reads it
    before = cpu_reads.WORK_HOLD_RATIO
    cpu_reads.WORK_HOLD_RATIO = ratio
    try:
        yield
    finally:
        cpu_reads.WORK_HOLD_RATIO = before


#: The hold ratios the search below spans: 1 is a job's CPU per step unchanged (no evidence
#: of its own work), 4 more than any required phase of the corpus showed.
HOLD_LOW, HOLD_HIGH = 1.0, 4.0


def _captures_at(r: Dict, ratio: float, phase: Optional[Dict]) -> bool:
    with held_at(ratio):
        return _fires(r, _defaults(), phase)


def hold_edge(r: Dict, phase: Optional[Dict] = None) -> Optional[float]:
    """With the default thresholds: for a steady run, the highest hold ratio at which its
    replay still opens a window (a lower ratio holds more stretches open; None: none even at
    :data:`HOLD_LOW`); for a ``phase``, the highest at which it is still captured inside
    (``inf``: captured with the rule off; None: not even at :data:`HOLD_LOW`). Bisection to
    :data:`SEARCH_STEPS` halvings (:func:`last_true`)."""
    if phase is None:
        if not _captures_at(r, HOLD_LOW, None):
            return None
        if _captures_at(r, HOLD_HIGH, None):
            return HOLD_HIGH
        return last_true(lambda x: _captures_at(r, x, None), HOLD_LOW, HOLD_HIGH, SEARCH_STEPS)
    if _captures_at(r, float("inf"), phase):
        return float("inf")
    # Down from the top in steps of 0.1 to the first ratio that captures it (at low ratios a
    # stretch can be held open before the phase and captured there: not monotonic), then
    # bisection within that step.
    lo = next((x / 10 for x in range(int(10 * HOLD_HIGH), int(10 * HOLD_LOW) - 1, -1)
               if _captures_at(r, x / 10, phase)), None)
    if lo is None:
        return None
    return last_true(lambda x: _captures_at(r, x, phase), lo, lo + 0.1, SEARCH_STEPS // 2)


def hold_choice(rows: List[Dict]) -> Tuple[Optional[float], Optional[float], Optional[float]]:
    """(the highest hold ratio at which a steady run still opened a window, or None; the lowest of
    the required phases' highest capturing ratios, or None when all were captured without the
    rule; their geometric middle rounded to 0.05, the lower end :data:`HOLD_LOW` when no
    steady run fired, or None when the two do not separate or no phase needs the rule)."""
    steady = [e for e in (hold_edge(r) for r in rows if not r["spec"]["phases"]) if e is not None]
    phases = [hold_edge(r, ph) for r in rows if r["spec"]["phases"] for ph in phases_of(r) if required(ph)]
    low = max(steady, default=None)  # the ratio must be above every steady run's
    needed = [e for e in phases if e is not None and e != float("inf")]
    high = min(needed, default=None) if None not in phases else None
    if high is None or (low is not None and low >= high):
        return low, high, None
    return low, high, round(20 * ((low or HOLD_LOW) * high) ** 0.5) / 20


def own_work_report(rows: List[Dict]) -> str:
    """Choosing :data:`~tfbneck_plugin.capture.cpu_taken.WORK_HOLD_RATIO` (the job's CPU per
    step over its clean steps' at which a stretch opens or is held at the middle line): on
    the fit half, :func:`hold_choice`; judged on the other half against the rule off and
    the default in use."""
    from tfbneck_plugin.capture.cpu_taken import WORK_HOLD_RATIO
    halves = {"fit": [r for i, r in enumerate(rows) if i % 2 == 0], "judge": [r for i, r in enumerate(rows) if i % 2 == 1]}
    kw = _defaults()

    def judged(ratio: float) -> str:
        with held_at(ratio):
            sc = _score(halves["judge"], kw)
        return f"{_caught(sc)} of {sc['required']} required phases captured, {sc['false']} windows in steady runs"
    low, high, choice = hold_choice(halves["fit"])
    lines = [f"Fit half ({len(halves['fit'])} runs): the highest ratio at which a steady run still opens a window: "
             f"{'none down to ' + format(HOLD_LOW, 'g') if low is None else round(low, 2)}; the highest at which "
             f"every required phase missed without the rule is still captured: "
             f"{'-' if high is None else round(high, 2)}."]
    if choice is None:
        lines.append("They do not separate (or no required phase needs the rule): no ratio is chosen from this half.")
    else:
        lines.append(f"Their geometric middle (the lower end {HOLD_LOW:g} when no steady run fired), rounded to 0.05: "
                     f"{choice:g}. On the judge half ({len(halves['judge'])} runs): {judged(choice)}.")
    default = judged(WORK_HOLD_RATIO)
    lines.append(f"The default in use ({WORK_HOLD_RATIO:g}) on the judge half: {default}; the rule "
                 f"off: {judged(float('inf'))}.")
    if choice is not None and choice != WORK_HOLD_RATIO and judged(choice) == default:
        lines.append(f"On the judge half {choice:g} does no better than the default: the default stays (chosen on "
                     "58 runs repeated under under-load before this pass, as `capture/cpu_taken.py` says).")
    return "\n".join(lines) + "\n"


def _caught(sc: Dict) -> int:
    """Required phases a :func:`_score` captured."""
    return round((sc["recall"] or 0) * sc["required"])


def _defaults(with_factor: bool = False) -> Dict:
    from tfbneck_plugin.capture.steptime import SlowdownTrigger
    d = SlowdownTrigger()
    kw = dict(min_seconds=d.min_seconds, quick_seconds=d.quick_seconds, quick_steps=d.quick_steps)
    return dict(kw, factor=d.factor) if with_factor else kw


#: The factors the separation below searches between (bisection to SEARCH_STEPS halvings:
#: about 1 % of the range).
FACTOR_LOW, FACTOR_HIGH, SEARCH_STEPS = 1.05, 4.0, 8


def _fires(r: Dict, kw: Dict, phase: Optional[Dict]) -> bool:
    """Whether the replay with these thresholds opens a window: anywhere for a steady run,
    inside ``phase`` for a slow one."""
    fired = replay_one(r, **kw)["fired"]
    return bool(fired) if phase is None else any(phase["a"] <= i <= phase["b"] for i in fired)


def highest_factor(r: Dict, kw: Dict, phase: Optional[Dict] = None, low: float = FACTOR_LOW) -> Optional[float]:
    """The highest ``factor`` at which the run's replay still opens a window (anywhere for a
    steady run, inside ``phase`` for a slow one), by bisection between ``low`` and
    :data:`FACTOR_HIGH`; None when none fires even at ``low``. For a steady run it is how far
    the busy machine alone held the job's level above its baseline, as long as a slowdown must
    last; for a slow phase, how much slower than its baseline the trigger sees it. (A phase is
    searched from the default factor up: far below it, windows opened in the noise before the
    phase use up ``max_captures``.)"""
    if not _fires(r, dict(kw, factor=low), phase):
        return None
    return last_true(lambda f: _fires(r, dict(kw, factor=f), phase), low, FACTOR_HIGH, SEARCH_STEPS, geometric=True)


def last_true(holds, lo: float, hi: float, steps: int, geometric: bool = False) -> float:
    """The highest value between ``lo`` (where ``holds`` is true) and ``hi`` at which
    ``holds`` is still true, by ``steps`` bisections (geometric means with ``geometric``)."""
    for _ in range(steps):
        mid = (lo * hi) ** 0.5 if geometric else (lo + hi) / 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def separation(rows: List[Dict], kw: Dict) -> Dict:
    """Per run, at the confirmation ``kw``: the highest factor that fires in each steady run
    and that captures each required phase. Returns {"steady": [(name, f)], "required":
    [(name, f)]}."""
    out: Dict[str, List] = {"steady": [], "required": []}
    for r in rows:
        name = r["spec"]["name"]
        if not r["spec"]["phases"]:
            out["steady"].append((name, highest_factor(r, kw) or FACTOR_LOW))
            continue
        for i, ph in enumerate(phases_of(r)):
            if required(ph):
                out["required"].append((name + (f" (phase {i + 1})" if i else ""),
                                        highest_factor(r, kw, ph, low=kw.get("factor", 1.5))))
    return out


def factor_between(sep: Dict) -> Optional[float]:
    """The factor halfway (geometric mean) between the highest factor that fires in any steady
    run and the lowest that still captures every required phase, that one at most
    :data:`REQUIRED_FACTOR` (a phase of exactly 2x is required too, however much slower this
    pass's required phases happened to be), rounded to the nearest 0.05; None when they
    overlap or a required phase is missed (no factor separates them)."""
    top = max((f for _, f in sep["steady"]), default=FACTOR_LOW)
    caught = [f for _, f in sep["required"]]
    if not caught or None in caught or min(caught) <= top:
        return None
    return round(20 * (top * min(min(caught), REQUIRED_FACTOR)) ** 0.5) / 20


def usual_level_report(rows: List[Dict]) -> str:
    """The default thresholds replayed on all runs with the usual-level rule (the gate
    "back to the usual level") and without it (no memory of held levels), side by side."""
    from tfbneck_plugin.capture.slowdown import baseline
    kw = _defaults()
    keep = baseline.USUAL_SECONDS
    try:
        baseline.USUAL_SECONDS = -1.0  # no level is recent enough: the rule never applies
        off = _score(rows, kw)
    finally:
        baseline.USUAL_SECONDS = keep
    on = _score(rows, kw)
    steady = len([r for r in rows if not r["spec"]["phases"]])
    return ("\n| the usual-level rule | required phases captured | windows in the " + str(steady)
            + " steady runs |\n|---|---|---|\n" + "".join(
                f"| {name} | {_caught(s)} of {s['required']} "
                f"| {s['false']} |\n" for name, s in (("on (the default)", on), ("off", off))))


def separation_report(rows: List[Dict]) -> str:
    """How far apart steady runs and required phases are in ``factor`` (at the default
    confirmation), per half; the factor the fit half puts between them, judged on the other."""
    kw = _defaults(with_factor=True)
    halves = {"fit": [r for i, r in enumerate(rows) if i % 2 == 0], "judge": [r for i, r in enumerate(rows) if i % 2 == 1]}
    seps = {h: separation(rs, kw) for h, rs in halves.items()}
    lines = ["| run | half | steady: highest factor that opens a window / required phase: highest that captures it |",
             "|---|---|---|"]
    for kind in ("steady", "required"):
        found = [(name, h, f) for h, sep in seps.items() for name, f in sep[kind]]
        found.sort(key=lambda x: -1.0 if x[2] is None else x[2], reverse=(kind == "steady"))
        lines += [f"| {name} | {h} | " + (f"{kind}: {f:.2f}" if f is not None and f > FACTOR_LOW
                                          else f"{kind}: none at {FACTOR_LOW if kind == 'steady' else kw['factor']}")
                  + " |" for name, h, f in found]
    top = {h: max((f for _, f in sep["steady"]), default=None) for h, sep in seps.items()}
    def lowest(sep: Dict) -> str:  # "none" when a required phase is missed even at the default factor
        found = [f for _, f in sep["required"]]
        return "none" if not found or None in found else f"{min(found):.2f}"
    lines += ["", "Highest factor at which a steady run opened a window: fit half "
              f"{top['fit'] and round(top['fit'], 2)}, judge half {top['judge'] and round(top['judge'], 2)}; lowest "
              f"factor that still captures every required phase: fit half {lowest(seps['fit'])}, "
              f"judge half {lowest(seps['judge'])}"
              + (f" (none: a required phase is missed even at {kw['factor']:g})." if "none" in
                 (lowest(seps['fit']), lowest(seps['judge'])) else ".")]
    choice = factor_between(seps["fit"])
    seconds = {k: v for k, v in kw.items() if k != "factor"}
    if choice is None:
        lines.append(f"On the fit half no factor separates them: the default {kw['factor']:g} stays.")
    else:
        j = _score(halves["judge"], dict(seconds, factor=choice))
        lines.append(f"The fit half puts the factor halfway between the two (geometric mean; the upper end at most "
                     f"{REQUIRED_FACTOR:g}, since a {REQUIRED_FACTOR:g}x phase is required too; rounded to the nearest "
                     f"0.05): {choice:g}. "
                     f"On the judge half it captures {_caught(j)} of {j['required']} "
                     f"required phases, with {j['false']} windows in steady runs (mean delay "
                     f"{j['mean_delay_s'] and round(j['mean_delay_s'], 2)} s)."
                     + (" It does not carry over (fewer required phases captured on the judge half than on the fit "
                        "half): the default stays." if (j["recall"] or 0) < 1 else ""))
    if choice != kw["factor"]:
        d = _score(halves["judge"], kw)
        lines.append(f"The default in use ({kw['factor']:g}) on the judge half: {_caught(d)} "
                     f"of {d['required']} required phases, {d['false']} windows in steady runs.")
        if choice is not None:
            c = _score(halves["judge"], dict(seconds, factor=choice))
            better = ((c["recall"] or 0), -c["false"]) > ((d["recall"] or 0), -d["false"])
            lines.append(f"On the judge half {choice:g} does better than the default: the default should move to it."
                         if better else
                         f"On the judge half {choice:g} does no better than the default: the default stays (a default "
                         "moves only when the held-out half shows the change helps; each pass's fit half moves its "
                         "choice with the noise of a few runs).")
    return "\n".join(lines) + "\n"


#: Why a shorter confirmation the replay prefers is not the default at once.
LIVE_BEFORE_DEFAULT = (
    "A shorter confirmation chosen by the replay becomes the default only after a live pass of the corpus and "
    "the test suite's live steady runs hold with it: the replay leaves out what a live run has (the profiler's "
    "analysis children, the callback's own time, a scheduled window's trace being written). `min_seconds` 1.5 s "
    "with 300 steps lasting 1 s was the default once, chosen so by an earlier pass's fit half, and fired a "
    "window in the test suite's steady run under `under-load -j 1` in CI (a one-second switch between a 1-2 ms "
    "job's two levels), which no replay had shown; the defaults went back to 3 s. They stay there while each "
    "pass's judge half captures every required phase with no window in a steady run, as above.")


def replay_report(out: str) -> str:
    rows = load(out)
    fit = [r for i, r in enumerate(rows) if i % 2 == 0]
    judge = [r for i, r in enumerate(rows) if i % 2 == 1]
    scored = [(kw, _score(fit, kw)) for kw in GRID]
    # A margin of 2x: a setting qualifies when the fit half's steady runs show no capture
    # even with its seconds halved; then the best recall, then the shortest delay.
    ok = [(kw, s) for kw, s in scored if s["false"] == 0 and _score(
        [r for r in fit if not r["spec"]["phases"]],
        dict(kw, min_seconds=kw["min_seconds"] / 2, quick_seconds=kw["quick_seconds"] / 2))["false"] == 0]
    best = max(ok, key=lambda x: (x[1]["recall"] or 0, -(x[1]["mean_delay_s"] or 1e9)), default=None)
    lines = ["| min_seconds | quick_seconds | quick_steps | fit recall | fit false | fit mean delay s |",
             "|---|---|---|---|---|---|"]
    for kw, s in scored:
        lines.append(f"| {kw['min_seconds']} | {kw['quick_seconds']} | {kw['quick_steps']} | "
                     f"{s['recall'] if s['recall'] is None else round(s['recall'], 2)} ({s['required']}) | "
                     f"{s['false']} | {s['mean_delay_s'] and round(s['mean_delay_s'], 2)} |")
    if best is None:
        lines += ["", f"Fit half ({len(fit)} runs, {len([r for r in fit if not r['spec']['phases']])} steady): no "
                      "setting of the grid has no capture in its steady runs with a 2x margin (with half their seconds, "
                      "every setting fires on a busy machine's hold), so none is chosen from this pass; the defaults "
                      "stay as an earlier pass's fit half chose them."]
    def said(sc: Dict) -> str:
        caught = _caught(sc)
        delay = f"{sc['mean_delay_s']:.2f} s" if sc["mean_delay_s"] is not None else "-"
        return (f"{caught} of {sc['required']} required phases captured, {sc['false']} windows in steady runs, "
                f"mean delay {delay}")
    chosen = None
    if best:
        chosen = _score(judge, best[0])
        lines += ["", f"Fit half ({len(fit)} runs, {len([r for r in fit if not r['spec']['phases']])} steady) "
                      f"chooses {best[0]} (no capture in its steady runs even at half these seconds): "
                      f"{said(best[1])}.",
                  f"Judge half ({len(judge)} runs), that choice: {said(chosen)}."]
    defaults = _defaults()
    if best is None or best[0] != defaults:  # the defaults in use, judged as the choice is
        j = _score(judge, defaults)
        lines += ["", f"The defaults these runs used ({defaults}), on the judge half: {said(j)}."]
        if chosen is not None and ((chosen["recall"] or 0) < (j["recall"] or 0) or chosen["false"] > j["false"]):
            lines += ["", "The fit half's choice does not carry over to the judge half (it does worse there than the "
                          "defaults): the defaults stay."]
        elif best is not None and best[0]["min_seconds"] < defaults["min_seconds"]:
            lines += ["", LIVE_BEFORE_DEFAULT]
    lines += ["", "With the defaults, every run replayed with and without the rule that a stretch back to a "
                  "level the baseline held lately is not a slowdown:", usual_level_report(rows),
              "", "### Choosing the factor", "",
              "At the default confirmation, each steady run replayed at factors from "
              f"{FACTOR_LOW} up (bisection): the highest at which a window opens is how far a busy machine alone "
              "held the job's level above its baseline for as long as a slowdown must last. Each required phase "
              "likewise: the highest factor that still captures it inside the phase.", "",
              separation_report(rows)]
    return "\n".join(lines) + "\n"


LIMITS = """## What the trigger cannot catch, and why

- **A slowdown that begins before the trigger is armed**: the first 20 batches are warm-up, then the
  baseline needs 20 steps lasting 0.25 s, or 8 lasting 1 s (2 s while other processes keep half a core
  busy). A job slow from its start, or slowed during
  those steps, has no faster past to be compared with (the scheduled window sees it). With
  `steps_per_execution` the baseline's steps are executions: at 8 batches of 10 ms per execution it is
  armed about 1.3 s into training. When the last of the steps it arms on (at least 5) are already
  slower than `factor` x those before them, they are left out of it and begin the slow stretch
  (`tfk-15ms-x4-early-spe8`, slowed 2 s into training, had 3 clean executions before it: the warm-up and
  the scheduled window took the others; pass 4 missed it); with fewer than 5 slow ones the baseline
  keeps them. The trend file's `trigger_state` shows the baseline it armed on (`slow_tail_steps`).
  When the steps get lastingly faster (the end of a slower start), the faster steps are the baseline at
  once: learnt from the next steps, as before pass 11, it armed 2 s later on a busy machine and a
  slowdown inside those seconds became its level (a user's trial fit; replayed with that rule, the
  `speedup-*` runs, slowed 0.4-4 s after a speed-up, lose 3 of 8; with this one, 8 of 8 captured).
  "Lastingly faster" is a baseline's worth of faster steps (beyond `factor`): on a busy machine 2 s of
  them, and a busy machine stretches about half of a job's steps past that line (that trial's 12 ms
  steps under `-j 2`: 4.4-5.9 s to confirm). A slowdown back at the earlier level sooner than that is
  compared with a baseline of both levels, or with the earlier level: the trial's slowdown, 0.5 s after the
  speed-up, was missed twice; 1.5 s after, caught by the CPU-per-step rule; 3 s after, caught at 1.63x.
- **A slowdown shorter than the confirmation**: `min_seconds` (3 s), or 300 steps lasting 2 s (not on a
  busy machine: other processes on half a core or more), counted with each step capped at 4x the
  stretch's median; plus the window's own steps. A phase shorter than about 4 s is left out on purpose: a
  busy machine slows a job of 1-2 ms steps 1.5-2x for 1-2 s at a time (the earlier 1.5 s and 300 steps
  fired on that in steady runs under load, and pass 5's quick confirmation on a hold of 2.0 s).
- **A slowdown no larger than a busy machine's swings, that is not the job's own CPU work**: under `-j 2` a
  job of 1-2 ms steps moves between levels up to 2x apart for seconds, and the stalls lift the trigger's
  level (a trimmed mean) above the median, so a slowdown of 2.2x by medians reads 1.5-1.7x and hovers about
  the threshold: its stretches fall back within a second and join the baseline. Pass 8 missed
  `edge-k3-1ms-x2.3-middle-load` so, and so did 5 of 10 repeats of it. When the slowdown is the job's own CPU
  work (a heavier map, a bigger batch), its CPU per step rises and the "own work" rule above holds the
  stretch open (passes 9, 10 and 11: all 5 such runs under `-j 2` captured each time). A slowdown of that size that is a wait
  (storage, the network) on a busy machine raises no CPU per step, and can still be missed; so can one whose
  input work runs in child processes (PyDataset or multiprocessing workers), whose CPU the rule does not read.
- **A slowdown in bursts shorter than the confirmation**: a burst that ends by itself before it is
  confirmed joins the baseline as the job's normal variation, so a job that keeps switching between two
  levels, each held for under a second, has both as its normal (a busy machine does this to a job of 1-2 ms
  steps); a slowdown of that mix is still caught.
- **Fewer than 5 slow steps**: a phase of 3 steps of 3 s each is three steps; `consecutive` (5) guards
  against a few stalls.
- **Below `factor` (1.5x)**: a level 1.4x above the baseline is learned as the new normal (the baseline
  follows slow drifts).
- **The machine itself**: CPU taken by other processes slows every step. When, in a slow stretch, the job
  had at most 0.85x its cores of the 3 s before while other processes had 0.1 core more or over, the
  trigger does not capture it ("not captured: CPU taken by other processes", and one line to the user):
  a profile of the job cannot show their work. That check cannot tell a job that *waits* (storage,
  network) on a machine whose cores are all busy, since the others take the cores it frees; nor a
  slowdown of the job's own while other processes still hold the cores they took (it is compared with
  the seconds before they took them). A job that lost cores yet whose CPU seconds per step rose 2x or more,
  against the 3 s before or against its clean steps (the steps its baseline learnt), is slowed by its own
  work and captured: pass 12 missed `speedup-tfk-15ms-x2.3-load` under `-j 2` (0.84x its cores while the
  load's swing took 0.2 more; 1.55x the CPU per step of the 3 s before, the fast steps just after its
  speed-up, but 2.26x that of its clean steps); the clean steps' ratio now counts too (the steady runs'
  holds reached at most 1.59x there): the replay of pass 12 captures it, and so did pass 13, live.
  It is off while the job has child processes (PyDataset or multiprocessing workers, a window's analysis
  child), whose CPU would count as others'. A machine that ran a job *faster* for some seconds, then let
  it back to its usual level, is not a slowdown either
  (the baseline's levels of the last 60 s are kept: "not captured: back to the usual level"). But under
  one spinner on two cores a job of 1-2 ms steps that ran at its fast level from the start can be held
  1.5-1.7x slower for 6 s or for the rest of its run with its own cores unchanged (its CPU per step rises
  with its step time, as in a heavier map: the CPU table above): neither its step times nor its CPU tell
  it from a slowdown of its own. The nine runs `steady-k3-1ms-load1*` are the same steady job, so they
  measure how often this happens.
- **A verdict that misses the input when the input only takes cores**: on a CPU-only host a pipeline whose
  producer keeps ahead of the step but takes cores from the model's math makes steps slower without any
  wait for input: the breakdown sees the model's ops fill the step (in pass 11 one required window read
  `model_compute` so, `edge-loop-15ms-x2.3-middle`, a custom loop on an idle machine whose model's ops took
  16.9 ms of a 21.1 ms step against 10.5 ms before, with 8 % input wait; passes 10 and 11 had 6 more such
  windows, under 2x or shorter than 8 s). A triggered window knows the job's step before the slowdown (its
  sidecar's trigger record), so there the input is named when the training threads waited for busy cores,
  the input's stage runs beside the step, the traced steps are still at least `factor` over the baseline,
  and that stage's work per step over the cores the training used accounts for half or more of what the
  step grew (How it works, Thresholds: "the input takes the model's cores"): a model of measured quantities
  (on cores that are all taken a step grows by the added work over the cores), checked on passes 10 and 11
  (0.47-1.65 of the growth on an idle machine, 1.01-2.83 on a busy one, 82 windows) and judged by passes 12 and 13's
  new runs (every captured required window names the input). A scheduled window has no such baseline and
  keeps its verdict. On a busy machine the same starvation shows as host overhead (the training thread
  waiting for a core) or as an input wait with few cores and no disk reads; when the training threads
  queued for a core and none sat idle (or fewer than they queued for: pass 10's
  `speedup-k3-1ms-x2.3-load1` window read 0.18 cores idle over 0.17 s with 1.48 cores' worth waiting),
  host overhead that the input's stage outlasts, and a wait on a stage of TensorFlow ops with no disk
  reads, read as the input (How it works, Thresholds: "the input takes the cores"), two measured times compared
  with no fitted constant. Where the input's stage works about as long per step as the host overhead
  lasts, the two are a tie and the verdict can go either way (pass 10's `speedup-k3-1ms-x2.3-load-r2`:
  2.14 ms against 2.22 ms, `python_overhead`). The window's "what changed" line names the tf.data stage
  and the input pipeline's op whose time grew.
"""


def full_report(out: str) -> str:
    """docs/slowdown_capture.md: how it was made, the table, the replay, the limits."""
    from tfbneck_plugin.capture import cpu_taken
    from tfbneck_plugin.capture.steptime import SlowdownTrigger
    d = SlowdownTrigger()
    rows = load(out)
    head = ["# Slowdown capture: the scenario corpus", "",
            "Made by `python benchmarks/slowdown_corpus.py all --md docs/slowdown_capture.md --readme docs/accuracy.md` "
            "(real fits, CPU, one "
            "at a time, then this report). "
            f"{len(rows)} runs. Each run's slowdown is measured by the job's own clock (a callback before the "
            "profiler): the median step time inside the slow phase over the median of the 3 s before it; the "
            "input pipeline's extra work is TensorFlow matrix products in `tf.data`, steered to the "
            "requested factor, so the measured factor differs from the requested one on a busy machine. "
            "`load avg` is the machine's 1-minute load average before and after each run (2 cores, nothing "
            "else running but the corpus; `under-load` `-j N` runs it under `benchmarks/under_load.sh -j N`, "
            "whose load lingers in the next runs' averages). Every run used the trigger's defaults "
            f"(`min_seconds` {d.min_seconds:g} s, `quick_steps` {d.quick_steps}, `quick_seconds` "
            f"{d.quick_seconds:g} s, chosen by the replay below on the fit half of an earlier pass of this corpus; "
            f"a triggered window spans `window_steps` {d.window_steps} and at least `window_seconds` "
            f"{d.window_seconds:g} s of steps), and its check that other processes took the job's CPU "
            "(`capture/cpu_taken.py`). The replays below feed each run's recorded step times and CPU to the "
            "trigger as it is now (the steps the callback leaves out, warm-up and a scheduled window's "
            "executions, left out too; no analysis children); the captures table is what the runs themselves "
            "did.",
            "", "## Captures", ""]
    return "\n".join(head) + table_report(out) + "\n## Choosing the confirmation (offline replay)\n\n" \
        + "The recorded step times of every run, fed to the trigger offline with other thresholds; the runs " \
        + "split by name into a fit half (even positions) and a judge half (odd).\n\n" \
        + replay_report(out) + "\n## The job's own CPU in slow stretches\n\n" \
        + "Could the trigger tell a slowdown of the job's own from a busy machine's hold by the job's CPU? Each " \
        + "run's clock also recorded the CPU seconds of all the job's threads at every step (`time.process_time`) " \
        + "and the machine's busy time every 16 steps (`/proc/stat`); below, each slow phase and each steady " \
        + "run's longest hold against the 3 s before it (runs recorded before this was added have no row).\n\n" \
        + cpu_report(rows) + "\nThe trigger's check (`capture/cpu_taken.py`: not captured when the job had at most " \
        + f"{cpu_taken.OWN_CORES_RATIO:g}x its cores of the {cpu_taken.BEFORE_SECONDS:g} s before while other " \
        + f"processes took {cpu_taken.OTHERS_RISE_CORES:g} cores more), every run replayed with it and without:\n\n" \
        + cpu_rule_report(rows) + "\n## Own work: a stretch whose CPU per step grew\n\n" \
        + "A slow stretch opens when the level crosses the threshold and ends when it has been back under it for " \
        + "the span of a level; its steps then join the baseline. While the job's CPU seconds per step are at least " \
        + f"`WORK_HOLD_RATIO` ({cpu_taken.WORK_HOLD_RATIO:g}) x those of its clean steps before " \
        + "(`capture/cpu_taken.py`, `work_ratio`), a level above the middle line (the square root of `factor` x " \
        + "the baseline) opens a stretch or holds one open, and such a stretch does not join the baseline when it " \
        + "ends. The ratio is chosen as the factor is: each steady run replayed at ratios from " \
        + f"{HOLD_LOW:g} up (the highest at which it still opens a window: the choice must be above it), " \
        + "each required phase that the replay misses " \
        + "with the rule off at ratios down from " \
        + f"{HOLD_HIGH:g} (the highest at which it is still captured), on the fit half; judged on the other half:\n\n" \
        + own_work_report(rows) + "\n" + LIMITS
