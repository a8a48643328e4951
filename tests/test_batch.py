"""The batch driver (tfbneck_plugin.batch): every front door's discovery and analysis."""
import json
import os

import pytest

from tfbneck_plugin import batch
from tfbneck_plugin.analysis.grouping import group_jobs
from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.cli.main import main as cli_main
from tfbneck_plugin.logdir import DiscoveryError
from support.paths import DATA, DEMO_LOGS


def test_overlapping_paths_name_each_session_once():
    alone, _ = batch.discover([DEMO_LOGS])
    both, _ = batch.discover([DEMO_LOGS, os.path.join(DEMO_LOGS, "compute_bound")])
    assert len(alone) > 5
    assert [s.path for s in both] == [s.path for s in alone]


def test_the_cli_prints_what_analyze_paths_returns(tmp_path):
    """One driver: `tfbneck analyze --format json` holds the reports of analyze_paths, the
    workers of a multi-worker job grouped into one."""
    folder = os.path.join(DATA, "multiworker")
    reports, problems = batch.analyze_paths([folder])
    out = tmp_path / "r.json"
    assert cli_main(["analyze", folder, "--format", "json", "--output", str(out)]) == 0
    printed = json.loads(out.read_text())["sessions"]
    assert json.loads(json.dumps(reports)) == printed
    assert any(r.get("kind") == "job" for r in reports)
    sessions, _ = batch.discover([folder])
    assert len(reports) < len(sessions)  # the workers were grouped
    # analyze_many: each session's report (analyze_one) with what its run's trend files say.
    assert group_jobs(batch.analyze_many(sessions)) == reports
    assert batch.analyze_one(sessions[0]) == analyze_session(sessions[0])


def test_no_session_is_one_line_naming_the_paths(tmp_path):
    with pytest.raises(DiscoveryError) as err:
        batch.analyze_paths([str(tmp_path)])
    assert str(err.value) == batch.no_session_message([str(tmp_path)])
    assert str(err.value).startswith(f"no profiling session found under {tmp_path} (looked for <run>/plugins")
    assert "\n" not in str(err.value)


def test_parallel_analysis_gives_the_same_reports():
    sessions, _ = batch.discover([DEMO_LOGS])
    assert batch.analyze_many(sessions[:3], jobs=2) == batch.analyze_many(sessions[:3], jobs=1)
