"""The tab's Fleet view in a real TensorBoard and headless Chromium: the numbers it shows are
the ones ``tfbneck fleet --format json`` gives for the same logdir (read from the same report
cache), the ranked table sorts and filters by cause, a run opens its session, the group
pattern regroups the chart. Screenshots: ``tests/_artifacts/screenshots/fleet-*.png``."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from conftest import DEMO_LOGS, tfbneck_cmd
from support.browser_tab import Tab
from support.fleet_logs import build_fleet, real_sessions
from support.kineto_loop import SINGLE, TRACE, cpu_loop
from support.plugin_helpers import TensorBoard, chromium_context

#: A real browser; ``quick``: the quick tier runs these too (its browser tests).
pytestmark = [pytest.mark.browser, pytest.mark.quick]

PATTERN = r"exp-(\w+)-"


@pytest.fixture(scope="module")
def fleet_tb(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleetbrowser")
    logs, cache_dir = root / "logs", root / "cache"
    build_fleet(str(logs), real_sessions(DEMO_LOGS, None), runs=30, sessions_per_run=1)
    env = {"TFBNECK_CACHE_DIR": str(cache_dir)}
    r = subprocess.run(tfbneck_cmd() + ["fleet", str(logs), "--format", "json"], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, **env))
    assert r.returncode == 0, r.stderr[-2000:]
    with TensorBoard(str(logs), env=env) as tb:
        yield tb, json.loads(r.stdout)


@pytest.fixture(scope="module")
def ctx():
    with chromium_context() as context:
        yield context


def rows(tab):
    return tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-fleet-run')).map(tr => "
                              "[tr.dataset.run, tr.dataset.cause, Number(tr.dataset.rank)])")


def cells(tab, cls):
    """``{run: text}`` of the table's cells of class ``cls``."""
    return dict(tab.frame.evaluate("(cls) => Array.from(document.querySelectorAll('.tfb-fleet-run')).map(tr => "
                                   "[tr.dataset.run, tr.querySelector('.' + cls).textContent])", cls))


def open_fleet(tab):
    tab.fl.locator(".tfb-tab[data-mode=fleet]").click()
    tab.frame.wait_for_function("() => { const v = document.querySelector('.tfb-fleet-view'); "
                                "return v && v.dataset.pending === '0'; }", timeout=120_000)
    tab.frame.wait_for_function("() => Array.from(document.querySelectorAll('.tfb-fleet-view canvas'))"
                                ".every(c => c.dataset.chart === 'ready')", timeout=10_000)


def test_fleet_view_shows_the_cli_numbers(ctx, fleet_tb):
    tb, want = fleet_tb
    tab = Tab(ctx, tb, "fleet")
    open_fleet(tab)
    view = tab.fl.locator(".tfb-fleet-view")
    assert view.get_attribute("data-sessions") == str(want["sessions"]) == "30"
    assert [r[0] for r in rows(tab)] == [r["run"] for r in want["runs"]]
    assert tab.fl.locator(".tfb-fleet-groups-canvas").get_attribute("data-groups") == str(len(want["groups"]))
    top = want["runs"][0]
    assert top["recoverable_ms"] > 0 and top["run"] in tab.fl.locator(".tfb-fleet-top").inner_text()
    # The Worth column: each run's worth as the CLI prints it; an unknown recoverable time reads
    # "no model", never "0 ms", and those runs rank after every run with time to recover.
    assert cells(tab, "tfb-fleet-worth") == {r["run"]: r["fix_worth"] or "–" for r in want["runs"]}
    unknown = [r["run"] for r in want["runs"] if r["recoverable_ms"] is None]
    assert unknown and all(cells(tab, "tfb-fleet-recoverable")[run] == "no model" for run in unknown)
    ranks = {r[0]: r[2] for r in rows(tab)}
    assert min(ranks[run] for run in unknown) > max(ranks[r["run"]] for r in want["runs"] if (r["recoverable_ms"] or 0) > 0)
    tab.shot("view")
    # Filter by cause: only that cause's runs, in rank order.
    cause = top["cause"]
    tab.fl.locator("select.tfb-fleet-cause").select_option(cause)
    shown = rows(tab)
    assert [r[0] for r in shown] == [r["run"] for r in want["runs"] if r["cause"] == cause]
    tab.fl.locator("select.tfb-fleet-cause").select_option("")
    # Sort by recoverable time: first click largest first (the rank order), then smallest first.
    head = tab.fl.locator("th[data-key=recoverable_ms]")
    head.click()
    assert rows(tab)[0][0] == top["run"]
    head.click()  # smallest first: the runs of unknown worth, then the smallest known
    first = next(r for r in want["runs"] if r["run"] == rows(tab)[0][0])
    assert first["recoverable_ms"] is None
    # A run opens its latest session's report.
    tab.fl.locator(f".tfb-fleet-run[data-run='{top['run']}'] a.tfb-fleet-open").click()
    tab.frame.wait_for_function("(run) => { const s = document.querySelector('.tfb-session'); "
                                "return s && s.dataset.run === run; }", arg=top["run"], timeout=120_000)
    assert tab.fl.locator(".tfb-session").get_attribute("data-session") == top["session"]
    tab.close()


def test_fleet_view_groups_by_pattern(ctx, fleet_tb):
    tb, want = fleet_tb
    tab = Tab(ctx, tb, "fleet-grouped")
    open_fleet(tab)
    box = tab.fl.locator("input.tfb-fleet-groupby")
    box.fill(PATTERN)
    box.press("Enter")
    groups = {re.search(PATTERN, r["run"]).group(1) for r in want["runs"]}
    tab.frame.wait_for_function("(n) => { const c = document.querySelector('.tfb-fleet-groups-canvas'); "
                                "return c && c.dataset.groups === String(n) && c.dataset.chart === 'ready'; }",
                                arg=len(groups), timeout=60_000)
    tab.shot("grouped")
    tab.close()


def test_fleet_view_names_each_session_without_a_report(ctx, tmp_path):
    """PyTorch traces a crashed or still-writing profiler left (empty, cut in the middle, not
    JSON) beside a good one: each broken run's row and the list under the table say which file
    and what is wrong, in the words of ``tfbneck fleet --format json``; the good run's first fix
    has no predicted worth and reads "no model"."""
    logs, cache = tmp_path / "logs", tmp_path / "cache"
    good = cpu_loop(logs / "compute" / TRACE, SINGLE, 300.0).read_bytes()
    for name, data in (("empty", b""), ("cut", good[: len(good) // 2]), ("notjson", b"not JSON\n")):
        (logs / name).mkdir()
        (logs / name / TRACE).write_bytes(data)
    env = {"TFBNECK_CACHE_DIR": str(cache)}
    r = subprocess.run(tfbneck_cmd() + ["fleet", str(logs), "--format", "json"], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, **env))
    want = json.loads(r.stdout)
    assert r.returncode == 1 and len(want["failed"]) == 3, r.stderr[-2000:]
    with TensorBoard(str(logs), env=env) as tb:
        tab = Tab(ctx, tb, "fleet-failed")
        open_fleet(tab)
        errors = {r["run"]: r["error"] for r in want["runs"] if r["status"] != "ok"}
        assert {run: text for run, text in cells(tab, "tfb-fleet-fix").items() if run in errors} == errors
        assert cells(tab, "tfb-fleet-recoverable")["compute"] == "no model"
        items = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-fleet-failed-item'))"
                                   ".map(li => li.textContent)")
        assert items == [f"{x['run']}/{x['session']}: {x['error']}" for x in want["failed"]]
        tab.shot("failed")
        assert not tab.errors
        tab.close()
