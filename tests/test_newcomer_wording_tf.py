"""Report wording a newcomer's tutorial-style Keras fit showed wrong, on a real Keras 3 fit run
here (its job's text below): three epochs of 200 batches from a tf.data pipeline with no
``.prefetch()``, profiled at steps 10-14, the verdict line printed while Keras' progress bar
draws its epoch in a real terminal (tmux)."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from support.paths import ROOT
from support.trend_files import set_window_overhead

#: Real TensorFlow fits: run alone (tests/run.sh), never beside another TensorFlow job.
pytestmark = [pytest.mark.tf]  # nothing here is timed: beside another job it holds

#: The job: 6,400 rows in batches of 32 (200 batches an epoch), a parallel map and no prefetch
#: (tf.data may add its own), a small MLP, 3 epochs; each batch's end waits 25 ms (a callback)
#: so that an epoch lasts about 5 s and the window's analysis ends while the bar is drawn.
JOB = r'''
import os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras, numpy as np, tensorflow as tf
from tfbneck_plugin import BottleneckProfiler
log_dir, verbose, done = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
x = rng.random((6400, 64), dtype=np.float32)
y = rng.integers(0, 10, 6400)
ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (tf.math.tanh(a), b),
                                                    num_parallel_calls=tf.data.AUTOTUNE).batch(32)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
class Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.025)
model.fit(ds, epochs=3, verbose=verbose, callbacks=[Slow(), BottleneckProfiler(log_dir, profile_steps=(10, 14))])
open(done, "w").write("DONE")
'''


def _tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def fit_in_a_terminal(tmp_path_factory):
    """Runs the job with Keras' progress bar (verbose=1) in a 200x50 tmux terminal; returns
    (its log_dir, the terminal's text, its lines joined where they wrapped)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    tmp = tmp_path_factory.mktemp("newcomer_fit")
    job, logs, done = tmp / "job.py", tmp / "logs", tmp / "done"
    job.write_text(JOB)
    script = tmp / "run.sh"
    script.write_text(f"export PYTHONPATH={ROOT}\nunset TF_USE_LEGACY_KERAS\n"
                      f"{sys.executable} {job} {logs} 1 {done}\nsleep 600\n")
    name = f"tfbneck-newcomer-{os.getpid()}"
    _tmux("kill-session", "-t", name)
    assert _tmux("new-session", "-d", "-s", name, "-x", "200", "-y", "50", f"bash {script}").returncode == 0
    try:
        deadline = time.monotonic() + 240
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(1)
        screen = _tmux("capture-pane", "-p", "-J", "-t", name, "-S", "-500").stdout
        assert done.exists(), screen
    finally:
        _tmux("kill-session", "-t", name)
    return logs, screen


def test_the_verdict_line_starts_its_own_line_under_the_progress_bar(fit_in_a_terminal):
    """Keras' bar redraws its line with '\\r' and no newline until the epoch ends
    (keras/src/utils/progbar.py); the callback's verdict line, written to the same terminal
    while it is drawn, begins a line of its own and leaves no blank line."""
    _logs, screen = fit_in_a_terminal
    lines = screen.splitlines()
    ours = [i for i, line in enumerate(lines) if "tfbneck: steps 10-14" in line]
    assert ours, screen
    for i in ours:
        assert lines[i].startswith("tfbneck: steps 10-14"), screen
    assert not any("━" in line and "tfbneck:" in line for line in lines), screen
    assert any(line.startswith("Epoch 3/3") for line in lines), screen


def test_the_later_steps_advised_fit_the_runs_200_batch_epochs(fit_in_a_terminal, tmp_path, monkeypatch):
    """The trend file's points give the epoch (200 batches), which the report's window carries;
    a window whose traced step the job's clock shows faster than its own (its overhead set as
    test_fleet's does, 0.7x) is advised steps in the middle of the second epoch, inside it, and
    the batches it drew on are said to be held by the buffers the trace shows."""
    import tfbneck_plugin as tfb
    from tfbneck_plugin.runs import read_run
    logs, _screen = fit_in_a_terminal
    run = tmp_path / "run"
    shutil.copytree(logs, run)
    (session,) = os.listdir(run / "plugins" / "profile")
    assert read_run(str(run)).epochs == {session: 200}
    monkeypatch.setenv("TFBNECK_CACHE_DIR", str(tmp_path / "cache"))
    before = tfb.analyze(str(run))
    report = before["run"]
    assert report["window"]["epoch_batches"] == 200 and report["window"]["steps"] == [10, 14]
    set_window_overhead(run, report["steps"]["step_time_ms"]["mean"], 0.7)
    after = tfb.analyze(str(run))
    (said,) = [e for e in after["run"]["evidence"] if e.startswith("By the job's own clock")]
    assert "an epoch here has 200 batches: e.g. profile_steps=(298, 302), the middle of epoch 2" in said, said
    kinds = {st["kind"] for st in report["input_pipeline"]["stages"]}
    assert ("held by a Prefetch stage" in said) == ("Prefetch" in kinds), (kinds, said)
    assert "prefetch filled" not in said
