"""Shared fixtures and helpers.

Inputs outside the repository: ``../shared`` (the team's checkout holds it beside the project:
real traces from public projects, failing cases). A user's clone has none of it, so the tests
that need it skip there, with the reason. In CI (``CI=true``) they fail instead: CI has
``../shared``, and a missing copy must not turn into silently skipped claims.

Environment:
    TFBNECK_SHARED           where ``shared`` is (default: ``../shared`` beside the repository);
                             point it at a missing folder to run the tests as in a user's clone
    TFBNECK_REQUIRE_SHARED   1: fail when it is absent, 0: skip (default: 1 when CI=true)
    TFBNECK_TEST_TIER        ``quick``: the quick tier (``tests/run.sh --quick``: no TensorFlow, no
                             test marked slow, one browser test); ``floors``: the tests the
                             lowest-versions job runs at the declared floors (``tests/run_min_versions.sh``,
                             stage 1: no TensorFlow, no browser, less FLOORS_LEAVE_OUT); unset: every
                             test collected
"""
import gzip
import json
import os
import re
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
_TIER = os.environ.get("TFBNECK_TEST_TIER", "").strip().lower()
#: ``bash tests/run.sh --quick`` sets TFBNECK_TEST_TIER=quick.
QUICK = _TIER == "quick"
#: ``bash tests/run_min_versions.sh`` (its stage 1, in the venv of the declared floors) sets
#: TFBNECK_TEST_TIER=floors.
FLOORS = _TIER == "floors"


def in_quick_tier(item) -> bool:
    """The quick tier leaves out TensorFlow jobs (``tf``), the README's fresh-venv run
    (``readme``), tests too slow for it (``slow``), and browser tests except those marked
    ``quick`` (pytest.ini describes each marker)."""
    marks = {m.name for m in item.iter_markers()}
    return not marks & {"tf", "readme", "slow"} and ("browser" not in marks or "quick" in marks)


#: The tests the floors tier leaves out, under why no floor can change their outcome: a floor
#: (an older numpy, protobuf, TensorBoard, scipy, s3fs, Beam...) can break only what calls it,
#: so each of these is either no call of a floor library at all, or one that a kept test makes
#: with the same arguments, where the test adds only our own code on top, which the main
#: environment tests. An entry is a test file, a test (every parametrisation) or, with ``[``,
#: the parametrisations whose id begins so, as pytest names them from the repository root. Which kept tests exercise
#: each floor: tests/README.md, "The lowest-versions job".
FLOORS_LEAVE_OUT = {
    "reads the repository's own text (code, README, manual): no floor library takes part": (
        "tests/test_code_words.py",
        "tests/test_import_graph.py",
        "tests/test_layout.py",
        "tests/test_readme.py",
        "tests/test_package_shape.py::test_only_capture_imports_tensorflow",
        "tests/test_package_shape.py::test_no_function_over_60_code_lines_and_no_module_over_600_lines",
    ),
    "checks that the main environment's storage packages are recent; here they are the floors on purpose": (
        "tests/test_min_versions.py::test_storage_packages_are_current",
    ),
    "odd files, folders, names and outputs met by our code through the standard library (os, stat, "
    "gzip, argparse, the terminal); the decoding of damaged traces stays (test_bad_logdirs: empty, "
    "half-written, garbage, half-written gzip, one host of two; test_cli: bad files beside good ones)": (
        "tests/test_bad_logdirs.py::test_trace_appended_while_analysed",
        "tests/test_bad_logdirs.py::test_empty_session_folder",
        "tests/test_bad_logdirs.py::test_only_an_empty_session_folder",
        "tests/test_bad_logdirs.py::test_session_folder_with_other_files_only",
        "tests/test_bad_logdirs.py::test_unreadable_trace_file",
        "tests/test_bad_logdirs.py::test_unreadable_session_folder",
        "tests/test_bad_logdirs.py::test_unreadable_run_folder",
        "tests/test_bad_logdirs.py::test_something_else_in_place_of_the_trace[dir_trace-",
        "tests/test_bad_logdirs.py::test_something_else_in_place_of_the_trace[fifo_trace-",
        "tests/test_bad_logdirs.py::test_something_else_in_place_of_the_trace[device_trace-",
        "tests/test_bad_logdirs.py::test_something_else_in_place_of_the_trace[dangling_trace-",
        "tests/test_bad_logdirs.py::test_something_else_in_place_of_the_trace[symlink_loop_trace-",
        "tests/test_bad_logdirs.py::test_trace_over_the_size_limit_is_not_read",
        "tests/test_bad_logdirs.py::test_gzip_bomb_is_not_inflated_past_the_limit",
        "tests/test_bad_logdirs.py::test_symlink_loop_in_place_of_a_session",
        "tests/test_bad_logdirs.py::test_symlink_loops_above_the_sessions",
        "tests/test_bad_logdirs.py::test_path_that_is_a_symlink_loop",
        "tests/test_bad_logdirs.py::test_session_folder_with_thousands_of_files",
        "tests/test_bad_logdirs.py::test_non_utf8_names",
        "tests/test_bad_logdirs.py::test_everything_at_once_in_parallel",
        "tests/test_cli.py::test_usage_errors_exit_2",
        "tests/test_cli.py::test_session_folder_and_single_file_paths",
        "tests/test_cli.py::test_run_folders_as_paths_are_named_after_the_folder",
        "tests/test_cli.py::test_runs_sort_naturally",
        "tests/test_cli.py::test_a_bad_path_among_several_is_an_error_row_and_the_rest_is_analysed",
        "tests/test_hostile_outputs.py::test_standard_output_full_is_one_line_and_exit_2",
        "tests/test_hostile_outputs.py::test_standard_output_closed_is_one_line_and_exit_2",
        "tests/test_hostile_outputs.py::test_a_ci_gate_that_could_never_fail_is_refused",
        "tests/test_hostile_outputs.py::test_a_cache_entry_that_is_not_a_regular_file_is_a_miss",
        "tests/test_report_cache.py::test_two_fleet_processes_at_once_leave_a_valid_cache",
        "tests/test_report_cache.py::test_cache_lives_outside_the_logdir_and_follows_xdg",
        "tests/test_report_cache.py::test_changed_trace_torn_entry_and_no_cache",
    ),
    "renders, in our words and layout, numbers that a kept test computes with the same library calls": (
        "tests/test_cli.py::test_step_source_reads_the_same_in_every_format",
        "tests/test_cli.py::test_path_column_in_table_and_markdown",
        "tests/test_cli.py::test_a_corrupt_trace_is_said_once_in_a_terminal",
        "tests/test_cli.py::test_the_table_fits_the_terminal_it_is_shown_in",
        "tests/test_cli.py::test_a_damaged_host_beside_a_good_one_is_said_in_the_table",
        "tests/test_compare.py::test_table_and_markdown_show_the_numbers",
        "tests/test_fleet.py::test_formats_and_fleet_csv",
        "tests/test_fleet.py::test_analyze_csv_carries_fix_window_and_time",
        "tests/test_ops.py::test_analyze_ops_table_shows_the_json_numbers_sorted_and_limited",
        "tests/test_ops.py::test_notebook_display_shows_the_json_numbers",
        "tests/test_trigger_log.py::test_a_run_without_the_trigger_and_bad_input",
        "tests/test_trigger_log.py::test_hostile_trend_files_get_one_line_each_and_the_good_ones_are_still_printed",
        "tests/test_trigger_log.py::test_control_characters_from_a_file_are_escaped_and_paths_as_users_type_them",
    ),
    "our own rules over what a kept test gets from the same library call (scipy's test of the same "
    "steps, the analyzer on the same demo traces, our queue and run facts)": (
        "tests/test_compare.py::test_swapped_pair_fails_the_gate",
        "tests/test_compare.py::test_runs_are_matched_by_name",
        "tests/test_compare.py::test_bad_input_is_one_line",
        "tests/test_compare.py::test_python_api_compare_is_the_cli_json",
        "tests/test_fleet.py::test_accelerator_hours_by_hand",
        "tests/test_fleet.py::test_since_and_trend",
        "tests/test_input_cost.py::test_a_measurement_that_agrees_is_shown_and_keeps_the_confidence",
        "tests/test_input_cost.py::test_a_measurement_that_contradicts_the_verdict_is_the_truth",
        "tests/test_input_cost.py::test_a_confirming_measurement_raises_the_confidence_and_an_unsettled_one_changes_nothing",
        "tests/test_demo_logs.py::test_the_demo_pair_with_its_input_fixed_compares_faster",
        "tests/test_demo_logs.py::test_a_window_opened_on_a_slowdown_names_the_input_whose_work_took_the_models_cores",
        "tests/test_background_queue.py",
    ),
    "the same library calls as a kept test on other data: Beam's one pipeline (test_beam_fleet, and "
    "test_beam's run with two sessions in one group), the tab on a store that refuses (its [closed] case)": (
        "tests/test_beam.py::test_beam_matches_local",
        "tests/test_beam.py::test_beam_unreachable_store_fails_fast",
        "tests/test_remote.py::test_tensorboard_tab_reports_an_unreachable_store_fast[silent]",
    ),
    "spends its CPU on a workload rather than a library call: 50 clients on TensorBoard for 15 s or "
    "more (our plugin's threads; TensorBoard 2.12 serving our routes stays: test_plugin_speed, "
    "test_remote), busy loops of 5 and 10 s read by psutil (psutil's reads of a process tree stay: "
    "test_sampler, test_watch's command mode)": (
        "tests/test_plugin_load.py",
        "tests/test_watch.py::test_busy_loop_is_cpu",
        "tests/test_system_session.py",
    ),
}


def floors_left_out(nodeid: str) -> str:
    """The entry of :data:`FLOORS_LEAVE_OUT` that names test ``nodeid``, else ``""``: a file
    names its tests, a test its parametrisations, and an entry with ``[`` the parametrisations
    whose id begins with what follows it."""
    for entries in FLOORS_LEAVE_OUT.values():
        for entry in entries:
            if "[" in entry:
                if nodeid.startswith(entry):
                    return entry
            elif nodeid == entry or nodeid.startswith(entry + "[") or nodeid.startswith(entry + "::"):
                return entry
    return ""


def in_floors_tier(item) -> bool:
    """The floors tier (tests/run_min_versions.sh, stage 1) runs what starts no TensorFlow
    (``tf``, ``readme``), no browser (``browser``) and needs no docs extra (``docs``), less
    :data:`FLOORS_LEAVE_OUT`."""
    marks = {m.name for m in item.iter_markers()}
    return not marks & {"tf", "readme", "browser", "docs"} and not floors_left_out(item.nodeid)


def stale_floors_entries() -> list:
    """Entries of :data:`FLOORS_LEAVE_OUT` whose file is gone or holds no ``def`` of the test
    named (a renamed test left in the list). A parametrisation's id is not checked: one that
    no longer exists names nothing, and its test runs."""
    stale = []
    for entries in FLOORS_LEAVE_OUT.values():
        for entry in entries:
            path, _, test = entry.partition("::")
            try:
                with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                stale.append(entry)
                continue
            name = test.split("[")[0]
            if name and not re.search(rf"^def {re.escape(name)}\(", text, re.M):
                stale.append(entry)
    return stale


#: Where the stand-in ``tensorflow`` package of the quick tier is.
_NO_TENSORFLOW = os.path.join(HERE, "support", "quick_tier")
_NO_TENSORFLOW_WORDS = "the quick test tier starts no TensorFlow"

if QUICK:
    sys.path.insert(0, _NO_TENSORFLOW)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_NO_TENSORFLOW, os.environ.get("PYTHONPATH")) if p)


def pytest_configure(config):
    if QUICK and "tensorflow" in sys.modules:
        raise pytest.UsageError("the quick tier was asked for, but TensorFlow was imported before the tests began")
    stale = stale_floors_entries() if FLOORS else []
    if stale:
        raise pytest.UsageError("tests/conftest.py FLOORS_LEAVE_OUT names tests that do not exist: " + ", ".join(stale))


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
    tier = in_quick_tier if QUICK else in_floors_tier if FLOORS else None
    if tier is not None:
        keep = [item for item in items if tier(item)]
        config.hook.pytest_deselected(items=[item for item in items if not tier(item)])
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
