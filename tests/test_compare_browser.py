"""The tab's compare view and ``tfbneck compare`` agree (issue 25, acceptance 4): for every
before/after pair of the demo runs (``demo_logs/PAIRS.json``, and each pair swapped), the
view opened from a shared URL shows the CLI's verdict, change, p-value or what is missing,
and its title line is the CLI's; choosing a pair in the view writes the URL that reopens
it. A real ``tensorboard`` process and headless Chromium (tests/support/browser_tab.py)."""
from __future__ import annotations

import json
import shutil
import subprocess
from urllib.parse import quote, urlsplit, parse_qs

import pytest
from conftest import tfbneck_cmd

from support.browser_tab import Tab
from support.plugin_helpers import DEMO_LOGS, TensorBoard, chromium_context
from tfbneck_plugin.logdir import find_sessions

pytestmark = pytest.mark.browser
PAIRS = DEMO_LOGS / "PAIRS.json"


@pytest.fixture(scope="module")
def ctx():
    with chromium_context() as context:
        yield context


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
            "missing": (tab.fl.locator(".tfb-compare-missing").all_inner_texts() or [None])[0]}


def test_compare_view_is_the_cli_on_every_demo_pair(ctx, tmp_path):
    if not PAIRS.exists():
        pytest.skip("demo_logs/ has no before/after pairs (python demo_logs/make_demo_logs.py)")
    work = tmp_path / "work"
    shutil.copytree(DEMO_LOGS, work / "demo_logs")
    logdir = work / "demo_logs"
    sessions = {s.run: s.name for s in find_sessions(str(logdir)).sessions}
    pairs = [(p["before"], p["after"]) for p in json.loads(PAIRS.read_text()).values()]
    pairs += [(b, a) for a, b in pairs]
    with TensorBoard("demo_logs", cwd=str(work)) as tb:
        for before, after in pairs:
            keys = [json.dumps([run, sessions[run]], separators=(",", ":")) for run in (before, after)]
            state = quote(json.dumps(keys, separators=(",", ":")), safe="")
            tab = Tab(ctx, tb, "compare", query=f"?tfbneck_compare={state}")
            shown = _shown(tab)
            c, title = _cli(logdir / before, logdir / after)
            assert shown["title"] == title, (before, after)
            assert (shown["verdict"], shown["change_pct"], shown["p_value"], shown["level"]) == \
                (c["verdict"], c["change_pct"], c["p_value"], c["evidence"]["level"]), (before, after)
            assert shown["missing"] == (f"Inconclusive: {c['evidence']['missing']}" if c["evidence"]["missing"]
                                        else None)
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
        keys = [json.dumps([run, sessions[run]], separators=(",", ":")) for run in (before, after)]
        tab.fl.locator("select.tfb-select[data-side=after]").select_option(keys[1])
        tab.fl.locator("select.tfb-select[data-side=before]").select_option(keys[0])
        _shown(tab)
        state = parse_qs(urlsplit(tab.page.url).query).get("tfbneck_compare")
        assert state and json.loads(state[0]) == keys, tab.page.url
        again = Tab(ctx, tb, "compare-shared", query="?" + urlsplit(tab.page.url).query)
        assert _shown(again)["title"] == _shown(tab)["title"]
        tab.close()
        again.close()
