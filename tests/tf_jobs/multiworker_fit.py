"""A 2-worker MultiWorkerMirroredStrategy job on localhost (tf-keras, CPU), each worker
profiled by BottleneckProfiler (steps 6-12 by default).

    multiworker_fit.py --job LOG_DIR SLOW_WORKER MODEL_UNITS [FIRST LAST]   # both workers
    multiworker_fit.py LOG_DIR INDEX PORT0 PORT1 SLOW_WORKER MODEL_UNITS [FIRST LAST]   # one
    multiworker_fit.py --data tests/data/multiworker   # remake the committed real jobs

Worker ``i`` writes ``LOG_DIR/worker<i>``. SLOW_WORKER: index of the worker whose tf.data
map is sequential and heavy (``MAP_PASSES`` passes of sin/cos per element: about 1.5 ms each
here, 16 elements per step, against ~10 ms steps; -1: none). MODEL_UNITS: width of the two
hidden dense layers (1024: ~1.1 M parameters, so the all-reduce dominates the step).

Keras 3's ``fit`` under MultiWorkerMirroredStrategy fails with TensorFlow 2.21 (a
``PerReplica`` value cannot be converted to a tensor), so the job uses tf-keras
(``TF_USE_LEGACY_KERAS=1``, set by :func:`run_job`).
"""
import json
import os
import socket
import subprocess
import sys
import time

MAP_PASSES = 1000
#: Attempts of a job whose worker was killed by a signal. TensorFlow 2.21's profiler aborts
#: the process now and then when it stops while this job's heavy map runs (``free(): invalid
#: pointer`` in tsl::profiler::TraceMeRecorder::Consume / SplitEventTracker, seen here in
#: about one run in three); that is TensorFlow's crash, not the analyzer's, so the job is
#: run again. Any other failure is raised at once.
ATTEMPTS = 3


def free_ports(n):
    """``n`` TCP ports free on localhost now (the OS picks them)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_job(log_dir, slow_worker, units, steps=(6, 12), timeout_s=240):
    """Run both workers of one job until both finish; raises RuntimeError (with the workers'
    last output) when it fails for another reason than a signal, or ``ATTEMPTS`` times."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    history = []  # each failed attempt's exit codes and last output line per worker: the message shows them all
    for attempt in range(ATTEMPTS):
        ports = [str(p) for p in free_ports(2)]
        logs = [f"{log_dir}.worker{i}.log" for i in range(2)]
        procs = []
        for i in range(2):
            with open(logs[i], "w") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), log_dir, str(i), *ports, str(slow_worker), str(units),
                     str(steps[0]), str(steps[1])], stdout=out, stderr=subprocess.STDOUT, env=env))
        deadline = time.monotonic() + timeout_s
        try:
            codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
                p.wait()
            raise RuntimeError(f"multi-worker job did not finish in {timeout_s} s") from None
        if codes == [0, 0]:
            return
        tails = [open(f).read()[-1500:] for f in logs]
        history.append(f"attempt {attempt + 1}: exit codes {codes}, last lines "
                       + " | ".join((t.strip().splitlines() or [""])[-1][:200] for t in tails))
        if not any(c < 0 for c in codes) or attempt == ATTEMPTS - 1:
            raise RuntimeError("multi-worker job failed:\n" + "\n".join(history) + "\nlast attempt's output:\n"
                               + "\n---\n".join(tails))
        _remove(log_dir)  # a crashed worker leaves a partial staging window: start clean


#: The real jobs committed under tests/data/multiworker (made by ``--data``): name ->
#: (slow worker, model units, profiled steps).
DATA_JOBS = {"straggler": (1, 64, (6, 12)), "balanced": (-1, 1024, (6, 12))}


def make_data(dest):
    """Run the :data:`DATA_JOBS` and copy their sessions into ``dest/<name>/`` (traces
    gzipped, sidecars as written)."""
    import glob
    import gzip
    import shutil
    import tempfile
    for name, (slow, units, steps) in DATA_JOBS.items():
        tmp = tempfile.mkdtemp(prefix="tfbneck-mw-")
        try:
            run_job(os.path.join(tmp, "logs"), slow, units, steps=steps)
            _remove(os.path.join(dest, name))
            for folder in glob.glob(os.path.join(tmp, "logs", "worker*", "plugins", "profile", "*")):
                rel = os.path.relpath(folder, os.path.join(tmp, "logs"))
                os.makedirs(os.path.join(dest, name, rel))
                for f in os.listdir(folder):
                    src, out = os.path.join(folder, f), os.path.join(dest, name, rel, f)
                    if f.endswith(".xplane.pb"):
                        with open(src, "rb") as fi, gzip.open(out + ".gz", "wb", compresslevel=9) as fo:
                            shutil.copyfileobj(fi, fo)
                    else:
                        shutil.copy(src, out)
        finally:
            _remove(tmp)


def _remove(path):
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def worker(log_dir, index, port0, port1, slow, units, first, last):
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{port0}", f"localhost:{port1}"]},
                                          "task": {"type": "worker", "index": index}})
    import tensorflow as tf
    import tf_keras as keras

    from tfbneck_plugin import BottleneckProfiler

    tf.config.threading.set_inter_op_parallelism_threads(2)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def heavy(x, y):
        for _ in range(MAP_PASSES):  # sequential CPU work per element: this worker's input is the limit
            x = tf.math.sin(x) * 1.0001 + tf.math.cos(x) * 0.0001
        return x, y

    features = tf.random.normal([4096, 64], seed=1)
    labels = tf.random.uniform([4096], 0, 10, tf.int32, seed=2)
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
    if index == slow:
        options = tf.data.Options()
        options.experimental_optimization.map_parallelization = False
        ds = ds.map(heavy).with_options(options)
    ds = ds.batch(32)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.with_options(options)
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(units, activation="relu"),
                                  keras.layers.Dense(units, activation="relu"), keras.layers.Dense(10)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    profiler = BottleneckProfiler(os.path.join(log_dir, f"worker{index}"), profile_steps=(first, last), analyze=False)
    model.fit(ds, epochs=1, steps_per_epoch=last + 4, verbose=0, callbacks=[profiler])
    print("DONE", index)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--data":
        make_data(args[1])
    elif args and args[0] == "--job":
        window = tuple(int(a) for a in args[4:6]) or (6, 12)
        run_job(args[1], int(args[2]), int(args[3]), steps=window)
    else:
        log, idx, p0, p1, slow_w, width = args[0], int(args[1]), args[2], args[3], int(args[4]), int(args[5])
        first_step, last_step = (int(args[6]), int(args[7])) if len(args) > 7 else (6, 12)
        worker(log, idx, p0, p1, slow_w, width, first_step, last_step)
