"""The tab's "Step-time trend" view, checked in headless Chromium against a real TensorBoard
and against the job that wrote the logdir (used by tests/test_slowdown.py).

What is checked: the view shows the run's step-time line (a canvas whose points are the
trend file's) with both windows marked (the canvas holds the scheduled window's blue and
the triggered window's red, and says how many windows it drew), one table row per window
with its kind, steps, why it opened, its verdict and what changed, as the job recorded
them; "Open" shows that window's session. A screenshot goes to
``tests/_artifacts/screenshots/trend-slowdown.png``.
"""
from __future__ import annotations

import json

from support.plugin_helpers import TensorBoard, chromium_context
from support.browser_tab import KIND_LABELS, Tab

WINDOW_RGB = {"scheduled": (26, 115, 232), "triggered": (217, 48, 37)}


def canvas_color_pixels(frame, rgb) -> int:
    """Pixels of the trend canvas within 8 of ``rgb`` (the opaque window markers)."""
    return frame.evaluate("""(rgb) => { const c = document.querySelector('.tfb-trend-canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 0; i < d.length; i += 4) {
          if (d[i + 3] > 200 && Math.abs(d[i] - rgb[0]) <= 8 && Math.abs(d[i + 1] - rgb[1]) <= 8
              && Math.abs(d[i + 2] - rgb[2]) <= 8) n++; }
        return n; }""", list(rgb))


def check_trend_tab(logdir: str, run: str, job: dict) -> None:
    """Open the trend view of ``logdir`` (holding the job's log_dir as ``run``) and check it."""
    with TensorBoard(logdir) as tb, chromium_context() as ctx:
        status, _, body = tb.get("trend")
        assert status == 200
        (api_run,) = json.loads(body)["runs"]
        (api_job,) = api_run["jobs"]
        assert api_run["run"] == run and len(api_job["windows"]) == len(job["windows"]) == 2
        tab = Tab(ctx, tb, "trend")
        tab.fl.locator(".tfb-tab[data-mode=trend]").click()
        tab.frame.wait_for_function("() => { const c = document.querySelector('.tfb-trend-canvas'); "
                                    "return c && c.dataset.chart === 'ready'; }", timeout=60_000)
        tab.page.wait_for_timeout(300)  # drawn on the next animation frame
        info = tab.frame.evaluate("""() => { const c = document.querySelector('.tfb-trend-canvas');
            return {points: Number(c.dataset.points), windows: Number(c.dataset.windows),
                    rows: Array.from(document.querySelectorAll('.tfb-trend-window')).map(r => ({
                      ...r.dataset, steps: r.children[2].textContent, why: r.querySelector('.tfb-trend-why').textContent,
                      verdict: r.children[4].textContent, change: r.querySelector('.tfb-trend-change').textContent}))}; }""")
        # Two lines (p50, p90) over the points, plus one marker per window.
        assert info["windows"] == 2 and info["points"] == 2 * len(api_job["points"]) + 2
        for kind, rgb in WINDOW_RGB.items():
            assert canvas_color_pixels(tab.frame, rgb) > 20, f"the {kind} window is not drawn"
        rows = info["rows"]
        assert [r["kind"] for r in rows] == ["scheduled", "triggered"]
        for row, w in zip(rows, job["windows"]):
            assert row["session"] == w["session_dir"].rsplit("/", 1)[-1]
            assert row["steps"] == f"{w['steps'][0]}-{w['steps'][1]}"
            assert (row["bottleneck"], row["cause"]) == (w["bottleneck"], w["cause"])
            assert KIND_LABELS[w["bottleneck"]] in row["verdict"] and w["cause"] in row["verdict"]
        trig = job["windows"][1]
        assert rows[1]["change"] == trig["change"]["text"] and rows[0]["change"] == "first window with a verdict"
        assert rows[0]["why"] == "profile_steps"
        assert f"from step {trig['trigger']['slow_steps'][0]}" in rows[1]["why"]
        assert f"{trig['trigger']['slow_step_count']} steps" in rows[1]["why"]
        tab.shot("slowdown")
        tab.fl.locator(".tfb-trend-window[data-kind=triggered] .tfb-trend-open").click()
        tab.frame.wait_for_function(
            "(s) => { const e = document.querySelector('.tfb-session'); return e && e.dataset.session === s; }",
            arg=rows[1]["session"], timeout=120_000)
        tab.close()
