"""One answer, told the same way in every view: each demo session rendered by the CLI (table
and JSON, real ``tfbneck`` processes), the notebook (``tfb.analyze(...)``'s HTML) and the
Bottleneck tab (a real ``tensorboard`` and headless Chromium) names the same first fix with
the same worth string, the same verdict label and the same category names, all read from the
report (``bottleneck_label``, ``category_labels``, ``recommendations[i].worth``).

The tab also leads with the action: at 1024 x 768 and 1400 x 1000 the first fix and its
worth are inside the viewport without scrolling, nothing is wider than the page, a reload
keeps the selected session, Back and Forward step through the sessions chosen, every Trace
Viewer link opens a new tab (followed in the same tab, Back returns to the session), and the
compare view opened with no choice draws no verdict on two unrelated runs. Screenshots:
``tests/_artifacts/screenshots/one-answer-*``.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pytest

import tfbneck_plugin as tfb
from conftest import tfbneck_cmd
from support.browser_tab import Tab
from support.plugin_helpers import DEMO_LOGS, TensorBoard, chromium_context, screenshot

pytestmark = pytest.mark.browser

SIZES = [(1024, 768), (1400, 1000)]


def plain(text: str) -> str:
    """Text as the tab and the notebook show it: backticked parts become code, the ticks go."""
    return str(text).replace("`", "")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    work = tmp_path_factory.mktemp("one-answer")
    shutil.copytree(DEMO_LOGS, work / "demo_logs")  # the Profile plugin writes caches into what it opens
    return work


@pytest.fixture(scope="module")
def cli_json(demo):
    out = subprocess.run(tfbneck_cmd() + ["analyze", "demo_logs", "--format", "json", "--no-cache"], cwd=demo,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return {s["run"]: s for s in json.loads(out.stdout)["sessions"]}


@pytest.fixture(scope="module")
def cli_table(demo):
    out = subprocess.run(tfbneck_cmd() + ["analyze", "demo_logs", "--no-cache"], cwd=demo, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cli_and_notebook_say_what_the_report_says(demo, cli_json, cli_table):
    notebook = tfb.analyze(str(demo / "demo_logs"))
    page = notebook._repr_html_()
    frame = notebook.to_dataframe().set_index("run")
    assert cli_json, "demo_logs gave no session"
    for run, s in cli_json.items():
        assert s["status"] == "ok", s.get("error")
        label = s["bottleneck_label"]
        assert label == {"cpu": "CPU-bound", "device": "Device-bound", "io": "I/O-bound",
                         "network": "Network-bound", "unknown": "No verdict"}[s["bottleneck"]]
        fix = s["recommendations"][0]
        worth = fix["worth"]
        # The CLI's table: the verdict's label, then the fix with the report's worth string and its code name.
        assert f"{run}/{s['session']}: {label} ({s['cause']}, confidence {s['confidence']})" in cli_table
        assert f"  fix first: {fix['title']}" + (f" — {worth}" if worth else "") + f" [{fix['fix']}]" in cli_table
        shares = [f"{s['category_labels'][c]} {v:.1f}%" for c, v in
                  sorted(s["breakdown_pct"].items(), key=lambda kv: -kv[1]) if v >= 0.05]
        assert f"  where the time goes: {', '.join(shares)}" in cli_table
        # The notebook: the same session, the same words.
        nb = notebook[run]
        assert nb["recommendations"][0]["worth"] == worth and nb["bottleneck_label"] == label
        assert nb["category_labels"] == s["category_labels"]
        html_text = html.unescape(re.sub(r"<[^>]+>", "", nb._repr_html_()))
        assert f"Fix first{plain(fix['title'])} {fix['fix']}{worth}" in html_text
        assert label in html_text
        for c, v in s["breakdown_pct"].items():
            if v > 0:
                assert s["category_labels"][c] in html_text, (run, c)
        assert frame.loc[run, "fix_first"] == fix["fix"] and frame.loc[run, "fix_worth"] == worth and worth
        assert label in page


def tab_says(tab: Tab) -> dict:
    return tab.frame.evaluate("""() => {
      const q = (sel) => document.querySelector(sel);
      const main = q('.tfb-main');
      main.scrollTop = 0;
      const card = q('.tfb-verdict');
      const fix = card.querySelector('.tfb-fix-first');
      const worth = fix && fix.querySelector('.tfb-fix-worth');
      const title = fix && fix.querySelector('.tfb-fix-title');
      const below = (el) => el ? el.getBoundingClientRect().bottom : null;
      const over = [];
      for (const el of main.querySelectorAll('*')) {
        const r = el.getBoundingClientRect();
        if (r.width && r.right > window.innerWidth + 1) over.push(el.tagName + '.' + el.className);
      }
      for (const el of main.querySelectorAll('.tfb-table-wrap')) {
        if (el.scrollWidth > el.clientWidth + 1) over.push('scrolls: ' + (el.closest('section') || {}).className);
      }
      return {
        kind: card.querySelector('.tfb-kind').textContent,
        title: title && title.textContent, worth: worth ? worth.textContent : '',
        code: fix && fix.querySelector('.tfb-fix-code').textContent,
        fixBottom: below(worth || title), viewport: window.innerHeight,
        legend: Array.from(document.querySelectorAll('.tfb-breakdown .tfb-legend-label')).map((e) => e.textContent),
        legendCats: Array.from(document.querySelectorAll('.tfb-breakdown .tfb-legend li')).map((e) => e.dataset.category),
        order: Array.from(document.querySelectorAll('.tfb-session > section')).map((e) => e.className),
        links: Array.from(document.querySelectorAll('a.tfb-trace-link, a.tfb-op-link')).map((a) => a.target),
        over,
      };
    }""")


def test_the_tab_leads_with_the_same_fix_at_both_sizes(demo, cli_json):
    with TensorBoard("demo_logs", cwd=str(demo)) as tb, chromium_context(viewport=SIZES[0]) as ctx:
        tab = Tab(ctx, tb, "one-answer")
        rows = tab.listed()
        assert {r[0] for r in rows} == set(cli_json)
        for width, height in SIZES:
            tab.page.set_viewport_size({"width": width, "height": height})
            for run, session, _ in rows:
                s = cli_json[run]
                tab.select(run, session)
                said = tab_says(tab)
                fix = s["recommendations"][0]
                where = f"{run} at {width}x{height}"
                assert said["kind"] == s["bottleneck_label"], where
                assert (said["title"], said["worth"], said["code"]) == (plain(fix["title"]), fix["worth"], fix["fix"]), where
                assert said["fixBottom"] <= said["viewport"], f"{where}: the first fix is below the fold"
                assert said["legend"] == [s["category_labels"][c] for c in said["legendCats"]], where
                assert said["over"] == [], f"{where}: wider than the page: {said['over'][:5]}"
                assert said["links"] and set(said["links"]) == {"_blank"}, where
                # Verdict -> what to change -> where the time goes -> tf.data -> system -> operations.
                kinds = [re.sub(r"^tfb-card (tfb-verdict )?", "", c).split()[0] for c in said["order"]]
                assert kinds == ["kind-" + s["bottleneck"], "tfb-recs", "tfb-breakdown", "tfb-stages", "tfb-system",
                                 "tfb-ops"], where
                if run in ("cpu_bound_input", "compute_bound", "slow_file_reads"):
                    screenshot(tab.page, f"one-answer-{run}-{width}")
        # A reload keeps the selected session (it is in TensorBoard's URL).
        run, session, _ = rows[-1]
        tab.select(run, session)
        tab.page.reload()
        tab.reattach()
        tab.wait_shown(run, session)
        # Back and Forward step through the sessions chosen: each choice is a history entry.
        (run_a, session_a, _), (run_b, session_b, _) = rows[0], rows[1]
        tab.select(run_a, session_a)
        tab.select(run_b, session_b)
        for step, (run_c, session_c) in ((tab.page.go_back, (run_a, session_a)),
                                         (tab.page.go_forward, (run_b, session_b))):
            step()
            tab.reattach()
            tab.wait_shown(run_c, session_c)
        # A Trace Viewer link opens in a new tab; followed in the same tab (a browser set to
        # open links there), Back returns to the Bottleneck tab, on the session the page was last
        # loaded with (the reload's): the sessions chosen since are not restored.
        href = tab.frame.evaluate("() => document.querySelector('a.tfb-trace-link').href")
        assert "tool=trace_viewer" in href and href.endswith("#profile"), href
        tab.page.goto(href)
        assert tab.page.url == href, tab.page.url  # the Profile tab, in the same browser tab
        tab.page.go_back()
        tab.reattach()
        tab.wait_shown(run, session)
        # Compare with no choice: the demo's runs have one session each, so nothing is picked and no verdict drawn.
        tab.fl.locator(".tfb-tab[data-mode=compare]").click()
        tab.fl.locator(".tfb-compare-prompt").wait_for(timeout=30_000)
        assert tab.fl.locator(".tfb-compare-test").count() == 0
        assert tab_over_page(tab) == []
        screenshot(tab.page, "one-answer-compare-prompt")
        tab.close()


def tab_over_page(tab: Tab) -> list:
    return tab.frame.evaluate("""() => Array.from(document.querySelectorAll('.tfb-main *'))
        .filter((el) => { const r = el.getBoundingClientRect(); return r.width && r.right > window.innerWidth + 1; })
        .map((el) => el.tagName + '.' + el.className)""")
