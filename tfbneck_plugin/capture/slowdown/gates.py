"""The confirmation of a stretch as ordered gates, tried at each of its steps by :func:`decide`.
Each gate is a small function of the stretch and the trigger's state that returns a decision
or None (it lets the stretch through); the first decision holds. A decision is an
:class:`~tfbneck_plugin.records.Outcome`, which ends the stretch (a window opens only for
``CAPTURED``, what every gate let through), or a :class:`Hold`, which keeps it open for the
next step. Why each gate is there, with its measurements: docs/slowdown_trigger.md, "How it decides"."""
from __future__ import annotations

from enum import StrEnum
from typing import Callable, List, Optional, Protocol, Union

from ...records import Outcome
from .baseline import Baseline
from .cpu_reads import CpuReads
from .levels import capped_sum
from .stretch import Stretch
from .thresholds import SlowdownTrigger


class Hold(StrEnum):
    """A stretch that goes on: not confirmed yet, or confirmed and waiting (``ANALYSIS`` and
    ``COOLDOWN`` are the log's ``held_by``)."""
    UNCONFIRMED = "unconfirmed"
    FAST_STEP = "fast step"  # a window opens after a slow step, not after a fast one inside the stretch
    ANALYSIS = "analysis"
    COOLDOWN = "cooldown"


Decision = Union[Outcome, Hold]


class TriggerState(Protocol):
    """What the gates read of the trigger (:class:`~.watch.SlowdownWatch`) at a step."""
    trigger: SlowdownTrigger
    baseline: Baseline
    reads: CpuReads
    at: int            # the step beginning now: a window would open at it
    now: float         # the job's clock (s)
    held: bool         # an analysis runs in the training process
    captures: int      # windows the trigger opened so far
    next_allowed: int  # the first step the cooldown lets a window open at


Gate = Callable[[Stretch, TriggerState], Optional[Decision]]


def long_enough(s: Stretch, st: TriggerState, share: float = 1.0) -> bool:
    """The stretch's confirmation: ``consecutive`` steps beyond the threshold on its side. A
    slower one also lasts ``min_seconds`` (each step counted at most
    :data:`~.levels.STALL_CAP` x its median, :func:`~.levels.capped_sum`), or ``quick_steps``
    lasting ``quick_seconds`` on a machine other processes do not keep busy; a faster one (it
    only re-learns the baseline) is confirmed as a baseline arms, by its fast steps alone.
    ``share``: of those seconds."""
    trig = st.trigger
    if len(s.beyond) < trig.consecutive:
        return False
    if not s.slow:
        return st.baseline.enough(s.beyond, share)
    n, level_s = len(s.ascending), capped_sum(s.ascending)
    if level_s >= share * trig.min_seconds:
        return True
    return n >= trig.quick_steps and level_s >= share * trig.quick_seconds and not st.reads.machine_busy(st.now)


def unconfirmed(s: Stretch, st: TriggerState) -> Optional[Decision]:
    """Not long enough yet (:func:`long_enough`)."""
    return None if long_enough(s, st) else Hold.UNCONFIRMED


def faster_level(s: Stretch, st: TriggerState) -> Optional[Decision]:
    """Lastingly faster: a new level (a slowdown recovered, a slow start over), never a window."""
    return None if s.slow else Outcome.FASTER


def usual_level(s: Stretch, st: TriggerState) -> Optional[Decision]:
    """At its confirmation, on a busy machine (or one not sampled): back within ``factor`` of a
    level the baseline held lately and above its present one, the job's own CPU per step not
    grown: the job is back at its usual level, not slowed."""
    if s.confirmed_at is not None:
        return None
    b = st.baseline
    usual = b.usual_level() if st.reads.unsampled_or_busy(st.now) else None
    if usual is not None and b.mean is not None and usual > b.mean \
            and s.level() <= st.trigger.factor * usual and not st.reads.own_work(s, b.learnt_from):
        s.usual = usual
        return Outcome.BACK_TO_USUAL
    return None


def cpu_taken(s: Stretch, st: TriggerState) -> Optional[Decision]:
    """At its confirmation: the job had fewer cores while other processes had more
    (:meth:`~..cpu_taken.CpuTaken.taken_by_others`, its figures kept in ``s.cpu``)."""
    if s.confirmed_at is not None:
        return None
    mean = st.baseline.mean
    s.cpu = st.reads.taken(s, st.now, s.level() / mean if mean else 1.0, st.trigger.factor, st.trigger.cpu_check)
    return Outcome.CPU_TAKEN if s.cpu is not None and s.cpu["taken"] else None


def fast_step(s: Stretch, st: TriggerState) -> Optional[Decision]:
    """The step that just ended was not slow: a window opens after a slow step."""
    return Hold.FAST_STEP if s.times[-1] <= st.baseline.slow_at else None


def max_captures(s: Stretch, st: TriggerState) -> Optional[Decision]:
    """``max_captures`` windows were opened already."""
    return Outcome.MAX_CAPTURES if st.captures >= st.trigger.max_captures else None


def analysis(s: Stretch, st: TriggerState) -> Optional[Decision]:
    """An analysis runs in the training process: a slowdown now may be its own."""
    return Hold.ANALYSIS if st.held else None


def cooldown(s: Stretch, st: TriggerState) -> Optional[Decision]:
    """Within ``cooldown_steps`` of the last window's end."""
    return Hold.COOLDOWN if st.at < st.next_allowed else None


#: The gates in the order they are tried.
GATES: List[Gate] = [unconfirmed, faster_level, usual_level, cpu_taken, fast_step, max_captures, analysis, cooldown]


def decide(s: Stretch, st: TriggerState) -> Decision:
    """The first decision of :data:`GATES`, else ``CAPTURED``: a window opens now."""
    for gate in GATES:
        decision = gate(s, st)
        if decision is not None:
            return decision
    return Outcome.CAPTURED
