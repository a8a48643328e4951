"""Fleet-wide analysis as an Apache Beam pipeline (``tfbneck analyze --runner beam``).

The same reports as the local run, made by the same batch driver (discovery by
:func:`tfbneck_plugin.batch.discover`, each trace's report by
:func:`tfbneck_plugin.batch.analyze_one`, each run's sessions finished together by
:func:`tfbneck_plugin.batch.with_run_facts`), distributed by Beam: the DirectRunner
locally, Dataflow / Flink / Spark unchanged (pass their options with ``--beam-options``).
The pipeline::

    Create(PATHs) -> FlatMap(find sessions) -> Reshuffle -> Map(report of each trace)
        -> GroupByKey(path index, run folder) -> FlatMap(finish the run's sessions)
        -> JSON lines  <prefix>-SSSSS-of-NNNNN.jsonl   (one {"key": [path index, run, session],
                                                         "report": {...}} object per line)
        -> CSV         <prefix>.csv                    (one row per session, report.CSV_COLUMNS)

The traces, the costly part, are analysed one per element, in parallel across sessions; a
run's sessions then meet on one worker because a run's facts are not one session's: its
trend files' slow stretches not profiled are said once, on its newest session, as the local
run says them. Discovery runs inside the pipeline, so a fleet's thousands of logdirs are
listed by the workers, not the launcher. Requires ``pip install '.[beam]' in the tfbneck clone``.
"""
from __future__ import annotations

import csv
import io
import json
import shlex
from typing import Any, Dict, Iterable, List, Optional, Tuple, cast

from .. import batch
from ..errors import path_error_report
from ..logdir import DiscoveryError, Session, label_runs, natural_key, session_order
from ..render.report import CSV_COLUMNS, csv_row
from ..runs import run_dir_of
from ..schema import SessionDict



def discover(indexed_path: Tuple[int, str], remote_timeout_s: Optional[float] = None, several: bool = False
             ) -> Iterable[Tuple[Tuple[int, str, str], object]]:
    """(path index, path) -> ((index, run, session), Session) for each session found, runs
    named as the local runner names them (``logdir.label_runs``; ``several``: more than one
    PATH was given).

    A path that cannot be searched yields one error record instead of failing the job
    (the same row as the local runner's, :func:`errors.path_error_report`).
    ``remote_timeout_s``: the launcher's ``remote.timeout_s()``, carried to workers that do
    not share its environment (Dataflow), for s3:// and gs:// paths."""
    index, path = indexed_path
    if remote_timeout_s is not None:
        from .. import remote
        remote.set_timeout(remote_timeout_s)
    try:
        sessions, _problems = batch.discover([path])
    except DiscoveryError as err:
        yield (index, path, ""), path_error_report(path, err)
        return
    for s in label_runs(path, sessions, several):
        yield (index, s.run, s.name), s


#: An element between the analysis and the finishing: (path index, "run", run folder) or, for a
#: PATH that could not be searched, (path index, "error", PATH), then (key, Session or error
#: record, the trace's report or None).
RunKey = Tuple[int, str, str]
Analysed = Tuple[Tuple[int, str, str], object, Optional[SessionDict]]


def analyze_trace(item: Tuple[Tuple[int, str, str], object]) -> Tuple[RunKey, Analysed]:
    """((path index, run, session), Session) -> (its run's key, (key, session, the report of
    its trace)): :func:`tfbneck_plugin.batch.analyze_one`, through the report cache (a local
    runner's rerun reads JSON). A discovery error record passes with its own key. Never
    raises for bad input (the report says why)."""
    key, session = item
    if isinstance(session, dict):
        return (key[0], "error", key[1]), (key, session, None)
    return (key[0], "run", run_dir_of(cast(Session, session))), (key, session, batch.analyze_one(cast(Session, session)))


def finish_run(item: Tuple[RunKey, Iterable[Analysed]]) -> List[Tuple[Tuple[int, str, str], SessionDict]]:
    """A run's analysed sessions -> ((path index, run, session), finished report) each: the
    reports :func:`tfbneck_plugin.batch.with_run_facts` makes of the run's sessions given
    together, in the local run's order (:func:`tfbneck_plugin.logdir.session_order`; it breaks
    ties between sessions of one time), so that its run's facts are written as the local run
    writes them. An error record is returned as it came."""
    (_index, kind, _where), members = item
    if kind == "error":
        return [(key, cast(SessionDict, record)) for key, record, _ in members]
    ordered = sorted(members, key=lambda m: session_order(cast(Session, m[1])))
    finished = batch.with_run_facts([cast(SessionDict, report) for _key, _session, report in ordered],
                                    [cast(Session, session) for _key, session, _report in ordered])
    return [(key, report) for (key, _s, _r), report in zip(ordered, finished)]


def to_csv_row(result: SessionDict) -> str:
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="").writerow(csv_row(result))
    return buf.getvalue()


def run(paths: List[str], output_prefix: str, beam_options: Optional[str] = None) -> None:
    """Run the pipeline; results land in ``<output_prefix>-*.jsonl`` and ``<output_prefix>.csv``.

    Raises ImportError (with the install hint) when Apache Beam is not installed.
    """
    try:
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
    except ImportError:
        raise ImportError("--runner beam needs Apache Beam: pip install '.[beam]' in the tfbneck clone") from None
    from .. import remote
    header = ",".join(CSV_COLUMNS)
    options = PipelineOptions(shlex.split(beam_options or "--runner=DirectRunner"))
    with beam.Pipeline(options=options) as p:
        results = (p
                   | "Paths" >> beam.Create(list(enumerate(paths)))
                   | "FindSessions" >> beam.FlatMap(discover, remote.timeout_s(), len(paths) > 1)
                   | "Spread" >> beam.Reshuffle()
                   | "Analyze" >> beam.Map(analyze_trace)
                   | "ByRun" >> beam.GroupByKey()
                   | "Finish" >> beam.FlatMap(finish_run))
        (results
         | "JSON" >> beam.Map(lambda kv: json.dumps({"key": list(kv[0]), "report": kv[1]}, sort_keys=True))
         | "WriteJSONL" >> beam.io.WriteToText(output_prefix, file_name_suffix=".jsonl"))
        (results
         | "CSV" >> beam.Map(lambda kv: to_csv_row(kv[1]))
         | "WriteCSV" >> beam.io.WriteToText(output_prefix, file_name_suffix=".csv", header=header,
                                             num_shards=1, shard_name_template=""))


def read_results(output_prefix: str) -> List[SessionDict]:
    """The reports written by :func:`run`, in the local run's order (path, run, session)."""
    from ..logdir import is_remote
    if is_remote(output_prefix):
        import fsspec
        opened = fsspec.open_files(output_prefix + "-*.jsonl", "rt")
    else:
        import glob
        opened = [open(f, "rt") for f in sorted(glob.glob(output_prefix + "-*.jsonl"))]
    records: List[Dict[str, Any]] = []
    for f in opened:
        with f as fh:
            records.extend(json.loads(line) for line in fh if line.strip())
    records.sort(key=lambda r: (r["key"][0], natural_key(r["key"][1]), natural_key(r["key"][2])))
    return [cast(SessionDict, r["report"]) for r in records]
