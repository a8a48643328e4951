"""What ``BottleneckProfiler`` writes to TensorBoard's own dashboards in ``<log_dir>``: seven
scalar tags and one text tag, so that they sit beside the user's loss curves without
crowding them (:data:`MAX_TAGS`).

Scalars (TensorBoard's Scalars / Time Series dashboards; x axis: the training step):

* ``bottleneck/step_time_ms/p50`` and ``bottleneck/step_time_ms/p90``: the median and 90th
  percentile step time (ms) of each step-time period (an epoch by default);
* ``bottleneck/input_pct``: the share of the step spent waiting for input (%), per analysed
  window, at its last step;
* ``system/cpu_pct`` (the machine's CPU, %), ``system/process_cores`` (cores the training
  process and its children used), ``system/other_cores`` (cores other processes used) and,
  on a host with accelerators, ``system/gpu_util_pct`` (the busiest accelerator's
  utilisation, %, the figure the tab's trend view and the triage use): one point per
  system interval (10 s).

Text (TensorBoard's Text dashboard): ``bottleneck/verdict``, one entry per analysed window at
its last step: the verdict, its cause, confidence, step time, input share and the first fix
(:func:`verdict_text`).

Everything else stays in the files the Bottleneck tab and ``tfbneck`` read: the whole report
per window (the session's trace and sidecar), the step-time trend
(``plugins/bottleneck/steptimes_*.json``) and every system figure per interval, per
accelerator and the triage (``plugins/bottleneck/system_*.json``).

:class:`EventWriter` writes them: with ``tf.summary`` on Keras' TensorFlow backend
(TensorFlow is imported when its first writer is made, never when this module is), and on
the JAX and PyTorch backends with TensorBoard's own event-file writer
(``tensorboard.summary.writer.event_file_writer``, the one ``torch.utils.tensorboard`` uses),
which imports no framework: :class:`PlainSummaries`.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..schema import SessionDict, bottleneck_label, step_time_ms
from ..system.triage import busiest_gpu_util_pct

if TYPE_CHECKING:
    from .controller import WindowRecord

STEP_TIME_P50 = "bottleneck/step_time_ms/p50"
STEP_TIME_P90 = "bottleneck/step_time_ms/p90"
INPUT_PCT = "bottleneck/input_pct"
CPU_PCT = "system/cpu_pct"
PROCESS_CORES = "system/process_cores"
OTHER_CORES = "system/other_cores"
GPU_UTIL_PCT = "system/gpu_util_pct"
#: Every scalar tag the callback writes.
SCALAR_TAGS = (STEP_TIME_P50, STEP_TIME_P90, INPUT_PCT, CPU_PCT, PROCESS_CORES, OTHER_CORES, GPU_UTIL_PCT)
#: The text tag: the verdict of each analysed window.
VERDICT_TAG = "bottleneck/verdict"
#: Tags per run the callback keeps to, scalars and text together (a test counts them in a real
#: fit): few enough that its charts do not crowd the user's own metrics in the dashboards.
MAX_TAGS = 8


def period_scalars(stats: Mapping[str, float]) -> Dict[str, float]:
    """The step-time scalars of one period: ``{STEP_TIME_P50: ms, STEP_TIME_P90: ms}`` from the
    step timer's period statistics (keys ``p50_ms``, ``p90_ms``)."""
    return {STEP_TIME_P50: float(stats["p50_ms"]), STEP_TIME_P90: float(stats["p90_ms"])}


def window_scalars(report: SessionDict) -> Dict[str, float]:
    """The scalars of one analysed window: ``{INPUT_PCT: % of the step}`` from the report's
    ``breakdown_pct["input"]``; empty when the report has no breakdown (a failed analysis)."""
    pct = report.get("breakdown_pct") or {}
    return {INPUT_PCT: float(pct["input"])} if pct.get("input") is not None else {}


def system_scalars(iv: Mapping) -> Dict[str, float]:
    """The scalars of one system interval (:func:`tfbneck_plugin.system.triage.aggregate`):
    ``cpu_pct`` (%), ``tree_cores`` and ``other_cores`` (cores), and the busiest accelerator's ``util_pct``
    (:func:`tfbneck_plugin.system.triage.busiest_gpu_util_pct`, %) when it has any."""
    out = {CPU_PCT: float(iv["cpu_pct"]), PROCESS_CORES: float(iv["tree_cores"]),
           OTHER_CORES: float(iv["other_cores"])}
    util = busiest_gpu_util_pct(iv)
    if util is not None:
        out[GPU_UTIL_PCT] = util
    return out


def verdict_parts(rec: WindowRecord, report: SessionDict) -> List[str]:
    """The verdict of one analysed window in short clauses, the first one the verdict itself,
    e.g. ``["steps 3-5: CPU-bound (input_preprocessing, confidence 0.85)",
    "12.3 ms/step, 40% waiting for input", "fix first: ..."]``; then, when they apply, why a
    triggered window opened and what changed since the previous window. With
    ``steps_per_execution`` k > 1 a traced step and the trigger's step times are one execution
    of k batches (the markers say k), and the clauses say so."""
    st = step_time_ms(report)
    per = rec.markers[0][1] - rec.markers[0][0] + 1 if rec.markers else 1
    unit = "ms/step" if per <= 1 else f"ms per execution of {per} steps"
    pct = report.get("breakdown_pct") or {}
    recs = report.get("recommendations") or []
    head = report.get("bottleneck_label") or bottleneck_label(report.get("bottleneck"))
    first, last = rec.steps or (0, 0)
    parts = [f"steps {first}-{last}: {head} ({report.get('cause', '')}, "
             f"confidence {float(report.get('confidence') or 0):.2f})"]
    if st is not None:
        share = (report.get("input_load") or {}).get("share")
        held = (f", the input's work {100 * share:.0f}% of the cores' demand"
                if isinstance(share, (int, float)) and share > 0 else "")
        parts.append(f"{st:.1f} {unit}, {float(pct.get('input', 0.0)):.0f}% waiting for input{held}")
    if recs:  # the title, the report's worth string and the fix's code name, as the CLI's table
        worth = recs[0].get("worth")
        parts.append(f"fix first: {recs[0].get('title')}" + (f" — {worth}" if worth else "") + f" [{recs[0].get('fix')}]")
    if rec.kind == "triggered" and rec.trigger:
        t = rec.trigger
        parts.append(f"opened on a slowdown: {t['observed_p50_ms']:.3g} {unit} against a baseline of "
                     f"{t['baseline_p50_ms']:.3g} ms from step {t['slow_steps'][0]}")
    if rec.change:
        parts.append(f"changed: {rec.change['text']}")
    return parts


def verdict_text(rec: WindowRecord, report: SessionDict) -> str:
    """The ``bottleneck/verdict`` text of one analysed window, Markdown as TensorBoard's Text
    dashboard renders it: the verdict clause in bold (label, ``cause`` and confidence), the
    other clauses of :func:`verdict_parts` as a list, the verdict's kind, the cause's meaning,
    and the session folder the whole report reads from."""
    head, *rest = verdict_parts(rec, report)
    lines = [f"**{_plain(head)}**", ""]
    lines += [f"- {_plain(p)}" for p in rest]
    lines.append(f"- kind `{report.get('bottleneck', 'unknown')}`, cause `{report.get('cause', '')}`"
                 + (f": {_plain(str(report['cause_text']))}" if report.get("cause_text") else ""))
    if rec.session_dir:
        lines.append(f"- session `{os.path.basename(rec.session_dir)}` (the whole report: the Bottleneck tab, "
                     f"or `tfbneck analyze`)")
    return "\n".join(lines)


def _plain(text: str) -> str:
    """``text`` with the characters Markdown would read as emphasis or code escaped, so that
    a cause code such as ``input_preprocessing`` shows as written."""
    for ch in ("\\", "`", "*", "_"):
        text = text.replace(ch, "\\" + ch)
    return text


class TensorFlowSummaries:
    """``tf.summary`` into one file writer; TensorFlow is imported here."""

    def __init__(self, log_dir: str):
        import tensorflow as tf
        self._tf = tf
        self._writer = tf.summary.create_file_writer(log_dir)
        with self._writer.as_default(), tf.summary.record_if(False):
            tf.summary.scalar(INPUT_PCT, 0.0, step=0)
            tf.summary.text(VERDICT_TAG, "", step=0)

    def write(self, scalars: Mapping[str, float], step: int, text: Optional[Tuple[str, str]] = None) -> None:
        """Write ``scalars`` (tag -> value) and ``text`` (tag, Markdown) at ``step``, then flush."""
        tf = self._tf
        with self._writer.as_default():
            for tag, value in scalars.items():
                tf.summary.scalar(tag, value, step=step)
            if text is not None:
                tf.summary.text(text[0], text[1], step=step)
        self._writer.flush()

    def flush(self) -> None:
        self._writer.flush()


class PlainSummaries:
    """The same events written without a framework: TensorBoard's record writer
    (``tensorboard.summary.writer.record_writer``, whose CRC comes from TensorBoard's own stub)
    into a local ``events.out.tfevents.<time>.<host>.<pid>.tfbneck`` file (the name TensorBoard
    lists, tensorboard/summary/writer/event_file_writer.py), after the ``file_version`` event
    every event file begins with. TensorBoard's ``EventFileWriter`` itself is not used: it
    imports TensorFlow for its file API whenever TensorFlow is installed. Scalars are
    ``simple_value`` (what the Scalars dashboard reads from any writer), text a string tensor
    with the text plugin's metadata (tensorboard/plugins/text/summary_v2.py)."""

    def __init__(self, log_dir: str):
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
        from tensorboard.plugins.text import metadata as text_metadata
        from tensorboard.summary.writer.record_writer import RecordWriter
        self._event, self._pb, self._tensor, self._types = event_pb2, summary_pb2, tensor_pb2, types_pb2
        self._text_meta = text_metadata.create_summary_metadata(display_name="", description="")
        os.makedirs(log_dir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.tfbneck"
        self._writer = RecordWriter(open(os.path.join(log_dir, name), "ab"))
        self._put(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _put(self, event) -> None:
        self._writer.write(event.SerializeToString())
        self._writer.flush()

    def write(self, scalars: Mapping[str, float], step: int, text: Optional[Tuple[str, str]] = None) -> None:
        values = [self._pb.Summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items()]
        if text is not None:
            tensor = self._tensor.TensorProto(dtype=self._types.DT_STRING, string_val=[text[1].encode("utf-8")])
            values.append(self._pb.Summary.Value(tag=text[0], tensor=tensor, metadata=self._text_meta))
        self._put(self._event.Event(wall_time=time.time(), step=int(step), summary=self._pb.Summary(value=values)))

    def flush(self) -> None:
        self._writer.flush()


class EventWriter:
    """The callback's event file in ``<log_dir>``, shared by the step-time scalars (the training
    thread, at a period's end), the system scalars (the system view's thread) and each analysed
    window's summaries (an analysis thread), under one lock.

    The summary API imports modules lazily at its first use (TensorBoard's summary API, which
    imports ``concurrent.futures.thread``, which registers an exit hook): done on a thread while
    the interpreter shuts down, that import fails with "can't register atexit after shutdown"
    and the last window's summaries would be lost. So :meth:`prepare` creates the file writer
    and runs the summary API (scalar and text) once without recording, on the training thread,
    before any other thread writes; those threads then only write.

    Args:
      log_dir: where the event file goes.
      warn: ``warn(key, message)``, one warning per kind: a writer that cannot be made or write
        is said once (key ``"scalars"``), and training goes on.
      tensorflow: write with ``tf.summary`` (Keras' TensorFlow backend); else with
        :class:`PlainSummaries`.
    """

    def __init__(self, log_dir: str, warn: Callable[[str, str], None], tensorflow: bool = True):
        self.log_dir, self._warn = log_dir, warn
        self._kind = TensorFlowSummaries if tensorflow else PlainSummaries
        self._writer: Any = None     # a TensorFlowSummaries or PlainSummaries
        self._lock = threading.Lock()
        self._failed = False         # the writer could not be made: not retried at every period

    @property
    def ready(self) -> bool:
        """The writer exists (:meth:`prepare` succeeded)."""
        return self._writer is not None

    def prepare(self) -> None:
        """Create the writer and prime the summary API (class docstring); call it on the
        training thread. Never raises."""
        with self._lock:
            if self._writer is not None or self._failed:
                return
            try:
                self._writer = self._kind(self.log_dir)
            except Exception as err:  # noqa: BLE001 - scalars are optional: say so, analyse anyway
                self._failed = True
                self._warn("scalars", f"could not write scalars to {self.log_dir} ({type(err).__name__}: {err})")

    def write_values(self, values: Dict[str, float], step: int) -> None:
        """Write scalars ``tag -> value`` at ``step`` now, creating the writer if need be.
        Never raises."""
        self.prepare()
        if self._writer is None:
            return
        try:
            with self._lock:
                self._writer.write(values, step)
        except Exception as err:  # noqa: BLE001 - scalars are optional; training goes on
            self._warn("scalars", f"could not write scalars to {self.log_dir} ({type(err).__name__}: {err})")

    def write_window(self, rec: WindowRecord, report: SessionDict) -> None:
        """Write one analysed window's summaries at its last step: :func:`window_scalars` and
        the text :func:`verdict_text`. Call only once :attr:`ready`; raises what the writer raises."""
        step = (rec.steps or (0, 0))[1]
        with self._lock:
            self._writer.write(window_scalars(report), step, (VERDICT_TAG, verdict_text(rec, report)))

    def flush(self) -> None:
        """Flush what was written so far to disk."""
        with self._lock:
            if self._writer is not None:
                try:
                    self._writer.flush()
                except Exception:  # noqa: BLE001, S110 - a full disk: the next flush tries again
                    pass
