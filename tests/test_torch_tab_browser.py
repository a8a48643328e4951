"""A PyTorch session beside a TensorFlow one in the tab, in headless Chromium against a real
TensorBoard: both are listed with their verdicts, the PyTorch one shows the same verdict card,
and its trace link is "Open in Perfetto UI" (XProf's Trace Viewer reads only XSpace) where the
TensorFlow one keeps "Open in Trace Viewer"; its top ops carry no XProf links.

The Perfetto UI (https://ui.perfetto.dev) cannot be reached from the test machine: the test
stands a page in for it at that address (Playwright's routing) that answers "PING" with "PONG"
as the UI does (https://perfetto.dev/docs/visualization/deep-linking-to-perfetto-ui) and keeps
what it is posted, and checks that it gets the session's trace, byte for byte as the plugin's
``/kineto_trace`` route serves it. Whether the real UI then draws it is not checked here.

Logdir: a copy of the demo run ``cpu_bound_input`` (TensorFlow) and the real PyTorch trace
``ns_resolution_rank0`` of ../shared/realtraces-torch. The screenshot goes to tests/_artifacts, and
to docs/images/pytorch-tab.png with ``TFBNECK_WRITE_DOCS_IMAGES=1``."""
from __future__ import annotations

import gzip
import json
import os
import shutil
from urllib.parse import parse_qs, quote

import pytest

from conftest import DEMO_LOGS, ROOT, SHARED, need_shared
from support.browser_tab import KIND_LABELS, Tab
from support.plugin_helpers import TensorBoard, chromium_context, screenshot
from test_plugin_browser import api_report, api_sessions, check_verdict

pytestmark = pytest.mark.browser

TORCH_TRACE = os.path.join(SHARED, "realtraces-torch", "ns_resolution_rank0")
IMAGE = os.path.join(ROOT, "docs", "images", "pytorch-tab.png")

#: The stand-in for the Perfetto UI: PONG to a PING from its opener, and keep a posted trace.
FAKE_PERFETTO = """<!doctype html><title>Perfetto UI (stand-in)</title><body>stand-in<script>
window.received = null;
window.addEventListener('message', (e) => {
  if (e.source !== window.opener) return;
  if (e.data === 'PING') { e.source.postMessage('PONG', '*'); return; }
  if (e.data && e.data.perfetto) {
    const p = e.data.perfetto, bytes = new Uint8Array(p.buffer);
    let sum = 0; for (let i = 0; i < bytes.length; i++) sum = (sum * 31 + bytes[i]) >>> 0;
    window.received = { title: p.title, fileName: p.fileName, length: bytes.length, sum,
                        head: new TextDecoder().decode(bytes.slice(0, 200)) };
  }
});
</script></body>"""


def _sum(data: bytes) -> int:
    s = 0
    for b in data:
        s = (s * 31 + b) & 0xFFFFFFFF
    return s


def test_pytorch_session_beside_tensorflow_with_perfetto_link(tmp_path):
    src = need_shared(TORCH_TRACE, "../shared/realtraces-torch (real PyTorch traces)")
    logdir = tmp_path / "logs"
    shutil.copytree(os.path.join(DEMO_LOGS, "cpu_bound_input"), logdir / "tf_cpu_bound_input")
    shutil.copytree(src, logdir / "pytorch_resnet")
    [trace_file] = os.listdir(logdir / "pytorch_resnet")
    with chromium_context() as ctx, TensorBoard(str(logdir)) as tb:
        rows = {r["run"]: r for r in api_sessions(tb)}
        assert set(rows) == {"tf_cpu_bound_input", "pytorch_resnet"}, sorted(rows)
        reports = {run: api_report(tb, run, r["session"]) for run, r in rows.items()}
        assert reports["pytorch_resnet"]["framework"] == "pytorch"
        assert reports["tf_cpu_bound_input"]["framework"] == "tensorflow"
        torch_r, tf_r = reports["pytorch_resnet"], reports["tf_cpu_bound_input"]

        # The route serves the trace's JSON, decompressed.
        host = torch_r["trace_viewer"]["host"]
        q = f"run={quote(torch_r['run'], safe='')}&session={quote(torch_r['session'], safe='')}&host={quote(host)}"
        status, _headers, body = tb.get("kineto_trace?" + q)
        assert status == 200
        want = gzip.decompress(open(logdir / "pytorch_resnet" / trace_file, "rb").read())
        assert body == want and json.loads(body)["traceEvents"]
        # an XSpace session is refused with a reason, an unknown host is not found
        status, _h, body = tb.get(f"kineto_trace?run=tf_cpu_bound_input&session="
                                  f"{quote(tf_r['session'], safe='')}")
        assert status == 400 and "Trace Viewer" in json.loads(body)["error"]
        assert tb.get("kineto_trace?" + q.replace(quote(host), "nohost"))[0] == 404

        ctx.route("https://ui.perfetto.dev/**",
                  lambda route: route.fulfill(status=200, content_type="text/html", body=FAKE_PERFETTO))
        tab = Tab(ctx, tb, "pytorch")
        # Both sessions listed, each with its verdict's chip.
        tab.frame.wait_for_function("() => document.querySelectorAll('.tfb-item .tfb-chip:not(.tfb-chip-busy)')"
                                    ".length === 2", timeout=120_000)
        chips = tab.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-item')).map(li => "
                                   "[li.dataset.run, li.querySelector('.tfb-chip').textContent])")
        assert sorted(chips) == sorted([[run, KIND_LABELS[r["bottleneck"]]] for run, r in reports.items()])
        # each says what ran it, and its name wraps at its underscores, not mid-word
        made_by = tab.frame.evaluate("() => Object.fromEntries(Array.from(document.querySelectorAll('.tfb-item'))"
                                     ".map(li => [li.dataset.run, [li.querySelector('.tfb-item-framework')"
                                     ".textContent, li.querySelectorAll('.tfb-item-run wbr').length]]))")
        assert made_by == {"tf_cpu_bound_input": ["TensorFlow", 3], "pytorch_resnet": ["PyTorch", 1]}, made_by

        # The TensorFlow session: XProf's Trace Viewer.
        tab.select(tf_r["run"], tf_r["session"])
        check_verdict(tab, tf_r)
        assert tab.fl.locator(".tfb-verdict .tfb-framework").inner_text() == "TensorFlow"
        assert tab.fl.locator(".tfb-fix-first.tfb-fix-optional").count() == 0  # input-bound: a fix, in colour
        assert tab.fl.locator('a[data-kind="session"]').inner_text() == "Open in Trace Viewer"
        assert tab.fl.locator('a[data-kind="perfetto"]').count() == 0

        # The PyTorch session: the same card, and the Perfetto UI instead.
        tab.select(torch_r["run"], torch_r["session"])
        check_verdict(tab, torch_r)
        assert tab.fl.locator(".tfb-verdict .tfb-framework").inner_text() == "PyTorch"
        assert torch_r["bottleneck"] == "device"  # the healthy state: its first change shown as an option
        assert tab.fl.locator(".tfb-fix-first.tfb-fix-optional").count() == 1
        link = tab.fl.locator('a[data-kind="perfetto"]')
        assert link.inner_text() == "Open in Perfetto UI"
        assert tab.fl.locator('a[data-kind="session"], a[data-kind="worst"]').count() == 0
        # its ops are listed without links into XProf, which cannot open the trace
        assert tab.fl.locator(".tfb-ops-table tbody tr").count() > 0
        assert tab.fl.locator(".tfb-ops-table a.tfb-op-link").count() == 0
        route, _, query = link.get_attribute("data-trace").partition("?")
        assert route == "kineto_trace" and parse_qs(query) == parse_qs(q)
        tab.shot("pytorch-session")  # the whole tab, in tests/_artifacts/screenshots
        shot = screenshot(tab.page, "pytorch-tab")  # the first screen: the docs' image, rewritten on purpose only
        if os.environ.get("TFBNECK_WRITE_DOCS_IMAGES") == "1":
            shutil.copyfile(shot, IMAGE)

        with tab.page.expect_popup() as popup_info:
            link.click()
        popup = popup_info.value
        popup.wait_for_function("() => window.received !== null", timeout=30_000)
        got = popup.evaluate("() => window.received")
        assert popup.url.startswith("https://ui.perfetto.dev/")
        assert got["length"] == len(want) and got["sum"] == _sum(want), {k: got[k] for k in ("length", "sum")}
        assert got["title"] == f"{torch_r['run']}/{torch_r['session']} ({host})"
        assert got["fileName"] == f"{host}.pt.trace.json"
        tab.frame.wait_for_function("() => document.querySelector('.tfb-perfetto-status').textContent"
                                    ".startsWith('Trace sent')", timeout=10_000)
        popup.close()
        tab.close()
