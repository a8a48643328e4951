"""The tab's top-ops table (issue 27, acceptance 4) in headless Chromium against a real
TensorBoard: the rows and numbers are the plugin's JSON ``top_ops``, a click on a column
head sorts by it, and each op links into the Profile plugin's Trace Viewer for its session.
At 1024 x 768 the whole table (every row shown) fits its card and no op type is broken
mid-word. Logdir: copies of two committed demo runs and, where ``../shared`` is present, a
real GPU trace (device ops with kernels)."""
from __future__ import annotations

import os
import re
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


def folded(rows):
    """The tab's op rows: a tf.data function's numbered instances of one op (``Sin_12``,
    ``Sin_13``) as one row ``Sin`` with their times summed, in the report's order."""
    out, by = [], {}
    for r in rows:
        m = re.match(r"^(.*?)_\d+$", r["name"]) if r["where"] == "input_pipeline" else None
        if not m:
            out.append(dict(r))
            continue
        key = (r.get("stage") or "", m.group(1), r["type"])
        if key not in by:
            by[key] = dict(r, name=m.group(1), self_ms_per_step=0.0, total_ms_per_step=0.0, pct=0.0,
                           count_per_step=0.0, instances=0)
            out.append(by[key])
        f = by[key]
        f["instances"] += 1
        if r["longest"]["duration_ms"] > f["longest"]["duration_ms"]:
            f["longest"] = r["longest"]
        for k in ("self_ms_per_step", "total_ms_per_step", "pct", "count_per_step"):
            f[k] += r[k]
    for f in by.values():
        for k, d in (("self_ms_per_step", 3), ("total_ms_per_step", 3), ("pct", 2), ("count_per_step", 1)):
            f[k] = float(js_fixed(f[k], d))
    return out


#: At the page's size: what of the op table is wider than the viewport or its card, and each
#: Type cell whose text is broken inside a word (its lines, where it has more than one line and a
#: line ends within a word), with the cell's computed overflow-wrap and word-break.
OPS_FIT = r"""() => { const t = document.querySelector('.tfb-ops-table'); const wrap = t.closest('.tfb-table-wrap');
    const over = [];
    if (t.getBoundingClientRect().right > window.innerWidth + 1) over.push('table past the viewport');
    if (wrap.scrollWidth > wrap.clientWidth + 1) over.push('table scrolls sideways in its card');
    const broken = [], styles = new Set();
    for (const td of t.querySelectorAll('tbody tr td:nth-child(2)')) {
      const cs = getComputedStyle(td);
      styles.add(JSON.stringify([cs.overflowWrap, cs.wordBreak]));
      const text = td.firstChild; if (!text) continue;
      const lines = []; let top = null;
      for (let i = 0; i < text.length; i++) {
        const r = document.createRange(); r.setStart(text, i); r.setEnd(text, i + 1);
        const y = Math.round(r.getBoundingClientRect().top);
        if (top === null || y > top + 2) { lines.push(''); top = y; }
        lines[lines.length - 1] += text.data[i];
      }
      for (let i = 0; i + 1 < lines.length; i++) {
        if (!/\s$/.test(lines[i]) && !/^\s/.test(lines[i + 1])) { broken.push(lines); break; }
      }
    }
    return { over, broken, styles: [...styles].map((x) => JSON.parse(x)) }; }"""


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
            want = sorted(folded(report["top_ops"]), key=lambda r: -r["self_ms_per_step"])
            # Ten rows first, as profilers' op tables start; "Show all" gives every one.
            assert shown_rows(tab) == [as_shown(r) for r in want[:10]]
            more = tab.fl.locator(".tfb-ops-more")
            if len(want) > 10:
                more.click()
                assert shown_rows(tab) == [as_shown(r) for r in want]
            else:
                assert not more.is_visible()
            if row["run"] == "cpu_bound_input":  # its Map function's Sin_12, Sin_13... fold into one Sin row
                sin = next(r for r in want if r["where"] == "input_pipeline" and r["name"] == "Sin")
                assert sin["instances"] > 1
                assert tab.fl.locator('.tfb-ops-table tr[data-op="Sin"]').get_attribute("data-instances") == \
                    str(sin["instances"])
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
            # Each op opens, in a new tab, the Trace Viewer zoomed on its longest run: its start in the
            # window moved onto the trace's time axis by the worst step's two positions.
            top_row = tab.fl.locator(".tfb-ops-table tbody tr").first
            link = top_row.locator("a.tfb-op-link")
            assert link.get_attribute("target") == "_blank"
            key = (top_row.get_attribute("data-where"), top_row.get_attribute("data-op"))
            first = next(r for r in folded(report["top_ops"]) if (r["where"], r["name"]) == key)
            q = parse_qs(urlsplit(link.get_attribute("href")).query)
            w = report.get("worst_step") or {}
            if "trace_start_ms" in w:
                start = first["longest"]["start_ms"] + w["trace_start_ms"] - w["start_ms"]
                assert float(q["view_start"][0]) <= start <= float(q["view_end"][0])
                assert f"run={report['trace_viewer']['run']}" in q["trace_data_url"][0].replace("%2F", "/")
            else:
                assert q["run"] == [report["trace_viewer"]["run"]] and q["tool"] == ["trace_viewer"]
            assert link.text_content() == first["name"]
            assert f"at {first['longest']['start_ms']:.3f} ms" in link.get_attribute("title")
            # Every row shown, at 1024 x 768: the table fits, and a type (_MklNativeFusedMatMul) stays whole.
            tab.page.set_viewport_size({"width": 1024, "height": 768})
            fit = tab.frame.evaluate(OPS_FIT)
            assert fit["over"] == [] and fit["broken"] == [], (row["run"], fit)
            assert all(wrap != "anywhere" and brk not in ("break-all", "break-word") for wrap, brk in fit["styles"]), \
                fit["styles"]
            tab.page.set_viewport_size({"width": 1440, "height": 1000})
            tab.shot(f"ops-{row['run']}")
        tab.close()
