"""``analyze_session(session) -> dict``: the one entry point behind the CLI, the Beam
pipeline and the TensorBoard plugin. The dict is one element of the report contract's
``sessions`` list (``shared/design/diagnosis.md``; keys documented in README "Report").
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from .. import __version__
from . import breakdown, devices as devmod, host as hostmod, steps as stepsmod, sysmetrics, tfdata
from ..trace import timeline
from .. import records
from ..logdir import Session, open_any
from .verdict import decide
from ..trace.xspace import Space, TraceReadError, host_name_from_file, read_space

_MS = 1e9  # ps per ms


def _ms(ps) -> float:
    return round(float(ps) / _MS, 3)


def _step_stats(durations_ps: np.ndarray) -> Dict[str, float]:
    d = durations_ps.astype(np.float64) / _MS
    return {"mean": round(float(d.mean()), 3), "p50": round(float(np.percentile(d, 50)), 3),
            "p90": round(float(np.percentile(d, 90)), 3), "min": round(float(d.min()), 3),
            "max": round(float(d.max()), 3)}


def detect_framework(space: Space, view: Optional[hostmod.HostView]) -> str:
    meta = space.plane("/host:metadata")
    if meta is not None:
        stats = meta.plane_stats()
        if "jax_version" in stats or "jaxlib_version" in stats:
            return "jax"
    if view is None:
        return "unknown"
    tf_markers = ("ExecutorState::Process", "FunctionRun", "EagerExecute", "EagerKernelExecute", "TraceContext",
                  "IteratorGetNextOp::DoCompute", "TFE_Py_ExecuteCancelable")
    names = set(view.plane.event_names.values())
    if any(n in names for n in tf_markers) or any(n.startswith("Iterator::") for n in names):
        return "tensorflow"
    if any(n.startswith(("PjitFunction", "PjRt", "$")) for n in names):
        return "jax"
    return "unknown"


@dataclass
class _Activity:
    """Interval sets behind the breakdown, and what the device planes say."""
    activity: breakdown.Activity
    device_kind: str                 # kind used for wording: GPU/TPU, or CPU when the host computes
    device_trace_missing: Optional[str] = None
    model_on_cpu: Optional[str] = None
    untraced_device: Optional[str] = None
    eager: bool = False


def _gather_activity(view: Optional[hostmod.HostView], devs: List[devmod.Device]) -> _Activity:
    d_comp, d_h2d, d_d2h, d_coll = breakdown.gather_device_activity(devs)
    if view is None:
        return _Activity(breakdown.Activity(d_coll, d_comp, d_h2d, d_d2h, timeline.empty(), timeline.empty(),
                                            timeline.empty()), devs[0].kind if devs else "CPU")
    inp = view.get_next_intervals()
    model_exec = view.model_executor_intervals()
    eager_ops = view.eager_op_intervals()
    host_coll = view.collective_op_intervals()
    markers = view.ids(("markers",), lambda n: n in ("train", "test", "Profiled batch", "TraceContext"))
    train_thread = view.training_thread_intervals(markers)
    launches = view.launch_intervals()
    has_function = bool(view.training_function_runs())
    dev_events = sum(d.n_events for d in devs)
    collective = timeline.concat([d_coll, host_coll])

    if dev_events:
        return _Activity(breakdown.Activity(collective=collective, device_compute=d_comp, host_to_device=d_h2d,
                                            device_to_host=d_d2h, input=inp,
                                            kernel_launch=timeline.concat([model_exec, launches]),
                                            host_compute=train_thread), devs[0].kind)

    # No accelerator activity recorded: the host ran the model math (or the capture failed).
    # Eager op dispatch counts as model math only in pure eager programs: inside a
    # tf.function call, EagerKernelExecute spans the whole call, waits included.
    out = _Activity(None, "CPU", eager=bool(len(eager_ops[0])) and not has_function)
    cpu_model = model_exec if has_function else timeline.concat([model_exec, eager_ops])
    if not devs:
        out.untraced_device = view.untraced_device()
        if out.untraced_device:
            # Ops went to a device the profiler did not trace: while the training function
            # runs (and is not blocked on input) the step waits on that device.
            cpu_model = timeline.concat([cpu_model, timeline.difference(eager_ops, inp)])
            out.device_kind = "GPU"
    else:
        kind = devs[0].kind
        n_launch = len(launches[0])
        if n_launch or timeline.total(cpu_model) == 0:
            out.device_trace_missing = (
                f"{len(devs)} {kind} plane(s) hold no events although the host "
                + (f"launched {n_launch} kernels" if n_launch else "ran no model ops of its own")
                + ": the device trace was not recorded (CUPTI failed or lacked permission), so no verdict "
                  "about the device or the input can be made.")
        else:
            out.model_on_cpu = (
                f"The {kind} sat idle for the whole window ({len(devs)} {kind} plane(s), 0 events) while the "
                f"model's ops executed on host threads for {_ms(timeline.total(cpu_model)):.1f} ms: the model ran "
                "on the CPU although a GPU was present.")
    out.activity = breakdown.Activity(collective=host_coll, device_compute=cpu_model,
                                      host_to_device=timeline.empty(), device_to_host=timeline.empty(),
                                      input=inp, kernel_launch=timeline.empty(),
                                      host_compute=timeline.concat([train_thread, model_exec]))
    return out


def _windows(steps, window, devs):
    """The analysed windows: the steps, else the host window, else the device activity span."""
    if steps is not None:
        return steps.starts, steps.ends
    if window is not None:
        return np.array([window[0]]), np.array([window[1]])
    busy = timeline.union(*timeline.concat([d.busy for d in devs])) if devs else timeline.empty()
    return busy[0][:1], busy[1][-1:]


def _steps_section(steps, search, parts, origin: int) -> Dict:
    tried = [{"finder": f, "why_not": why} for f, why in search.tried]
    if steps is None:
        why = "; ".join(f"{f}: {w}" for f, w in search.tried)
        return {"count": 0, "step_time_ms": None, "items": [], "dropped_partial": 0, "batches_per_step": 1,
                "tried": tried, "why_none": f"No steps found ({why}). The breakdown covers the whole window."}
    items = [{"step": int(steps.numbers[i]), "start_ms": _ms(steps.starts[i] - origin),
              "duration_ms": _ms(steps.ends[i] - steps.starts[i]),
              "breakdown_ms": {c: _ms(parts[c][i]) for c in breakdown.CATEGORIES}} for i in range(steps.count)]
    stats = _step_stats(steps.durations_ps)
    return {"count": steps.count, "step_time_ms": stats, "items": items, "dropped_partial": steps.dropped_partial,
            "batches_per_step": steps.batches_per_step,
            "time_per_batch_ms": round(stats["mean"] / steps.batches_per_step, 3), "notes": steps.notes,
            "tried": tried}


#: Busy-share spread (percentage points) between devices above which the report calls
#: the work imbalanced (our choice: one device idle a fifth of the step longer than another).
IMBALANCE_POINTS = 20.0


def _device_evidence(view, devices: List[Dict], inp, origin: int, shared_clock_only: bool) -> List[str]:
    """Sentences on device activity: imbalance, and what the host did in the longest gaps.

    ``shared_clock_only``: the steps come from one device's own Steps line, so other
    devices' activity cannot be compared inside them (imbalance is not judged)."""
    out = []
    active = [d for d in devices if d["kernels"]]  # devices that computed (copies alone do not count)
    if len(active) > 1 and not shared_clock_only:
        busiest = max(active, key=lambda d: d["busy_pct"])
        idlest = min(active, key=lambda d: d["busy_pct"])
        if busiest["busy_pct"] - idlest["busy_pct"] > IMBALANCE_POINTS:
            out.append(f"Work is imbalanced across devices: {busiest['device']} is busy {busiest['busy_pct']:.1f}% of "
                       f"the step, {idlest['device']} only {idlest['busy_pct']:.1f}%; the step waits for the slowest.")
    gaps = sorted(((g["duration_ms"], g["start_ps"], d["device"]) for d in active for g in d.get("longest_gaps", [])),
                  reverse=True)[:2]
    for dur_ms, start_ps, dev in gaps:
        if dur_ms <= 0:
            continue
        end_ps = min(start_ps + int(dur_ms * 1e9), 2 ** 63 - 1)  # ms rounding must not leave int64
        out.append(f"Longest idle gap on {dev}: {dur_ms:.2f} ms at {_ms(start_ps - origin):.2f} ms; meanwhile "
                   f"{_host_during(view, inp, start_ps, end_ps)}.")
    return out


def _host_during(view, inp, start_ps: int, end_ps: int) -> str:
    """What the host was doing in [start_ps, end_ps): input wait, training thread, tf.data threads."""
    if view is None:
        return "the host trace is missing"
    span = max(end_ps - start_ps, 1)
    w = (np.array([start_ps]), np.array([end_ps]))
    waiting = int(timeline.overlap_per_window(inp, *w)[0])
    parts = []
    if waiting:
        parts.append(f"the training step waited for input {100.0 * waiting / span:.0f}% of the gap")
    if view.training_line is not None:
        line = view.plane.lines[view.training_line]
        s, e = line.start_ps, line.start_ps + line.dur_ps
        inside = np.minimum(e, end_ps) - np.maximum(s, start_ps)
        markers = np.isin(line.name_id, view.ids(("markers",), lambda n: n in ("train", "test", "Profiled batch", "TraceContext")))
        inside[markers] = 0
        if len(inside) and inside.max() > 0:
            k = int(np.argmax(inside))
            parts.append(f"the training thread was in `{view.plane.event_names.get(int(line.name_id[k]), '?')}` "
                         f"for {100.0 * inside[k] / span:.0f}% of it")
    busy = 0
    for li in view.tfdata_lines:
        line = view.plane.lines[li]
        busy = max(busy, int(timeline.overlap_per_window((line.start_ps, line.start_ps + line.dur_ps), *w)[0]))
    if view.tfdata_lines:
        parts.append(f"the busiest tf.data thread was active {100.0 * busy / span:.0f}% of it")
    return ", ".join(parts) if parts else "no host activity was recorded"


def analyze_space(space: Space, sidecar_summary: Optional[Dict] = None) -> Dict:
    """Analyse one host's XSpace. Returns the host-level report fields (no run/session keys)."""
    view = hostmod.host_view(space)
    devs = devmod.read_devices(space)
    framework = detect_framework(space, view)
    search = stepsmod.find_steps(space, view)
    steps = search.steps
    window = stepsmod.host_window(view)
    act = _gather_activity(view, devs)
    w_starts, w_ends = _windows(steps, window, devs)
    parts = (breakdown.per_step(act.activity, w_starts, w_ends) if len(w_starts)
             else {c: np.zeros(0, dtype=np.int64) for c in breakdown.CATEGORIES})
    pct = breakdown.percentages(parts)
    origin = window[0] if window else (int(w_starts[0]) if len(w_starts) else 0)
    pipeline = (tfdata.analyze_pipeline(view, (int(w_starts[0]), int(w_ends[-1])) if len(w_starts) else None)
                if view else None)
    devices = devmod.summarize(devs, w_starts, w_ends)

    out: Dict = {
        "framework": framework,
        "device_kind": devs[0].kind if devs else act.device_kind,
        "devices": devices,
        "window_ms": _ms(window[1] - window[0]) if window else 0.0,
        "events": space.n_events,
        "step_source": steps.source if steps is not None else "none",
        "steps": _steps_section(steps, search, parts, origin),
        "breakdown_pct": pct,
        "input_pipeline": {
            "bottleneck_stage": pipeline.blocking.path if (pipeline and pipeline.blocking) else None,
            "stages": tfdata.stage_rows(pipeline, 0) if pipeline else [],
            "has_prefetch": bool(pipeline and pipeline.has_prefetch),
        },
    }
    dev_ev = _device_evidence(view, devices, act.activity.input, origin,
                              shared_clock_only=bool(steps and steps.source.startswith("device_steps_line")))
    launch_ev = None
    kd = np.concatenate([d.kernel_durations_ps for d in devs]) if devs else np.zeros(0)
    if len(kd):
        gaps = [d["median_gap_us"] for d in devices if d.get("median_gap_us") is not None]
        launch_ev = (f"{len(kd)} kernels on {sum(1 for d in devs if d.n_events)} device(s), median "
                     f"{np.median(kd) / 1e6:.1f} us each" + (f", median idle gap between kernels {min(gaps):.1f} us" if gaps else "")
                     + ".")

    if framework == "jax":
        busy = ", ".join(f"{d['device']} busy {d['busy_pct']:.1f}%" for d in devices if d["events"])
        out.update({"bottleneck": "unknown", "cause": "not_tensorflow", "confidence": 0.0,
                    "evidence": ["This is a JAX (XLA) trace, not TensorFlow: it has no tf.data pipeline and no Keras "
                                 "steps, so input-pipeline and step analysis do not apply.",
                                 f"Device activity: {busy or 'no device events'}."] + ([launch_ev] if launch_ev else []),
                    "recommendations": [], "worst_step": None})
        return out

    step_note = ("Steps were inferred from the IteratorGetNext cadence (no step markers in the trace)."
                 if steps is not None and steps.source.startswith("iterator_cadence") else None)
    verdict = decide(pct, device_kind=act.device_kind, has_steps=steps is not None,
                     pipeline=pipeline if (pipeline and pipeline.stages) else None, system=sidecar_summary,
                     device_trace_missing=act.device_trace_missing, model_on_cpu=act.model_on_cpu,
                     launch_evidence=launch_ev, eager=act.eager, step_note=step_note)
    evidence = list(verdict.evidence)
    if steps is None:
        evidence.insert(0, out["steps"]["why_none"])
    if act.untraced_device:
        evidence.append(act.untraced_device)
    if not act.device_trace_missing:
        evidence.extend(dev_ev)
    out.update({"bottleneck": verdict.bottleneck, "cause": verdict.cause, "confidence": verdict.confidence,
                "evidence": evidence, "recommendations": verdict.recommendations})
    worst = None
    if steps is not None and steps.count:
        k = int(np.argmax(parts["input"])) if parts["input"].sum() > 0 else int(np.argmax(steps.durations_ps))
        worst = {"step": int(steps.numbers[k]), "start_ms": _ms(steps.starts[k] - origin),
                 "duration_ms": _ms(steps.ends[k] - steps.starts[k]), "input_ms": _ms(parts["input"][k])}
    out["worst_step"] = worst
    return out


def _error(session: Session, message: str) -> Dict:
    return {"run": session.run, "session": session.name, "hosts": session.hosts, "path": session.path,
            "status": "error", "error": message, "bottleneck": "unknown", "step_source": "none"}


def analyze_session(session: Session, opener=None) -> Dict:
    """Analyse every host of one session. Never raises for bad input: a session that
    cannot be analysed gets ``status: error`` and a one-line ``error`` naming the file.

    ``opener(path, mode)`` opens files; by default local paths with ``open`` and URLs
    (``s3://``, ``gs://``...) with fsspec."""
    opener = opener or open_any
    base = {"version": __version__, "run": session.run, "session": session.name, "hosts": session.hosts,
            "path": session.path}
    if session.incomplete:  # left in BottleneckProfiler's staging area: its files are partial
        reason = (records.read_skipped_reason(session.skipped, opener) if session.skipped else
                  "the training process stopped inside this profiling window before its trace was saved; "
                  "files left in this folder are partial. Delete the folder to dismiss this entry")
        return {**_error(session, f"{session.path}: incomplete profiling window: {reason}"), "incomplete": reason}
    if session.skipped and not session.files:
        reason = records.read_skipped_reason(session.skipped, opener)
        return {**_error(session, f"{session.path}: profiling window was skipped: {reason}"), "skipped": reason}
    if not session.files:
        legacy = ", ".join(os.path.basename(f) for f in session.legacy_files[:3])
        return _error(session, f"{session.path}: no .xplane.pb in this session, only per-tool files of "
                               f"TensorFlow <= 2.10 ({legacy}); re-profile with TF >= 2.11 or open it in the Profile plugin")
    system = None
    sidecar_problem = None
    if session.sidecar:
        try:
            raw = records.read_sidecar(session.sidecar, opener)
            system = sysmetrics.summarize(raw)
            if raw.get("sampler_error"):  # sampling stopped early: the metrics cover part of the window
                sidecar_problem = (f"{session.sidecar}: system metrics incomplete, the sampler stopped early "
                                   f"({str(raw['sampler_error']).splitlines()[0]})")
        except records.SidecarError as err:
            sidecar_problem = str(err)
    hosts, failures = [], []
    for f in session.files:
        try:
            space = read_space(f, opener)
            h = analyze_space(space, system)
            del space
        except TraceReadError as err:
            failures.append(str(err))
            continue
        except MemoryError:
            failures.append(f"{f}: out of memory while reading the trace")
            continue
        except Exception as err:  # an analysis bug must not take down a batch run
            first = str(err).splitlines()[0] if str(err) else ""
            failures.append(f"{f}: analysis failed ({type(err).__name__}: {first})")
            continue
        h["host"] = host_name_from_file(f)
        hosts.append(h)
    if not hosts:
        return _error(session, failures[0])
    report = dict(base)
    report["status"] = "ok"
    if failures:  # other hosts of the session are still reported
        report["warnings"] = list(failures)
    primary = _slowest(hosts)
    report.update({k: v for k, v in primary.items() if k != "host"})
    if system is not None:
        report["system_metrics"] = system
    if sidecar_problem:
        report.setdefault("warnings", []).append(sidecar_problem)
    if len(hosts) > 1:
        report["per_host"] = [{"host": h["host"], "step_time_ms": (h["steps"]["step_time_ms"] or {}).get("mean"),
                               "breakdown_pct": h["breakdown_pct"], "bottleneck": h["bottleneck"]} for h in hosts]
        report["evidence"] = list(report["evidence"]) + _straggler_evidence(hosts)
    report["trace_viewer"] = {"run": f"{session.run}/{session.name}" if session.run != "." else session.name,
                              "host": primary.get("host")}
    return report


def _slowest(hosts: List[Dict]) -> Dict:
    """Step time is set by the slowest host; report its view at the top level."""
    def key(h):
        st = (h.get("steps") or {}).get("step_time_ms") or {}
        return st.get("mean") or 0.0
    return max(hosts, key=key)


#: Modified z-score above which a host's step time is an outlier (Iglewicz & Hoaglin,
#: "How to Detect and Handle Outliers", 1993: 0.6745 (x - median) / MAD > 3.5).
STRAGGLER_Z = 3.5
#: With two hosts there is no robust spread: the slower one straggles when it is 20 %
#: slower (our choice).
STRAGGLER_RATIO_OF_TWO = 1.2


def _straggler_evidence(hosts: List[Dict]) -> List[str]:
    times = np.array([((h["steps"] or {}).get("step_time_ms") or {}).get("mean") or 0.0 for h in hosts])
    if len(times) < 2 or times.max() <= 0:
        return []
    med = float(np.median(times))
    mad = float(np.median(np.abs(times - med))) or 1e-9
    out = []
    for h, t in zip(hosts, times):
        z = 0.6745 * (t - med) / mad
        if z > STRAGGLER_Z or (len(times) == 2 and t > STRAGGLER_RATIO_OF_TWO * min(times)):
            out.append(f"Host {h['host']} is a straggler: {t:.1f} ms per step against a median of {med:.1f} ms.")
    return out
