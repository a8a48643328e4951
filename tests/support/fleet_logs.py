"""A fleet of runs made of real sessions: the demo runs' and the shared real traces' session
folders, hard-linked (copied where a link cannot be made) under many run names, each run with
a step-time trend file in the format ``BottleneckProfiler`` writes (``tfbneck_plugin.records``).

Run names: ``<team>/exp-<source>-<nnnn>`` (``source``: the real session's run, made a word),
so ``--group-by 'exp-(\\w+)-'`` groups by source and ``--group-level 1`` by team. Session
folders are named by their date (``YYYY_MM_DD_HH_MM_SS``), spread over ``days`` days for the
trend. Of the runs, every ``no_trend_every``-th has no trend file (its length is unknown); the
others record ``batches`` (drawn per run) at a mean time per batch drawn per run, one window
per session (one in 4, counted over the fleet, ``triggered`` by a slowdown) and, every 7th run, a skipped window.

Only the trend files are written here (the trace files are the real ones, unchanged): the
fleet's sums and ranking are then checked against the per-session reports.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from typing import Dict, List, Optional

TEAMS = ("vision", "speech", "nlp")
_KEEP = (".xplane.pb", ".xplane.pb.gz", "tfbneck_system_metrics.json")


def real_sessions(demo_logs: str, realtraces: Optional[str]) -> List[Dict]:
    """``[{"source", "path", "files"}]``: every real session folder under the two roots that
    holds an ``.xplane.pb`` (per-tool files of old TensorFlow are not linked)."""
    out = []
    for root in [demo_logs] + ([realtraces] if realtraces and os.path.isdir(realtraces) else []):
        for dirpath, _dirs, files in sorted(os.walk(root)):
            if os.path.basename(os.path.dirname(dirpath)) != "profile":
                continue
            keep = sorted(f for f in files if f.endswith(_KEEP))
            if any(f.endswith((".xplane.pb", ".xplane.pb.gz")) for f in keep):
                run = os.path.relpath(os.path.dirname(os.path.dirname(os.path.dirname(dirpath))), root)
                out.append({"source": re.sub(r"\W+", "", run.replace("/", "_")) or "root",
                            "path": dirpath, "files": keep})
    return out


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def _trend(rng: random.Random, sessions: List[str], start: float, skipped: bool, offset: int) -> Dict:
    batches = rng.randrange(2_000, 200_000)
    mean = rng.uniform(5.0, 250.0)
    points, step = [], 0
    for k in range(8):  # eight periods of the run, the step time drifting a little
        first, step = step + 1, batches * (k + 1) // 8
        m = mean * rng.uniform(0.9, 1.1)
        points.append({"step": step, "first_step": first, "epoch": k, "n": step - first + 1, "p50_ms": m,
                       "p90_ms": m * 1.2, "mean_ms": m, "t_unix_ns": int((start + k * 60) * 1e9)})
    trig = [(offset + i) % 4 == 3 for i in range(len(sessions))]
    windows = [{"index": i, "kind": "triggered" if trig[i] else "scheduled", "requested": [[10, 20]],
                "steps": [10, 20], "status": "profiled", "reason": None, "closed_by": "completed", "session": name,
                "trigger": {"kind": "slowdown"} if trig[i] else None, "verdict": None, "analysis_error": None,
                "change": None} for i, name in enumerate(sessions)]
    if skipped:
        windows.append({"index": len(windows), "kind": "scheduled", "requested": [[900, 910]], "steps": None,
                        "status": "skipped", "reason": "disk full", "closed_by": None, "session": None,
                        "trigger": None, "verdict": None, "analysis_error": None, "change": None})
    return {"format": "tfbneck.step_times", "version": 1, "source": "BottleneckProfiler", "host": "fleet",
            "pid": 4242, "start_unix_ns": int(start * 1e9), "updated_unix_ns": int((start + 600) * 1e9),
            "ended": True, "steps_per_execution": 1, "trigger": None, "baseline": None, "points": points,
            "windows": windows}


def build_fleet(root: str, sources: List[Dict], runs: int, sessions_per_run: int = 1, days: int = 6,
                seed: int = 29, no_trend_every: int = 5, first_day: str = "2026-11-01") -> List[Dict]:
    """Make ``runs`` runs under ``root``; returns ``[{"run", "source", "sessions", "trend"}]``.

    Run ``i`` takes its sessions from ``sources[(i + j) % len(sources)]`` (j-th session of the
    run), so every source appears under many run names."""
    rng = random.Random(seed)
    t0 = time.mktime(time.strptime(first_day, "%Y-%m-%d"))
    made = []
    for i in range(runs):
        src = sources[i % len(sources)]
        run = f"{TEAMS[i % len(TEAMS)]}/exp-{src['source']}-{i:04d}"
        names = []
        for j in range(sessions_per_run):
            s = sources[(i + j) % len(sources)]
            when = t0 + ((i + j) % days) * 86400 + i * 7 + j * 3600
            name = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(when))
            folder = os.path.join(root, run, "plugins", "profile", name)
            os.makedirs(folder)
            for f in s["files"]:
                _link(os.path.join(s["path"], f), os.path.join(folder, f))
            names.append(name)
        trend = None
        if no_trend_every <= 0 or i % no_trend_every != no_trend_every - 1:
            trend = _trend(rng, names, t0 + (i % days) * 86400, skipped=(i % 7 == 6), offset=i)
            folder = os.path.join(root, run, "plugins", "bottleneck")
            os.makedirs(folder)
            with open(os.path.join(folder, f"steptimes_2026_11_01_00_00_00_fleet_{i}.json"), "w") as f:
                json.dump(trend, f)
        made.append({"run": run, "source": src["source"], "sessions": names, "trend": trend})
    return made
