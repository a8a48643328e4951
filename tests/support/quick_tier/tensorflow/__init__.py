"""Stands in for TensorFlow in the quick test tier (``bash tests/run.sh --quick``).

The quick tier promises that no TensorFlow job starts: tests/conftest.py puts this folder first
on ``sys.path`` and on ``PYTHONPATH`` (so processes the tests start see it too), and any
``import tensorflow`` ends here. ``ImportError`` keeps code that probes for TensorFlow (as
TensorBoard does) on its TensorFlow-free path; a test that skips because of this message
fails instead (tests/conftest.py), so no TensorFlow test passes silently as a skip.
"""
raise ImportError("the quick test tier starts no TensorFlow (tests/support/quick_tier): "
                  "mark this test @pytest.mark.tf")
