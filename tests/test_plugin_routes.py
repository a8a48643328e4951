"""The TensorBoard plugin's routes (``tfbneck_plugin/plugin/``, ``docs/http_api.md``).

Most tests call the pure ``*_impl`` methods, or the routes through TensorBoard's own WSGI
application (``TensorBoardWSGI``, with its middlewares) with werkzeug's test client. The
concurrency and cache tests go through a real threaded HTTP server. An injected analyzer
counts its calls (and can be held busy until the test releases it); the real analyzer runs in
the CLI-contract tests on real traces made by TensorFlow. Error kinds and their explanations
in the frontend: ``test_plugin_errors.py``.

Timing: nothing here assumes an idle machine. "Did not wait for the slow analysis" is shown
by an analysis that cannot end before the test releases it; the remaining bounds are the
documented waits plus :data:`LOADED_MARGIN_S`, or ratios measured side by side.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.serving import make_server

from tfbneck_plugin.causes import CAUSES
from tfbneck_plugin.logdir import find_sessions
from tfbneck_plugin.plugin import BottleneckPlugin, BottleneckPluginLoader, RouteError, parse_query
from tfbneck_plugin.plugin import index as index_mod
from tfbneck_plugin.plugin import routes as plugin_mod

from support.plugin_helpers import (BROKEN_KINDS, LOADED_MARGIN_S, PREFIX, REPO, SCRIPT_RUN, RecordingAnalyzer,
                            build_plugin_logdir, get_json, get_until_ready, make_fake_logdir, make_tf_traces,
                            put_session, report_url, scanned_listing, snapshot_tree, wait_active, wait_report,
                            wsgi_client)

_put = put_session


# ----------------------------------------------------------------------------------------
# Fixtures: a logdir of placeholder traces and an analyzer that records its calls
# ----------------------------------------------------------------------------------------

@pytest.fixture
def fake_logdir(tmp_path):
    return make_fake_logdir(tmp_path)


@pytest.fixture
def analyzer():
    rec = RecordingAnalyzer()
    yield rec
    rec.release.set()  # no analysis thread spins on after the test


@pytest.fixture
def plugin(fake_logdir, analyzer):
    return BottleneckPlugin(base_plugin.TBContext(logdir=str(fake_logdir)), analyze=analyzer)


# ----------------------------------------------------------------------------------------
# Packaging: entry point, no TensorFlow, the bundle
# ----------------------------------------------------------------------------------------

def test_plugin_import_does_not_import_tensorflow():
    code = ("import sys, tfbneck_plugin.plugin, tfbneck_plugin.plugin.metadata; "
            "bad = sorted(m for m in sys.modules if m == 'tensorflow' or m.startswith('tensorflow.')); "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"the plugin imported TensorFlow: {res.stdout} {res.stderr[-2000:]}"


def test_entry_point_is_registered_and_loads(fake_logdir):
    from importlib.metadata import entry_points
    eps = [ep for ep in entry_points(group="tensorboard_plugins") if ep.name == "bottleneck"]
    assert eps, "setup.py's tensorboard_plugins entry point is not installed (pip install -e .)"
    loader_cls = eps[0].load()
    assert loader_cls is BottleneckPluginLoader
    p = loader_cls().load(base_plugin.TBContext(logdir=str(fake_logdir)))
    assert p.plugin_name == "bottleneck"
    meta = p.frontend_metadata()
    assert meta.es_module_path == "/index.js" and meta.tab_name == "Bottleneck"


def test_index_js_is_the_bundled_es_module(plugin):
    resp = wsgi_client(plugin).get(f"{PREFIX}/index.js")
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/javascript")
    js = resp.get_data(as_text=True)
    assert "export" in js and "render" in js
    # One self-contained module: nothing loaded from CDNs (TensorBoard's CSP blocks them).
    for bad in ('from"http', "from \"http", "src=\"http", "cdn.jsdelivr", "unpkg.com"):
        assert bad not in js
    assert len(js) > 50_000, "the bundle should include Chart.js"


def test_bundle_matches_frontend_sources(tmp_path):
    """The committed bundle is what `npm run build` makes from frontend/src."""
    node_modules = REPO / "frontend" / "node_modules" / "esbuild"
    if not node_modules.exists() or shutil.which("node") is None:
        pytest.skip("Node and frontend/node_modules are needed to rebuild the bundle (cd frontend && npm ci)")
    out = tmp_path / "index.js"
    # The build script is the source of truth: run it with another output file.
    build = (REPO / "frontend" / "build.mjs").read_text()
    patched = build.replace('path.join(here, "..", "tfbneck_plugin", "plugin", "static", "index.js")', json.dumps(str(out)))
    assert patched != build
    tmp_build = REPO / "frontend" / f".build-check-{os.getpid()}.mjs"
    tmp_build.write_text(patched)
    try:
        res = subprocess.run(["node", str(tmp_build)], cwd=REPO / "frontend", capture_output=True, text=True, timeout=120)
    finally:
        tmp_build.unlink()
    assert res.returncode == 0, res.stderr
    committed = (REPO / "tfbneck_plugin" / "plugin" / "static" / "index.js").read_bytes()
    assert out.read_bytes() == committed, "tfbneck_plugin/plugin/static/index.js is stale: cd frontend && npm run build"


# ----------------------------------------------------------------------------------------
# is_active and the session list
# ----------------------------------------------------------------------------------------

def test_is_active_and_listing_find_every_session_newest_first(plugin, fake_logdir):
    wait_active(plugin)  # is_active waits at most SCAN_WAIT_S; a loaded machine may scan longer
    code, body = plugin.sessions_impl()
    assert code == 200 and body["scanned"] and body["error"] is None and body["error_kind"] is None
    got = [(r["run"], r["session"]) for r in body["sessions"]]
    assert got == [
        (SCRIPT_RUN, "2024_03_04_10_00_00"),
        ("slow", "2024_03_03_10_00_00"),
        ("tfkeras", "2024_03_02_10_00_00"),
        ("keras3/train", "2024_03_01_10_00_00"),
        ("deep/a/b/c/train", "2024_02_01_00_00_00"),
        (".", "2024_01_01_00_00_00"),
    ]
    rows = {r["run"]: r for r in body["sessions"]}
    assert rows["tfkeras"]["hosts"] == ["w0", "w1"]
    assert rows[SCRIPT_RUN]["hosts"] == ["h<i>1"]
    assert all(r["state"] == "new" for r in body["sessions"])
    assert not any("outside" in r["run"] for r in body["sessions"])


def test_listing_is_served_through_tensorboard_wsgi(plugin):
    code, body, _ = get_json(wsgi_client(plugin), f"{PREFIX}/sessions")
    assert code == 200 and len(body["sessions"]) == 6


def test_empty_logdir_is_inactive_until_a_session_appears(tmp_path, analyzer):
    root = tmp_path / "empty"
    root.mkdir()
    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(root)), analyze=analyzer, rescan_interval_s=0.2)
    assert p.is_active() is False
    body = scanned_listing(p)
    assert body["sessions"] == [] and body["error"] is None and body["error_kind"] is None
    _put(root, "late/train", "2024_05_05_00_00_00")  # written while TensorBoard runs
    wait_active(p)
    assert [r["run"] for r in p.sessions_impl()[1]["sessions"]] == ["late/train"]


def test_is_active_and_listing_do_not_wait_for_a_slow_scan(fake_logdir, analyzer):
    release = threading.Event()

    def slow_find(path):
        release.wait(20)
        return find_sessions(path)

    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(fake_logdir)), analyze=analyzer, find=slow_find)
    try:
        # The scan cannot end before release is set: both answers came without it.
        t0 = time.perf_counter()
        assert p.is_active() is False
        code, body = p.sessions_impl()
        elapsed = time.perf_counter() - t0
        assert body["scanning"] is True and body["scanned"] is False and body["sessions"] == []
        # Each waited at most SCAN_WAIT_S for it.
        assert elapsed < 2 * index_mod.SCAN_WAIT_S + LOADED_MARGIN_S, f"is_active + listing took {elapsed:.2f} s"
    finally:
        release.set()
    wait_active(p)


def test_report_during_the_first_scan_is_503(fake_logdir, analyzer):
    release = threading.Event()

    def slow_find(path):
        release.wait(20)
        return find_sessions(path)

    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(fake_logdir)), analyze=analyzer, find=slow_find)
    try:
        code, body, _ = get_json(wsgi_client(p), report_url("tfkeras", "2024_03_02_10_00_00"))
        assert code == 503 and "still being scanned" in body["error"] and body["error_kind"] == "scanning"
    finally:
        release.set()
    body, source = wait_report(p, "tfkeras", "2024_03_02_10_00_00")
    assert body["sessions"][0]["run"] == "tfkeras"


# ----------------------------------------------------------------------------------------
# Bad parameters: 400 / 404 with a one-line reason, never a traceback, never a file outside
# ----------------------------------------------------------------------------------------

BAD_400 = [
    ("", "missing query parameter 'run'"),
    ("run=tfkeras", "missing query parameter 'session'"),
    ("run=&session=x", "missing query parameter 'run'"),
    ("run=..%2Foutside&session=2024_01_01_00_00_00", "'..' is refused"),
    ("run=tfkeras%2F..%2F..%2Foutside&session=2024_01_01_00_00_00", "'..' is refused"),
    ("run=..&session=2024_01_01_00_00_00", "'..' is refused"),
    ("run=%2Fetc&session=passwd", "absolute paths are refused"),
    ("run=" + quote("/tmp") + "&session=x", "absolute paths are refused"),
    ("run=C%3A%5CUsers&session=x", "absolute paths are refused"),
    ("run=~root&session=x", "absolute paths are refused"),
    ("run=a%5C..%5Cb&session=x", "backslashes are refused"),
    ("run=tfkeras&session=..%2F..%2Fx", "one folder name"),
    ("run=tfkeras&session=..", "'..' are refused"),
    ("run=%FF%FE&session=x", "UTF-8"),
    ("run=tfkeras&session=%C3%28", "UTF-8"),
    ("run=tfkeras\xff&session=x", "UTF-8"),  # a raw non-UTF-8 byte in the URL
    ("run=tf%00keras&session=x", "control characters"),
    ("run=tfkeras&run=tfkeras&session=x", "more than once"),
    ("run=" + "a" * 5000 + "&session=x", "longer than"),
]


@pytest.mark.parametrize("query,reason", BAD_400)
def test_bad_parameters_get_400_with_a_reason(plugin, analyzer, query, reason):
    client = wsgi_client(plugin)
    resp = client.get(f"{PREFIX}/report", environ_overrides={"QUERY_STRING": query})
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert resp.headers["Content-Type"].startswith("application/json")
    body = json.loads(resp.get_data(as_text=True))
    assert set(body) == {"error", "error_kind"} and reason in body["error"] and body["error_kind"] == "bad_request"
    assert "\n" not in body["error"] and "Traceback" not in body["error"]
    assert analyzer.calls == []


BAD_404 = [
    ("no-such-run", "2024_01_01_00_00_00", "unknown run 'no-such-run'"),
    ("outside", "2024_01_01_00_00_00", "unknown run 'outside'"),      # exists next to the logdir, not in it
    ("tfkeras", "2000_01_01_00_00_00", "run 'tfkeras' has no session '2000_01_01_00_00_00'"),
    ("keras3", "2024_03_01_10_00_00", "unknown run 'keras3'"),        # a parent folder is not a run
]


@pytest.mark.parametrize("run,session,reason", BAD_404)
def test_unknown_runs_and_sessions_get_404(plugin, analyzer, run, session, reason):
    code, body, _ = get_json(wsgi_client(plugin), report_url(run, session))
    assert code == 404 and set(body) == {"error", "error_kind"} and reason in body["error"]
    assert body["error_kind"] == "not_found"
    assert analyzer.calls == []


def test_report_impl_raises_route_errors_without_a_server(plugin):
    with pytest.raises(RouteError) as err:
        plugin.report_impl({"run": "../outside", "session": "2024_01_01_00_00_00"})
    assert (err.value.status, err.value.kind) == (400, "bad_request")
    wait_active(plugin)
    with pytest.raises(RouteError) as err:
        plugin.report_impl({"run": "nope", "session": "x"})
    assert (err.value.status, err.value.kind) == (404, "not_found")
    assert err.value.body() == {"error": err.value.message, "error_kind": "not_found"}


def test_parse_query_is_strict():
    assert parse_query("run=a%2Fb&session=s+1") == {"run": "a/b", "session": "s 1"}
    assert parse_query("run=%E2%9C%93") == {"run": "\u2713"}
    assert parse_query("run=caf\xc3\xa9") == {"run": "caf\u00e9"}  # raw UTF-8 bytes, as WSGI passes them
    for bad in ("run=%ff", "run=\xff", "a=1&a=2", "run=%0a"):
        with pytest.raises(RouteError):
            parse_query(bad)
    with pytest.raises(RouteError, match="name 'aaa.*longer than 64 characters"):
        parse_query("a" * 65 + "=1")
    assert parse_query("a" * 64 + "=" + "v" * 1024) == {"a" * 64: "v" * 1024}


def test_other_methods_are_refused(plugin):
    resp = wsgi_client(plugin).post(report_url("tfkeras", "2024_03_02_10_00_00"))
    body = json.loads(resp.get_data(as_text=True))
    assert resp.status_code == 405 and "GET" in body["error"] and body["error_kind"] == "method_not_allowed"


def test_links_out_of_the_logdir_are_not_followed(fake_logdir, tmp_path, analyzer):
    outside = tmp_path / "outside" / "plugins" / "profile" / "2024_01_01_00_00_00"
    # A session folder that is a link to a folder outside: not listed (the scan skips links).
    os.symlink(outside, fake_logdir / "tfkeras" / "plugins" / "profile" / "2025_01_01_00_00_00")
    # A session whose trace file is a link to a file outside: refused.
    d = fake_logdir / "linked" / "plugins" / "profile" / "2024_06_01_00_00_00"
    d.mkdir(parents=True)
    os.symlink(outside / "host0.xplane.pb", d / "host0.xplane.pb")
    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(fake_logdir)), analyze=analyzer)
    client = wsgi_client(p)
    code, body, _ = get_json(client, report_url("tfkeras", "2025_01_01_00_00_00"))
    assert code == 404
    code, body, _ = get_json(client, report_url("linked", "2024_06_01_00_00_00"))
    assert code == 404 and "no trace file inside the logdir" in body["error"]
    assert analyzer.calls == []


def test_a_run_named_with_html_is_returned_verbatim(plugin):
    code, body, _ = get_until_ready(wsgi_client(plugin), report_url(SCRIPT_RUN, "2024_03_04_10_00_00"))
    assert code == 200
    assert body["sessions"][0]["run"] == SCRIPT_RUN and body["sessions"][0]["hosts"] == ["h<i>1"]


# ----------------------------------------------------------------------------------------
# Cache: measured, and keyed by path, size and modification time
# ----------------------------------------------------------------------------------------

def test_second_request_is_served_from_the_cache(plugin, analyzer):
    client = wsgi_client(plugin)
    url = report_url("tfkeras", "2024_03_02_10_00_00")
    code, first, headers = get_until_ready(client, url)  # 202 first only if the analysis outlasted REPORT_WAIT_S
    assert code == 200 and headers["X-Tfbneck-Cache"] in ("miss", "hit")
    assert analyzer.count("tfkeras") == 1
    code, second, headers = get_json(client, url)
    # The cache, not a second analysis (the speed of a hit: test_reports_are_the_cli_json_contract).
    assert code == 200 and headers["X-Tfbneck-Cache"] == "hit"
    assert analyzer.count("tfkeras") == 1, "the second request ran the analyzer again"
    assert second == first
    assert [os.path.basename(f) for f in first["sessions"][0]["files"]] == ["w0.xplane.pb", "w1.xplane.pb"]
    stats = plugin.sessions_impl()[1]["cache"]
    assert stats["hits"] >= 1 and stats["misses"] == 1 and stats["analyses"] == 1


def test_a_changed_file_is_analysed_again(plugin, analyzer, fake_logdir):
    run, name = "keras3/train", "2024_03_01_10_00_00"
    trace = fake_logdir / run / "plugins" / "profile" / name / "host0.xplane.pb"
    wait_report(plugin, run, name)
    assert wait_report(plugin, run, name)[1] == "hit"
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # same size, new mtime
    body, source = wait_report(plugin, run, name)
    assert source == "miss" and analyzer.count(run) == 2
    trace.write_bytes(b"a longer placeholder trace")  # new size
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # and the old mtime again
    body, source = wait_report(plugin, run, name)
    assert source == "miss" and analyzer.count(run) == 3
    (trace.parent / "host1.xplane.pb").write_bytes(b"a second host")  # a new file in the session
    body, source = wait_report(plugin, run, name)
    assert source == "miss" and analyzer.count(run) == 4
    assert body["sessions"][0]["hosts"] == ["host0", "host1"]


def test_nothing_is_written_into_the_logdir(plugin, fake_logdir):
    before = snapshot_tree(fake_logdir)
    client = wsgi_client(plugin)
    for row in plugin.sessions_impl()[1]["sessions"]:
        if row["run"] != "slow":
            wait_report(plugin, row["run"], row["session"])
            get_json(client, report_url(row["run"], row["session"]))
    for query, _ in BAD_400:
        client.get(f"{PREFIX}/report", environ_overrides={"QUERY_STRING": query})
    client.get(f"{PREFIX}/sessions")
    client.get(f"{PREFIX}/index.js")
    assert snapshot_tree(fake_logdir) == before


# ----------------------------------------------------------------------------------------
# Concurrency: a slow analysis delays neither the listing nor another session's report
# ----------------------------------------------------------------------------------------

@pytest.fixture
def http_server(plugin):
    server = make_server("127.0.0.1", 0, application.TensorBoardWSGI([plugin]), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}{PREFIX}"
    server.shutdown()


def http_get(url, timeout=30):
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers), time.perf_counter() - t0
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers), time.perf_counter() - t0


def poll_http(url, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        code, body, headers, _ = http_get(url)
        if code != 202:
            return code, body, headers
        assert time.monotonic() < deadline, f"{url} still analysing after {timeout} s"
        time.sleep(0.05)


def test_slow_analysis_does_not_block_listing_or_other_reports(plugin, analyzer, http_server):
    """The slow analysis computes, holding the GIL, until the test releases it: every answer
    below that comes before the release did not wait for it."""
    base = http_server
    slow_url = base + report_url("slow", "2024_03_03_10_00_00", prefix="")
    code, body, headers, took = http_get(slow_url)
    assert code == 202 and body["status"] == "analysing" and headers["X-Tfbneck-Cache"] == "analysing"
    assert body["retry_after_ms"] == plugin_mod.RETRY_AFTER_MS
    assert took < plugin_mod.REPORT_WAIT_S + LOADED_MARGIN_S, f"the report request took {took:.2f} s"
    code, listing, _, _ = http_get(base + "/sessions")
    assert code == 200 and {r["run"]: r["state"] for r in listing["sessions"]}["slow"] == "analysing"
    code, other, _ = poll_http(base + report_url("tfkeras", "2024_03_02_10_00_00", prefix=""))
    assert code == 200 and other["sessions"][0]["run"] == "tfkeras"
    assert not analyzer.done("slow"), "the slow analysis ended before it was released"
    # Polling the slow one does not start a second analysis; it arrives once released.
    assert http_get(slow_url)[0] == 202
    analyzer.release.set()
    code, body, headers = poll_http(slow_url)
    # "miss" if this poll waited for the end of the analysis, "hit" if it ended between polls.
    assert code == 200 and headers["X-Tfbneck-Cache"] in ("miss", "hit")
    assert analyzer.count("slow") == 1


# ----------------------------------------------------------------------------------------
# Windows the callback never finished, and remote logdirs (fsspec)
# ----------------------------------------------------------------------------------------


@pytest.fixture
def memory_logdir():
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = f"memory://tfb-plugin-test-{os.getpid()}-{time.monotonic_ns()}/logs"

    def put(run, session, host="host0", data=b"placeholder trace"):
        path = f"{root}/{run}/plugins/profile/{session}/{host}.xplane.pb"
        with fs.open(path, "wb") as f:
            f.write(data)
        return path

    put("keras3/train", "2024_03_01_10_00_00")
    put("tfkeras", "2024_03_02_10_00_00")
    yield root, put
    fs.rm(root.split("/logs")[0], recursive=True)


def test_remote_logdir_through_fsspec(memory_logdir, analyzer):
    root, put = memory_logdir
    p = BottleneckPlugin(base_plugin.TBContext(logdir=root), analyze=analyzer)
    assert p.is_active() is True
    code, body = p.sessions_impl()
    assert body["error"] is None
    assert [(r["run"], r["session"]) for r in body["sessions"]] == [
        ("tfkeras", "2024_03_02_10_00_00"), ("keras3/train", "2024_03_01_10_00_00")]
    client = wsgi_client(p)
    report, source = wait_report(p, "tfkeras", "2024_03_02_10_00_00")
    assert source == "miss"
    assert report["sessions"][0]["files"][0].endswith("/tfkeras/plugins/profile/2024_03_02_10_00_00/host0.xplane.pb")
    assert wait_report(p, "tfkeras", "2024_03_02_10_00_00")[1] == "hit"
    put("tfkeras", "2024_03_02_10_00_00", data=b"a rewritten, longer placeholder trace")
    assert wait_report(p, "tfkeras", "2024_03_02_10_00_00")[1] == "miss"
    assert analyzer.count("tfkeras") == 2
    code, body, _ = get_json(client, report_url("../logs/tfkeras", "2024_03_02_10_00_00"))
    assert code == 400
    code, body, _ = get_json(client, report_url("nope", "2024_03_02_10_00_00"))
    assert code == 404


@pytest.mark.tf
def test_remote_logdir_gets_the_report_the_cli_gives_a_local_copy(memory_logdir, tmp_path):
    """The same real trace, read by the plugin through fsspec (memory://) and by the CLI in
    another process from a local folder: the same report, apart from where the files are.
    The trace is tf-keras fed by a serial, heavy ``map`` (plugin_trace_job.py): input-bound."""
    root, put = memory_logdir
    trace = next((make_tf_traces() / "tfkeras").glob("plugins/profile/*/*.xplane.pb"))
    put("real", "2024_04_04_00_00_00", host="vm", data=trace.read_bytes())
    local = put_session(tmp_path / "local", "real", "2024_04_04_00_00_00", hosts=("vm",), data=trace.read_bytes())
    p = BottleneckPlugin(base_plugin.TBContext(logdir=root))
    got = wait_report(p, "real", "2024_04_04_00_00_00")[0]["sessions"][0]
    cli = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "analyze", str(tmp_path / "local"),
                          "--format", "json"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    want = json.loads(cli.stdout)["sessions"][0]
    assert (got["status"], got["bottleneck"], got["cause"]) == ("ok", "cpu", "input_preprocessing")
    assert got["cause_text"] == CAUSES["input_preprocessing"].text
    assert got["path"].startswith("memory://") and want["path"] == str(local)
    assert got["path"].endswith(root.split("://")[1] + "/real/plugins/profile/2024_04_04_00_00_00")
    where = ("path", "files")
    assert {k: v for k, v in got.items() if k not in where} == {k: v for k, v in want.items() if k not in where}


# ----------------------------------------------------------------------------------------
# One contract: the plugin returns what `tfbneck analyze --format json` prints
# ----------------------------------------------------------------------------------------

@pytest.mark.tf
def test_reports_are_the_cli_json_contract(tmp_path):
    logdir = tmp_path / "logs"
    runs = build_plugin_logdir(logdir, make_tf_traces())
    # --no-cache: the plugin's first requests below must analyse, not read the CLI's reports
    # from the persistent cache the two share.
    cli = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "analyze", str(logdir), "--format", "json",
                          "--no-cache"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 1, cli.stderr  # 1: some sessions (the broken ones) failed
    expected = json.loads(cli.stdout)
    p = BottleneckPlugin(base_plugin.TBContext(logdir=str(logdir)))
    client = wsgi_client(p)
    wait_active(p)
    listed = {(r["run"], r["session"]) for r in p.sessions_impl()[1]["sessions"]}
    assert listed == {(s["run"], s["session"]) for s in expected["sessions"]}
    first_took = {}
    for s in expected["sessions"]:
        t0 = time.perf_counter()
        code, body, headers = get_until_ready(client, report_url(s["run"], s["session"]))
        first_took[s["run"]] = time.perf_counter() - t0
        assert code == 200
        assert body == {"version": expected["version"], "sessions": [s]}, f"{s['run']}: plugin and CLI differ"
    by_run = {s["run"]: s for s in expected["sessions"]}
    assert {case: by_run[runs[case]].get("error_kind") for case in BROKEN_KINDS} == BROKEN_KINDS
    for case in ("keras3_before", "keras3_after", "tfkeras", "script"):
        s = by_run[runs[case]]
        assert s["status"] == "ok" and "error_kind" not in s and s["cause_text"] == CAUSES[s["cause"]].text
    # Real analysis, measured side by side: the second request is a cache hit, much faster.
    run = "keras3/before/train"
    url = report_url(run, by_run[run]["session"])
    t0 = time.perf_counter()
    code, _, headers = get_json(client, url)
    took = time.perf_counter() - t0
    assert code == 200 and headers["X-Tfbneck-Cache"] == "hit"
    assert took < first_took[run] / 2, f"cached answer {took * 1e3:.1f} ms vs first {first_took[run] * 1e3:.1f} ms"
    assert p.sessions_impl()[1]["cache"]["analyses"] == len(expected["sessions"])


# ----------------------------------------------------------------------------------------
# The frontend explains every error kind, and takes cause texts from the report
# ----------------------------------------------------------------------------------------


