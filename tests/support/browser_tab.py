"""The Bottleneck tab open in headless Chromium (Playwright), shared by the browser tests
(``tests/test_plugin_browser.py``, and the trend view's check in ``support/trend_tab.py``)."""
from __future__ import annotations

import re
import time

from support.plugin_helpers import TensorBoard, screenshot

#: The verdict labels the tab shows (frontend/src/format.js).
KIND_LABELS = {"cpu": "CPU-bound", "device": "Device-bound", "io": "I/O-bound", "network": "Network-bound",
               "unknown": "No verdict"}


class Tab:
    """The Bottleneck tab open in a page: ``frame`` (to evaluate) and ``fl`` (locators)."""

    def __init__(self, ctx, tb: TensorBoard, name: str, query: str = ""):
        """``query``: a query string (``?k=v``) for TensorBoard's page, as a shared link carries."""
        self.tb, self.name = tb, name
        self.page = ctx.new_page()
        self.dialogs = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.errors = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(tb.url + query + "#bottleneck")
        tab = self.page.locator("[role=tab] .plugin-name", has_text=re.compile(r"^\s*Bottleneck\s*$"))
        tab.first.wait_for(state="visible", timeout=60_000)
        self.page.wait_for_selector('iframe[src*="plugin_entry.html?name=bottleneck"]', timeout=60_000)
        self.fl = self.page.frame_locator('iframe[src*="plugin_entry.html?name=bottleneck"]')
        self.fl.locator(".tfb-item").first.wait_for(timeout=60_000)
        self.frame = next(f for f in self.page.frames if "plugin_entry.html?name=bottleneck" in f.url)

    def listed(self):
        return self.frame.evaluate("() => Array.from(document.querySelectorAll('.tfb-item')).map(li => "
                                   "[li.dataset.run, li.dataset.session, "
                                   "(li.querySelector('.tfb-item-hosts') || {}).textContent || ''])")

    def select(self, run: str, session: str):
        index = self.frame.evaluate(
            "([run, session]) => Array.from(document.querySelectorAll('.tfb-item'))"
            ".findIndex(li => li.dataset.run === run && li.dataset.session === session)",
            [run, session])
        assert index >= 0, f"{run}/{session} is not in the session list"
        self.fl.locator(".tfb-item").nth(index).click()
        self.wait_shown(run, session, timeout_ms=120_000)
        # Charts are drawn on the next animation frame.
        self.frame.wait_for_function("() => Array.from(document.querySelectorAll('canvas'))"
                                     ".every(c => c.dataset.chart === 'ready')", timeout=10_000)

    def wait_shown(self, run: str, session: str, timeout_ms: int = 60_000):
        """Wait until the tab shows the session ``run``/``session``."""
        self.frame.wait_for_function(
            "([run, session]) => { const s = document.querySelector('.tfb-session'); "
            "return s && s.dataset.run === run && s.dataset.session === session; }",
            arg=[run, session], timeout=timeout_ms)

    def reattach(self, timeout_s: float = 60):
        """After a reload or a navigation (Back, Forward): ``frame`` is the tab's frame again once
        the page has loaded it (its iframe element can be there before the frame has navigated)."""
        deadline = time.monotonic() + timeout_s
        while True:
            frame = next((f for f in self.page.frames if "plugin_entry.html?name=bottleneck" in f.url), None)
            if frame is not None:
                self.frame = frame
                return
            assert time.monotonic() < deadline, f"no Bottleneck frame within {timeout_s} s: {self.page.url}"
            self.page.wait_for_timeout(100)

    def shot(self, name: str):
        """A screenshot of the whole tab: the viewport grows to the tab's content height."""
        height = self.frame.evaluate("() => document.querySelector('.tfb-main').scrollHeight")
        self.page.set_viewport_size({"width": 1440, "height": int(min(max(height + 80, 1000), 7000))})
        self.page.wait_for_timeout(300)  # Chart.js redraws on resize
        path = screenshot(self.page, f"{self.name}-{name}")
        self.page.set_viewport_size({"width": 1440, "height": 1000})
        return path

    def close(self):
        assert not self.errors, f"JavaScript errors in the page: {self.errors}"
        assert not self.dialogs, f"a dialog was opened (injected script?): {self.dialogs}"
        self.page.close()
