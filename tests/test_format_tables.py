"""The category order, colours and labels and the verdict labels are written twice: for the
notebook (tfbneck_plugin/notebook.py) and for the TensorBoard tab (frontend/src/format.js).
This test reads the JavaScript source and holds the two to the same table."""
import json
import os
import re

from tfbneck_plugin import notebook
from tfbneck_plugin.analysis.breakdown import CATEGORIES as BREAKDOWN_ORDER
from support.paths import ROOT

FORMAT_JS = os.path.join(ROOT, "frontend", "src", "format.js")


def js_source() -> str:
    return open(FORMAT_JS, encoding="utf-8").read()


def js_object(name: str) -> dict:
    """``export const NAME = {key: "value", ...};`` as a dict."""
    body = re.search(rf"export const {name} = \{{(.*?)\}};", js_source(), re.S).group(1)
    return dict(re.findall(r'(\w+):\s*"([^"]*)"', body))


def js_category_labels() -> dict:
    body = re.search(r"export function categoryLabel\(cat, deviceKind\) \{(.*?)\n\}", js_source(), re.S).group(1)
    table = re.search(r"return \{(.*?)\}\[cat\]", body, re.S).group(1)
    return dict(re.findall(r'(\w+):\s*"([^"]*)"', table))


def test_category_order_is_the_same():
    order = json.loads("[" + re.search(r"export const CATEGORIES = \[(.*?)\];", js_source(), re.S).group(1)
                       .strip().rstrip(",") + "]")
    assert order == notebook.CATEGORIES
    assert sorted(order) == sorted(BREAKDOWN_ORDER)  # every breakdown category is drawn, once


def test_category_colours_are_the_same():
    assert js_object("CATEGORY_COLORS") == notebook.CATEGORY_COLORS


def test_category_labels_are_the_same():
    labels = js_category_labels()
    for cat in BREAKDOWN_ORDER:
        if cat != "device_compute":  # written with the device kind in both: checked below
            assert notebook.category_label(cat, "GPU") == labels[cat]
    js = js_source()
    assert '"Model compute (on CPU)"' in js and "`Device compute (${deviceKind || \"device\"})`" in js
    assert notebook.category_label("device_compute", "CPU") == "Model compute (on CPU)"
    assert notebook.category_label("device_compute", "GPU") == "Device compute (GPU)"
    assert notebook.category_label("device_compute", None) == "Device compute (device)"


def test_verdict_labels_are_the_same():
    assert js_object("KIND_LABELS") == notebook.KIND_LABELS
