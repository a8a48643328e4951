"""The "Bottleneck" tab end to end: a real ``tensorboard`` process, headless Chromium.

Three logdirs:

* a logdir built here from real traces (TensorFlow in a subprocess, so these tests carry
  the ``tf`` marker) plus the cases that must fail politely (corrupt, empty, not an XSpace,
  skipped, TF <= 2.10 only, a window whose process died) and a run named with HTML;
  TensorBoard runs with ``--path_prefix`` so the links are seen to keep it;
* ``demo_logs`` (the shipped demo; each run's expected verdict in ``demo_logs/EXPECTED.json``);
* ``../shared/realtraces`` (real profiler output from public projects).

Every value shown is checked against the plugin's JSON report for the same session. The
profile plugin writes caches into the logdirs it opens, so each logdir is a copy. No check
assumes an idle machine: waits are for states (an element, a response), with deadlines.
Screenshots: ``tests/_artifacts/screenshots/``.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from tfbneck_plugin.logdir import find_sessions

from support.plugin_helpers import (BROKEN_KINDS, DEMO_LOGS, EXPECTED, REALTRACES, SCRIPT_RUN, SLOW_TENSORBOARD,
                            TensorBoard, build_plugin_logdir, chromium_context, js_fixed, make_tf_traces, screenshot)
from support.browser_tab import KIND_LABELS, Tab

pytestmark = pytest.mark.browser

BREAKDOWN = ["device_compute", "host_compute", "input", "host_to_device", "device_to_host", "collective",
             "kernel_launch", "idle"]


# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------

def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:80] or "root"


def api_report(tb: TensorBoard, run: str, session: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status, headers, body = tb.get(f"report?run={quote(run, safe='')}&session={quote(session, safe='')}")
        if status == 200:
            return json.loads(body)["sessions"][0]
        assert status == 202, body
        assert time.monotonic() < deadline, f"{run}/{session} still analysing after {timeout} s"
        time.sleep(0.2)


def api_sessions(tb: TensorBoard) -> list:
    status, _, body = tb.get("sessions")
    assert status == 200
    data = json.loads(body)
    assert data["scanned"], "the plugin has not finished scanning"
    return data["sessions"]


def canvas_pixels(frame, selector: str) -> int:
    """Non-transparent pixels drawn on the first canvas matching selector."""
    return frame.evaluate("""(sel) => { const c = document.querySelector(sel); if (!c) return -1;
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""", selector)


def check_verdict(tab: Tab, report: dict):
    card = tab.fl.locator(".tfb-verdict")
    if report["status"] != "ok":
        assert card.get_attribute("data-status") == "error"
        assert card.get_attribute("data-error-kind") == report["error_kind"]
        assert tab.fl.locator(".tfb-error-headline").inner_text().strip()
        assert tab.fl.locator(".tfb-error-message").text_content() == report["error"]
        return
    assert card.get_attribute("data-bottleneck") == report["bottleneck"]
    assert card.get_attribute("data-cause") == report["cause"]
    assert tab.fl.locator(".tfb-verdict .tfb-kind").inner_text() == KIND_LABELS[report["bottleneck"]]
    if report["bottleneck"] != "unknown":
        assert tab.fl.locator(".tfb-confidence").inner_text().strip() == f"Confidence {round(100 * report['confidence'])}%"
    # The meaning of the cause comes with the report (tfbneck_plugin/causes.py), shown as is.
    assert report["cause_text"] and tab.fl.locator(".tfb-verdict .tfb-cause").inner_text() == report["cause_text"]
    shown = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-evidence li')).map(li => li.textContent)")
    assert shown == [e.replace("`", "") for e in report["evidence"]]
    assert shown, "a verdict without evidence"


def check_chart(tab: Tab, report: dict):
    steps = report["steps"]
    if not steps["count"]:
        assert tab.fl.locator(".tfb-no-step-chart").count() == 1
        assert tab.fl.locator(".tfb-no-steps").count() == 1
        return
    used = [c for c in BREAKDOWN if any(it["breakdown_ms"].get(c, 0) > 0 for it in steps["items"])]
    canvas = tab.fl.locator("canvas.tfb-steps-canvas")
    assert canvas.get_attribute("data-chart") == "ready"
    assert int(canvas.get_attribute("data-points")) == steps["count"] * (len(used) + 1)  # + the total bar
    assert canvas_pixels(tab.frame, "canvas.tfb-steps-canvas") > 5000, "the step chart is blank"
    # The whole session's bar: one segment per category with time, sized by its share.
    segs = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-breakdown .tfb-seg'))"
                              ".map(s => [s.dataset.category, parseFloat(s.style.width)])")
    shares = report["breakdown_pct"]
    assert segs == [[c, pytest.approx(shares[c], abs=0.01)] for c in BREAKDOWN if shares.get(c, 0) > 0]


def check_stages(tab: Tab, report: dict):
    stages = report["input_pipeline"]["stages"]
    rows = tab.fl.locator(".tfb-stages tbody tr")
    assert rows.count() == len(stages)
    blocking = [s for s in stages if s["blocking"]]
    marked = tab.fl.locator(".tfb-stages tr.blocking")
    assert marked.count() == len(blocking)
    if blocking:
        assert marked.get_attribute("data-stage") == blocking[0]["kind"]
        assert marked.locator(".tfb-badge").text_content() == "blocking"
        assert marked.locator(".tfb-stage-path").text_content() == blocking[0]["name"]
        assert report["input_pipeline"]["bottleneck_stage"] == blocking[0]["name"]


def check_recommendations(tab: Tab, report: dict):
    recs = report.get("recommendations") or []
    assert tab.fl.locator(".tfb-rec").count() == len(recs)
    codes = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-rec'))"
                               ".map(r => { const c = r.querySelector('pre code'); return c ? c.textContent : null; })")
    assert codes == [r.get("code") or None for r in recs]
    # Each card shows the fix's worth as the report words it (recommendations[i].worth).
    from tfbneck_plugin.schema import worth
    now = (report.get("steps") or {}).get("time_per_batch_ms")
    shown = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-rec'))"
                               ".map(r => { const w = r.querySelector('.tfb-rec-worth'); return w ? w.textContent : ''; })")
    assert shown == [r["worth"] for r in recs] == [worth(r, now) for r in recs]
    whys = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-rec'))"
                              ".map(r => { const w = r.querySelector('.tfb-rec-why'); return w ? w.textContent : ''; })")
    assert whys == ["Why here: " + r["why_here"].replace("`", "") if r.get("why_here") else "" for r in recs]


#: Fewer system samples than this are listed as values, not drawn (frontend/src/session.js).
MIN_CHART_SAMPLES = 5


def check_system_basis(tab: Tab, sm: dict):
    """The system panel says how many samples it rests on; a short window lists them as
    values (its time, the mean CPU over cores) instead of drawing a line through two points."""
    basis = tab.fl.locator(".tfb-sys-basis")
    assert basis.get_attribute("data-samples") == str(sm["samples"])
    assert basis.inner_text().startswith(f"These figures rest on {sm['samples']} sample")
    rows = tab.fl.locator(".tfb-sys-samples tr.tfb-sample")
    if sm["samples"] >= MIN_CHART_SAMPLES:
        assert rows.count() == 0
        return
    assert rows.count() == sm["samples"] and tab.fl.locator("canvas.tfb-cpu-canvas").count() == 0
    series = sm["series"]
    for i in range(sm["samples"]):
        cells = rows.nth(i).locator("td")
        assert cells.nth(0).inner_text() == f"{js_fixed(series['t_ms'][i] / 1000, 2)} s"
        cpu = series["cpu_pct"][i]
        assert cells.nth(1).inner_text() == f"{js_fixed(sum(cpu) / len(cpu), 1)}%"


def check_trace_link(tab: Tab, report: dict, kind: str = "session"):
    """Click "Open in Trace Viewer": the TensorBoard page must navigate to the Profile
    plugin's Trace Viewer for this run and host, and the Profile plugin must load it."""
    tv = report["trace_viewer"]
    link = tab.fl.locator(f"a.tfb-trace-link[data-kind={kind}]")
    page = tab.page
    root = urlsplit(tab.tb.url)

    def is_trace_data(resp):
        u = urlsplit(resp.url)
        q = parse_qs(u.query)
        return (u.path == root.path + "data/plugin/profile/data" and q.get("run") == [tv["run"]]
                and q.get("tag", [""])[0].startswith("trace_viewer"))

    href = link.get_attribute("href")
    # A new tab: the Bottleneck tab's page stays where it is, so nothing needs Back to return.
    assert link.get_attribute("target") == "_blank"
    before = page.url
    with page.context.expect_event("response", is_trace_data, timeout=120_000) as data_resp:
        with page.context.expect_page(timeout=60_000) as opened:
            link.click()
    assert tab.page.url == before, "the tab's own page navigated away"
    page = opened.value
    page.wait_for_load_state()
    target = urlsplit(href)
    # The Profile plugin rewrites its query once loaded (tag=..., firstLoad=true): the page and run stay.
    opened_at = urlsplit(page.url)
    assert (opened_at.path, parse_qs(opened_at.query).get("run")) == (root.path, [tv["run"]]), \
        "the new tab did not open the link"
    query = parse_qs(target.query)
    assert (target.scheme, target.netloc, target.path) == (root.scheme, root.netloc, root.path), "the path prefix was lost"
    assert target.fragment == "profile"
    assert query["run"] == [tv["run"]] and query["tool"] == ["trace_viewer"]
    assert query["host"] == [tv["host"]] and tv["host"] in query["hosts"][0].split(",")
    assert data_resp.value.status == 200, "the Profile plugin could not load the trace"
    # The Profile plugin shows the Trace Viewer of this run.
    profile = page.frame_locator('iframe[src*="plugin_entry.html?name=profile"]')
    profile.get_by_text(tv["run"], exact=True).first.wait_for(timeout=60_000)
    profile.get_by_text("Trace Viewer", exact=True).first.wait_for(timeout=60_000)
    deadline = time.monotonic() + 60
    while not any("trace_viewer_index.html" in f.url and quote(tv["run"], safe="") in f.url for f in page.frames):
        assert time.monotonic() < deadline, "the Profile plugin did not open its Trace Viewer for this run"
        page.wait_for_timeout(200)
    page.wait_for_timeout(3000)  # let the trace draw
    screenshot(page, f"{tab.name}-trace-viewer-{kind}-{slug(tv['run'])}")


# ----------------------------------------------------------------------------------------
# A logdir built here: every case, with --path_prefix
# ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fixture_tb(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser") / "logs"
    runs = build_plugin_logdir(root, make_tf_traces())
    with TensorBoard(str(root), path_prefix="/tb") as tb:
        yield tb, runs


@pytest.fixture(scope="module")
def ctx():
    with chromium_context() as context:
        yield context


@pytest.mark.tf
def test_tab_lists_every_session_newest_first_and_shows_each(ctx, fixture_tb):
    tb, runs = fixture_tb
    tab = Tab(ctx, tb, "fixture")
    expected = api_sessions(tb)
    assert {r["run"] for r in expected} == set(runs.values())
    assert tab.listed() == [[r["run"], r["session"], ", ".join(r["hosts"])] for r in expected]
    times = [r["time"] for r in expected]
    assert times == sorted(times, reverse=True), "the list is not newest first"
    for row in expected:
        report = api_report(tb, row["run"], row["session"])
        tab.select(row["run"], row["session"])
        check_verdict(tab, report)
        if report["status"] == "ok":
            check_chart(tab, report)
            check_stages(tab, report)
            check_recommendations(tab, report)
        tab.shot(f"session-{slug(row['run'])}")
    tab.close()


@pytest.mark.tf
def test_errors_are_explained_inline(ctx, fixture_tb):
    tb, runs = fixture_tb
    tab = Tab(ctx, tb, "fixture")
    # The explanation the tab gives for each error_kind (frontend/src/errors.js).
    headlines = {
        "corrupt": "The trace file is damaged (truncated or corrupt) and cannot be read.",
        "empty_file": "The trace file is empty.",
        "not_xspace": "This file is not a profiler trace.",
        "skipped": "The profiler did not record this window.",
        "legacy_only": "This session only holds files written by TensorFlow 2.10 or older, which tfbneck cannot read.",
        "incomplete": "The training process stopped inside this profiling window, before its trace was saved.",
    }
    sessions = {r["run"]: r["session"] for r in api_sessions(tb)}
    assert set(BROKEN_KINDS) <= set(runs), "every broken case is in the fixture logdir"
    for case, kind in BROKEN_KINDS.items():
        run = runs[case]
        report = api_report(tb, run, sessions[run])
        assert report["error_kind"] == kind, report["error"]
        tab.select(run, sessions[run])
        assert tab.fl.locator(".tfb-verdict").get_attribute("data-error-kind") == kind
        assert tab.fl.locator(".tfb-error-headline").inner_text() == headlines[kind]
        assert tab.fl.locator(".tfb-error-hint").inner_text().strip()
        assert tab.fl.locator(".tfb-error-message").text_content() == report["error"]
        assert tab.fl.locator(".tfb-steps-canvas").count() == 0
        if kind == "skipped":
            assert tab.fl.locator(".tfb-error-hint").inner_text() == f"Reason given when it was skipped: {report['skipped']}"
        if kind == "incomplete":  # the recorded reason, less the words that repeat the headline
            assert tab.fl.locator(".tfb-error-hint").inner_text() == (
                "Files left in this folder are partial. Delete the folder to dismiss this entry.")
        tab.shot(f"error-{case}")
    tab.close()


@pytest.mark.tf
def test_html_in_run_names_is_shown_as_text(ctx, fixture_tb):
    tb, runs = fixture_tb
    tab = Tab(ctx, tb, "fixture")
    session = next(r["session"] for r in api_sessions(tb) if r["run"] == SCRIPT_RUN)
    scripts_before = tab.frame.evaluate("() => document.scripts.length")
    tab.select(SCRIPT_RUN, session)
    assert tab.fl.locator(".tfb-title-run").text_content() == SCRIPT_RUN
    assert tab.fl.locator(".tfb-meta dd").first.text_content() == "worker<b>0"
    item = tab.fl.locator(".tfb-item.selected")
    assert item.locator(".tfb-item-run").text_content() == SCRIPT_RUN
    assert tab.frame.evaluate("() => document.scripts.length") == scripts_before
    assert tab.frame.evaluate("() => document.querySelectorAll('.tfb-app b').length") == 0
    assert tab.frame.evaluate("() => window.__tfb_xss") is None
    assert tab.page.evaluate("() => window.__tfb_xss") is None
    tab.shot("html-run-name")
    tab.close()


@pytest.mark.tf
def test_system_metrics_and_copyable_code(ctx, fixture_tb):
    tb, runs = fixture_tb
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=tb.url.split("/tb/")[0])
    tab = Tab(ctx, tb, "fixture")
    run = runs["keras3_before"]
    session = next(r["session"] for r in api_sessions(tb) if r["run"] == run)
    report = api_report(tb, run, session)
    assert "system_metrics" in report, "the trace job records system metrics for this run"
    tab.select(run, session)
    sm = report["system_metrics"]
    check_system_basis(tab, sm)
    if sm["samples"] >= MIN_CHART_SAMPLES:
        cores = max(len(row) for row in sm["series"]["cpu_pct"])
        cpu = tab.fl.locator("canvas.tfb-cpu-canvas")
        assert int(cpu.get_attribute("data-points")) == (cores + 1) * len(sm["series"]["t_ms"])
        assert canvas_pixels(tab.frame, "canvas.tfb-cpu-canvas") > 2000
        assert canvas_pixels(tab.frame, "canvas.tfb-io-canvas") > 2000
    chips = dict(zip(tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-chips dt')).map(e => e.textContent)"),
                     tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-chips dd')).map(e => e.textContent)")))
    assert chips["CPU (all cores)"] == f"{js_fixed(sm['cpu_mean_pct'], 1)}%"
    assert chips["Busiest core"] == f"{js_fixed(sm['busiest_core_mean_pct'], 1)}%"
    tab.fl.locator(".tfb-system").scroll_into_view_if_needed()
    screenshot(tab.page, "fixture-system-metrics")
    # Copy the first recommendation's code.
    first = next(r for r in report["recommendations"] if r.get("code"))
    rec = tab.fl.locator(".tfb-rec").filter(has=tab.fl.locator("pre code")).first
    rec.locator("button.tfb-copy").click()
    # The status is set once the asynchronous clipboard write resolves (and cleared 2 s later).
    tab.frame.wait_for_function("() => Array.from(document.querySelectorAll('.tfb-copy-status'))"
                                ".some(s => s.textContent)", timeout=10_000)
    assert rec.locator(".tfb-copy-status").inner_text() == "Copied"
    assert tab.page.evaluate("() => navigator.clipboard.readText()") == first["code"]
    tab.shot("recommendations")
    tab.close()


def _ms_shown(text):
    """The number of milliseconds in a cell such as "9.3 ms" or "+1.2 ms (13 %)" (unsigned)."""
    m = re.search(r"(\d+(?:\.\d+)?) ms", text)
    assert m, text
    return float(m.group(1))


@pytest.mark.tf
def test_compare_two_sessions(ctx, fixture_tb):
    tb, runs = fixture_tb
    tab = Tab(ctx, tb, "fixture")
    sessions = {r["run"]: r["session"] for r in api_sessions(tb)}
    before_key = json.dumps([runs["keras3_before"], sessions[runs["keras3_before"]]], separators=(",", ":"))
    after_key = json.dumps([runs["keras3_after"], sessions[runs["keras3_after"]]], separators=(",", ":"))
    a = api_report(tb, runs["keras3_before"], sessions[runs["keras3_before"]])
    b = api_report(tb, runs["keras3_after"], sessions[runs["keras3_after"]])
    tab.fl.locator("button.tfb-tab[data-mode=compare]").click()
    tab.fl.locator("select.tfb-select[data-side=before]").select_option(before_key)
    tab.fl.locator("select.tfb-select[data-side=after]").select_option(after_key)
    tab.frame.wait_for_function(
        "([a, b]) => { const cols = document.querySelectorAll('.tfb-compare-col .tfb-title-run');"
        " return cols.length === 2 && cols[0].textContent === a && cols[1].textContent === b"
        " && document.querySelector('canvas.tfb-compare-canvas')?.dataset.chart === 'ready'; }",
        arg=[runs["keras3_before"], runs["keras3_after"]], timeout=60_000)
    verdicts = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-compare-col .tfb-verdict'))"
                                  ".map(v => v.dataset.bottleneck)")
    assert verdicts == [a["bottleneck"], b["bottleneck"]]
    row = tab.fl.locator('.tfb-compare-table tr[data-metric="Step time mean"] td')
    ma, mb = a["steps"]["step_time_ms"]["mean"], b["steps"]["step_time_ms"]["mean"]
    # Shown to 0.1 ms (JavaScript's toFixed rounds a tie such as 9.25 up, Python's format to even).
    assert _ms_shown(row.nth(0).inner_text()) == pytest.approx(ma, abs=0.0501)
    assert _ms_shown(row.nth(1).inner_text()) == pytest.approx(mb, abs=0.0501)
    change = row.nth(2).inner_text()
    assert change.startswith("+" if mb >= ma else "−") and _ms_shown(change) == pytest.approx(abs(mb - ma), abs=0.0501)
    assert canvas_pixels(tab.frame, "canvas.tfb-compare-canvas") > 2000
    tab.shot("compare")
    tab.close()


@pytest.mark.tf
def test_open_in_trace_viewer_keeps_the_path_prefix(ctx, fixture_tb):
    tb, runs = fixture_tb
    tab = Tab(ctx, tb, "fixture")
    run = runs["tfkeras"]  # tf-keras layout: the run is the logdir folder itself
    session = next(r["session"] for r in api_sessions(tb) if r["run"] == run)
    report = api_report(tb, run, session)
    tab.select(run, session)
    # The worst-stall link opens XProf's own Trace Viewer page in a new tab at the step (tested
    # in test_demo_verdicts_without_clicking_and_the_worst_stall_in_the_trace_viewer); the
    # session's link navigates the TensorBoard frame, prefix kept.
    check_trace_link(tab, report, "session")
    tab.close()


@pytest.mark.tf
def test_report_cache_over_http(fixture_tb):
    """On the real server: the second request for a session is a cache hit, and fast."""
    tb, runs = fixture_tb
    run = runs["keras3_after"]
    session = next(r["session"] for r in api_sessions(tb) if r["run"] == run)
    api_report(tb, run, session)
    deadline = time.monotonic() + 120  # the tab's background analyses (other tests opened it) end first
    while json.loads(tb.get("sessions")[2])["cache"]["in_progress"]:
        assert time.monotonic() < deadline, "background analyses still running after 120 s"
        time.sleep(0.2)
    before = json.loads(tb.get("sessions")[2])["cache"]
    status, headers, body = tb.get(f"report?run={quote(run, safe='')}&session={quote(session, safe='')}")
    assert status == 200 and headers["X-Tfbneck-Cache"] == "hit"
    stats = json.loads(tb.get("sessions")[2])["cache"]
    # Served from the cache: one more hit, no new analysis (its speed: test_plugin_speed.py).
    assert stats["hits"] == before["hits"] + 1 and stats["analyses"] == before["analyses"] == stats["misses"]


@pytest.mark.tf
def test_new_sessions_appear_without_restart(ctx, fixture_tb):
    """A session written while TensorBoard runs shows up (TensorBoard's reload button, or
    the tab's own polling), newest first. Runs last in this module: it changes the logdir."""
    tb, runs = fixture_tb
    tab = Tab(ctx, tb, "fixture")
    logdir = Path(tb.logdir)
    src = next((logdir / runs["tfkeras"] / "plugins" / "profile").glob("*/*.xplane.pb"))
    dest = logdir / "late" / "train" / "plugins" / "profile" / "2030_01_01_00_00_00"
    dest.mkdir(parents=True)
    shutil.copy(src, dest / "vm.xplane.pb")
    deadline = time.monotonic() + 120  # a rescan every RESCAN_INTERVAL_S; slower on a loaded machine
    while tab.listed()[0][:2] != ["late/train", "2030_01_01_00_00_00"]:
        assert time.monotonic() < deadline, "the new session did not appear without a restart"
        tab.page.locator("button.reload-button").click()
        tab.page.wait_for_timeout(1500)
    tab.select("late/train", "2030_01_01_00_00_00")
    check_verdict(tab, api_report(tb, "late/train", "2030_01_01_00_00_00"))
    tab.close()


@pytest.mark.tf
def test_a_slow_analysis_does_not_hold_up_the_tab(ctx, tmp_path):
    """A TensorBoard whose plugin holds one run's analysis until the test releases it
    (``plugin_slow_tensorboard.py``): the tab says it is analysing, another session opens
    meanwhile (so it did not wait for the held one), the held one arrives once released."""
    logdir = tmp_path / "logs"
    runs = build_plugin_logdir(logdir, make_tf_traces())
    slow_run, other_run = runs["keras3_before"], runs["keras3_after"]
    release = tmp_path / "release"
    with TensorBoard(str(logdir), launcher=[sys.executable, str(SLOW_TENSORBOARD)],
                     env={"TFBNECK_TEST_SLOW_RUN": slow_run, "TFBNECK_TEST_RELEASE_FILE": str(release)}) as tb:
        tab = Tab(ctx, tb, "slow")
        sessions = {r["run"]: r["session"] for r in api_sessions(tb)}
        index = tab.frame.evaluate("(run) => Array.from(document.querySelectorAll('.tfb-item'))"
                                   ".findIndex(li => li.dataset.run === run)", slow_run)
        tab.fl.locator(".tfb-item").nth(index).click()
        tab.fl.locator(".tfb-message", has_text="Analysing").wait_for(timeout=60_000)
        screenshot(tab.page, "slow-analysing")
        # Meanwhile another session opens, and the list answers; the held one cannot have ended.
        tab.select(other_run, sessions[other_run])
        check_verdict(tab, api_report(tb, other_run, sessions[other_run]))
        status, _, body = tb.get("sessions", timeout=30)
        assert status == 200
        assert {r["run"]: r["state"] for r in json.loads(body)["sessions"]}[slow_run] == "analysing"
        # The held one arrives when its analysis is released.
        release.write_text("go")
        tab.select(slow_run, sessions[slow_run])
        check_verdict(tab, api_report(tb, slow_run, sessions[slow_run]))
        tab.close()


# ----------------------------------------------------------------------------------------
# demo_logs: every demo session shows its expected verdict
# ----------------------------------------------------------------------------------------

def _expected_for(run: str, expected: dict):
    if run in expected:
        return expected[run]
    matches = [k for k in expected if not k.startswith("_") and run.startswith(k.rstrip("/") + "/")]
    return expected[max(matches, key=len)] if matches else None


def test_demo_logs(ctx, tmp_path):
    if not EXPECTED.exists():
        pytest.skip(f"{EXPECTED.relative_to(DEMO_LOGS.parent)} does not exist yet (the demo runs are not generated)")
    expected = json.loads(EXPECTED.read_text())
    work = tmp_path / "work"
    shutil.copytree(DEMO_LOGS, work / "demo_logs")  # the Profile plugin writes caches into what it opens
    with TensorBoard("demo_logs", cwd=str(work)) as tb:  # literally: tensorboard --logdir demo_logs
        listed = api_sessions(tb)
        assert listed, "demo_logs holds no profiling session"
        on_disk = {(s.run, s.name) for s in find_sessions(str(work / "demo_logs")).sessions}
        assert {(r["run"], r["session"]) for r in listed} == on_disk
        for key in (k for k in expected if not k.startswith("_")):
            assert any(r["run"] == key or r["run"].startswith(key.rstrip("/") + "/") for r in listed), \
                f"EXPECTED.json names run {key!r}, which has no session in demo_logs"
        tab = Tab(ctx, tb, "demo")
        assert [(r[0], r[1]) for r in tab.listed()] == [(r["run"], r["session"]) for r in listed]
        linked = None
        for row in listed:
            want = _expected_for(row["run"], expected)
            assert want is not None, f"demo run {row['run']!r} has no entry in EXPECTED.json"
            report = api_report(tb, row["run"], row["session"])
            tab.select(row["run"], row["session"])
            card = tab.fl.locator(".tfb-verdict")
            assert (card.get_attribute("data-bottleneck"), card.get_attribute("data-cause")) == \
                (want["bottleneck"], want["cause"]), f"{row['run']}: the tab shows the wrong verdict"
            check_verdict(tab, report)
            if report["status"] == "ok":
                check_chart(tab, report)
                check_stages(tab, report)
                check_recommendations(tab, report)
                if linked is None and report.get("trace_viewer") and report["steps"]["count"]:
                    linked = (row, report)
            tab.shot(f"session-{slug(row['run'])}")
        assert linked is not None, "no demo session with steps to open in the Trace Viewer"
        row, report = linked
        tab.select(row["run"], row["session"])
        check_trace_link(tab, report, "session")
        tab.close()


def test_demo_verdicts_without_clicking_and_the_worst_stall_in_the_trace_viewer(ctx, tmp_path):
    """Issue 26: every session of the list gets its verdict badge while no one clicks (the
    tab asks for background analyses, the most recent first, and says how far they are);
    the worst-stall link opens XProf's Trace Viewer on that step of that host."""
    expected = json.loads(EXPECTED.read_text())
    work = tmp_path / "work"
    shutil.copytree(DEMO_LOGS, work / "demo_logs")  # the Profile plugin writes caches into what it opens
    with TensorBoard("demo_logs", cwd=str(work)) as tb:
        tab = Tab(ctx, tb, "demo-badges")
        tab.frame.wait_for_function(
            "() => { const items = Array.from(document.querySelectorAll('.tfb-item')); return items.length > 0 && "
            "items.every(li => { const c = li.querySelector('.tfb-chip'); return c && c.textContent !== 'analysing'; }); }",
            timeout=180_000)
        chips = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-item')).map(li => "
                                   "[li.dataset.run, li.querySelector('.tfb-chip').textContent])")
        assert len(chips) == len(find_sessions(str(work / "demo_logs")).sessions) >= 10
        for run, chip in chips:
            assert chip == KIND_LABELS[_expected_for(run, expected)["bottleneck"]], run
        tab.frame.wait_for_function("() => { const p = document.querySelector('.tfb-progress'); "
                                    "return p.dataset.ready === p.dataset.total && !p.classList.contains('busy'); }",
                                    timeout=30_000)
        assert tab.fl.locator(".tfb-progress").get_attribute("data-total") == str(len(chips))
        # The worst stall of an input-bound run: its step, on its host, in XProf's Trace Viewer.
        run = "cpu_bound_input"
        session = next(r["session"] for r in api_sessions(tb) if r["run"] == run)
        report = api_report(tb, run, session)
        tab.select(run, session)
        check_system_basis(tab, report["system_metrics"])
        w, tv = report["worst_step"], report["trace_viewer"]
        link = tab.fl.locator("a.tfb-trace-link[data-kind=worst]")
        assert link.get_attribute("data-step") == str(w["step"]) and link.get_attribute("target") == "_blank"
        with tab.page.context.expect_page(timeout=60_000) as opened:
            link.click()
        viewer = opened.value
        query = parse_qs(urlsplit(viewer.url).query)
        data = parse_qs(urlsplit(query["trace_data_url"][0]).query)
        assert data["run"] == [tv["run"]] and data["host"] == [tv["host"]] and data["tag"] == ["trace_viewer@"]
        view = (float(query["view_start"][0]), float(query["view_end"][0]))
        assert view[0] < w["trace_start_ms"] < w["trace_end_ms"] < view[1]
        assert view[1] - view[0] < 1.5 * (w["trace_end_ms"] - w["trace_start_ms"])  # that step, not the window
        # The Trace Viewer's own state: once its data is drawn, the step's marker starts where the
        # report says, and the viewport is that range (the viewer starts from a default one).
        marker = f"train {w['step']}"
        viewer.wait_for_function("(name) => { const el = document.querySelector('tf-trace-viewer'); "
                                 "const m = el && el._traceViewer && el._traceViewer.model; "
                                 "return m && m.getAllThreads().some(t => t.sliceGroup.slices.some(s => s.title === name)); }",
                                 arg=marker, timeout=120_000)
        start = viewer.evaluate("(name) => document.querySelector('tf-trace-viewer')._traceViewer.model.getAllThreads()"
                                ".flatMap(t => t.sliceGroup.slices).find(s => s.title === name).start", marker)
        assert start == pytest.approx(w["trace_start_ms"], abs=0.01)
        shown_js = """() => { const t = document.querySelector('tf-trace-viewer')._traceViewer.trackView;
            const d = t.viewport.currentDisplayTransform;
            return [d.xViewToWorld(0), d.xViewToWorld(t.viewWidth_ * (window.devicePixelRatio || 1))]; }"""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        try:
            viewer.wait_for_function(f"([a, b]) => {{ const v = ({shown_js})(); "
                                     "return Math.abs(v[0] - a) < 1e-3 && Math.abs(v[1] - b) < 1e-3; }",
                                     arg=list(view), timeout=60_000)
        except PlaywrightTimeout:
            pass  # the assert below says where the viewer is instead
        shown = viewer.evaluate(shown_js)
        assert shown == [pytest.approx(view[0], abs=1e-3), pytest.approx(view[1], abs=1e-3)]
        screenshot(viewer, "demo-worst-stall-trace-viewer")
        viewer.close()
        tab.close()


# ----------------------------------------------------------------------------------------
# ../shared/realtraces: every session listed; those without a verdict say why
# ----------------------------------------------------------------------------------------

def test_realtraces(ctx, tmp_path):
    if not REALTRACES.is_dir():
        pytest.skip(f"{REALTRACES} is absent (real traces from public projects live in ../shared beside the repository)")
    logdir = tmp_path / "realtraces"
    shutil.copytree(REALTRACES, logdir)
    with TensorBoard(str(logdir)) as tb:
        listed = api_sessions(tb)
        on_disk = {(s.run, s.name) for s in find_sessions(str(logdir)).sessions}
        assert {(r["run"], r["session"]) for r in listed} == on_disk and len(on_disk) >= 10
        tab = Tab(ctx, tb, "realtraces")
        assert sorted((r[0], r[1]) for r in tab.listed()) == sorted(on_disk)
        undiagnosed = 0
        for row in listed:
            report = api_report(tb, row["run"], row["session"])
            tab.select(row["run"], row["session"])
            check_verdict(tab, report)
            if report["status"] != "ok":
                undiagnosed += 1
                assert tab.fl.locator(".tfb-error-headline").is_visible()
            elif report["bottleneck"] == "unknown":
                undiagnosed += 1
                # No verdict: the card says why, in words, inline.
                assert tab.fl.locator(".tfb-verdict .tfb-kind").inner_text() == "No verdict"
                assert tab.fl.locator(".tfb-cause").inner_text().strip()
                assert tab.fl.locator(".tfb-evidence li").count() >= 1
            else:
                check_chart(tab, report)
                check_stages(tab, report)
            tab.shot(f"session-{slug(row['run'])}")
        assert undiagnosed >= 1, "realtraces holds JAX traces, which cannot get a TensorFlow verdict"
        tab.close()
