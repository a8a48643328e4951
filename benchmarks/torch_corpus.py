"""PyTorch training runs made by script on CPU, profiled with ``torch.profiler``, each with its
truth measured by ablation, and tfbneck's verdict on each against that truth.

    pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu   # the CPU build
    python benchmarks/torch_corpus.py [--logdir DIR] [--only NAME,NAME] [--steps N] [--json FILE]

Each run writes Kineto traces with ``torch.profiler.tensorboard_trace_handler`` under
``<logdir>/<run>/`` (one ``<worker>.<time>.pt.trace.json`` per process), one cycle after the
first ``WORKER_START_STEPS`` batches (``schedule(skip_first=...)``, as docs/pytorch.md advises:
a DataLoader's workers start there), then tfbneck analyses the run folder (its API; this
script imports torch, the analyzer does not).

The truth of a run, by ablation: the same model, loop and batch size timed twice without the
profiler, after the same untimed first batches, once fed by its DataLoader and once from
batches made beforehand and cached in a
list (no loading at all), in three interleaved rounds of each, the fastest round of each kept
(other processes' load slows both alike). ``speedup = loader time per step / cached time per
step``:

    speedup >= 1.25    input-bound (removing the loading makes the run 25 % faster or more)
    speedup <  1.10    not input-bound
    in between         ambiguous: left out of the judging

tfbneck's verdict is input-bound when its cause is one of :data:`INPUT_CAUSES`. A verdict is
wrong when it contradicts a clear truth; a wrong verdict at confidence 0.7 or more is what the
issue's acceptance forbids.

The runs (:data:`RUNS`) are pairs, one of each pair in the ``fit`` half and the other in the
``judged`` half (same kind of run, other sizes): a threshold is chosen on the fit half only
and reported on the judged half. Two choices bear on these runs: the 0.6 cap on a non-input
verdict where CPU-only worker processes are unseen (torch_host.SHARED_CORES_MAX_CONFIDENCE, chosen
on the fit half's workers2_mid), and the wait from which such workers are called behind
(input_rules.WORKERS_BEHIND_PCT, not fitted: the wait whose removal alone gains 1.1x, this script's
own line). The split is printed so that any later choice keeps to it.

Runs:
    loader0_*     a single-process DataLoader (``num_workers=0``) whose dataset does costly
                  per-item work (a numpy transform of an image-sized array per sample; the
                  ``_io`` pair also waits 0.5 ms per sample, as a read from slow storage does)
    workers*_*    the same dataset and model with worker processes (the fix of loader0_*);
                  on 2 cores the CPU-bound workers share the model's cores, the ``_io`` ones
                  mostly wait
    compute_*     a model whose math dominates, fed cheap batches
    ddp_gloo_*    DistributedDataParallel over gloo between two processes on this machine
                  (``torch.distributed``, TCP on 127.0.0.1), one trace per rank

Threads: the model runs on one intra-op thread (``torch.set_num_threads(1)``) so that the runs
behave alike on a 2-core machine and the DataLoader's workers have cores to run on.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tfbneck_plugin.analysis.torch_host import WORKER_START_STEPS  # noqa: E402  (no torch, no TensorFlow)

#: The causes that mean "input-bound" (tfbneck_plugin/causes.py).
INPUT_CAUSES = ("input_preprocessing", "file_read", "remote_read")
#: Ablation speedups: at or above INPUT_BOUND the run is input-bound, below NOT_BOUND it is not.
INPUT_BOUND, NOT_BOUND = 1.25, 1.10

#: name -> the run's settings. ``work``: numpy passes per sample (the per-item cost);
#: ``io_ms``: a wait per sample standing for a read from slow storage (``time.sleep``);
#: ``hidden``: the MLP's width; ``layers``: its depth; ``workers``: DataLoader num_workers;
#: ``ranks``: processes (2: DDP over gloo); ``half``: fit or judged.
RUNS: Dict[str, Dict] = {
    "loader0_heavy":   dict(work=12, hidden=512, layers=2, batch=32, workers=0, ranks=1, half="fit"),
    "loader0_mid":     dict(work=6, hidden=1024, layers=2, batch=32, workers=0, ranks=1, half="judged"),
    "loader0_light":   dict(work=3, hidden=1024, layers=3, batch=32, workers=0, ranks=1, half="fit"),
    "loader0_slight":  dict(work=1, hidden=1536, layers=3, batch=32, workers=0, ranks=1, half="judged"),
    "workers2_heavy":  dict(work=12, hidden=512, layers=2, batch=32, workers=2, ranks=1, half="judged"),
    "workers2_mid":    dict(work=6, hidden=1024, layers=2, batch=32, workers=2, ranks=1, half="fit"),
    "loader0_io":      dict(work=2, io_ms=0.5, hidden=512, layers=2, batch=32, workers=0, ranks=1, half="fit"),
    "workers4_io":     dict(work=2, io_ms=0.5, hidden=512, layers=2, batch=32, workers=4, ranks=1, half="judged"),
    "compute_wide":    dict(work=0, hidden=1536, layers=4, batch=64, workers=0, ranks=1, half="fit"),
    "compute_deep":    dict(work=0, hidden=1024, layers=8, batch=64, workers=0, ranks=1, half="judged"),
    "ddp_gloo":        dict(work=0, hidden=1024, layers=4, batch=32, workers=0, ranks=2, half="fit"),
    "ddp_gloo_loader": dict(work=12, hidden=512, layers=2, batch=32, workers=0, ranks=2, half="judged"),
}

#: Timed rounds of each kind (loader, cached), interleaved; the fastest of each is kept.
ROUNDS = 3

FEATURES = 3 * 32 * 32  # an image-sized sample: 3 x 32 x 32 floats


def truth_of(speedup: float) -> str:
    """``input-bound``, ``not input-bound`` or ``ambiguous`` (module docstring)."""
    if speedup >= INPUT_BOUND:
        return "input-bound"
    if speedup < NOT_BOUND:
        return "not input-bound"
    return "ambiguous"


# ---- the training code (imports torch) -----------------------------------------------------------

def _dataset(work: int, n: int, io_ms: float = 0.0):
    import numpy as np
    import torch
    from torch.utils.data import Dataset

    ready = torch.randn(256, FEATURES)

    class CostlyDataset(Dataset):
        """Samples made on demand: ``work`` passes of a numpy transform (a blur and a
        normalisation of a 3 x 64 x 64 array, then a 2x downsample) per item, after a wait of
        ``io_ms`` (a read from slow storage); with neither, a row of a tensor made beforehand
        (cheap batches)."""

        def __len__(self):
            return n

        def __getitem__(self, i):
            if not work and not io_ms:
                return ready[i % len(ready)], int(i % 10)
            if io_ms:
                time.sleep(io_ms / 1e3)
            rng = np.random.default_rng(i)
            img = rng.random((3, 64, 64), dtype=np.float32)
            for _ in range(work):
                img = (img + np.roll(img, 1, axis=1) + np.roll(img, 1, axis=2)) / 3.0
                img = (img - img.mean()) / (img.std() + 1e-6)
            x = torch.from_numpy(np.ascontiguousarray(img[:, ::2, ::2]).reshape(-1))
            return x, int(i % 10)

    return CostlyDataset()


def _model(hidden: int, layers: int):
    import torch
    dims = [FEATURES] + [hidden] * layers
    mods: List = []
    for a, b in zip(dims, dims[1:]):
        mods += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    mods.append(torch.nn.Linear(dims[-1], 10))
    return torch.nn.Sequential(*mods)


def _train_step(model, opt, x, y):
    import torch
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


def _loop(cfg: Dict, steps: int, rank: int = 0, world: int = 1, trace_dir: Optional[str] = None,
          worker: str = "host") -> Dict[str, float]:
    """One process's share of a run: the profiled loop (when ``trace_dir``), then the
    ablation's two timed loops. Returns seconds per step of each."""
    import torch
    from torch.utils.data import DataLoader
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = _model(cfg["hidden"], cfg["layers"])
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # Untimed and untraced first batches: a DataLoader's worker processes start and fill their
    # prefetch queue there (tfbneck takes traced steps before WORKER_START_STEPS as warm-up).
    warm = WORKER_START_STEPS
    n = cfg["batch"] * (steps + warm + 2) * 2
    ds = _dataset(cfg["work"], n, cfg.get("io_ms", 0.0))
    kw = dict(batch_size=cfg["batch"], num_workers=cfg["workers"], shuffle=False)
    if cfg["workers"]:
        kw.update(persistent_workers=False, prefetch_factor=2)

    def loader_iter():
        return iter(DataLoader(ds, **kw))

    def timed(batches, count):
        for _ in range(warm):
            x, y = next(batches)
            _train_step(model, opt, x, y)
        if world > 1:
            torch.distributed.barrier()
        t0 = time.perf_counter()
        for _ in range(count):
            x, y = next(batches)
            _train_step(model, opt, x, y)
        return (time.perf_counter() - t0) / count

    out: Dict[str, float] = {}
    if trace_dir:
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
        it = loader_iter()
        # as docs/pytorch.md advises: skip the start-up, then one cycle
        with profile(activities=[ProfilerActivity.CPU],
                     schedule=schedule(skip_first=warm, wait=1, warmup=1, active=steps, repeat=1),
                     on_trace_ready=tensorboard_trace_handler(trace_dir, worker_name=worker)) as prof:
            for _ in range(warm + 1 + 1 + steps):
                x, y = next(it)
                _train_step(model, opt, x, y)
                prof.step()
        del it
    # the same batches, made beforehand: the loop then does no loading at all
    cached = list(itertools.islice(iter(DataLoader(ds, batch_size=cfg["batch"])), warm + steps))
    # interleaved rounds, the fastest of each kind: other processes' load hits both alike
    loader_s, cached_s = [], []
    for _ in range(ROUNDS):
        loader_s.append(timed(loader_iter(), steps))
        cached_s.append(timed(iter(cached), steps))
    out["loader_s"], out["cached_s"] = min(loader_s), min(cached_s)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, cfg: Dict, steps: int, trace_dir: str, result_dir: str):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out = _loop(cfg, steps, rank, world, trace_dir, worker=f"rank{rank}")
    finally:
        dist.destroy_process_group()
    with open(os.path.join(result_dir, f"{rank}.json"), "w") as f:
        json.dump(out, f)


def make_run(name: str, logdir: str, steps: int = 12) -> Dict:
    """Make run ``name`` (:data:`RUNS`) under ``logdir/name``; returns its ablation:
    ``loader_ms``, ``cached_ms`` (per step), ``speedup`` and ``truth``."""
    cfg = RUNS[name]
    trace_dir = os.path.join(logdir, name)
    shutil.rmtree(trace_dir, ignore_errors=True)
    os.makedirs(trace_dir)
    if cfg["ranks"] == 1:
        out = _loop(cfg, steps, trace_dir=trace_dir, worker="host")
    else:
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory() as rd:
            mp.spawn(_ddp_worker, args=(cfg["ranks"], _free_port(), cfg, steps, trace_dir, rd), nprocs=cfg["ranks"])
            parts = [json.load(open(os.path.join(rd, f))) for f in sorted(os.listdir(rd))]
        out = {k: max(p[k] for p in parts) for k in ("loader_s", "cached_s")}
    speedup = out["loader_s"] / out["cached_s"]
    return {"run": name, "half": cfg["half"], "loader_ms": round(out["loader_s"] * 1e3, 2),
            "cached_ms": round(out["cached_s"] * 1e3, 2), "speedup": round(speedup, 3), "truth": truth_of(speedup)}


# ---- the verdicts (no torch) ---------------------------------------------------------------------

def verdict_of(run_dir: str) -> Dict:
    """tfbneck's report on a run folder, reduced to what is judged."""
    import tfbneck_plugin as tfb
    rep = tfb.analyze(run_dir)
    [s] = list(rep)
    d = s if isinstance(s, dict) else s.data if hasattr(s, "data") else dict(s)
    cause = d.get("cause")
    return {"cause": cause, "confidence": d.get("confidence"), "bottleneck": d.get("bottleneck"),
            "verdict": "input-bound" if cause in INPUT_CAUSES else "not input-bound",
            "input_pct": (d.get("breakdown_pct") or {}).get("input"),
            "step_ms": ((d.get("steps") or {}).get("step_time_ms") or {}).get("mean"),
            "fix": ((d.get("recommendations") or [{}])[0]).get("fix")}


def judge(row: Dict) -> str:
    """``right``, ``wrong`` or ``ambiguous`` (the truth is neither)."""
    if row["truth"] == "ambiguous":
        return "ambiguous"
    return "right" if row["verdict"] == row["truth"] else "wrong"


def table(rows: List[Dict]) -> str:
    head = ("| run | half | loader ms/step | cached ms/step | speedup | truth | tfbneck cause | confidence | "
            "verdict | judged |")
    out = [head, "|" + "---|" * 10]
    for r in rows:
        out.append(f"| {r['run']} | {r['half']} | {r['loader_ms']:.1f} | {r['cached_ms']:.1f} | {r['speedup']:.2f}x | "
                   f"{r['truth']} | {r['cause']} | {r['confidence']} | {r['verdict']} | {r['judged']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logdir", default=None, help="where the runs go (default: a new folder under /tmp)")
    ap.add_argument("--only", default="", help="comma-separated run names (default: all of RUNS)")
    ap.add_argument("--steps", type=int, default=12, help="profiled and timed steps per run (default 12)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    ap.add_argument("--compare", action="store_true",
                    help="also run `tfbneck compare` on the loader0/workers2 pairs present")
    a = ap.parse_args(argv)
    logdir = a.logdir or tempfile.mkdtemp(prefix="torch_corpus_")
    names = [n for n in (a.only.split(",") if a.only else RUNS) if n]
    rows = []
    for name in names:
        t0 = time.perf_counter()
        row = make_run(name, logdir, a.steps)
        row.update(verdict_of(os.path.join(logdir, name)))
        row["judged"] = judge(row)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(f"{name}: {row['speedup']:.2f}x {row['truth']}; tfbneck {row['cause']} ({row['confidence']}) "
              f"-> {row['judged']} [{row['seconds']} s]", flush=True)
    print(f"\nlogdir: {logdir}\n")
    print(table(rows))
    for half in ("fit", "judged"):
        hr = [r for r in rows if r["half"] == half and r["judged"] != "ambiguous"]
        right = sum(r["judged"] == "right" for r in hr)
        print(f"{half} half: {right}/{len(hr)} right (ambiguous left out)")
    bad = [r["run"] for r in rows if r["judged"] == "wrong" and (r["confidence"] or 0) >= 0.7]
    print("wrong at confidence >= 0.7:", ", ".join(bad) if bad else "none")
    if a.compare:
        for base, cand in (("loader0_heavy", "workers2_heavy"), ("loader0_mid", "workers2_mid"),
                           ("loader0_io", "workers4_io")):
            if base in names and cand in names:
                import subprocess
                r = subprocess.run([sys.executable, "-m", "tfbneck_plugin.cli", "compare", "--format", "json",
                                    os.path.join(logdir, base), os.path.join(logdir, cand)],
                                   capture_output=True, text=True)
                try:
                    c = json.loads(r.stdout)
                    print(f"compare {base} -> {cand}: {c.get('verdict') or c.get('change')}")
                except ValueError:
                    print(f"compare {base} -> {cand}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
