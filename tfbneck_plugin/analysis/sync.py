"""One worker's time around its collectives: what :mod:`.job` needs to find, across the
workers of a synchronous job, who the others wait for and why.

In synchronous data-parallel training (``MultiWorkerMirroredStrategy``, Horovod...) every
worker enters the same all-reduce each step, and none leaves it before the last one has
arrived: a worker's time in a collective is the transfer itself plus its wait for the
slowest peer. The worker that arrives last waits least. Comparing the workers' collective
time step by step therefore says who was late and by how much, with no need for their
clocks to agree (:mod:`.job`).

The standard breakdown (:mod:`.breakdown`) gives collectives the first priority. A late
worker's collectives can start while it still waits for its own batch (the loss and metric
reductions do not need the batch), so there its input wait would be hidden inside the very
collective it is late for. Here each step is split again with input wait (and compute)
*before* collectives: ``SYNC_ORDER``. The worker's own limit is then judged by the same
verdict rules over its own time, the step less the time it waited in collectives.

Times are ps inside the analysis and ms in the report, unless a name says otherwise.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..schema import OwnLimit, SyncSection, SyncStep
from ..trace import timeline
from ..trace.timeline import ms
from .advice import advice_for
from .findings import Findings, OwnTime
from .fit_to_run import fit
from .rules import decide
from .verdict import verdict_fields

#: Priority of the categories when a step is split for the job's root cause: compute and
#: copies first (time the worker worked), then input wait, then collectives (time it
#: waited for its peers or moved gradients), then host activity.
SYNC_ORDER = ["device_compute", "host_to_device", "device_to_host", "input", "collective", "kernel_launch",
              "host_compute"]
#: The worker's own time: every category but collectives.
OWN_CATEGORIES = ["device_compute", "host_to_device", "device_to_host", "input", "kernel_launch", "host_compute",
                  "idle"]
#: A task in TensorFlow's device names: ``/job:<type>/replica:<r>/task:<index>``
#: (tensorflow/core/util/device_name_utils.h). The names appear interned among the host
#: plane's stat metadata (e.g. the ``device`` stat of ``RemoteCallOp``).
TASK_RE = re.compile(r"/job:([A-Za-z0-9_.-]+)/replica:\d+/task:(\d+)")
#: The plane that holds the profile's wall-clock start and stop (unix ns):
#: ``profile_start_time`` / ``profile_stop_time`` stats (tsl/profiler/utils/xplane_schema.h,
#: kTaskEnvPlaneName and StatType kEnvProfileStartTime / kEnvProfileStopTime). Line times
#: are relative to ``profile_start_time`` there (seen in every TF 2.21 trace made here:
#: host events fall in [0, stop - start]).
TASK_ENV_PLANE = "Task Environment"
#: Collective group resolution (core/common_runtime/base_collective_executor.cc); its
#: ``group_size`` stat counts the devices that take part in the collective.
GROUP_EVENT = "CollectiveExecutor::CompleteParams"


def wall_clock(space) -> Optional[Tuple[int, int]]:
    """(profile start, profile stop) in unix ns from the ``Task Environment`` plane, or None
    (older traces, e.g. the TensorFlow 2.4 ones of ../shared/realtraces, have no such plane).

    Args:
      space: a ``trace.xspace.Space``.
    """
    env = space.plane(TASK_ENV_PLANE)
    stats = env.plane_stats() if env is not None else {}
    start, stop = stats.get("profile_start_time"), stats.get("profile_stop_time")
    if not isinstance(start, int) or start <= 0:
        return None
    return start, stop if isinstance(stop, int) and stop >= start else start


def task_of(plane) -> Optional[str]:
    """``<job>:<index>`` (e.g. ``worker:1``) of the task that wrote the host plane, from the
    TensorFlow device names interned in it; None when there is none, or several tasks
    appear and the trace cannot say which is its own."""
    names = list(plane.stat_names.values()) + list(plane.event_names.values())
    tasks = {f"{m.group(1)}:{int(m.group(2))}" for n in names if "/job:" in n for m in TASK_RE.finditer(n)}
    return tasks.pop() if len(tasks) == 1 else None


def group_size(view) -> Optional[int]:
    """The collectives' ``group_size`` (devices in the all-reduce group), or None."""
    for li, idx in view.select(view.ids_named([GROUP_EVENT])):
        for v in view.stat_column(li, idx[:8], "group_size"):
            if isinstance(v, int) and v > 0:
                return v
    return None


def sync_section(steps, view, activity, parts: Dict[str, np.ndarray], space,
                 findings: Findings, held=None) -> Optional[SyncSection]:
    """The ``sync`` section of a host report, or None when its steps hold no collective.

    Args:
      steps: the steady steps (:class:`.steps.Steps`) or None; view: the host view or None;
      activity: the breakdown categories' intervals (:class:`.breakdown.Activity`);
      parts: ps per breakdown category per step; space: the host's XSpace (its wall clock);
      findings: the host's findings (the worker's own verdict starts from them);
      held: ``(verdict, findings) -> verdict``, the framework's hold on a verdict its trace
        cannot vouch for (:meth:`.host_analysis.HostAnalysis.held`), None for none.

    Returns:
      ``{"task": "worker:1" | None, "group_size": int | None, "clock": {"start_unix_ns",
      "stop_unix_ns", "source"} | None, "steps": [{"step", "duration_ms", "collective_ms",
      "own_ms": {category: ms}, "start_unix_ns"}], "own": {...}, "network_recommendations":
      [...]}``. ``collective_ms``: collective time after compute and input wait
      (:data:`SYNC_ORDER`); ``own_ms``: the rest of the step by category; ``own``: the
      worker's verdict over its own time (:func:`own_verdict`).
    """
    if steps is None or not steps.count or view is None or not parts["collective"].any():
        return None
    split = timeline.partition(activity.as_dict(), SYNC_ORDER, steps.starts, steps.ends, rest="idle")
    clock = wall_clock(space)
    rows: List[SyncStep] = []
    for i in range(steps.count):
        rows.append({"step": int(steps.numbers[i]), "duration_ms": ms(steps.ends[i] - steps.starts[i]),
                     "collective_ms": ms(split["collective"][i]),
                     "own_ms": {c: ms(split[c][i]) for c in OWN_CATEGORIES},
                     "start_unix_ns": clock[0] + int(steps.starts[i]) // 1000 if clock else None})
    return {
        "task": task_of(view.plane), "group_size": group_size(view),
        "clock": {"start_unix_ns": clock[0], "stop_unix_ns": clock[1],
                  "source": f"{TASK_ENV_PLANE} plane (profile_start_time)"} if clock else None,
        "steps": rows, "own": own_verdict(findings, split, held),
        # fitted as a verdict's are (their worth: a prediction, a bound or why there is none)
        "network_recommendations": fit(advice_for("gradient_sync", findings), findings),
    }


def own_verdict(findings: Findings, parts: Dict[str, np.ndarray], held=None) -> OwnLimit:
    """The worker's own limit: the verdict rules over the step less its collective time.

    The shares the rules read (``pct``) are shares of the worker's own time, so a worker
    that waits most of the step for a peer is judged on what it did in the rest; the
    collective rule cannot apply (its share is 0). The findings carry the own time
    (:class:`.findings.OwnTime`), so the evidence's breakdown sentence is written as a
    breakdown of that time.

    Args:
      findings: the host's findings; parts: ps per category per step, split in :data:`SYNC_ORDER`;
      held: as :func:`sync_section`'s.
    Returns:
      ``{"bottleneck", "cause", "cause_text", "confidence", "evidence", "evidence_detail",
      "recommendations", "pct" (% of the own time, 0-100), "own_ms" (mean ms per step),
      "step_ms" (mean ms per step)}``.
    """
    n = len(parts["idle"])
    own_total = sum(int(parts[c].sum()) for c in OWN_CATEGORIES)
    pct = {c: (round(100.0 * int(parts[c].sum()) / own_total, 2) if own_total else 0.0) for c in OWN_CATEGORIES}
    pct["collective"] = 0.0
    step_ms = ms(sum(int(p.sum()) for p in parts.values()) / n)
    own_ms = ms(own_total / n)
    own = dataclasses.replace(findings, pct=pct, own_time=OwnTime(own_ms=own_ms, step_ms=step_ms))
    v = decide(own)
    v = held(v, own) if held is not None else v
    return {**verdict_fields(v), "pct": pct, "own_ms": own_ms, "step_ms": step_ms}


def steps_by_number(section: Mapping[str, Any]) -> Dict[int, Any]:
    """The section's steps keyed by step number."""
    return {int(r["step"]): r for r in section.get("steps") or []}


def own_means(own_ms: List[Dict[str, float]]) -> Dict[str, float]:
    """Mean ms per step of each own category over steps of one worker (their ``own_ms``)."""
    if not own_ms:
        return {c: 0.0 for c in OWN_CATEGORIES}
    return {c: float(np.mean([o.get(c, 0.0) for o in own_ms])) for c in OWN_CATEGORIES}
