"""Shared fixtures and helpers.

Inputs outside the repository: ``../shared`` (the team's checkout holds it beside the project:
real traces from public projects, failing cases). A user's clone has none of it, so the tests
that need it skip there, with the reason. In CI (``CI=true``) they fail instead: CI has
``../shared``, and a missing copy must not turn into silently skipped claims.

Environment:
    TFBNECK_SHARED           where ``shared`` is (default: ``../shared`` beside the repository);
                             point it at a missing folder to run the tests as in a user's clone
    TFBNECK_REQUIRE_SHARED   1: fail when it is absent, 0: skip (default: 1 when CI=true)
"""
import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from support.paths import DATA, DEMO_LOGS, REALTRACES, ROOT, SHARED, TESTS  # noqa: F401 (re-exported)

HERE = TESTS
ARTIFACTS = os.path.join(HERE, "_artifacts")

if HERE not in sys.path:
    sys.path.insert(0, HERE)


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def shared_required() -> bool:
    """Whether ``../shared`` must be present: TFBNECK_REQUIRE_SHARED, else whether CI=true."""
    explicit = os.environ.get("TFBNECK_REQUIRE_SHARED")
    if explicit is not None and explicit.strip():
        return _truthy(explicit)
    return _truthy(os.environ.get("CI", ""))


def need_shared(path: str, what: str) -> str:
    """``path`` (inside ``../shared``) if it exists; else skip, or fail where it is required."""
    if os.path.exists(path):
        return path
    msg = (f"{what} not available: {path} is absent (it sits beside the project in the team's checkout, "
           "not in a user's clone)")
    if shared_required():
        pytest.fail(msg + "; CI=true or TFBNECK_REQUIRE_SHARED=1 expects it (TFBNECK_SHARED says where it is)",
                    pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def realtraces():
    """Path of ../shared/realtraces (real profiler output from public projects)."""
    return need_shared(REALTRACES, "real traces")


@pytest.fixture(scope="session")
def artifacts():
    os.makedirs(ARTIFACTS, exist_ok=True)
    return ARTIFACTS


def tfbneck_cmd():
    """The installed console script, falling back to ``python -m``."""
    exe = os.path.join(os.path.dirname(sys.executable), "tfbneck")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "tfbneck_plugin.cli"]


def xprof_input_pipeline(xplane: str, workdir) -> dict:
    """XProf's own ``input_pipeline_analyzer`` (the Profile plugin's converter) on a copy of
    ``xplane`` (un-gzipped if need be): XProf caches its results beside the trace, and the input must not change.

    Returns ``{"p": <its summary: averages in ms as strings, input_conclusion>, "rows": <steps>}``.
    Skips only where XProf cannot be imported (tensorboard-plugin-profile before the ``xprof``
    package); any failure of the conversion itself fails the test.
    """
    pytest.importorskip("xprof.convert.raw_to_tool_data",
                        reason="XProf's converter (tensorboard-plugin-profile >= 2.19, package xprof) is not installed")
    dest = os.path.join(str(workdir), "xprof_copy", "plugins", "profile", "session")
    os.makedirs(dest, exist_ok=True)
    name = os.path.basename(xplane)
    if name.endswith(".gz"):  # XProf reads only the profiler's own .xplane.pb
        copy = os.path.join(dest, name[:-len(".gz")])
        with gzip.open(xplane, "rb") as src, open(copy, "wb") as out:
            shutil.copyfileobj(src, out)
    else:
        copy = shutil.copy(xplane, os.path.join(dest, name))
    code = ("import sys, json\n"
            "from xprof.convert import raw_to_tool_data as r\n"
            "data, _ = r.xspace_to_tool_data([sys.argv[1]], 'input_pipeline_analyzer', {})\n"
            "d = json.loads(data)\n"
            "print('RESULT', json.dumps({'p': d[1]['p'], 'rows': len(d[1]['rows'])}))\n")
    r = subprocess.run([sys.executable, "-c", code, copy], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3"))
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    assert r.returncode == 0 and line, f"XProf's converter failed on {xplane}: {r.stderr[-2000:]}"
    return json.loads(line[0][len("RESULT "):])


@pytest.fixture(autouse=True)
def _own_report_cache(tmp_path_factory, monkeypatch):
    """Each test its own persistent report cache (``tfbneck_plugin.cache``), inherited by the
    processes it starts: never the user's cache folder, and no report of one test (made
    with another test's monkeypatched analyzer, say) read by the next."""
    monkeypatch.setenv("TFBNECK_CACHE_DIR", str(tmp_path_factory.mktemp("report-cache")))


# --- Test tiers -----------------------------------------------------------------------------
#: ``bash tests/run.sh --quick`` sets TFBNECK_TEST_TIER=quick.
QUICK = os.environ.get("TFBNECK_TEST_TIER", "").strip().lower() == "quick"


def in_quick_tier(item) -> bool:
    """The quick tier leaves out TensorFlow jobs (``tf``), the README's fresh-venv run
    (``readme``), tests too slow for it (``slow``), and browser tests except those marked
    ``quick`` (pytest.ini describes each marker)."""
    marks = {m.name for m in item.iter_markers()}
    return not marks & {"tf", "readme", "slow"} and ("browser" not in marks or "quick" in marks)
#: Where the stand-in ``tensorflow`` package of the quick tier is.
_NO_TENSORFLOW = os.path.join(HERE, "support", "quick_tier")
_NO_TENSORFLOW_WORDS = "the quick test tier starts no TensorFlow"

if QUICK:
    sys.path.insert(0, _NO_TENSORFLOW)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_NO_TENSORFLOW, os.environ.get("PYTHONPATH")) if p)


def pytest_configure(config):
    if QUICK and "tensorflow" in sys.modules:
        raise pytest.UsageError("the quick tier was asked for, but TensorFlow was imported before the tests began")


#: Files whose tests hold one of these markers run first (lower first): pytest-xdist's
#: ``--dist loadfile`` hands whole files to the workers in collection order, so a long file met
#: last (the README's fresh-venv run, ~3 minutes, sorts late by name) keeps one worker busy
#: after the other has finished. Longest first is the classic greedy order for two machines.
LONG_FILE_MARKERS = ("readme", "browser")


def _file_rank(items) -> dict:
    """``{test file: rank}``: the index in :data:`LONG_FILE_MARKERS` of the first marker any
    of the file's tests holds, else ``len(LONG_FILE_MARKERS)``."""
    rank: dict = {}
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        mine = min([i for i, m in enumerate(LONG_FILE_MARKERS) if m in marks] or [len(LONG_FILE_MARKERS)])
        path = str(item.path)
        rank[path] = min(rank.get(path, mine), mine)
    return rank


def pytest_collection_modifyitems(config, items):
    if QUICK:
        keep = [item for item in items if in_quick_tier(item)]
        config.hook.pytest_deselected(items=[item for item in items if not in_quick_tier(item)])
        items[:] = keep
    rank = _file_rank(items)
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(str(item.path), i)
    # Stable: each file's tests stay together and in their order (module-scoped fixtures).
    items.sort(key=lambda item: (rank[str(item.path)], first_seen[str(item.path)]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In the quick tier, a test skipped because TensorFlow could not be imported is a failure:
    it needs the ``tf`` marker, or it would pass unseen as a skip."""
    outcome = yield
    report = outcome.get_result()
    if QUICK and report.skipped and _NO_TENSORFLOW_WORDS in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} needs TensorFlow but is not marked tf: "
                           "the quick tier starts no TensorFlow (tests/conftest.py)")
