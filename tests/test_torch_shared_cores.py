"""Verdicts on CPU-only PyTorch traces held down for what the trace cannot see
(tfbneck_plugin/analysis/torch_host.py): the DataLoader's worker processes sharing the model's
cores (shared_cores_verdict), other processes' load (unseen_load_verdict). Each says what is
measured, not that the model's math is the limit. Traces written as Kineto writes them (the
event spellings of tests/test_kineto.py), analysed by the real reader."""
import json

from tfbneck_plugin.analysis.rules import DESIRED_STATE
from tfbneck_plugin.analysis.session import analyze_space
from tfbneck_plugin.analysis.torch_host import SHARED_CORES_MAX_CONFIDENCE, UNSEEN_LOAD_MAX_CONFIDENCE
from tfbneck_plugin.trace.kineto import read_kineto

from support.kineto_loop import SINGLE, WORKERS, cpu_loop



def _cpu_loop(path, iterator, wait_us=300.0):
    """A CPU-only loop of six 10 ms steps, each waiting ``wait_us`` in the DataLoader's
    ``__next__`` (``iterator``), then running matrix ops (no device events)."""
    return str(cpu_loop(path, iterator, wait_us))


def _compute_sentence(r):
    [s] = [e for e in r["evidence"] if "computes" in e and "% of the step" in e]
    return s


def test_held_down_for_the_workers_the_evidence_says_what_is_measured(tmp_path):
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json", WORKERS)))
    assert (r["device_kind"], r["cause"]) == ("CPU", "model_compute")
    assert r["confidence"] <= SHARED_CORES_MAX_CONFIDENCE
    first = _compute_sentence(r)
    assert "desired state" not in first and DESIRED_STATE not in " ".join(r["evidence"])
    assert "the training process's own ops" in first and "workers take is not in the trace" in first
    assert any("worker processes run on the same CPU cores" in e for e in r["evidence"])


def test_a_single_process_loader_is_held_down_for_the_unseen_load_only(tmp_path):
    """num_workers=0: no workers to doubt, but no system metrics either: capped at
    UNSEEN_LOAD_MAX_CONFIDENCE (under 0.7) with its own sentence, and the compute sentence
    says the doubt instead of the desired state."""
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json", SINGLE)))
    assert (r["device_kind"], r["bottleneck"], r["cause"]) == ("CPU", "device", "model_compute")
    assert r["breakdown_pct"]["device_compute"] >= 90.0
    assert r["confidence"] == UNSEEN_LOAD_MAX_CONFIDENCE < 0.7
    assert not any("worker processes run on the same CPU cores" in e for e in r["evidence"])
    assert any("torch.profiler records no system metrics" in e for e in r["evidence"])
    first = _compute_sentence(r)
    assert DESIRED_STATE not in first and first.endswith("unless other processes took the cores, which the trace "
                                                         "does not record.")


def test_an_input_bound_cpu_trace_is_left_alone(tmp_path):
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json", SINGLE, wait_us=7_000.0)))
    assert r["cause"] == "input_preprocessing"
    assert not any("torch.profiler records no system metrics" in e for e in r["evidence"])


def test_workers_behind_on_a_cpu_host_name_the_input_with_no_bound_from_the_wait(tmp_path):
    """Worker processes that keep the loop waiting 15 % of the step (over WORKERS_BEHIND_PCT,
    under XProf's 20 %) on a CPU-only host: the input is named, low in confidence (the workers'
    loading is not in the trace), its gain from the wait alone stated, and no input change is
    bounded by the wait (the workers also take the model's cores)."""
    from tfbneck_plugin.analysis.input_rules import WORKERS_BEHIND_PCT
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json", WORKERS, wait_us=1_500.0)))
    inp = r["breakdown_pct"]["input"]
    assert WORKERS_BEHIND_PCT < inp < 20.0
    assert (r["bottleneck"], r["cause"]) == ("cpu", "input_preprocessing")
    assert r["confidence"] < 0.5
    [behind] = [e for e in r["evidence"] if "the worker processes are behind" in e]
    assert f"{1 / (1 - inp / 100):.2f}x faster" in behind
    assert any("load on the cores the model's math uses" in e for e in r["evidence"])
    fixes = [x["fix"] for x in r["recommendations"]]
    assert fixes[0] == "cheaper_transforms" and "more_workers" in fixes
    assert all(x.get("bound_ms") is None for x in r["recommendations"] if x["fix"] in ("cheaper_transforms", "more_workers"))
    more = next(x for x in r["recommendations"] if x["fix"] == "more_workers")
    assert "On a CPU-only host the workers load on the cores the model's math uses" in more["detail"]


def test_a_single_process_loader_waiting_as_long_stays_model_compute(tmp_path):
    """The same 15 % wait with num_workers=0: the wait is all the loading costs (it runs on the
    training thread, in the trace), under XProf's 20 %: model compute, held down as before."""
    r = analyze_space(read_kineto(_cpu_loop(tmp_path / "w.1.pt.trace.json", SINGLE, wait_us=1_500.0)))
    assert r["cause"] == "model_compute" and r["confidence"] == UNSEEN_LOAD_MAX_CONFIDENCE


def _gloo_job(folder, steps=6, step_us=10_000.0):
    """Two ranks of a DDP job over gloo on the CPU: each step loads a batch (200 us), runs
    matrix ops, then all-reduces (500 us), in step with the other rank; one file per rank
    with ``distributedInfo``, as tensorboard_trace_handler writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        pid = tid = 100 + rank

        def x(cat, name, ts, dur):
            return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}
        ev = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "python3"}}]
        t0 = 1_000_000.0
        for n in range(12, 12 + steps):
            ev += [x("user_annotation", f"ProfilerStep#{n}", t0, step_us), x("user_annotation", SINGLE, t0 + 1, 200.0)]
            t = t0 + 205
            while t + 520 < t0 + step_us - 1_000:
                ev.append(x("cpu_op", "aten::addmm", t, 500.0))
                t += 510
            ev += [x("cpu_op", "record_param_comms", t0 + step_us - 900, 500.0),
                   x("user_annotation", "gloo:all_reduce", t0 + step_us - 900, 500.0)]
            t0 += step_us
        doc = {"schemaVersion": 1, "traceEvents": ev, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
               "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}
        (folder / f"rank{rank}.1796656100{rank}.pt.trace.json").write_text(json.dumps(doc))
    return str(folder)


def test_a_cpu_job_of_two_ranks_is_held_down_as_one_host_is(tmp_path):
    """The job's verdict, a worker's own limit (no straggler, cheap collectives), goes through
    the same hold as a single host's: model compute without system metrics, at most
    UNSEEN_LOAD_MAX_CONFIDENCE, and no "desired state"."""
    from tfbneck_plugin import batch
    from tfbneck_plugin.logdir import find_sessions
    [session] = find_sessions(_gloo_job(tmp_path / "job")).sessions
    r = batch.analyze_one(session, use_cache=False)
    assert len(r["per_host"]) == 2 and r["cause"] == "model_compute"
    assert r["confidence"] == UNSEEN_LOAD_MAX_CONFIDENCE
    assert not any(DESIRED_STATE in e for e in r["evidence"])
    assert any("torch.profiler records no system metrics" in e for e in r["evidence"])
