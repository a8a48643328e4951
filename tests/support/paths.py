"""Where things are, for every test file and test helper: the repository root, the tests,
their committed data, and the shared folder (real traces and failing cases kept beside the
repository: ``$TFBNECK_SHARED``, else ``../shared``)."""
import os

#: The repository root (the folder holding setup.py and tfbneck_plugin/).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")
#: Small real traces committed with the tests (made by tests/data/make_traces.py).
DATA = os.path.join(TESTS, "data")
DEMO_LOGS = os.path.join(ROOT, "demo_logs")
#: The shared folder: ``$TFBNECK_SHARED`` when set (point it at a missing folder to run the
#: tests as in a user's clone), else ``shared`` beside the repository.
SHARED = os.environ.get("TFBNECK_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")
REALTRACES = os.path.join(SHARED, "realtraces")
