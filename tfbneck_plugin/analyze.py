"""``analyze_session(session) -> dict``: the one entry point behind the CLI, the Beam
pipeline and the TensorBoard plugin. The dict is one element of the report contract's
``sessions`` list (``shared/design/diagnosis.md``; keys documented in README "Report").
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

import numpy as np

from . import __version__
from . import breakdown, devices as devmod, host as hostmod, steps as stepsmod, sysmetrics, tfdata, timeline
from .logdir import Session
from .verdict import decide
from .xspace import Space, TraceReadError, read_space

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


def analyze_space(space: Space, sidecar_summary: Optional[Dict] = None) -> Dict:
    """Analyse one host's XSpace. Returns the host-level report fields."""
    view = hostmod.host_view(space)
    devs = devmod.read_devices(space)
    framework = detect_framework(space, view)
    search = stepsmod.find_steps(space, view)
    steps = search.steps
    window = stepsmod.host_window(view)
    dev_events = sum(d.n_events for d in devs)
    device_kind = devs[0].kind if devs else "CPU"

    # Interval sets for the breakdown.
    d_comp, d_h2d, d_d2h, d_coll = breakdown.gather_device_activity(devs)
    inp = view.get_next_intervals() if view else timeline.empty()
    model_exec = view.model_executor_intervals() if view else timeline.empty()
    eager_ops = view.eager_op_intervals() if view else timeline.empty()
    marker_ids = np.zeros(0, dtype=np.int64)
    if view is not None:
        marker_ids = view.ids(("markers",), lambda n: n in ("train", "test", "Profiled batch", "TraceContext"))
    train_thread = view.training_thread_intervals(marker_ids) if view else timeline.empty()
    launches = view.launch_intervals() if view else timeline.empty()

    has_function = bool(view and view.training_function_runs())
    untraced_device = None if devs else (view.untraced_device() if view else None)
    device_trace_missing = model_on_cpu = None
    if dev_events == 0:
        # No accelerator activity recorded: the host ran the model math (or the capture failed).
        # Eager op dispatch counts as model math only in pure eager programs: inside a
        # tf.function call, EagerKernelExecute spans the whole call, waits included.
        cpu_model = model_exec if has_function else timeline.concat([model_exec, eager_ops])
        if untraced_device:
            # Ops were sent to a device the profiler did not trace: while the training
            # function runs, the step waits on that device.
            # The device needs the batch first: time blocked on input is not device time.
            cpu_model = timeline.concat([cpu_model, timeline.difference(eager_ops, inp)])
        if devs:
            n_launch = len(launches[0])
            if n_launch or timeline.total(cpu_model) == 0:
                device_trace_missing = (
                    f"{len(devs)} {device_kind} plane(s) hold no events although the host "
                    + (f"launched {n_launch} kernels" if n_launch else "ran no model ops of its own")
                    + ": the device trace was not recorded (CUPTI failed or lacked permission), so no verdict "
                      "about the device or the input can be made.")
            else:
                model_on_cpu = (
                    f"The {device_kind} sat idle for the whole window ({len(devs)} {device_kind} plane(s), 0 events) "
                    f"while the model's ops executed on host threads for {_ms(timeline.total(cpu_model)):.1f} ms: "
                    "the model ran on the CPU although a GPU was present.")
        activity = breakdown.Activity(collective=timeline.empty(), device_compute=cpu_model,
                                      host_to_device=timeline.empty(), device_to_host=timeline.empty(),
                                      input=inp, kernel_launch=timeline.empty(),
                                      host_compute=timeline.concat([train_thread, model_exec]))
        effective_kind = "GPU" if untraced_device else "CPU"
    else:
        activity = breakdown.Activity(collective=d_coll, device_compute=d_comp, host_to_device=d_h2d,
                                      device_to_host=d_d2h, input=inp,
                                      kernel_launch=timeline.concat([model_exec, launches]),
                                      host_compute=train_thread)
        effective_kind = device_kind

    if steps is not None:
        w_starts, w_ends = steps.starts, steps.ends
    elif window is not None:
        w_starts, w_ends = np.array([window[0]]), np.array([window[1]])
    else:
        w_starts = w_ends = np.zeros(0, dtype=np.int64)
        if devs and dev_events:
            all_busy = timeline.union(*timeline.concat([d.busy for d in devs]))
            w_starts, w_ends = all_busy[0][:1], all_busy[1][-1:]
    parts = breakdown.per_step(activity, w_starts, w_ends) if len(w_starts) else {c: np.zeros(0) for c in breakdown.CATEGORIES}
    pct = breakdown.percentages(parts)

    pipeline = tfdata.analyze_pipeline(view, (int(w_starts[0]), int(w_ends[-1])) if (view and len(w_starts)) else None) if view else None
    has_iterators = bool(pipeline and pipeline.stages)

    out: Dict = {
        "framework": framework,
        "device_kind": device_kind if devs else ("GPU" if untraced_device else "CPU"),
        "devices": devmod.summarize(devs, (int(w_starts[0]), int(w_ends[-1])) if len(w_starts) else None),
        "window_ms": _ms(window[1] - window[0]) if window else 0.0,
        "events": space.n_events,
    }
    tried = [{"finder": f, "why_not": why} for f, why in search.tried]
    if steps is not None:
        items = []
        for i in range(steps.count):
            items.append({"step": int(steps.numbers[i]), "start_ms": _ms(steps.starts[i] - (window[0] if window else 0)),
                          "duration_ms": _ms(steps.ends[i] - steps.starts[i]),
                          "breakdown_ms": {c: _ms(parts[c][i]) for c in breakdown.CATEGORIES}})
        out["step_source"] = steps.source
        out["steps"] = {"count": steps.count, "step_time_ms": _step_stats(steps.durations_ps), "items": items,
                        "dropped_partial": steps.dropped_partial, "batches_per_step": steps.batches_per_step,
                        "time_per_batch_ms": round(_step_stats(steps.durations_ps)["mean"] / steps.batches_per_step, 3),
                        "notes": steps.notes, "tried": tried}
    else:
        out["step_source"] = "none"
        why = "; ".join(f"{f}: {w}" for f, w in search.tried)
        out["steps"] = {"count": 0, "step_time_ms": None, "items": [], "dropped_partial": 0, "batches_per_step": 1,
                        "tried": tried, "why_none": f"No steps found ({why}). The breakdown covers the whole window."}
    out["breakdown_pct"] = pct
    out["input_pipeline"] = {
        "bottleneck_stage": pipeline.blocking.path if (pipeline and pipeline.blocking) else None,
        "stages": tfdata.stage_rows(pipeline, 0) if pipeline else [],
        "has_prefetch": bool(pipeline and pipeline.has_prefetch),
    }

    step_note = None
    if steps is not None and steps.source.startswith("iterator_cadence"):
        step_note = "Steps were inferred from the IteratorGetNext cadence (no step markers in the trace)."
    launch_ev = None
    if devs and dev_events:
        kd = np.concatenate([d.kernel_durations_ps for d in devs]) if devs else np.zeros(0)
        if len(kd):
            launch_ev = (f"{len(kd)} kernels, median {np.median(kd) / 1e6:.1f} us each, on "
                         f"{sum(1 for d in devs if d.n_events)} device(s).")

    if framework == "jax":
        busy = ", ".join(f"{d['device']} busy {d['busy_pct']:.1f}%" for d in out["devices"] if d["events"])
        v = {"bottleneck": "unknown", "cause": "not_tensorflow", "confidence": 0.0,
             "evidence": ["This is a JAX (XLA) trace, not TensorFlow: it has no tf.data pipeline and no Keras steps, "
                          "so input-pipeline and step analysis do not apply.",
                          f"Device activity: {busy or 'no device events'}."]
             + ([launch_ev] if launch_ev else []),
             "recommendations": []}
        out.update(v)
        return out

    verdict = decide(pct, device_kind=effective_kind if not devs else device_kind, has_steps=steps is not None,
                     pipeline=pipeline if has_iterators else None, system=sidecar_summary,
                     device_trace_missing=device_trace_missing, model_on_cpu=model_on_cpu,
                     launch_evidence=launch_ev, eager=bool(len(eager_ops[0])) and not has_function,
                     step_note=step_note)
    if untraced_device:
        verdict.evidence.append(untraced_device)
    if steps is None:
        verdict.evidence.insert(0, out["steps"]["why_none"])
    out.update({"bottleneck": verdict.bottleneck, "cause": verdict.cause, "confidence": verdict.confidence,
                "evidence": verdict.evidence, "recommendations": verdict.recommendations})
    worst = None
    if steps is not None and steps.count:
        k = int(np.argmax(parts["input"])) if parts["input"].sum() > 0 else int(np.argmax(steps.durations_ps))
        worst = {"step": int(steps.numbers[k]), "start_ms": _ms(steps.starts[k] - window[0]),
                 "duration_ms": _ms(steps.ends[k] - steps.starts[k]), "input_ms": _ms(parts["input"][k])}
    out["worst_step"] = worst
    return out


def _error(session: Session, message: str) -> Dict:
    return {"run": session.run, "session": session.name, "hosts": session.hosts, "path": session.path,
            "status": "error", "error": message, "bottleneck": "unknown", "step_source": "none"}


def analyze_session(session: Session, opener=open) -> Dict:
    """Analyse every host of one session. Never raises for bad input: a session that
    cannot be analysed gets ``status: error`` and a one-line ``error`` naming the file."""
    base = {"version": __version__, "run": session.run, "session": session.name, "hosts": session.hosts,
            "path": session.path}
    if session.skipped and not session.files:
        reason = _skipped_reason(session.skipped, opener)
        return {**_error(session, f"{session.path}: profiling window was skipped: {reason}"), "skipped": reason}
    if not session.files:
        legacy = ", ".join(os.path.basename(f) for f in session.legacy_files[:3])
        return _error(session, f"{session.path}: no .xplane.pb in this session, only per-tool files of "
                               f"TensorFlow <= 2.10 ({legacy}); re-profile with TF >= 2.11 or open it in the Profile plugin")
    system = None
    sidecar_problem = None
    if session.sidecar:
        try:
            system = sysmetrics.summarize(sysmetrics.read_sidecar(session.sidecar, opener))
        except sysmetrics.SidecarError as err:
            sidecar_problem = str(err)
    hosts = []
    for f in session.files:
        try:
            space = read_space(f, opener)
        except TraceReadError as err:
            return _error(session, str(err))
        except MemoryError:
            return _error(session, f"{f}: out of memory while reading the trace")
        try:
            h = analyze_space(space, system)
        except Exception as err:  # an analysis bug must not take down a batch run
            return _error(session, f"{f}: analysis failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})")
        h["host"] = os.path.basename(f).split(".xplane.pb")[0]
        hosts.append(h)
        del space
    report = dict(base)
    report["status"] = "ok"
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


def _straggler_evidence(hosts: List[Dict]) -> List[str]:
    times = np.array([((h["steps"] or {}).get("step_time_ms") or {}).get("mean") or 0.0 for h in hosts])
    if len(times) < 2 or times.max() <= 0:
        return []
    med = float(np.median(times))
    mad = float(np.median(np.abs(times - med))) or 1e-9
    out = []
    for h, t in zip(hosts, times):
        # A robust z-score above 3.5 marks an outlier (Iglewicz & Hoaglin, 1993).
        z = 0.6745 * (t - med) / mad
        if z > 3.5 or (len(times) == 2 and t > 1.2 * min(times)):
            out.append(f"Host {h['host']} is a straggler: {t:.1f} ms per step against a median of {med:.1f} ms.")
    return out


def _skipped_reason(path: str, opener=open) -> str:
    try:
        with opener(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
        return str(data.get("reason", "unknown reason"))
    except Exception:
        return "unknown reason (unreadable record)"
