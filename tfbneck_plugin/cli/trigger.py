"""``tfbneck trigger``: what the slowdown trigger saw in a run, read from its trend files.

    tfbneck trigger PATH [PATH ...]

For a user who expected a triggered window and got none (who would otherwise glob
``plugins/bottleneck/steptimes_*.json`` and parse ``trigger_state`` by hand): for each
trend file under each PATH, when the trigger armed and on which baseline, then every slow
(or fast) stretch it counted, with its steps, seconds, median step time against the
baseline's, its level's peak against the threshold, and how it ended (``captured``,
``ended: fast_steps: too short``, ``not captured: CPU taken by other processes``...). The
fields are those of ``trigger_state`` in :mod:`tfbneck_plugin.records`; nothing is computed
here. No TensorFlow.

A file whose ``trigger_state`` is not such a record is named in one line on standard error
and the others are still printed; text from a file is printed with its control characters
escaped (a file is data, not terminal commands). Exit status: 0 when at least one trend
file was read; 2 when none was found or none could be read.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Dict, List, Optional

from ..render.console import write_stdout
from ..logdir import is_remote, open_any
from ..records import (MAX_TRIGGER_LOG, STEP_TIMES_DIR, STEP_TIMES_PREFIX, STEP_TIMES_SUFFIX, SidecarError,
                      read_step_times)


def add_parser(sub) -> None:
    t = sub.add_parser("trigger", help="what the slowdown trigger saw: when it armed, each slow stretch and why it "
                                       "was or was not profiled",
                       description="Read the step-time trend files (<run>/plugins/bottleneck/steptimes_*.json) under "
                                   "each PATH and print the slowdown trigger's record: when it armed and on which "
                                   "baseline, every stretch of slow (or fast) steps it counted, and how each ended.")
    t.add_argument("paths", nargs="+", metavar="PATH", help="a logdir, a run folder or one steptimes_*.json file")


def find_trend_files(path: str, problems: List[str]) -> List[str]:
    """The trend files at or under ``path`` (anything but a folder is taken as it is, for the
    reader to accept or refuse), sorted; folders that cannot be listed go to ``problems``.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ValueError: ``path`` is a remote URL (this command reads local folders).
    """
    if path.startswith("file://"):
        path = path[len("file://"):]
    if is_remote(path):
        raise ValueError(f"{path}: tfbneck trigger reads local folders; copy the run's plugins/bottleneck "
                         "folder here first")
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{path}: no such file or folder")
    if not os.path.isdir(path):
        return [path]
    found = []
    tail = os.sep + os.path.normpath(STEP_TIMES_DIR)

    def unlistable(err: OSError) -> None:
        problems.append(f"{err.filename}: folder cannot be listed ({type(err).__name__})")

    for dirpath, _dirnames, filenames in os.walk(path, onerror=unlistable, followlinks=False):
        if os.path.abspath(dirpath).endswith(tail):
            found += [os.path.join(dirpath, n) for n in filenames
                      if n.startswith(STEP_TIMES_PREFIX) and n.endswith(STEP_TIMES_SUFFIX)]
    return sorted(found)


def _text(value) -> str:
    """``value`` as text with its control characters escaped (ESC, CR, newlines, NUL)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


def _number(value) -> Optional[float]:
    """A finite number from the file, else None (a bool, a string, an int too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _ms(value) -> str:
    v = _number(value)
    return f"{v:.3g} ms" if v is not None else "? ms"


def _count(value) -> str:
    """A step or a count of steps, as the file gives it; ``?`` for anything but a plausible integer."""
    ok = isinstance(value, int) and not isinstance(value, bool) and -10 ** 15 < value < 10 ** 15
    return str(value) if ok else "?"


def check_state(path: str, data: Dict) -> None:
    """Raises SidecarError (one line naming ``path``) when the file's ``trigger_state`` is
    present but not a trigger record: not an object, its ``log`` not a list of objects, or
    ``armed``/``captures``/``short_runs`` of the wrong type."""
    state = data.get("trigger_state")
    if state is None:
        return
    if not isinstance(state, dict):
        raise SidecarError(f"{path}: trigger_state is not an object")
    log = state.get("log", [])
    if not isinstance(log, list) or not all(isinstance(e, dict) for e in log):
        raise SidecarError(f"{path}: trigger_state.log is not a list of objects")
    if state.get("armed") not in (None, True, False):
        raise SidecarError(f"{path}: trigger_state.armed is not true or false")
    for key in ("captures", "short_runs"):
        if key in state and _count(state[key]) == "?":
            raise SidecarError(f"{path}: trigger_state.{key} is not a whole number")


def _header(path: str, data: Dict) -> str:
    trig = data.get("trigger")
    state = data.get("trigger_state")
    who = f"host {_text(data.get('host', '?'))}, pid {_count(data.get('pid'))}"
    if not isinstance(trig, dict):
        return f"{_text(path)} ({who}): no slowdown trigger (on_slowdown was off)"
    factor, seconds = _number(trig.get("factor")), _number(trig.get("min_seconds"))
    rule = f"{factor:g}x" if factor is not None else "?x"
    rule += f" for {seconds:g} s" if seconds is not None else " for ? s"
    quick, quick_s = _number(trig.get("quick_steps")), _number(trig.get("quick_seconds"))
    if quick and quick_s is not None:
        rule += f" (or {quick:g} steps lasting {quick_s:g} s on an idle machine)"
    captures = _count(state.get("captures", 0)) if isinstance(state, dict) else "0"
    return f"{_text(path)} ({who}): slowdown trigger {rule}; windows opened: {captures}"


def entry_line(e: Dict) -> str:
    """One line for one ``trigger_state.log`` entry (fields: :mod:`tfbneck_plugin.records`)."""
    event = e.get("event")
    if event == "armed":
        busy = "; busy machine: the baseline had to last 2 s" if e.get("busy_machine") is True else ""
        tail = _count(e.get("slow_tail_steps"))
        tail = f"; its last {tail} steps, slow already, left out" if tail not in ("?", "0") else ""
        return (f"  step {_count(e.get('step'))}: armed, baseline median {_ms(e.get('baseline_p50_ms'))} over "
                f"{_count(e.get('baseline_steps'))} steps, slow beyond {_ms(e.get('threshold_ms'))}{busy}{tail}")
    if event == "run":
        seconds = _number(e.get("seconds"))
        took = f"{seconds:.2f} s" if seconds is not None else "? s"
        # The stretch is judged on its level (the mean of about half a second of steps), which
        # can cross the threshold while the median of its steps stays under it.
        peak = (f", level up to {_ms(e.get('peak_level_ms'))} against {_ms(e.get('threshold_ms'))}"
                if _number(e.get("peak_level_ms")) is not None else "")
        return (f"  steps {_count(e.get('first_step'))}-{_count(e.get('last_step'))}: {_text(e.get('direction', '?'))}, "
                f"{_count(e.get('steps'))} steps, {took}, median {_ms(e.get('baseline_p50_ms'))} -> "
                f"{_ms(e.get('observed_p50_ms'))}{peak}: {_text(e.get('outcome', '?'))}")
    if event == "rebaselined":
        return f"  step {_count(e.get('step'))}: baseline learnt again ({_text(e.get('why', '?'))})"
    return f"  {_text(event)}: " + ", ".join(f"{_text(k)}={_text(v)}" for k, v in e.items() if k != "event")


def describe(path: str, data: Dict) -> List[str]:
    """The lines ``tfbneck trigger`` prints for one trend file's dict (its ``trigger_state``
    checked by :func:`check_state`)."""
    out = [_header(path, data)]
    state = data.get("trigger_state")
    if not isinstance(data.get("trigger"), dict):
        return out
    if not isinstance(state, dict):
        return out + ["  no trigger record in this file (written by an older version)"]
    log = state.get("log") or []
    if not state.get("armed") and not any(e.get("event") == "armed" for e in log):
        out.append("  not armed: too few steps after the warm-up to learn a baseline (20 warm-up batches, then at "
                   "least 20 steps and 0.25 s of them; 2 s on a busy machine)")
    if len(log) > MAX_TRIGGER_LOG:  # not as the callback writes it: the first and the latest only
        keep = MAX_TRIGGER_LOG // 4
        shown = [entry_line(e) for e in log[:keep]] + [f"  ... {len(log) - MAX_TRIGGER_LOG} entries not shown ..."]
        out += shown + [entry_line(e) for e in log[len(log) - (MAX_TRIGGER_LOG - keep):]]
    else:
        out += [entry_line(e) for e in log]
    if len(log) >= MAX_TRIGGER_LOG:
        out.append(f"  (the file keeps the first and the latest of at most {MAX_TRIGGER_LOG} entries)")
    short = _count(state.get("short_runs", 0))
    if short not in ("?", "0"):
        consecutive = _count((data.get("trigger") or {}).get("consecutive", 5))
        out.append(f"  and {short} slow stretch{'es' if short != '1' else ''} of fewer than {consecutive} steps, "
                   "not listed")
    return out


def cmd_trigger(args) -> int:
    problems: List[str] = []
    files: List[str] = []
    seen = set()
    for path in args.paths:
        try:
            found = find_trend_files(path, problems)
        except (OSError, ValueError) as err:
            problems.append(str(err))
            continue
        if not found:
            problems.append(f"{_text(path)}: no step-time trend file (plugins/bottleneck/steptimes_*.json) under it: "
                            "BottleneckProfiler writes one per training process")
        for f in found:  # a file under two of the paths is printed once
            if f not in seen:
                seen.add(f)
                files.append(f)
    blocks = []
    for f in files:
        try:
            data = read_step_times(f, open_any)
            check_state(f, data)
        except SidecarError as err:
            problems.append(str(err))
            continue
        blocks.append("\n".join(describe(f, data)))
    if blocks:
        write_stdout("\n\n".join(blocks) + "\n", closed_hint="")
    for p in problems:
        print(f"tfbneck: {_text(p)}", file=sys.stderr)
    return 0 if blocks else 2
