import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
REALTRACES = os.path.join(SHARED, "realtraces")
DEMO_LOGS = os.path.join(ROOT, "demo_logs")
ARTIFACTS = os.path.join(HERE, "_artifacts")

if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def realtraces():
    """Path of ../shared/realtraces (real profiler output from public projects)."""
    if not os.path.isdir(REALTRACES):
        pytest.skip(f"real traces not available: {REALTRACES} is absent (it sits beside the project "
                    "in the team's checkout, not in a user's clone)")
    return REALTRACES


@pytest.fixture(scope="session")
def artifacts():
    os.makedirs(ARTIFACTS, exist_ok=True)
    return ARTIFACTS


def tfbneck_cmd():
    """The installed console script, falling back to ``python -m``."""
    exe = os.path.join(os.path.dirname(sys.executable), "tfbneck")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "tfbneck_plugin.cli"]
