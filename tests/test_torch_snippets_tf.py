"""The code of PyTorch recommendations runs as printed: each snippet is executed against a tiny
real DataLoader and model (torch on CPU), with the names the snippet says are the user's
(``loader``, ``train_step``). Marked ``tf`` as tests/test_torch_runs_tf.py is: it needs torch."""
from __future__ import annotations

import re
import time

import pytest

from tfbneck_plugin.analysis import torch_advice

pytestmark = pytest.mark.tf

#: How long each DataLoader worker takes to start here (worker_init_fn): long beside a step of the
#: tiny model, so that a timing that includes the workers' start shows it.
WORKER_START_S = 1.5


def _slow_start(_worker_id):
    time.sleep(WORKER_START_S)


def test_measure_input_runs_as_printed_with_worker_processes(capsys):
    """``measure_input`` (a CPU-only run whose loader has workers): the snippet runs with
    num_workers=2, times the loader after its workers started, and prints how to read the ratio."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    n = 40  # batches: more than the snippet's warm-up and timed ones (35)
    ds = TensorDataset(torch.randn(2 * n, 8), torch.randint(0, 2, (2 * n,)))
    loader = DataLoader(ds, batch_size=2, num_workers=2, worker_init_fn=_slow_start)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(x, y):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    code = torch_advice._measure_workers()["code"]
    ns = {"loader": loader, "train_step": train_step}
    exec(compile(code, "<measure_input>", "exec"), ns)  # noqa: S102 - the snippet under test
    out = capsys.readouterr().out
    assert re.search(r"^loader [\d.]+ ms/step, cached [\d.]+ ms/step: [\d.]+x: "
                     r"(the input limits the run|the model limits it, not the input|between the two: run it again)$",
                     out.strip()), out
    # the workers' start (WORKER_START_S, at least 50 ms per timed step) is not in the loader's time
    assert ns["real"] < WORKER_START_S / 30 / 2, out


def test_measure_input_says_how_to_read_the_ratio():
    rec = torch_advice._measure_workers()
    for text in (rec["detail"], rec["code"]):
        assert str(torch_advice.INPUT_LIMITED_GAIN) in text and str(torch_advice.MODEL_LIMITED_GAIN) in text


def test_the_docs_give_the_same_measurement():
    """docs/pytorch.md's "Measure the input's cost" block is the fix's code, as printed."""
    import os
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "pytorch.md"), encoding="utf-8").read()
    section = doc.split("### Measure the input's cost", 1)[1]
    block = section.split("```python\n", 1)[1].split("\n```", 1)[0]
    assert block == torch_advice._measure_workers()["code"]
