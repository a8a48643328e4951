"""The job rules (:mod:`tfbneck_plugin.analysis.job`) from hand-made ``sync`` sections, no
trace: who arrived last, the job findings, and each rule at both edges of its thresholds.
The real 2-worker jobs behind them are in tests/test_multiworker.py."""
import pytest

from tfbneck_plugin.analysis import job
from tfbneck_plugin.analysis.rules import COLLECTIVE_BOUND_PCT
from tfbneck_plugin.analysis.verdict import verdict_fields


def diagnose(workers):
    """job.diagnose as the report reads it: the verdict's fields, ``job``, ``per_worker`` and
    ``primary``; None when the steps cannot be matched."""
    d = job.diagnose(workers)
    if d is None:
        return None
    return dict(verdict_fields(d.verdict), job=d.section, per_worker=d.per_worker, primary=d.primary)


OWN = {"device_compute": 0.0, "host_to_device": 0.0, "device_to_host": 0.0, "input": 0.0, "kernel_launch": 0.0,
       "host_compute": 0.0, "idle": 0.0}


def own_verdict(bottleneck, cause, conf=0.8):
    return {"bottleneck": bottleneck, "cause": cause, "confidence": conf, "pct": {}, "own_ms": 0.0, "step_ms": 0.0,
            "evidence_detail": [{"text": f"own evidence of {cause}", "basis": "trace"}],
            "recommendations": [{"fix": cause, "title": f"fix {cause}"}]}


def worker(name, steps, own=("device", "model_compute")):
    """A worker whose steps are (number, step ms, collective ms, {own category: ms})."""
    rows = [{"step": n, "duration_ms": d, "collective_ms": c, "own_ms": dict(OWN, **extra)} for n, d, c, extra in steps]
    mean = sum(d for _, d, _, _ in steps) / len(steps)
    return job.Worker(name, {"steps": {"step_time_ms": {"mean": mean}},
                             "sync": {"task": name, "steps": rows, "own": own_verdict(*own),
                                      "network_recommendations": [{"fix": "fewer_syncs"}]}})


def pair(wait_ms, network_ms=2.0, step_ms=30.0, n=6, late="worker:1", why="input"):
    """Two workers; ``late`` arrives last in every step, the other waits ``wait_ms`` for it."""
    fast, slow = [], []
    for k in range(n):
        slow.append((k + 1, step_ms, network_ms, {why: wait_ms, "device_compute": step_ms - network_ms - wait_ms}))
        fast.append((k + 1, step_ms, network_ms + wait_ms, {"device_compute": step_ms - network_ms - wait_ms}))
    w0 = worker("worker:0", fast if late == "worker:1" else slow)
    w1 = worker("worker:1", slow if late == "worker:1" else fast,
                own=("cpu", "input_preprocessing") if late == "worker:1" else ("device", "model_compute"))
    return [w0, w1]


def test_the_worker_the_others_wait_for_sets_the_job_verdict():
    d = diagnose(pair(wait_ms=20.0))
    assert (d["bottleneck"], d["cause"]) == ("cpu", "input_preprocessing")
    assert d["job"]["straggler"] == "worker:1"
    assert d["job"]["lateness_pct"] == pytest.approx(100 * 20 / 30, abs=0.01)
    assert d["evidence"][0] == ("cpu / input_preprocessing on worker 1; the other workers wait for it in all-reduce "
                                "for 66.7% of the step (straggler from 10%).")
    assert d["evidence"][2] == ("In those steps worker 1 spent 20.0 ms per step waiting for its input pipeline "
                                "(the other workers: 0.0 ms).")
    assert [s["last"] for s in d["job"]["steps"]] == ["worker:1"] * 6
    assert [s["why"] for s in d["job"]["steps"]] == ["input"] * 6
    assert d["recommendations"] == [{"fix": "input_preprocessing", "title": "fix input_preprocessing",
                                     "worker": "worker:1"}]
    assert [w["straggler"] for w in d["per_worker"]] == [False, True]
    assert d["primary"] == 1


@pytest.mark.parametrize("wait_ms,straggler", [(3.1, "worker:1"), (2.9, None)])  # 10.3 % and 9.7 % of 30 ms
def test_straggler_threshold_on_each_side(wait_ms, straggler):
    d = diagnose(pair(wait_ms=wait_ms, network_ms=2.0))
    assert d["job"]["straggler"] == straggler
    assert d["cause"] == ("input_preprocessing" if straggler else "model_compute")


@pytest.mark.parametrize("wait_ms,network_ms,cause,straggler", [
    (3.6, 16.8, "gradient_sync", None),             # late 12 %, all-reduce 56 %: the network first
    (9.0, 7.5, "input_preprocessing", "worker:1"),  # late 30 %, all-reduce 25 %: the straggler first
    (3.6, 4.5, "input_preprocessing", "worker:1"),  # late 12 %, all-reduce 15 %: not network-bound
])
def test_the_larger_wait_sets_the_verdict(wait_ms, network_ms, cause, straggler):
    d = diagnose(pair(wait_ms=wait_ms, network_ms=network_ms))
    assert (d["cause"], d["job"]["straggler"]) == (cause, straggler)
    second = [e for e in d["evidence"] if "also keeps the others waiting" in e]
    assert second == ([] if straggler else [
        "Worker 1 also keeps the others waiting, 12.0% of the step (last in 6 of 6 steps, waiting for its input "
        "pipeline 3.6 ms longer than the others): less than the all-reduce's own cost, a second link after it."])


def test_network_only_when_no_lateness_explains_the_collectives():
    d = diagnose(pair(wait_ms=0.3, network_ms=12.0))  # both arrive within 1 % of the step
    assert (d["bottleneck"], d["cause"]) == ("network", "gradient_sync")
    assert d["job"]["straggler"] is None and d["job"]["network_pct"] == pytest.approx(40.0)
    assert [s["last"] for s in d["job"]["steps"]] == [None] * 6  # arrived together
    assert d["recommendations"] == [{"fix": "fewer_syncs"}]


@pytest.mark.parametrize("network_ms,cause", [(6.1, "gradient_sync"), (5.9, "model_compute")])  # 20.3 %, 19.7 %
def test_network_threshold_on_each_side(network_ms, cause):
    assert diagnose(pair(wait_ms=0.0, network_ms=network_ms))["cause"] == cause


def test_workers_each_late_by_chance_make_no_straggler():
    # Each worker is last in alternate steps, 4 ms each time: 13 % of the step for both, neither
    # twice the other: jitter of a balanced job, not a straggler.
    a, b = [], []
    for k in range(6):
        late, early = (b, a) if k % 2 else (a, b)
        late.append((k + 1, 15.0, 8.0, {"device_compute": 7.0}))
        early.append((k + 1, 15.0, 12.0, {"device_compute": 3.0}))
    d = diagnose([worker("worker:0", a), worker("worker:1", b)])
    assert d["job"]["straggler"] is None
    assert [w["kept_others_waiting_pct"] for w in d["per_worker"]] == pytest.approx([13.33, 13.33], abs=0.01)
    assert d["cause"] == "gradient_sync"  # 8 of 15 ms in the all-reduce itself


def test_three_workers_one_late():
    steps = lambda c: [(k, 30.0, c, {"device_compute": 30.0 - c}) for k in range(1, 5)]  # noqa: E731
    ws = [worker("worker:0", steps(12.0)), worker("worker:1", steps(2.0), own=("cpu", "python_overhead")),
          worker("worker:2", steps(11.0))]
    d = diagnose(ws)
    assert d["job"]["straggler"] == "worker:1" and d["cause"] == "python_overhead"
    # the others' mean wait: (10 + 9) / 2 = 9.5 ms of 30
    assert d["job"]["lateness_pct"] == pytest.approx(31.67, abs=0.01)


def test_small_collectives_leave_each_worker_its_own_limit():
    d = diagnose(pair(wait_ms=0.2, network_ms=1.0))
    assert d["job"]["straggler"] is None
    assert (d["bottleneck"], d["cause"]) == ("device", "model_compute")
    assert "each worker is limited by its own work" in d["evidence"][0]


def test_steps_are_matched_by_number():
    w0 = worker("worker:0", [(5, 30.0, 22.0, {}), (6, 30.0, 22.0, {}), (7, 30.0, 22.0, {})])
    w1 = worker("worker:1", [(6, 30.0, 2.0, {"input": 20.0}), (7, 30.0, 2.0, {"input": 20.0}),
                             (8, 30.0, 2.0, {"input": 20.0})])
    d = diagnose([w0, w1])
    assert d["job"]["matched_steps"] == [6, 7]
    assert diagnose([w0, worker("worker:1", [(9, 30.0, 2.0, {})])]) is None  # nothing in common


def test_every_large_reason_for_lateness_is_given():
    w0 = worker("worker:0", [(k, 30.0, 22.0, {"device_compute": 8.0}) for k in range(1, 4)])
    w1 = worker("worker:1", [(k, 30.0, 2.0, {"input": 12.0, "host_compute": 8.0, "device_compute": 8.0, "idle": 1.0})
                             for k in range(1, 4)], own=("cpu", "input_preprocessing"))
    d = diagnose([w0, w1])
    # 20 ms of wait: input (12 ms) and host overhead (8 ms) each cover a quarter or more, idle (1 ms) not
    assert d["evidence"][2] == ("In those steps worker 1 spent 12.0 ms per step waiting for its input pipeline (the "
                                "other workers: 0.0 ms); 8.0 ms per step in host overhead (Python, framework) (the "
                                "other workers: 0.0 ms).")


def test_lateness_the_step_does_not_explain_has_no_reason():
    # worker 1 is last by 10 ms but exceeds the other in nothing: it started the step late
    w0 = worker("worker:0", [(1, 30.0, 14.0, {"device_compute": 16.0})])
    w1 = worker("worker:1", [(1, 30.0, 4.0, {"device_compute": 16.0, "idle": 1.0})])
    row = diagnose([w0, w1])["job"]["steps"][0]
    assert row["last"] == "worker:1" and row["wait_ms"] == 10.0 and row["why"] is None


# ---- each threshold of the job rules at both edges ------------------------------------------

def alternating(a_steps, a_wait, b_steps, b_wait, step_ms=30.0, network_ms=2.0):
    """Two workers: worker:0 is last in ``a_steps`` steps (the other waits ``a_wait`` ms for
    it), then worker:1 in ``b_steps`` steps (``b_wait`` ms); late time is input wait."""
    w0, w1 = [], []
    for k in range(a_steps + b_steps):
        late0 = k < a_steps
        wait = a_wait if late0 else b_wait
        late_row = (k + 1, step_ms, network_ms, {"input": wait, "device_compute": step_ms - network_ms - wait})
        early_row = (k + 1, step_ms, network_ms + wait, {"device_compute": step_ms - network_ms - wait})
        w0.append(late_row if late0 else early_row)
        w1.append(early_row if late0 else late_row)
    return [worker("worker:0", w0, own=("cpu", "input_preprocessing")), worker("worker:1", w1)]


@pytest.mark.parametrize("b_wait,straggler", [(5.9, "worker:0"), (6.1, None)])
def test_dominance_on_each_side(b_wait, straggler):
    # worker:0 keeps the other waiting 4 x 6 ms = 13.3 % of 6 x 30 ms; worker:1 2 x b_wait:
    # 6.56 % or 6.78 %, under or over half of it (DOMINANCE = 2)
    assert job.DOMINANCE == 2.0
    jf = job.job_findings(alternating(4, 6.0, 2, b_wait))
    assert jf.late_pct[0] == pytest.approx(100 * 24 / 180)
    assert jf.stands_out is (straggler is not None)
    assert diagnose(alternating(4, 6.0, 2, b_wait))["job"]["straggler"] == straggler


@pytest.mark.parametrize("wait_ms,last", [(0.59, None), (0.61, 1)])
def test_together_on_each_side(wait_ms, last):
    # TOGETHER_PCT = 2 % of a 30 ms step: 0.6 ms
    lat = job.match_steps(pair(wait_ms=wait_ms, n=1))
    assert job.TOGETHER_PCT == 2.0
    assert lat.last == [last]


@pytest.mark.parametrize("late_steps,conf", [(4, 0.8), (3, 0.7)])
def test_scattered_lateness_lowers_the_confidence(late_steps, conf):
    # last in 4 of 6 steps is CONSISTENT_FRACTION (2/3): no penalty; in 3 of 6 less by SCATTERED_PENALTY
    ws = alternating(late_steps, 12.0, 6 - late_steps, 0.0)
    d = diagnose(ws)
    assert d["job"]["straggler"] == "worker:0"
    assert d["confidence"] == pytest.approx(conf)


@pytest.mark.parametrize("input_ms,why", [(5.1, "input"), (4.9, None)])
def test_explained_fraction_on_each_side(input_ms, why):
    # worker:1 is 10 ms late; its input wait over the other's covers 51 % or 49 % of it
    w0 = worker("worker:0", [(1, 30.0, 12.0, {"device_compute": 18.0})])
    rest = (10.0 - input_ms) / 2  # the rest of the lateness in two smaller categories
    w1 = worker("worker:1", [(1, 30.0, 2.0, {"device_compute": 18.0, "input": input_ms, "idle": rest,
                                             "host_compute": rest})])
    assert job.EXPLAINED_FRACTION == 0.5
    assert diagnose([w0, w1])["job"]["steps"][0]["why"] == why


@pytest.mark.parametrize("host_ms,named", [(5.1, True), (4.9, False)])
def test_reason_share_on_each_side(host_ms, named):
    # 20 ms of wait: host overhead is a reason from REASON_SHARE (a quarter) of it, 5 ms
    w0 = worker("worker:0", [(k, 30.0, 22.0, {"device_compute": 8.0}) for k in range(1, 4)])
    w1 = worker("worker:1", [(k, 30.0, 2.0, {"input": 12.0, "host_compute": host_ms, "device_compute": 8.0,
                                             "idle": 8.0 - host_ms}) for k in range(1, 4)],
                own=("cpu", "input_preprocessing"))
    assert job.REASON_SHARE == 0.25
    assert ("host overhead" in diagnose([w0, w1])["evidence"][2]) is named


@pytest.mark.parametrize("network_ms,cause", [(8.9, "input_preprocessing"), (9.1, "gradient_sync")])
def test_straggler_against_the_collectives_own_cost(network_ms, cause):
    # the others wait 9 ms of 30 (30 %) for worker:1; the all-reduce's own cost 29.7 % or 30.3 %
    jf = job.job_findings(pair(wait_ms=9.0, network_ms=network_ms))
    assert jf.stands_out and jf.network_pct >= COLLECTIVE_BOUND_PCT
    assert (job.straggler_before_network(jf) is not None) is (cause == "input_preprocessing")
    assert diagnose(pair(wait_ms=9.0, network_ms=network_ms))["cause"] == cause


def test_the_job_rules_are_tried_in_order_and_the_last_always_applies():
    assert job.JOB_RULES == [job.straggler_before_network, job.gradient_sync, job.straggler, job.own_limit]
    jf = job.job_findings(pair(wait_ms=0.2, network_ms=1.0))
    assert [r(jf) is not None for r in job.JOB_RULES] == [False, False, False, True]
    v = job.own_limit(jf)
    assert (v.bottleneck, v.cause, v.primary, v.straggler) == ("device", "model_compute", 0, None)
