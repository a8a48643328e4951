"""Real training jobs for tests/test_callback.py, one scenario per process.

    python jobs.py SCENARIO OUT_DIR

TensorFlow's profiler is one per process and tf-keras must be chosen (TF_USE_LEGACY_KERAS=1)
before TensorFlow is imported, so each scenario runs in a fresh interpreter. A scenario
writes ``OUT_DIR/result.json`` (what the test cannot see from the files alone: window
records, losses, profiler state after fit) and its log dirs under OUT_DIR; the test reads
the traces, sidecars and analyzer output itself.
"""
import json
import os
import sys
import time

import numpy as np

SCENARIO, OUT = sys.argv[1], os.path.abspath(sys.argv[2])

if os.environ.get("JOB_HIDE_PANDAS") == "1":
    # As on a fresh install without pandas: TensorFlow imports pandas when it can, which
    # imports concurrent.futures.thread early; without it, tf.summary imports it lazily at
    # its first use, which fails on a thread while the interpreter shuts down (issue 12 pt 4).
    sys.modules["pandas"] = None

import tensorflow as tf  # noqa: E402

if SCENARIO == "distributed":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from tfbneck_plugin import BottleneckProfiler, profile_steps  # noqa: E402
from tfbneck_plugin.capture.callback import WindowRecord  # noqa: E402

keras = tf.keras
LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
result = {"keras": "tf_keras" if LEGACY else "keras3", "out": OUT}


def seed(n=0):
    np.random.seed(n)
    tf.random.set_seed(n)
    if hasattr(keras.utils, "set_random_seed"):
        keras.utils.set_random_seed(n)


def model(spe=1, width=32):
    m = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(width, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile(keras.optimizers.SGD(0.01), "mse", steps_per_execution=spe)
    return m


def arrays(n):
    rng = np.random.RandomState(1)
    x = rng.rand(n, 8).astype("float32")
    return x, (x.sum(axis=1, keepdims=True) * 0.5).astype("float32")


def slow_dataset(n_batches, batch=8, delay_s=0.06):
    """A pipeline whose steps take ~delay_s (py_function sleep), so that a 3-step window
    spans a few sampler intervals."""
    x, y = arrays(n_batches * batch)

    def slow(i):
        time.sleep(delay_s)
        return i

    def add_delay(xb, yb):
        d = tf.py_function(slow, [tf.constant(0)], tf.int32)
        with tf.control_dependencies([d]):
            return tf.identity(xb), yb

    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).map(add_delay)


def record(w: WindowRecord):
    return {"index": w.index, "requested": [list(r) for r in w.requested], "status": w.status,
            "reason": w.reason, "session_dir": w.session_dir, "steps": list(w.steps) if w.steps else None,
            "markers": [list(m) for m in w.markers], "closed_by": w.closed_by,
            "bottleneck": (w.report or {}).get("bottleneck"), "step_source": (w.report or {}).get("step_source"),
            "analysis_error": w.analysis_error}


def losses(history):
    return [float(v) for v in history.history["loss"]]


def read_scalars(log_dir):
    """tag -> [(step, value)] from the event files directly in log_dir: a float for a scalar,
    the string for a text summary."""
    out = {}
    for name in sorted(os.listdir(log_dir)):
        if not name.startswith("events.out.tfevents"):
            continue
        for raw in tf.data.TFRecordDataset(os.path.join(log_dir, name)):
            ev = tf.compat.v1.Event.FromString(raw.numpy())
            for v in ev.summary.value:
                if not v.HasField("tensor"):
                    value = v.simple_value
                elif v.tensor.dtype == tf.string.as_datatype_enum:
                    value = tf.make_ndarray(v.tensor).item().decode("utf-8")
                else:
                    value = float(tf.make_ndarray(v.tensor))
                out.setdefault(v.tag, []).append([int(ev.step), value])
    return out


def xprof_steps(session_dir):
    """XProf's own input-pipeline analysis of the trace: its step rows and conclusion."""
    from xprof.convert import raw_to_tool_data
    path = [os.path.join(session_dir, f) for f in os.listdir(session_dir) if f.endswith(".xplane.pb")][0]
    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "input_pipeline_analyzer", {})
    tables = json.loads(data)
    return {"rows": [row["c"][0]["v"] for row in tables[1].get("rows", [])],
            "input_conclusion": tables[1].get("p", {}).get("input_conclusion", "")}


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_snapshot():
    """The machine's busy CPU time and this process tree's CPU time, read from /proc
    directly (proc(5)): an oracle independent of the sampler and of psutil."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    parents, cpu = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            parents[int(name)] = int(fields[1])
            cpu[int(name)] = int(fields[11]) + int(fields[12])  # utime + stime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p and c not in tree]
        tree.update(kids)
        frontier.extend(kids)
    return {"t": time.monotonic(), "busy_s": (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK,
            "tree_s": sum(cpu.get(p, 0) for p in tree) / CLK_TCK, "self_s": cpu.get(os.getpid(), 0) / CLK_TCK,
            "children": len(tree) - 1}


class ProcMeter(keras.callbacks.Callback):
    """Takes a proc_snapshot at the beginning of chosen global steps (1-based, spe=1). One
    placed before BottleneckProfiler in the callback list reads before its window opens,
    one placed after reads after the window closed."""

    def __init__(self, at_steps, readings):
        super().__init__()
        self.at, self.readings, self.step = set(at_steps), readings, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.step += 1
        if self.step in self.at:
            self.readings[self.step] = proc_snapshot()


def metered(cb, first, after_last):
    """[meter before, cb, meter after] and the dict their readings go to."""
    readings = {}
    return [ProcMeter({first}, readings), cb, ProcMeter({after_last}, readings)], readings


def meter_result(readings, first, after_last):
    """What the oracle saw between the window's opening and closing: wall s, the tree's CPU
    s, cores busy with other processes, children."""
    a, b = readings[first], readings[after_last]
    wall = b["t"] - a["t"]
    tree = b["tree_s"] - a["tree_s"]
    return {"wall_s": round(wall, 3), "tree_cpu_s": round(tree, 3), "children": b["children"],
            "children_cpu_s": round(tree - (b["self_s"] - a["self_s"]), 3),
            "others_cores": round(max(b["busy_s"] - a["busy_s"] - tree, 0.0) / wall, 3),
            "cpu_count": os.cpu_count()}


# ------------------------------------------------------------------------------------------
def basic():
    """Acceptance 1: profile_steps=(3, 5) in a plain fit."""
    seed()
    log = os.path.join(OUT, "logs")
    cb = BottleneckProfiler(log, profile_steps=(3, 5), sample_interval_s=0.05)
    m = model()
    m.fit(slow_dataset(8), epochs=1, verbose=0, callbacks=[cb])
    cb.close(wait=True, timeout=120)
    w = cb.windows[0]
    result["windows"] = [record(w) for w in cb.windows]
    result["xprof"] = xprof_steps(w.session_dir)
    result["scalars"] = read_scalars(log)
    if LEGACY:
        import tensorflow.compat.v2 as tfc
        from tensorflow.python.profiler.trace import Trace
        result["marker_filter_removed"] = tfc.profiler.experimental.Trace is Trace
        # tf-keras converts logs to numpy (a device sync) per batch unless every callback
        # with batch hooks accepts tensors.
        cl = keras.callbacks.CallbackList([cb], model=m)
        result["no_per_batch_sync"] = bool(cl._batch_hooks_support_tf_logs)
    else:
        # Keras 3 may dispatch batch-end hooks asynchronously (backends that allow it) only
        # when no callback defines on_train_batch_end.
        result["no_per_batch_sync"] = bool(getattr(type(cb).on_train_batch_end, "_is_default", False))


def schedules():
    """Acceptance 2: steps_per_execution=4, two ranges, a periodic schedule."""
    out = {}
    x, y = arrays(24 * 8)
    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "spe4"), profile_steps=[(5, 8), (14, 15)], analyze=False)
    model(spe=4).fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb], shuffle=False)
    cb.close()
    out["spe4"] = [record(w) for w in cb.windows]

    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "spe4_inside"), profile_steps=(3, 5), analyze=False)
    model(spe=4).fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb], shuffle=False)
    cb.close()
    out["spe4_inside"] = [record(w) for w in cb.windows]

    # (3, 5) and (6, 8) both fall in executions 1-4 and 5-8: one session covers both.
    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "spe4_merged"), profile_steps=[(3, 5), (6, 8)], analyze=False)
    model(spe=4).fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb], shuffle=False)
    cb.close()
    out["spe4_merged"] = [record(w) for w in cb.windows]

    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "ranges"), profile_steps=[(3, 4), (8, 10)], analyze=False)
    model().fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb], shuffle=False)
    cb.close()
    out["ranges"] = [record(w) for w in cb.windows]

    # Periodic, across epochs (10 batches each) with validation between them: windows
    # 4-5, 10-11 (10 ends epoch 1, 11 starts epoch 2) and 16-17.
    seed()
    x2, y2 = arrays(80)
    cb = BottleneckProfiler(os.path.join(OUT, "periodic"), profile_steps=profile_steps(every=6, length=2, start=4),
                            analyze=False)
    model().fit(x2, y2, batch_size=8, epochs=2, verbose=0, callbacks=[cb], shuffle=False,
                validation_data=(x2[:16], y2[:16]))
    cb.close()
    out["periodic"] = [record(w) for w in cb.windows]

    # In epochs (issue 26): steps 3-4 of epochs 1 and 3 (10 batches each): 3-4 and 23-24.
    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "epochs"), analyze=False,
                            profile_steps=profile_steps(every_epochs=2, length=2, epoch_step=3))
    model().fit(x2, y2, batch_size=8, epochs=3, verbose=0, callbacks=[cb], shuffle=False)
    cb.close()
    out["epochs"] = [record(w) for w in cb.windows]

    # The cap counts executions: (5, 24) touches 5 executions of 4 batches; a cap of 3 cuts it there.
    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "spe4_cap"), profile_steps=(5, 24), max_window_steps=3, analyze=False)
    model(spe=4).fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb], shuffle=False)
    cb.close()
    out["spe4_cap"] = [record(w) for w in cb.windows]
    result.update(out)


def distributed():
    """Acceptance 3: MirroredStrategy over two logical CPUs; a custom tf.function loop;
    a train_on_batch loop."""
    x, y = arrays(16 * 8)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    result["replicas"] = strategy.num_replicas_in_sync
    with strategy.scope():
        m = model()
    cb = BottleneckProfiler(os.path.join(OUT, "mirrored"), profile_steps=(3, 5))
    m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb])
    cb.close(wait=True, timeout=120)
    result["mirrored"] = [record(w) for w in cb.windows]

    # Custom loop: a tf.function step, driven by the step API.
    m = model()
    opt = keras.optimizers.SGD(0.01)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(m(xb, training=True) - yb))
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))
        return loss

    with BottleneckProfiler(os.path.join(OUT, "custom"), profile_steps=(3, 5)) as prof:
        for xb, yb in ds:
            with prof.step():
                train_step(xb, yb)
    prof.wait_for_analysis(120)
    result["custom"] = [record(w) for w in prof.windows]

    # train_on_batch never calls batch callbacks: the step API covers it.
    m = model()
    prof = BottleneckProfiler(os.path.join(OUT, "on_batch"), profile_steps=(3, 5))
    for i, (xb, yb) in enumerate(ds, start=1):
        with prof.step(step_num=i):
            m.train_on_batch(xb, yb)
    prof.close(wait=True, timeout=120)
    result["on_batch"] = [record(w) for w in prof.windows]


def other_profiler():
    """Acceptance 4a: another profiler session is running when the window comes."""
    from tensorflow.python.profiler import profiler_v2
    x, y = arrays(10 * 8)
    seed()
    result["losses_without"] = losses(model().fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False))
    other_dir = os.path.join(OUT, "other")
    tf.profiler.experimental.start(other_dir)
    theirs = profiler_v2._profiler
    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "logs"), profile_steps=(3, 5))
    result["losses_with"] = losses(model().fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False, callbacks=[cb]))
    result["theirs_still_running"] = profiler_v2._profiler is theirs and theirs is not None
    tf.profiler.experimental.stop()  # the other owner stops it: its trace must be intact
    result["windows"] = [record(w) for w in cb.windows]
    result["other_dir"] = other_dir


def disabled():
    """Acceptance 4b: TF_DISABLE_PROFILING=1 (set by the test)."""
    from tensorflow.python.profiler import profiler_v2
    x, y = arrays(10 * 8)
    seed()
    result["losses_without"] = losses(model().fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False))
    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "logs"), profile_steps=(3, 5))
    result["losses_with"] = losses(model().fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False, callbacks=[cb]))
    result["windows"] = [record(w) for w in cb.windows]
    result["profiler_state_clean"] = profiler_v2._profiler is None


def robustness():
    """Unwritable log_dir, training ending inside a window, a failing sampler."""
    from tfbneck_plugin.system import sampler as sysmetrics
    x, y = arrays(8 * 8)
    seed()
    result["losses_without"] = losses(model().fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False))

    blocker = os.path.join(OUT, "a_file")
    with open(blocker, "w") as f:
        f.write("not a folder")
    seed()
    cb = BottleneckProfiler(os.path.join(blocker, "logs"), profile_steps=(3, 5))
    result["losses_unwritable"] = losses(model().fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False,
                                                     callbacks=[cb]))
    result["unwritable"] = [record(w) for w in cb.windows]

    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "ended"), profile_steps=(6, 12))
    model().fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
    cb.close(wait=True, timeout=120)
    result["ended_inside"] = [record(w) for w in cb.windows]

    def broken(self, psutil, now):
        raise RuntimeError("injected sampler failure")

    original = sysmetrics.SystemSampler._take  # each sample goes through _take
    sysmetrics.SystemSampler._take = broken
    try:
        seed()
        cb = BottleneckProfiler(os.path.join(OUT, "sampler"), profile_steps=(3, 5), sample_interval_s=0.01)
        result["losses_sampler"] = losses(model().fit(slow_dataset(8, delay_s=0.03), epochs=1, verbose=0,
                                                      callbacks=[cb]))
        cb.close(wait=True, timeout=120)
    finally:
        sysmetrics.SystemSampler._take = original
    result["sampler"] = [record(w) for w in cb.windows]

    # An exception inside a window (here from another callback at step 4): fit raises;
    # the next fit with the same callback saves what the window recorded and goes on.
    class Boom(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 3 and not getattr(self, "done", False):
                self.done = True
                raise RuntimeError("boom")

    cb = BottleneckProfiler(os.path.join(OUT, "interrupted"), profile_steps=(3, 6), analyze=False)
    m = model()
    try:
        m.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[cb, Boom()])
        result["boom_raised"] = False
    except RuntimeError:
        result["boom_raised"] = True
    from tensorflow.python.profiler import profiler_v2
    result["profiler_running_after_exception"] = profiler_v2._profiler is not None
    m.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
    cb.close()
    result["interrupted"] = [record(w) for w in cb.windows]

    # A custom loop that leaves a window open when the interpreter exits: saved at exit.
    global LEFT_OPEN
    LEFT_OPEN = BottleneckProfiler(os.path.join(OUT, "left_open"), profile_steps=(3, 6), analyze=False)
    step = tf.function(lambda a: tf.reduce_sum(tf.matmul(a, a)))
    for _ in range(4):
        with LEFT_OPEN.step():
            step(tf.ones((64, 64)))


def cpu_vs_io():
    """Acceptance 5: the same py_function pipeline shape, CPU-bound or sleeping.

    The job measures, independently of the sampler, how busy other processes kept the
    machine during each window (ProcMeter); a window during which they kept half the
    machine or more busy is run again, at most 3 times, and the test judges the last one
    knowing how busy the machine was."""
    def pipeline(kind):
        def work(i):
            if kind == "cpu":  # numpy sorts release the GIL: two calls keep both cores busy
                t = time.perf_counter()
                while time.perf_counter() - t < 0.06:
                    np.sort(np.random.rand(200000))
            elif kind == "gil":  # pure Python: one core's worth, under the GIL
                t = time.perf_counter()
                n = 0
                while time.perf_counter() - t < 0.03:
                    n += 1
            else:  # stand-in for slow storage: the CPU idles while waiting
                time.sleep(0.06 if kind == "sleep" else 0.03)
            return np.full((8,), float(i.numpy() % 7), np.float32)

        def fn(i):
            v = tf.py_function(work, [i], tf.float32)
            v.set_shape((8,))
            return v, tf.reduce_sum(v, keepdims=True)

        par = 1 if kind == "gil" else 2
        return tf.data.Dataset.range(400).map(fn, num_parallel_calls=par).batch(4).prefetch(1)

    for kind in ("cpu", "sleep", "gil"):
        meters = []
        for attempt in range(3):
            seed()
            cb = BottleneckProfiler(os.path.join(OUT, f"{kind}{attempt or ''}"), profile_steps=(4, 9))
            callbacks, readings = metered(cb, 4, 10)
            model().fit(pipeline(kind), epochs=1, steps_per_epoch=11, verbose=0, callbacks=callbacks)
            cb.close(wait=True, timeout=120)
            meters.append(meter_result(readings, 4, 10))
            if meters[-1]["others_cores"] < 0.5 * meters[-1]["cpu_count"]:
                break
        result[kind] = [record(w) for w in cb.windows]
        result[kind + "_meters"] = meters


def short_window():
    """Issue 12 pt 3: (3, 5) on a small model fed from arrays: a window of milliseconds,
    with the default sampling interval and with one longer than the whole fit."""
    x, y = arrays(10 * 8)
    for name, interval in (("default", 0.1), ("long_interval", 10.0)):
        seed()
        cb = BottleneckProfiler(os.path.join(OUT, name), profile_steps=(3, 5), sample_interval_s=interval,
                                analyze=name == "default")
        model().fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
        cb.close(wait=True, timeout=120)
        result[name] = [record(w) for w in cb.windows]


def exit_scalars():
    """Issue 12 pt 4: the window (3, 5) ends two steps before training (7 steps) does and
    the script ends right after fit, without close(): the background analysis finishes
    while the interpreter shuts down. The test reads the event file after the exit."""
    x, y = arrays(7 * 8)
    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "logs"), profile_steps=(3, 5))
    model().fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
    result["windows"] = [record(w) for w in cb.windows]
    result["analysis_done_at_fit_end"] = cb.windows[0].report is not None
    result["log_dir"] = cb.log_dir


def no_step():
    """Issue 12 pt 5: a profiler created for a train_on_batch loop but never told of a step,
    closed twice; then the same loop with profiler.step() as a control."""
    x, y = arrays(8 * 8)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    m = model()
    silent = BottleneckProfiler(os.path.join(OUT, "silent"), profile_steps=(3, 5))
    for xb, yb in ds:
        m.train_on_batch(xb, yb)
    silent.close()
    silent.close()
    result["silent"] = [record(w) for w in silent.windows]
    result["silent_log_dir_exists"] = os.path.exists(silent.log_dir)
    counted = BottleneckProfiler(os.path.join(OUT, "counted"), profile_steps=(3, 5), analyze=False)
    for xb, yb in ds:
        with counted.step():
            m.train_on_batch(xb, yb)
    counted.close()
    result["counted"] = [record(w) for w in counted.windows]


def pydataset_mp():
    """Issue 11 kind 4: a Keras 3 PyDataset with two worker processes
    (use_multiprocessing=True) doing the input work; window (4, 9) metered by /proc."""
    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            t = time.process_time()  # 40 ms of CPU in the worker process per batch
            while time.process_time() - t < 0.04:
                pass
            x = np.random.RandomState(i).rand(8, 8).astype("float32")
            return x, x.sum(axis=1, keepdims=True) * 0.5

    seed()
    cb = BottleneckProfiler(os.path.join(OUT, "logs"), profile_steps=(4, 9), analyze=False)
    callbacks, readings = metered(cb, 4, 10)
    model().fit(Batches(workers=2, use_multiprocessing=True, max_queue_size=1), epochs=1, verbose=0,
                callbacks=callbacks)
    cb.close()
    result["windows"] = [record(w) for w in cb.windows]
    result["meter"] = meter_result(readings, 4, 10)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    globals()[SCENARIO]()
    result["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(OUT, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
