"""A Keras fit on JAX, read from the XSpace JAX's profiler writes: the same questions
:mod:`.host` answers for TensorFlow's host plane, in JAX's events.

JAX's trace has no tf.data and no TensorFlow executor. What each breakdown category is made
of here (event and thread names as jaxlib 0.10 records them on the CPU; jax/_src/profiler.py,
xla/pjrt/cpu/):

``input``           the callback's annotation around each fetch of a batch,
                    ``tfbneck.keras_input/<kind>`` (:data:`tfbneck_plugin.trace.keras_marks.KERAS_INPUT_EVENT`):
                    the step waiting for Keras' data iterator (a generator, a PyDataset, a
                    tf.data pipeline converted to NumPy...).
model math          on a host without accelerator activity, the XLA executable running on
                    the PjRt CPU client's threads (``tf_XLA...`` lines: ``ThunkExecutor::Execute``
                    and the fusions under it), ``ThunkExecutor::Execute`` on any thread, and the
                    training thread waiting for the step's results
                    (:data:`tfbneck_plugin.trace.keras_marks.KERAS_STEP_WAIT_EVENT`: JAX's host tracer
                    records only part of XLA's CPU work, the wait covers all of it).
training function   ``PjitFunction(<name>)`` on the training thread (the jitted step's
                    dispatch).
steps               the ``train`` markers (``jax.profiler.StepTraceAnnotation('train',
                    step_num=N)``), found by :mod:`.steps` as TensorFlow's.

A JAX trace without step markers (a plain ``jax.profiler.trace`` of any program) is not
analysed here: :func:`analysable` is False and the shared analysis says so
(``not_tensorflow``).
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from functools import cached_property
from typing import Optional

import numpy as np

from ..trace.keras_marks import KERAS_INPUT_EVENT, KERAS_STEP_WAIT_EVENT
from ..trace import timeline
from ..trace.xspace import Space
from . import host as hostmod
from .host_analysis import HostAnalysis

#: The PjRt CPU client's worker threads (``tf_XLAPjRtCpuClient/<id>``) and XLA's Eigen pool.
XLA_THREAD_PREFIX = "tf_XLA"
#: The XLA CPU runtime's execution of one executable (xla/backends/cpu/runtime/thunk_executor.cc).
XLA_EXECUTE_EVENT = "ThunkExecutor::Execute"
#: The jitted function's dispatch on the calling thread (jaxlib's C++ pjit fast path).
PJIT_PREFIX = "PjitFunction"
INPUT_PREFIX = KERAS_INPUT_EVENT + "/"


def is_jax(space: Space) -> bool:
    """The trace is JAX's: its metadata plane names ``jax_version``/``jaxlib_version``, or
    its host events are JAX's (``PjitFunction``, ``PjRt``...)."""
    meta = space.plane("/host:metadata")
    if meta is not None and {"jax_version", "jaxlib_version"} & set(meta.plane_stats()):
        return True
    view = hostmod.host_view(space)
    names = view.plane.event_names.values() if view is not None else ()
    return any(n.startswith((PJIT_PREFIX, "PjRt")) for n in names)


def analysable(space: Space) -> bool:
    """A JAX trace with step markers (``train``: the callback's, or a loop's own
    ``StepTraceAnnotation('train', ...)``): its steps can be broken down."""
    if not is_jax(space):
        return False
    view = hostmod.host_view(space)
    return view is not None and len(view.marker_ids()) > 0


@dataclasses.dataclass
class JaxHostView(hostmod.HostView):
    """The host plane of a JAX trace, answering :class:`.host.HostView`'s questions with JAX's
    events (module docstring). ``count_waits``: the training thread's wait for the step's
    results is the model's math (True on a host without device activity; on an accelerator
    the device's own events say when it computed)."""
    count_waits: bool = True

    def input_ids(self) -> np.ndarray:
        """Metadata ids of the callback's input marks."""
        return self.ids(("keras-input",), lambda n: n.startswith(INPUT_PREFIX))

    def get_next_intervals(self) -> timeline.Intervals:
        """Time the step waited for Keras' next batch (ps)."""
        return self.intervals(self.select(self.input_ids()))

    def xla_lines(self):
        return [i for i, ln in enumerate(self.plane.lines) if (ln.name or "").startswith(XLA_THREAD_PREFIX)]

    def model_executor_intervals(self) -> timeline.Intervals:
        """The XLA executable running on the host (module docstring), less the input marks (ps)."""
        parts = [self.intervals(self.select(self.ids_named([XLA_EXECUTE_EVENT])))]
        if self.count_waits:
            parts.append(self.intervals(self.select(self.ids_named([KERAS_STEP_WAIT_EVENT]))))
        for li in self.xla_lines():
            line = self.plane.lines[li]
            parts.append((line.start_ps, line.start_ps + line.dur_ps))
        runs = timeline.union(*timeline.concat(parts))
        return timeline.difference(runs, timeline.union(*self.get_next_intervals()))

    def training_function_runs(self):
        """``PjitFunction(...)`` dispatches on the training thread."""
        if self.training_line is None:
            return []
        return self.select(self.ids(("pjit",), lambda n: n.startswith(PJIT_PREFIX)), [self.training_line])

    def keras_input(self) -> Optional[str]:
        """What fed the fit, as the input marks name it (the most frequent), or None."""
        kinds: Counter = Counter()
        names = self.plane.event_names
        for li, idx in self.select(self.input_ids()):
            for m in self.plane.lines[li].name_id[idx]:
                kinds[names[int(m)][len(INPUT_PREFIX):]] += 1
        return kinds.most_common(1)[0][0] if kinds else None


class JaxHostAnalysis(HostAnalysis):
    """:class:`.host_analysis.HostAnalysis` of a Keras fit on JAX: its host view is JAX's
    (this module); steps, devices, breakdown, rules, advice and the report are the shared ones."""

    @cached_property
    def host_view(self) -> Optional[hostmod.HostView]:
        base = hostmod.host_view(self.space)
        if base is None:
            return None
        return JaxHostView(plane=base.plane, tfdata_lines=[], count_waits=not any(d.n_events for d in self.devices))

    @cached_property
    def framework(self) -> str:
        return "jax"

    @cached_property
    def pipeline(self):
        """No tf.data events in a JAX trace (a tf.data pipeline feeding it runs outside JAX's profiler)."""
        return None

    @cached_property
    def findings(self):
        view = self.view
        kind = view.keras_input() if isinstance(view, JaxHostView) else None
        return dataclasses.replace(super().findings, keras_input=kind)
