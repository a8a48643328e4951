"""Exact synthetic traces shared by several test modules (built with tests/support/xspace_builder.py)."""
from support.xspace_builder import SpaceBuilder

#: Step length of the built traces (us).
STEP_US = 10_000


def cpu_input_bound(b: SpaceBuilder, n_steps=3, input_us=6000, compute_us=2000, stage="Map"):
    """CPU-only host: each 10 ms step waits ``input_us`` in IteratorGetNext on the tf.data stage
    ``stage`` (sequential), then computes ``compute_us``. Returns the host plane builder."""
    host = b.plane("/host:CPU")
    py = host.line("python")
    getnext = host.line("tf_data_iterator_get_next/1")
    compute = host.line("tf_Compute/2")
    tfdata = host.line("tf_data_iterator_resource/3")
    for k in range(n_steps):
        t = k * STEP_US
        py.event("train", t, STEP_US, step_num=k + 1, _r=1)
        py.event("FunctionRun", t + 1000, 8000, _r=1, _p=100 + k, _pt=2, id=k)
        py.event("TFE_Py_ExecuteCancelable", t + 9000, 500)
        getnext.event("IteratorGetNextOp::DoCompute", t + 1000, input_us, id=k)
        getnext.event(f"Iterator::Root::{stage}", t + 1000, input_us, parallelism=1)
        compute.event("ExecutorState::Process", t + 1000 + input_us, compute_us, _c=100 + k, _ct=2)
        tfdata.event(f"Iterator::Root::{stage}::TensorSlice", t + 1100, 100)
    return host
