"""Makes the small real traces of tests/data/ (one logdir per step finder).

Six are recorded here by real TensorFlow runs on CPU (TensorFlow 2.21, Keras 3, tf-keras),
each in its own process; two are cut from real traces of ``../shared/realtraces`` (the
team's copies of public profiler output, listed in its SOURCES.md) because this machine has
neither a GPU nor a TensorFlow <= 2.4:

==========================  ===================================================================
folder                      how it was made
==========================  ===================================================================
step_markers_tf_keras       tf-keras ``fit``, stock ``TensorBoard(profile_batch=(3, 7))``: tf-keras
                            wraps each step in ``Trace('train', step_num=, _r=1)``
keras_profiled_batch        Keras 3 ``fit``, stock ``TensorBoard(profile_batch=(4, 6))``: Keras 3's
                            ``Profiled batch`` events (step_num, no ``_r``)
train_function_calls        Keras 3 ``fit`` with ``tf.profiler.experimental.start``/``stop`` called
                            from a callback around batches 4-7: no step markers at all
iterator_cadence            a custom loop, ``next(iterator)`` then a ``tf.function`` called
                            ``update``, profiled by ``start``/``stop`` around 6 steps, no markers
user_step_annotations       a custom loop whose steps the user annotated, ``Trace('training_step',
                            step_num=50 + i)`` without ``_r``, two gradient calls per step
session_run                 graph mode: a ``tf.compat.v1.Session`` loop, 5 runs profiled
trace_context_tf24          ``pfe-thesis-gpu/cnn_download128`` (FatmaBouzghaia/PFE_TensorFlow_Profiler,
                            TF ~2.4 Keras ``fit`` on one NVIDIA GPU) cut to steps 7-9
device_steps_gpu_tf24       ``xprof-demo/GPU-multi-worker`` (openxla/xprof ``demo/``, TF 2.4
                            MultiWorkerMirroredStrategy BERT on V100s) cut to its one step on
                            ``/device:GPU:4`` (the other replica's GPU and threads left out)
==========================  ===================================================================

``cache_filling_window`` is not made here: it is the first ``demo_logs/cpu_bound_input_fixed``
run of ``demo_logs/make_demo_logs.py`` (a parallel map, ``cache()`` and ``prefetch`` feeding a
3 x 1024-unit model, batch 32, steps 6-10 profiled while the first pass still fills the cache),
kept for the tests that need a window with the map's work beside the step.

A cut keeps every XEvent that overlaps the time window (host and kept device planes), its
stats, and the metadata that kept events and stats refer to; offsets, durations, names and
stats are the recorded ones. Nothing else is changed.

Usage (from the repository root, with the project's virtual environment)::

    python tests/data/make_traces.py            # remake all eight
    python tests/data/make_traces.py NAME ...   # remake some
    python tests/data/make_traces.py --job NAME LOGDIR   # one TensorFlow job (used by the above)

The tests pin what these files hold (tests/test_step_sources.py): a remade file changes
step times, so update the pinned values with it.
"""
from __future__ import annotations

import glob
import gzip
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REALTRACES = os.path.join(os.path.dirname(ROOT), "shared", "realtraces")
MAX_FILE_BYTES = 300_000  # each committed trace stays small (issue 18.4)

# ----------------------------------------------------------------------------------------
# TensorFlow jobs (run in a child process: ``--job NAME LOGDIR``)
# ----------------------------------------------------------------------------------------


def _dataset(tf, n=512, features=16):
    x = tf.random.stateless_normal([n, features], seed=(1, 2))
    y = tf.random.stateless_uniform([n], seed=(3, 4), maxval=4, dtype=tf.int32)
    # A map with some CPU work, so that the input pipeline shows in the trace.
    return tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (tf.math.tanh(a) * 2.0, b)).batch(16)


def _model(keras):
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def job_fit_tensorboard(logdir, legacy):
    """``fit`` of 10 steps profiled by the stock TensorBoard callback: batches 4-6 (Keras 3),
    3-7 (tf-keras, whose first and last profiled steps are cut by the window)."""
    import tensorflow as tf
    if legacy:
        import tf_keras as keras
    else:
        import keras
    tf.random.set_seed(0)
    _model(keras).fit(_dataset(tf), epochs=1, steps_per_epoch=10, verbose=0,
                      callbacks=[keras.callbacks.TensorBoard(logdir, profile_batch=(3, 7) if legacy else (4, 6))])


def job_fit_profiler_api(logdir):
    """Keras 3 ``fit`` of 10 steps; the profiler started before batch 4 and stopped after 7."""
    import keras
    import tensorflow as tf

    class Window(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 3:
                tf.profiler.experimental.start(logdir)

        def on_train_batch_end(self, batch, logs=None):
            if batch == 6:
                tf.profiler.experimental.stop()

    tf.random.set_seed(0)
    _model(keras).fit(_dataset(tf), epochs=1, steps_per_epoch=10, verbose=0, callbacks=[Window()])


def job_custom_loop(logdir):
    """A custom training loop without any step annotation; steps 3-8 profiled."""
    import tensorflow as tf
    w = tf.Variable(tf.zeros([16, 4]))

    @tf.function
    def update(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, x @ w))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return loss

    it = iter(_dataset(tf).repeat())
    for step in range(10):
        if step == 3:
            tf.profiler.experimental.start(logdir)
        x, y = next(it)
        update(x, y)
        if step == 8:
            tf.profiler.experimental.stop()


def job_annotated_loop(logdir):
    """A custom loop annotated by the user, ``Trace('training_step', step_num=50 + i)`` (no
    ``_r``), two gradient calls per step (gradient accumulation); 4 steps profiled."""
    import tensorflow as tf
    w = tf.Variable(tf.zeros([16, 4]))

    @tf.function
    def gradient(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, x @ w))
        return tape.gradient(loss, w)

    it = iter(_dataset(tf).repeat())
    gradient(*next(it))  # traced before the window
    tf.profiler.experimental.start(logdir)
    for i in range(4):
        with tf.profiler.experimental.Trace("training_step", step_num=50 + i):
            g = gradient(*next(it)) + gradient(*next(it))
            w.assign_sub(0.005 * g)
    tf.profiler.experimental.stop()


def job_session_loop(logdir):
    """Graph mode: a ``tf.compat.v1.Session`` loop feeding placeholders, 5 runs profiled."""
    import numpy as np
    import tensorflow as tf
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None, 16))
        y = tf.compat.v1.placeholder(tf.int32, (None,))
        w = tf.compat.v1.get_variable("w", (16, 4), initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x @ w))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    feeds = [{x: rng.normal(size=(32, 16)).astype("float32"), y: rng.integers(0, 4, 32)} for _ in range(8)]
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(train, feeds[0])  # the first run builds the executors: outside the window
        tf.profiler.experimental.start(logdir)
        for feed in feeds[1:6]:
            sess.run(train, feed)
        tf.profiler.experimental.stop()


JOBS = {
    "step_markers_tf_keras": (lambda d: job_fit_tensorboard(d, legacy=True), {"TF_USE_LEGACY_KERAS": "1"}),
    "keras_profiled_batch": (lambda d: job_fit_tensorboard(d, legacy=False), {}),
    "train_function_calls": (job_fit_profiler_api, {}),
    "iterator_cadence": (job_custom_loop, {}),
    "user_step_annotations": (job_annotated_loop, {}),
    "session_run": (job_session_loop, {}),
}

# ----------------------------------------------------------------------------------------
# Cuts of real traces
# ----------------------------------------------------------------------------------------

#: name -> (source trace under ../shared/realtraces, planes kept besides the host,
#:          how the window is chosen: (plane, line, first event index, last event index))
CUTS = {
    "trace_context_tf24": (
        "pfe-thesis-gpu/cnn_download128/train/plugins/profile/2021_02_02_13_14_02/sandor.xplane.pb",
        ("/device:GPU:0",), ("/host:CPU", "TraceContext", 7, 9)),
    "device_steps_gpu_tf24": (
        "xprof-demo/GPU-multi-worker/plugins/profile/2020_12_23_00_00_00/34.83.195.179_6003.xplane.pb",
        ("/device:GPU:4",), ("/device:GPU:4", "Steps", 0, 0)),
}


def _events(line):
    base = line.timestamp_ns * 1000
    for e in line.events:
        yield e, base + e.offset_ps, base + e.offset_ps + e.duration_ps


def _window(space, how):
    """[start, end] ps of the chosen events: on a named line, or of events with that name."""
    plane_name, what, first, last = how
    plane = next(p for p in space.planes if p.name == plane_name)
    chosen = []
    for line in plane.lines:
        for e, s, t in _events(line):
            if line.name == what or plane.event_metadata[e.metadata_id].name == what:
                chosen.append((s, t))
    chosen.sort()
    lo, hi = chosen[first][0], chosen[last][1]
    # The analyzer drops a step that ends after the last host event (the profiler stopped
    # inside it): reach to the first host event that ends at or after the window, as the
    # whole trace does, so the chosen steps stay complete.
    host = next(p for p in space.planes if p.name == "/host:CPU")
    ends = [t for line in host.lines for _, _, t in _events(line) if t >= hi]
    return lo, min(ends, default=hi)


def _keep_referenced_metadata(plane):
    """Drop event and stat metadata that no kept event, stat or metadata refers to."""
    used_events, used_stats = set(), set()

    def note_stats(stats):
        for st in stats:
            used_stats.add(st.metadata_id)
            if st.WhichOneof("value") == "ref_value":
                used_stats.add(st.ref_value)

    note_stats(plane.stats)
    for line in plane.lines:
        for e in line.events:
            used_events.add(e.metadata_id)
            note_stats(e.stats)
    for mid in list(used_events):
        if mid in plane.event_metadata:
            used_events.update(plane.event_metadata[mid].child_id)
            note_stats(plane.event_metadata[mid].stats)
    for mid in [m for m in plane.event_metadata if m not in used_events]:
        del plane.event_metadata[mid]
    for sid in [s for s in plane.stat_metadata if s not in used_stats]:
        del plane.stat_metadata[sid]


def cut(source, planes, how):
    """The trace at ``source`` restricted to the window ``how`` picks; returns bytes."""
    sys.path.insert(0, ROOT)
    from tfbneck_plugin.trace import xspace
    space = xspace.XSpace()
    with open(source, "rb") as f:
        space.ParseFromString(f.read())
    lo, hi = _window(space, how)
    for plane in list(space.planes):
        if plane.name != "/host:CPU" and plane.name not in planes:
            space.planes.remove(plane)
            continue
        for line in list(plane.lines):
            kept = [e for e, s, t in _events(line) if s < hi and (t > lo or (t == s and s >= lo))]
            del line.events[:]
            line.events.extend(kept)
            if not kept:
                plane.lines.remove(line)
        _keep_referenced_metadata(plane)
    return space.SerializeToString()


# ----------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------


def _install(name, xplane_path, data=None, gzipped=False):
    """Replace tests/data/<name>/ with one session holding the trace (same session and
    host file names as the source; ``gzipped``: as ``<host>.xplane.pb.gz``)."""
    dest_root = os.path.join(HERE, name)
    shutil.rmtree(dest_root, ignore_errors=True)
    session = os.path.basename(os.path.dirname(xplane_path))
    host_file = os.path.basename(xplane_path)
    dest = os.path.join(dest_root, "plugins", "profile", session)
    os.makedirs(dest)
    if data is None:
        with open(xplane_path, "rb") as f:
            data = f.read()
    if gzipped:
        data = gzip.compress(data, mtime=0)  # mtime 0: the same input gives the same bytes
        host_file += ".gz"
    assert len(data) <= MAX_FILE_BYTES, f"{name}: {len(data)} bytes, over {MAX_FILE_BYTES}"
    with open(os.path.join(dest, host_file), "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes -> {os.path.relpath(dest, ROOT)}/{host_file}")


def make_job(name):
    _, env = JOBS[name]
    with tempfile.TemporaryDirectory() as logdir:
        subprocess.run([sys.executable, os.path.abspath(__file__), "--job", name, logdir], check=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env))
        files = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
        assert len(files) == 1, files
        _install(name, files[0])


def make_cut(name):
    rel, planes, how = CUTS[name]
    source = os.path.join(REALTRACES, rel)
    if not os.path.isfile(source):
        sys.exit(f"make_traces.py: {source} is absent: the cuts need the team's ../shared/realtraces")
    _install(name, source, data=cut(source, planes, how), gzipped=True)


def main(argv):
    if argv[:1] == ["--job"]:
        JOBS[argv[1]][0](argv[2])
        return
    for name in argv or list(JOBS) + list(CUTS):
        (make_job if name in JOBS else make_cut)(name)


if __name__ == "__main__":
    main(sys.argv[1:])
