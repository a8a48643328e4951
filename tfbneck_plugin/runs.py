"""What a run's step-time trend files say about the whole run, for offline analysis: how
long it trained (batches and time), and which window (kind, trigger) each profiling session
was. The files are those ``BottleneckProfiler`` writes (``<run>/plugins/bottleneck/
steptimes_*.json``, format in :mod:`tfbneck_plugin.records`). No TensorFlow here; nothing
is written. The batch driver reads each run's context here (:func:`read_run`) and writes each
session's :func:`run_facts` into its report (:func:`tfbneck_plugin.batch.reports_in_runs`).

A run's length, from each trend file (one per training process that used the run's folder):
batches = the last point's ``step`` (the last batch of its period, 1-based); time = batches
/ ``steps_per_execution`` x the mean time per execution over the file's points (weighted by
each point's ``n``, the steps it timed). The file keeps at most 4,000 points, thinning old
ones, so the count comes from the last batch number, not from adding up points. A run's
length is the sum over its files.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .analysis.run_evidence import RunFacts
from .logdir import Session, is_kineto_session, is_remote, kineto_session_time, open_any, session_folder_time
from .records import (STEP_TIMES_DIR, STEP_TIMES_PREFIX, STEP_TIMES_SUFFIX, Outcome, SidecarError, read_record,
                      read_step_times)

#: A measurement of the input pipeline's cost by ablation, in the run's folder:
#: ``<run>/plugins/bottleneck/input_cost_<YYYY_MM_DD_HH_MM_SS>_<host>_<pid>.json``, written by
#: :func:`tfbneck_plugin.capture.input_cost.measure_input_cost`.
INPUT_COST_PREFIX = "input_cost_"
INPUT_COST_FORMAT = "tfbneck.input_cost"
#: A measurement is a few hundred bytes; files larger than this are not read.
MAX_INPUT_COST_BYTES = 1024 * 1024
#: The keys a measurement must hold, each a number (what the report shows).
INPUT_COST_NUMBERS = ("real_ms_per_batch", "cached_ms_per_batch", "gain", "time_unix")


def read_input_cost(path: str, opener=open) -> Dict:
    """An input-cost measurement (:data:`INPUT_COST_FORMAT`). Raises SidecarError with one line
    naming the file when it is unreadable, too large, of another format or without its numbers."""
    data = read_record(path, opener, MAX_INPUT_COST_BYTES, "input-cost measurement", INPUT_COST_FORMAT)
    bad = [k for k in INPUT_COST_NUMBERS
           if not isinstance(data.get(k), (int, float)) or isinstance(data.get(k), bool) or data[k] != data[k]]
    if bad:
        raise SidecarError(f"{path}: input-cost measurement without a number for {', '.join(bad)}")
    return data


def run_dir_of(session: Session) -> str:
    """The run's folder of a session ``<run>/plugins/profile/<session>`` (path or URL),
    BottleneckProfiler's on every Keras backend; of PyTorch profiler traces elsewhere, the folder
    that holds them (``tensorboard_trace_handler(dir)`` writes them straight into ``dir``, the run)."""
    if is_kineto_session(session) and session.path.replace("\\", "/").rstrip("/").split("/")[-3:-1] != [
            "plugins", "profile"]:
        return session.path
    if is_remote(session.path):
        return session.path.rstrip("/").rsplit("/", 3)[0]
    parts = session.path.rstrip(os.sep).rsplit(os.sep, 3)  # string work: called for every session of a fleet
    return parts[0] if len(parts) == 4 else ""


def list_trend_files(run_dir: str, prefix: str = STEP_TIMES_PREFIX) -> List[Tuple[str, int, float]]:
    """``(path, size in bytes, modification time)`` of the run's trend files (or, with
    ``prefix="system_"``, its system records; with :data:`INPUT_COST_PREFIX`, its input-cost
    measurements), newest name first (names start with the
    job's start time). Raises OSError when listing fails."""
    if is_remote(run_dir):
        from . import remote
        fs, root = remote.filesystem(run_dir)
        pattern = root.rstrip("/") + "/plugins/bottleneck/" + prefix + "*" + STEP_TIMES_SUFFIX
        scheme = run_dir.split("://", 1)[0]
        out = []
        for p in fs.glob(pattern):
            info = fs.info(p)
            stamp = info.get("mtime") or info.get("LastModified") or info.get("updated") or 0
            out.append((f"{scheme}://{p}", int(info.get("size") or 0), hash(str(stamp))))
        return sorted(out, key=lambda x: x[0].rsplit("/", 1)[-1], reverse=True)
    folder = os.path.join(run_dir, STEP_TIMES_DIR)
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for n in names:
        if n.startswith(prefix) and n.endswith(STEP_TIMES_SUFFIX):
            st = os.stat(os.path.join(folder, n))
            out.append((os.path.join(folder, n), st.st_size, st.st_mtime_ns))
    return sorted(out, key=lambda x: os.path.basename(x[0]), reverse=True)


#: The folder-name time of a session (logdir.session_folder_time), memoized: a fleet asks it
#: for every session, and many share a name prefix.
_named_time = functools.lru_cache(maxsize=65536)(session_folder_time)


def session_time(s: Session) -> float:
    """When the session was recorded (unix seconds): the time its folder is named after
    (local time, as the profiler names it), or for PyTorch traces the time their file names
    carry (:func:`.logdir.kineto_session_time`), else its newest trace file's modification
    time, else 0."""
    named = _named_time(s.name[:19])  # the time part of the name
    if named is not None:
        return named
    named = kineto_session_time(s)
    if named is not None:
        return named
    newest = 0.0
    for p in list(s.files) + list(s.legacy_files) + [x for x in (s.skipped,) if x]:
        if not is_remote(p):
            try:
                newest = max(newest, os.stat(p).st_mtime)
            except (OSError, ValueError):
                pass
    return newest


@dataclass
class RunContext:
    """What a run's trend files say.

    Attributes:
      batches: batches trained (sum over the run's trend files), None without a point.
      time_ms: time those batches took (ms), None without a point.
      windows: ``{session folder name: window}`` (the trend file's window dicts).
      skipped_windows: windows the files record as ``skipped``.
      files: trend files read; problems: one line per file that could not be read.
      uncaptured: ``(trend file, log entry)`` of each slow stretch the slowdown trigger
        confirmed but did not profile (its ``outcome`` begins "not captured"; records.py).
      input_cost: the newest readable input-cost measurement in the run's folder
        (:func:`read_input_cost`), None when there is none.
      epochs: ``{session folder name: batches per epoch}`` from the trend file that names the
        session (:func:`epoch_length`), for the sessions whose file gives it.
    """
    batches: Optional[int] = None
    time_ms: Optional[float] = None
    windows: Dict[str, Dict] = field(default_factory=dict)
    skipped_windows: int = 0
    files: int = 0
    problems: List[str] = field(default_factory=list)
    uncaptured: List[Tuple[str, Dict]] = field(default_factory=list)
    input_cost: Optional[Dict] = None
    epochs: Dict[str, int] = field(default_factory=dict)

    @property
    def length_known(self) -> bool:
        return self.batches is not None and self.time_ms is not None


def file_length(data: Dict) -> Optional[Tuple[int, float]]:
    """(batches, time in ms) one trend file records, None when it has no timed point."""
    points = [p for p in data.get("points") or []
              if isinstance(p.get("step"), int) and isinstance(p.get("mean_ms"), (int, float))]
    weight = sum(int(p.get("n") or 0) for p in points)
    if not points or weight <= 0:
        return None
    spe = data.get("steps_per_execution")
    spe = spe if isinstance(spe, int) and not isinstance(spe, bool) and spe > 0 else 1
    mean_per_execution = sum(float(p["mean_ms"]) * int(p.get("n") or 0) for p in points) / weight
    batches = max(p["step"] for p in points)
    return batches, batches / spe * mean_per_execution


def epoch_length(points: List[Dict]) -> Optional[int]:
    """Batches per epoch of a trend file's ``points`` (records.py: ``first_step``, ``step``,
    1-based batches, and Keras' 0-based ``epoch``), None unless the points give it exactly.

    By default the callback ends a period at each epoch's end (``on_epoch_end``), so each point
    is one epoch. The length is read only from points that show that layout: one point per
    epoch, consecutive epochs, each point starting the batch after the one before, all the
    epochs but the last (which an early stop may cut) of one length, each starting a whole
    number of epochs after batch 1. Periods of ``step_time_every`` batches mostly fail those
    checks (they cut epochs, or skip epoch numbers), as does a file thinned past
    :data:`~.capture.trend.MAX_POINTS` points; a period between one and two epochs long can
    pass them over its first few points and read as the epoch (the file does not record
    ``step_time_every``), and a period of exactly one epoch passes, rightly.
    """
    pts = [p for p in points if all(isinstance(p.get(k), int) and not isinstance(p.get(k), bool)
                                    for k in ("first_step", "step", "epoch"))]
    if len(pts) < 2 or len(pts) != len(points):
        return None
    for a, b in zip(pts, pts[1:]):
        if b["epoch"] != a["epoch"] + 1 or b["first_step"] != a["step"] + 1:
            return None
    lengths = {p["step"] - p["first_step"] + 1 for p in pts[:-1]}
    if len(lengths) != 1:
        return None
    (n,) = lengths
    if n < 1 or (pts[0]["first_step"] - 1) % n or pts[-1]["step"] - pts[-1]["first_step"] + 1 > n:
        return None
    return n


def read_run(run_dir: str) -> RunContext:
    """The :class:`RunContext` of a run's folder. Never raises: unreadable files are listed
    in ``problems``."""
    ctx = RunContext()
    try:
        files = list_trend_files(run_dir)
    except Exception as err:  # noqa: BLE001 - one unlistable run must not stop a fleet
        ctx.problems.append(f"{run_dir}: trend files cannot be listed ({type(err).__name__})")
        return ctx
    for path, _size, _mtime in files:
        try:
            data = read_step_times(path, open_any)
        except SidecarError as err:
            ctx.problems.append(str(err))
            continue
        ctx.files += 1
        length = file_length(data)
        if length is not None:
            ctx.batches = (ctx.batches or 0) + length[0]
            ctx.time_ms = (ctx.time_ms or 0.0) + length[1]
        state = data.get("trigger_state")
        for e in (state.get("log") if isinstance(state, dict) else None) or []:
            outcome = Outcome.of(e.get("outcome")) if isinstance(e, dict) else None
            if outcome is not None and outcome.uncaptured:
                ctx.uncaptured.append((path, e))
        epoch = epoch_length(data.get("points") or [])
        for w in data.get("windows") or []:
            if w.get("status") == "skipped":
                ctx.skipped_windows += 1
            if isinstance(w.get("session"), str):
                ctx.windows.setdefault(w["session"], w)
                if epoch is not None:
                    ctx.epochs.setdefault(w["session"], epoch)
    _read_input_cost(run_dir, ctx)
    return ctx


def _read_input_cost(run_dir: str, ctx: RunContext) -> None:
    """The newest readable measurement of the run's folder into ``ctx.input_cost``; the
    unreadable ones into ``ctx.problems``."""
    try:
        files = list_trend_files(run_dir, prefix=INPUT_COST_PREFIX)
    except Exception:  # noqa: BLE001 - listed once already above; a race must not stop the run's report
        return
    for path, _size, _mtime in files:  # newest name first
        try:
            ctx.input_cost = read_input_cost(path, open_any)
            return
        except SidecarError as err:
            ctx.problems.append(str(err))


def window_of(ctx: Optional[RunContext], session_name: str) -> Optional[Dict]:
    """``{"index", "kind", "trigger", "steps"}`` of the window that recorded a session
    (``trigger``: the trigger's ``kind``, e.g. ``slowdown``, or None for a scheduled
    window), None when no trend file names the session."""
    w = ctx.windows.get(session_name) if ctx else None
    if w is None:
        return None
    trig = w.get("trigger")
    out = {"index": w.get("index"), "kind": w.get("kind") or "scheduled",
           "trigger": trig.get("kind") if isinstance(trig, dict) else None, "steps": w.get("steps")}
    o = w.get("overhead")
    if isinstance(o, dict) and isinstance(o.get("job_step_ms"), (int, float)) and o["job_step_ms"] > 0:
        out["job_step_ms"] = float(o["job_step_ms"])  # the job's own step around the window, unprofiled
        out["overhead_x"] = o.get("x")
    return out


def run_facts(ctx: RunContext, s: Session) -> RunFacts:
    """The :class:`~tfbneck_plugin.analysis.run_evidence.RunFacts` of session ``s`` from its
    run's context ``ctx`` (:func:`read_run` of its run folder); its window carries
    ``epoch_batches`` (batches per epoch) where the window's trend file gives it."""
    length: Optional[Dict[str, float]] = None
    if ctx.batches is not None and ctx.time_ms is not None:
        length = {"batches": ctx.batches, "time_ms": round(ctx.time_ms, 3)}
    window = window_of(ctx, s.name)
    if window is not None and s.name in ctx.epochs:
        window["epoch_batches"] = ctx.epochs[s.name]
    return RunFacts(session_time=session_time(s) or None, window=window, run_length=length,
                    input_cost=ctx.input_cost)
