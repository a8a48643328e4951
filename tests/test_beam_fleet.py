"""--runner beam (Apache Beam, DirectRunner) gives the same reports as the local --jobs run, on
a fleet built from what the repository holds (demo_logs/ and tests/data/): it runs in any clone."""
import csv
import json
import os
import shutil
import subprocess

import pytest

from conftest import DATA, DEMO_LOGS, tfbneck_cmd

pytest.importorskip("apache_beam", reason="Apache Beam is not installed (pip install '.[beam]' in the tfbneck clone)")

MIN_SESSIONS = 50


def _sessions(base):
    """(base, session folder) of every session under ``base`` with a trace."""
    out = []
    for d, _dirs, files in os.walk(base):
        if os.path.basename(os.path.dirname(d)) == "profile" and any(".xplane.pb" in f for f in files):
            out.append((base, d))
    return sorted(out)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A logdir of >= 50 sessions: copies of the demo runs and the committed real traces, each
    copy under its own job folder (``jobNN/<run>/plugins/profile/<session>``)."""
    root = tmp_path_factory.mktemp("fleet")
    sources = _sessions(DEMO_LOGS) + _sessions(DATA)
    assert len(sources) >= 12, sources  # 4 demo runs + 8 committed traces
    n = copy = 0
    while n < MIN_SESSIONS:
        for base, session in sources:
            run = os.path.relpath(os.path.dirname(os.path.dirname(os.path.dirname(session))), base)
            shutil.copytree(session, os.path.join(root, f"job{copy:02d}", run, "plugins", "profile",
                                                  os.path.basename(session)))
            n += 1
        copy += 1
    return str(root), n


def test_beam_matches_local_on_the_repository_fleet(fleet, tmp_path):
    root, n = fleet
    local = subprocess.run(tfbneck_cmd() + ["analyze", root, "--format", "json", "--jobs", "2"], capture_output=True,
                           text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    prefix = str(tmp_path / "out" / "sessions")
    beam = subprocess.run(tfbneck_cmd() + ["analyze", root, "--format", "json", "--runner", "beam",
                                           "--beam-output", prefix], capture_output=True, text=True, timeout=900)
    assert beam.returncode == 0, beam.stderr[-3000:]
    a, b = json.loads(local.stdout), json.loads(beam.stdout)
    assert len(a["sessions"]) == n >= MIN_SESSIONS
    assert all(s["status"] == "ok" for s in a["sessions"]), [s.get("error") for s in a["sessions"]]
    # Every copy of a session gets the same verdict as the others: nothing depends on the order.
    by_source = {}
    for s in a["sessions"]:
        by_source.setdefault((s["run"].split("/", 1)[1], s["session"]), set()).add((s["bottleneck"], s["cause"]))
    assert all(len(v) == 1 for v in by_source.values()), by_source
    assert a == b
    # The pipeline's own outputs: JSON lines and one CSV, one row per session.
    with open(prefix + ".csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == n
    assert {(r["run"], r["session"]) for r in rows} == {(s["run"], s["session"]) for s in a["sessions"]}
    lines = []
    for name in os.listdir(tmp_path / "out"):
        if name.endswith(".jsonl"):
            with open(tmp_path / "out" / name) as f:
                lines += [l for l in f if l.strip()]
    assert len(lines) == n
