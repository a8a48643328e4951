"""``analyze_session(session) -> dict``: the one entry point behind the CLI, the Beam
pipeline, the TensorBoard plugin and the Python API. The dict is one element of the report
contract's ``sessions`` list (``shared/design/diagnosis.md``; keys in README "The report").

A session's work: its records (skipped or incomplete windows), its sidecar (system
metrics), then one :class:`.host_analysis.HostAnalysis` per host trace, merged by
:mod:`.multihost` when there are several.
"""
from __future__ import annotations

import os
from typing import Dict, List, NamedTuple, Optional, Tuple

from .. import records
from ..errors import error_report, first_line
from ..logdir import Session, open_any
from ..schema import HostReport, SessionDict, SystemMetrics, add_words
from ..trace.keras_marks import recorded_backend
from ..trace.kineto import KinetoSpace, is_kineto_file, read_kineto
from ..trace.tracefile import host_name_from_file, read_space
from ..trace.xspace import TraceReadError
from ..version import __version__
from . import multihost, sysmetrics
from .grouping import recorded_job
from .host_analysis import HostAnalysis
from .jax_host import JaxHostAnalysis, analysable
from .system_session import system_only_report
from .torch_host import TorchHostAnalysis


def analyze_space(space, system: Optional[SystemMetrics] = None, slowdown: Optional[Dict] = None,
                  keras: Optional[Dict] = None) -> HostReport:
    """The host-level report fields of one XSpace (``trace.xspace.Space``) or Kineto trace
    (``trace.kineto.KinetoSpace``, analysed by :class:`.torch_host.TorchHostAnalysis`);
    ``system``: the sidecar summary (:func:`.sysmetrics.summarize`) or None; ``slowdown``:
    the trigger that opened the window (:func:`tfbneck_plugin.records.slowdown_trigger`) or None;
    ``keras``: the Keras backend and input the callback recorded
    (:func:`tfbneck_plugin.trace.keras_marks.recorded_backend`) or None."""
    analysis = (TorchHostAnalysis if isinstance(space, KinetoSpace)  # a JAX fit with step markers: jax_host
                else JaxHostAnalysis if analysable(space) else HostAnalysis)
    return analysis(space, system, slowdown, keras).report()


def analyze_session(session: Session, opener=None) -> SessionDict:
    """Analyse every host of one session.

    Never raises for bad input: a session that cannot be analysed gets ``status: "error"``,
    a one-line ``error`` naming the file and an ``error_kind`` (:mod:`tfbneck_plugin.errors`).

    Args:
      session: from :func:`tfbneck_plugin.logdir.find_sessions`.
      opener: ``opener(path, mode)`` opens files; by default local paths with ``open`` and
        URLs (``s3://``, ``gs://``...) with fsspec.
    """
    if session.system_record:  # no trace: the triage of its system metrics (step 1 of the method)
        return add_words(system_only_report(session, opener or open_any))
    opener = opener or open_any
    problem = _record_problem(session, opener)
    if problem is not None:
        return problem
    side = _sidecar_facts(session, opener)
    hosts, failures = _analyze_hosts(session, side, opener)
    if not hosts:
        kind, message = failures[0]
        return error_report(session, kind, message)
    report: SessionDict = {"version": __version__, "run": session.run, "session": session.name,
                           "hosts": session.hosts, "path": session.path, "status": "ok"}
    warnings = [message for _kind, message in failures]  # other hosts of the session are still reported
    if warnings:
        report["warnings"] = warnings
    primary = multihost.slowest(hosts)
    report.update(multihost.host_fields(primary))
    if side.system is not None:
        report["system_metrics"] = side.system
    if side.problem:
        report.setdefault("warnings", []).append(side.problem)
    if side.interrupted is not None:  # training left the window early: the steps before it are analysed
        report["interrupted"] = side.interrupted
        report.setdefault("warnings", []).append(interrupted_warning(side.interrupted))
    if side.job:
        report["job"] = side.job  # the job BottleneckProfiler recorded: grouping.group_jobs reads it
    if side.model:
        report["model"] = side.model  # what trained, as the callback recorded it: compare reads it
    if side.keras:
        report["backend"] = side.keras["backend"]  # the Keras backend the callback ran on
        if side.keras.get("input"):
            report["keras_input"] = side.keras["input"]
    report["trace_viewer"] = {"run": f"{session.run}/{session.name}" if session.run != "." else session.name,
                              "host": primary["host"]}
    if len(hosts) > 1:
        multihost.merge(report, hosts)
    return add_words(report)


def _record_problem(session: Session, opener) -> Optional[SessionDict]:
    """The error report of a session whose records say it holds no usable trace, else None."""
    if session.incomplete:  # left in BottleneckProfiler's staging area: its files are partial
        reason = (records.read_skipped_reason(session.skipped, opener) if session.skipped else
                  "the training process stopped inside this profiling window before its trace was saved; "
                  "files left in this folder are partial. Delete the folder to dismiss this entry")
        return error_report(session, "incomplete", f"{session.path}: incomplete profiling window: {reason}",
                            incomplete=reason)
    if session.skipped and not session.files:
        reason = records.read_skipped_reason(session.skipped, opener)
        return error_report(session, "skipped", f"{session.path}: profiling window was skipped: {reason}",
                            skipped=reason)
    if not session.files:
        legacy = ", ".join(os.path.basename(f) for f in session.legacy_files[:3])
        return error_report(session, "legacy_only",
                            f"{session.path}: no .xplane.pb in this session, only per-tool files of TensorFlow "
                            f"<= 2.10 ({legacy}); re-profile with TF >= 2.11 or open it in the Profile plugin")
    return None


class SidecarFacts(NamedTuple):
    """What a session's sidecar gives its report; each None when the sidecar is absent or
    does not record it."""
    system: Optional[SystemMetrics] = None   # the metrics' summary (sysmetrics.summarize)
    problem: Optional[str] = None        # a warning about the sidecar (unreadable, sampling cut short)
    job: Optional[Dict] = None           # the multi-worker job it records (grouping.recorded_job)
    interrupted: Optional[Dict] = None   # the window's interrupted record (records.interrupted_window)
    slowdown: Optional[Dict] = None      # the trigger that opened the window (records.slowdown_trigger)
    model: Optional[Dict] = None         # what trained (records.recorded_model)
    keras: Optional[Dict] = None         # the Keras backend and input (trace.keras_marks.recorded_backend),
    #                                      and the model's layers without XLA (``no_xla``, from ``model``)


def _sidecar_facts(session: Session, opener) -> SidecarFacts:
    """The session's :class:`SidecarFacts`; an unreadable sidecar is its ``problem`` only."""
    if not session.sidecar:
        return SidecarFacts()
    try:
        raw = records.read_sidecar(session.sidecar, opener)
    except records.SidecarError as err:
        return SidecarFacts(problem=str(err))
    problem = None
    if raw.get("sampler_error"):  # sampling stopped early: the metrics cover part of the window
        problem = (f"{session.sidecar}: system metrics incomplete, the sampler stopped early "
                   f"({first_line(raw['sampler_error'])})")
    model, keras = records.recorded_model(raw), recorded_backend(raw)
    if keras is not None and model and "no_xla" in model:  # the advice's jit_compile fix reads it
        keras = {**keras, "no_xla": model["no_xla"]}
    return SidecarFacts(sysmetrics.summarize(raw), problem, recorded_job(raw), records.interrupted_window(raw),
                        records.slowdown_trigger(raw), model, keras)


def interrupted_warning(interrupted: Dict) -> str:
    """The report's warning for a window that training left early (``interrupted``)."""
    why = f" by {interrupted['exception']}" if interrupted.get("exception") else ""
    return (f"profiling window interrupted{why} after {interrupted.get('steps_recorded')} recorded steps "
            f"({interrupted.get('detected') or 'unknown'}): the report covers those steps only")


def _analyze_hosts(session: Session, side: "SidecarFacts", opener) -> Tuple[List[HostReport], List[Tuple[str, str]]]:
    """(host reports, (error_kind, message) of each host that failed), each host analysed with
    what the sidecar ``side`` says (system metrics, the slowdown trigger, the Keras backend)."""
    hosts: List[HostReport] = []
    failures: List[Tuple[str, str]] = []
    for f in session.files:
        try:
            space = read_kineto(f, opener) if is_kineto_file(f) else read_space(f, opener)
            h = analyze_space(space, side.system, side.slowdown, side.keras)
            del space
        except TraceReadError as err:
            failures.append((err.kind, str(err)))
            continue
        except MemoryError:
            failures.append(("out_of_memory", f"{f}: out of memory while reading the trace"))
            continue
        except Exception as err:  # an analysis bug must not take down a batch run
            failures.append(("analysis_failed", f"{f}: analysis failed ({type(err).__name__}: {first_line(err)})"))
            continue
        h["host"] = host_name_from_file(f)
        hosts.append(h)
    return hosts, failures
