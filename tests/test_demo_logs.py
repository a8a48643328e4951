"""README command 1's input: every shipped demo run gets the verdict it was built for."""
import json
import os
import subprocess

from conftest import DATA, DEMO_LOGS, tfbneck_cmd


def test_demo_verdicts_match_how_each_run_was_made():
    expected = json.load(open(os.path.join(DEMO_LOGS, "EXPECTED.json")))
    r = subprocess.run(tfbneck_cmd() + ["analyze", DEMO_LOGS, "--format", "json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = {s["run"]: s for s in json.loads(r.stdout)["sessions"]}
    assert set(got) == set(expected)
    for run, want in expected.items():
        s = got[run]
        assert (s["bottleneck"], s["cause"]) == (want["bottleneck"], want["cause"]), run
        assert s["step_source"] == "step_markers ('train')" and s["steps"]["count"] == want.get("steps", 5)
        assert s["system_metrics"]["samples"] > 0
    assert got["cpu_bound_input"]["input_pipeline"]["bottleneck_stage"].endswith("::Map")
    assert got["slow_file_reads"]["input_pipeline"]["bottleneck_stage"].endswith("::Generator")



def test_the_demo_pair_with_its_input_fixed_compares_faster():
    """`cpu_bound_input_fixed` is `cpu_bound_input` (the same model and batch) with the input
    fixed (parallel map, cache, prefetch), profiled once the cache is full: the comparison
    says faster, the wait for input all but gone, the verdict no longer the input."""
    r = subprocess.run(tfbneck_cmd() + ["compare", os.path.join(DEMO_LOGS, "cpu_bound_input"),
                                        os.path.join(DEMO_LOGS, "cpu_bound_input_fixed"), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    (c,) = json.loads(r.stdout)["comparisons"]
    assert c["verdict"] == "faster" and c["change_pct"] == -69.51
    assert (c["breakdown_ms"]["input"]["baseline"], c["breakdown_ms"]["input"]["candidate"]) == (8.804, 0.065)
    assert (c["baseline"]["cause"], c["candidate"]["cause"]) == ("input_preprocessing", "model_compute")

def test_demo_logs_stay_small():
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(DEMO_LOGS) for f in fs)
    assert total < 5 * 2 ** 20


def test_a_window_opened_on_a_slowdown_names_the_input_whose_work_took_the_models_cores(tmp_path):
    """tests/data/cache_filling_window (CPU-only, a 3 x 1024-unit model beside a parallel map
    on a 2-core machine whose threads queued for cores; in its window, steps 6-10 of the first
    pass, the cache is still being filled, so the 200-pass map runs). As the scheduled window
    it is, the map's work is the cache's first pass, which later passes do not repeat: the
    verdict is the model's math (the same model fed its cached batches ran 1.08x faster) and
    the evidence says the cache is filling. Recorded as a window the slowdown trigger opened,
    against a baseline its steps are 1.5x or more over, the map's work over the cores the
    training used explains more than half of the growth: the slowdown rule names the input,
    the cause of that window's slowdown. Against a baseline its steps are under 1.5x of, the
    window missed the slowdown and reads as the scheduled one. The committed files are not
    touched."""
    import glob
    import shutil
    src = os.path.join(DATA, "cache_filling_window")
    sidecar_rel = os.path.relpath(glob.glob(os.path.join(src, "plugins/profile/*/tfbneck_system_metrics.json"))[0], src)
    before = open(os.path.join(src, sidecar_rel), "rb").read()

    def analysed(baseline_ms):
        run = tmp_path / f"base{baseline_ms}"
        shutil.copytree(src, run)
        if baseline_ms is not None:
            raw = json.loads(before)
            raw["window"].update(kind="triggered", trigger={
                "kind": "slowdown", "baseline_mean_ms": baseline_ms, "baseline_p50_ms": baseline_ms,
                "observed_mean_ms": 2.0 * baseline_ms, "observed_p50_ms": 2.0 * baseline_ms,
                "thresholds": {"factor": 1.5}})
            (run / sidecar_rel).write_text(json.dumps(raw))
        r = subprocess.run(tfbneck_cmd() + ["analyze", str(run), "--format", "json", "--no-cache"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["sessions"][0]
    scheduled = analysed(None)
    step = scheduled["steps"]["step_time_ms"]["mean"]
    assert (scheduled["bottleneck"], scheduled["cause"]) == ("device", "model_compute"), scheduled["evidence"]
    assert any("still filling" in e and "ParallelMapV2" in e for e in scheduled["evidence"]), scheduled["evidence"]
    grew = analysed(round(step / 1.5 - 1.0, 3))
    assert (grew["bottleneck"], grew["cause"]) == ("cpu", "input_preprocessing"), grew["evidence"]
    assert any("opened on a slowdown" in e for e in grew["evidence"])
    missed = analysed(round(step / 1.5 + 1.0, 3))
    assert missed["cause"] == "model_compute"
    assert not any("opened on a slowdown" in e for e in missed["evidence"])
    assert open(os.path.join(src, sidecar_rel), "rb").read() == before


def test_the_trigger_record_is_read_only_when_whole():
    """records.slowdown_trigger: a triggered window's slowdown record gives its baseline, the
    slow stretch and the factor (trimmed means first, medians in older files); a scheduled
    window, another trigger kind, or a missing, zero or non-numeric figure gives None."""
    from tfbneck_plugin.records import slowdown_trigger
    trig = {"kind": "slowdown", "baseline_mean_ms": 10.0, "baseline_p50_ms": 9.0, "observed_mean_ms": 21.0,
            "observed_p50_ms": 20.0, "thresholds": {"factor": 1.5}}

    def read(window_kind="triggered", **changes):
        return slowdown_trigger({"window": {"kind": window_kind, "trigger": {**trig, **changes}}})
    assert read() == {"baseline_ms": 10.0, "observed_ms": 21.0, "factor": 1.5, "baseline_p50_ms": 9.0,
                      "observed_p50_ms": 20.0}
    assert read(baseline_mean_ms=None, observed_mean_ms=None) == {"baseline_ms": 9.0, "observed_ms": 20.0, "factor": 1.5,
                                                                   "baseline_p50_ms": 9.0, "observed_p50_ms": 20.0}
    assert read(baseline_p50_ms=None)["baseline_p50_ms"] is None   # older files: the means alone
    assert read(window_kind="scheduled") is None and read(kind="other") is None
    assert read(baseline_mean_ms=0, baseline_p50_ms=None) is None
    assert read(observed_mean_ms="21", observed_p50_ms=True) is None
    assert read(thresholds={"factor": 1.0}) is None and read(thresholds=None) is None
    assert slowdown_trigger({"window": None}) is None and slowdown_trigger({}) is None


def test_a_model_holding_layers_without_xla_gets_them_moved_out_before_jit_compile(tmp_path):
    """The demo's compute_bound run (CPU-only, the model's math the limit: XLA its second fix),
    its sidecar recording a Keras 3 model that holds RandomRotation and TextVectorization, which
    do not support XLA (Keras then compiles the model without jit_compile: test_summaries checks
    that against Keras itself): the fix moves those layers into the input pipeline first. The
    same run recording a model whose layers all support XLA keeps the plain fix; the committed
    files are not touched."""
    import glob
    import shutil
    src = os.path.join(DEMO_LOGS, "compute_bound")
    sidecar_rel = os.path.relpath(glob.glob(os.path.join(src, "plugins/profile/*/tfbneck_system_metrics.json"))[0], src)
    before = open(os.path.join(src, sidecar_rel), "rb").read()

    def analysed(no_xla):
        run = tmp_path / ("with" if no_xla else "without")
        shutil.copytree(src, run)
        raw = json.loads(before)
        raw.update(backend="tensorflow", model={"class": "Sequential", "name": "m", "layers": 4, "params": 99,
                                                "no_xla": no_xla})
        (run / sidecar_rel).write_text(json.dumps(raw))
        r = subprocess.run(tfbneck_cmd() + ["analyze", str(run), "--format", "json", "--no-cache"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["sessions"][0]
    plain = analysed([])
    # On a CPU host a GPU comes first, XLA second (with "measure it").
    assert plain["cause"] == "model_compute" and plain["model"]["no_xla"] == []
    assert [r["fix"] for r in plain["recommendations"]] == ["use_gpu", "xla"]
    xla = plain["recommendations"][1]
    assert xla["title"] == "Try XLA on the model math, and measure it" and "preprocess" not in xla["code"]
    held = analysed(["RandomRotation", "TextVectorization"])
    assert held["model"]["no_xla"] == ["RandomRotation", "TextVectorization"]
    assert [r["fix"] for r in held["recommendations"]] == ["use_gpu", "xla"]
    xla = held["recommendations"][1]
    assert xla["title"] == ("Take RandomRotation, TextVectorization out of the model, "
                            "then: Try XLA on the model math, and measure it")
    assert "compiles it without jit_compile=True" in xla["detail"]
    code = xla["code"].splitlines()
    assert "ds = ds.map(lambda x, y: (preprocess(x, training=True), y)" in code[2]
    assert "model.compile(optimizer, loss, jit_compile=True)" in code
    assert open(os.path.join(src, sidecar_rel), "rb").read() == before
