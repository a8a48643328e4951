"""The Bottleneck tab groups a multi-worker job's worker sessions into one entry
(issue 13 point 4; ``plugin/index.job_rows``, ``plugin/reports.JobGrouper``, ``/job``).

The traces are real: ``tests/data/multiworker`` holds two 2-worker jobs run with
``MultiWorkerMirroredStrategy`` on localhost (``straggler``: worker 1's input pipeline is
slow; ``balanced``: all-reduce dominates), each worker profiled by BottleneckProfiler into
its own run. The routes are called through their pure ``*_impl`` methods with the real
analyzer; the browser test starts TensorBoard and Chromium as ``test_plugin_browser.py`` does.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from tensorboard.plugins import base_plugin

from tfbneck_plugin.plugin import BottleneckPlugin, RouteError
from support import paths

DATA = os.path.join(paths.DATA, "multiworker")
STRAGGLER = [("straggler/worker0", "2026_11_30_11_55_59_steps6-12_worker0"),
             ("straggler/worker1", "2026_11_30_11_55_59_steps6-12_worker1")]
BALANCED = [("balanced/worker0", "2026_11_30_11_56_18_steps6-12_worker0"),
            ("balanced/worker1", "2026_11_30_11_56_18_steps6-12_worker1")]


@pytest.fixture
def logdir(tmp_path):
    out = tmp_path / "logs"
    shutil.copytree(DATA, out)
    return out


def _plugin(logdir):
    return BottleneckPlugin(base_plugin.TBContext(logdir=str(logdir)), report_wait_s=60.0)


def _listing(plugin, until, timeout=120.0):
    """``/sessions`` rows once ``until(rows)`` holds (the analyses run on threads)."""
    deadline = time.monotonic() + timeout
    while True:
        _, body = plugin.sessions_impl()
        if body["scanned"] and until(body["sessions"]):
            return body["sessions"]
        assert time.monotonic() < deadline, f"listing never settled: {body['sessions']}"
        time.sleep(0.2)


def _report(plugin, run, session):
    code, body, _ = plugin.report_impl({"run": run, "session": session}, wait_s=60.0)
    assert code == 200
    return body["sessions"][0]


def test_sessions_are_listed_one_by_one_until_analysed(logdir):
    plugin = _plugin(logdir)
    rows = _listing(plugin, lambda rows: len(rows) == 4)
    assert all("kind" not in r and r["state"] == "new" for r in rows)
    with pytest.raises(RouteError) as err:
        plugin.job_impl({"run": STRAGGLER[0][0], "session": STRAGGLER[0][1]})
    assert err.value.status == 404 and "not a worker of a multi-worker job" in str(err.value)


def test_opening_one_worker_lists_its_job_as_one_entry(logdir):
    plugin = _plugin(logdir)
    _listing(plugin, lambda rows: len(rows) == 4)
    _report(plugin, *STRAGGLER[0])
    # The listing queues the other worker of the same window; the straggler job becomes one row.
    rows = _listing(plugin, lambda rows: any(r.get("kind") == "job" for r in rows))
    jobs = [r for r in rows if r.get("kind") == "job"]
    assert len(jobs) == 1
    job = jobs[0]
    assert job["run"] == "straggler" and job["session"].startswith("job:")
    assert job["hosts"] == ["worker:0", "worker:1"]
    assert job["members"] == [{"task": "worker:0", "run": STRAGGLER[0][0], "session": STRAGGLER[0][1]},
                              {"task": "worker:1", "run": STRAGGLER[1][0], "session": STRAGGLER[1][1]}]
    assert (job["state"], job["status"], job["bottleneck"], job["cause"]) == ("ready", "ok", "cpu", "input_preprocessing")
    assert job["straggler"] == "worker:1"
    keys = {(r["run"], r["session"]) for r in rows}
    assert not keys & set(STRAGGLER)  # its workers are not listed on their own any more
    assert set(BALANCED) <= keys  # the other job, not opened, is still two sessions


def test_job_report_route_names_the_straggler_and_links_each_worker(logdir):
    plugin = _plugin(logdir)
    _listing(plugin, lambda rows: len(rows) == 4)
    _report(plugin, *STRAGGLER[1])
    _listing(plugin, lambda rows: any(r.get("kind") == "job" for r in rows))
    for run, session in STRAGGLER:  # either worker names the job
        code, body, _ = plugin.job_impl({"run": run, "session": session}, wait_s=60.0)
        assert code == 200
        (rep,) = body["sessions"]
        assert rep["kind"] == "job" and rep["hosts"] == ["worker:0", "worker:1"]
        assert (rep["bottleneck"], rep["cause"]) == ("cpu", "input_preprocessing")
        assert rep["job"]["straggler"] == "worker:1" and rep["job"]["grouped_by"] == "job_info"
        rows = {r["host"]: r for r in rep["per_host"]}
        assert rows["worker:1"]["straggler"] is True and rows["worker:0"]["straggler"] is False
        assert rows["worker:1"]["trace_viewer"] == {"run": "/".join(STRAGGLER[1]), "host": "vm"}
        assert rows["worker:0"]["trace_viewer"] == {"run": "/".join(STRAGGLER[0]), "host": "vm"}
    _, _, source = plugin.job_impl({"run": STRAGGLER[0][0], "session": STRAGGLER[0][1]})
    assert source == "hit"


def test_balanced_job_names_no_straggler(logdir):
    plugin = _plugin(logdir)
    _listing(plugin, lambda rows: len(rows) == 4)
    _report(plugin, *BALANCED[0])
    rows = _listing(plugin, lambda rows: any(r.get("kind") == "job" for r in rows))
    (job,) = [r for r in rows if r.get("kind") == "job"]
    assert (job["run"], job["bottleneck"], job["cause"], job["straggler"]) == ("balanced", "network", "gradient_sync", None)
    _, body, _ = plugin.job_impl({"run": BALANCED[1][0], "session": BALANCED[1][1]}, wait_s=60.0)
    assert all(r["straggler"] is False for r in body["sessions"][0]["per_host"])


def test_a_worker_report_is_still_served_alone(logdir):
    plugin = _plugin(logdir)
    _listing(plugin, lambda rows: len(rows) == 4)
    rep = _report(plugin, *STRAGGLER[1])
    assert rep.get("kind") != "job" and rep["run"] == STRAGGLER[1][0] and rep["hosts"] == ["vm"]


def test_a_worker_deleted_since_unlists_the_job(logdir):
    plugin = _plugin(logdir)
    _listing(plugin, lambda rows: len(rows) == 4)
    _report(plugin, *STRAGGLER[0])
    _listing(plugin, lambda rows: any(r.get("kind") == "job" for r in rows))
    shutil.rmtree(logdir / "straggler" / "worker1")
    # Once a rescan (every RESCAN_INTERVAL_S) misses worker 1, worker 0 is listed on its own again.
    rows = _listing(plugin, lambda rows: STRAGGLER[0] in {(r["run"], r["session"]) for r in rows}, timeout=60.0)
    assert not any(r.get("kind") == "job" for r in rows)
    assert len(rows) == 3 and STRAGGLER[1] not in {(r["run"], r["session"]) for r in rows}


def _trend_file(run_dir, windows, log=()):
    """A BottleneckProfiler step-time trend file in ``run_dir`` (records.py's format): 200
    batches timed, ``windows`` (session name -> the job's own step around it, ms), and the
    slowdown trigger's ``log``."""
    folder = run_dir / "plugins" / "bottleneck"
    folder.mkdir(parents=True, exist_ok=True)
    data = {"format": "tfbneck.step_times", "version": 1, "source": "BottleneckProfiler", "host": "vm", "pid": 7,
            "ended": True, "steps_per_execution": 1, "points": [{"step": 200, "mean_ms": 40.0, "n": 200}],
            "windows": [{"index": i, "kind": "scheduled", "steps": [6, 12], "status": "profiled", "session": name,
                         "trigger": None, "overhead": {"job_step_ms": job_ms, "x": 1.1}}
                        for i, (name, job_ms) in enumerate(windows.items())],
            "trigger_state": {"log": list(log)}}
    (folder / "steptimes_2026_11_30_11_55_00_vm_7.json").write_text(json.dumps(data))


#: A slow stretch the slowdown trigger confirmed but did not profile (records.py's log entry).
UNCAPTURED = {"first_step": 100, "last_step": 140, "baseline_p50_ms": 40.0, "observed_p50_ms": 90.0,
              "outcome": "not captured: max_captures reached"}


@pytest.fixture
def logdir_with_trends(logdir):
    """The multi-worker logdir with a trend file in each straggler worker's run: the job's own
    step around each window far above the traced one (the job report says the window did not
    see the steady state), the run's length, and in worker 1's run a slow stretch not
    profiled and a later session of that run (a copy of a demo session, no job's worker) that
    the CLI says the stretch on."""
    for run, session in STRAGGLER:
        _trend_file(logdir / run, {session: 5000.0}, log=[UNCAPTURED] if run.endswith("worker1") else [])
    later = logdir / STRAGGLER[1][0] / "plugins" / "profile" / "2026_11_30_12_30_00_steps6-10"
    demo = os.path.join(paths.DEMO_LOGS, "cpu_bound_input", "plugins", "profile")
    (name,) = os.listdir(demo)
    shutil.copytree(os.path.join(demo, name), later)
    return logdir


def _cli_json(logdir, tmp_path):
    from tfbneck_plugin.cli.main import main as cli_main
    out = tmp_path / "cli.json"
    assert cli_main(["analyze", str(logdir), "--format", "json", "--output", str(out)]) == 0
    return json.loads(out.read_text())


def test_job_route_gives_the_job_report_tfbneck_analyze_gives(logdir_with_trends, tmp_path):
    """``/job`` finishes each worker with its run's facts before grouping, as ``tfbneck
    analyze`` does: the route's job report equals the CLI's JSON entry for that job, window,
    session time, run length and the job-clock sentences included."""
    plugin = _plugin(logdir_with_trends)
    _listing(plugin, lambda rows: len(rows) == 5)
    _report(plugin, *STRAGGLER[0])
    _listing(plugin, lambda rows: any(r.get("kind") == "job" for r in rows))
    code, body, _ = plugin.job_impl({"run": STRAGGLER[1][0], "session": STRAGGLER[1][1]}, wait_s=60.0)
    assert code == 200
    (tab,) = body["sessions"]
    printed = _cli_json(logdir_with_trends, tmp_path)
    (cli,) = [r for r in printed["sessions"] if r.get("kind") == "job" and r["run"] == "straggler"]
    assert json.loads(json.dumps(tab)) == cli
    assert body["version"] == printed["version"]
    assert tab["window"]["job_step_ms"] == 5000.0 and tab["run_length"]["batches"] == 200 and tab["session_time"]
    assert [e for e in tab["evidence"] if "did not see the job's steady state" in e]  # both workers' own clocks


def test_session_route_says_a_runs_slow_stretch_where_tfbneck_analyze_does(logdir_with_trends):
    """``/report`` of a worker that is not its run's newest session gives the report the batch
    driver gives it among all the logdir's sessions (``tfbneck analyze`` before it groups
    workers): the slow stretch not profiled is said once, on the run's newest session, in the
    tab as in the CLI."""
    from tfbneck_plugin import batch
    plugin = _plugin(logdir_with_trends)
    _listing(plugin, lambda rows: len(rows) == 5)
    sessions, _ = batch.discover([str(logdir_with_trends)])
    expected = {s.key: r for s, r in zip(sessions, batch.analyze_many(sessions, progress=False))}
    said = "The slowdown trigger saw"
    for key in [STRAGGLER[1], (STRAGGLER[1][0], "2026_11_30_12_30_00_steps6-10")]:
        assert json.loads(json.dumps(_report(plugin, *key))) == json.loads(json.dumps(expected[key]))
    assert not [e for e in expected[STRAGGLER[1]]["evidence"] if e.startswith(said)]
    assert [e for e in expected[(STRAGGLER[1][0], "2026_11_30_12_30_00_steps6-10")]["evidence"] if e.startswith(said)]


# ----------------------------------------------------------------------------------------
# The tab in a real TensorBoard and Chromium
# ----------------------------------------------------------------------------------------

def _api_json(tb, path, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        status, _, body = tb.get(path)
        if status == 200:
            return json.loads(body)
        assert status == 202, body
        assert time.monotonic() < deadline, f"{path} still analysing after {timeout} s"
        time.sleep(0.2)


@pytest.mark.browser
def test_tab_shows_the_job_with_its_workers_and_their_trace_viewer_links(tmp_path):
    """Without a click the list turns the straggler job's two worker sessions into one job
    entry (background analyses), which opens on the job's verdict and a table of both workers, worker:1 marked
    the straggler; each worker's Trace Viewer link opens that worker's run and host, and the
    Profile plugin loads worker:1's trace from it."""
    from support.plugin_helpers import TensorBoard, chromium_context, screenshot
    from test_plugin_browser import Tab

    logdir = tmp_path / "logs"
    shutil.copytree(DATA, logdir)  # the Profile plugin writes caches into the logdir it opens
    for gz in logdir.rglob("*.xplane.pb.gz"):  # the Profile plugin (XProf 2.24) lists only plain .xplane.pb
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    with chromium_context() as ctx, TensorBoard(str(logdir)) as tb:
        tab = Tab(ctx, tb, "multiworker")
        # Nothing clicked: the tab has every session analysed in the background, and once both
        # workers of a job are, the list shows the job in place of their rows.
        tab.frame.wait_for_function("() => Array.from(document.querySelectorAll('.tfb-item')).some(li => "
                                    "li.dataset.run === 'straggler' && li.dataset.session.startsWith('job:'))",
                                    timeout=120_000)
        (row,) = [item for item in tab.listed() if item[0] == "straggler"]
        tab.select(row[0], row[1])
        tab.frame.wait_for_function("() => document.querySelector('.tfb-job-view')", timeout=120_000)
        # (The tab opened the newest session, a balanced worker, first: that job is grouped too.)
        rows = {r["run"]: r for r in _api_json(tb, "sessions")["sessions"] if r.get("kind") == "job"}
        assert rows["straggler"]["straggler"] == "worker:1"
        job = _api_json(tb, f"job?run={quote(STRAGGLER[0][0], safe='')}&session={quote(STRAGGLER[0][1])}")["sessions"][0]
        listed = tab.listed()
        assert [l[:2] for l in listed if l[0] == "straggler"] == [["straggler", job["session"]]]
        assert not any(tuple(l[:2]) in STRAGGLER for l in listed)
        view = tab.frame.evaluate("""() => ({
            run: document.querySelector('.tfb-session').dataset.run,
            session: document.querySelector('.tfb-session').dataset.session,
            kind: document.querySelector('.tfb-verdict').dataset.bottleneck,
            straggler: document.querySelector('.tfb-job').dataset.straggler,
            rows: Array.from(document.querySelectorAll('.tfb-job-worker')).map(tr => ({
              host: tr.dataset.host, straggler: tr.classList.contains('tfb-straggler'),
              chip: !!tr.querySelector('.tfb-straggler-chip'),
              href: tr.querySelector('a.tfb-worker-trace').href}))})""")
        assert (view["run"], view["session"], view["kind"], view["straggler"]) == ("straggler", job["session"], "cpu", "worker:1")
        assert [(r["host"], r["straggler"], r["chip"]) for r in view["rows"]] == [
            ("worker:0", False, False), ("worker:1", True, True)]
        for row, want in zip(view["rows"], job["per_host"]):
            q = parse_qs(urlsplit(row["href"]).query)
            tv = want["trace_viewer"]
            assert (q["run"], q["host"], q["hosts"], q["tool"]) == ([tv["run"]], [tv["host"]], [tv["host"]], ["trace_viewer"])
        assert all(r["href"].endswith("#profile") for r in view["rows"])
        screenshot(tab.page, "multiworker-job")
        # worker:1's link opens the Profile plugin on worker:1's own session.
        tv = job["per_host"][1]["trace_viewer"]

        def is_trace_data(resp):
            q = parse_qs(urlsplit(resp.url).query)
            return urlsplit(resp.url).path.endswith("data/plugin/profile/data") and q.get("run") == [tv["run"]]

        with tab.page.expect_response(is_trace_data, timeout=120_000) as resp:
            tab.fl.locator('a.tfb-worker-trace[data-host="worker:1"]').click()
        assert resp.value.status == 200, "the Profile plugin could not load worker:1's trace"
        tab.page.wait_for_timeout(3000)  # let the trace draw
        screenshot(tab.page, "multiworker-trace-viewer-worker1")
        tab.close()
