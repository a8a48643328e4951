"""``tfbneck trigger``: what the slowdown trigger saw in a run, read from its trend files.

    tfbneck trigger PATH [PATH ...]

For a user who expected a triggered window and got none (issue 24, point 3; a newcomer had to
glob ``plugins/bottleneck/steptimes_*.json`` and parse ``trigger_state`` by hand): for each
trend file under each PATH, when the trigger armed and on which baseline, then every slow
(or fast) stretch it counted, with its steps, seconds, median step time against the
baseline's, and how it ended (``captured``, ``ended: fast_steps: too short``, ``not captured:
CPU taken by other processes``...). The fields are those of ``trigger_state`` in
:mod:`tfbneck_plugin.records`; nothing is computed here. No TensorFlow.

Exit status: 0 when at least one trend file was read; 2 when none was found or none could be
read (one line each, naming the file).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List

from .logdir import is_remote
from .records import MAX_TRIGGER_LOG, STEP_TIMES_DIR, SidecarError, read_step_times

#: Trend file names (``records.step_times_name``).
_PREFIX, _SUFFIX = "steptimes_", ".json"


def add_parser(sub) -> None:
    t = sub.add_parser("trigger", help="what the slowdown trigger saw: when it armed, each slow stretch and why it "
                                       "was or was not profiled",
                       description="Read the step-time trend files (<run>/plugins/bottleneck/steptimes_*.json) under "
                                   "each PATH and print the slowdown trigger's record: when it armed and on which "
                                   "baseline, every stretch of slow (or fast) steps it counted, and how each ended.")
    t.add_argument("paths", nargs="+", metavar="PATH", help="a logdir, a run folder or one steptimes_*.json file")


def find_trend_files(path: str) -> List[str]:
    """The trend files at or under ``path`` (a file is taken as it is), sorted by path.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ValueError: ``path`` is a remote URL (this command reads local folders).
    """
    if is_remote(path):
        raise ValueError(f"{path}: tfbneck trigger reads local folders; copy the run's plugins/bottleneck "
                         "folder here first")
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such file or folder")
    found = []
    tail = os.sep + STEP_TIMES_DIR.replace("/", os.sep)
    for dirpath, _dirnames, filenames in os.walk(path, followlinks=False):
        if dirpath.endswith(tail):
            found += [os.path.join(dirpath, n) for n in filenames if n.startswith(_PREFIX) and n.endswith(_SUFFIX)]
    return sorted(found)


def _ms(v) -> str:
    return f"{v:.3g} ms" if isinstance(v, (int, float)) else "? ms"


def _header(path: str, data: Dict) -> str:
    trig = data.get("trigger")
    state = data.get("trigger_state")
    who = f"host {data.get('host', '?')}, pid {data.get('pid', '?')}"
    if not isinstance(trig, dict):
        return f"{path} ({who}): no slowdown trigger (on_slowdown was off)"
    rule = f"{trig.get('factor', '?')}x for {trig.get('min_seconds', '?')} s"
    if trig.get("quick_steps"):
        rule += f" (or {trig['quick_steps']} steps lasting {trig.get('quick_seconds', '?')} s on an idle machine)"
    captures = state.get("captures", 0) if isinstance(state, dict) else 0
    return f"{path} ({who}): slowdown trigger {rule}; windows opened: {captures}"


def entry_line(e: Dict) -> str:
    """One line for one ``trigger_state.log`` entry (fields: :mod:`tfbneck_plugin.records`)."""
    event = e.get("event")
    if event == "armed":
        busy = "; busy machine: the baseline had to last 2 s" if e.get("busy_machine") else ""
        tail = (f"; its last {e['slow_tail_steps']} steps, slow already, left out"
                if e.get("slow_tail_steps") else "")
        return (f"  step {e.get('step')}: armed, baseline median {_ms(e.get('baseline_p50_ms'))} over "
                f"{e.get('baseline_steps')} steps, slow beyond {_ms(e.get('threshold_ms'))}{busy}{tail}")
    if event == "run":
        seconds = e.get("seconds")
        took = f"{seconds:.2f} s" if isinstance(seconds, (int, float)) else "? s"
        return (f"  steps {e.get('first_step')}-{e.get('last_step')}: {e.get('direction', '?')}, {e.get('steps')} "
                f"steps, {took}, median {_ms(e.get('baseline_p50_ms'))} -> {_ms(e.get('observed_p50_ms'))}: "
                f"{e.get('outcome', '?')}")
    if event == "rebaselined":
        return f"  step {e.get('step')}: baseline learnt again ({e.get('why', '?')})"
    return f"  {event}: {', '.join(f'{k}={v}' for k, v in e.items() if k != 'event')}"


def describe(path: str, data: Dict) -> List[str]:
    """The lines ``tfbneck trigger`` prints for one trend file's dict."""
    out = [_header(path, data)]
    state = data.get("trigger_state")
    if not isinstance(data.get("trigger"), dict):
        return out
    if not isinstance(state, dict):
        return out + ["  no trigger record in this file (written by an older version)"]
    log = [e for e in state.get("log") or [] if isinstance(e, dict)]
    if not state.get("armed"):
        out.append("  not armed: too few steps after the warm-up to learn a baseline (20 warm-up batches, then at "
                   "least 20 steps and 0.25 s of them; 2 s on a busy machine)")
    out += [entry_line(e) for e in log]
    if len(log) >= MAX_TRIGGER_LOG:
        out.append(f"  (the file keeps the first and the latest of at most {MAX_TRIGGER_LOG} entries)")
    short = state.get("short_runs") or 0
    if short:
        out.append(f"  and {short} slow stretch{'es' if short > 1 else ''} of fewer than "
                   f"{(data.get('trigger') or {}).get('consecutive', 5)} steps, not listed")
    return out


def cmd_trigger(args) -> int:
    read, problems, blocks = 0, [], []  # type: int, List[str], List[str]
    for path in args.paths:
        try:
            files = find_trend_files(path)
        except (OSError, ValueError) as err:
            problems.append(str(err))
            continue
        if not files:
            problems.append(f"{path}: no step-time trend file (plugins/bottleneck/steptimes_*.json) under it: "
                            "BottleneckProfiler writes one per training process")
        for f in files:
            try:
                data = read_step_times(f)
            except SidecarError as err:
                problems.append(str(err))
                continue
            read += 1
            blocks.append("\n".join(describe(f, data)))
    if blocks:
        sys.stdout.write("\n\n".join(blocks) + "\n")
    for p in problems:
        print(f"tfbneck: {p}", file=sys.stderr)
    return 0 if read else 2
