"""The cause codes of a verdict, in one table: the code, the bottleneck kind it belongs to,
and one sentence saying what it means.

The report carries both ``cause`` (the code, a public contract: scripts compare it) and
``cause_text`` (the sentence below), so the TensorBoard tab, the notebook view and the README
read their wording from here instead of copying it (a test checks the README's list against
this table).
"""
from __future__ import annotations

from typing import Dict, NamedTuple


class Cause(NamedTuple):
    """One cause code: ``bottleneck`` is ``cpu``, ``device``, ``io``, ``network`` or ``unknown``."""
    bottleneck: str
    text: str


CAUSES: Dict[str, Cause] = {
    "input_preprocessing": Cause("cpu", "The tf.data preprocessing (map, decode, augment, Python generator) "
                                        "cannot keep up with training."),
    "cpu_contention": Cause("cpu", "Other processes on the machine take the CPU cores the input pipeline needs."),
    "python_overhead": Cause("cpu", "Python and Keras overhead on the host between and inside steps."),
    "eager_execution": Cause("cpu", "Ops run eagerly, one by one from Python, with no tf.function."),
    "retracing": Cause("cpu", "The tf.function is traced again in many steps: each step pays for building a "
                              "new graph."),
    "kernel_launch": Cause("cpu", "The host launches many small kernels and the device waits for them."),
    "model_on_cpu": Cause("cpu", "The model ran on the CPU although an accelerator was present."),
    "model_compute": Cause("device", "The model's own math keeps the device busy: the healthy state."),
    "host_device_transfer": Cause("io", "Copies between host and device take a large share of the step: "
                                        "delivering the data to the device, the input side's work."),
    "file_read": Cause("io", "The input pipeline waits for its data rather than computing: reading it from "
                             "storage (or another slow source its code waits on) is too slow."),
    "remote_read": Cause("network", "Reading input over the network is too slow."),
    "gradient_sync": Cause("network", "Devices wait on gradient synchronisation (collectives) that no "
                                      "worker's lateness explains."),
    "device_trace_missing": Cause("unknown", "The accelerator ran the model but its activity was not recorded "
                                             "(CUPTI missing or not permitted), so no verdict can be made."),
    "no_activity": Cause("unknown", "The trace holds no training activity."),
    "unrecorded": Cause("unknown", "Most of the step has no recorded activity; the trace cannot say what "
                                   "limited it."),
    "not_tensorflow": Cause("unknown", "This is not a TensorFlow trace (JAX/XLA): input-pipeline and step "
                                       "analysis do not apply."),
    # A system-only session (tfbneck_plugin.analysis.system_session): the flowchart's triage, no trace.
    "triage_cpu": Cause("cpu", "From the system metrics alone (no trace): the CPU limits the training process (its "
                               "threads fill a core or the machine, or wait for cores other processes hold) while no "
                               "accelerator is busy; a profile says whether input or model."),
    "triage_device": Cause("device", "From the system metrics alone (no trace): the accelerator is busy over "
                                     "90 % of the time."),
    "triage_io": Cause("io", "From the system metrics alone (no trace): the process and the accelerator both "
                             "mostly idle: it waits, for storage or something else."),
    "triage_network": Cause("network", "From the system metrics alone (no trace): little CPU, the accelerator "
                                       "idle and the network busy."),
    "triage_unclear": Cause("unknown", "From the system metrics alone (no trace): no single resource is "
                                       "saturated; a profile is needed."),
}

#: The causes that name the input pipeline as the limit (its preprocessing, the cores it lacks,
#: the storage or network it reads from).
INPUT_CAUSES = ("input_preprocessing", "cpu_contention", "file_read", "remote_read")


#: The sentences that name TensorFlow's parts, in PyTorch's words for a PyTorch trace
#: (torch.utils.data.DataLoader in place of tf.data; torch.compile in place of tf.function).
PYTORCH_TEXTS: Dict[str, str] = {
    "input_preprocessing": "The DataLoader's loading (the dataset's __getitem__, transforms, collate) cannot keep "
                           "up with training.",
    "cpu_contention": "Other processes on the machine take the CPU cores the DataLoader and the model need.",
    "python_overhead": "Python overhead on the host between and inside steps.",
    "eager_execution": "Ops run one by one from Python (eager PyTorch), with no torch.compile.",
    "retracing": "The model is compiled again in many steps: each step pays for building a new graph.",
}


def cause_text(code: str, framework: str = "tensorflow") -> str:
    """The sentence for ``code``, in PyTorch's words for ``framework`` ``pytorch``
    (:data:`PYTORCH_TEXTS`); raises KeyError for a code that is not in the table."""
    if framework == "pytorch" and code in PYTORCH_TEXTS:
        return PYTORCH_TEXTS[code]
    return CAUSES[code].text


def markdown_table() -> str:
    """The cause table as Markdown, as the README shows it."""
    rows = ["| cause | bottleneck | meaning |", "|---|---|---|"]
    rows += [f"| `{code}` | {c.bottleneck} | {c.text} |" for code, c in CAUSES.items()]
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
