"""The category order and colours are written twice: for the notebook
(tfbneck_plugin/notebook/session.py) and for the TensorBoard tab (frontend/src/format.js); this test
reads the JavaScript source and holds the two to the same table. The words (verdict labels,
category names, a fix's worth) are written once, in tfbneck_plugin/schema.py: the report and
the session list carry them, and no view's source holds its own copy."""
import json
import os
import re

from tfbneck_plugin.notebook import session as notebook
from tfbneck_plugin.analysis.breakdown import CATEGORIES as BREAKDOWN_ORDER
from support.paths import ROOT

FORMAT_JS = os.path.join(ROOT, "frontend", "src", "format.js")


def js_source() -> str:
    return open(FORMAT_JS, encoding="utf-8").read()


def js_object(name: str) -> dict:
    """``export const NAME = {key: "value", ...};`` as a dict."""
    body = re.search(rf"export const {name} = \{{(.*?)\}};", js_source(), re.S).group(1)
    return dict(re.findall(r'(\w+):\s*"([^"]*)"', body))


def test_category_order_is_the_same():
    order = json.loads("[" + re.search(r"export const CATEGORIES = \[(.*?)\];", js_source(), re.S).group(1)
                       .strip().rstrip(",") + "]")
    assert order == notebook.CATEGORIES
    assert sorted(order) == sorted(BREAKDOWN_ORDER)  # every breakdown category is drawn, once


def test_category_colours_are_the_same():
    assert js_object("CATEGORY_COLORS") == notebook.CATEGORY_COLORS


def test_the_words_have_one_source():
    from tfbneck_plugin import schema
    assert notebook.category_label is schema.category_label and notebook.kind_label is schema.bottleneck_label
    assert notebook.KIND_LABELS is schema.BOTTLENECK_LABELS
    assert schema.category_label("device_compute", "CPU") == "Model compute on the CPU"
    assert schema.category_label("device_compute", "GPU") == "GPU compute"
    assert schema.category_label("device_compute", None) == "Device compute"
    # No label, no worth wording in the tab's sources: it renders the report's strings.
    sources = "".join(open(os.path.join(ROOT, "frontend", "src", f), encoding="utf-8").read()
                      for f in os.listdir(os.path.join(ROOT, "frontend", "src")) if f.endswith(".js"))
    for words in list(schema.BOTTLENECK_LABELS.values()) + list(schema.CATEGORY_LABELS.values()) + \
            ["ms per batch (", "; no model"]:
        assert words not in sources, f"{words!r} is worded in frontend/src"


def test_the_evidence_names_categories_as_the_views_do():
    """The breakdown sentence of the evidence words each category as the charts name it."""
    import inspect
    from tfbneck_plugin import schema
    from tfbneck_plugin.analysis import evidence
    sentence = inspect.getsource(evidence.breakdown_sentence).lower()
    for cat in ("input", "host_compute", "kernel_launch", "collective"):
        assert schema.category_label(cat).lower() in sentence, cat
    assert "with nothing recorded" in sentence and schema.category_label("idle").lower() == "nothing recorded"
