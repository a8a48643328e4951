"""The Python API: ``tfbneck_plugin.analyze(...)`` gives the reports ``tfbneck analyze`` prints,
as objects a notebook displays.

    import tfbneck_plugin as tfb
    r = tfb.analyze("logs")      # same discovery and analysis as `tfbneck analyze logs`
    r                            # in Jupyter/Colab: verdicts, breakdown chart, tf.data stages, fixes
    r.to_dataframe()             # one row per session (pandas: pip install '.[notebook]' in the tfbneck clone)

No TensorFlow is imported (the analyzer reads traces itself).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable as _Iterable
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from . import batch
from .notebook import session as notebook
from .logdir import DiscoveryError
from .render.report import CSV_COLUMNS, build_report, csv_row, to_table
from .schema import first_fix
from .session_report import SessionReport
from .version import __version__

PathLike = Union[str, "os.PathLike[str]"]


#: The DataFrame's columns about the fix to make first (see :meth:`Report.to_dataframe`).
FIX_FIRST_COLUMNS = ["fix_first_predicted_ms", "fix_first_range_ms"]


def _fix_first_columns(s: Dict) -> Dict:
    fix = first_fix(s) or {}
    p = fix.get("predicted") or {}
    return {"fix_first_predicted_ms": p.get("time_per_batch_ms"), "fix_first_range_ms": p.get("range_ms")}


class Report:
    """The reports of one ``analyze`` call: one :class:`SessionReport` per session found.

    Iterates over sessions in the CLI's order (by run, then session, numbers in names
    ordered by value), indexes by position or by ``"run/session"``; ``r["run"]`` is that
    run's one :class:`SessionReport`, or, for a run with several windows, a ``Report`` of
    them (``r["run"][-1]``: the latest window).

    Attributes:
      sessions: the session reports.
      problems: discovery warnings (e.g. a folder that could not be listed), one line each;
        ``tfbneck analyze`` prints the same lines as warnings.
      version: the tfbneck version that made the reports.
    """

    def __init__(self, sessions: Iterable[Mapping[str, Any]], problems: Iterable[str] = (), version: str = __version__):
        self.sessions: List[SessionReport] = [s if isinstance(s, SessionReport) else SessionReport.from_dict(s)
                                              for s in sessions]
        self.problems: List[str] = list(problems)
        self.version = version

    def __iter__(self) -> Iterator[SessionReport]:
        return iter(self.sessions)

    def __len__(self) -> int:
        return len(self.sessions)

    def __getitem__(self, key: Union[int, slice, str]):
        if isinstance(key, str):
            exact = [s for s in self.sessions if notebook.session_title(s) == key]
            by_run = [s for s in self.sessions if s.get("run") == key]
            found = exact or by_run
            if len(found) == 1:
                return found[0]
            if not found:
                raise KeyError(f"{key!r}: no such session; sessions: "
                               + ", ".join(notebook.session_title(s) for s in self.sessions))
            return Report(found, (), self.version)  # a run's several windows, in session order
        return self.sessions[key]

    @property
    def failed(self) -> List[SessionReport]:
        """Sessions that could not be analysed (``status`` error; ``error`` says why)."""
        return [s for s in self.sessions if s.get("status") != "ok"]

    def to_dict(self) -> Dict:
        """The report contract's top level: ``{"version": ..., "sessions": [...]}``."""
        return {"version": self.version, "sessions": [dict(s) for s in self.sessions]}

    def to_json(self, indent: Optional[int] = 2) -> str:
        """The same JSON as ``tfbneck analyze --format json``."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_dataframe(self):
        """One row per session, the columns of ``tfbneck analyze --format csv``.

        Returns:
          A ``pandas.DataFrame``: ``run``, ``session``, ``hosts`` (comma-separated),
          ``status``, ``device_kind``, ``step_source``, ``steps``, ``step_ms`` (mean step
          time, ms), ``bottleneck``, ``cause``, ``confidence`` (0-1), ``input_pct``,
          ``blocking_stage``, ``error``, then ``<category>_pct`` for the other breakdown
          categories (% of step time), then :data:`tfbneck_plugin.render.report.EXTRA_COLUMNS`:
          ``fix_first``, ``fix_speedup`` (its predicted speedup), ``time_per_batch_ms``,
          ``window_kind``, ``window_trigger`` (from the run's trend file), ``path`` and
          ``session_time`` (local ISO time), then the rest of the first fix's worth:
          ``fix_first_predicted_ms`` (predicted time per batch, ms) and ``fix_first_range_ms``
          ([low, high] ms). Missing values are None/NaN.
        Raises:
          ImportError: pandas is not installed (one line saying how to install it).
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Report.to_dataframe() needs pandas: pip install '.[notebook]' in the tfbneck clone "
                              "(or pip install pandas)") from None
        rows = [{k: (None if v == "" else v) for k, v in dict(csv_row(s), **_fix_first_columns(s)).items()}
                for s in self.sessions]
        return pd.DataFrame(rows, columns=CSV_COLUMNS + FIX_FIRST_COLUMNS)

    def __repr__(self) -> str:
        if not self.sessions:
            return "tfbneck: no session"
        text = to_table(build_report(self.sessions)).rstrip("\n")
        return "\n".join([text] + [f"warning: {p}" for p in self.problems])

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))

    def _repr_html_(self) -> str:
        return notebook.report_html(self.sessions, self.problems)


def _paths(path_or_paths) -> List[str]:
    if isinstance(path_or_paths, (str, os.PathLike)):
        items: Sequence = [path_or_paths]
    elif isinstance(path_or_paths, _Iterable) and not isinstance(path_or_paths, (bytes, dict)):
        items = list(path_or_paths)
    else:
        raise TypeError(f"analyze() takes a path or a list of paths, not {type(path_or_paths).__name__}")
    if not items:
        raise ValueError("analyze() was given no path")
    out = []
    for p in items:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"analyze() paths are str or os.PathLike, not {type(p).__name__} ({p!r})")
        out.append(os.fspath(p))
    return out


def analyze(path_or_paths: Union[PathLike, Iterable[PathLike]], jobs: int = 1) -> Report:
    """Diagnose the profiling sessions under one or more paths, as ``tfbneck analyze`` does,
    silently (no progress bar: in a notebook one on stderr shows as an error block).

    Args:
      path_or_paths: a logdir (searched at any depth for TensorFlow's and JAX's
        ``<run>/plugins/profile/<session>/*.xplane.pb`` and PyTorch's ``<run>/*.pt.trace.json[.gz]``,
        any folder holding those being a run), a session folder, or one trace file (``.xplane.pb``,
        ``.pt.trace.json[.gz]``, or a PyTorch trace saved under another ``.json[.gz]`` name by
        ``prof.export_chrome_trace``); or a list of those. fsspec URLs
        (``gs://``, ``s3://``...) work as in the CLI (``pip install '.[remote]' in the tfbneck clone``).
      jobs: sessions analysed in parallel processes (0 = one per CPU core; default 1).
    Returns:
      A :class:`Report`: one :class:`SessionReport` per session (a session that cannot be
      read is one with ``status`` ``error`` and a one-line ``error``; the others are still
      reported; among several paths, one that cannot be searched is such a row too, named
      by the path), plus the discovery warnings in ``problems``.
    Raises:
      tfbneck_plugin.logdir.DiscoveryError: no path can be searched (it does not exist or
        cannot be listed), or no profiling session under them (one line, as the CLI's exit
        status 2).
      TypeError, ValueError: arguments of the wrong kind.
    """
    # The CLI's discovery and analysis (the batch driver): both front doors give the same reports.
    paths = _paths(path_or_paths)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs={jobs!r}: pass a number of processes >= 0 (0 = one per CPU core)")
    try:
        # silent: no progress bar on stderr (in a notebook it shows as an error block)
        reports, problems = batch.analyze_paths(paths, jobs or (os.cpu_count() or 1), progress=False)
    except DiscoveryError as err:
        raise DiscoveryError(str(err), err.cause) from None  # one line, its cause kept
    return Report(reports, problems)


class Fleet(dict):
    """The fleet report of ``tfbneck fleet`` (:func:`tfbneck_plugin.fleet_view.report.build`): a dict
    (``f["categories_pct"]``, ``f["runs"][0]["fix"]``, ``json.dumps(f)``) that displays in
    a notebook as the time per category, the groups and the runs to fix first."""

    def to_json(self, indent: Optional[int] = 2) -> str:
        """The same JSON as ``tfbneck fleet --format json``."""
        return json.dumps(self, indent=indent)

    def to_dataframe(self):
        """One row per run, ranked by recoverable time: the columns of ``tfbneck fleet
        --format csv`` (:data:`tfbneck_plugin.fleet_view.render.CSV_COLUMNS`): the best fix
        first (``fix``, ``fix_title``, ``speedup``), ``time_per_batch_ms`` and its predicted
        value (ms per batch, not per execution), ``batches``, ``recoverable_ms``, the window
        (``window_kind``, ``window_trigger``), ``path`` and ``session_time``.

        Raises:
          ImportError: pandas is not installed (one line saying how to install it).
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Fleet.to_dataframe() needs pandas: pip install 'tfbneck-plugin[notebook]' "
                              "(or pip install pandas)") from None
        from .fleet_view.render import CSV_COLUMNS as FLEET_COLUMNS, run_row
        rows = [{k: (None if v == "" else v) for k, v in run_row(i, r).items()} for i, r in enumerate(self["runs"], 1)]
        return pd.DataFrame(rows, columns=FLEET_COLUMNS)

    def __repr__(self) -> str:
        from .fleet_view.render import to_table
        return to_table(self).rstrip("\n")

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))

    def _repr_html_(self) -> str:
        from .notebook.fleet import fleet_html
        return fleet_html(self)


def fleet(path_or_paths: Union[PathLike, Iterable[PathLike]], group_by: Optional[str] = None, group_level: int = 1,
          since: Optional[str] = None, jobs: int = 1, use_cache: bool = True) -> Fleet:
    """Across every session under the paths, as ``tfbneck fleet``: time per category,
    sessions and runs per verdict, runs ranked by recoverable time with the fix, groups,
    trend (fields in :func:`tfbneck_plugin.fleet_view.report.build`).

    Args:
      path_or_paths: as :func:`analyze`.
      group_by: a regular expression searched in run names; its first group names the group.
      group_level: without ``group_by``, group by the run name's first N folders.
      since: only sessions recorded on or after this ISO date (``"2026-11-30"``).
      jobs: sessions analysed in parallel processes (0 = one per CPU core).
      use_cache: read and fill the report cache (:mod:`tfbneck_plugin.cache`).
    Returns:
      A :class:`Fleet`.
    Raises:
      tfbneck_plugin.logdir.DiscoveryError: a path cannot be searched, or no session found.
      ValueError: ``group_by`` or ``since`` cannot be read; TypeError: arguments of the wrong kind.
    """
    from .fleet_view import report as fleetmod
    paths = _paths(path_or_paths)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs={jobs!r}: pass a number of processes >= 0 (0 = one per CPU core)")
    start = fleetmod.parse_since(since)
    fleetmod.grouper(group_by, group_level)
    try:
        items, contexts, problems = fleetmod.collect(paths, jobs or (os.cpu_count() or 1), use_cache, start)
    except DiscoveryError as err:
        raise DiscoveryError(str(err), err.cause) from None
    if not items:
        raise DiscoveryError(batch.no_session_message(paths))
    return Fleet(fleetmod.build(items, contexts, group_by, group_level, problems))
