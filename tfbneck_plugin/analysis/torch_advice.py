"""The advice catalogue in PyTorch's words: for each cause code the rules give a PyTorch
run (:mod:`.torch_host`), the changes that help, as :mod:`.advice` gives them for
TensorFlow. A recommendation has the same shape (``fix``, ``title``, ``detail``, ``code``);
the fix ids are PyTorch's own (``num_workers``, ``pin_memory``, ``non_blocking``,
``persistent_workers``, ``torch_compile``, ``cuda_graphs``, ``amp``, ``ddp_buckets``...), and
:mod:`.whatif` predicts what each is worth where a model of the trace's numbers exists.

The knobs and their defaults are PyTorch's documented ones: ``torch.utils.data.DataLoader``
(``num_workers=0``, ``pin_memory=False``, ``persistent_workers=False``,
``prefetch_factor=2`` per worker), ``Tensor.to(..., non_blocking=True)`` (asynchronous only
from pinned memory), ``torch.compile`` (``mode="reduce-overhead"`` captures CUDA graphs),
``torch.autocast``, ``DistributedDataParallel(bucket_cap_mb=25, gradient_as_bucket_view)``
and ``torch.profiler.profile(activities=..., schedule=..., with_stack=...)``.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from ..schema import Recommendation
from .findings import Findings

Rec = Recommendation

#: Workers a DataLoader recommendation names (the what-if model reads ``num_workers=`` from
#: the code): PyTorch's examples use 4; the model caps it at the cores the run has.
DEFAULT_WORKERS = 4


def _rec(fix: str, title: str, detail: str, code: Optional[str] = None) -> Rec:
    return {"fix": fix, "title": title, "detail": detail, "code": code}


def _gpu(f: Findings) -> bool:
    return f.device_kind in ("GPU", "TPU")


def _workers(f: Findings) -> List[Rec]:
    loader = f.loader
    if loader is not None and loader.workers:
        shared = ("" if _gpu(f) else " On a CPU-only host the workers load on the cores the model's math uses: "
                  "more of them help only while a core sits idle (num_workers + torch.get_num_threads() up to the "
                  "cores you have); measure it (tfbneck compare).")
        return [_rec("more_workers", "Give the DataLoader more worker processes, and let them run further ahead",
                     "The batches already come from worker processes, and the loop still waits for them: more "
                     "workers (up to the cores the model leaves free) and a deeper prefetch_factor keep more batches "
                     "in flight." + shared,
                     f"loader = DataLoader(ds, batch_size=bs, shuffle=True, num_workers={2 * DEFAULT_WORKERS},"
                     "  # at most your cores:\n"
                     "                    prefetch_factor=4, persistent_workers=True)  # len(os.sched_getaffinity(0))")]
    return [_rec("num_workers", "Load batches in DataLoader worker processes (num_workers)",
                 "With num_workers=0 the training loop loads every batch itself (the dataset's __getitem__, its "
                 "transforms and collate) while the model waits. Worker processes load batches ahead of the step, "
                 "in parallel and outside the training process's GIL.",
                 f"loader = DataLoader(ds, batch_size=bs, shuffle=True, num_workers={DEFAULT_WORKERS},"
                 "  # at most your cores:\n"
                 "                    persistent_workers=True, prefetch_factor=2)  # len(os.sched_getaffinity(0))")]


def _persistent(_f: Findings) -> Rec:
    return _rec("persistent_workers", "Keep the workers alive across epochs (persistent_workers=True)",
                "Without it every epoch starts its worker processes again (each re-imports the dataset); the first "
                "batches of each epoch then wait for them.",
                "loader = DataLoader(ds, batch_size=bs, num_workers=n, persistent_workers=True)  # n: your num_workers")


def _pin(f: Findings) -> List[Rec]:
    if not _gpu(f):
        return []
    return [_rec("pin_memory", "Pin the batches' memory and copy them asynchronously",
                 "pin_memory=True puts batches in page-locked memory, from which a copy with non_blocking=True "
                 "overlaps the GPU's work instead of holding the host.",
                 "loader = DataLoader(ds, batch_size=bs, num_workers=4, pin_memory=True)\n"
                 "x = x.to('cuda', non_blocking=True)")]


def _input(f: Findings, kind: str) -> List[Rec]:
    out = _workers(f)
    if kind in ("io", "network"):
        out.append(_rec("local_copy", "Read the data from local disk, in fewer larger files",
                        "Every batch waits on storage: copy the data set to local SSD before training, or pack "
                        "small files into shards (WebDataset tar shards, one file per thousands of samples).", None))
    else:
        on_gpu = (", move augmentation to the GPU (torchvision.transforms.v2 on CUDA tensors)," if _gpu(f)
                  else ", apply augmentation to the whole batch at once (vectorised tensor ops in collate_fn),")
        cheaper = _rec("cheaper_transforms", "Do less work per sample in the dataset",
                       f"Decode once and cache the result{on_gpu} or let collate stack tensors rather than convert "
                       "Python objects.", None)
        # Worker processes on a CPU-only host load on the model's cores: more of them move the
        # work between processes, less work per sample removes it.
        shared = not _gpu(f) and f.loader is not None and f.loader.workers
        out.insert(0, cheaper) if shared else out.append(cheaper)
    out += _pin(f)
    if f.loader is not None and f.loader.workers:
        out.append(_persistent(f))
    return out


def _contention(f: Findings) -> List[Rec]:
    return [_rec("free_cores", "Give the DataLoader its cores back",
                 "Other processes kept the CPU busy while the loop waited for batches: run training where it does "
                 "not share cores, or set torch.set_num_threads() and num_workers to the cores you own.",
                 "torch.set_num_threads(4)\nloader = DataLoader(ds, batch_size=bs, num_workers=4)")] + _input(f, "cpu")


def _transfer(_f: Findings) -> List[Rec]:
    return [_rec("non_blocking", "Copy batches with non_blocking=True from pinned memory",
                 "A copy from pageable memory holds the host until it ends; from pinned memory with "
                 "non_blocking=True it overlaps the GPU's work. Avoid .item(), .cpu() and printing GPU tensors "
                 "inside the step: each waits for the GPU.",
                 "loader = DataLoader(ds, batch_size=bs, num_workers=4, pin_memory=True)\n"
                 "for x, y in loader:\n    x, y = x.to('cuda', non_blocking=True), y.to('cuda', non_blocking=True)")]


def _compile(detail: str, mode: Optional[str] = None) -> Rec:
    arg = f", mode={mode!r}" if mode else ""
    return _rec("torch_compile", "Compile the model with torch.compile", detail,
                f"model = torch.compile(model{arg})")


def _launch(_f: Findings) -> List[Rec]:
    return [_rec("cuda_graphs", "Replay the step as a CUDA graph",
                 "The GPU idles while the host launches many small kernels one by one. A CUDA graph launches the "
                 "whole step's kernels at once: torch.compile with mode='reduce-overhead' captures them (static "
                 "shapes), or torch.cuda.graphs by hand.",
                 "model = torch.compile(model, mode='reduce-overhead')"),
            _compile("Fuses small ops into fewer, bigger kernels, so there is less to launch."),
            _rec("larger_batch", "Raise the batch size",
                 "Each kernel then does more work for the same launch cost.", None)]


def _python(_f: Findings) -> List[Rec]:
    return [_compile("The step's Python and op-by-op dispatch take the time; torch.compile traces the model once "
                     "and runs it as compiled graphs, with far less per-op overhead."),
            _rec("cuda_graphs", "Replay the step as a CUDA graph",
                 "Once compiled, mode='reduce-overhead' also removes the per-kernel launch cost.",
                 "model = torch.compile(model, mode='reduce-overhead')")]


#: Time per batch from the loader over time per batch on cached batches, from which the input
#: limits the run (1.25) and under which it does not (1.1): the thresholds of
#: ``tfbneck_plugin.measure_input_cost`` (capture/input_cost.py ``INPUT_LIMITED`` and
#: ``MODEL_LIMITED``, the tutorial corpus's definitions, benchmarks/tutorial_corpus.py).
INPUT_LIMITED_GAIN = 1.25
MODEL_LIMITED_GAIN = 1.1
#: Batches the snippet times on each side, after warm-up batches that start the workers and
#: fill their prefetch queue (as ``measure_input_cost`` times 30 steps after 5).
MEASURE_STEPS = 30
MEASURE_WARMUP = 5


def _measure_workers() -> Rec:
    """A CPU-only run whose DataLoader workers' work the trace cannot see
    (:func:`.torch_host.shared_cores_verdict`): time the model on cached batches first.
    The code runs as printed given the user's ``loader`` (at least
    :data:`MEASURE_WARMUP` + :data:`MEASURE_STEPS` batches) and ``train_step(x, y)``
    (tests/test_torch_snippets_tf.py runs it)."""
    n, warm = MEASURE_STEPS, MEASURE_WARMUP
    return _rec("measure_input", "First measure whether the DataLoader's workers take the model's cores",
                "The model computes on the CPU, and the DataLoader's worker processes load on the same cores, out of "
                "this trace: their work can look like a slow model. Time the step on the loader's batches against "
                f"the same step on cached batches (the model alone), each after {warm} warm-up batches (the workers' "
                f"start): loader time / cached time of {INPUT_LIMITED_GAIN}x or more says the input limits the run "
                "(fewer or cheaper workers, lighter per-item work, or cache the preprocessed data); under "
                f"{MODEL_LIMITED_GAIN}x the model does, and the verdict stands.",
                "import itertools, time\n"
                f"def per_step(batches, n={n}, warm={warm}):\n"
                "    it = iter(batches)                  # a loader's iterator starts its workers\n"
                "    for x, y in itertools.islice(it, warm):\n"
                "        train_step(x, y)                # warm-up, not timed\n"
                "    t0, k = time.perf_counter(), 0\n"
                "    for x, y in itertools.islice(it, n):\n"
                "        train_step(x, y)                # your loop's step\n"
                "        k += 1\n"
                "    return (time.perf_counter() - t0) / k\n"
                f"cached = list(itertools.islice(iter(loader), {n + warm}))   # batches made once\n"
                "real, alone = per_step(loader), per_step(cached)\n"
                "gain = real / alone\n"
                "print(f'loader {real * 1e3:.1f} ms/step, cached {alone * 1e3:.1f} ms/step: {gain:.2f}x:',\n"
                f"      'the input limits the run' if gain >= {INPUT_LIMITED_GAIN} else\n"
                f"      'the model limits it, not the input' if gain < {MODEL_LIMITED_GAIN} else\n"
                "      'between the two: run it again')")


def _compute(f: Findings) -> List[Rec]:
    if not _gpu(f) and f.loader is not None and f.loader.workers and f.system is None:
        return [_measure_workers()] + _compute_on_cpu()
    if not _gpu(f):
        return _compute_on_cpu()
    return [_rec("amp", "Use automatic mixed precision (torch.autocast)",
                 "Tensor cores run bf16/fp16 math several times faster than fp32.",
                 "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = loss_fn(model(x), y)"),
            _compile("Fuses ops: fewer kernels and fewer round trips to GPU memory.")]


def _compute_on_cpu() -> List[Rec]:
    return [_rec("use_gpu", "Run the model on a GPU",
                 "The CPU does the model's math, which is the limit: a GPU (or more cores) shortens the step.",
                 "device = 'cuda' if torch.cuda.is_available() else 'cpu'\nmodel = model.to(device)\n"
                 "for x, y in loader:\n    x, y = x.to(device), y.to(device)   # each batch too\n    train_step(x, y)"),
            _compile("On the CPU, torch.compile fuses ops and vectorises them; measure it (tfbneck compare) "
                     "before keeping it.")]


def _sync(_f: Findings) -> List[Rec]:
    return [_rec("ddp_buckets", "Overlap gradient all-reduce with the backward pass (DDP buckets)",
                 "DistributedDataParallel all-reduces gradients in buckets while backward still runs: a bucket size "
                 "that fits the model (bucket_cap_mb, 25 MB by default) starts the first all-reduce earlier; "
                 "gradient_as_bucket_view saves a copy; no_sync() over gradient-accumulation steps syncs once per "
                 "several batches; a straggling rank holds every other one at the all-reduce.",
                 "model = DistributedDataParallel(model, device_ids=[rank], bucket_cap_mb=50,\n"
                 "                                gradient_as_bucket_view=True)")]


#: The training loop under the profiler that both profiling snippets end with: one prof.step() per batch.
_STEP_LOOP = "    for x, y in loader:\n        train_step(x, y)\n        prof.step()"


def _capture(_f: Findings) -> List[Rec]:
    return [_rec("fix_device_trace", "Record the GPU's activity too (ProfilerActivity.CUDA)",
                 "The trace holds the host's events only: profile with the CUDA activity on (CUPTI must be "
                 "available and permitted; ROCm's roctracer likewise).",
                 "from torch.profiler import profile, ProfilerActivity, schedule, tensorboard_trace_handler\n"
                 "with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
                 "             schedule=schedule(wait=1, warmup=1, active=5),\n"
                 "             on_trace_ready=tensorboard_trace_handler('logs')) as prof:\n" + _STEP_LOOP)]


def _placement(_f: Findings) -> List[Rec]:
    return [_rec("use_gpu", "Put the model and its batches on the GPU",
                 "A GPU was present but the model's ops ran on the CPU: move the model and every batch to it.",
                 "model = model.to('cuda')\nx, y = x.to('cuda', non_blocking=True), y.to('cuda', non_blocking=True)")]


def _markers(f: Findings) -> List[Rec]:
    if f.steps.found:
        return [_rec("python_tracer", "Record the Python inside the steps (with_stack=True)",
                     "The steps are marked, but most of each passed with nothing recorded: Python the profiler "
                     "does not record by default. Profile again with stacks on.",
                     "with torch.profiler.profile(with_stack=True, schedule=..., on_trace_ready=...) as prof:")]
    return [_rec("step_markers", "Mark the steps with prof.step()",
                 "Call prof.step() once per training step: each step is then a ProfilerStep#N, and the report's "
                 "breakdown is per step.",
                 "with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=5),\n"
                 "        on_trace_ready=torch.profiler.tensorboard_trace_handler('logs')) as prof:\n" + _STEP_LOOP)]


def _idle(_f: Findings) -> List[Rec]:
    return [_rec("profile_training_steps", "Profile steps in which training runs",
                 "Nothing ran in this window: choose the active steps well inside training with "
                 "torch.profiler.schedule (wait, warmup, active).",
                 "schedule = torch.profiler.schedule(wait=10, warmup=2, active=5)")]


#: cause code -> recommendations for a PyTorch run.
ADVICE: Dict[str, Callable[[Findings], List[Rec]]] = {
    "input_preprocessing": lambda f: _input(f, "cpu"),
    "cpu_contention": _contention,
    "file_read": lambda f: _input(f, "io"),
    "remote_read": lambda f: _input(f, "network"),
    "gradient_sync": _sync,
    "host_device_transfer": _transfer,
    "kernel_launch": _launch,
    "python_overhead": _python,
    "eager_execution": _python,
    "retracing": _python,
    "model_compute": _compute,
    "device_trace_missing": _capture,
    "model_on_cpu": _placement,
    "unrecorded": _markers,
    "no_activity": _idle,
}


def advice_for(cause: str, f: Findings) -> List[Rec]:
    """The recommendations for ``cause`` in a PyTorch run (a key of :data:`ADVICE`).

    Raises:
      KeyError: ``cause`` is not one the rules give a PyTorch run.
    """
    return ADVICE[cause](f)
