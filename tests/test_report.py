"""Rendering of the report (tfbneck_plugin/render/report.py) and the schema's accessors, on
hand-made session reports: what each format shows, and what it does with error sessions."""
import csv
import io
import json

from tfbneck_plugin import schema
from tfbneck_plugin.render import report

OK = {"run": "r1", "session": "s1", "hosts": ["h0"], "status": "ok", "device_kind": "CPU",
      "step_source": "step_markers ('train')", "bottleneck": "cpu", "cause": "input_preprocessing",
      "confidence": 0.72, "steps": {"count": 5, "step_time_ms": {"mean": 29.5, "p50": 29.0, "p90": 31.0}},
      "breakdown_pct": {"input": 50.7, "device_compute": 32.6, "host_compute": 14.1, "idle": 2.6},
      "input_pipeline": {"bottleneck_stage": "Iterator::Root::Prefetch::Map"},
      "evidence": ["The training step waits for input 50.7% of the time."],
      "recommendations": [{"fix": "parallel_map", "title": "Parallelise the `Map` stage", "detail": "d",
                           "code": "ds = ds.map(f, num_parallel_calls=tf.data.AUTOTUNE)"}]}
BAD = {"run": "r2", "session": "s2", "hosts": ["h0"], "status": "error", "error": "/x/h0.xplane.pb: file is empty",
       "error_kind": "empty_file", "bottleneck": "unknown", "step_source": "none"}
REPORT = report.build_report([OK, BAD])


def test_accessors():
    assert schema.step_time_ms(OK) == 29.5 and schema.step_time_ms(OK, "p90") == 31.0
    assert schema.step_time_ms(BAD) is None
    assert schema.share_pct(OK, "input") == 50.7 and schema.share_pct(BAD, "input") is None
    assert schema.blocking_stage_kind(OK) == "Map" and schema.blocking_stage_kind(BAD) == ""
    assert schema.first_fix(OK)["fix"] == "parallel_map" and schema.first_fix(BAD) is None


def test_row_flattens_one_session():
    r = report.row(OK)
    assert (r["steps"], r["step_ms"], r["input_pct"], r["blocking_stage"]) == (5, 29.5, 50.7, "Map")
    assert report.row(BAD)["step_ms"] == "" and report.row(BAD)["error"].endswith("file is empty")


def test_json_is_the_contract():
    data = json.loads(report.to_json(REPORT))
    assert set(data) == {"version", "sessions"} and data["sessions"] == [OK, BAD]


def test_csv_has_one_row_per_session_and_every_share():
    rows = list(csv.DictReader(io.StringIO(report.to_csv(REPORT))))
    assert [r["run"] for r in rows] == ["r1", "r2"]
    assert rows[0]["cause"] == "input_preprocessing" and rows[0]["device_compute_pct"] == "32.6"
    assert rows[1]["status"] == "error" and rows[1]["device_compute_pct"] == ""


def test_table_shows_verdict_evidence_first_fix_and_errors():
    text = report.to_table(REPORT)
    # The verdict's label, then the action, then the evidence (the fix first, as every view).
    assert "r1/s1: CPU-bound (input_preprocessing, confidence 0.72)" in text
    assert "  - The training step waits for input 50.7% of the time." in text
    assert "  fix first: Parallelise the `Map` stage [parallel_map]" in text
    assert "      ds = ds.map(f, num_parallel_calls=tf.data.AUTOTUNE)" in text
    assert text.index("fix first:") < text.index("  - The training step waits")
    assert "  where the time goes: Waiting for input 50.7%, Model compute on the CPU 32.6%, Host overhead 14.1%, " \
           "Nothing recorded 2.6%" in text
    assert "r2/s2: ERROR /x/h0.xplane.pb: file is empty" in text
    # r1 has no system metrics: the table says so, once, after its evidence; with them, nothing.
    missing = "  - No system metrics beside this trace (tfbneck_system_metrics.json"
    assert text.count(missing) == 1 and text.index("  - The training step waits") < text.index(missing)
    sampled = dict(OK, system_metrics={"samples": 12, "cpu_mean_pct": 40.0})
    assert missing not in report.to_table(report.build_report([sampled]))


def test_markdown_escapes_pipes_and_shows_code():
    piped = dict(OK, run="a|b")
    text = report.to_markdown(report.build_report([piped]))
    assert "| a\\|b |" in text and "```python\nds = ds.map(f, num_parallel_calls=tf.data.AUTOTUNE)\n```" in text


def test_table_and_markdown_rows_give_the_time_per_batch():
    """A run with steps_per_execution=32 (a traced step is 32 batches of 0.193 ms) and one with
    1 (0.803 ms): the human views show the time per batch, so the faster run reads faster."""
    spe32 = dict(OK, run="spe32", steps={"count": 3, "step_time_ms": {"mean": 6.184}, "time_per_batch_ms": 0.19325,
                                         "batches_per_step": 32})
    spe1 = dict(OK, run="spe1", steps={"count": 20, "step_time_ms": {"mean": 0.803}, "time_per_batch_ms": 0.803})
    rep = report.build_report([spe1, spe32, BAD])
    lines = report.to_table(rep).splitlines()
    header = lines[0].split()
    at = header.index("batch_ms")
    assert "step_ms" not in header
    assert [line.split()[at] for line in lines[2:4]] == ["0.803", "0.193"]
    md = report.to_markdown(rep).splitlines()
    cols = [c.strip() for c in md[0].strip("|").split("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in md[2:5]]
    assert [row[cols.index("batch_ms")] for row in cells] == ["0.803", "0.193", ""]
    # The CSV keeps the traced step (step_ms) beside the time per batch.
    rows = list(csv.DictReader(io.StringIO(report.to_csv(rep))))
    assert [(r["step_ms"], r["time_per_batch_ms"]) for r in rows[:2]] == [("0.803", "0.803"), ("6.184", "0.19325")]


def test_the_verdict_inside_a_sentence_is_the_label_with_its_first_capital_lowered():
    """The trend's change sentences ("CPU-bound (...), was device-bound (...)") use the labels
    every view shows, not a table of their own."""
    assert [schema.bottleneck_words(k) for k in ("cpu", "device", "io", "network", "unknown")] == \
        ["CPU-bound", "device-bound", "I/O-bound", "network-bound", "no verdict"]
    assert [schema.bottleneck_label(k) for k in ("device", "network")] == ["Device-bound", "Network-bound"]
