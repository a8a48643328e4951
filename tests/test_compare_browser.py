"""The tab's compare view and ``tfbneck compare`` agree (issue 25, acceptance 4): for every
before/after pair of the demo runs (``demo_logs/PAIRS.json``, and each pair swapped), the
view opened from a shared URL shows the CLI's verdict, change, p-value or what is missing,
and its title line is the CLI's; choosing a pair in the view writes the URL that reopens
it. At 1024 x 768 with two unrelated runs chosen, nothing in the view is wider than the page
(a tf.data stage path in a side's evidence wraps), each picker's title is its whole chosen
label, and the comparison's ``caveat`` is shown under its title line when there is one. A
real ``tensorboard`` process and headless Chromium (tests/support/browser_tab.py)."""
from __future__ import annotations

import json
import shutil
import subprocess
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest
from conftest import tfbneck_cmd

from support.browser_tab import Tab
from support.plugin_helpers import DEMO_LOGS, TensorBoard, chromium_context, screenshot
from tfbneck_plugin.logdir import find_sessions

pytestmark = pytest.mark.browser
PAIRS = DEMO_LOGS / "PAIRS.json"


@pytest.fixture(scope="module")
def ctx():
    with chromium_context() as context:
        yield context


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One TensorBoard on a copy of demo_logs/ for the module: (logdir, {run: session}, tb)."""
    work = tmp_path_factory.mktemp("compare") / "work"
    shutil.copytree(DEMO_LOGS, work / "demo_logs")  # the Profile plugin writes caches into what it opens
    logdir = work / "demo_logs"
    sessions = {s.run: s.name for s in find_sessions(str(logdir)).sessions}
    with TensorBoard("demo_logs", cwd=str(work)) as tb:
        yield logdir, sessions, tb


def _key(sessions, run):
    return json.dumps([run, sessions[run]], separators=(",", ":"))


def _cli(before, after):
    r = subprocess.run(tfbneck_cmd() + ["compare", str(before), str(after), "--format", "json"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    table = subprocess.run(tfbneck_cmd() + ["compare", str(before), str(after)], capture_output=True, text=True,
                           timeout=300).stdout
    (c,) = json.loads(r.stdout)["comparisons"]
    title = next(line for line in table.splitlines() if line.startswith(f"{c['baseline']['run']}"))
    return c, title


def _shown(tab):
    tab.fl.locator(".tfb-compare-test[data-verdict]").first.wait_for(timeout=120_000)
    card = tab.fl.locator(".tfb-compare-test")
    return {"verdict": card.get_attribute("data-verdict"), "change_pct": float(card.get_attribute("data-change-pct")),
            "p_value": float(card.get_attribute("data-p-value")), "level": card.get_attribute("data-level"),
            "title": tab.fl.locator(".tfb-compare-headline").inner_text(),
            "missing": (tab.fl.locator(".tfb-compare-missing").all_inner_texts() or [None])[0],
            "caveat": (tab.fl.locator(".tfb-compare-caveat").all_inner_texts() or [None])[0]}


def _caveat_under_title(tab):
    """The caveat line's text, None when there is none; asserted to be the line after the title."""
    return tab.frame.evaluate("""() => { const c = document.querySelector('.tfb-compare-caveat'); if (!c) return null;
        const prev = c.previousElementSibling;
        if (!prev || !prev.classList.contains('tfb-compare-headline')) return 'not under the title: ' + c.textContent;
        const r = c.getBoundingClientRect();
        if (!(r.width > 0 && r.height > 0)) return 'hidden: ' + c.textContent;
        return c.textContent; }""")


#: What ``.tfb-main`` holds wider than the viewport (each element's tag and class) and its own overflow.
OVER_PAGE = """() => { const main = document.querySelector('.tfb-main');
    const over = Array.from(main.querySelectorAll('*')).filter((el) => { const r = el.getBoundingClientRect();
      return r.width && r.right > window.innerWidth + 1; }).map((el) => el.tagName + '.' + el.className);
    for (const n of [main, ...main.querySelectorAll('.tfb-table-wrap')])
      if (n.scrollWidth > n.clientWidth + 1) over.push('scrolls sideways: ' + n.className);
    return over; }"""


def test_compare_view_is_the_cli_on_every_demo_pair(ctx, served):
    if not PAIRS.exists():
        pytest.skip("demo_logs/ has no before/after pairs (python demo_logs/make_demo_logs.py)")
    logdir, sessions, tb = served
    pairs = [(p["before"], p["after"]) for p in json.loads(PAIRS.read_text()).values()]
    pairs += [(b, a) for a, b in pairs]
    for before, after in pairs:
        keys = [_key(sessions, run) for run in (before, after)]
        state = quote(json.dumps(keys, separators=(",", ":")), safe="")
        tab = Tab(ctx, tb, "compare", query=f"?tfbneck_compare={state}")
        shown = _shown(tab)
        c, title = _cli(logdir / before, logdir / after)
        assert shown["title"] == title, (before, after)
        assert (shown["verdict"], shown["change_pct"], shown["p_value"], shown["level"]) == \
            (c["verdict"], c["change_pct"], c["p_value"], c["evidence"]["level"]), (before, after)
        assert shown["missing"] == (f"Inconclusive: {c['evidence']['missing']}" if c["evidence"]["missing"]
                                    else None)
        assert shown["caveat"] == (f"Caution: {c['caveat']}" if c.get("caveat") else None), (before, after)
        tone = {"faster": "better", "slower": "worse", "no_change": "same", "inconclusive": "unsure"}[c["verdict"]]
        assert tone in tab.fl.locator(".tfb-compare-test").get_attribute("class")
        for p in c["predictions"]:
            li = tab.fl.locator(f'.tfb-compare-predictions li[data-fix="{p["fix"]}"]')
            assert li.get_attribute("data-credited") == ("true" if p["credited"] else "false")
        tab.shot(f"compare-{before}-{after}")
        tab.close()
    # Chosen in the view, the pair goes into the page's URL, which reopens it.
    tab = Tab(ctx, tb, "compare")
    tab.fl.locator("button.tfb-tab[data-mode=compare]").click()
    before, after = pairs[0]
    keys = [_key(sessions, run) for run in (before, after)]
    tab.fl.locator("select.tfb-select[data-side=after]").select_option(keys[1])
    tab.fl.locator("select.tfb-select[data-side=before]").select_option(keys[0])
    _shown(tab)
    state = parse_qs(urlsplit(tab.page.url).query).get("tfbneck_compare")
    assert state and json.loads(state[0]) == keys, tab.page.url
    again = Tab(ctx, tb, "compare-shared", query="?" + urlsplit(tab.page.url).query)
    assert _shown(again)["title"] == _shown(tab)["title"]
    tab.close()
    again.close()


def test_an_unrelated_pair_fits_1024_and_says_its_caveat(ctx, served):
    """pair_eager -> slow_file_reads: two programs, not one change. The After side's evidence
    names the blocking stage by its whole iterator path, one token wider than the column."""
    _, sessions, tb = served
    before, after = "pair_eager", "slow_file_reads"
    if not {before, after} <= set(sessions):
        pytest.skip("demo_logs/ lacks pair_eager or slow_file_reads (python demo_logs/make_demo_logs.py)")
    keys = [_key(sessions, run) for run in (before, after)]
    tab = Tab(ctx, tb, "compare-1024", query="?tfbneck_view=compare")
    tab.page.set_viewport_size({"width": 1024, "height": 768})
    tab.fl.locator("select.tfb-select[data-side=before]").select_option(keys[0])
    tab.fl.locator("select.tfb-select[data-side=after]").select_option(keys[1])
    _shown(tab)
    tab.frame.wait_for_function("() => Array.from(document.querySelectorAll('canvas'))"
                                ".every(c => c.dataset.chart === 'ready')", timeout=10_000)
    assert "::" in tab.fl.locator(".tfb-compare-col[data-side=after] .tfb-evidence").inner_text()
    assert tab.frame.evaluate(OVER_PAGE) == []
    # Each picker's title is its chosen option's whole label (the select may be too narrow to show it).
    pickers = tab.frame.evaluate("() => Array.from(document.querySelectorAll('select.tfb-select[data-side]')).map("
                                 "(s) => [s.dataset.side, s.value, s.title, s.options[s.selectedIndex].text])")
    assert [(side, value) for side, value, _, _ in pickers] == [("before", keys[0]), ("after", keys[1])]
    for side, _, title, label in pickers:
        run = before if side == "before" else after
        assert title == label and label.startswith(f"{run} / {sessions[run]}"), (side, title, label)
    # The comparison's caveat, when the server's comparison has one, is the line under its title.
    q = urlencode({"before_run": before, "before_session": sessions[before], "after_run": after,
                   "after_session": sessions[after]})
    status, _, body = tb.get(f"compare?{q}")
    assert status == 200, body
    caveat = json.loads(body)["comparison"].get("caveat")
    assert _caveat_under_title(tab) == (f"Caution: {caveat}" if caveat else None)
    screenshot(tab.page, "compare-unrelated-1024")
    tab.close()
    # A caveat as long as the server writes them, put into the server's answer: shown under the title,
    # as a note, and wrapped inside the page.
    said = ("the two runs share 12 % of their op names: they likely train different models or data, so the "
            "change measured is between two programs, not the effect of one change")

    def with_caveat(route):
        answer = route.fetch()
        data = answer.json()
        if answer.status == 200 and data.get("comparison"):  # a 202 (still analysing) goes through as it is
            data["comparison"]["caveat"] = said
        route.fulfill(response=answer, json=data)

    ctx.route("**/data/plugin/bottleneck/compare?*", with_caveat)
    try:
        state = quote(json.dumps(keys, separators=(",", ":")), safe="")
        tab = Tab(ctx, tb, "compare-caveat", query=f"?tfbneck_compare={state}")
        tab.page.set_viewport_size({"width": 1024, "height": 768})
        _shown(tab)
        assert _caveat_under_title(tab) == f"Caution: {said}"
        assert "tfb-note" in tab.fl.locator(".tfb-compare-caveat").get_attribute("class")
        assert tab.frame.evaluate(OVER_PAGE) == []
        screenshot(tab.page, "compare-caveat-1024")
        tab.close()
    finally:
        ctx.unroute("**/data/plugin/bottleneck/compare?*", with_caveat)
