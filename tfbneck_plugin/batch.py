"""The batch driver: discovery and analysis of many sessions, behind every front door.

The CLI (``tfbneck analyze``), the Python API (:func:`tfbneck_plugin.api.analyze`), the Beam
pipeline, the TensorBoard plugin, ``tfbneck compare`` and the callback's background analysis
all analyse a session through :func:`analyze_one`, the one place where a session becomes a
report (a report cache belongs there). :func:`discover` finds the sessions under several
paths, :func:`analyze_many` analyses a list of them (in parallel processes, with a progress
bar on stderr), and :func:`analyze_paths` does both and groups the workers of a multi-worker
job into one report, as the CLI prints them.
"""
from __future__ import annotations

import sys
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

from . import cache
from .analysis.grouping import group_jobs
from .analysis.session import analyze_session
from .errors import path_error_report
from .logdir import DiscoveryError, Session, find_sessions, label_runs, session_identity
from .runs import annotate
from .schema import SessionDict

#: Show a progress bar on stderr from this many sessions on.
PROGRESS_FROM = 4
#: Where sessions are looked for, as the messages say it.
SESSION_LAYOUT = "<run>/plugins/profile/<session>/*.xplane.pb, or a system record from tfbneck watch --output"


def no_session_message(paths: Sequence[str]) -> str:
    """The one line said when no profiling session is under ``paths``."""
    return f"no profiling session found under {', '.join(paths)} (looked for {SESSION_LAYOUT})"


def analyze_one(session: Session, opener: Optional[Callable] = None, use_cache: bool = True) -> SessionDict:
    """The report of one session (:func:`.analysis.session.analyze_session`): every front
    door analyses a session here. With ``use_cache`` (and the default opener) the report
    comes from the persistent report cache when the same files were analysed by the same
    analyzer, and goes there otherwise (:func:`.cache.cached_analyze`). Never raises for
    bad input (``status: "error"``)."""
    if use_cache and opener is None:
        return cache.cached_analyze(session)
    return analyze_session(session, opener)


def analyze_uncached(session: Session) -> SessionDict:
    """:func:`analyze_one` without the report cache (picklable, for process pools)."""
    return analyze_session(session)


def discover(paths: Sequence[str]) -> Tuple[List[Session], List[str]]:
    """(sessions, discovery warnings) under ``paths``, each session once (overlapping paths
    name the same session once: :func:`.logdir.session_identity`), in the order found.

    Raises:
      DiscoveryError: a path that does not exist or cannot be listed (one line).
    """
    sessions: List[Session] = []
    problems: List[str] = []
    seen = set()
    for path in paths:
        found = find_sessions(path)
        for s in found.sessions:
            key = session_identity(s)
            if key not in seen:
                seen.add(key)
                sessions.append(s)
        problems.extend(found.problems)
    return sessions, problems


class Found(NamedTuple):
    """What :func:`find` found under several PATHs."""
    sessions: List[Session]
    problems: List[str]        # folders below a PATH that could not be read, one line each
    failed: List[SessionDict]  # one error row per PATH that could not be searched


def find(paths: Sequence[str]) -> Found:
    """The sessions under ``paths`` as the CLI and the API list them: runs named so that a
    reader can tell them apart (:func:`.logdir.label_runs`: never ``.``; with several PATHs
    each run name starts with its PATH's folder), each session once, and one error row
    (:func:`.errors.path_error_report`) per PATH that cannot be searched, so that one bad
    PATH among several does not stop the others (as in the Beam runner).

    Raises:
      DiscoveryError: no PATH can be searched (one PATH alone: its own error).
    """
    sessions: List[Session] = []
    problems: List[str] = []
    failed: List[SessionDict] = []
    errors: List[DiscoveryError] = []
    seen = set()
    for path in paths:
        try:
            found = find_sessions(path)
        except DiscoveryError as err:
            if len(paths) == 1:
                raise
            errors.append(err)
            failed.append(path_error_report(path, err))
            continue
        for s in label_runs(path, found.sessions, several=len(paths) > 1):
            key = session_identity(s)
            if key not in seen:  # overlapping PATHs name the same session once
                seen.add(key)
                sessions.append(s)
        problems.extend(found.problems)
    if errors and len(errors) == len(paths):
        raise DiscoveryError("; ".join(str(e) for e in errors), errors[0].cause)
    return Found(sessions, problems, failed)


def analyze_many(sessions: List[Session], jobs: int = 1, use_cache: bool = True,
                 progress: bool = True) -> List[SessionDict]:
    """The reports of ``sessions``, in their order; ``jobs`` > 1 analyses them in that many
    processes. A tqdm progress bar goes to stderr from :data:`PROGRESS_FROM` sessions when
    ``progress`` (the Python API passes False: in a notebook a stderr bar is a red block).
    ``use_cache``: read and fill the report cache (then trimmed to its bound). Each report
    gets what its run's step-time trend files say (:func:`.runs.annotate`: session time,
    window kind and trigger, the run's length)."""
    results = _analyze_each(sessions, jobs, use_cache, progress)
    annotate(results, sessions)
    if use_cache:
        cache.trim()
    return results


def _analyze_each(sessions: List[Session], jobs: int, use_cache: bool, progress: bool) -> List[SessionDict]:
    one = analyze_one if use_cache else analyze_uncached
    if not (progress and len(sessions) >= PROGRESS_FROM):  # no bar: tqdm is not even imported (~20 ms)
        return _map(one, sessions, jobs, lambda: None)
    from tqdm import tqdm
    with tqdm(total=len(sessions), desc="analysing", unit="session", file=sys.stderr) as bar:
        return _map(one, sessions, jobs, bar.update)


def _map(one: Callable[[Session], SessionDict], sessions: List[Session], jobs: int,
         done: Callable[[], object]) -> List[SessionDict]:
    """``one`` of each session, in order, in ``jobs`` processes (here when 1 or one session);
    ``done()`` after each."""
    results: List[SessionDict] = []
    if jobs <= 1 or len(sessions) <= 1:
        for s in sessions:
            results.append(one(s))
            done()
        return results
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for r in pool.map(one, sessions, chunksize=1):
            results.append(r)
            done()
    return results


def analyze_paths(paths: Sequence[str], jobs: int = 1, use_cache: bool = True,
                  progress: bool = True) -> Tuple[List[SessionDict], List[str]]:
    """(reports, discovery warnings) of every session under ``paths`` (:func:`find`): the
    sessions of a multi-worker job as one report (:func:`.analysis.grouping.group_jobs`),
    then an error row for each PATH that could not be searched.

    Raises:
      DiscoveryError: no path can be searched, or no session under any of them.
    """
    sessions, problems, failed = find(paths)
    if not sessions:
        raise DiscoveryError(no_session_message(paths))
    return group_jobs(analyze_many(sessions, jobs, use_cache, progress)) + failed, problems
