"""--runner beam (Apache Beam, DirectRunner) gives the same reports as the local --jobs run."""
import csv
import json
import os
import shutil
import subprocess

import pytest

from conftest import DEMO_LOGS, tfbneck_cmd
from support.run_dirs import run_with_two_windows

pytest.importorskip("apache_beam", reason="Apache Beam is not installed (pip install '.[beam]' in the tfbneck clone)")


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


def test_beam_unreachable_store_fails_fast(tmp_path):
    """An s3:// PATH whose endpoint refuses connections: the pipeline still finishes quickly
    (the same bounded discovery as the local run), the PATH becomes one error row naming
    the URL and the cause in its outputs, the command says it as the local run does, and no
    library traceback reaches the terminal."""
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install '.[remote]' in the tfbneck clone)")
    import socket
    import time
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{port}", AWS_DEFAULT_REGION="us-east-1",
               AWS_EC2_METADATA_DISABLED="true", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    url = "s3://fleet-logs/logs"
    t0 = time.monotonic()
    local = subprocess.run(tfbneck_cmd() + ["analyze", url], capture_output=True, text=True, timeout=120, env=env)
    local_s = time.monotonic() - t0
    t0 = time.monotonic()
    r = subprocess.run(tfbneck_cmd() + ["analyze", url, "--runner", "beam", "--format", "json",
                                        "--beam-output", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=300, env=env)
    beam_s = time.monotonic() - t0
    # Both runners alike (issue 26): no PATH could be searched, so exit 2 with the one line; the
    # Beam outputs still hold the PATH's error row, the one the local runner gives among several PATHs.
    assert local.returncode == 2 and r.returncode == 2, r.stderr[-3000:]
    cause = f"{url}: host unreachable (127.0.0.1:{port}: connection refused)"
    assert local.stderr.strip() == f"tfbneck: {cause}"
    assert r.stdout == "" and r.stderr.strip().endswith(f"tfbneck: {cause}") and "Traceback" not in r.stderr
    from tfbneck_plugin.fleet_view.beam import read_results
    from tfbneck_plugin.errors import path_error_report
    from tfbneck_plugin.logdir import DiscoveryError
    (row,) = read_results(str(tmp_path / "out"))
    assert row == path_error_report(url, DiscoveryError(cause, "host_unreachable"))
    assert beam_s < 20.0 and local_s < 20.0, (beam_s, local_s)  # issue 12's bound, start-up included


def _fleet_with_a_slow_stretch(root):
    """Two runs: the demo's cpu_bound_input with a second, later session of the same trace
    and a slow stretch its trend file records as not captured, and compute_bound as shipped."""
    run_with_two_windows(root)
    shutil.copytree(os.path.join(DEMO_LOGS, "compute_bound"), os.path.join(root, "compute_bound"))


def test_beam_says_a_runs_slow_stretch_once_as_the_local_run(tmp_path):
    """A run with two sessions and a slow stretch the trigger did not profile: the pipeline
    finishes the run's sessions together, so the stretch is said once, on the run's newest
    session, and Beam's reports equal the local run's."""
    root = tmp_path / "logs"
    _fleet_with_a_slow_stretch(str(root))
    local = subprocess.run(tfbneck_cmd() + ["analyze", str(root), "--format", "json"], capture_output=True,
                           text=True, timeout=300)
    assert local.returncode == 0, local.stderr[-3000:]
    beam = subprocess.run(tfbneck_cmd() + ["analyze", str(root), "--format", "json", "--runner", "beam",
                                           "--beam-output", str(tmp_path / "out" / "sessions")],
                          capture_output=True, text=True, timeout=600)
    assert beam.returncode == 0, beam.stderr[-3000:]
    a, b = json.loads(local.stdout), json.loads(beam.stdout)
    said = {(s["run"], s["session"]): [e for e in s["evidence"] if e.startswith("The slowdown trigger saw")]
            for s in a["sessions"]}
    assert len(said) == 3 and sum(len(v) for v in said.values()) == 1
    assert said[("cpu_bound_input", "2026_11_30_12_25_00_steps40-44")]
    assert a == b
