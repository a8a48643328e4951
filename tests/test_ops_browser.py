"""The tab's top-ops table (issue 27, acceptance 4) in headless Chromium against a real
TensorBoard: the rows and numbers are the plugin's JSON ``top_ops``, a click on a column
head sorts by it, and each op links into the Profile plugin's Trace Viewer for its session.
Logdir: copies of two committed demo runs and, where ``../shared`` is present, a real GPU
trace (device ops with kernels)."""
from __future__ import annotations

import os
import shutil
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import DEMO_LOGS, SHARED
from support.browser_tab import Tab
from support.plugin_helpers import TensorBoard, chromium_context, js_fixed
from test_plugin_browser import api_report, api_sessions

pytestmark = pytest.mark.browser

GPU_RUN = os.path.join(SHARED, "realtraces-gpu", "rtx2060-chess", "logs", "fit", "20210615-181006")


def shown_rows(tab: Tab):
    return tab.frame.evaluate(
        "() => Array.from(document.querySelectorAll('.tfb-ops-table tbody tr')).map(tr => "
        "[tr.dataset.where, tr.dataset.op].concat(Array.from(tr.querySelectorAll('td')).slice(1).map(td => td.textContent)))")


def as_shown(r):
    where = {"input_pipeline": "tf.data"}.get(r["where"], r["where"])
    return [r["where"], r["name"], r["type"], where, js_fixed(r['self_ms_per_step'], 3), js_fixed(r['pct'], 2),
            f"{r['count_per_step']:g}", js_fixed(r['total_ms_per_step'], 3)]


def test_top_ops_table_shows_the_json_and_sorts(tmp_path):
    logdir = tmp_path / "logs"
    for run in ("compute_bound", "cpu_bound_input"):
        shutil.copytree(os.path.join(DEMO_LOGS, run), logdir / run)
    if os.path.isdir(GPU_RUN):
        shutil.copytree(GPU_RUN, logdir / "gpu")
    with chromium_context() as ctx, TensorBoard(str(logdir)) as tb:
        tab = Tab(ctx, tb, "ops")
        for row in api_sessions(tb):
            report = api_report(tb, row["run"], row["session"])
            tab.select(row["run"], row["session"])
            want = sorted(report["top_ops"], key=lambda r: -r["self_ms_per_step"])
            assert shown_rows(tab) == [as_shown(r) for r in want]
            if row["run"] == "gpu":
                kernels = tab.frame.evaluate("() => document.querySelector('.tfb-ops-table tbody tr .tfb-stage-path')"
                                             ".textContent")
                assert kernels == ", ".join(want[0]["kernels"])
            # Sort by calls per step (descending on the first click, ascending on the second).
            head = tab.fl.locator('.tfb-ops-table th[data-key="count_per_step"]')
            head.click()
            calls = [float(r[6]) for r in shown_rows(tab)]
            assert calls == sorted(calls, reverse=True) and head.get_attribute("data-sorted") == "desc"
            head.click()
            calls = [float(r[6]) for r in shown_rows(tab)]
            assert calls == sorted(calls) and head.get_attribute("data-sorted") == "asc"
            # Each op links to the Trace Viewer of its session and says where its longest run is.
            top_row = tab.fl.locator(".tfb-ops-table tbody tr").first
            link = top_row.locator("a.tfb-op-link")
            q = parse_qs(urlsplit(link.get_attribute("href")).query)
            assert q["run"] == [report["trace_viewer"]["run"]] and q["tool"] == ["trace_viewer"]
            key = (top_row.get_attribute("data-where"), top_row.get_attribute("data-op"))
            first = next(r for r in report["top_ops"] if (r["where"], r["name"]) == key)
            assert link.text_content() == first["name"]
            assert f"at {first['longest']['start_ms']:.3f} ms" in link.get_attribute("title")
            tab.shot(f"ops-{row['run']}")
        tab.close()
