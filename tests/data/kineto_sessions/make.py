"""Writes small real PyTorch profiler traces (torch.profiler, tensorboard_trace_handler) for
the discovery tests: how a folder's Kineto files become sessions (tfbneck_plugin/logdir.py).

    python make.py OUT [SCENARIO ...]     scenarios: rerun cycles ddp together tail export (default: all)

Each scenario writes ``OUT/<scenario>/``:

  rerun     the same script run twice, one process after the other (two pids, no
            distributedInfo, windows apart in time): two sessions.
  cycles    one process, ``schedule(repeat=2)``: two files of one worker, two sessions.
  ddp       two ranks of a gloo process group (distributedInfo: rank, world_size 2), each
            profiling two cycles: two sessions of two hosts each, paired by time.
  together  two processes profiling at the same time without a process group (no
            distributedInfo, overlapping windows): one session of two hosts.
  tail      one process, ``schedule(wait=1, warmup=1, active=3)`` without ``repeat=`` (0: the
            cycle starts again until the loop ends) and a loop two steps longer than the
            cycle: the handler writes the cycle's trace, then at exit a second file holding
            only a ``ProfilerStep#N`` marker, no activity: one session, and one file left out.
  export    one process, one cycle of three steps saved by ``prof.export_chrome_trace`` (in
            ``on_trace_ready``) under a name of the script's (``trace.json``, kept gzipped as
            ``trace.json.gz``).

A tiny model on the CPU, a few steps with a short sleep each (so that the windows of
processes started together overlap): about 2 s per scenario on 2 cores, files of 20-60 kB.
"""
import os
import socket
import subprocess
import sys
import time

STEP_SLEEP_S = 0.05


def _train(logdir, repeat=1, gzip=False, barrier=None, tail=False):
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model)
    if barrier is not None:
        barrier.wait()
    sched = (schedule(wait=1, warmup=1, active=3) if tail else
             schedule(wait=0, warmup=1, active=3, repeat=repeat))
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 on_trace_ready=tensorboard_trace_handler(logdir, use_gzip=gzip)) as prof:
        for _ in range(7 if tail else 4 * repeat):
            x = torch.randn(8, 16)
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            time.sleep(STEP_SLEEP_S)
            prof.step()


def _export(logdir):
    import gzip
    import shutil
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    path = os.path.join(logdir, "trace.json")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(8, 16)).pow(2).mean().backward()
            opt.step()
            time.sleep(STEP_SLEEP_S)
            prof.step()
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_rank(rank, world, port, logdir):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        _train(logdir, repeat=2, gzip=rank == 1)
    finally:
        dist.destroy_process_group()


def _together_rank(logdir, barrier):
    _train(logdir, barrier=barrier)


def main(out, scenarios):
    import torch.multiprocessing as mp
    for name in scenarios:
        logdir = os.path.join(out, name)
        os.makedirs(logdir, exist_ok=True)
        if name == "rerun":
            for _ in range(2):
                subprocess.run([sys.executable, __file__, "--one", logdir], check=True)
        elif name == "cycles":
            _train(logdir, repeat=2)
        elif name == "tail":
            _train(logdir, gzip=True, tail=True)
        elif name == "export":
            _export(logdir)
        elif name == "ddp":
            mp.spawn(_ddp_rank, args=(2, _free_port(), logdir), nprocs=2, join=True)
        elif name == "together":
            ctx = mp.get_context("spawn")
            barrier = ctx.Barrier(2)
            procs = [ctx.Process(target=_together_rank, args=(logdir, barrier)) for _ in range(2)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
                if p.exitcode:
                    raise SystemExit(f"together: a process exited with {p.exitcode}")
        else:
            raise SystemExit(f"unknown scenario {name}")


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        _train(sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2:] or ["rerun", "cycles", "ddp", "together", "tail", "export"])
