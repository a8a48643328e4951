"""Which session reports are the workers of one multi-worker job, and the job's one report.

Each worker of a ``MultiWorkerMirroredStrategy`` job writes its own profiling session (in
its own ``log_dir``, or side by side). :func:`group_jobs` replaces the sessions of each job
by one report (``"kind": "job"``) whose verdict comes from all of them (:mod:`.job`). Two
rules group sessions, and the report says which one did (``job.grouped_by``):

``job_info``  the sessions carry the job BottleneckProfiler recorded (``job`` in the
              sidecar, :mod:`tfbneck_plugin.capture.job`): the same job id, overlapping
              wall-clock windows and different tasks.
``evidence``  sessions without it (older callbacks, other tools) are grouped only when all
              of this holds: each trace names its task in TensorFlow's device names
              (``/job:worker/replica:0/task:1``) and the tasks differ and belong to a
              multi-worker job (not ``localhost``); every one holds collectives in its
              steps; they cover the same step numbers (:data:`SHARED_STEPS_FRACTION`); their
              wall-clock windows overlap; and there are no more of them than the
              collective group's size.

Sessions that cannot be told apart (two sessions of the same task in one window) are left
alone rather than guessed at. Wall-clock windows come from the trace's ``Task
Environment`` plane (:func:`.sync.wall_clock`), else from the session folder's name (the
profiler's local time, to the second). Clocks of different machines are trusted to
:data:`CLOCK_TOLERANCE_S` for grouping only; the root cause compares no clocks.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

from ..logdir import session_folder_time
from ..schema import PerHostRow, SessionDict, add_words, step_time_ms
from ..version import __version__
from . import job as jobmod
from .run_evidence import FASTER_THAN_JOB_X, traced_and_job_step_ms
from .verdict import evidence_details

#: How far apart (s) the clocks of two machines may be for their windows to be compared
#: (our choice: NTP keeps machines within milliseconds; 2 s also covers a session folder's
#: name, which is rounded down to the second).
CLOCK_TOLERANCE_S = 2.0
#: The sessions of one job cover the same steps, but a step may differ (a partial step dropped
#: at a window's edge, a warm-up step excluded on one worker only): the steps common to all of
#: them must make at least this fraction of each session's steps (our choice).
SHARED_STEPS_FRACTION = 0.5
#: A task as the job records it: ``<type>:<index>``, e.g. ``worker:1``, ``chief:0``.
TASK_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}:\d{1,6}$")
#: Top-level keys of a worker's report that do not describe the job as a whole.
WorkerOnlyKey = Literal["run", "session", "path", "hosts", "sync", "trace_viewer", "job", "warnings", "version",
                        "per_host"]
WORKER_ONLY_KEYS: Tuple[WorkerOnlyKey, ...] = ("run", "session", "path", "hosts", "sync", "trace_viewer", "job",
                                              "warnings", "version", "per_host")


@dataclass
class Candidate:
    """A one-host session report that may be a worker of a job."""
    index: int                      # its position in the list of reports
    report: SessionDict
    task: Optional[str]             # "worker:1"
    job_id: Optional[str]           # recorded by BottleneckProfiler, else None
    steps: Tuple[int, ...]          # the analysed step numbers
    window: Optional[Tuple[float, float]]   # wall-clock window (unix s)
    group_size: Optional[int]


def recorded_job(sidecar: Dict) -> Optional[Dict]:
    """The job a sidecar records (``job``, written by :mod:`tfbneck_plugin.capture.job`), as
    ``{"id": str, "task": "worker:1", "workers": int | None, "cluster": {type: count},
    "source": str}``; None when it records none, or not in that shape (a session is then
    grouped on evidence alone)."""
    job = sidecar.get("job")
    if not isinstance(job, dict):
        return None
    jid, task = job.get("id"), job.get("task")
    if not (isinstance(jid, str) and jid and isinstance(task, str) and TASK_NAME_RE.match(task)):
        return None
    cluster = job["cluster"] if isinstance(job.get("cluster"), dict) else {}
    workers = job.get("workers")
    return {"id": jid[:64], "task": task,
            "workers": workers if isinstance(workers, int) and not isinstance(workers, bool) else None,
            "cluster": {str(k): v for k, v in cluster.items() if isinstance(v, int) and not isinstance(v, bool)},
            "source": str(job.get("source") or "")}


def candidate(index: int, r: SessionDict) -> Optional[Candidate]:
    """The report as a :class:`Candidate`, or None when it cannot be a worker (an error, a
    session with several hosts, or neither job info nor collectives)."""
    if r.get("status") != "ok" or len(r.get("hosts") or []) != 1 or r.get("kind") == "job":
        return None
    info = r.get("job") if isinstance(r.get("job"), dict) else None
    sync = r.get("sync")
    if info is None and sync is None:
        return None
    recorded_task, recorded_id = (info.get("task"), info.get("id")) if info else (None, None)
    task = recorded_task if isinstance(recorded_task, str) and recorded_task else (sync or {}).get("task")
    steps = tuple(int(s["step"]) for s in ((r.get("steps") or {}).get("items") or []))
    return Candidate(index=index, report=r, task=task, job_id=recorded_id if isinstance(recorded_id, str) else None,
                     steps=steps, window=wall_window(r), group_size=(sync or {}).get("group_size"))


def wall_window(r: Mapping[str, Any]) -> Optional[Tuple[float, float]]:
    """The session's wall-clock window (unix s): the trace's profile start and stop, else the
    session folder's name (local time) plus the analysed window's length; None if neither."""
    clock = (r.get("sync") or {}).get("clock")
    if clock:
        return clock["start_unix_ns"] / 1e9, clock["stop_unix_ns"] / 1e9
    start = session_folder_time(str(r.get("session") or ""))
    if start is None:
        return None
    return start, start + 1.0 + float(r.get("window_ms") or 0.0) / 1e3


def _overlapping(members: List[Candidate]) -> List[List[Candidate]]:
    """Members split into sets whose wall-clock windows overlap (within the tolerance);
    members without a window are left out."""
    timed = sorted(((c, c.window) for c in members if c.window), key=lambda cw: cw[1][0])
    out: List[List[Candidate]] = []
    end: Optional[float] = None
    for c, (start, stop) in timed:
        if end is not None and start - CLOCK_TOLERANCE_S <= end:
            out[-1].append(c)
            end = max(end, stop)
        else:
            out.append([c])
            end = stop
    return out


def _distinct_tasks(members: List[Candidate]) -> bool:
    tasks = [c.task for c in members]
    return all(tasks) and len(set(tasks)) == len(tasks)


def _shared_steps(g: List[Candidate]) -> List[int]:
    """The step numbers common to every session of ``g``, when they make at least
    :data:`SHARED_STEPS_FRACTION` of each session's steps; else []."""
    common = set.intersection(*(set(c.steps) for c in g))
    return sorted(common) if common and all(len(common) >= SHARED_STEPS_FRACTION * len(c.steps) for c in g) else []


def _by_job_info(cands: List[Candidate]) -> List[Tuple[List[Candidate], str]]:
    keyed: Dict[str, List[Candidate]] = {}
    for c in cands:
        if c.job_id:
            keyed.setdefault(c.job_id, []).append(c)
    out = []
    for job_id, members in keyed.items():
        for g in _overlapping(members):  # runs of one cluster (and windows of one run) apart
            g = sorted(g, key=lambda c: _task_key(c.task))
            if len(g) >= 2 and _distinct_tasks(g):
                out.append((g, f"Grouped by the job BottleneckProfiler recorded in each session (job id {job_id}, "
                               f"tasks {', '.join(str(c.task) for c in g)}) and their overlapping wall-clock windows."))
    return out


def _multi_worker_task(task: Optional[str]) -> bool:
    return bool(task) and not str(task).startswith("localhost:")


def _by_evidence(cands: List[Candidate]) -> List[Tuple[List[Candidate], str]]:
    members = [c for c in cands if c.job_id is None and c.report.get("sync") and c.steps and _multi_worker_task(c.task)]
    out = []
    for g in _overlapping(members):
        g = sorted(g, key=lambda c: _task_key(c.task))
        sizes = {c.group_size for c in g if c.group_size}
        steps = _shared_steps(g) if len(g) >= 2 else []
        if not steps or not _distinct_tasks(g) or (sizes and len(g) > min(sizes)):
            continue  # not enough evidence, or sessions that cannot be told apart: leave them alone
        windows = [c.window for c in g if c.window]  # every member of an overlapping set has one
        span = min(w[1] for w in windows) - max(w[0] for w in windows)
        out.append((g, f"Grouped on evidence (no job was recorded): tasks {', '.join(str(c.task) for c in g)} "
                       f"named in the traces' device names, the same steps ({steps[0]}-{steps[-1]}), collectives "
                       f"in every worker's steps" + (f" (group size {min(sizes)})" if sizes else "")
                       + (f", wall-clock windows overlapping for {span * 1e3:.0f} ms." if span > 0 else
                          f", wall-clock windows within {CLOCK_TOLERANCE_S:.0f} s of each other.")))
    return out


def group_jobs(reports: Sequence[SessionDict]) -> List[SessionDict]:
    """The reports, with the sessions of each multi-worker job replaced by one job report
    (at the place of its first session); every other report is kept as it is.

    Args:
      reports: session reports (``analysis.session.analyze_session``), in display order.
    Returns:
      a new list; the given reports are not modified.
    """
    cands = [c for c in (candidate(i, r) for i, r in enumerate(reports)) if c is not None]
    groups = _by_job_info(cands)
    taken = {c.index for g, _ in groups for c in g}
    groups += _by_evidence([c for c in cands if c.index not in taken])
    first = {}
    member_of = {}
    for g, why in groups:
        first[min(c.index for c in g)] = (g, why)
        member_of.update({c.index: True for c in g})
    out = []
    for i, r in enumerate(reports):
        if i in first:
            g, why = first[i]
            out.append(job_report([c.report for c in g], [str(c.task) for c in g], why,
                                  "job_info" if g[0].job_id else "evidence", g[0].job_id))
        elif i not in member_of:
            out.append(r)
    return out


def _task_key(task: Optional[str]):
    kind, _, index = (task or "").partition(":")
    return (kind != "chief", kind, int(index) if index.isdigit() else 0)


def job_report(reports: List[SessionDict], names: List[str], why: str, grouped_by: str,
               job_id: Optional[str] = None) -> SessionDict:
    """One report for the workers' session reports (same order as ``names``).

    The top-level fields describe the worker whose report stands for the job (the
    straggler, else the slowest); the verdict, evidence and recommendations are the job's
    (:func:`.job.diagnose`); ``per_host`` has one row per worker and ``job`` the grouping
    and the root cause.
    """
    workers = [jobmod.Worker(name=n, report=r) for n, r in zip(names, reports)]
    d = jobmod.diagnose(workers)
    primary = d.primary if d else max(range(len(workers)), key=lambda i: workers[i].step_ms)
    base = reports[primary]
    path = _common_path([str(r.get("path") or "") for r in reports])
    run = _common_run([r.get("run") for r in reports])
    if run == "." and path:  # workers' runs with nothing in common: the folder that holds them all
        run = path.rstrip("/").rsplit("/", 1)[-1] or run
    out: SessionDict = {"version": __version__, "kind": "job", "run": run,
                        "session": f"job:{job_id or base.get('session')}", "hosts": list(names), "path": path,
                        "status": "ok"}
    out.update(_job_fields(base))
    warnings = [w for r in reports for w in r.get("warnings") or []]
    if warnings:
        out["warnings"] = warnings
    section: Dict[str, Any] = {"id": job_id, "grouped_by": grouped_by, "grouping": why, "workers": list(names),
               "sessions": [{"task": n, "run": r.get("run"), "session": r.get("session"), "path": r.get("path")}
                            for n, r in zip(names, reports)]}
    if d is None:
        section.update({"straggler": None, "root_cause": None})
        out["evidence"] = [why, "The workers' steps could not be matched by step number (or a worker's steps held no "
                                "collective): the verdict is that of the slowest worker alone."] + list(base["evidence"])
        out["evidence_detail"] = evidence_details(out["evidence"][:2]) + list(
            base.get("evidence_detail") or [])
    else:
        section.update(d.section)
        section["root_cause"] = jobmod.ROOT_CAUSE
    out["job"] = section
    out["per_host"] = [_worker_row(n, r) for n, r in zip(names, reports)]
    if d is not None:
        jobmod.merge_diagnosis(out, d, out["per_host"], lead=why)
    said = _unrepresentative_windows(names, reports)
    if said:  # measured by the workers' step clocks, not the traces
        out["evidence"] = list(out.get("evidence") or []) + said
        out["evidence_detail"] = list(out.get("evidence_detail") or []) + [
            {"text": text, "basis": "system_metrics"} for text in said]
    out["trace_viewer"] = base.get("trace_viewer")
    return add_words(out)


def _job_fields(r: SessionDict) -> SessionDict:
    """A copy of a worker's report less :data:`WORKER_ONLY_KEYS`."""
    out = r.copy()
    for key in WORKER_ONLY_KEYS:
        out.pop(key, None)
    return out


def _unrepresentative_windows(names: List[str], reports: List[SessionDict]) -> List[str]:
    """One sentence per worker whose traced step is under
    :data:`.run_evidence.FASTER_THAN_JOB_X` of its own job clock around the window
    (``window.job_step_ms``, from its trend file): the job's verdict then rests on steps
    that were not the job's steady state (a one-step window of a straggler job traced a
    21 ms step of a 61 ms job, and its verdict named the wrong cause)."""
    out = []
    for name, r in zip(names, reports):
        steps = traced_and_job_step_ms(r)
        if steps is None:
            continue
        traced, job = steps
        if traced / job < FASTER_THAN_JOB_X:
            out.append(f"The traced step of {name} ({traced:.3g} ms) is {traced / job:.2f}x its own steps around "
                       f"the window ({job:.3g} ms by its trend file, unprofiled): the window did not see the job's "
                       f"steady state, so this verdict may not hold; profile more steps, later in an epoch.")
    return out


def _worker_row(name: str, r: SessionDict) -> PerHostRow:
    """A worker's row of ``per_host``: where its session is, its own report's numbers and
    verdict (:func:`.job.merge_diagnosis` adds its part in the job's root cause)."""
    row: PerHostRow = {"host": name, "run": r.get("run"), "session": r.get("session"), "path": r.get("path"),
                       "step_time_ms": step_time_ms(r), "breakdown_pct": r.get("breakdown_pct"),
                       "bottleneck": r.get("bottleneck"), "cause": r.get("cause"),
                       "confidence": r.get("confidence"), "trace_viewer": r.get("trace_viewer")}
    return row


def _common_run(runs: List[Optional[str]]) -> str:
    parts = [str(r or ".").split("/") for r in runs]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return "/".join(common) if common and common != ["."] else "."


def _common_path(paths: List[str]) -> str:
    if any("://" in p for p in paths):
        return paths[0].rsplit("/", 1)[0]
    try:
        return os.path.commonpath(paths) if all(paths) else ""
    except ValueError:
        return ""
