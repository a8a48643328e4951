"""The callback's background analyses are bounded (capture.background): a long job of short
windows on a busy machine once had ten analysis children at once. Real analyses (child
processes over a real demo session) of more windows than the queue takes."""
import os
import shutil
import time

import psutil

from conftest import DEMO_LOGS



def test_at_most_two_analyses_run_and_windows_beyond_the_queue_keep_their_trace(tmp_path):
    from tfbneck_plugin.capture import background as bg
    from tfbneck_plugin.capture.controller import WindowRecord

    demo = next(d for d, _, fs in sorted(os.walk(DEMO_LOGS)) if any(f.endswith(".xplane.pb") for f in fs))
    sessions = []
    for i in range(12):
        dst = tmp_path / "logs" / "plugins" / "profile" / f"s{i:02d}"
        shutil.copytree(demo, dst)
        sessions.append(str(dst))
    warnings, done = [], []
    analysis = bg.BackgroundAnalysis(str(tmp_path / "logs"), "process", 300, False, False,
                                     lambda key, message: warnings.append((key, message)), lambda m: None,
                                     on_done=done.append)
    recs = [WindowRecord(index=i, requested=[(1, 2)], status="profiled", session_dir=s, steps=(1, 2))
            for i, s in enumerate(sessions)]
    for r in recs:
        analysis.start(r)
    most = 0
    me = psutil.Process()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(done) < len(recs):
        most = max(most, sum(_is_analysis(c) for c in me.children()))
        time.sleep(0.05)
    assert analysis.wait(timeout=60) and len(done) == len(recs)
    assert 1 <= most <= bg.MAX_RUNNING_ANALYSES
    skipped = [r for r in recs if r.report is None]
    analysed = [r for r in recs if r.report is not None]
    # Each accepted window waits or runs; the rest are not analysed, and say so.
    assert len(analysed) >= bg.MAX_RUNNING_ANALYSES + bg.MAX_WAITING_ANALYSES - 2 and len(skipped) >= 1
    assert all(r.report["status"] == "ok" for r in analysed)
    assert all("not analysed in the background" in r.analysis_error for r in skipped)
    assert all(os.path.isdir(r.session_dir) for r in skipped)  # the trace is kept
    assert [k for k, _ in warnings] == ["analysis-queue"] * len(skipped)


def _is_analysis(child: psutil.Process) -> bool:
    """A live child analysing a window (one that exited between the listing and this read,
    a zombie until it is reaped, analyses nothing)."""
    try:
        return child.status() != psutil.STATUS_ZOMBIE and "tfbneck_plugin" in " ".join(child.cmdline())
    except psutil.Error:
        return False
