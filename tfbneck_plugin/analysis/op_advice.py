"""Advice that names the ops: the measured op types behind a compute-bound or input-bound
verdict, added to its first recommendation, from the report's ``op_summary``
(:mod:`.op_report`).

* Model compute: the costliest op types on the device (share of its busy time) or, when the
  host computes, on the host (share of the step), and what helps them: mixed precision for
  MatMul/Conv-family ops on a GPU (Tensor Cores run fp16/bf16 matrix math; NVIDIA's mixed
  precision training guide), XLA fusion when small elementwise ops dominate (one fused
  kernel instead of one per op: TensorFlow's XLA guide). The order of the recommendations
  (their predicted gains, :mod:`.whatif`) is kept.
* Input-bound: the costliest op types inside the blocking stage's function.
"""
from __future__ import annotations

import re
from typing import List, Optional

from ..schema import OpGroup, OpSummary, Recommendation
from .ops import XLA_OP_PREFIX

#: Op types that are matrix math (MatMul, BatchMatMulV2, _FusedMatMul, _MklMatMul, Conv2D,
#: Conv2DBackpropInput, DepthwiseConv2dNative, Einsum; XLA's dot/convolution/gemm; PyTorch's
#: aten::mm, addmm, bmm, baddbmm, addbmm, matmul, _scaled_mm and the convolutions).
MATRIX_RE = re.compile(r"MatMul|Conv|Einsum|^dot|convolution|gemm|^aten::(_scaled_)?(add|badd)?b?mm$|^aten::matmul$",
                       re.I)
#: Causes whose first recommendation names the model's op types / the input function's op types.
COMPUTE_CAUSES = ("model_compute",)
INPUT_CAUSES = ("input_preprocessing", "cpu_contention")
#: Op types named in a sentence.
NAMED = 3
#: Said when the trace holds no op events inside the blocking stage's function. TensorFlow's
#: profiler records a tf.data function's ops only sometimes: in runs of one program here
#: (`.map(f).batch(b)` with default options, TF 2.21, benchmarks/pairs_corpus.py's
#: ``fused12-usual`` pairs) 3 of 6 windows held them and 3 held the function calls without
#: a single op inside.
NO_TFDATA_OPS = ("The trace holds no op events inside `{stage}`'s function (TensorFlow's profiler did not record "
                 "them in this window; it leaves them out of some windows even of one program), so its costliest ops "
                 "cannot be named here; profile another window to see them.")


def _groups(summary: OpSummary, where: str, stage: Optional[str] = None) -> List[OpGroup]:
    return [g for g in summary.get("by_type") or [] if g["where"] == where
            and (where != "input_pipeline" or g.get("stage") == stage)]


#: TensorFlow ops that take one element and cannot run on a batch: ``tf.io.read_file`` and the
#: image and audio decoders take a scalar string (TensorFlow's API docs: "contents: A Tensor of
#: type string. 0-D."), so batching before a map of them batches nothing.
ONE_ELEMENT_OPS = frozenset({"ReadFile", "DecodePng", "DecodeJpeg", "DecodeAndCropJpeg", "DecodeGif", "DecodeBmp",
                             "DecodeImage", "DecodeWav"})


def one_element_share(summary: OpSummary, stage: str) -> float:
    """The share (%) of the tf.data stage ``stage``'s op self time (its path, as the op
    summary's input-pipeline groups name it) spent in :data:`ONE_ELEMENT_OPS`; 0 where the
    summary has no ops for it."""
    groups = _groups(summary, "input_pipeline", stage)
    total = sum(g["self_ms_per_step"] for g in groups)
    one = sum(g["self_ms_per_step"] for g in groups if g["type"] in ONE_ELEMENT_OPS)
    return 100.0 * one / total if total > 0 else 0.0


def measured_types(summary: OpSummary, where: str, stage: Optional[str] = None) -> Optional[str]:
    """"`MatMul` ops 61 % of the step (40.1 ms per step), ..." for the costliest types, or None."""
    groups = _groups(summary, where, stage)[:NAMED]
    if not groups:
        return None
    basis = "of the device's busy time" if where == "device" else "of the step"
    return ", ".join(f"`{g['type']}` {g['pct']:.0f} % {basis} ({g['self_ms_per_step']:.2f} ms per step, "
                     f"{g['count_per_step']:g} runs)" for g in groups)


def matrix_share(summary: OpSummary, where: str) -> float:
    """The MatMul/Conv family's share (%) of the place's op self time."""
    groups = _groups(summary, where)
    total = sum(g["self_ms_per_step"] for g in groups)
    matrix = sum(g["self_ms_per_step"] for g in groups if MATRIX_RE.search(g["type"]))
    return 100.0 * matrix / total if total > 0 else 0.0


#: What fuses elementwise ops into fewer kernels, in each framework's words.
FUSER = {"pytorch": "torch.compile", "jax": "XLA (jax.jit)"}


def _compute_note(summary: OpSummary, where: str, framework: str = "tensorflow") -> Optional[str]:
    named = measured_types(summary, where)
    if named is None:
        return None
    share = matrix_share(summary, where)
    matrix = ("mixed precision runs it on Tensor Cores" if where == "device" else
              "a GPU, or oneDNN's bf16 paths on a CPU that has them, speed it up")
    if any(str(g.get("type", "")).startswith(XLA_OP_PREFIX) for g in _groups(summary, where)):
        # The step already runs as XLA executables (analysis.ops' "XLA ..." rows): XLA's fusion is done.
        return (f"Measured op types: {named}; the step already runs compiled by XLA, which fuses the elementwise "
                f"ops: for the matrix math, {matrix}.")
    if share >= 50:  # the majority: the matrix math is what to speed up first
        helps = f"matrix math is most of it: {matrix}"
    else:
        helps = (f"the rest (elementwise and optimizer ops) is most of it: {FUSER.get(framework, 'XLA')} fuses those "
                 f"into fewer kernels; for the matrix math, {matrix}")
    return f"Measured op types: {named}; MatMul/Conv ops are {share:.0f} % of the op time, so {helps}."


def name_ops(cause: str, recs: List[Recommendation], summary: Optional[OpSummary], blocking: Optional[str],
             device_kind: str = "CPU", framework: str = "tensorflow") -> List[Recommendation]:
    """``recs`` with the first one's detail naming the measured ops. ``summary``: the report's
    ``op_summary``; ``blocking``: the blocking tf.data stage's path; ``device_kind``: the
    breakdown's device (an accelerator whose ops the trace lacks gets no note: the host's
    ops would only be the launching side)."""
    if not recs or not summary:
        return recs
    note = None
    if cause in COMPUTE_CAUSES:
        where = "device" if _groups(summary, "device") else "host"
        if where == "host" and device_kind != "CPU":
            return recs
        note = _compute_note(summary, where, framework)
    elif cause in INPUT_CAUSES and blocking:
        named = measured_types(summary, "input_pipeline", blocking)
        if named:
            note = f"The costliest ops in `{blocking.split('::')[-1]}`'s function: {named}."
        elif not _groups(summary, "input_pipeline", blocking) and "Generator" not in blocking.split("::")[-1]:
            # (a Generator stage runs Python, not TensorFlow ops: nothing is missing there)
            note = NO_TFDATA_OPS.format(stage=blocking.split("::")[-1])
    if note is None:
        return recs
    first = recs[0].copy()
    first["detail"] = f"{recs[0].get('detail', '')} {note}".strip()
    return [first] + list(recs[1:])
