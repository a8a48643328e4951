"""A bursty input on a real Keras fit: a PyDataset whose every fourth batch takes 100 ms to make
while the others are ready at once. The window's slow steps wait for their batch; they stay in
the breakdown and the verdict (analysis/odd_steps.py, INPUT_WAIT_SHARE), so the report reads the
input as the limit with most of the step waiting, not a fast input with an outlier set aside."""
import os
import subprocess
import sys
import textwrap

import pytest

from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.logdir import find_sessions

pytestmark = pytest.mark.tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JOB = textwrap.dedent('''
    import sys, time
    import numpy as np
    import keras
    from tfbneck_plugin import BottleneckProfiler

    class Bursty(keras.utils.PyDataset):
        """Batches 3, 7, 11, ... take 100 ms of waiting (a slow read); the rest none."""
        def __len__(self):
            return 60

        def __getitem__(self, i):
            if i % 4 == 3:
                time.sleep(0.1)
            rng = np.random.default_rng(i)
            return rng.random((32, 16), dtype=np.float32), rng.integers(0, 4, 32)

    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(Bursty(), epochs=1, verbose=0,
              callbacks=[BottleneckProfiler(sys.argv[1], profile_steps=(31, 46), analyze=False, verbose=0)])
''')


def test_slow_steps_that_wait_for_input_stay_in_the_verdict(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "logs")], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (session,) = find_sessions(str(tmp_path / "logs")).sessions
    report = analyze_session(session)
    kept = [e for e in report["evidence"] if "kept in the breakdown and the verdict" in e]
    outliers = set((report["steps"].get("outliers") or {}).get("steps", []))
    # Four of sixteen steps wait about 100 ms, the others about a millisecond: most of the window waits,
    # and none of the waiting steps is set aside (named as kept where they were slow enough to be outliers).
    assert report["breakdown_pct"]["input"] >= 50.0, (report["breakdown_pct"], outliers, report["evidence"])
    assert kept or not outliers, report["evidence"]
    if kept:
        named = kept[0].split("what the other steps do. ")[-1]  # after the outliers' sentence, if any
        assert named.count("ms of it waiting for input") >= 2, kept[0]
    # The verdict names the input (whether it waits or computes is another rule's, tests/test_rules*.py).
    assert report["cause"] in ("file_read", "input_preprocessing"), (report["bottleneck"], report["cause"])
