"""Writes the golden reports that tests/test_golden.py compares against.

Run from the repository root: ``python tests/golden/make_goldens.py``. One JSON file per
input folder (``demo_logs``, and ``../shared/realtraces`` and ``../shared/cases`` where
present), each the ``sessions`` list of ``tfbneck analyze --format json`` with the parts
that depend on the machine (absolute paths, the tool's version) taken out.

Regenerate only in a commit that changes a verdict on purpose, so that the diff of the
golden file shows the change.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: where the one paths helper is
from support.paths import ROOT, SHARED  # noqa: E402

#: golden file name -> folder it is made from
INPUTS = {
    "demo_logs": os.path.join(ROOT, "demo_logs"),
    "realtraces": os.path.join(SHARED, "realtraces"),
    "cases": os.path.join(SHARED, "cases"),
}


def normalise(session: dict, root: str) -> dict:
    """Drops what depends on where the files are and which version made the report."""
    out = dict(session)
    out.pop("version", None)
    if isinstance(out.get("path"), str):
        out["path"] = os.path.relpath(out["path"], root)
    return out


def reports_for(folder: str) -> list:
    from tfbneck_plugin.analysis.session import analyze_session
    from tfbneck_plugin.logdir import find_sessions

    found = find_sessions(folder)
    sessions = sorted(found.sessions, key=lambda s: (s.run, s.name))
    return [normalise(analyze_session(s), folder) for s in sessions]


def main() -> int:
    for name, folder in INPUTS.items():
        if not os.path.isdir(folder):
            print(f"skipped {name}: {folder} is absent", file=sys.stderr)
            continue
        path = os.path.join(HERE, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(reports_for(folder), f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
