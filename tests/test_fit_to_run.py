"""Advice that fits the run and the machine, and a ranking a user can trust (issue 23, points
3-5), on hand-made findings (the real-run checks are in test_fit_to_run_tf.py): what the run
already does is not recommended, a change the cores cap is left out and the work-reducing
change comes first, a fix predicted to slow the run is never first, a fix with no model is
placed by its bound, ranges hold their points, and a fused MapAndBatch's work is counted once."""
import pytest

from test_whatif import _findings, _rec

from tfbneck_plugin.analysis import cpu_share, fit_to_run, python_input, whatif
from tfbneck_plugin.analysis.advice import advice_for
from tfbneck_plugin.analysis.tfdata import Pipeline, Stage

MS = 1e9  # ps per ms


def _stage(path, self_ms, fn_ms=0.0, calls=10, parallelism=None):
    kind = path.split("::")[-1].split("[")[0]
    return Stage(path=path, kind=kind, calls=calls, total_ps=int(self_ms * MS), self_ps=int(self_ms * MS),
                 parallelism=parallelism, autotune=None, depth=path.count("::"), function_ps=int(fn_ms * MS))


def _pipeline(*stages, prefetch=False):
    working = [st for st in stages if st.category != "buffer"]
    blocking = max(working, key=lambda st: st.work_ps)
    return Pipeline(stages=list(stages), blocking=blocking, has_prefetch=prefetch, uses_py_function=False)


def test_a_fused_map_and_batch_counts_its_work_once():
    """Its self time on the consumer thread is the wait for its function's work: not added."""
    st = _stage("Iterator::Root::MapAndBatch", self_ms=60.0, fn_ms=55.0, parallelism=1)
    assert st.asynchronous and st.work_ps == int(55.0 * MS) and st.threads == 1
    sync = _stage("Iterator::Root::Map", self_ms=60.0, fn_ms=20.0)
    assert not sync.asynchronous and sync.work_ps == int(60.0 * MS)  # its function ran inside its self time


def test_prefetch_on_a_fused_map_is_never_slower_than_the_step_and_its_range_holds_it():
    """The issue's first table row: 21.3 ms steps, the stage's self time and function time each
    about the input wait; summed they made a 26.6 ms pipeline and a slower prediction."""
    st = _stage("Iterator::Root::MapAndBatch", self_ms=120.0, fn_ms=130.0, parallelism=1)
    for system in (None, {"cpu_count": 2, "tree_cpu_cores": 1.4, "others_cpu_cores": 0.5},
                   {"cpu_count": 2, "tree_cpu_cores": 1.9, "others_cpu_cores": 0.1}):
        f = _findings(step_ms=21.3, input_ms=13.0, pipe=_pipeline(st), system=system)
        p, _ = whatif.predict(_rec("prefetch"), f)
        assert p["time_per_batch_ms"] <= 21.3, system
        low, high = p["range_ms"]
        assert low <= p["time_per_batch_ms"] <= high <= 21.3, (system, p)


def test_cores_the_tree_gets_never_exceed_the_free_ones_at_the_point():
    c = cpu_share.cores_of({"cpu_count": 2, "tree_cpu_cores": 1.41, "others_cpu_cores": 0.59})
    assert c.saturated and c.free == pytest.approx(1.41)
    assert c.gets(0.0) == pytest.approx(1.41) and c.gets(1.0) == pytest.approx(2.0)
    assert c.gets(0.5) == pytest.approx(1.41 + 0.5 * 0.59)
    one = cpu_share.cores_of({"cpu_count": 2, "usable_cores": 1, "tree_cpu_cores": 0.5, "others_cpu_cores": 1.2})
    # one core of its own: others count only up to what is left of it (0.5), all of it taken
    assert one.n == 1 and one.others == pytest.approx(0.5) and one.free == pytest.approx(0.5)
    assert cpu_share.cores_of(None) is None


def _generator_findings(tree, others, children, wait=7.9, step=10.0):
    gen = _stage("Iterator::Root::FlatMap[0]::Generator", self_ms=wait * 10)
    system = {"cpu_count": 2, "tree_cpu_cores": tree, "others_cpu_cores": others, "tree_children": children}
    return _findings(step_ms=step, input_ms=wait, pipe=_pipeline(gen), system=system)


def test_a_saturated_multiprocess_pydataset_does_not_get_more_workers():
    """Two worker processes and training keep both cores busy (input wait 79 %, the tree at
    1.41 cores, the rest taken): more workers cannot run more at once; the change that reduces
    the work comes first, and says why."""
    f = _generator_findings(tree=1.41, others=0.59, children=2)
    recs = fit_to_run.fit(advice_for("input_preprocessing", f), f)
    fixes = [r["fix"] for r in recs]
    assert "pydataset_workers" not in fixes, fixes
    assert fixes[0] in fit_to_run.REDUCES_WORK + ("more_cores",), fixes
    assert "capped" in recs[0]["why_here"] and "1.41 of the 2" in recs[0]["why_here"]


def test_a_pydataset_with_idle_cores_gets_more_workers_first():
    f = _generator_findings(tree=0.95, others=0.05, children=0)
    recs = fit_to_run.fit(advice_for("input_preprocessing", f), f)
    assert recs[0]["fix"] == "pydataset_workers", [r["fix"] for r in recs]
    p = recs[0]["predicted"]
    assert p["speedup"] > 1.05 and p["range_ms"][0] <= p["time_per_batch_ms"] <= p["range_ms"][1]
    assert "7.9 ms per batch" in recs[0]["why_here"] and "0.95 of 2" in recs[0]["why_here"]


def test_python_input_that_waits_gets_threads_and_thread_workers_already_running_are_seen():
    """A PyDataset whose workers sleep or read (the tree at 0.3 cores): the snippet runs them as
    threads (no GIL held while waiting; processes would only copy each batch). With eight
    pool worker threads already running (a PyDataset's threads are not child processes), more
    workers are not recommended: the run already has them."""
    f = _generator_findings(tree=0.3, others=0.0, children=0)
    recs = fit_to_run.fit(advice_for("input_preprocessing", f), f)
    first = recs[0]
    assert first["fix"] == "pydataset_workers", [r["fix"] for r in recs]
    assert "use_multiprocessing=False" in first["code"] and "workers=8" in first["code"], first["code"]
    assert "no worker process or pool thread seen" in first["why_here"]
    f = _generator_findings(tree=0.3, others=0.0, children=0)
    f.system["pool_threads"] = 8
    recs = fit_to_run.fit(advice_for("input_preprocessing", f), f)
    assert "pydataset_workers" not in [r["fix"] for r in recs], [(r["fix"], r.get("predicted")) for r in recs]
    assert python_input.input_workers(f.system) == (8, "8 worker thread(s)")


def test_run_queue_waits_beside_an_idle_core_do_not_make_waiting_input_compute():
    """A sleeping PyDataset on a machine where another process spins on one of the 2 cores
    (measured under ``under-load -j 1``: the tree at 0.25 cores, others 1.13, its threads
    0.45 cores runnable): its threads' waits are wake-up latency beside an idle core, so the
    input still waits and gets threads; the same waits with no core idle are starvation, and
    input starved that way computes (processes)."""
    f = _generator_findings(tree=0.25, others=1.13, children=0)
    f.system["tree_runq_wait_cores"] = 0.45
    assert cpu_share.cores_of(f.system).starved == 0.0 and python_input.input_computes(f) is False
    code = fit_to_run.fit(advice_for("input_preprocessing", f), f)[0]["code"]
    assert "use_multiprocessing=False" in code, code
    f = _generator_findings(tree=0.25, others=1.75, children=0)
    f.system["tree_runq_wait_cores"] = 0.45
    assert cpu_share.cores_of(f.system).starved == pytest.approx(0.45) and python_input.input_computes(f) is True


def test_python_input_that_computes_gets_one_worker_process_per_core():
    f = _generator_findings(tree=0.95, others=0.05, children=0)
    code = fit_to_run.fit(advice_for("input_preprocessing", f), f)[0]["code"]
    assert "workers=2" in code and "use_multiprocessing=True" in code, code


def test_a_vectorised_map_does_not_get_vectorise_and_a_per_element_one_does_by_its_bound():
    per_batch = _pipeline(_stage("Iterator::Root::Map", 60.0), _stage("Iterator::Root::Map::BatchV2", 1.0))
    f = _findings(step_ms=10.0, input_ms=6.0, pipe=per_batch, system={"cpu_count": 2, "tree_cpu_cores": 1.0,
                                                                         "others_cpu_cores": 0.0})
    assert "vectorise_map" not in [r["fix"] for r in fit_to_run.fit(advice_for("input_preprocessing", f), f)]
    fused = _pipeline(_stage("Iterator::Root::MapAndBatch", 60.0, fn_ms=55.0, calls=10, parallelism=2))
    busy = {"cpu_count": 2, "tree_cpu_cores": 1.95, "others_cpu_cores": 0.05}
    f = _findings(step_ms=10.0, input_ms=6.0, pipe=fused, system=busy)
    recs = fit_to_run.fit(advice_for("input_preprocessing", f), f)
    fixes = [r["fix"] for r in recs]
    vec = recs[fixes.index("vectorise_map")]
    assert vec["predicted"] is None and vec["bound_ms"] == pytest.approx(4.0)  # the step less its input wait
    assert fixes.index("vectorise_map") < fixes.index("prefetch") if "prefetch" in fixes else True
    assert fixes[0] in fit_to_run.REDUCES_WORK, fixes  # the cores cap the parallel fixes
    # An image_dataset_from_directory pipeline with augmentation mapped on its batches: the
    # per-element map (its decode, fused into MapAndBatch) does less than the augmentation map,
    # which already runs on whole batches: no "batch before the map"; caching the decode is first.
    folder = _pipeline(_stage("Iterator::Root::Prefetch::ParallelMapV2", 60.0, fn_ms=55.0, parallelism=2),
                       _stage("Iterator::Root::Prefetch::ParallelMapV2::Prefetch::MapAndBatch", 40.0, fn_ms=35.0,
                              parallelism=2))
    f = _findings(step_ms=10.0, input_ms=6.0, pipe=folder, system=busy)
    assert folder.map_per_element is not None and folder.blocking is not folder.map_per_element
    assert "already runs on whole batches" in fit_to_run.already_done({"fix": "vectorise_map"}, f)
    fixes = [r["fix"] for r in fit_to_run.fit(advice_for("input_preprocessing", f), f)]
    assert "vectorise_map" not in fixes and fixes[0] == "cache", fixes


def _map_ops(stage, **ms):
    """An op summary whose input-pipeline groups of ``stage`` take ``ms`` per step by type."""
    total = sum(ms.values())
    return {"by_type": [{"where": "input_pipeline", "stage": stage, "type": t, "self_ms_per_step": v,
                         "pct": 100.0 * v / total, "count_per_step": 32} for t, v in ms.items()]}


def test_a_per_element_map_of_decoders_does_not_get_vectorise_and_one_of_batchable_ops_does():
    """tf.io.decode_png/decode_jpeg and read_file take one element: batching before a map whose op
    time is mostly theirs batches nothing (a newcomer's vectorised decode map ran 0.75-1.07x;
    caching it, 1.63x)."""
    fused = _pipeline(_stage("Iterator::Root::Prefetch::MapAndBatch", 60.0, fn_ms=55.0, calls=10, parallelism=2))
    busy = {"cpu_count": 2, "tree_cpu_cores": 1.95, "others_cpu_cores": 0.05}
    f = _findings(step_ms=10.0, input_ms=6.0, pipe=fused, system=busy)
    path = fused.map_per_element.path
    f.ops = _map_ops(path, DecodePng=5.5, ResizeBilinear=2.0, ReadFile=0.9, AdjustContrastv2=1.6)
    assert "64 % of the `MapAndBatch` map's op time is in ops that take one element" in \
        fit_to_run.already_done({"fix": "vectorise_map"}, f)
    fixes = [r["fix"] for r in fit_to_run.fit(advice_for("input_preprocessing", f), f)]
    assert "vectorise_map" not in fixes and fixes[0] == "cache", fixes
    f.ops = _map_ops(path, DecodePng=3.0, ResizeBilinear=4.0, AdjustContrastv2=3.0)  # 30 %: the rest can batch
    assert fit_to_run.already_done({"fix": "vectorise_map"}, f) is None
    assert "vectorise_map" in [r["fix"] for r in fit_to_run.fit(advice_for("input_preprocessing", f), f)]


def test_an_xla_run_does_not_get_xla_and_a_cpu_host_no_accelerator_advice():
    """On a CPU host XLA comes with its measured record and a "measure it" step, in the API the
    run uses (a custom loop gets tf.function(jit_compile=True)); once the step runs XLA the
    advice goes on: measure it against jit_compile=False, then what limits the math."""
    f = _findings(step_ms=10.0, input_ms=0.5)
    gpu, xla = fit_to_run.fit(advice_for("model_compute", f), f)
    assert xla["fix"] == "xla" and xla["predicted"] is None and gpu["fix"] == "use_gpu"  # a GPU first, XLA never alone
    assert "slowed five" in xla["detail"] and "measure it" in xla["code"], xla
    assert xla["code"].startswith("model.compile(optimizer, loss, jit_compile=True)")
    f.steps.custom_loop = True
    _gpu, xla = fit_to_run.fit(advice_for("model_compute", f), f)
    assert xla["code"].startswith("@tf.function(jit_compile=True)"), xla["code"]
    f.xla = True
    after = fit_to_run.fit(advice_for("model_compute", f), f)
    assert [r["fix"] for r in after] == ["measure_xla", "use_gpu"]
    assert "jit_compile=False" in after[0]["code"] and after[0]["why_here"]
    f.device_kind = "CPU"
    assert fit_to_run.already_done(_rec("augment_on_device"), f) and fit_to_run.already_done(_rec("mixed_precision"), f)


def test_already_done_changes_are_left_out():
    f = _findings(step_ms=10.0, input_ms=6.0, pipe=_pipeline(_stage("Iterator::Root::Map", 60.0), prefetch=True))
    recs = fit_to_run.fit([_rec("prefetch"), _rec("cache")], f)
    assert [r["fix"] for r in recs] == ["cache"]
    spe = _findings(input_ms=0.0, compute_ms=1.5, function_ms=3.0, op_span_ms=2.0, bps=32)
    assert fit_to_run.fit([_rec("steps_per_execution", "steps_per_execution=32")], spe) == []


def test_a_fix_predicted_to_slow_the_run_is_never_first_and_unmodelled_ones_follow_the_predicted():
    """A prediction with a gain ranks above any bound (a best case, not a worth), however
    large: the unmodelled change with a bound comes next, placed by the middle of [bound, now]
    among its kind; then unknown worth; then no gain; a predicted slowdown last."""
    now = 10.0
    slower = {"fix": "a", "predicted": {"time_per_batch_ms": 12.0}}
    small = {"fix": "b", "predicted": {"time_per_batch_ms": 9.0}}
    bounded = {"fix": "c", "predicted": None, "bound_ms": 4.0}  # placed at 7.0: halfway to now
    unknown = {"fix": "d", "predicted": None}
    flat = {"fix": "e", "predicted": {"time_per_batch_ms": 9.9}}
    tighter = {"fix": "f", "predicted": None, "bound_ms": 2.0}  # placed at 6.0
    ranked = sorted([slower, unknown, flat, small, bounded, tighter], key=lambda r: whatif._order(r, now))
    assert [r["fix"] for r in ranked] == ["b", "f", "c", "d", "e", "a"]


def test_the_worth_of_each_fix_is_shown_wherever_the_fix_is():
    """Issue 23, point 5: the CLI table's "fix first", the markdown, the notebook's HTML and
    DataFrame carry the predicted time per batch, speedup and range (the demo's sequential map)."""
    import os

    from conftest import DEMO_LOGS
    from tfbneck_plugin import api, schema
    from tfbneck_plugin.notebook import session as notebook
    from tfbneck_plugin.render.report import build_report, to_markdown, to_table
    report = api.analyze(os.path.join(DEMO_LOGS, "pair_map_sequential"))
    (s,) = report.sessions
    first = schema.first_fix(s)
    worth = schema.worth(first, s["steps"]["time_per_batch_ms"])
    if first["predicted"]:
        assert f"predicted {first['predicted']['time_per_batch_ms']:.2f} ms per batch" in worth
    else:
        assert f"at best {first['bound_ms']:.2f} ms per batch" in worth
    table = to_table(build_report([s]))
    assert f"fix first: {first['title']} — {worth}" in table and f"why here: {first['why_here']}" in table
    md = to_markdown(build_report([s]))
    for r in s["recommendations"]:
        w = schema.worth(r, s["steps"]["time_per_batch_ms"])
        assert f"**{r['title']}**" + (f" — {w}" if w else "") in md
    assert "*Why here:*" in md
    html = notebook.recommendations_section(s)
    assert 'class="tfb-worth"' in html and "Why here:" in html
    predicted = next(r for r in s["recommendations"] if r["predicted"])
    assert f"{predicted['predicted']['speedup']:.2f}x" in html
    df = report.to_dataframe()
    assert df.loc[0, "fix_first"] == first["fix"]
    if first["predicted"]:
        assert df.loc[0, "fix_first_predicted_ms"] == first["predicted"]["time_per_batch_ms"]


def test_an_input_that_takes_the_models_cores_gets_less_work_or_more_cores_and_no_wait_bound():
    """A CPU-only host, a map beside the step (under a prefetch) working 13.9 ms per 21.1 ms step
    on cores the training threads queued for, the step waiting 1.7 ms: caching is not bounded by
    that wait (its work holds the model's cores), more cores are offered, and the why-here says
    the work beside the step. With an idle core, or the stage inside the wait, it is as before."""
    from tfbneck_plugin.analysis import rules
    assert cpu_share.INPUT_WAITED_PCT == rules.INPUT_BOUND_PCT
    mapped = _stage("Iterator::Root::Prefetch::Map", self_ms=139.0)
    prefetch = _stage("Iterator::Root::Prefetch", self_ms=1.0)
    starved = {"cpu_count": 2, "tree_cpu_cores": 1.84, "others_cpu_cores": 0.04, "tree_runq_wait_cores": 1.55}

    def advised(system, pipe):
        f = _findings(step_ms=21.1, input_ms=1.7, compute_ms=16.9, pipe=pipe, system=system)
        return f, {r["fix"]: r for r in fit_to_run.fit(advice_for("input_preprocessing", f), f)}
    f, recs = advised(starved, _pipeline(mapped, prefetch, prefetch=True))
    assert cpu_share.input_cores_ms(f) == pytest.approx(13.9 / 1.84)
    assert "more_cores" in recs and recs["cache"].get("bound_ms") is None
    assert "works 13.9 ms per batch beside the step" in recs["cache"]["why_here"], recs["cache"]["why_here"]
    idle = dict(starved, others_cpu_cores=0.0, tree_runq_wait_cores=0.1)
    f, recs = advised(idle, _pipeline(mapped, prefetch, prefetch=True))
    assert cpu_share.input_cores_ms(f) is None and "more_cores" not in recs
    assert recs["cache"]["bound_ms"] == pytest.approx(21.1 - 1.7)
    inside = _stage("Iterator::Root::Map", self_ms=139.0)
    f, recs = advised(starved, _pipeline(inside))
    assert cpu_share.input_cores_ms(f) is None and recs["cache"]["bound_ms"] == pytest.approx(21.1 - 1.7)


def test_a_keras_fit_on_pytorch_gets_keras_knobs_not_torch_profilers():
    """A Kineto trace of a Keras fit (the callback recorded what fed it): its DataLoader is
    Keras' own, so input waits get a PyDataset's workers, an unrecorded step gets torch.compile
    through jit_compile=True and another backend to look with, never torch.profiler's
    with_stack, which the callback does not take on PyTorch."""
    f = _findings(step_ms=10.0, input_ms=6.0)
    f.framework, f.keras_input = "pytorch", "generator"
    assert [r["fix"] for r in advice_for("input_preprocessing", f)] == ["pydataset_workers"]
    assert [r["fix"] for r in advice_for("unrecorded", f)] == ["torch_compile", "keras_other_backend"]
    assert "jit_compile=True" in advice_for("unrecorded", f)[0]["code"]
    f.keras_input = None  # torch.profiler's own trace of a PyTorch loop: PyTorch's knobs
    assert advice_for("unrecorded", f)[0]["fix"] in ("python_tracer", "step_markers")
    assert advice_for("input_preprocessing", f)[0]["fix"] in ("num_workers", "more_workers")


def test_the_share_a_fix_can_shorten_counts_the_cores_the_input_takes_not_only_its_wait():
    """A map beside the step on starved cores (1.7 ms of wait per 21.1 ms step, 13.9 ms of work):
    what a change to the input can shorten at most is the step less the input's load
    (cpu_share.input_load's after_ms), not the 1.7 ms wait alone, which read as '8 %: what this
    change can shorten at most' beside an 'at best' far below it."""
    mapped = _stage("Iterator::Root::Prefetch::Map", self_ms=139.0)
    prefetch = _stage("Iterator::Root::Prefetch", self_ms=1.0)
    system = {"cpu_count": 2, "tree_cpu_cores": 1.84, "proc_cpu_cores": 1.84, "others_cpu_cores": 0.0,
              "tree_runq_wait_cores": 1.55, "scope": "process_tree"}
    f = _findings(step_ms=21.1, input_ms=1.7, compute_ms=16.9, pipe=_pipeline(mapped, prefetch, prefetch=True),
                  system=system)
    load = cpu_share.input_load(f)
    assert load is not None and load.share > 0
    said = fit_to_run._why_share({"fix": "tfdata_ops"}, f)
    assert f"a batch would take about {load.after_ms:.1f} ms, what this change can shorten at most" in said, said
    idle = dict(system, tree_runq_wait_cores=0.0, tree_cpu_cores=1.0, proc_cpu_cores=1.0)
    f = _findings(step_ms=21.1, input_ms=1.7, compute_ms=16.9, pipe=_pipeline(mapped, prefetch, prefetch=True),
                  system=idle)
    assert fit_to_run._why_share({"fix": "tfdata_ops"}, f).endswith("(8 %): what this change can shorten at most.")


def test_where_the_input_takes_the_models_cores_less_work_comes_before_more_threads():
    """A sequential map beside the step on starved cores: parallelising it cannot add cores, so
    the changes that reduce its work rank first whatever parallel_map's prediction; with idle
    cores the ranking is the what-if models' as before."""
    mapped = _stage("Iterator::Root::Prefetch::Map", self_ms=139.0)
    prefetch = _stage("Iterator::Root::Prefetch", self_ms=1.0)
    starved = {"cpu_count": 2, "tree_cpu_cores": 1.3, "others_cpu_cores": 0.3, "tree_runq_wait_cores": 1.0}

    def fixes(system):
        f = _findings(step_ms=21.1, input_ms=1.7, compute_ms=16.9, pipe=_pipeline(mapped, prefetch, prefetch=True),
                      system=system)
        return f, [r["fix"] for r in fit_to_run.fit(advice_for("input_preprocessing", f), f)]
    f, ranked = fixes(starved)
    assert cpu_share.input_cores_ms(f) is not None and "parallel_map" in ranked, ranked
    assert ranked[0] in fit_to_run.REDUCES_WORK and ranked.index("parallel_map") > ranked.index("cache"), ranked
    f, ranked = fixes(dict(starved, tree_runq_wait_cores=0.0, others_cpu_cores=0.0, tree_cpu_cores=1.0))
    assert cpu_share.input_cores_ms(f) is None and ranked[0] == "parallel_map", ranked


def test_the_map_to_vectorise_is_named_by_the_stage_it_feeds():
    """Two maps of one kind (a per-element parse, tf.data-parallelised, and a map on batches):
    the advice names the per-element one by the stage it feeds and its iterator, so a user can
    tell which `.map` of their code to move after `.batch`."""
    inner = _stage("Iterator::Root::Prefetch::ParallelMapV2::BatchV2::Shuffle::ParallelMapV2", 134.0, fn_ms=130.0,
                   calls=640, parallelism=2)
    outer = _stage("Iterator::Root::Prefetch::ParallelMapV2", 1.2, calls=10, parallelism=2)
    batch = _stage("Iterator::Root::Prefetch::ParallelMapV2::BatchV2", 3.6, calls=10)
    pipe = _pipeline(inner, outer, batch, prefetch=True)
    f = _findings(step_ms=10.0, input_ms=6.0, pipe=pipe, system={"cpu_count": 2, "tree_cpu_cores": 1.0,
                                                                  "others_cpu_cores": 0.0})
    recs = {r["fix"]: r for r in fit_to_run.fit(advice_for("input_preprocessing", f), f)}
    assert pipe.map_per_element is inner
    assert recs["vectorise_map"]["why_here"].startswith(
        "The `ParallelMapV2` stage that feeds `Shuffle` (…::Shuffle::ParallelMapV2) calls its function once per "
        "element (64 calls per batch)"), recs["vectorise_map"]["why_here"]


def test_an_input_that_dwarfs_the_model_leaves_the_step_its_own_work():
    """A PyDataset's worker processes doing 187 ms of work per 43 ms step beside a model of 0.85 ms on
    2 cores: the share of the demand it frees (98 %) would leave a 0.075 ms step, below the model's
    and the training thread's own CPU; the step without the input is at least that (a measurement on
    cached batches: 1.05 ms)."""
    load = cpu_share.InputLoad(step_ms=43.32, wait_ms=39.81, model_ms=0.849, host_ms=2.365, tfdata_ms=0.0,
                               workers_ms=186.8, pool_ms=0.31, stretch=2.36, starved=True, stage="workers", cores=2)
    assert load.share > 0.95
    own = (0.849 / 2 + 2.365) / 2.36
    assert load.own_ms == pytest.approx(own) and load.after_ms == pytest.approx(own)
    assert 30 < load.speedup < 45
    light = cpu_share.InputLoad(step_ms=10.0, wait_ms=0.5, model_ms=12.0, host_ms=1.0, tfdata_ms=4.0, workers_ms=0.0,
                                pool_ms=0.0, stretch=1.5, starved=True, stage="map", cores=2)
    assert light.after_ms == pytest.approx(9.5 * (1 - light.share))  # the floor binds only beyond
    assert light.after_ms > light.own_ms

