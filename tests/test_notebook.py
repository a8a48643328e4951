"""The example notebook (examples/tfbneck_in_a_notebook.ipynb) run by a real Jupyter kernel
(nbclient + ipykernel), saved to HTML by nbconvert, and that HTML read in headless Chromium
with JavaScript disabled, as a reader of a shared notebook would see it.

Two test-only cells are appended to the committed notebook: one prints the DataFrame's
verdict columns as JSON, one displays a logdir whose run and tf.data stage are named with
HTML (tests/test_api.py: hostile_logdir). The saved HTML and screenshots go to
tests/_artifacts/.
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import ARTIFACTS, ROOT
from support.demo import HOSTILE_RUN, HOSTILE_STAGE, KIND_LABELS, expected, hostile_logdir
from tfbneck_plugin import schema

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[test]')")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[test]')")
pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install -e '.[test]')")

NOTEBOOK = os.path.join(ROOT, "examples", "tfbneck_in_a_notebook.ipynb")
ANALYSIS_CELL = 'import tfbneck_plugin as tfb\n\nr = tfb.analyze(logdir)\nr'
# What BottleneckProfiler(display=True) does: reserve an output on the training thread when
# a window closes, fill it from the background analysis thread.
WINDOW_CELL = """import threading
from tfbneck_plugin.capture.display import WindowDisplay, in_notebook
w = WindowDisplay("steps 6-10")
t = threading.Thread(target=lambda: print("shown", w.show(dict(r["slow_file_reads"]))))
t.start(); t.join()
print("in_notebook", in_notebook())"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook after a real kernel ran it from its own folder, as Jupyter would, and its
    nbconvert HTML (path)."""
    exp = expected()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code"), \
        "the committed example notebook must have its outputs stripped"
    hostile = hostile_logdir(tmp_path_factory.mktemp("hostile"))
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json\nprint(json.dumps(df[['run', 'bottleneck', 'cause', 'confidence']].to_dict(orient='records')))"))
    nb.cells.append(nbformat.v4.new_code_cell(f"tfb.analyze({hostile!r})"))
    nb.cells.append(nbformat.v4.new_code_cell(WINDOW_CELL))
    # Run from the notebook's own folder, as Jupyter does (it finds ../demo_logs; nothing is written there).
    client = nbclient.NotebookClient(nb, timeout=600, startup_timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}})
    client.execute()  # raises CellExecutionError, with the traceback, if any cell fails
    from nbconvert import HTMLExporter
    body, _ = HTMLExporter().from_notebook_node(nb)
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, "notebook.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(body)
    assert len(exp) >= 4
    return nb, path


def _cell(nb, source):
    """The one code cell whose source starts with ``source``."""
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.strip().startswith(source)]
    return cell


def _result(cell, mime):
    (out,) = [o for o in cell.outputs if o.output_type == "execute_result"]
    return out["data"][mime]


def test_notebook_shows_each_verdict_and_a_chart(executed):
    nb, _ = executed
    cell = _cell(nb, ANALYSIS_CELL)
    page = _result(cell, "text/html")
    text = _result(cell, "text/plain")
    for run, want in expected().items():
        assert f'<tr data-run="{run}" data-bottleneck="{want["bottleneck"]}">' in page
        assert f'data-bottleneck="{want["bottleneck"]}" data-cause="{want["cause"]}"' in page
        label = schema.BOTTLENECK_LABELS[want["bottleneck"]]
        assert f"{run}/" in text and f": {label} ({want['cause']}, confidence" in text
    assert page.count('<svg class="tfb-chart tfb-steps-chart"') == len(expected())
    assert "<script" not in page.lower()
    one = _result(_cell(nb, 's = r["cpu_bound_input"]'), "text/html")
    assert 'data-bottleneck="cpu" data-cause="input_preprocessing"' in one and "<svg" in one


def test_dataframe_has_one_row_per_session(executed):
    nb, _ = executed
    (printed,) = [o for o in _cell(nb, "import json").outputs if o.output_type == "stream" and o.name == "stdout"]
    rows = json.loads(printed.text)
    exp = expected()
    assert sorted(r["run"] for r in rows) == sorted(exp)
    for r in rows:
        assert (r["bottleneck"], r["cause"]) == (exp[r["run"]]["bottleneck"], exp[r["run"]]["cause"])
        assert 0 < r["confidence"] <= 1
    table = _result(_cell(nb, "df = r.to_dataframe()"), "text/html")  # the notebook's own cell, as pandas shows it
    assert table.split("<tbody>")[1].count("<tr>") == len(exp) and all(f"<td>{run}</td>" in table for run in exp)


def test_window_report_fills_its_reserved_output_from_another_thread(executed):
    nb, _ = executed
    cell = _cell(nb, "import threading")
    shown = [o for o in cell.outputs if o.output_type == "display_data"]
    assert len(shown) == 1, cell.outputs  # the placeholder, updated in place (not a second output)
    page = shown[0]["data"]["text/html"]
    assert 'data-bottleneck="io" data-cause="file_read"' in page and "analysing" not in page
    assert "slow_file_reads/" in shown[0]["data"]["text/plain"]
    printed = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
    assert "shown True" in printed and "in_notebook True" in printed


@pytest.mark.browser
def test_saved_html_reads_without_javascript(executed):
    _, path = executed
    from support.plugin_helpers import CHROMIUM_ARGS, chromium_path, screenshot
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")
    exe = chromium_path()
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; tests/run.sh does it)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 900}).new_page()
            page.goto("file://" + path, wait_until="domcontentloaded")
            _check_verdicts_and_charts(page)
            _check_hostile_names_are_text(page)
            screenshot(page, "notebook_html_no_js", full_page=True)
            # With JavaScript on, the names still do not run.
            page = browser.new_context(java_script_enabled=True).new_page()
            page.goto("file://" + path, wait_until="domcontentloaded")
            page.wait_for_timeout(500)
            assert page.evaluate("typeof window.__tfb_xss") == "undefined"
            assert page.get_by_text(HOSTILE_STAGE).first.is_visible()
        finally:
            browser.close()


def _check_verdicts_and_charts(page):
    # Past six sessions each one's section starts closed: open them as a reader would (a
    # <details> toggles without JavaScript).
    closed = page.locator("details:not([open]) > summary")
    for k in range(closed.count()):
        closed.first.click()
    for run, want in expected().items():
        row = page.locator(f'.tfbneck-report tr[data-run="{run}"]')
        assert row.is_visible(), run
        assert KIND_LABELS[want["bottleneck"]] in row.inner_text() and want["cause"] in row.inner_text()
        card = page.locator(f'section.tfb-verdict[data-bottleneck="{want["bottleneck"]}"][data-cause="{want["cause"]}"]')
        assert card.first.is_visible(), run
    charts = page.locator("svg.tfb-steps-chart")
    assert charts.count() >= len(expected())
    for i in range(charts.count()):
        box = charts.nth(i).bounding_box()
        assert box and box["width"] > 300 and box["height"] > 100, box
        # Five profiled steps per demo run, each a visible stack of coloured rectangles.
        assert charts.nth(i).locator("g.tfb-step").count() >= 1
    first = charts.first.locator("g.tfb-step rect").first.bounding_box()
    assert first and first["width"] > 5 and first["height"] > 0


def _check_hostile_names_are_text(page):
    stage = page.get_by_text(HOSTILE_STAGE)
    assert stage.count() >= 2 and stage.first.is_visible()  # stage table (and evidence): shown, not parsed
    assert page.get_by_text(HOSTILE_RUN).first.is_visible()
    assert page.locator(".tfbneck-report script").count() == 0
    assert page.locator(".tfbneck-report img").count() == 0


def test_notebook_display_shows_the_top_ops_of_the_json(executed):
    """Issue 27, acceptance 4: the session display in the executed notebook holds the top-ops
    table with the numbers of the JSON report (the same committed trace, analysed here)."""
    from test_ops import _OpsTable, analyze as analyze_json
    from tfbneck_plugin.notebook.ops import MAX_OPS
    nb, _ = executed
    page = _result(_cell(nb, 's = r["cpu_bound_input"]'), "text/html")
    (report,) = analyze_json(os.path.join(ROOT, "demo_logs", "cpu_bound_input"))
    parser = _OpsTable()
    parser.feed(page)
    want = report["top_ops"][:MAX_OPS]
    assert [(w, op) for w, op, _ in parser.rows] == [(r["where"], r["name"]) for r in want]
    for (_, _, cells), r in zip(parser.rows, want):
        assert [float(c) for c in cells[3:6]] == [r["self_ms_per_step"], r["pct"], r["count_per_step"]]
