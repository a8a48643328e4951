"""The Python API (``tfbneck_plugin.analyze``) and its rich display, outside a notebook.

The reports must be the CLI's own (same discovery, same analysis); the HTML must hold what
the report says, draw the breakdown to scale, and escape every name that comes from a
trace or a folder. tests/test_notebook.py runs the same API in a real Jupyter kernel.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import tfbneck_plugin as tfb
from conftest import DEMO_LOGS, ROOT, tfbneck_cmd
from tfbneck_plugin import schema
from tfbneck_plugin.logdir import DiscoveryError
from support.demo import HOSTILE_RUN, HOSTILE_STAGE, KIND_LABELS, expected, hostile_logdir

@pytest.fixture(scope="module")
def demo():
    expected()
    return tfb.analyze(DEMO_LOGS)


def test_analyze_gives_the_cli_reports(demo):
    """Same sessions, same order, same JSON as `tfbneck analyze --format json`."""
    r = subprocess.run(tfbneck_cmd() + ["analyze", DEMO_LOGS, "--format", "json"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(demo.to_json()) == json.loads(r.stdout)
    assert [(s.run, s.session) for s in demo] == [(s["run"], s["session"]) for s in json.loads(r.stdout)["sessions"]]


def test_verdicts_and_access(demo):
    exp = expected()
    assert len(demo) == len(exp) and not demo.failed and demo.problems == []
    for run, want in exp.items():
        s = demo[run]
        assert isinstance(s, dict) and isinstance(s, tfb.SessionReport)
        assert (s.bottleneck, s.cause) == (want["bottleneck"], want["cause"]) == (s["bottleneck"], s["cause"])
        assert demo[f"{s.run}/{s.session}"] is s
        assert json.loads(s.to_json()) == dict(s)
        text = repr(s)  # plain text for terminals: the verdict line, evidence, first fix
        # The verdict as every view names it (the report's bottleneck_label), then the fix first.
        assert text.startswith(f"{run}/{s.session}: {s['bottleneck_label']} ({want['cause']}, confidence ")
        assert s["bottleneck_label"] == schema.BOTTLENECK_LABELS[want["bottleneck"]]
        assert all(f"  - {e}" in text for e in s.evidence)
        assert f"fix first: {s.recommendations[0]['title']}" in text
    assert demo[0] is next(iter(demo))
    with pytest.raises(KeyError, match="no such session"):
        demo["no_such_run"]
    table = repr(demo)
    assert all(re.search(rf"^{run}\s.*\s{w['bottleneck']}\s+{w['cause']}\s", table, re.M) for run, w in exp.items())


def test_dataframe_one_row_per_session(demo):
    pytest.importorskip("pandas", reason="pandas is not installed (pip install '.[notebook]' in the tfbneck clone)")
    df = demo.to_dataframe()
    assert len(df) == len(demo)
    for col in ("run", "session", "bottleneck", "cause", "confidence", "step_ms", "input_pct", "idle_pct"):
        assert col in df.columns
    for (_, row), s in zip(df.iterrows(), demo):
        assert (row["run"], row["bottleneck"], row["cause"]) == (s.run, s.bottleneck, s.cause)
        assert row["confidence"] == s.confidence
        assert row["step_ms"] == s["steps"]["step_time_ms"]["mean"]
        assert row["device_compute_pct"] == s["breakdown_pct"]["device_compute"]
    assert df["confidence"].dtype.kind == "f" and df["step_ms"].dtype.kind == "f"
    assert df["error"].isna().all()


def test_dataframe_without_pandas_says_how_to_install():
    code = ("import sys; sys.modules['pandas'] = None\n"  # as if pandas were not installed
            "import tfbneck_plugin as tfb\n"
            "r = tfb.Report([{'run': 'a', 'session': 's', 'status': 'ok'}])\n"
            "try:\n    r.to_dataframe()\nexcept ImportError as e:\n    print('ImportError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("ImportError: Report.to_dataframe() needs pandas: pip install "
                                  "'.[notebook]' in the tfbneck clone (or pip install pandas)")


def test_the_callback_without_tensorflow_names_the_extra():
    """Without TensorFlow, importing the callback is one ImportError naming the extra to install."""
    code = ("import sys; sys.modules['tensorflow'] = None\n"  # as if TensorFlow were not installed
            "try:\n    from tfbneck_plugin import BottleneckProfiler\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n"
            "import tfbneck_plugin as tfb; print(len(tfb.analyze(sys.argv[1])))\n")
    out = subprocess.run([sys.executable, "-c", code, DEMO_LOGS], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "ImportError BottleneckProfiler needs TensorFlow: pip install '.[tensorflow]' in the tfbneck clone (or any "
        "TensorFlow >= 2.16 with tf-keras); the analyzer, CLI and tab do not", str(len(expected()))]


def test_analyze_imports_no_tensorflow():
    expected()
    code = ("import sys\nimport tfbneck_plugin\n"
            f"r = tfbneck_plugin.analyze({DEMO_LOGS!r})\n"
            "r._repr_html_(); repr(r); r.to_json(); [s._repr_html_() for s in r]\n"
            "print(len(r), sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{len(expected())} []"


def test_paths_list_jobs_and_remote(tmp_path, demo):
    """Several paths (overlapping ones name a session once), jobs=2, and an fsspec URL give
    the reports of the one-path, in-process call."""
    runs = sorted(expected())
    paths = [os.path.join(DEMO_LOGS, run) for run in runs] + [DEMO_LOGS]
    many = tfb.analyze(paths, jobs=2)
    by_run = {s.session: s for s in demo}
    assert sorted(s.session for s in many) == sorted(by_run)
    for s in many:
        assert (s.bottleneck, s.cause, s["breakdown_pct"]) == (by_run[s.session].bottleneck,
                                                                by_run[s.session].cause, by_run[s.session]["breakdown_pct"])
    import fsspec
    fs = fsspec.filesystem("memory")
    base = f"/tfb-api-{os.getpid()}"
    src = os.path.join(DEMO_LOGS, "cpu_bound_input")
    for d, _, files in os.walk(src):
        for f in files:
            fs.pipe(f"{base}/logs/cpu_bound_input/{os.path.relpath(os.path.join(d, f), src)}",
                    open(os.path.join(d, f), "rb").read())
    try:
        (remote,) = tfb.analyze(f"memory://{base}/logs")
    finally:
        fs.rm(base, recursive=True)
    local = demo["cpu_bound_input"]
    assert remote.run == "cpu_bound_input" and remote.status == "ok"
    assert (remote.bottleneck, remote.cause, remote["breakdown_pct"]) == (local.bottleneck, local.cause,
                                                                          local["breakdown_pct"])


def test_bad_input_is_one_line(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(DiscoveryError) as err:
        tfb.analyze(missing)
    assert str(err.value).startswith(missing) and "\n" not in str(err.value)
    with pytest.raises(DiscoveryError, match=r"^no profiling session found under .*empty"):
        (tmp_path / "empty").mkdir()
        tfb.analyze(str(tmp_path / "empty"))
    with pytest.raises(TypeError, match="a path or a list of paths, not int"):
        tfb.analyze(3)
    with pytest.raises(ValueError, match="jobs=-1"):
        tfb.analyze(str(tmp_path), jobs=-1)
    with pytest.raises(TypeError, match="a dict, not list"):
        tfb.SessionReport.from_dict([])


def test_a_broken_session_does_not_hide_the_others(tmp_path):
    expected()
    shutil.copytree(os.path.join(DEMO_LOGS, "cpu_bound_input"), tmp_path / "good")
    broken = tmp_path / "broken" / "plugins" / "profile" / "2024_01_01_00_00_00"
    broken.mkdir(parents=True)
    (broken / "host.xplane.pb").write_bytes(b"")
    r = tfb.analyze(str(tmp_path))
    assert [s.run for s in r] == ["broken", "good"]
    assert [s.run for s in r.failed] == ["broken"] and r["good"].bottleneck == "cpu"
    err = r["broken"].error
    assert "host.xplane.pb" in err and "\n" not in err
    page = r._repr_html_()
    assert "Could not analyse" in page and _esc(err) in page
    assert repr(r["broken"]) == f"broken/2024_01_01_00_00_00: ERROR {err}"


def _esc(text):
    import html
    return html.escape(text, quote=True)


def test_html_holds_the_report(demo):
    """Each session's card, chart, stage table and first recommendations, from its report."""
    page = demo._repr_html_()
    assert "<script" not in page.lower() and "src=" not in page  # nothing to run or to load
    for run, want in expected().items():
        s = demo[run]
        assert f'<tr data-run="{run}" data-bottleneck="{want["bottleneck"]}">' in page
        one = s._repr_html_()
        assert f'data-bottleneck="{want["bottleneck"]}" data-cause="{want["cause"]}"' in one
        assert f">{KIND_LABELS[want['bottleneck']]}<" in one
        assert f"confidence {round(100 * s.confidence)}%" in one
        assert all(_esc(e).split("`")[0] in one for e in s.evidence)
        assert one.count('class="tfb-step"') == s["steps"]["count"]
        assert one.count("<svg class=\"tfb-chart tfb-total-bar\"") == 1
        # A stage is marked blocking only where input actually blocks (>= 5 % of the step).
        blocking = [st for st in s["input_pipeline"]["stages"] if st["blocking"]]
        assert one.count('<tr class="tfb-blocking"') == len(blocking) <= 1
        for st in blocking:
            assert f'<tr class="tfb-blocking" data-stage="{_esc(st["kind"])}">' in one
        for rec in s.recommendations[:3]:
            assert _esc(rec["title"]).split("`")[0] in one
            if rec.get("code"):
                assert f"<pre><code>{_esc(rec['code'])}</code></pre>" in one
        for part in re.findall(r'<section class="tfb-card.*?</section>', one):  # the Report shows it whole
            assert part in page


def test_outside_a_notebook(demo, capsys):
    """No kernel: in_notebook() is False; a window report asked for anyway is the text repr
    (IPython's display prints it), and a bad one is refused without raising."""
    import importlib.util
    from tfbneck_plugin.capture import display
    assert display.in_notebook() is False  # pytest is no Jupyter kernel
    has_ipython = importlib.util.find_spec("IPython") is not None
    assert display.show_window_report(dict(demo[0])) is has_ipython
    if has_ipython:
        assert capsys.readouterr().out.startswith(f"{demo[0].run}/{demo[0].session}: {demo[0]['bottleneck_label']} (")
    assert display.show_window_report(None) is False
    code = ("import sys, tfbneck_plugin.capture.display as n\n"
            "print(n.in_notebook(), 'IPython' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr  # and IPython is not imported to find out


def test_cause_text_is_shown_when_the_report_has_it(demo):
    s = tfb.SessionReport.from_dict(dict(demo["cpu_bound_input"], cause_text="The `Map` stage <is> slow."))
    assert '<p class="tfb-cause">The <code>Map</code> stage &lt;is&gt; slow.</p>' in s._repr_html_()


def test_chart_is_drawn_to_scale(tmp_path):
    """The exact trace: the 100 % bar's segments and each step's column have the sizes of
    the breakdown (input 60 %, compute 20 %, host 5 %, idle 15 % of 10 ms steps)."""
    (s,) = tfb.analyze(hostile_logdir(tmp_path))
    page = s._repr_html_()
    bar = re.search(r'<svg class="tfb-chart tfb-total-bar".*?</svg>', page).group(0)
    widths = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'data-category="(\w+)">.*?<rect x="[\d.]+" y="0" width="([\d.]+)"', bar)}
    assert widths == pytest.approx({"input": 384.0, "device_compute": 128.0, "host_compute": 32.0,
                                    "idle": 96.0}, abs=1.0)
    steps = re.search(r'<svg class="tfb-chart tfb-steps-chart".*?</svg>', page).group(0)
    columns = re.findall(r'<g class="tfb-step">(.*?)</g>', steps)
    assert len(columns) == 3
    for col in columns:  # axis 0-10 ms over 176 px: 17.6 px per ms
        heights = [float(h) for h in re.findall(r'height="([\d.]+)" fill="#', col)]
        assert sorted(heights) == pytest.approx(sorted([6 * 17.6, 2 * 17.6, 0.5 * 17.6, 1.5 * 17.6]), abs=0.05)
        assert float(re.search(r'height="([\d.]+)" fill="none"', col).group(1)) == pytest.approx(176.0, abs=0.05)


def test_names_from_the_trace_are_escaped(tmp_path):
    r = tfb.analyze(hostile_logdir(tmp_path))
    (s,) = r
    assert s.run == HOSTILE_RUN and s["input_pipeline"]["bottleneck_stage"].endswith(HOSTILE_STAGE)
    for page in (s._repr_html_(), r._repr_html_()):
        assert "<script" not in page and "<img" not in page
        assert _esc(HOSTILE_STAGE) in page and _esc(HOSTILE_RUN) in page


# --- First contact in a notebook (issue 26) -------------------------------------------------

def test_analyze_is_silent_where_the_cli_shows_progress(demo, capfd):
    """The CLI draws a bar on stderr from 4 sessions on; the API (a notebook's) draws none."""
    assert len(demo) >= 4
    capfd.readouterr()
    tfb.analyze(DEMO_LOGS)
    out = capfd.readouterr()
    assert out.err == "" and out.out == ""
    r = subprocess.run(tfbneck_cmd() + ["analyze", DEMO_LOGS], capture_output=True, text=True, timeout=300)
    assert "analysing" in r.stderr  # the CLI's bar: the API's silence is a choice, not an absence


def test_a_run_with_several_windows_is_a_report_of_them(tmp_path):
    run = tmp_path / "logs" / "exp1"
    src = os.path.join(DEMO_LOGS, "pair_spe1", "plugins", "profile")
    (session,) = os.listdir(src)
    for name in (session, session.replace("steps6-25", "steps40-59")):
        shutil.copytree(os.path.join(src, session), run / "plugins" / "profile" / name)
    r = tfb.analyze(tmp_path / "logs")
    windows = r["exp1"]
    assert isinstance(windows, tfb.Report) and len(windows) == 2
    assert [s.session for s in windows] == [s.session for s in r] and windows[-1] is r[1]
    assert windows[0].bottleneck == r[0].bottleneck and windows._repr_html_().count("<tr data-run=") == 2


@pytest.mark.browser
def test_many_sessions_are_summarised_compactly_and_never_clipped(demo, tmp_path):
    """209 sessions: one table (evidence and first fix folded under each cause), no per-session
    charts, well under the 2.4 MB the full view took; in a narrow cell no column is cut off."""
    from tfbneck_plugin.notebook.session import FULL_SESSIONS
    many = tfb.Report([dict(s) for s in demo] * 19)
    page = many._repr_html_()
    assert len(many) > FULL_SESSIONS and len(page) < 500_000, len(page)
    assert page.count("<tr data-run=") == len(many) and page.count('<details class="tfb-why">') == len(many)
    assert "tfb-steps-chart" not in page and "<script" not in page.lower()
    for s in demo:
        assert _esc(s.recommendations[0]["title"]).split("`")[0] in page
    from support.plugin_helpers import CHROMIUM_ARGS, chromium_path
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")
    exe = chromium_path()
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; tests/run.sh does it)")
    path = tmp_path / "many.html"
    path.write_text(f"<html><body style='width:700px'>{tfb.Report(list(demo))._repr_html_()}</body></html>")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(java_script_enabled=False, viewport={"width": 760, "height": 900}).new_page()
            page.goto(f"file://{path}", wait_until="domcontentloaded")
            table = page.locator("table.tfb-summary")
            assert table.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth")
            box = page.locator("div.tfbneck-report").first.bounding_box()
            for i in range(page.locator("svg.tfb-mini-bar").count()):
                bar = page.locator("svg.tfb-mini-bar").nth(i).bounding_box()
                assert bar["x"] + bar["width"] <= box["x"] + box["width"] + 0.5, (bar, box)
        finally:
            browser.close()


def test_every_input_error_is_a_tfbneck_error(tmp_path):
    """``except tfb.TfbneckError`` catches what the front doors raise for input tfbneck cannot
    use, each with a one-line message naming the path."""
    from tfbneck_plugin.comparison.compare import CompareError
    from tfbneck_plugin.errors import TfbneckError, first_line
    from tfbneck_plugin.plugin.query import RouteError
    from tfbneck_plugin.records import SidecarError
    from tfbneck_plugin.remote import RemoteError
    from tfbneck_plugin.render.console import OutputError
    from tfbneck_plugin.trace.xspace import TraceReadError
    assert tfb.TfbneckError is TfbneckError
    for cls in (DiscoveryError, CompareError, RouteError, SidecarError, RemoteError, OutputError, TraceReadError):
        assert issubclass(cls, TfbneckError), cls
    missing = str(tmp_path / "missing")
    with pytest.raises(tfb.TfbneckError) as raised:
        tfb.analyze(missing)
    assert str(raised.value) == f"{missing}: no such file or directory"
    with pytest.raises(tfb.TfbneckError) as raised:
        tfb.compare(missing, os.path.join(DEMO_LOGS, "compute_bound"))
    assert str(raised.value) == f"the baseline: {missing}: no such file or directory"
    assert first_line(ValueError("\n  first\nsecond")) == "first"
    assert first_line(ValueError(""), "no message") == "no message"
    assert first_line("recorded\nmessage") == "recorded"
