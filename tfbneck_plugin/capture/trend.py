"""A long job's trend: the step-time statistics per period, the windows (scheduled and
triggered) with their verdicts, and what changed from one window's verdict to the next,
kept in the step-time trend file (format in :mod:`tfbneck_plugin.records`) that the
TensorBoard tab draws. No TensorFlow here.

The file is rewritten atomically (temporary file + rename) when a period ends, a window
opens or closes, or a window's analysis finishes: from the training thread and from the
analysis threads, under one lock. It is small (about 100 bytes per point, 300 per window;
:data:`MAX_POINTS` points at most), so a rewrite costs well under a millisecond per epoch.
"""
from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..records import STEP_TIMES_DIR, STEP_TIMES_FORMAT, Outcome, step_times_name, write_sidecar
from ..schema import SessionDict, bottleneck_words, step_time_ms
from .slowdown.thresholds import MIN_BASELINE_STEPS

#: Points kept in the file; beyond, every other older point is dropped (the trend keeps
#: its shape over a job of any length).
MAX_POINTS = 4000
#: Breakdown categories compared when a verdict changes (``breakdown_pct`` keys, % of the step).
CHANGE_CATEGORIES = ("input", "device_compute", "host_compute", "kernel_launch", "collective",
                     "host_to_device", "device_to_host", "idle")


def verdict_of(report: Optional[SessionDict]) -> Optional[Dict]:
    """The part of a session report the trend shows: ``{"bottleneck", "cause", "confidence",
    "step_time_ms"}`` (mean step, ms), or None when there is no usable report."""
    if not report or report.get("status") != "ok":
        return None
    st = step_time_ms(report)
    return {"bottleneck": report.get("bottleneck", "unknown"), "cause": report.get("cause"),
            "confidence": report.get("confidence"), "step_time_ms": st}


def _label(v: Dict) -> str:
    word = bottleneck_words(v.get("bottleneck"))
    return f"{word} ({v['cause']})" if v.get("cause") else word


#: A window whose mean step is this many times the other's (or less than its inverse) has
#: changed even under the same verdict: "the same bottleneck got 3.4x worse". Our
#: choice, above the spread of two profiled windows of one unchanged phase (within 1.3x in
#: the slowdown corpus's steady runs, docs/slowdown_capture.md).
CHANGED_X = 1.5
#: A stage's work per call or an op's self time per step that grew by less than this factor
#: (or by less than :data:`GREW_MIN_MS`) is not named as what grew (our choice).
GREW_X = 1.5
GREW_MIN_MS = 0.05


def _ms_per_step(report: SessionDict) -> Dict[str, float]:
    """Each breakdown category's ms per step (its share of the mean step)."""
    st = step_time_ms(report) or 0.0
    return {c: float(v) * st / 100.0 for c, v in (report.get("breakdown_pct") or {}).items()}


def _stage_per_call(report: SessionDict) -> Dict[str, Tuple[str, float]]:
    """tf.data stage name -> (kind, work ms per call), buffers (Prefetch...) left out: their
    time is the wait for the stage below them, not work of their own."""
    out = {}
    for st in (report.get("input_pipeline") or {}).get("stages") or []:
        if st.get("category") == "buffer":
            continue
        calls, work = st.get("calls"), st.get("work_ms")
        if isinstance(calls, int) and calls > 0 and isinstance(work, (int, float)):
            out[str(st.get("name"))] = (str(st.get("kind")), float(work) / calls)
    return out


def _op_per_step(report: SessionDict) -> Dict[Tuple[str, str], Tuple[float, str]]:
    """(where, op type) -> (self ms per step of all its ops, how to name it): the op's own
    name when one op of that type ran (the table's top op), else the type and how many
    ops of it ran (a map of 140 ``Cos`` ops grows as ``Cos``, not as its 58th instance).
    The get-next ops are left out: their time is the wait for input, the "input" category."""
    from ..analysis.host import GET_NEXT_OPS
    names: Dict[Tuple[str, str], str] = {}
    for o in report.get("top_ops") or []:
        names.setdefault((str(o.get("where")), str(o.get("type"))), str(o.get("name")))
    out = {}
    for g in (report.get("op_summary") or {}).get("by_type") or []:
        key = (str(g.get("where")), str(g.get("type")))
        if key[1] in GET_NEXT_OPS:
            continue
        count = g.get("ops")
        ops = count if isinstance(count, int) else 0
        name = names[key] if ops <= 1 and key in names else f"{key[1]} x{ops} ops" if ops > 1 else key[1]
        out[key] = (float(g.get("self_ms_per_step") or 0.0), name)
    return out


def what_grew(before: SessionDict, after: SessionDict) -> List[Dict]:
    """What took more time from one window to the next: the breakdown category whose ms per
    step grew most, the tf.data stage whose work per call grew most, and the op type whose
    self time per step grew most (:func:`_op_per_step`), each ``{"what": "category" | "stage" | "op", "name", "from_ms",
    "to_ms", "per": "step" | "call"}``, where it grew by at least :data:`GREW_X`."""
    out: List[Dict] = []

    def biggest(pairs, what, per):
        grown = [(b - a, name, a, b) for name, (a, b) in pairs if b >= GREW_X * a and b - a >= GREW_MIN_MS]
        if grown:
            _, name, a, b = max(grown)
            out.append({"what": what, "name": name, "from_ms": round(a, 3), "to_ms": round(b, 3), "per": per})
    ca, cb = _ms_per_step(before), _ms_per_step(after)
    biggest([(c, (ca.get(c, 0.0), cb[c])) for c in cb if c in CHANGE_CATEGORIES], "category", "step")
    sa, sb = _stage_per_call(before), _stage_per_call(after)
    biggest([(f"{sb[n][0]} ({n})", (sa[n][1], sb[n][1])) for n in sb if n in sa], "stage", "call")
    oa, ob = _op_per_step(before), _op_per_step(after)
    biggest([(f"{ob[k][1]} ({k[0]})", (oa.get(k, (0.0, ""))[0], ob[k][0])) for k in ob], "op", "step")
    return out


#: Causes whose window names the input: its "grew" list puts the tf.data stage first (the
#: model's ops, stretched by the cores the input took, grew too, and "device compute
#: 28.7 -> 49.5 ms" listed first reads as the model's own slowdown).
INPUT_CAUSES = ("input_preprocessing", "cpu_contention", "file_read", "remote_read")


def _category_word(name: str, device_kind: Optional[str]) -> str:
    if name == "device_compute" and device_kind == "CPU":
        return "model compute on the CPU"  # no device computes on a CPU-only host
    return name.replace("_", " ")


def _times(ratio: float) -> str:
    """A ratio of step times as the change line says it: 2.1x, or 0.48x when shorter."""
    return f"{ratio:.1f}x" if ratio >= 1 else f"{ratio:.2f}x"


def _grew_text(grew: List[Dict], device_kind: Optional[str] = None) -> str:
    words = {"category": lambda g: _category_word(g["name"], device_kind), "stage": lambda g: f"stage `{g['name']}`",
             "op": lambda g: f"op `{g['name']}`"}
    return "; ".join(f"{words[g['what']](g)} {g['from_ms']:.3g} -> {g['to_ms']:.3g} ms per {g['per']}" for g in grew)


def verdict_change(prev_index: int, prev_steps, prev: SessionDict, cur: SessionDict,
                   job_ms: Optional[Tuple[Optional[float], Optional[float]]] = None) -> Optional[Dict]:
    """What changed between two windows' reports: their verdict (bottleneck or cause), or,
    under the same verdict, a mean step :data:`CHANGED_X` times longer or shorter; None when
    neither.

    Args:
      prev_index, prev_steps: the earlier window's index and ``(first, last)`` steps.
      prev, cur: the two session reports (``status`` ``ok``).
      job_ms: the job's own unprofiled step time around each window (ms, from the trend
        periods: :func:`window_overhead`), where known.

    Returns:
      ``{"from_window", "from": {"bottleneck", "cause"}, "to": {...}, "same_verdict", "x"
      (after / before mean step), "moved": {"category", "from_pct", "to_pct"} | None,
      "step_time_ms": [before, after] | None, "job_step_ms": [before, after] | None, "grew":
      :func:`what_grew`, "text"}``: one sentence saying it all.
    """
    a, b = verdict_of(prev), verdict_of(cur)
    if a is None or b is None:
        return None
    same = (a["bottleneck"], a["cause"]) == (b["bottleneck"], b["cause"])
    times = [a["step_time_ms"], b["step_time_ms"]] if a["step_time_ms"] and b["step_time_ms"] else None
    x = times[1] / times[0] if times else None
    if same and (x is None or 1.0 / CHANGED_X < x < CHANGED_X):
        return None
    pa, pb = prev.get("breakdown_pct") or {}, cur.get("breakdown_pct") or {}
    moved: Optional[Dict[str, Any]] = None
    deltas = [(abs(float(pb.get(c, 0.0)) - float(pa.get(c, 0.0))), c) for c in CHANGE_CATEGORIES
              if c in pa or c in pb]
    if deltas:
        _, cat = max(deltas)
        moved = {"category": cat, "from_pct": round(float(pa.get(cat, 0.0)), 1),
                 "to_pct": round(float(pb.get(cat, 0.0)), 1)}
    job = [round(float(v), 3) for v in job_ms] if job_ms and all(job_ms) else None  # type: ignore[arg-type]
    grew = what_grew(prev, cur)
    if b["cause"] in INPUT_CAUSES:
        grew.sort(key=lambda g: g["what"] != "stage")  # stable: the others keep their order
    where = f"window {prev_index}" + (f" (steps {prev_steps[0]}-{prev_steps[1]})" if prev_steps else "")
    # The headline ratio is the job's own clock where known: a traced step carries the
    # profiler's cost, which differs between windows (one measured job was "4.8x slower" in the
    # trace and 2.1x slower by its clock).
    by_clock = job is not None and times is not None
    head = job[1] / job[0] if by_clock else x  # type: ignore[index]
    if same:
        clock = " by the job's own clock" if by_clock else ""
        text = (f"{_label(b)} as in {where}, {max(head, 1 / head):.1f}x {'slower' if head > 1 else 'faster'}{clock}"
                if head else _label(b))
    else:
        text = f"{_label(b)}, was {_label(a)} in {where}"
    if moved is not None and not same:
        text += (f"; {moved['category'].replace('_', ' ')} {moved['from_pct']:.0f}% -> {moved['to_pct']:.0f}% "
                 f"of the step")
    if times is not None:
        text += f"; step time {times[0]:.3g} -> {times[1]:.3g} ms"
        if job is not None:
            text += (f" in the trace ({_times(times[1] / times[0])}), {job[0]:.3g} -> {job[1]:.3g} ms by the job's"
                     f" own clock ({_times(job[1] / job[0])})")
    if grew:
        text += f"; grew: {_grew_text(grew, cur.get('device_kind'))}"
    return {"from_window": prev_index, "from": {"bottleneck": a["bottleneck"], "cause": a["cause"]},
            "to": {"bottleneck": b["bottleneck"], "cause": b["cause"]}, "same_verdict": same,
            "x": round(x, 2) if x else None, "moved": moved, "step_time_ms": times, "job_step_ms": job,
            "grew": grew, "text": text}


#: Timed steps the periods around a window should hold: with fewer in the periods that overlap
#: it (a short ``step_time_every``), the nearest period on each side joins them (our choice:
#: as many as the slowdown trigger's baseline needs).
AROUND_MIN_STEPS = MIN_BASELINE_STEPS


def level_breaks(trigger_state: Optional[Dict]) -> List[int]:
    """The steps at which the job's level changed, by the slowdown trigger's record (the trend
    file's ``trigger_state``): the first step of each slow stretch it confirmed (captured or
    not) and of each faster stretch it took as the new baseline. Shorter stretches are the
    job's swings, not a change of level."""
    out = []
    for e in ((trigger_state or {}).get("log") or []):
        if not isinstance(e, dict) or e.get("event") != "run" or not isinstance(e.get("first_step"), int):
            continue
        slower = e.get("direction") == "slower" and e.get("confirmed_at_step") is not None
        if slower or Outcome.of(e.get("outcome")) is Outcome.FASTER:
            out.append(e["first_step"])
    return out


def _across_a_break(period: Dict, steps, breaks) -> bool:
    """A level change (:func:`level_breaks`) lies between the window's steps and the far end of
    the period, or inside the period: its steps are not the window's level."""
    lo = min(int(period.get("first_step", 0)), steps[0])
    hi = max(int(period.get("step", 0)), steps[1])
    return any(lo < b <= hi for b in breaks)


def periods_around(steps, points: List[Dict], breaks: Sequence[int] = ()) -> List[Dict]:
    """The trend periods that tell the job's own step time where a window of ``steps``
    ``(first, last)`` ran: those whose steps overlap the window's (their statistics leave the
    window's steps out: the callback does not time a step it works in), then, when they hold
    fewer than :data:`AROUND_MIN_STEPS` timed steps, the nearest period before the window and
    the nearest after it. The nearest: a window early in a long epoch and a slowdown in the
    next epochs would take its figure from those epochs (7 ms said in one measured run, 4.65 ms
    in the epoch the window ran in). None of them across a change of the job's level the
    trigger recorded (``breaks``, :func:`level_breaks`): a custom loop's period of 1000 steps
    held a slowdown that began after its window at steps 10-14 and said that window's traced
    step was 0.79x the job's."""
    timed = [p for p in points if _period_ms(p) is not None and not _across_a_break(p, steps, breaks)]
    near = [p for p in timed if p.get("first_step", 0) <= steps[1] and p.get("step", 0) >= steps[0]]
    if sum(int(p.get("n") or 0) for p in near) < AROUND_MIN_STEPS:
        near = ([p for p in timed if p.get("step", 0) < steps[0]][-1:] + near
                + [p for p in timed if p.get("first_step", 0) > steps[1]][:1])
    return near


def _stretch_ms(trigger: Optional[Dict]) -> Optional[float]:
    """The median step of the slow stretch that opened a triggered window (ms, the job's own
    clock just before it), or None for a scheduled window."""
    observed = (trigger or {}).get("observed_p50_ms")
    return float(observed) if isinstance(observed, (int, float)) and observed > 0 else None


def window_overhead(steps, verdict: Optional[Dict], points: List[Dict],
                    trigger: Optional[Dict] = None, breaks: Sequence[int] = ()) -> Optional[Dict]:
    """The profiler's cost in a window: its traced mean step against the job's own unprofiled
    step time around it (the median of the mean step time (:func:`_period_ms`) of the trend
    periods :func:`periods_around` the window; no period holds the window's steps). For a
    triggered window, the slow stretch that opened it instead (``trigger["observed_p50_ms"]``:
    the periods before it hold the steps before the slowdown).

    Returns:
      ``{"window_step_ms", "job_step_ms", "periods", "x"}`` (``x``: window / job; ``periods``
      0 for a triggered window's stretch), or None without a verdict's step time or a period
      around the window.
    """
    if not steps or not verdict or not verdict.get("step_time_ms"):
        return None
    stretch = _stretch_ms(trigger)
    if stretch is not None:
        win = float(verdict["step_time_ms"])
        return {"window_step_ms": round(win, 3), "job_step_ms": round(stretch, 3), "periods": 0,
                "x": round(win / stretch, 2)}
    near = [v for v in map(_period_ms, periods_around(steps, points, breaks)) if v is not None]
    if not near:
        return None
    job = statistics.median(near)
    win = float(verdict["step_time_ms"])
    return {"window_step_ms": round(win, 3), "job_step_ms": round(job, 3), "periods": len(near),
            "x": round(win / job, 2) if job > 0 else None}


def _period_ms(point: Dict) -> Optional[float]:
    """A trend period's step time for the job's clock: its mean (the time per step the job
    really took: a PyDataset's workers deliver batches in bursts, fast steps between slow
    ones, and the median of such a period is well under its mean), its median in files
    without one; None without either."""
    for key in ("mean_ms", "p50_ms"):
        v = point.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def job_step_near(steps, points: List[Dict], trigger: Optional[Dict] = None,
                  breaks: Sequence[int] = ()) -> Optional[float]:
    """The job's own unprofiled step time where a window ran (ms). A triggered window: the
    median of the slow stretch that opened it (``trigger["observed_p50_ms"]``, timed by the
    job's own clock just before the window; the trend period before it may straddle the
    onset). Else the step time (:func:`_period_ms`) of the trend periods :func:`periods_around`
    it, their mean when they agree within :data:`CHANGED_X` (or the one there is), None when
    they do not (the phase changed at the window) or there is none."""
    stretch = _stretch_ms(trigger)
    if stretch is not None:
        return stretch
    if not steps:
        return None
    near = [v for v in map(_period_ms, periods_around(steps, points, breaks)) if v is not None]
    if not near or min(near) <= 0 or max(near) / min(near) >= CHANGED_X:
        return None
    return sum(near) / len(near)


def window_entry(rec, points: Optional[List[Dict]] = None, breaks: Sequence[int] = ()) -> Dict:
    """One window of the trend file, from a :class:`~.controller.WindowRecord` (``points``: the
    trend's periods, for the window's ``overhead``; ``breaks``: :func:`level_breaks`)."""
    verdict = verdict_of(rec.report)
    return {"index": rec.index, "kind": rec.kind, "requested": [list(w) for w in rec.requested],
            "steps": list(rec.steps) if rec.steps else None, "status": rec.status, "reason": rec.reason,
            "closed_by": rec.closed_by,
            "session": os.path.basename(rec.session_dir) if rec.session_dir else None,
            "trigger": rec.trigger, "verdict": verdict, "analysis_error": rec.analysis_error,
            "change": rec.change, "overhead": window_overhead(rec.steps, verdict, points or [], rec.trigger, breaks)}


class JobTrend:
    """The trend file of one ``BottleneckProfiler`` (one training process).

    Args:
      log_dir: the profiler's ``log_dir``; the file goes to ``<log_dir>/plugins/bottleneck/``.
      windows: the profiler's list of WindowRecord (read when the file is written).
      trigger: the slowdown thresholds (a dict) or None.
      warn: the callback's ``warn(key, message)``: a file that cannot be written is said
        once, and training goes on.
      trigger_state_of: returns the slowdown trigger's record (``StepTimer.trigger_state``),
        written as the file's ``trigger_state``; None: no trigger.
    """

    def __init__(self, log_dir: str, windows: List, trigger: Optional[Dict], warn: Callable[[str, str], None],
                 trigger_state_of: Optional[Callable[[], Optional[Dict]]] = None):
        self.log_dir, self.windows, self._warn = log_dir, windows, warn
        self.start_ns = time.time_ns()
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.folder = os.path.join(log_dir, STEP_TIMES_DIR)
        self.path = os.path.join(self.folder, step_times_name(self.start_ns, self.host, self.pid))
        self.points: List[Dict] = []
        self.trigger = trigger
        self.baseline: Optional[Dict] = None
        self.trigger_state_of = trigger_state_of
        self.spe = 1
        self.ended = False
        self._lock = threading.Lock()
        self._started = False  # written at least once (a job with no step writes nothing)

    def add_point(self, point: Dict) -> None:
        """A period ended: ``point`` as in the file's ``points``; rewrites the file."""
        with self._lock:
            self.points.append(point)
            if len(self.points) > MAX_POINTS:
                del self.points[:-MAX_POINTS // 2:2]
        self.write()

    def changes(self) -> Optional[Dict]:
        """Recompute ``change`` of every analysed window against the previous analysed one
        (analyses may finish out of order), and ``against_baseline``: against the healthiest
        earlier window (the shortest mean step), when that is not the previous one and the
        window is :data:`CHANGED_X` times slower than it (so that 95.8 -> 37.4 ms does not read
        as healthy when the job once ran at 13.3 ms). Returns the change of the last window
        analysed with a verdict, or None."""
        prev = None
        last = None
        seen: List = []
        with self._lock:
            points = list(self.points)
        breaks = level_breaks(self.trigger_state_of() if self.trigger_state_of else None)

        def job_ms(rec):
            return job_step_near(rec.steps, points, rec.trigger, breaks)
        for rec in list(self.windows):
            v = verdict_of(rec.report)
            if v is None:
                continue
            rec.change = (verdict_change(prev.index, prev.steps, prev.report, rec.report, (job_ms(prev), job_ms(rec)))
                          if prev else None)
            timed = [(v_r["step_time_ms"], r) for r, v_r in ((r, verdict_of(r.report)) for r in seen)
                     if v_r and v_r["step_time_ms"]]
            base = min(timed, key=lambda tr: tr[0])[1] if timed else None
            if base is not None and base is not prev and v["step_time_ms"]:
                worse = verdict_change(base.index, base.steps, base.report, rec.report, (job_ms(base), job_ms(rec)))
                if worse is not None and (worse["x"] or 0) >= CHANGED_X:
                    rec.change = dict(rec.change or {"text": f"against the previous window: no change beyond "
                                                             f"{CHANGED_X}x"}, against_baseline=worse)
                    rec.change["text"] += f"; against the fastest earlier window: {worse['text']}"
            seen.append(rec)
            prev, last = rec, rec.change
        return last

    def write(self, force: bool = False) -> None:
        """Rewrite the file (after the first point or window; with ``force`` in any case)."""
        with self._lock:
            if not (force or self._started or self.points or self.windows):
                return
            state = self.trigger_state_of() if self.trigger_state_of else None
            breaks = level_breaks(state)
            data = {"format": STEP_TIMES_FORMAT, "version": 1, "source": "BottleneckProfiler",
                    "host": self.host, "pid": self.pid, "start_unix_ns": self.start_ns,
                    "updated_unix_ns": time.time_ns(), "ended": self.ended, "steps_per_execution": self.spe,
                    "trigger": self.trigger, "baseline": self.baseline, "trigger_state": state,
                    "points": list(self.points),
                    "windows": [window_entry(r, self.points, breaks) for r in list(self.windows)]}
            try:
                os.makedirs(self.folder, exist_ok=True)
                write_sidecar(self.folder, data, name=os.path.basename(self.path))
                self._started = True
            except OSError as err:
                self._warn("trend", f"could not write the step-time trend {self.path} ({err.strerror or err}); "
                                    f"training continues")
