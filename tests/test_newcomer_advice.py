"""Advice wording a newcomer's tutorial-style Keras runs showed wrong, checked directly (no
TensorFlow): the cache advice reads the whole pipeline. Real runs of the same are in
tests/test_newcomer_advice_tf.py."""
from tfbneck_plugin.analysis import fit_to_run
from tfbneck_plugin.analysis.tfdata import Pipeline, Stage


def _stage(path, calls=10, work_ms=1.0, parallelism=None):
    ps = int(work_ms * 1e9)
    return Stage(path=path, kind=path.split("::")[-1], calls=calls, total_ps=ps, self_ps=ps,
                 parallelism=parallelism, autotune=None, depth=path.count("::"))


def _pipeline(paths, busiest, cache_in_trace=False):
    stages = [_stage(p, work_ms=10.0 if p == busiest else 0.1) for p in paths]
    blocking = next(st for st in stages if st.path == busiest)
    return Pipeline(stages=stages, blocking=blocking, has_prefetch=True, uses_py_function=False,
                    cache_in_trace=cache_in_trace)


MAP = "Iterator::Root::Prefetch::ParallelMapV2"


def test_a_map_after_the_cache_is_not_advised_a_cache():
    p = _pipeline(["Iterator::Root", "Iterator::Root::Prefetch", MAP, MAP + "::Shuffle",
                   MAP + "::Shuffle::MemoryCache", MAP + "::Shuffle::MemoryCache::MemoryCacheImpl",
                   MAP + "::Shuffle::MemoryCache::MemoryCacheImpl::TensorSlice"], MAP)
    assert p.has_cache and p.after_cache(p.blocking)
    why = fit_to_run._cache_done(p)
    assert why is not None and "after it, for every batch" in why


def test_a_cache_seen_only_outside_the_analysed_steps_counts():
    p = _pipeline(["Iterator::Root", "Iterator::Root::Prefetch", MAP, MAP + "::Shuffle"], MAP, cache_in_trace=True)
    assert p.has_cache and fit_to_run._cache_done(p) is not None


def test_stages_not_called_are_not_read_as_no_cache():
    """A shuffle whose buffer holds the epoch calls nothing upstream: no source stage, and no
    claim that the pipeline has no cache."""
    p = _pipeline(["Iterator::Root", "Iterator::Root::Prefetch", MAP, MAP + "::Shuffle"], MAP)
    assert not p.has_cache and p.source is None
    assert p.unseen_upstream is not None and p.unseen_upstream.kind == "Shuffle"
    assert fit_to_run._cache_done(p) is None
    said = fit_to_run._unseen_sentence(p)
    assert "no cache()" not in said and "`Shuffle` left no call" in said and "not in the trace" in said


def test_a_pipeline_read_to_its_source_without_a_cache_is_still_advised_one():
    p = _pipeline(["Iterator::Root", "Iterator::Root::Prefetch", MAP, MAP + "::TensorSlice"], MAP)
    assert p.source == "in_memory" and p.unseen_upstream is None
    assert fit_to_run._cache_done(p) is None and fit_to_run._unseen_sentence(p) == "no cache() in the pipeline."


def _jax_compute_findings(device_kind, no_xla):
    from tfbneck_plugin.analysis.findings import Findings, StepFacts
    from tfbneck_plugin.analysis.placement import Placement
    placement = Placement(device_kind=device_kind, device_planes=0 if device_kind == "CPU" else 1,
                          device_events=0 if device_kind == "CPU" else 1000)
    return Findings(framework="jax", device_kind=device_kind, placement=placement,
                    steps=StepFacts(source="step_markers ('train')", count=10, mean_ms=10.0),
                    pct={"device_compute": 90.0}, keras_no_xla=no_xla)


def test_a_jax_model_with_layers_without_xla_is_not_said_to_be_jitted():
    """Keras on JAX jits the step only when every layer supports XLA (keras/src/trainers/trainer.py,
    ``model_supports_jit``): with RandomRotation in the model, the advice says the step is not
    compiled and names the layers to move out; without, that Keras compiles it."""
    from tfbneck_plugin.analysis.advice import advice_for
    for kind in ("CPU", "GPU"):
        held = " ".join(r["detail"] for r in advice_for("model_compute", _jax_compute_findings(kind, ["RandomRotation"])))
        assert "already compiles" not in held and "with jax.jit already" not in held, held
        assert "without jax.jit" in held and "RandomRotation" in held and "input pipeline" in held, held
        plain = " ".join(r["detail"] for r in advice_for("model_compute", _jax_compute_findings(kind, None)))
        assert "Keras already compiles the step with jax.jit" in plain, plain
