"""The slowdown trigger's thresholds: :class:`SlowdownTrigger`, what a user passes as
``BottleneckProfiler(on_slowdown=...)``. How each default was chosen: docs/slowdown_trigger.md,
"How the defaults were chosen"."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Optional

#: Clean steps the baseline needs before the trigger is armed, at the least (and the fewest
#: ``horizon_steps`` may be): the median of 20 steps was within 10% of the median of 200 on the
#: slowdown corpus's steady runs of steps of 15 ms and more (docs/slowdown_capture.md).
MIN_BASELINE_STEPS = 20


@dataclass(frozen=True)
class SlowdownTrigger:
    """When ``BottleneckProfiler(on_slowdown=...)`` opens a profiling window by itself.

    A *slow stretch* begins when the level of the last few steps (about 0.5 s of them, 5 to
    31 steps; their mean without the largest tenth) rises above ``factor`` times the
    baseline's level; a few fast steps inside it do not end it. It is *confirmed* (a window
    opens) when it has lasted ``consecutive`` steps and ``min_seconds``, or ``quick_steps``
    steps and ``quick_seconds`` (jobs of short steps are confirmed sooner). The defaults were
    chosen on the slowdown corpus (docs/slowdown_trigger.md, "How the defaults were chosen").

    Args:
      factor: how much slower than the baseline's level (its trimmed mean,
        :func:`~tfbneck_plugin.capture.slowdown.levels.trimmed_mean`) a stretch must be
        (default 1.5: between the factor a busy machine alone reached in a steady run, about
        1.13, and the highest at which every required slowdown was still captured, 1.75-2.0).
      consecutive: the fewest steps a stretch needs, fast ones inside it included (default 5).
      min_seconds: ... and how long it must last (default 3 s). quick_steps, quick_seconds:
        or this many steps lasting this long (defaults 300 steps, 2.0 s: a stretch of slow steps
        under 6.7 ms is confirmed after 2 s; 300 steps of 10 ms take min_seconds), except on a
        machine other processes keep busy (min_seconds then: a busy machine holds a job of
        1-2 ms steps 1.5-2x slower for 1-2 s at a time).
      window_steps: steps profiled by a window it opens (default 5) ...
      window_seconds: ... and at least this long at the slow stretch's median step time
        (default 0.1 s; capped by the profiler's ``max_window_steps``): a window of 5 steps of
        1-2 ms lasts less than the input pipeline's prefetch buffers hold, and its steps are
        served from the buffer. For steps of 20 ms or more it changes nothing.
      cooldown_steps: after a window opened by the trigger, a confirmed stretch waits this
        many steps more (default 100); the baseline meanwhile learns the new level.
      max_captures: at most this many windows opened by the trigger per profiler (default 3).
      horizon_steps: the baseline holds at most the last this many clean steps (default 2048:
        2 s of a job of 1 ms steps, whose step time follows the machine's load from second
        to second; 256 steps, a quarter second, made a quiet moment its baseline).
      warmup_steps: the first this many batches of the job are not timed (default 20; with
        ``steps_per_execution`` k, the first ceil(20 / k) executions).
      cpu_check: whether a stretch during which other processes took the job's cores is left
        uncaptured (default True: :mod:`~tfbneck_plugin.capture.cpu_taken`; a profile of the
        job cannot show another process's work). False captures it like any other: for a
        job whose slowdowns are waits (storage, network) on a machine others keep busy,
        which the check cannot tell from cores taken.

    Raises:
      ValueError: a value out of range (the message says what to pass).
    """
    factor: float = 1.5
    consecutive: int = 5
    min_seconds: float = 3.0
    window_steps: int = 5
    window_seconds: float = 0.1
    cooldown_steps: int = 100
    max_captures: int = 3
    horizon_steps: int = 2048
    warmup_steps: int = 20
    quick_steps: int = 300
    quick_seconds: float = 2.0
    cpu_check: bool = True

    def __post_init__(self):
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) or not self.factor > 1:
            raise ValueError(f"SlowdownTrigger(factor={self.factor!r}): pass a number above 1, e.g. 1.5 "
                             f"(steps 50% slower than the baseline)")
        for name in ("min_seconds", "quick_seconds", "window_seconds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"SlowdownTrigger({name}={v!r}): pass seconds >= 0, e.g. 1.5")
        for name, low in (("consecutive", 1), ("window_steps", 1), ("cooldown_steps", 0), ("max_captures", 1),
                          ("horizon_steps", MIN_BASELINE_STEPS), ("warmup_steps", 0), ("quick_steps", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"SlowdownTrigger({name}={v!r}): pass an int >= {low}")
        if not isinstance(self.cpu_check, bool):
            raise ValueError(f"SlowdownTrigger(cpu_check={self.cpu_check!r}): pass True or False")

    def to_dict(self) -> Dict:
        """The thresholds, as recorded in the sidecar and the trend file."""
        return asdict(self)


def as_trigger(on_slowdown) -> Optional[SlowdownTrigger]:
    """``BottleneckProfiler(on_slowdown=...)``: False/None (off), True (defaults) or a
    :class:`SlowdownTrigger`.

    Raises:
      ValueError: anything else.
    """
    if on_slowdown is None or on_slowdown is False:
        return None
    if on_slowdown is True:
        return SlowdownTrigger()
    if isinstance(on_slowdown, SlowdownTrigger):
        return on_slowdown
    raise ValueError(f"on_slowdown={on_slowdown!r}: pass True (default thresholds), False, or "
                     f"SlowdownTrigger(factor=1.5, min_seconds=1.5, ...)")
