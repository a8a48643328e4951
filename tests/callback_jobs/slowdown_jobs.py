"""Real Keras 3 fits for tests/test_slowdown.py (issue 15, issue 16 point 3), one scenario per
process (TensorFlow's profiler is one per process).

    python slowdown_jobs.py SCENARIO OUT_DIR

A scenario writes ``OUT_DIR/result.json``: the window records, what the job measured itself
(/proc readings around the triggered window, its own step clock), and where its logs are.
The test reads the traces, sidecars, trend files and event files itself.

The pipeline: ``Dataset.range(n).map(element, num_parallel_calls=2).batch(4).prefetch(1)``;
``element(i)`` is a few TensorFlow ops (microseconds) until element ``heavy_from``, and from
there on also a ``tf.py_function`` that sorts random arrays with numpy for ``heavy_s`` seconds
(numpy releases the GIL: two parallel calls keep both cores busy): CPU-bound preprocessing
that starts half-way, as an augmentation switched on at a later epoch.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

SCENARIO, OUT = sys.argv[1], os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

from jobs import meter_result, proc_snapshot, read_scalars, record, seed  # noqa: E402
from tfbneck_plugin import BottleneckProfiler, SlowdownTrigger  # noqa: E402

keras = tf.keras
BATCH = 4
result = {"out": OUT}
HEAVY_T0 = []  # perf_counter when the map made its first heavy element


def pipeline(n_steps: int, heavy_from_step: int, heavy_s: float, light_s: float = 0.0,
             worse_from_step: int = 10 ** 9, worse_s: float = 0.0):
    """``n_steps`` batches; from batch ``heavy_from_step`` (1-based) on, every element costs
    ``heavy_s`` seconds of numpy work (``worse_s`` from batch ``worse_from_step``); before,
    ``light_s`` seconds of waiting (a sleep, as a read: no CPU) when above 0."""
    heavy_from = (heavy_from_step - 1) * BATCH
    worse_from = (worse_from_step - 1) * BATCH

    def wait_for(i):
        time.sleep(light_s)
        return np.float32(i.numpy() % 7)

    def sort_for(i):
        t = time.perf_counter()
        if not HEAVY_T0:
            HEAVY_T0.append(t)
        cost = worse_s if i.numpy() >= worse_from else heavy_s
        while time.perf_counter() - t < cost:
            np.sort(np.random.rand(100000))
        return np.float32(i.numpy() % 7)

    def element(i):
        light = (lambda: tf.py_function(wait_for, [i], tf.float32)) if light_s > 0 else \
            (lambda: tf.cast(i % 7, tf.float32))
        v = tf.reshape(tf.cond(i >= heavy_from, lambda: tf.py_function(sort_for, [i], tf.float32), light), [])
        x = tf.fill((8,), v)
        return x, tf.reduce_sum(x, keepdims=True)

    ds = tf.data.Dataset.range(n_steps * BATCH).map(element, num_parallel_calls=2)
    return ds.batch(BATCH).prefetch(1)


def model():
    m = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile(keras.optimizers.SGD(0.01), "mse")
    return m


class StepClock(keras.callbacks.Callback):
    """The job's own step clock (placed before the profiler): begin time of every step."""

    def __init__(self):
        super().__init__()
        self.t = []

    def on_train_batch_begin(self, batch, logs=None):
        self.t.append(time.perf_counter())


class WindowMeter(keras.callbacks.Callback):
    """Placed after the profiler: reads /proc (jobs.proc_snapshot) at the step a triggered
    window opened and at the step after it closed, so the test knows how busy other
    processes kept the machine meanwhile."""

    def __init__(self, prof):
        super().__init__()
        self.prof, self.step, self.readings, self.opened = prof, 0, {}, None

    def on_train_batch_begin(self, batch, logs=None):
        self.step += 1
        w = self.prof.windows[-1] if self.prof.windows else None
        if w is None or w.kind != "triggered":
            return
        if w.status == "open" and self.opened is None:
            self.opened = self.step
            self.readings[self.step] = proc_snapshot()
        elif w.status != "open" and self.opened is not None and "end" not in result:
            self.readings[self.step] = proc_snapshot()
            result["meter"] = meter_result(self.readings, self.opened, self.step)
            result["end"] = self.step


def trend_file(log_dir):
    folder = os.path.join(log_dir, "plugins", "bottleneck")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [os.path.join(folder, n) for n in names if n.startswith("steptimes_")]  # not the system record


def finish(prof, log_dir, clock, timeout=300):
    prof.close(wait=True, timeout=timeout)
    result["windows"] = [dict(record(w), kind=w.kind, trigger=w.trigger,
                              change=w.change, cause=(w.report or {}).get("cause")) for w in prof.windows]
    result["log_dir"] = log_dir
    result["trend_files"] = trend_file(log_dir)
    result["scalars"] = read_scalars(log_dir)
    result["step_begin_s"] = clock.t


def slowdown():
    """Acceptance 1: scheduled window (30, 34) early; the map turns heavy at step 400; the
    step-time statistics every 20 steps (one epoch: the trend is a line)."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(30, 34), on_slowdown=True, step_time_every=20)
    clock = StepClock()
    model().fit(pipeline(560, 400, 0.03), epochs=1, verbose=0, callbacks=[clock, prof, WindowMeter(prof)])
    result["heavy_from_step"] = 400
    finish(prof, log, clock)


def steady():
    """Acceptance 2: the same light pipeline all along, 3 epochs of 6,000 steps."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(30, 34), on_slowdown=True)
    clock = StepClock()
    model().fit(pipeline(6000, 10 ** 9, 0.0), epochs=3, verbose=0, callbacks=[clock, prof])
    finish(prof, log, clock)


class Spinners(keras.callbacks.Callback):
    """From ``at_s`` seconds after the first step, ``count`` processes that only spin for
    ``for_s`` seconds, started through a shell that exits at once: they are not the job's
    children (as another user's job on the machine), so the trigger's CPU check applies.
    ``nice``: theirs (below 0 needs root; without it they run at 0)."""

    def __init__(self, clock, at_s, for_s, count=2, nice=0):
        super().__init__()
        self.clock, self.at_s, self.for_s, self.t0, self.started = clock, at_s, for_s, None, None
        self.count, self.nice = count, nice

    def on_train_batch_begin(self, batch, logs=None):
        now = time.perf_counter()
        self.t0 = self.t0 or now
        if self.started is None and now - self.t0 > self.at_s:
            spin = f"nice -n {self.nice} timeout {self.for_s} sh -c 'while :; do :; done'"
            subprocess.run(["sh", "-c", " ; ".join([f"({spin} &)"] * self.count)], check=True)
            self.started = now
            result["spinners_at_step"] = len(self.clock.t)
        if self.started is not None and now - self.started > self.for_s + 3:
            self.model.stop_training = True


def contended():
    """Issue 24: the steady job (1-2 ms steps, one window at steps 30-34 not analysed: no analysis
    child; its session is what ``tfbneck analyze`` reads), and from 8 s on four other processes take
    the CPU for 12 s (:class:`Spinners`: with two, on 2 cores, a CI run's steps were only 1.43x
    slower, within the trigger's factor, so nothing was tested. Four at nice 0 held the job's
    median step only 1.04-1.3x slower in 4 of 6 runs here, the job at nice 5 too: the scheduler
    favours a thread that wakes after sleeping, as a step of 1 ms waiting on its input does. At
    nice -10 (root) they do slow it, 3 runs of 3, and the test compares mean step times)."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(30, 34), analyze=False, on_slowdown=True)
    clock = StepClock()
    model().fit(pipeline(6000, 10 ** 9, 0.0), epochs=5, verbose=0,
                callbacks=[clock, Spinners(clock, 8.0, 12, count=4, nice=-10), prof])
    finish(prof, log, clock, timeout=30)


class StopAfterHeavy(keras.callbacks.Callback):
    """Stops the fit ``seconds`` after the map made its first heavy element (HEAVY_T0), so
    that the slow phase lasts that long on an idle machine as on a busy one."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        if HEAVY_T0 and time.perf_counter() - HEAVY_T0[0] > self.seconds:
            self.model.stop_training = True


def too_late():
    """The map turns heavy at step 1000 and training stops 7 s later; the trigger wants 10 s.
    (At step 380 once: the baseline arms after 0.25 s of steps past the window at steps 30-34,
    which on steps of 0.72 ms is step 381, after the switch; 1000 leaves room down to 0.27 ms.)"""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(30, 34), analyze=False,
                              on_slowdown=SlowdownTrigger(min_seconds=10.0))
    clock = StepClock()
    model().fit(pipeline(3000, 1000, 0.03), epochs=1, verbose=0, callbacks=[clock, prof, StopAfterHeavy(7.0)])
    result["heavy_from_step"] = 1000
    result["steps_run"] = len(clock.t)
    finish(prof, log, clock)


def display():
    """Issue 16 pt 3: display=True outside a notebook; steps_per_execution=4, two epochs."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(9, 12), display=True)
    m = model()
    m.compile(keras.optimizers.SGD(0.01), "mse", steps_per_execution=4)
    clock = StepClock()
    m.fit(pipeline(200, 10 ** 9, 0.0), epochs=2, verbose=0, callbacks=[clock, prof])
    prof.wait_for_analysis(300)
    w = prof.windows[0]
    result["report_type"] = f"{type(w.report).__module__}.{type(w.report).__name__}"
    result["report_html"] = w.report._repr_html_() if hasattr(w.report, "_repr_html_") else None
    result["report_is_dict"] = isinstance(w.report, dict)
    result["display_flag"] = prof.display
    finish(prof, log, clock)


# ----------------------------------------------------------------------------------------
# Issue 24: the scenario corpus (benchmarks/slowdown_corpus.py) and the issue's own fit
# ----------------------------------------------------------------------------------------

class Phases:
    """When the input turns slow, decided per batch by the input pipeline itself.

    ``phases``: ``[[onset_s, slow_s], ...]``: from ``onset_s`` seconds of the job's clock
    (counted from its third step, after tracing and compilation) on, every batch the map
    makes also runs ``reps`` small matrix products (TensorFlow ops in tf.data's threads: no
    GIL, recorded in the trace as input work), for ``slow_s`` seconds, then it is light
    again. ``reps`` is steered by :class:`ScenarioClock` so that the steps take ``factor``
    times the base step time (the median of the job's own steps before the first onset), on
    an idle machine or a loaded one.

    ``prelude``: ``[factor, until_s, nominal_ms]``: from the first batch until ``until_s``
    seconds of the job's clock the map is heavier too (a slower start, as a first epoch
    that warms a cache): ``factor - 1`` times ``nominal_ms`` of products per batch, not
    steered. The base step time is then measured after it."""

    def __init__(self, phases, factor, spe, prelude=None):
        self.phases, self.factor, self.spe = [list(p) for p in phases], factor, spe
        self.prelude = prelude
        self.prelude_reps = 0
        self.prelude_last = None  # the last batch the prelude made heavier
        self.t0 = None      # the job's clock starts at its third step
        self.base_s = None  # per batch
        self.reps = 0       # matrix products per batch while slow
        self.unit_s = None  # seconds per product (measured at the start)
        self.seen = [[None, None, None, None] for _ in phases]  # first/last heavy batch, t0, t1

    def active(self):
        """The slow phase now, or None."""
        if self.t0 is None or self.base_s is None:
            return None
        now = time.perf_counter()
        for (onset, slow_s), seen in zip(self.phases, self.seen):
            if now - self.t0 >= onset and (seen[2] is None or now - seen[2] < slow_s):
                return seen
        return None

    def reps_for(self, batch):
        if self.prelude and (self.t0 is None or time.perf_counter() - self.t0 < self.prelude[1]):
            self.prelude_last = batch
            return self.prelude_reps
        seen = self.active()
        if seen is None:
            return 0
        now = time.perf_counter()
        if seen[2] is None:
            seen[0], seen[2] = batch, now
            self.reps = max(1, int((self.factor - 1) * self.base_s / self.unit_s))
        seen[1], seen[3] = batch, now
        return self.reps


PRODUCT = 96  # size of the square matrices of the heavy map


def scenario_pipeline(spec, phases, n_batches):
    """Batches of ``spec['batch']`` rows of ``spec['features']`` features; from the first
    onset on, each batch asks ``Phases.reps_for`` (a py_function: microseconds) how many
    matrix products to run (a ``tf.while_loop``), 0 outside a slow phase."""
    b, f = spec["batch"], spec["features"]
    heavy_from = 1 if spec["phases"] or spec.get("prelude") else 10 ** 12
    w = tf.constant(np.random.RandomState(2).rand(PRODUCT, PRODUCT).astype("float32") / PRODUCT)

    def reps(i):
        return np.int32(phases.reps_for(int(i.numpy()) + 1))

    def heavy(i):
        n = tf.reshape(tf.py_function(reps, [i], tf.int32), [])
        _, m = tf.while_loop(lambda k, m: k < n, lambda k, m: (k + 1, tf.tanh(tf.matmul(m, w))),
                             [tf.constant(0), tf.eye(PRODUCT)])
        return 1.0 + 0.0 * tf.reduce_sum(m)

    def make(i):
        v = tf.cond(i + 1 >= heavy_from, lambda: heavy(i), lambda: tf.constant(1.0))
        x = tf.random.stateless_uniform((b, f), seed=tf.stack([i, i])) * v
        return x, tf.reduce_sum(x, axis=1, keepdims=True)

    return tf.data.Dataset.range(n_batches).map(make).prefetch(2)


def product_seconds():
    """Seconds per matrix product of the heavy map (measured once, in a tf.function)."""
    w = tf.constant(np.random.rand(PRODUCT, PRODUCT).astype("float32") / PRODUCT)

    @tf.function
    def loop(n):
        _, m = tf.while_loop(lambda k, m: k < n, lambda k, m: (k + 1, tf.tanh(tf.matmul(m, w))),
                             [tf.constant(0), tf.eye(PRODUCT)])
        return tf.reduce_sum(m)
    loop(tf.constant(10))
    t = time.perf_counter()
    loop(tf.constant(2000)).numpy()
    return (time.perf_counter() - t) / 2000


def scenario_model(spec):
    layers = [keras.layers.Input((spec["features"],))]
    layers += [keras.layers.Dense(spec["width"], activation="relu") for _ in range(spec["depth"])]
    m = keras.Sequential(layers + [keras.layers.Dense(1)])
    m.compile(keras.optimizers.SGD(1e-4), "mse", steps_per_execution=spec.get("spe", 1))
    return m


def machine_jiffies():
    """(busy, total) jiffies of all the machine's cores since boot (/proc/stat's first line;
    busy = all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])  # guest time is already inside user
    return total - v[3] - v[4], total


class ScenarioClock(keras.callbacks.Callback):
    """Before the profiler: the begin time of every step; measures the base step time
    before the first onset; stops the fit ``tail_s`` after the last slow phase (or after
    ``steady_s`` for a steady run)."""

    def __init__(self, spec, phases):
        super().__init__()
        self.spec, self.phases, self.t = spec, phases, []
        self.cpu = []       # this process's CPU seconds (all threads) at each step's begin
        self.machine = []   # (step index, the machine's busy and total jiffies) every 16 steps
        self.stop = False

    def on_train_batch_begin(self, batch, logs=None):
        self.t.append(time.perf_counter())
        self.tick()

    def tick(self):
        t, ph, spec = self.t, self.phases, self.spec
        now = t[-1]
        self.cpu.append(time.process_time())
        if len(t) % 16 == 1:
            self.machine.append((len(t) - 1,) + machine_jiffies())
        if len(t) == 3:
            ph.t0 = now
        if ph.t0 is None:
            return
        elapsed = now - ph.t0
        lead = min(0.5, (spec["phases"][0][0] - ph.prelude[1]) / 2) if ph.prelude and spec["phases"] else 0.5
        if ph.base_s is None and spec["phases"] and elapsed >= spec["phases"][0][0] - lead:
            if ph.prelude:  # the steps after the prelude: the level the slowdown is steered from
                d = np.diff([x for x in t if x >= ph.t0 + ph.prelude[1] + 0.05])
                d = d if len(d) >= 4 else np.diff(t[-5:])
            else:
                d = np.diff(t[2 + (len(t) - 2) // 3:]) if len(t) > 8 else np.array([0.01])
            ph.base_s = float(np.median(d)) / ph.spe
        self.steer()
        if elapsed > spec.get("max_s", 150):
            self.stop = True  # a safety net: a scenario never runs away
        elif not spec["phases"]:
            self.stop = elapsed > spec["steady_s"]
        else:
            last = ph.seen[-1][2]
            self.stop = last is not None and now > last + spec["phases"][-1][1] + spec["tail_s"]
        if self.stop and getattr(self, "model", None) is not None:
            self.model.stop_training = True


    def steer(self):
        """Inside a slow phase, every 8 steps: scale ``reps`` so that the median of the last
        16 steps comes to ``factor`` x the base step time (a loaded machine slows the map too)."""
        ph, t = self.phases, self.t
        seen = ph.active()
        if seen is None or seen[2] is None or len(t) < 18 or len(t) % 8:
            return
        recent = np.diff(t[-17:])
        if t[-17] < seen[2]:
            return  # not 16 slow steps yet
        measured = float(np.median(recent)) / ph.spe
        target = ph.factor * ph.base_s
        ratio = min(1.25, max(0.8, (target / measured) ** 0.5))  # gently: the machine's load comes and goes
        ph.reps = int(max(1, min(ph.reps * ratio, 10 ** 6)))


def corpus():
    """One scenario of the corpus: the JSON spec in ``$SLOWDOWN_SPEC`` (keys: api keras|loop,
    batch, features, width, depth, spe, steps_per_epoch, phases, factor, tail_s, steady_s,
    profile_steps, trigger (SlowdownTrigger kwargs or null for the defaults))."""
    spec = json.loads(os.environ["SLOWDOWN_SPEC"])
    seed()
    log = os.path.join(OUT, "logs")
    trig = SlowdownTrigger(**spec["trigger"]) if spec.get("trigger") else True
    prof = BottleneckProfiler(log, profile_steps=tuple(spec["profile_steps"]) if spec["profile_steps"] else [],
                              on_slowdown=trig, verbose=0)
    phases = Phases(spec["phases"], spec.get("factor", 1.0), spec.get("spe", 1), spec.get("prelude"))
    phases.unit_s = product_seconds()
    if phases.prelude:
        factor0, _, nominal_ms = phases.prelude
        phases.prelude_reps = max(1, int((factor0 - 1) * nominal_ms / 1e3 / phases.unit_s))
    clock = ScenarioClock(spec, phases)
    n = spec["steps_per_epoch"] * spec.get("epochs", 1)
    ds = scenario_pipeline(spec, phases, 10 ** 7)
    m = scenario_model(spec)
    if spec["api"] == "loop":
        opt, loss = keras.optimizers.SGD(1e-4), keras.losses.MeanSquaredError()

        @tf.function
        def train(x, y):
            with tf.GradientTape() as tape:
                lo = loss(y, m(x, training=True))
            opt.apply_gradients(zip(tape.gradient(lo, m.trainable_variables), m.trainable_variables))
            return lo
        for step, (x, y) in enumerate(ds.take(n), start=1):
            clock.t.append(time.perf_counter())
            clock.tick()
            if clock.stop:
                break
            with prof.step(step):
                train(x, y)
    else:
        spin = [Spinners(clock, *spec["spinners"])] if spec.get("spinners") else []
        m.fit(ds, steps_per_epoch=spec["steps_per_epoch"], epochs=spec.get("epochs", 1), verbose=0,
              callbacks=[clock] + spin + [prof])
    # A steady run needs no verdict (only whether a window was triggered): no long wait for
    # the scheduled window's analysis, which a busy machine starves.
    finish(prof, log, clock, timeout=300 if spec["phases"] else 10)
    result["phases"] = phases.seen
    result["base_s"] = phases.base_s
    result["prelude_last"] = phases.prelude_last
    result["cpu_s"] = clock.cpu
    result["machine_jiffies"] = clock.machine
    result["clk_tck"] = os.sysconf("SC_CLK_TCK")
    result["spec"] = spec


def worse():
    """Issue 25 point 7: the same bottleneck getting worse. Input-bound from the start (each
    element 4 ms of numpy work), 4x heavier from step 360 of two epochs of 300 steps; a
    scheduled window early, the trigger in the heavier phase. Step times per epoch (the
    default): the scheduled window's own-clock figure is its epoch's, not the heavier next
    one's (a newcomer's trial took it from the next epochs)."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(30, 34), on_slowdown=True)
    clock = StepClock()
    model().fit(pipeline(600, 1, 0.004, worse_from_step=360, worse_s=0.016).repeat(), epochs=2, steps_per_epoch=300,
                verbose=0, callbacks=[clock, prof])
    result["worse_from_step"] = 360
    finish(prof, log, clock)


def issue24():
    """The fit of issue 24: one epoch of 140 steps, ``profile_steps=(5, 8)``, the map turns
    heavy from batch 60 (about 100 ms a step) to the end; the early steps are ~10-20 ms as in
    the issue (each element waits 5 ms before: 4 elements, 2 at a time)."""
    seed()
    log = os.path.join(OUT, "logs")
    prof = BottleneckProfiler(log, profile_steps=(5, 8), on_slowdown=True)
    clock = StepClock()
    model().fit(pipeline(140, 60, 0.05, light_s=0.005), epochs=1, verbose=0, callbacks=[clock, prof])
    result["heavy_from_step"] = 60
    finish(prof, log, clock)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    globals()[SCENARIO]()
    result["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(OUT, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    # TensorFlow 2.21 can hang for good at interpreter exit when it destroys the iterator of a
    # fit stopped mid-epoch (MapAndBatchDatasetOp::Iterator::~Iterator waits for map calls
    # that never come; seen with gdb, no window open). The results are written and the
    # profiler closed: leave without the interpreter's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
