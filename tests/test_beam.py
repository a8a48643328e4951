"""--runner beam (Apache Beam, DirectRunner) gives the same reports as the local --jobs run."""
import csv
import io
import json
import os
import shutil
import subprocess

import pytest

from conftest import DEMO_LOGS, tfbneck_cmd

pytest.importorskip("apache_beam", reason="Apache Beam is not installed (pip install 'tfbneck-plugin[beam]')")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, realtraces):
    """A logdir of >= 50 sessions: copies of the demo runs and the real traces under many runs."""
    root = tmp_path_factory.mktemp("fleet")
    sources = []
    for base in (DEMO_LOGS, realtraces):
        for d, dirs, files in os.walk(base):
            if os.path.basename(os.path.dirname(d)) == "profile" and any(f.endswith(".xplane.pb") for f in files):
                sources.append((base, d))
    assert sources
    n = 0
    copy = 0
    while n < 50:
        for base, session in sources:
            run = os.path.relpath(os.path.dirname(os.path.dirname(os.path.dirname(session))), base)
            dest = os.path.join(root, f"job{copy:02d}", run, "plugins", "profile", os.path.basename(session))
            shutil.copytree(session, dest)
            n += 1
        copy += 1
    return str(root), n


def test_beam_matches_local(fleet, tmp_path):
    root, n = fleet
    local = subprocess.run(tfbneck_cmd() + ["analyze", root, "--format", "json", "--jobs", "2"], capture_output=True,
                           text=True, timeout=600)
    assert local.returncode == 0, local.stderr
    prefix = str(tmp_path / "out" / "sessions")
    beam = subprocess.run(tfbneck_cmd() + ["analyze", root, "--format", "json", "--runner", "beam",
                                           "--beam-output", prefix], capture_output=True, text=True, timeout=900)
    assert beam.returncode == 0, beam.stderr[-3000:]
    a, b = json.loads(local.stdout), json.loads(beam.stdout)
    assert len(a["sessions"]) == n >= 50
    assert a == b
    # The pipeline's own outputs: JSON lines and one CSV, one row per session.
    rows = list(csv.DictReader(open(prefix + ".csv")))
    assert len(rows) == n
    assert {(r["run"], r["session"]) for r in rows} == {(s["run"], s["session"]) for s in a["sessions"]}
    lines = [l for f in os.listdir(tmp_path / "out") if f.endswith(".jsonl")
             for l in open(tmp_path / "out" / f) if l.strip()]
    assert len(lines) == n
