"""The whole run's system view from the callback (issue 28, acceptance 3): a real Keras fit
with the default BottleneckProfiler leaves a few ``system/*`` scalars over the whole run in its
event file (read back with TensorBoard's own reader) and a system record, with every figure and
the triage per interval, that the tab's trend view draws beside the step time (real
TensorBoard, headless Chromium). Plus the triage rules at their thresholds."""
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from tfbneck_plugin.system import triage

FIT = r"""
import sys, time, numpy as np, tensorflow as tf
from tfbneck_plugin import BottleneckProfiler
x = np.random.rand(2048, 256).astype("float32"); y = np.random.rand(2048, 1).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
m = tf.keras.Sequential([tf.keras.Input((256,)), tf.keras.layers.Dense(512, activation="relu"), tf.keras.layers.Dense(1)])
m.compile("sgd", "mse")
cb = BottleneckProfiler(sys.argv[1], profile_steps=(10, 12), verbose=0)

class Clock(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.t0 = time.time()
    def on_train_batch_end(self, batch, logs=None):
        if time.time() - self.t0 > 14:
            self.model.stop_training = True
clock = Clock()
m.fit(ds, epochs=1, steps_per_epoch=10**6, callbacks=[cb, clock], verbose=0)
cb.close()
print(clock.t0, time.time())
"""


@pytest.fixture(scope="module")
def fit_logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("sysview") / "run1"
    out = subprocess.run([sys.executable, "-c", FIT, str(logdir)], capture_output=True, text=True, timeout=400,
                         env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.returncode == 0, out.stderr[-3000:]
    t0, t1 = map(float, out.stdout.split()[-2:])
    return str(logdir), t0, t1


def _scalars(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray
    ea = EventAccumulator(logdir, size_guidance={"tensors": 0})
    ea.Reload()
    return {t: [(e.step, e.wall_time, float(make_ndarray(e.tensor_proto))) for e in ea.Tensors(t)]
            for t in ea.Tags()["tensors"] if t.startswith("system/")}


@pytest.mark.tf
def test_fit_leaves_system_scalars_over_the_whole_run(fit_logdir):
    logdir, t0, t1 = fit_logdir
    scalars = _scalars(logdir)
    # The machine's CPU, this process's cores and the other processes': no accelerator here, so no GPU tag.
    assert sorted(scalars) == ["system/cpu_pct", "system/other_cores", "system/process_cores"]
    points = scalars["system/process_cores"]
    assert len(points) >= 2  # one per 10 s interval, the last one partial
    walls = [w for _, w, _ in points]
    assert min(walls) < t0 + 15 and max(walls) >= t1 - 2  # from the first interval to the fit's end
    assert all(0 < v <= 2.5 for _, _, v in points)  # the fit used the CPU, at most the machine's cores
    assert [s for s, _, _ in points] == sorted(s for s, _, _ in points)
    (path,) = glob.glob(os.path.join(logdir, "plugins", "bottleneck", "system_*.json"))
    record = json.load(open(path))
    assert len(record["intervals"]) == len(points)
    covered = sum(iv["dt_s"] for iv in record["intervals"])
    assert covered >= 0.8 * (t1 - t0)
    for tag, key in (("system/cpu_pct", "cpu_pct"), ("system/process_cores", "tree_cores"),
                     ("system/other_cores", "other_cores")):  # each point is its interval's figure
        assert [v for _, _, v in scalars[tag]] == pytest.approx([iv[key] for iv in record["intervals"]],
                                                                rel=1e-6, abs=1e-6), tag
    assert {iv["triage"]["bottleneck"] for iv in record["intervals"]} <= set(triage.KINDS)
    assert record["triage"]["bottleneck"] in ("cpu", "unclear")  # no accelerator here: never device, io or network
    if record["triage"]["bottleneck"] == "cpu":
        assert "cannot tell them apart" in record["triage"]["caveat"]


@pytest.mark.tf
@pytest.mark.browser
def test_trend_view_draws_the_system_series(fit_logdir):
    from support.browser_tab import Tab
    from support.plugin_helpers import TensorBoard, chromium_context
    logdir, _, _ = fit_logdir
    (path,) = glob.glob(os.path.join(logdir, "plugins", "bottleneck", "system_*.json"))
    record = json.load(open(path))
    with TensorBoard(os.path.dirname(logdir)) as tb, chromium_context() as ctx:
        status, _, body = tb.get("trend")
        assert status == 200
        (run,) = json.loads(body)["runs"]
        system = run["jobs"][0]["system"]
        assert [iv["bottleneck"] for iv in system["intervals"]] == [iv["triage"]["bottleneck"]
                                                                    for iv in record["intervals"]]
        tab = Tab(ctx, tb, "system")
        tab.fl.locator(".tfb-tab[data-mode=trend]").click()
        tab.frame.wait_for_function("() => { const c = document.querySelector('.tfb-system-canvas'); "
                                    "return c && c.dataset.chart === 'ready'; }", timeout=60_000)
        tab.page.wait_for_timeout(300)
        info = tab.frame.evaluate("""() => { const c = document.querySelector('.tfb-system-canvas');
            return {intervals: Number(c.dataset.intervals), triage: c.dataset.triage,
                    line: document.querySelector('.tfb-system-triage').textContent}; }""")
        assert info["intervals"] == len(record["intervals"])
        assert info["triage"] == ",".join(iv["triage"]["bottleneck"] for iv in record["intervals"])
        assert f"Triage from the system metrics: {record['triage']['bottleneck']}" in info["line"]
        tab.shot("trend-system")
        tab.close()


def _iv(**kw):
    base = {"tree_cores": 0.1, "busiest_thread_demand_pct": 10.0, "runq_wait_pct": 0.0, "net_recv_MBps": 0.0,
            "net_sent_MBps": 0.0, "tree_disk_read_MBps": 0.0, "iowait_pct": 0.0, "gpus": []}
    base.update(kw)
    return base


def _gpu(util):
    return [{"index": 0, "util_pct": util, "mem_used_gb": 1.0}]


@pytest.mark.parametrize("kw, kind", [
    (dict(gpus=_gpu(90.5)), "device"),
    (dict(gpus=_gpu(90.0)), "io"),                          # not above 90 %: the CPU is idle, so it waits
    (dict(busiest_thread_demand_pct=90.0), "cpu"),
    (dict(busiest_thread_demand_pct=89.9, tree_cores=0.5), "unclear"),
    (dict(tree_cores=1.8, busiest_thread_demand_pct=60.0), "cpu"),   # fills 90 % of 2 cores
    (dict(tree_cores=1.79, busiest_thread_demand_pct=60.0), "unclear"),
    # the machine full (every htop bar) and the tree holding at least half of it
    (dict(tree_cores=1.0, cores_busy=1.8, busiest_thread_demand_pct=60.0), "cpu"),
    (dict(tree_cores=0.99, cores_busy=1.8, busiest_thread_demand_pct=60.0), "unclear"),
    (dict(tree_cores=1.79, cores_busy=1.79, busiest_thread_demand_pct=60.0), "unclear"),
    (dict(runq_wait_pct=50.0), "cpu"),
    (dict(runq_wait_pct=49.9), "io"),
    (dict(net_recv_MBps=1.0, net_sent_MBps=0.25), "network"),
    (dict(net_recv_MBps=1.0, net_sent_MBps=0.24), "io"),
    (dict(tree_cores=0.34), "io"),
    (dict(tree_cores=0.35), "unclear"),
])
def test_triage_at_its_thresholds(kw, kind):
    t = triage.triage_interval(_iv(**kw), cpu_count=2)
    assert t["bottleneck"] == kind, t
    assert ("caveat" in t) == (kind == "cpu" and not kw.get("gpus"))


def test_a_thread_that_mostly_waits_for_a_core_is_contention_not_a_single_thread_limit():
    waits = triage.triage_interval(_iv(busiest_thread_demand_pct=99.0, busiest_thread_pct=17.0, other_cores=1.2),
                                   cpu_count=2)
    runs = triage.triage_interval(_iv(busiest_thread_demand_pct=99.0, busiest_thread_pct=95.0), cpu_count=2)
    assert waits["bottleneck"] == runs["bottleneck"] == "cpu"
    assert (waits["rule"], runs["rule"]) == ("contention", "one_thread")
    assert "other processes hold the cores (1.20 cores busy outside the process)" in waits["reason"]
    assert "single-threaded" in runs["reason"]


@pytest.mark.parametrize("others, rule", [(0.24, "own_threads"), (0.25, "contention"), (None, "contention")])
def test_waits_for_a_core_beside_idle_other_processes_are_the_trees_own_threads(others, rule):
    """A PyDataset's worker processes and the model's threads, more than the cores, on a machine
    nobody else uses: the tree waits for itself, not for other processes."""
    kw = {} if others is None else {"other_cores": others}
    t = triage.triage_interval(_iv(runq_wait_pct=123.0, **kw), cpu_count=2)
    assert t["bottleneck"] == "cpu" and t["rule"] == rule, t
    assert ("outnumber the cores" in t["reason"]) == (rule == "own_threads"), t["reason"]
    assert ("other processes hold the cores" in t["reason"]) == (rule == "contention"), t["reason"]


def test_io_is_confirmed_by_disk_reads_or_said_unconfirmed():
    seen = triage.triage_interval(_iv(tree_disk_read_MBps=1.0), cpu_count=2)
    unseen = triage.triage_interval(_iv(tree_disk_read_MBps=0.99, iowait_pct=4.9), cpu_count=2)
    assert seen["bottleneck"] == unseen["bottleneck"] == "io"
    assert "confirmed by disk activity" in seen["reason"] and "no disk reads seen" in unseen["reason"]


def test_run_triage_is_the_kind_that_holds_longest():
    ivs = [dict(_iv(busiest_thread_demand_pct=95.0), dt_s=10.0), dict(_iv(), dt_s=10.0), dict(_iv(), dt_s=5.0)]
    t = triage.triage_run(ivs, cpu_count=2)
    assert t["bottleneck"] == "io" and t["shares"] == {"cpu": 0.4, "io": 0.6}
    # The reason is the kind's most frequent rule's, from its latest interval.
    mixed = [dict(_iv(busiest_thread_demand_pct=95.0, tree_cores=0.9), dt_s=12.0),
             dict(_iv(runq_wait_pct=70.0, tree_cores=0.3), dt_s=10.0), dict(_iv(runq_wait_pct=80.0), dt_s=10.0)]
    t = triage.triage_run(mixed, cpu_count=2)
    assert t["bottleneck"] == "cpu" and "(80 % of a core runnable" in t["reason"]
    assert triage.triage_run([], cpu_count=2)["bottleneck"] == "unclear"
