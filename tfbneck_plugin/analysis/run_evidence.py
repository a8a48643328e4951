"""What a run's own step clock adds to a session's report: the facts the run's step-time
trend files give about the session (:class:`RunFacts`, read by :mod:`tfbneck_plugin.runs`),
written into the report with the sentences they support (:func:`write_run_facts`): the job's
own step time around the window against the traced step, the confidence held down when the
traced steps were not the job's steady state, and the slow stretches the slowdown trigger saw
but did not profile (:func:`uncaptured_evidence`). Those sentences rest on the callback's
step clock, not the trace: their basis is ``system_metrics``.

The facts come after the trace's analysis, not inside it: the report of a session's trace is
cached by its trace files (:mod:`tfbneck_plugin.cache`, the tab's report store), while a run's
trend files grow as it trains, so the batch driver writes them on a copy of the cached report
each time it is asked for one (:func:`tfbneck_plugin.batch.reports_in_runs`).

A run's folder may also hold a measurement of its input pipeline's cost by ablation
(:mod:`tfbneck_plugin.capture.input_cost`): the report shows the newest
(:func:`measured_input_evidence`), and where it contradicts the trace's verdict the
measurement is the truth and the verdict's confidence is held below 0.7.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from ..causes import INPUT_CAUSES
from ..records import Outcome
from ..schema import SessionDict, first_fix, step_time_ms
from . import cpu_share


@dataclass
class RunFacts:
    """What a run's trend files say about one of its sessions.

    Attributes:
      session_time: when the session was recorded (unix s), None when unknown.
      window: ``{"index", "kind", "trigger", "steps"}`` of the window that recorded it, with
        ``job_step_ms`` (the job's own step around it, unprofiled, ms) and ``overhead_x``
        when the trend file timed them (:func:`tfbneck_plugin.runs.window_of`); None when no
        trend file names the session.
      run_length: ``{"batches", "time_ms"}`` of the whole run, None when unknown.
      input_cost: the run's newest input-cost measurement
        (:func:`tfbneck_plugin.runs.read_input_cost`), None when it has none.
    """
    session_time: Optional[float] = None
    window: Optional[Dict] = None
    run_length: Optional[Dict[str, float]] = None
    input_cost: Optional[Dict] = None


def _ms(v: float) -> str:
    """A time in ms to 3 significant digits, without an exponent (1170, not 1.17e+03)."""
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def write_run_facts(report: SessionDict, facts: RunFacts) -> None:
    """Write ``facts`` into ``report`` (in place): ``session_time``, ``run_length`` when
    known, and ``window`` when a trend file names the session, with the job-scale sentence
    (:func:`job_scale_evidence`) for an analysed session and, when the job's clock shows the
    traced steps unrepresentative (:func:`unrepresentative`), the confidence held at
    :data:`UNREPRESENTATIVE_CONFIDENCE`, said in that sentence; then the input-cost
    measurement (:func:`write_measured_input`), which may raise or hold the confidence again."""
    report["session_time"] = facts.session_time
    if facts.run_length is not None:
        report["run_length"] = facts.run_length
    if facts.window is not None:
        _write_window(report, facts.window)
    # After the window's sentence: a measurement of the job's own input cost is the truth
    # whatever the window showed, so it has the last word on the confidence.
    if facts.input_cost is not None and report.get("status") == "ok":
        write_measured_input(report, facts.input_cost)


def _write_window(report: SessionDict, window: Dict) -> None:
    """``window`` into ``report``, with the job-scale sentence and the confidence held where
    the job's clock shows the traced steps unrepresentative (:func:`write_run_facts`)."""
    report["window"] = window
    said = job_scale_evidence(report) if report.get("status") == "ok" else None
    conf = report.get("confidence")
    if said and unrepresentative(report) and isinstance(conf, (int, float)) and conf > UNREPRESENTATIVE_CONFIDENCE:
        report["confidence"] = UNREPRESENTATIVE_CONFIDENCE
        said = said[:-1] + (f"; so the confidence is held at {UNREPRESENTATIVE_CONFIDENCE} ({conf} from the trace "
                            "alone: what the callback reports at the window's end, before the job's later "
                            "steps are timed).")
    if said:
        add_evidence(report, said)
    said = job_scale_input_worth(report)
    if said:
        add_evidence(report, said)


def job_scale_input_worth(report: SessionDict) -> Optional[str]:
    """Where the window drew on batches made before it (:func:`unrepresentative`), the
    input's modelled worth at the job's scale: the step without the input's work and wait
    (``input_load.after_ms``, the model's and the training thread's side, which the buffered
    batches did not shorten) against the job's own step, written to
    ``input_load["speedup_job"]`` (a new dict: the batch driver passes shallow copies of cached
    reports, whose ``input_load`` stays the trace's); one sentence, or None elsewhere (a window
    as long as the job's steps, or longer by the profiler's own cost, keeps the trace's ratio)."""
    load, steps = report.get("input_load") or {}, traced_and_job_step_ms(report)
    after = load.get("after_ms")
    if not unrepresentative(report) or steps is None or not isinstance(after, (int, float)) or after <= 0:
        return None
    job = steps[1]
    speedup = max(job / after, 1.0)
    report["input_load"] = {**load, "speedup_job": round(speedup, 2)}
    return (f"At the job's scale the input's work and wait are worth about {speedup:.2f}x: without them a batch "
            f"would take about {_ms(after)} ms (the model's side of the traced step, which the buffered batches did "
            f"not shorten) against the job's {_ms(job)} ms, where the trace's own figure "
            f"({load.get('speedup')}x) divides the traced step.")


#: A traced step below this share of the job's own step around the window was not the job's
#: steady state (the profiler only adds time): an input-bound run with a prefetch buffer,
#: profiled at steps 10-14, traced 0.55x its own step (the buffer, filled while the first
#: steps compiled, served the window). Our choice: 20 % below, beyond
#: the periods' spread.
FASTER_THAN_JOB_X = 0.8
#: Highest confidence of a verdict whose traced step the job's own clock shows unrepresentative
#: (under :data:`FASTER_THAN_JOB_X` of the job's step around the window): the shares it rests
#: on describe steps the job does not run (our choice, below the 0.7 a user may act on).
UNREPRESENTATIVE_CONFIDENCE = 0.6


def traced_and_job_step_ms(report: SessionDict) -> Optional[Tuple[float, float]]:
    """``(traced step, the job's own step around the window)`` in ms, from a report that
    :func:`write_run_facts` gave its ``window``; None without either."""
    job = (report.get("window") or {}).get("job_step_ms")
    traced = step_time_ms(report)
    if not isinstance(job, (int, float)) or job <= 0 or not traced:
        return None
    return traced, float(job)


def job_scale_evidence(report: SessionDict) -> Optional[str]:
    """One sentence stating the window's numbers for the unprofiled job:
    the job's own step time around the window (the trend's periods), the traced step's ratio
    to it (the profiler's cost), and the first fix's predicted speedup applied to the job's
    step; None without the job's clock or a traced step time."""
    steps = traced_and_job_step_ms(report)
    if steps is None:
        return None
    traced, job = steps
    x = traced / job
    text = (f"By the job's own clock (the trend file's periods around this window, unprofiled) a step took "
            f"{_ms(job)} ms; the traced step ({_ms(traced)} ms) is {x:.2f}x that")
    if x < FASTER_THAN_JOB_X and (report.get("window") or {}).get("kind") == "triggered":
        # the trigger chose the steps inside the slow stretch: advice to profile other steps does not apply
        text += (", faster than the job's own steps around it; the shares above describe the traced steps, which "
                 "the slowdown trigger chose inside the slow stretch")
    elif x < FASTER_THAN_JOB_X:
        text += (", faster than the job's own steps: the window's steps drew on batches made before it, while the "
                 f"first steps compiled or during a pause, {_buffers(report)}; so the trace understates the input "
                 f"wait; {_later_steps(report)} for the steady state")
    else:
        text += f", the profiler's own cost included, so the shares above apply to the job's {_ms(job)} ms"
    fix = first_fix(report) or {}
    predicted = fix.get("predicted") or {}
    speedup = predicted.get("speedup") if isinstance(predicted, dict) else None
    if isinstance(speedup, (int, float)) and speedup > 0 and x >= FASTER_THAN_JOB_X:
        text += f"; at the job's scale the fix first would bring it to about {_ms(job / speedup)} ms ({speedup:.2f}x)"
    return text + "."


#: tf.data iterator kinds that hold batches made ahead of the step (tf.data's
#: prefetch_dataset_op.cc, shuffle_dataset_op.cc), as :mod:`.tfdata` names a stage's kind.
BUFFER_KINDS = {"Prefetch": "a Prefetch stage (the pipeline's .prefetch(), or the one tf.data adds itself "
                            "where the pipeline has none: autotune's inject_prefetch)",
                "Shuffle": "a Shuffle buffer", "ShuffleAndRepeat": "a Shuffle buffer"}


def _buffers(report: SessionDict) -> str:
    """What held those batches, as the report shows it: the buffering tf.data stages in the
    trace (:data:`BUFFER_KINDS`) and a PyDataset's queue (the sidecar's ``keras_input``: Keras
    fills it from its workers ahead of the step, ``max_queue_size`` batches); where neither is
    seen, the buffers that could have, said as not seen."""
    stages = (report.get("input_pipeline") or {}).get("stages") or []
    seen = [BUFFER_KINDS[k] for k in dict.fromkeys(str(st.get("kind")) for st in stages) if k in BUFFER_KINDS]
    seen = list(dict.fromkeys(seen))
    if report.get("keras_input") == "PyDataset":
        seen.append("the PyDataset's queue, which its workers fill ahead of the step")
    if not seen:
        return ("held by no buffer the trace shows (a prefetch, a shuffle buffer or a Python input's queue outside "
                "the traced stages)")
    return "held by " + ", ".join(seen[:-1]) + (" and " if len(seen) > 1 else "") + seen[-1]


def _later_steps(report: SessionDict) -> str:
    """Advice to profile later steps that fits the run: a window of as many steps as this one
    (``window.steps``; 5 when unknown) in the middle of an epoch, away from the batches a
    buffer filled at its start, in the first epoch whose middle comes after this window and,
    when the run's length is known (``run_length.batches``), inside the run. The epoch's
    length is the window's ``epoch_batches`` (:func:`tfbneck_plugin.runs.epoch_length`); where
    it is unknown the advice says so rather than give steps that may not fit an epoch."""
    window = report.get("window") or {}
    steps = window.get("steps")
    first, last = (steps if isinstance(steps, (list, tuple)) and len(steps) == 2
                   and all(isinstance(v, int) for v in steps) else (10, 14))
    n = max(last - first, 1)
    epoch = window.get("epoch_batches")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch <= 0:
        return (f"profile a window of {n + 1} steps later in training, inside one epoch and away from its start "
                "(this run's epoch length is not in its trend file: count an epoch's batches, len() of the "
                "dataset, and profile the middle of the second epoch)")
    if epoch <= n + 1:
        return (f"profile fewer steps in the middle of a later epoch (an epoch here has {epoch} batches, no more "
                f"than this window's {n + 1} steps)")
    if first > epoch and (first - 1) % epoch >= min(n + 1, epoch // 4):
        # Already past the first epoch and away from its start: the buffer runs ahead here too
        # (a queue the input refills between windows), and another window would read the same.
        return (f"this window already lies inside epoch {(first - 1) // epoch + 1}, away from its start (an epoch "
                f"here has {epoch} batches), so the buffer runs ahead of the step there too and later steps would "
                "read the same: read the input's worth at the job's scale, or measure it (measure_input_cost)")
    batches = (report.get("run_length") or {}).get("batches")
    run = batches if isinstance(batches, int) and batches > 0 else None
    offset = (epoch - n - 1) // 2  # batches of the epoch before the window: the window in its middle
    k = max(last // epoch, 1)  # 0-based epoch: the second, or the first whose middle is after this window
    while k * epoch + offset + 1 <= last:
        k += 1
    if run is not None and (k + 1) * epoch > run:
        return (f"profile the middle of a later epoch, away from its start (an epoch here has {epoch} batches; "
                f"this run's {run} batches hold no whole epoch after this window: in a longer run, e.g. "
                f"profile_steps=({epoch + offset + 1}, {epoch + offset + 1 + n}), the middle of epoch 2)")
    start = k * epoch + offset + 1
    return (f"profile later steps inside one epoch, away from its start (an epoch here has {epoch} batches: "
            f"e.g. profile_steps=({start}, {start + n}), the middle of epoch {k + 1})")


#: The keys of a measurement the report keeps (``input_cost``), as capture/input_cost.py writes them.
MEASURED_KEYS = ("real_ms_per_batch", "cached_ms_per_batch", "input_ms_per_batch", "gain", "limit", "input_share",
                 "steps", "repeats", "backend", "input_kind", "time_unix", "unsettled", "others_cores")
#: The confidence of a verdict that a settled measurement confirms (the measurement is how the
#: corpora's truths are made: benchmarks/tutorial_corpus.py), at least.
CONFIRMED_CONFIDENCE = 0.8


def measured_disagrees(report: SessionDict, limit: str) -> bool:
    """The trace's verdict contradicts a measurement's ``limit``: the input measured to limit
    the run (``"input"``) while the verdict names no input cause, or the model measured to
    (``"model"``) while it names one. ``"mixed"`` contradicts nothing."""
    names_input = report.get("cause") in INPUT_CAUSES
    return (limit == "input" and not names_input) or (limit == "model" and names_input)


def write_measured_input(report: SessionDict, measured: Dict) -> None:
    """Write a measurement into ``report`` (in place): ``input_cost`` (its :data:`MEASURED_KEYS`),
    the sentence :func:`measured_input_evidence`, and the confidence: held at
    :data:`UNREPRESENTATIVE_CONFIDENCE` when the measurement contradicts the verdict
    (:func:`measured_disagrees`), raised to :data:`CONFIRMED_CONFIDENCE` when it names the
    same limit (input, or the model), unchanged when it is ``mixed`` or ``unsettled``."""
    kept = {k: measured[k] for k in MEASURED_KEYS if k in measured}
    report["input_cost"] = kept  # type: ignore[typeddict-item]  # the keys InputCost names, from a JSON file
    conf = report.get("confidence")
    limit = str(kept.get("limit"))
    disagrees = measured_disagrees(report, limit)
    held = disagrees and isinstance(conf, (int, float)) and conf > UNREPRESENTATIVE_CONFIDENCE
    confirmed = (limit in ("input", "model") and not disagrees and isinstance(conf, (int, float))
                 and conf < CONFIRMED_CONFIDENCE)
    if held:
        report["confidence"] = UNREPRESENTATIVE_CONFIDENCE
    if confirmed:
        report["confidence"] = CONFIRMED_CONFIDENCE
    add_evidence(report, measured_input_evidence(report, kept, disagrees, conf if held else None,
                                                 conf if confirmed else None))


def measured_input_evidence(report: SessionDict, m: Dict, disagrees: bool, held_from: Optional[float],
                            raised_from: Optional[float] = None) -> str:
    """One sentence stating a measurement: both times per batch, the gain, what it says limits
    the run and, when it contradicts the trace's verdict, that the measurement is the truth;
    when it confirms it, the confidence raised; when its repeats disagree, that it settles nothing."""
    limit = {"input": "the input pipeline limits the run",
             "model": "the model's own steps limit the run, not the input",
             "mixed": "the input costs part of the run, not all of it",
             "unsettled": f"nothing is settled: {m.get('unsettled') or 'the repeats disagree'}; measure again on a "
                          "quieter machine or with more steps"}.get(str(m.get("limit")), "")
    text = (f"Measured by ablation (tfbneck_plugin.measure_input_cost, {m.get('repeats')} alternations of "
            f"{m.get('steps')} steps): the model trained {m['gain']:.2f}x as fast on cached copies of its own batches "
            f"({_ms(m['real_ms_per_batch'])} -> {_ms(m['cached_ms_per_batch'])} ms per batch), so {limit}")
    if disagrees:
        verdict = f"{report.get('bottleneck')}/{report.get('cause')}"
        text += f"; the trace's verdict ({verdict}) says otherwise: trust the measurement"
        if held_from is not None:
            text += f", the confidence is held at {UNREPRESENTATIVE_CONFIDENCE} ({held_from} without the measurement)"
    elif raised_from is not None:
        text += f"; it confirms the verdict: confidence {CONFIRMED_CONFIDENCE} ({raised_from} without the measurement)"
    return text + "." + _loads_compared(report, m)


def _loads_compared(report: SessionDict, m: Dict) -> str:
    """A sentence setting the trace's modelled gain (``input_load``) beside the measurement's,
    with the other processes' load each ran beside: the modelled gain shrinks as they take the
    cores the input frees (:attr:`.cpu_share.InputLoad.speedup_alone`), so a measurement made
    on a quieter or busier machine than the window is compared with the figure for its load;
    '' where either load is unknown."""
    load, measured_others = report.get("input_load") or {}, m.get("others_cores")
    alone, beside, others = load.get("speedup_alone"), load.get("speedup"), load.get("others_cores")
    if not (isinstance(alone, (int, float)) and isinstance(beside, (int, float)) and isinstance(others, (int, float))
            and isinstance(measured_others, (int, float))):
        return ""
    if others < cpu_share.IDLE_SLACK_CORES:
        window = f"the trace modelled {beside:.2f}x on a machine to itself"
    else:
        window = (f"the trace modelled {beside:.2f}x beside other processes' {others:.2f} core(s), "
                  f"{alone:.2f}x without them")
    job = load.get("speedup_job")
    if isinstance(job, (int, float)):  # the window drew on buffered batches: the job's scale is the one to compare
        window += f", {job:.2f}x at the job's scale (compare this one: the window's steps were not the job's)"
    return f" Other processes used {measured_others:.2f} core(s) during the measurement; {window}."


def unrepresentative(report: SessionDict) -> bool:
    """The job's own clock shows the traced steps unrepresentative: a scheduled window whose
    traced step is under :data:`FASTER_THAN_JOB_X` of the job's own step around it."""
    steps = traced_and_job_step_ms(report)
    return (steps is not None and steps[0] / steps[1] < FASTER_THAN_JOB_X
            and (report.get("window") or {}).get("kind") != "triggered")


def uncaptured_evidence(uncaptured: Sequence[Tuple[str, Dict]]) -> Optional[str]:
    """One sentence naming the slow stretches the run's slowdown trigger saw but did not
    profile (``uncaptured``: (trend file, log entry) of each, as
    :attr:`tfbneck_plugin.runs.RunContext.uncaptured` holds them): steps, step times, why, and
    the file that has each one's figures; None when there were none. A user who expected a
    triggered window learns here why none came, without opening the trend file."""
    if not uncaptured:
        return None
    parts = []
    for _path, e in uncaptured[:5]:
        why = Outcome(e["outcome"]).why  # uncaptured holds uncaptured outcomes only
        # The medians, as the callback's console line gives them (the entry's means are the
        # trigger's levels: two pairs of figures for one stretch would read as two stretches).
        was, now = e.get("baseline_p50_ms"), e.get("observed_p50_ms")
        times = (f", median step {_ms(was)} -> {_ms(now)} ms"
                 if isinstance(was, (int, float)) and isinstance(now, (int, float)) else "")
        parts.append(f"steps {e.get('first_step')}-{e.get('last_step')}{times} ({why})")
    more = f" and {len(uncaptured) - 5} more" if len(uncaptured) > 5 else ""
    files = sorted({p for p, _ in uncaptured})
    return (f"The slowdown trigger saw {len(uncaptured)} slow stretch{'es' if len(uncaptured) > 1 else ''} "
            f"in this run that it did not profile: {'; '.join(parts)}{more}. Each one's figures are in "
            f"trigger_state.log of {', '.join(files)}.")


def add_evidence(report: SessionDict, said: str) -> None:
    """Add the sentence ``said`` to the end of the report's evidence (once), its basis the
    callback's step clock (``system_metrics``). The lists are replaced, not appended to: the
    batch driver passes shallow copies of cached reports, whose lists must keep the trace's
    sentences only (a run's files change under an unchanged trace)."""
    if said not in (report.get("evidence") or []):
        report["evidence"] = [*(report.get("evidence") or []), said]
        if "evidence_detail" in report:  # measured by the callback's step clock, not the trace
            report["evidence_detail"] = [*report["evidence_detail"], {"text": said, "basis": "system_metrics"}]
