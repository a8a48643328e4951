"""``HostAnalysis``: the analysis of one host's XSpace, one lazily computed property per
stage, each the work of one module (the facade over the analysis modules):

    host_view (host) -> devices -> framework -> step_search (steps) -> view (the host view
    with the training thread the step finders saw) -> placement -> activity -> parts /
    breakdown_pct (breakdown) -> pipeline (tfdata) -> device_rows, gaps -> findings ->
    verdict (rules, advice) -> report() (host_report, sync)

Each property computes its value from the values it names, as arguments of one module's
function; no stage writes into another's value, so the order of the work follows from the
data. Times are ps unless a name says otherwise.
"""
from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..schema import HostReport, OpSummary, SystemMetrics
from ..trace import timeline
from ..trace.timeline import ms
from ..trace.xspace import Space
from . import activity as activitymod
from . import breakdown, devices as devmod, host as hostmod, host_report, idle_gaps, op_report, ops as opsmod, steps as stepsmod
from . import cpu_share, tfdata, whatif
from .findings import Findings, KernelFacts, Slowdown, StepFacts
from .odd_steps import INPUT_WAIT_RHYTHM, INPUT_WAIT_SHARE, odd_sentence, odd_steps, waited_sentence
from .placement import Placement, find_placement
from .rules import decide
from .sync import sync_section
from .verdict import Verdict, verdict_fields

#: Events only TensorFlow writes on the host plane (core/common_runtime/executor.cc,
#: process_function_library_runtime.cc, eager/execute.cc, core/kernels/data/iterator_ops.cc).
TF_HOST_EVENTS = (hostmod.EXECUTOR_EVENT, hostmod.FUNCTION_RUN, "EagerExecute", "EagerKernelExecute", hostmod.LEGACY_MARKER,
                  "IteratorGetNextOp::DoCompute", "TFE_Py_ExecuteCancelable")
#: Prefixes of JAX's host events (jax/_src/interpreters/pxla.py PjitFunction; PjRt client).
JAX_HOST_PREFIXES = ("PjitFunction", "PjRt", "$")


#: A step is input-bound when it waited for input this share (%) of its time: the verdict's
#: input-bound level (thresholds.INPUT_BOUND_PCT, XProf's "HIGHLY input-bound") applied per step.
INPUT_BOUND_STEP_PCT = 20.0


class HostAnalysis:
    """Analysis of one host. ``system``: the sidecar summary (analysis.sysmetrics.summarize);
    ``slowdown``: the trigger that opened the window (records.slowdown_trigger), or None;
    ``keras``: ``{"backend", "input"}`` of the Keras fit the callback profiled
    (trace.keras_marks.recorded_backend) and ``no_xla``, its model's layers without XLA
    support (records.recorded_model), or None."""

    def __init__(self, space: Space, system: Optional[SystemMetrics] = None, slowdown: Optional[Dict] = None,
                 keras: Optional[Dict] = None):
        self.space = space
        self.system = system
        self.slowdown = Slowdown(**slowdown) if slowdown else None
        self.keras = keras

    @cached_property
    def host_view(self) -> Optional[hostmod.HostView]:
        """The classified host plane (:mod:`.host`), None without a ``/host:CPU`` plane."""
        return hostmod.host_view(self.space)

    @cached_property
    def view(self) -> Optional[hostmod.HostView]:
        """The host view with the training thread the step finders saw (``training_line``)."""
        if self.host_view is None:
            return None
        return dataclasses.replace(self.host_view, training_line=self.step_search.training_line)

    @cached_property
    def devices(self) -> List[devmod.Device]:
        """The accelerator planes (:mod:`.devices`)."""
        return devmod.read_devices(self.space)

    @cached_property
    def framework(self) -> str:
        """``jax``, ``tensorflow`` or ``unknown``, from the metadata plane and host event names."""
        meta = self.space.plane("/host:metadata")
        if meta is not None and {"jax_version", "jaxlib_version"} & set(meta.plane_stats()):
            return "jax"
        if self.host_view is None:
            return "unknown"
        names = set(self.host_view.plane.event_names.values())
        if any(n in names for n in TF_HOST_EVENTS) or any(n.startswith("Iterator::") for n in names):
            return "tensorflow"
        if any(n.startswith(JAX_HOST_PREFIXES) for n in names):
            return "jax"
        return "unknown"

    @cached_property
    def step_search(self) -> stepsmod.StepSearch:
        """The step finders' result (:mod:`.steps`): the steps found and why the others did not apply."""
        return stepsmod.find_steps(self.space, self.host_view)

    @cached_property
    def slow_mask(self) -> np.ndarray:
        """Which found steps the outlier test marks (:func:`.odd_steps.odd_steps`, judged among
        the non-warm-up ones), bool, shape (n_found,); empty without steps."""
        found = self.step_search.steps
        if found is None:
            return np.zeros(0, dtype=bool)
        slow = np.zeros(found.count, dtype=bool)
        keep = self._not_warmup(found)
        slow[keep] = odd_steps(found.durations_ps[keep])
        return slow

    @cached_property
    def odd_mask(self) -> np.ndarray:
        """Which found steps are odd: the :attr:`slow_mask` less those that waited for input
        (:meth:`_waited_for_input`), bool, shape (n_found,); empty without steps."""
        found, slow = self.step_search.steps, self.slow_mask
        if found is None:
            return slow
        return slow & ~self._waited_for_input(found, slow)

    def _waited_for_input(self, found: stepsmod.Steps, slow: np.ndarray) -> np.ndarray:
        """Which of the ``slow`` steps spent at least :data:`.odd_steps.INPUT_WAIT_SHARE` of
        their time waiting for input, where :data:`.odd_steps.INPUT_WAIT_RHYTHM` or more did,
        bool, shape (n_found,): they stay in the steady steps (:func:`.odd_steps.waited_sentence`)."""
        out = np.zeros(found.count, dtype=bool)
        if not slow.any():
            return out
        starts, ends = found.starts[slow], found.ends[slow]
        waited = breakdown.per_step(self.activity, starts, ends)["input"]
        waits = waited >= INPUT_WAIT_SHARE * (ends - starts)
        # One such step may be an accident (a one-off stall); two or more in one window are a rhythm.
        if waits.sum() >= INPUT_WAIT_RHYTHM:
            out[slow] = waits
        return out

    @staticmethod
    def _not_warmup(found: stepsmod.Steps) -> np.ndarray:
        warm = found.warmup
        if len(warm) and warm.any() and not warm.all():
            return ~warm
        return np.ones(found.count, dtype=bool)

    @cached_property
    def steps(self) -> Optional[stepsmod.Steps]:
        """The steady steps: the steps found, less the leading warm-up steps (tf.function
        tracing, graph building, compilation), which would distort the breakdown, and less
        the odd ones (:attr:`odd_mask`). When every step is warm-up they are all kept (and
        the confidence says so)."""
        found = self.step_search.steps
        if found is None:
            return None
        keep = self._not_warmup(found) & ~self.odd_mask
        if keep.all():
            return found
        return dataclasses.replace(found, numbers=found.numbers[keep], starts=found.starts[keep],
                                   ends=found.ends[keep], graph_build_ps=found.graph_build_ps[keep],
                                   warmup=found.warmup[keep] if len(found.warmup) else found.warmup)

    @cached_property
    def odd(self) -> Optional[str]:
        """The sentences naming the odd steps left out of the steady steps and the slow ones kept
        because they waited for input (:mod:`.odd_steps`), or None."""
        steps, found, slow, odd = self.steps, self.step_search.steps, self.slow_mask, self.odd_mask
        if steps is None or found is None or not slow.any():
            return None
        said = []
        if odd.any():
            starts, ends = found.starts[odd], found.ends[odd]
            waited = breakdown.per_step(self.activity, starts, ends)["input"]
            median = float(np.median(np.concatenate([steps.durations_ps, ends - starts])))
            said.append(odd_sentence(found.numbers[odd], ends - starts, waited, median))
        kept = slow & ~odd
        if kept.any():
            starts, ends = found.starts[kept], found.ends[kept]
            waited = breakdown.per_step(self.activity, starts, ends)["input"]
            others = float(np.median(found.durations_ps[self._not_warmup(found) & ~slow]))
            said.append(waited_sentence(found.numbers[kept], ends - starts, waited, others))
        return " ".join(s for s in said if s) or None

    @cached_property
    def window(self) -> Optional[Tuple[int, int]]:
        """[first, last] host event time (ps), or None without host events."""
        return stepsmod.host_window(self.host_view)

    @cached_property
    def placement(self) -> Placement:
        """Where the model ran (:mod:`.placement`)."""
        return find_placement(self.view, self.devices)

    @cached_property
    def activity(self) -> breakdown.Activity:
        """The interval sets of each breakdown category (:mod:`.activity`)."""
        return activitymod.gather_activity(self.view, self.devices, self.placement)

    @cached_property
    def windows(self) -> Tuple[np.ndarray, np.ndarray]:
        """The analysed windows: the steps, else the host window, else the device activity span."""
        if self.steps is not None:
            return self.steps.starts, self.steps.ends
        if self.window is not None:
            return np.array([self.window[0]]), np.array([self.window[1]])
        busy = timeline.union(*timeline.concat([d.busy for d in self.devices])) if self.devices else timeline.empty()
        return busy[0][:1], busy[1][-1:]

    @cached_property
    def parts(self) -> Dict[str, np.ndarray]:
        """ps per breakdown category per analysed window, arrays of shape (n_windows,)."""
        starts, ends = self.windows
        if not len(starts):
            return {c: np.zeros(0, dtype=np.int64) for c in breakdown.CATEGORIES}
        return breakdown.per_step(self.activity, starts, ends)

    @cached_property
    def breakdown_pct(self) -> Dict[str, float]:
        """Share (%) of the analysed time per category; sums to 100."""
        return breakdown.percentages(self.parts)

    @cached_property
    def origin(self) -> int:
        """Time 0 of the report's ``start_ms`` values (ps)."""
        starts, _ = self.windows
        return self.window[0] if self.window else (int(starts[0]) if len(starts) else 0)

    @cached_property
    def pipeline(self) -> Optional[tfdata.Pipeline]:
        """The tf.data stages over the analysed windows (:mod:`.tfdata`), None without a host plane."""
        if self.view is None:
            return None
        starts, ends = self.windows
        return tfdata.analyze_pipeline(self.view, (int(starts[0]), int(ends[-1])) if len(starts) else None)

    @cached_property
    def ops(self) -> opsmod.OpTable:
        """Self time per op over the analysed windows (:mod:`.ops`): host, input pipeline, device."""
        starts, ends = self.windows
        n = len(starts)
        step_ps = float((ends - starts).mean()) if n else 0.0
        if not n:
            return opsmod.OpTable([], 0, 0.0, 0.0)
        order = np.argsort(starts)
        win_s, win_e = starts[order], ends[order]
        rows = self.host_op_rows(win_s, win_e) if self.view is not None else []
        planes = [(devmod.device_kind(p.name), p) for p in self.space.planes if devmod.device_kind(p.name)]
        dev_rows, busy = opsmod.device_ops(planes, win_s, win_e, self.op_launchers)
        return opsmod.OpTable(rows + dev_rows, n, step_ps, busy, self.op_scope)

    def host_op_rows(self, win_s: np.ndarray, win_e: np.ndarray) -> List[opsmod.OpRow]:
        """Host and input-pipeline op rows of the sorted windows (:func:`.ops.host_ops`; ps totals)."""
        return opsmod.host_ops(self.view, self.pipeline, win_s, win_e) if self.view is not None else []

    @property
    def op_launchers(self) -> opsmod.Launchers:
        """The op behind each device event (:data:`.ops.Launchers`): TensorFlow's stats."""
        return opsmod.tf_launchers

    @property
    def op_scope(self):
        """An op row's layer scope (:attr:`.ops.OpTable.scope`): from TensorFlow's op name."""
        return opsmod.name_scope

    @cached_property
    def op_summary(self) -> OpSummary:
        """The report's ``op_summary`` (:func:`.op_report.op_summary`): the advice names its ops."""
        return op_report.op_summary(self.ops)

    @cached_property
    def device_rows(self) -> List[Dict]:
        """Per-device summary over the analysed windows (:func:`.devices.summarize`)."""
        return devmod.summarize(self.devices, *self.windows)

    @cached_property
    def findings(self) -> Findings:
        """Everything the verdict rules read (:class:`.findings.Findings`)."""
        steps = self.steps
        p = self.placement
        pipeline = self.pipeline if (self.pipeline and self.pipeline.stages) else None
        return Findings(
            framework=self.framework, device_kind=self.device_kind, placement=p,
            pct=self.breakdown_pct, steps=self._step_facts(), pipeline=pipeline, system=self.system,
            eager=activitymod.runs_eagerly(self.view, p), kernels=self._kernel_facts(), devices=self.device_rows,
            gaps=idle_gaps.longest_gaps(self.view, self.device_rows, self.activity.input, self.origin),
            shared_clock_only=bool(steps and steps.source.startswith("device_steps_line")),
            timing=whatif.step_timing(self.steps, self.parts, self.view, self.activity),
            ops=self.op_summary, xla=whatif.runs_xla(self.view), slowdown=self.slowdown,
            keras_no_xla=(self.keras or {}).get("no_xla") or None)

    @cached_property
    def device_kind(self) -> str:
        """The device of the breakdown: the traced accelerator's kind, "GPU" for an untraced
        accelerator that ran the ops, else "CPU" (the host computes)."""
        p = self.placement
        if p.device_events and p.device_kind:
            return p.device_kind
        return "GPU" if p.state in ("untraced_pluggable", "trace_missing") else "CPU"

    def _step_facts(self) -> StepFacts:
        steps, found = self.steps, self.step_search.steps
        if steps is None:
            return StepFacts(why_none=_why_none(self.step_search))
        facts = StepFacts(source=steps.source, count=steps.count, mean_ms=ms(steps.durations_ps.mean()),
                          custom_loop=stepsmod.is_custom_loop(self.view, steps),
                          fetch_outside=steps.fetch_outside, odd=self.odd)
        left_out = ~(self._not_warmup(found) & ~self.odd_mask) if found is not None else np.zeros(0, dtype=bool)
        if left_out.any() and found is not None:
            waited = breakdown.per_step(self.activity, found.starts[left_out], found.ends[left_out])["input"]
            facts.left_out_input_ms = ms(waited.sum())
        parts = self.parts
        if steps.count and len(parts["input"]) == steps.count:
            share = parts["input"] / np.maximum(steps.durations_ps, 1)
            facts.input_bound_steps = int((100.0 * share >= INPUT_BOUND_STEP_PCT).sum())
        warm = getattr(found, "warmup", None)
        if found is not None and warm is not None and warm.any():
            facts.warmup_count = int(warm.sum())
            facts.warmup_ms = ms(found.durations_ps[warm].sum())
            facts.warmup_reason = found.warmup_reason
            facts.all_warmup = bool(warm.all())
        builds = getattr(steps, "graph_build_ps", None)
        if builds is not None and len(builds):
            built = builds > 0
            if facts.all_warmup:  # nothing steady to judge retracing on
                built = np.zeros_like(built)
            facts.graph_build_steps = int(built.sum())
            facts.graph_build_ms = ms(builds[built].sum())
            facts.total_ms = ms(steps.durations_ps.sum())
        return facts

    def _kernel_facts(self) -> Optional[KernelFacts]:
        kd = np.concatenate([d.kernel_durations_ps for d in self.devices]) if self.devices else np.zeros(0)
        if not len(kd):
            return None
        gaps = [d["median_gap_us"] for d in self.device_rows if d.get("median_gap_us") is not None]
        return KernelFacts(count=len(kd), devices=sum(1 for d in self.devices if d.n_events),
                           median_us=float(np.median(kd)) / 1e6, median_gap_us=min(gaps) if gaps else None)

    @cached_property
    def verdict(self) -> Verdict:
        """The verdict (:func:`.rules.decide`), as :meth:`held` leaves it."""
        return self.held(decide(self.findings), self.findings)

    def held(self, v: Verdict, findings: Findings) -> Verdict:
        """``v`` as the framework's trace can vouch for it: here unchanged; a framework whose
        trace misses a cost holds its verdicts down (:meth:`.torch_host.TorchHostAnalysis.held`).
        Applied to the host's verdict and to a worker's own verdict (:func:`.sync.own_verdict`)."""
        return v

    def report(self) -> HostReport:
        """The host-level report fields (the session adds run, session, hosts...)."""
        steps, parts, v = self.steps, self.parts, self.verdict
        out: HostReport = {
            "framework": self.framework,
            "device_kind": self.devices[0].kind if self.devices else self.device_kind,
            "devices": self.device_rows,
            "window_ms": ms(self.window[1] - self.window[0]) if self.window else 0.0,
            "events": self.space.n_events,
            "step_source": steps.source if steps is not None else "none",
            "steps": host_report.steps_section(steps, self.step_search, parts, self.origin, self.findings.steps,
                                               self.odd_mask),
            "breakdown_pct": self.breakdown_pct,
            "input_pipeline": host_report.input_pipeline_section(self.pipeline, self.breakdown_pct.get("input", 0.0)),
            **verdict_fields(v, self.framework),
            "worst_step": None if v.cause == "not_tensorflow" else host_report.worst_step(steps, parts, self.origin),
            "top_ops": op_report.top_ops(self.ops, self.origin),
            "op_summary": self.op_summary,
        }
        load = cpu_share.input_load(self.findings)
        if load is not None:
            out["input_load"] = load.as_dict()
        # steps with collectives: what a multi-worker job's root cause needs
        sync = sync_section(steps, self.view, self.activity, parts, self.space, self.findings, self.held)
        if sync is not None:
            out["sync"] = sync
        return out


def _why_none(search: stepsmod.StepSearch) -> str:
    why = "; ".join(f"{f}: {w}" for f, w in search.tried)
    return f"No steps found ({why}). The breakdown covers the whole window."

