"""Fleet-wide analysis as an Apache Beam pipeline (``tfbneck analyze --runner beam``).

The same per-session analysis as the local run (:func:`tfbneck_plugin.batch.reports_in_runs`,
discovery by :func:`tfbneck_plugin.batch.discover`), distributed by Beam: the
DirectRunner locally, Dataflow / Flink / Spark unchanged (pass their options with
``--beam-options``). The pipeline::

    Create(PATHs) -> FlatMap(find sessions) -> Reshuffle -> Map(analyze_session)
        -> JSON lines  <prefix>-SSSSS-of-NNNNN.jsonl   (one {"key": [path index, run, session],
                                                         "report": {...}} object per line)
        -> CSV         <prefix>.csv                    (one row per session, report.CSV_COLUMNS)

Discovery runs inside the pipeline, so a fleet's thousands of logdirs are listed by the
workers, not the launcher. Requires ``pip install '.[beam]' in the tfbneck clone``.
"""
from __future__ import annotations

import csv
import io
import json
import shlex
from typing import Any, Dict, Iterable, List, Optional, Tuple, cast

from .. import batch
from ..errors import path_error_report
from ..logdir import DiscoveryError, label_runs, natural_key
from ..render.report import CSV_COLUMNS, csv_row
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


def analyze_keyed(item):
    key, session = item
    if isinstance(session, dict):  # a discovery error record
        return key, session
    # through the report cache (a local runner's rerun reads JSON), with the run's facts, as the local run
    (report,) = batch.reports_in_runs([session])
    return key, report


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
                   | "Analyze" >> beam.Map(analyze_keyed))
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
