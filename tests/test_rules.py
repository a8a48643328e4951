"""The verdict rules at the edges of their thresholds, from hand-made findings (no trace).

Each rule is checked just below and just above its threshold, and every cause code of
``tfbneck_plugin.causes`` is produced by at least one case here (``test_every_cause_is_produced``)."""
import pytest

from tfbneck_plugin.analysis import input_rules, rules, sysmetrics
from tfbneck_plugin.analysis.findings import Findings, KernelFacts, Slowdown, StepFacts, StepTiming
from tfbneck_plugin.analysis.placement import Placement
from tfbneck_plugin.analysis.tfdata import Pipeline, Stage
from tfbneck_plugin.analysis.rules import INFERRED_DEVICE_CONFIDENCE, NO_STEPS_CONFIDENCE, decide
from tfbneck_plugin.analysis.verdict import confidence
from tfbneck_plugin.causes import CAUSES

PRODUCED = set()
EPS = 0.01


def pct(**shares):
    out = {c: 0.0 for c in ("collective", "device_compute", "host_to_device", "device_to_host", "input",
                            "kernel_launch", "host_compute", "idle")}
    out.update(shares)
    out["idle"] = round(100.0 - sum(v for k, v in out.items() if k != "idle"), 6) if "idle" not in shares else out["idle"]
    return out


def host_only():
    return Placement(device_kind=None, device_planes=0, device_events=0)


def gpu_traced():
    return Placement(device_kind="GPU", device_planes=1, device_events=1000)


def stage(kind, category_path=None, parallelism=None, self_ms=50.0):
    path = category_path or f"Iterator::Root::{kind}"
    return Stage(path=path, kind=kind, calls=10, total_ps=int(self_ms * 1e9), self_ps=int(self_ms * 1e9),
                 parallelism=parallelism, autotune=None, depth=path.count("::"))


def pipeline(*stages, prefetch=True, py=False):
    stages = list(stages) + ([stage("Prefetch", "Iterator::Root::Prefetch", self_ms=1.0)] if prefetch else [])
    working = [s for s in stages if s.category != "buffer"]
    return Pipeline(stages=stages, blocking=working[0] if working else None, has_prefetch=prefetch,
                    uses_py_function=py)


def findings(placement=None, steps=None, **kw):
    kw.setdefault("pct", pct(device_compute=90.0))
    return Findings(framework=kw.pop("framework", "tensorflow"), device_kind=kw.pop("device_kind", "CPU"),
                    placement=placement or host_only(), steps=steps or StepFacts(source="step_markers ('train')",
                                                                                 count=10, mean_ms=10.0), **kw)


def verdict(f):
    v = decide(f)
    PRODUCED.add(v.cause)
    return v


def system(tree=0.1, others=0.1, cpu_count=2, net_ext=0.0, conns=0, disk=0.0, scope="process_tree", **kw):
    s = {"cpu_mean_pct": 100.0 * ((tree or 0.0) + (others or 0.0)) / cpu_count, "busiest_core_mean_pct": 50.0,
         "cpu_count": cpu_count,
         "proc_cpu_cores": tree, "iowait_pct": 0.0, "disk_read_MBps": disk, "net_recv_MBps": net_ext + 20.0,
         "gpu_util_pct": None, "tree_cpu_cores": tree, "others_cpu_cores": others, "tree_children": 0,
         "tree_disk_read_MBps": disk, "net_recv_external_MBps": net_ext, "remote_connections": conns, "scope": scope}
    s.update(kw)
    return s


# ---- confidence -------------------------------------------------------------------------

def test_confidence_is_half_at_the_threshold_and_rises_to_095():
    assert confidence(20.0, 20.0) == 0.5
    assert confidence(100.0, 20.0) == 0.95
    assert confidence(60.0, 20.0) == pytest.approx(0.72, abs=0.01)
    assert confidence(60.0, 20.0, penalty=0.25) == pytest.approx(0.47, abs=0.01)


# ---- input-bound and what the input waits on -----------------------------------------------

def test_input_threshold_edges():
    below = verdict(findings(pct=pct(input=rules.INPUT_BOUND_PCT - EPS, device_compute=70)))
    above = verdict(findings(pct=pct(input=rules.INPUT_BOUND_PCT + EPS, device_compute=70),
                             pipeline=pipeline(stage("ParallelMapV2", parallelism=8))))
    assert below.cause == "model_compute"
    assert (above.bottleneck, above.cause) == ("cpu", "input_preprocessing")


def test_moderate_input_note_edges():
    below = verdict(findings(pct=pct(input=rules.INPUT_MODERATE_PCT - EPS, device_compute=80)))
    above = verdict(findings(pct=pct(input=rules.INPUT_MODERATE_PCT + EPS, device_compute=80)))
    assert not any("moderate" in e for e in below.evidence)
    assert any("moderate" in e for e in above.evidence)


def test_busy_training_tree_is_input_preprocessing_and_children_count():
    busy = sysmetrics.BUSY_PROCESS_CORES
    p = pipeline(stage("Generator", "Iterator::Root::FlatMap[0]::Generator"))
    comp = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=busy + EPS, tree_children=4,
                                                                           proc_cpu_cores=0.1)))
    assert (comp.bottleneck, comp.cause) == ("cpu", "input_preprocessing")
    assert any("children" in e for e in comp.evidence)
    waiting = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=busy - EPS)))
    assert (waiting.bottleneck, waiting.cause) == ("io", "file_read")


def test_contention_counts_other_processes_only():
    edge = input_rules.CONTENTION_OTHERS_PCT / 100.0 * 2  # cores of a 2-core machine
    p = pipeline(stage("ParallelMapV2", parallelism=8))
    contended = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=0.3, others=edge + EPS)))
    free = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=0.3, others=edge - EPS)))
    assert contended.cause == "cpu_contention" and contended.recommendations[0]["fix"] == "free_cores"
    assert free.cause == "file_read"
    # Machine-wide figures only: the machine less the training process counts as "others".
    old = system(tree=None, others=None, proc_cpu_cores=0.3, scope=None, tree_children=None)
    old["cpu_mean_pct"] = 100.0 * (0.3 + edge + EPS) / 2
    v = verdict(findings(pct=pct(input=60), pipeline=p, system=old))
    assert v.cause == "cpu_contention"


def test_contention_needs_the_tree_to_wait_for_cpu():
    edge = input_rules.CONTENTION_RUNQ_CORES
    p = pipeline(stage("ParallelMapV2", parallelism=8))
    busy = dict(tree=0.3, others=1.8)
    waiting = verdict(findings(pct=pct(input=60), pipeline=p, system=system(**busy, tree_runq_wait_cores=edge + EPS)))
    sleeping = verdict(findings(pct=pct(input=60), pipeline=p, system=system(**busy, tree_runq_wait_cores=edge - EPS)))
    assert waiting.cause == "cpu_contention"
    assert (sleeping.bottleneck, sleeping.cause) == ("io", "file_read")


def test_a_tf_op_stage_waited_on_without_reads_computes_only_when_starved_of_cores():
    """No disk reads, few cores for the input: a stage of TensorFlow ops computed on the cores it
    got when none sat idle and the training threads queued for one; with an idle core, no queue,
    or Python doing most of the stage's work, the wait is elsewhere (file_read, less sure)."""
    runq = input_rules.CONTENTION_RUNQ_CORES
    mapped = stage("Map", "Iterator::Root::Prefetch::Map", self_ms=100.0)
    # 2 cores, none idle; the input's cores below "busy", others' below the contention share.
    full = dict(tree=sysmetrics.BUSY_PROCESS_CORES - EPS, others=input_rules.CONTENTION_OTHERS_PCT / 100.0 * 2 - EPS)

    def judged(p, **sys_kw):
        kw = dict(full, tree_runq_wait_cores=runq + EPS)
        kw.update(sys_kw)
        return verdict(findings(pct=pct(input=60), pipeline=p, system=system(**kw)))
    assert 100.0 * full["others"] / 2 < input_rules.CONTENTION_OTHERS_PCT
    starved = judged(pipeline(mapped))
    assert (starved.bottleneck, starved.cause) == ("cpu", "input_preprocessing")
    assert any("TensorFlow ops" in str(e) for e in starved.evidence)
    idle_core = judged(pipeline(mapped), others=full["others"] - 3 * rules.cpu_share.IDLE_SLACK_CORES)
    not_queued = judged(pipeline(mapped), tree_runq_wait_cores=runq - EPS)
    unknown_queue = judged(pipeline(mapped), tree_runq_wait_cores=None)
    assert {v.cause for v in (idle_core, not_queued, unknown_queue)} == {"file_read"}

    def with_python(py_ms):
        p = pipeline(mapped, py=True)
        p.py_function_ps = int(py_ms * 1e9)
        return judged(p)
    assert with_python(49.0).cause == "input_preprocessing"   # a py_function under half the stage's work
    assert with_python(51.0).cause == "file_read"             # Python does most of it: it may sleep
    generator = judged(pipeline(mapped, stage("Generator", "Iterator::Root::Prefetch::Map::FlatMap[0]::Generator",
                                              self_ms=1.0)))
    assert generator.cause == "file_read"


def test_host_overhead_while_a_heavier_input_takes_the_cores_is_the_input():
    """Host overhead above its threshold on a machine with no idle core (or fewer idle than the
    training threads queued for) whose training threads queued for one: the input pipeline's
    stage running beside the step is the cause when it
    worked longer per step than the host overhead lasted; else the overhead stands."""
    runq = input_rules.CONTENTION_RUNQ_CORES
    shares = pct(host_compute=66.0, input=12.0, device_compute=10.0)
    timing = StepTiming(step_ms=3.4, batches_per_step=1, breakdown_ms={"host_compute": 2.244, "input": 0.408},
                        durations_ms=[3.4] * 10)

    def judged(work_ms_per_step, prefetch=True, **sys_kw):
        path = "Iterator::Root::Prefetch::Map" if prefetch else "Iterator::Root::Map"
        p = pipeline(stage("Map", path, self_ms=10 * work_ms_per_step), prefetch=prefetch)
        kw = dict(tree=0.8, others=1.2, tree_runq_wait_cores=runq + EPS)
        kw.update(sys_kw)
        return verdict(findings(pct=shares, pipeline=p, timing=timing, system=system(**kw)))
    heavier = judged(2.244 + EPS)
    assert (heavier.bottleneck, heavier.cause) == ("cpu", "input_preprocessing")
    assert any("waiting for a core" in str(e) for e in heavier.evidence)
    # Lighter than the host overhead, the input still holds 45 % of the demand on the starved
    # cores: the rule for the input's share of the cores (input_shares_cores) names it.
    lighter = judged(2.244 - EPS)
    assert lighter.cause == "input_preprocessing"
    assert any("of the demand on the cores" in str(e) for e in lighter.evidence)
    assert judged(0.3).cause == "python_overhead"   # 0.3 ms beside a 2.2 ms training thread: under 1.15x
    assert judged(2.244 + EPS, others=0.9).cause == "python_overhead"              # an idle core
    # 0.3 cores idle: starved only when the threads waited for more cores than sat idle
    # (the waits were for busy cores; a short window's idle reading is a few clock ticks).
    assert judged(2.244 + EPS, others=0.9, tree_runq_wait_cores=0.3 + EPS).cause == "input_preprocessing"
    assert judged(2.244 + EPS, others=0.9, tree_runq_wait_cores=0.3 - EPS).cause == "python_overhead"
    assert judged(2.244 + EPS, tree_runq_wait_cores=runq - EPS).cause == "python_overhead"
    assert judged(2.244 + EPS, prefetch=False).cause == "python_overhead"          # runs inside the input wait
    assert judged(2.244 + EPS, scope=None).cause == "python_overhead"              # machine-wide figures only


def test_a_slowdown_window_whose_input_work_took_the_models_cores_is_the_input():
    """A window the slowdown trigger opened on a CPU-only host (steps 21.1 ms against a 10 ms
    baseline, the model's ops 80 % of the step, its threads queued for cores): the input's
    stage, running beside the step, is the cause when its work over the cores the training
    used accounts for half of the growth or more; else the model's math stands, as it does
    for a scheduled window, a window whose steps were back below the trigger's factor, a GPU
    host, idle cores, or a stage run inside the wait."""
    shares = pct(device_compute=80.0, input=8.0, host_compute=7.0)
    timing = StepTiming(step_ms=21.1, batches_per_step=1, breakdown_ms={"device_compute": 16.9, "input": 1.7},
                        durations_ms=[21.1] * 10)
    half = input_rules.SLOWDOWN_EXPLAINED_SHARE * (21.1 - 10.0) * 1.84   # ms of stage work per step at the edge

    def judged(work_ms, prefetch=True, slowdown=Slowdown(baseline_ms=10.0, observed_ms=21.6, factor=1.5),
               step_ms=21.1, device_kind="CPU", placement=None, **sys_kw):
        path = "Iterator::Root::Prefetch::Map" if prefetch else "Iterator::Root::Map"
        p = pipeline(stage("Map", path, self_ms=10 * work_ms), prefetch=prefetch)
        kw = dict(tree=1.84, others=0.04, tree_runq_wait_cores=1.55)
        kw.update(sys_kw)
        t = StepTiming(**{**timing.__dict__, "step_ms": step_ms})
        return verdict(findings(pct=shares, pipeline=p, timing=t, system=system(**kw), slowdown=slowdown,
                                device_kind=device_kind, placement=placement))
    heavier = judged(half + EPS)
    assert (heavier.bottleneck, heavier.cause) == ("cpu", "input_preprocessing")
    said = " ".join(str(e) for e in heavier.evidence)
    assert "opened on a slowdown" in said and "50% of what the step grew" in said, said
    assert "11.1 ms more than the job's mean step before it (10 ms)" in said, said
    assert "more_cores" in [r["fix"] for r in heavier.recommendations]
    # The wait (1.7 ms) does not bound an input fix: the input's share of the cores does. 10.2 ms
    # of map work, 8.5 of it beside the model's 16.9 ms (the rest inside the wait), is 33.5 % of
    # the demand: (21.1 - 1.7) x 0.665 = 12.9 ms.
    bounds = [r.get("bound_ms") for r in heavier.recommendations if r["fix"] != "parallel_map"]
    assert bounds and all(b == pytest.approx(12.9, abs=0.01) for b in bounds), bounds
    # Below the slowdown rule's edge, or in a scheduled window, or with steps back under the
    # trigger's factor, the same input's share of the cores names it (input_shares_cores).
    for v in (judged(half - EPS), judged(half + EPS, slowdown=None), judged(half + EPS, step_ms=1.5 * 10.0 - EPS)):
        assert v.cause == "input_preprocessing" and any("of the demand on the cores" in str(e) for e in v.evidence)
    assert judged(2.0, slowdown=None).cause == "model_compute"   # 2 ms of map work: 1.09x, under 1.15x
    assert judged(half + EPS, prefetch=False).cause == "model_compute"                # run inside the wait
    assert judged(half + EPS, others=0.0, tree_runq_wait_cores=0.15).cause == "model_compute"   # idle cores
    gpu = judged(half + EPS, device_kind="GPU", placement=gpu_traced())
    assert gpu.cause == "model_compute"


def test_contention_rests_on_most_of_enough_samples_else_the_trace_decides():
    """A window whose run-queue wait spiked in 2 of 5 samples (0, 0, 0, 568 and 88 %: a mean of
    131 %) is not called contended; the blocking stage's reading (it computes) is kept, with the
    sample count said, and a lower confidence."""
    p = pipeline(stage("ParallelMapV2", parallelism=8))
    busy = dict(tree=0.3, others=1.8)

    def judged(runq_pct):
        series = {"tree_runq_wait_pct": runq_pct}
        return verdict(findings(pct=pct(input=60), pipeline=p, system=system(
            **busy, tree_runq_wait_cores=sum(runq_pct) / len(runq_pct) / 100.0, series=series)))
    spike = judged([0.0, 0.0, 0.0, 568.0, 88.0])
    assert spike.cause == "input_preprocessing"
    assert any("in 2 of 5 system samples" in e for e in spike.evidence)
    few = judged([300.0, 300.0, 300.0])  # all three waited, but three samples are 0.3 s
    assert few.cause == "input_preprocessing" and any("in 3 of 3 system samples" in e for e in few.evidence)
    most = judged([300.0, 10.0, 200.0, 150.0, 5.0, 0.0])
    assert most.cause == "cpu_contention" and any("run-queue wait in 3 of 6 samples" in e for e in most.evidence)
    fine = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=1.0, others=0.1)))
    assert spike.confidence < judged([300.0] * 6).confidence and fine.cause == "input_preprocessing"


def test_waiting_without_disk_reads_says_so_and_is_less_sure():
    """A pipeline that waits (a sleep in its code, page-cached files) with no disk reads and no
    I/O wait is still io (it waits, it does not compute), but not storage for sure."""
    p = pipeline(stage("Generator", "Iterator::Root::FlatMap[0]::Generator"))
    edge = input_rules.DISK_READ_SEEN_MBPS
    quiet = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=0.1, disk=edge - EPS)))
    reading = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=0.1, disk=edge + EPS)))
    assert (quiet.bottleneck, quiet.cause) == (reading.bottleneck, reading.cause) == ("io", "file_read")
    assert any("though not on this machine's disks" in e for e in quiet.evidence)
    assert not any("though not on this machine's disks" in e for e in reading.evidence)
    assert reading.confidence - quiet.confidence == pytest.approx(input_rules.NO_READS_PENALTY, abs=0.011)


def test_loopback_or_other_traffic_is_not_remote_read():
    p = pipeline(stage("TFRecord"))
    # 20 MB/s on loopback and another process's downloads: no remote connection of ours.
    local = verdict(findings(pct=pct(input=60), pipeline=p, system=system(net_ext=50.0, conns=0, disk=0.5)))
    assert (local.bottleneck, local.cause) == ("io", "file_read")
    remote = verdict(findings(pct=pct(input=60), pipeline=p, system=system(net_ext=50.0, conns=3, disk=0.5)))
    assert (remote.bottleneck, remote.cause) == ("network", "remote_read")
    ratio = sysmetrics.REMOTE_READ_RATIO
    edge = verdict(findings(pct=pct(input=60), pipeline=p, system=system(net_ext=ratio * 1.0 - EPS, conns=3, disk=1.0)))
    assert edge.cause == "file_read"


def test_machine_wide_metrics_lower_the_confidence_and_say_so():
    p = pipeline(stage("TFRecord"))
    per_process = verdict(findings(pct=pct(input=60), pipeline=p, system=system()))
    old = system(scope=None, tree=None, others=None, proc_cpu_cores=0.1, net_recv_MBps=0.0)
    machine = verdict(findings(pct=pct(input=60), pipeline=p, system=old))
    assert machine.cause == per_process.cause == "file_read"
    assert machine.confidence == pytest.approx(per_process.confidence - input_rules.MACHINE_WIDE_PENALTY, abs=0.011)
    assert any("machine-wide" in e for e in machine.evidence)


def test_python_stage_without_metrics_stays_below_07():
    p = pipeline(stage("Generator", "Iterator::Root::FlatMap[0]::Generator"))
    v = verdict(findings(pct=pct(input=95), pipeline=p))
    assert v.cause == "input_preprocessing" and v.confidence < 0.7


def test_stage_categories_without_metrics():
    files = verdict(findings(pct=pct(input=60), pipeline=pipeline(stage("TFRecord"))))
    remote = verdict(findings(pct=pct(input=60), pipeline=pipeline(stage("DataService"))))
    assert (files.bottleneck, files.cause) == ("io", "file_read")
    assert (remote.bottleneck, remote.cause) == ("network", "remote_read")


# ---- advice fits the input ---------------------------------------------------------------

def test_generator_input_gets_its_own_knobs_not_prefetch():
    p = pipeline(stage("Generator", "Iterator::Root::FlatMap[0]::Generator"), prefetch=False)
    v = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=1.0)))
    fixes = [r["fix"] for r in v.recommendations]
    assert fixes[0] == "pydataset_workers" and "prefetch" not in fixes
    assert "use_multiprocessing=True" in v.recommendations[0]["code"]


def test_distribution_wrapper_generator_is_not_a_python_source():
    # MultiWorkerMirroredStrategy wraps the per-worker iterator in a Generator right under the
    # root; the user's pipeline (a sequential Map) is what limits.
    p = pipeline(stage("Map", "Iterator::Root::Prefetch::RebatchV2::BatchV2::Map"),
                 stage("Generator", "Iterator::Root::Prefetch::Generator", self_ms=5.0))
    assert p.source is None
    v = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=1.0)))
    fixes = [r["fix"] for r in v.recommendations]
    assert "pydataset_workers" not in fixes and "parallel_map" in fixes, fixes


def test_sequential_map_is_parallelised_before_prefetch():
    p = pipeline(stage("Map"), stage("TensorSlice", self_ms=0.1), prefetch=False)
    v = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=1.0)))
    assert [r["fix"] for r in v.recommendations][:2] == ["parallel_map", "prefetch"]


def test_in_memory_source_never_gets_file_read_advice():
    p = pipeline(stage("ParallelMapV2", parallelism=2), stage("TensorSlice", self_ms=0.1))
    v = verdict(findings(pct=pct(input=60), pipeline=p, system=system(tree=0.2)))
    assert v.cause == "file_read"  # waiting, not computing: the metrics say so
    assert not {"parallel_reads", "larger_files"} & {r["fix"] for r in v.recommendations}


# ---- the other shares ----------------------------------------------------------------------

@pytest.mark.parametrize("category,threshold,cause,kind", [
    ("collective", rules.COLLECTIVE_BOUND_PCT, "gradient_sync", "network"),
    ("kernel_launch", rules.KERNEL_LAUNCH_BOUND_PCT, "kernel_launch", "cpu"),
    ("host_compute", rules.HOST_OVERHEAD_PCT, "python_overhead", "cpu"),
])
def test_share_rules_edges(category, threshold, cause, kind):
    below = verdict(findings(placement=gpu_traced(), device_kind="GPU",
                             pct=pct(**{category: threshold - EPS, "device_compute": 50})))
    above = verdict(findings(placement=gpu_traced(), device_kind="GPU",
                             pct=pct(**{category: threshold + EPS, "device_compute": 50}),
                             kernels=KernelFacts(count=100, devices=1, median_us=3.0, median_gap_us=10.0)))
    assert below.cause == "model_compute"
    assert (above.bottleneck, above.cause) == (kind, cause)


def test_transfer_edges_sum_both_directions():
    t = rules.TRANSFER_BOUND_PCT
    # Copies are the input side's work: the kind is io (issue 25 point 7), with the reason said.
    below = verdict(findings(placement=gpu_traced(), device_kind="GPU",
                             pct=pct(host_to_device=t / 2, device_to_host=t / 2 - EPS, device_compute=60)))
    above = verdict(findings(placement=gpu_traced(), device_kind="GPU",
                             pct=pct(host_to_device=t / 2, device_to_host=t / 2 + EPS, device_compute=60)))
    assert below.cause == "model_compute"
    assert (above.bottleneck, above.cause) == ("io", "host_device_transfer")
    assert any("input side's work" in str(e) and "Enqueuing data" in str(e) for e in above.evidence)


def test_eager_gaps_between_ops_count_as_python_overhead():
    # Eager: 19 % host overhead + 30 % unrecorded between the dispatched ops is Python (the
    # demo's run_eagerly=True fit, 2.9x faster compiled).
    eager = verdict(findings(pct=pct(host_compute=19.0, device_compute=51.0, idle=30.0), eager=True))
    assert (eager.bottleneck, eager.cause) == ("cpu", "eager_execution")
    assert any("between the eagerly dispatched ops" in e for e in eager.evidence)
    edge = rules.HOST_OVERHEAD_PCT
    below = verdict(findings(pct=pct(host_compute=edge / 2, idle=edge / 2 - EPS, device_compute=60), eager=True))
    assert below.cause == "model_compute"
    # Not eager: unrecorded time is not Python's by default.
    graph = verdict(findings(pct=pct(host_compute=19.0, device_compute=51.0, idle=30.0)))
    assert graph.cause == "model_compute"


def test_eager_host_overhead_is_eager_execution():
    v = verdict(findings(pct=pct(host_compute=60, device_compute=30), eager=True))
    assert v.cause == "eager_execution" and v.recommendations[0]["fix"] == "tf_function"


def test_unrecorded_edges():
    below = verdict(findings(pct=pct(idle=rules.UNRECORDED_PCT - EPS, device_compute=100 - rules.UNRECORDED_PCT + EPS)))
    above = verdict(findings(pct=pct(idle=rules.UNRECORDED_PCT + EPS, device_compute=100 - rules.UNRECORDED_PCT - EPS)))
    assert below.cause == "model_compute" and below.confidence == 0.5
    assert (above.bottleneck, above.cause, above.confidence) == ("unknown", "unrecorded", 0.2)


def test_unrecorded_marked_steps_get_the_python_tracer_and_unmarked_ones_the_markers():
    """A step marked but mostly unrecorded is Python the profiler does not trace (a newcomer's
    callback that slept 5 ms per batch was told to "profile with the step markers" it had)."""
    shares = pct(idle=74.0, device_compute=26.0)
    marked = verdict(findings(pct=shares))
    inferred = verdict(findings(pct=shares, steps=StepFacts(source="iterator_cadence", count=10, mean_ms=10.0)))
    assert marked.cause == inferred.cause == "unrecorded"
    assert [r["fix"] for r in marked.recommendations] == ["python_tracer"]
    assert "python_tracer_level" in marked.recommendations[0]["code"]
    assert [r["fix"] for r in inferred.recommendations] == ["step_markers"]


def test_no_activity_needs_no_steps_and_nothing_recorded():
    v = verdict(findings(pct=pct(idle=100.0), steps=StepFacts(why_none="No steps found (...).")))
    assert (v.bottleneck, v.cause, v.confidence) == ("unknown", "no_activity", 0.0)
    assert verdict(findings(pct=pct(idle=100.0))).cause == "unrecorded"


def test_device_bound_confidence_rises_from_50_percent():
    assert verdict(findings(pct=pct(device_compute=rules.DEVICE_BOUND_PCT - EPS, host_compute=20))).confidence == 0.5
    assert verdict(findings(pct=pct(device_compute=95.0, idle=5.0))).confidence == pytest.approx(0.905, abs=0.006)


# ---- retracing, warm-up, steps -------------------------------------------------------------

def retrace_steps(built, count=20, build_ms=0.0, total_ms=200.0):
    return StepFacts(source="step_markers ('train')", count=count, mean_ms=total_ms / count, graph_build_steps=built,
                     graph_build_ms=build_ms, total_ms=total_ms)


def test_retracing_needs_most_steps_and_20_percent():
    share_edge = rules.RETRACING_PCT / 100 * 200.0
    yes = verdict(findings(pct=pct(host_compute=80, device_compute=20), steps=retrace_steps(20, build_ms=share_edge + 1)))
    few = verdict(findings(pct=pct(host_compute=80, device_compute=20), steps=retrace_steps(9, build_ms=150)))
    small = verdict(findings(pct=pct(host_compute=80, device_compute=20), steps=retrace_steps(20, build_ms=share_edge - 1)))
    assert (yes.bottleneck, yes.cause) == ("cpu", "retracing")
    assert {r["fix"] for r in yes.recommendations} == {"tensor_arguments", "input_signature", "reduce_retracing"}
    assert few.cause == small.cause == "python_overhead"


def test_warmup_is_reported_and_all_warmup_caps_confidence():
    st = StepFacts(source="step_markers ('train')", count=3, mean_ms=50.0, warmup_count=1, warmup_ms=1600.0,
                   warmup_reason="step 1 spent 1500 ms building graphs")
    v = verdict(findings(pct=pct(device_compute=95, idle=5), steps=st))
    assert "excluded" in v.evidence[0] and v.confidence > 0.8
    st.all_warmup = True
    v = verdict(findings(pct=pct(device_compute=95, idle=5), steps=st))
    assert v.confidence <= 0.4 and "no steady step" in v.evidence[0]


def test_device_imbalance_edges():
    from tfbneck_plugin.analysis.evidence import IMBALANCE_POINTS

    def devices(spread):
        return [{"device": "/device:GPU:0", "kernels": 10, "busy_pct": 90.0, "events": 10},
                {"device": "/device:GPU:1", "kernels": 10, "busy_pct": 90.0 - spread, "events": 10}]
    below = verdict(findings(placement=gpu_traced(), device_kind="GPU", devices=devices(IMBALANCE_POINTS - EPS)))
    above = verdict(findings(placement=gpu_traced(), device_kind="GPU", devices=devices(IMBALANCE_POINTS + EPS)))
    assert not any("imbalanced" in e for e in below.evidence)
    assert any("imbalanced" in e and "/device:GPU:1" in e for e in above.evidence)
    shared = verdict(findings(placement=gpu_traced(), device_kind="GPU", devices=devices(50), shared_clock_only=True))
    assert not any("imbalanced" in e for e in shared.evidence)  # one device's own clock: not comparable


def test_steps_inferred_from_the_cadence_lower_the_confidence():
    from tfbneck_plugin.analysis.rules import INFERRED_STEPS_PENALTY
    marked = verdict(findings(pct=pct(device_compute=95, idle=5)))
    cadence = verdict(findings(pct=pct(device_compute=95, idle=5),
                               steps=StepFacts(source="iterator_cadence", count=10, mean_ms=10.0)))
    assert cadence.confidence == pytest.approx(marked.confidence - INFERRED_STEPS_PENALTY, abs=0.011)
    assert cadence.evidence[0].startswith("Steps were inferred from the IteratorGetNext cadence")


def test_no_steps_caps_confidence_and_says_why():
    v = verdict(findings(pct=pct(device_compute=95, idle=5), steps=StepFacts(why_none="No steps found (x: y).")))
    assert v.confidence == NO_STEPS_CONFIDENCE and v.evidence[0].startswith("No steps found")


# ---- where the model ran -------------------------------------------------------------------

def test_gpu_used_but_not_traced_is_unknown():
    for planes in (0, 1):
        p = Placement(device_kind="GPU" if planes else None, device_planes=planes, device_events=0,
                      allocations={"GPU_0_bfc": 2689, "gpu_host_bfc": 126}, device_copies=2, host_op_ps=int(8e9))
        v = verdict(findings(placement=p, device_kind="GPU", pct=pct(device_compute=88)))
        assert (v.bottleneck, v.cause) == ("unknown", "device_trace_missing")
        assert "`GPU_0_bfc` (2689 allocations)" in v.evidence[0]
        assert v.recommendations[0]["fix"] == "fix_device_trace"


def test_idle_gpu_beside_long_cpu_ops_is_model_on_cpu():
    p = Placement(device_kind="GPU", device_planes=1, device_events=0, host_op_ps=int(958e9), host_op_median_us=18.5)
    v = verdict(findings(placement=p, pct=pct(device_compute=80)))
    assert (v.bottleneck, v.cause, v.confidence) == ("cpu", "model_on_cpu", 0.85)
    empty = Placement(device_kind="GPU", device_planes=1, device_events=0)
    assert verdict(findings(placement=empty, pct=pct(host_compute=5))).cause == "device_trace_missing"


def test_untraced_pluggable_device_is_inferred():
    p = Placement(device_kind=None, device_planes=0, device_events=0, allocations={"pluggable_device_host_bfc": 8})
    v = verdict(findings(placement=p, device_kind="GPU", pct=pct(device_compute=99, idle=1)))
    assert v.cause == "model_compute" and v.confidence <= INFERRED_DEVICE_CONFIDENCE
    assert any("inferred" in e for e in v.evidence)


def test_jax_is_not_tensorflow():
    """A JAX trace without step markers gets no verdict; one whose steps are marked (a Keras
    fit on JAX under BottleneckProfiler, analysis.jax_host) is judged as any run."""
    gpu = dict(framework="jax", placement=gpu_traced(), device_kind="GPU",
               devices=[{"device": "/device:GPU:0", "events": 5, "busy_pct": 40.0, "kernels": 5}])
    v = verdict(findings(steps=StepFacts(why_none="no step markers"), **gpu))
    assert (v.bottleneck, v.cause, v.confidence) == ("unknown", "not_tensorflow", 0.9)
    marked = verdict(findings(**gpu))
    assert marked.cause != "not_tensorflow" and marked.bottleneck != "unknown"


@pytest.mark.parametrize("kind, interval", [
    ("cpu", {"tree_cores": 1.0, "busiest_thread_demand_pct": 99.0, "busiest_thread_pct": 99.0}),
    ("device", {"gpus": [{"index": 0, "util_pct": 97.0, "mem_used_gb": 3.0}]}),
    ("io", {"tree_cores": 0.05, "tree_disk_read_MBps": 40.0}),
    ("network", {"tree_cores": 0.2, "net_recv_MBps": 30.0}),
    ("unclear", {"tree_cores": 0.6}),
])
def test_system_only_sessions_take_the_triage_as_their_cause(tmp_path, kind, interval):
    """A system record's report (tfbneck_plugin.analysis.system_session): the flowchart's kind is the
    verdict (``unclear``: ``unknown``), its cause ``triage_<kind>``, the next step a profile."""
    import json
    from tfbneck_plugin.logdir import find_sessions
    from tfbneck_plugin.analysis.system_session import system_only_report
    from tfbneck_plugin.system.run import make_record
    iv = {"t_unix_ns": 2 * 10**9, "dt_s": 10.0, "cores_busy": 0.5, "tree_cores": 0.1, "busiest_thread_demand_pct": 10.0,
          "busiest_thread_pct": 10.0, "runq_wait_pct": 0.0, "net_recv_MBps": 0.0, "net_sent_MBps": 0.0,
          "tree_disk_read_MBps": 0.0, "iowait_pct": 0.0, "gpus": []}
    iv.update(interval)
    record = make_record([iv], source="watch", pid=4242, command=["python", "train.py"], cpu_count=2,
                         interval_s=1.0, aggregate_s=10.0, start_unix_ns=10**9)
    path = tmp_path / "watch.json"
    path.write_text(json.dumps(record))
    (session,) = find_sessions(str(path)).sessions
    report = system_only_report(session)
    assert report["system_triage"]["bottleneck"] == kind
    assert (report["bottleneck"], report["cause"]) == ("unknown" if kind == "unclear" else kind, f"triage_{kind}")
    assert report["confidence"] == 0.5 and report["recommendations"][0]["fix"] == "profile_window"
    assert "--pid 4242" in report["recommendations"][0]["code"]
    PRODUCED.add(report["cause"])


def test_every_cause_is_produced():
    """Runs last in this module (pytest keeps file order): every cause code has a case above."""
    assert set(CAUSES) == PRODUCED, f"no test produces: {sorted(set(CAUSES) - PRODUCED)}"


def test_the_inputs_share_of_the_cores_names_it_in_any_window_and_doubts_a_device_verdict():
    """A scheduled window on a CPU-only host, no input wait to speak of: the model's ops fill
    the step (80 %), but the input's work beside it, from the trace (tf.data's threads) or the
    sampler (PyDataset worker processes: the tree's CPU less the process's; worker threads: the
    process's CPU less what the trace shows), holds a share of the starved cores. From a
    predicted 1.15x (cpu_share.INPUT_LIMITS_GAIN) the verdict names the input and its stage;
    from 1.1x a device verdict stays under 0.7; on idle cores the input takes nothing."""
    from tfbneck_plugin.analysis import cpu_share
    shares = pct(device_compute=80.0, input=1.0, host_compute=5.0)
    timing = StepTiming(step_ms=20.0, batches_per_step=1, breakdown_ms={"device_compute": 16.0, "input": 0.2,
                                                                        "host_compute": 1.0},
                        durations_ms=[20.0] * 10, model_cpu_ms=30.0)

    def judged(map_ms=0.0, **sys_kw):
        p = pipeline(stage("ParallelMapV2", "Iterator::Root::Prefetch::ParallelMapV2", parallelism=2,
                           self_ms=10 * map_ms))
        kw = dict(tree=1.9, others=0.0, tree_runq_wait_cores=1.0)
        kw.update(sys_kw)
        f = findings(pct=shares, pipeline=p, timing=timing, system=system(**kw))
        return verdict(f), cpu_share.input_load(f)

    # The demand model: 8 ms of map work, 7.8 of it beside the step (0.2 ms inside its wait),
    # against 30 ms of the model's and 1 ms of the training thread's: 7.8/38.8 of the demand.
    v, load = judged(8.0)
    assert load.share == pytest.approx(7.8 / 38.8, abs=1e-3)
    assert load.after_ms == pytest.approx(19.8 * (1 - 7.8 / 38.8), abs=1e-3)
    # Beside other processes using 1.0 of the 2 cores (the tree 1.0): the training keeps half
    # of what the input frees, the other half goes to them.
    _, busy = judged(8.0, tree=1.0, others=1.0)
    assert busy.retained == pytest.approx(0.5) and busy.share == pytest.approx(0.5 * 7.8 / 38.8, abs=1e-3)
    assert busy.after_ms == pytest.approx(19.8 * (1 - 0.5 * 7.8 / 38.8), abs=1e-3)
    assert (v.bottleneck, v.cause) == ("cpu", "input_preprocessing")
    said = " ".join(str(e) for e in v.evidence)
    assert "`ParallelMapV2`" in said and "1.26x faster" in said, said
    assert v.confidence < 0.7   # 1.26x: just past the edge
    # Edges: 1.15x names the input; between 1.1x and 1.15x the device, but not sure. At the
    # edge the share s = 1 - 20 / (19.8 x 1.15), and the work beside the step b = 31 s / (1 - s).
    s_edge = 1 - 20.0 / (19.8 * cpu_share.INPUT_LIMITS_GAIN)
    beside = 31.0 * s_edge / (1 - s_edge)
    assert judged(beside + 0.2 + 0.05)[0].cause == "input_preprocessing"
    doubt, load = judged(beside + 0.2 - 0.05)
    assert doubt.cause == "model_compute" and load.speedup >= cpu_share.INPUT_DOUBT_GAIN
    assert doubt.confidence == rules.INPUT_DOUBT_CONFIDENCE
    assert any("may limit it too" in str(e) for e in doubt.evidence)
    fixes = [r["fix"] for r in doubt.recommendations]
    # A fix with a modelled worth (the input's, bounded by its share of the cores) before XLA and
    # a GPU, which no model predicts (XLA's with "measure it").
    assert fixes[-2:] == ["use_gpu", "xla"] and fixes.index("use_gpu") > 0, fixes
    assert doubt.recommendations[0].get("bound_ms") is not None, doubt.recommendations[0]
    sure, load = judged(0.5)
    assert sure.cause == "model_compute" and sure.confidence > 0.7 and load.speedup < cpu_share.INPUT_DOUBT_GAIN
    # Idle cores: the input's work took nothing from the model.
    assert judged(8.0, tree=1.0, others=0.1, tree_runq_wait_cores=0.1)[0].cause == "model_compute"
    # PyDataset worker processes: 1.9 tree cores, 1.4 of them the training process's.
    v, load = judged(0.0, proc_cpu_cores=1.4, tree_children=2)
    stretch = (1.9 + 1.0) / 1.9
    assert load.workers_ms == pytest.approx(0.5 * 20.0 * stretch, abs=1e-6)
    assert v.cause == "input_preprocessing" and "2 worker process(es)" in " ".join(map(str, v.evidence))
    # PyDataset worker threads: the process's CPU (on the wall scale) less the model's, the
    # training thread's and tf.data's: 1.9 x 20 x 1.53 - 31 = 27 ms.
    v, load = judged(0.0, pool_threads=2)
    assert load.pool_ms == pytest.approx(1.9 * 20.0 * stretch - 31.0, abs=1e-6)
    assert v.cause == "input_preprocessing" and "2 worker thread(s)" in " ".join(map(str, v.evidence))


def test_python_overhead_beside_an_input_whose_python_runs_in_the_process_is_not_sure():
    """The same host-overhead shares: confident where the input is tf.data ops, below 0.7 where
    the input is a generator (its Python holds the GIL the training thread's Python needs)."""
    shares = pct(host_compute=70.0, device_compute=25.0)
    ops = verdict(findings(pct=shares, pipeline=pipeline(stage("ParallelMapV2", parallelism=4))))
    assert ops.cause == "python_overhead" and ops.confidence >= 0.7
    assert not any("GIL" in str(e) for e in ops.evidence)
    gen = verdict(findings(pct=shares, pipeline=pipeline(
        stage("Generator", "Iterator::Root::FlatMap[0]::Generator"), prefetch=False)))
    assert gen.cause == "python_overhead" and gen.confidence == rules.INPUT_DOUBT_CONFIDENCE
    assert any("holds the GIL" in str(e) for e in gen.evidence)
    mapped = verdict(findings(pct=shares, pipeline=pipeline(stage("ParallelMapV2", parallelism=4), py=True)))
    assert mapped.confidence == rules.INPUT_DOUBT_CONFIDENCE
