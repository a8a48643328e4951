"""Errors by kind, not by English: every error the Bottleneck tab can receive carries a
machine-readable ``error_kind`` (session reports: ``tfbneck_plugin/errors.py``; the plugin's
own refusals and logdir errors: ``docs/http_api.md``), and the frontend has an explanation
for each (``frontend/src/errors.js``). The cause of a verdict is explained by the report's
``cause_text``, never by a copy of the cause table in the frontend.

The session reports come from the real analyzer reading broken files (no TensorFlow).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess

import pytest
from tensorboard.plugins import base_plugin

from tfbneck_plugin.causes import CAUSES
from tfbneck_plugin.errors import ERROR_KINDS
from tfbneck_plugin.plugin import BottleneckPlugin
from tfbneck_plugin.plugin import index as index_mod
from tfbneck_plugin.plugin.query import ROUTE_ERROR_KINDS

from support.plugin_helpers import (BROKEN_KINDS, DEAD_PID, REPO, RecordingAnalyzer, add_broken_sessions, make_fake_logdir,
                            put_session, scanned_listing, wait_active, wait_report)


@pytest.fixture
def analyzer():
    rec = RecordingAnalyzer()
    yield rec
    rec.release.set()


# ----------------------------------------------------------------------------------------
# The logdir cannot be searched
# ----------------------------------------------------------------------------------------

def test_a_logdir_that_cannot_be_searched_says_why_by_kind(tmp_path, analyzer):
    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(tmp_path / "nope")), analyze=analyzer)
    assert p.is_active() is False
    body = scanned_listing(p)
    assert body["sessions"] == [] and "no such file or directory" in body["error"]
    assert body["error_kind"] == "not_found"
    p2 = BottleneckPlugin(base_plugin.TBContext(logdir=None), analyze=analyzer)
    body = scanned_listing(p2)
    assert p2.is_active() is False and "--logdir" in body["error"] and body["error_kind"] == "no_logdir"
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("not a logdir")
    body = scanned_listing(BottleneckPlugin(base_plugin.TBContext(logdir=str(not_a_folder)), analyze=analyzer))
    assert str(not_a_folder) in body["error"] and body["error_kind"] == "unreadable"
    body = scanned_listing(BottleneckPlugin(base_plugin.TBContext(logdir=f"memory://tfb-nope-{os.getpid()}/logs"),
                                            analyze=analyzer))
    assert body["error_kind"] == "not_found", body["error"]


def test_unreachable_remote_storage_says_so(monkeypatch, analyzer):
    """An s3:// logdir whose endpoint refuses connections (a closed loopback port): the
    listing says the storage cannot be reached, not that the logdir is missing."""
    s3fs = pytest.importorskip("s3fs", reason="s3fs is not installed (pip install '.[remote]' in the tfbneck clone)")
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_MAX_ATTEMPTS": "1",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                 "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent"}.items():
        monkeypatch.setenv(k, v)
    s3fs.S3FileSystem.clear_instance_cache()  # a cached client would keep another endpoint
    try:
        body = scanned_listing(BottleneckPlugin(base_plugin.TBContext(logdir="s3://tfb-bucket/logs"),
                                                analyze=analyzer))
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert body["sessions"] == [] and body["error"].startswith("s3://tfb-bucket/logs: ")
    assert body["error_kind"] == "unreachable", body["error"]


# ----------------------------------------------------------------------------------------
# Session reports that are errors
# ----------------------------------------------------------------------------------------

def test_an_analyzer_that_raises_gives_an_error_report(tmp_path):
    """``analyze_session`` never raises; an analyzer that does still yields a report with an
    error_kind (analysis_failed, or out_of_memory for a MemoryError), listed as such."""
    def analyze(session):
        if session.run == "tfkeras":
            raise MemoryError()
        raise KeyError("a bug")

    fake_logdir = make_fake_logdir(tmp_path)
    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(fake_logdir)), analyze=analyze)
    report = wait_report(p, "tfkeras", "2024_03_02_10_00_00")[0]["sessions"][0]
    assert (report["status"], report["error_kind"]) == ("error", "out_of_memory")
    assert report["error"].startswith(str(fake_logdir / "tfkeras")) and "out of memory" in report["error"]
    report = wait_report(p, "keras3/train", "2024_03_01_10_00_00")[0]["sessions"][0]
    assert (report["status"], report["error_kind"]) == ("error", "analysis_failed")
    assert "analysis failed (KeyError: 'a bug')" in report["error"] and "\n" not in report["error"]
    rows = {r["run"]: r for r in p.sessions_impl()[1]["sessions"]}
    assert rows["tfkeras"]["error_kind"] == "out_of_memory" and rows["keras3/train"]["error_kind"] == "analysis_failed"


def test_incomplete_windows_are_listed_and_explained(tmp_path):
    """BottleneckProfiler's staging folders left by a dead process: listed, each with its own
    report (no files to key the cache by: the folder is part of the key)."""
    root = tmp_path / "logs"
    put_session(root, "job", "2024_01_01_00_00_00")
    names = (f"{DEAD_PID}-1-aaa", f"{DEAD_PID + 1}-2-bbb")  # pids no process can have
    for name in names:
        window = root / "job" / ".tfbneck-staging" / name
        window.mkdir(parents=True)
        (window / "partial.xplane.pb").write_bytes(b"cut short")
    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(root)))
    wait_active(p)
    listed = {r["session"] for r in p.sessions_impl()[1]["sessions"] if r["run"] == "job"}
    assert listed == {"2024_01_01_00_00_00", *names}
    for name in names:
        body, _ = wait_report(p, "job", name)
        report = body["sessions"][0]
        assert report["session"] == name and report["status"] == "error" and report["error_kind"] == "incomplete"
        assert "incomplete profiling window" in report["error"] and name in report["error"]
        assert report["incomplete"], "the report carries the reason the frontend shows as its hint"


def test_error_reports_carry_the_kind_the_tab_explains(tmp_path):
    """The real analyzer on broken sessions: each report names its error_kind, one of
    errors.ERROR_KINDS, and the listing shows it too."""
    root = tmp_path / "logs"
    runs = add_broken_sessions(root)
    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(root)))
    wait_active(p)
    sessions = {r["run"]: r["session"] for r in p.sessions_impl()[1]["sessions"]}
    assert set(sessions) == set(runs.values())
    for case, run in runs.items():
        report = wait_report(p, run, sessions[run])[0]["sessions"][0]
        assert (report["status"], report["error_kind"]) == ("error", BROKEN_KINDS[case]), report["error"]
        assert report["error_kind"] in ERROR_KINDS and "\n" not in report["error"]
    assert runs and set(BROKEN_KINDS.values()) <= set(ERROR_KINDS)
    skipped = wait_report(p, runs["skipped"], sessions[runs["skipped"]])[0]["sessions"][0]
    assert skipped["skipped"] == "training ended at step 3, before the profiling window (steps 10-20)"
    rows = {r["run"]: r for r in p.sessions_impl()[1]["sessions"]}
    assert {case: rows[run]["error_kind"] for case, run in runs.items()} == BROKEN_KINDS


# ----------------------------------------------------------------------------------------
# The frontend
# ----------------------------------------------------------------------------------------

def test_the_tab_explains_every_error_kind():
    """Each error_kind the backend can send has its own explanation in frontend/src/errors.js
    (loaded by Node, as the bundle imports it): a headline and a hint, not the fallback."""
    if shutil.which("node") is None:
        pytest.skip("Node is needed to load the frontend's modules (apt-get install nodejs)")
    kinds = {"report": sorted(ERROR_KINDS), "request": sorted(set(ROUTE_ERROR_KINDS.values())),
             "logdir": sorted(index_mod.SCAN_ERROR_KINDS)}
    module = (REPO / "frontend" / "src" / "errors.js").as_uri()
    script = f"""
      const m = await import({json.dumps(module)});
      const kinds = {json.dumps(kinds)};
      const out = {{
        report: kinds.report.map((k) => m.explainReportError({{ error_kind: k, skipped: "why", incomplete: "why" }})),
        request: kinds.request.map((k) => m.explainRequestError(k)),
        logdir: kinds.logdir.map((k) => m.explainLogdirError(k)),
        fallback: [m.explainReportError({{ error_kind: "no_such_kind" }}), m.explainRequestError("no_such_kind"),
                   m.explainLogdirError("no_such_kind")],
      }};
      console.log(JSON.stringify(out));"""
    res = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    fallbacks = {e["headline"] for e in out["fallback"]}
    for table, explained in (("report", out["report"]), ("request", out["request"]), ("logdir", out["logdir"])):
        for kind, e in zip(kinds[table], explained):
            assert e["headline"] not in fallbacks and e["hint"], f"{table} error_kind {kind!r} is not explained"
        assert len({e["headline"] for e in explained}) == len(explained), f"two {table} kinds share a headline"


def test_the_tab_takes_cause_texts_from_the_report():
    """No copy of the cause table in the frontend: the verdict card shows ``cause_text``."""
    sources = {p.name: p.read_text() for p in (REPO / "frontend" / "src").glob("*.js")}
    for code, cause in CAUSES.items():
        copies = [name for name, text in sources.items() if cause.text[:40] in text]
        assert not copies, f"the meaning of {code!r} is copied into {copies}"
    assert "report.cause_text" in sources["session.js"]
