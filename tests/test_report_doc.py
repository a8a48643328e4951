"""The report contract in the repository (docs/report.md) is generated from the typed schema
(tfbneck_plugin/schema.py) and must be current; the JSON keeps one type per key."""
import glob
import json
import os
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs"))
import make_report_md  # noqa: E402


def test_docs_report_md_is_generated_from_the_schema_and_current():
    with open(make_report_md.OUT, encoding="utf-8") as f:
        assert f.read() == make_report_md.render(), "run python docs/make_report_md.py"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "make_report_md.py"), "--check"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_every_session_key_of_the_schema_is_explained_and_only_those():
    classes = {name: keys for name, _doc, keys in make_report_md.typed_dicts()}
    session = [k for k, _t, _c in classes["SessionDict"]]
    from tfbneck_plugin import schema
    assert session == list(schema.SessionDict.__annotations__)  # the parser reads what Python reads
    # Each key is explained: by docs/make_report_md.py's MEANING, else by its comment in schema.py.
    comments = {k: c for k, _t, c in classes["SessionDict"]}
    assert [k for k in session if not (make_report_md.MEANING.get(k) or comments[k])] == []
    assert set(make_report_md.MEANING) <= set(session)
    text = make_report_md.render()
    for name in make_report_md._reachable(make_report_md.typed_dicts())[1:]:
        assert f"### `{name}`" in text
    assert "### `SyncStep`" in text and "### `WorstStep`" in text


def test_json_types_are_one_per_key():
    """Across every golden report (demo runs, real traces and cases where present): a stage's
    parallelism is an int or null (never the text 'unavailable'), step_source a string, and
    the worst step's place on the Trace Viewer's axis a number."""
    seen = 0
    for path in glob.glob(os.path.join(ROOT, "tests", "golden", "*.json")):
        for s in json.load(open(path, encoding="utf-8")):
            assert isinstance(s.get("step_source"), str), s.get("run")
            for st in (s.get("input_pipeline") or {}).get("stages") or []:
                assert st["parallelism"] is None or type(st["parallelism"]) is int, (s["run"], st)
                seen += 1
            w = s.get("worst_step")
            if w:
                assert all(isinstance(w[k], float) for k in ("trace_start_ms", "trace_end_ms", "start_ms"))
    assert seen > 50


def test_parallelism_text_from_the_trace_becomes_a_number_or_null():
    from tfbneck_plugin.analysis.tfdata import _parallelism
    assert [_parallelism(v) for v in (8, "8", 2.0, "unavailable", "", None, True, 2.5)] == \
        [8, 8, 2, None, None, None, None, None]


def test_every_cause_comes_with_a_next_step():
    """Every cause, the unknown ones too (no_activity, not_tensorflow), has a recommendation:
    a reader never meets a verdict with nothing to do next."""
    from tfbneck_plugin.analysis.advice import ADVICE
    from tfbneck_plugin.causes import CAUSES
    assert set(ADVICE) == set(CAUSES)
    for cause in ("no_activity", "not_tensorflow"):
        recs = ADVICE[cause](None)
        assert recs and recs[0]["title"] and recs[0]["code"], cause
