"""Edits of a run's step-time trend file (``plugins/bottleneck/steptimes_*.json``, written by
the callback: tfbneck_plugin.capture.trend) that tests make to put a run in a known state."""
import glob
import json
import os


def set_window_overhead(run: str, traced_ms: float, x: float) -> None:
    """Record for the run's first window that the job's own step around it took
    ``traced_ms / x`` (the window's traced step ``x`` times the job's): what the callback writes
    as the window's ``overhead`` when the profiled steps ran at another speed."""
    (trend,) = glob.glob(os.path.join(str(run), "plugins", "bottleneck", "steptimes_*.json"))
    with open(trend) as f:
        t = json.load(f)
    t["windows"][0]["overhead"] = {"job_step_ms": round(traced_ms / x, 3), "x": x}
    with open(trend, "w") as f:
        json.dump(t, f)
