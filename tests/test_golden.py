"""The reports of demo_logs, ../shared/realtraces and ../shared/cases match the golden
files in tests/golden/ (made by tests/golden/make_goldens.py): every key and value there is
still here. New keys may appear; nothing may change or disappear."""
import json
import os

import pytest

from conftest import need_shared
from golden.make_goldens import INPUTS, reports_for
from support.paths import TESTS

HERE = TESTS


def differences(golden, current, where="$"):
    """Paths where ``current`` lacks or changes what ``golden`` holds (added keys are fine)."""
    if isinstance(golden, dict):
        if not isinstance(current, dict):
            return [f"{where}: was an object, now {type(current).__name__}"]
        out = []
        for k, v in golden.items():
            if k not in current:
                out.append(f"{where}.{k}: missing")
            else:
                out.extend(differences(v, current[k], f"{where}.{k}"))
        return out
    if isinstance(golden, list):
        if not isinstance(current, list) or len(current) != len(golden):
            return [f"{where}: list of {len(golden)} became {current!r:.80}"]
        return [d for i, (g, c) in enumerate(zip(golden, current)) for d in differences(g, c, f"{where}[{i}]")]
    if isinstance(golden, float) and isinstance(current, (int, float)):
        return [] if abs(golden - current) <= 1e-9 * max(1.0, abs(golden)) else [f"{where}: {golden} -> {current}"]
    return [] if golden == current else [f"{where}: {golden!r:.80} -> {current!r:.80}"]


def test_differences_sees_changes_and_allows_added_keys():
    assert differences({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2], "c": 3}) == []
    assert differences({"a": 1}, {"a": 2}) == ["$.a: 1 -> 2"]
    assert differences({"a": {"x": 1}}, {"a": {}}) == ["$.a.x: missing"]
    assert differences({"b": [1, 2]}, {"b": [1]})


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_reports_match_golden(name):
    folder = INPUTS[name] if name == "demo_logs" else need_shared(INPUTS[name], f"../shared/{name}")
    with open(os.path.join(HERE, "golden", f"{name}.json"), encoding="utf-8") as f:
        golden = json.load(f)
    current = json.loads(json.dumps(reports_for(folder)))
    diffs = differences(golden, current)
    assert not diffs, f"{len(diffs)} differences from tests/golden/{name}.json:\n" + "\n".join(diffs[:40])
