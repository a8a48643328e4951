"""The batch driver: discovery and analysis of many sessions, behind every front door.

A session's finished report is made here, in two steps: the report of its trace
(:func:`analyze_one`, through the persistent report cache: the trace's files do not change),
then what its run's step-time trend files say written into a copy of it (session time, window,
the run's length, the input-cost measurement, slow stretches the trigger did not profile: the
facts :mod:`.runs` reads, the sentences :mod:`.analysis.run_evidence` writes; a run's files grow
as it trains, so they are read each time and never cached): :func:`with_run_facts`. The front
doors take one of three ways to both steps: :func:`analyze_many` (the CLI, the Python API
:func:`tfbneck_plugin.api.analyze`, the callback's background analysis: the traces analysed in
parallel processes, with a progress bar on stderr), :func:`reports_in_runs` (``tfbneck watch``'s
captures), or :func:`with_run_facts` on the trace reports they made themselves (the
TensorBoard plugin's background threads, the Beam pipeline's steps, ``tfbneck compare``, which
analysed each run's sessions to pick the one to compare).
:func:`discover` finds the sessions under several paths, and
:func:`analyze_paths` does both and groups the workers of a multi-worker job into one report,
as the CLI prints them.
"""
from __future__ import annotations

import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from . import cache
from .analysis.grouping import group_jobs
from .analysis.run_evidence import add_evidence, uncaptured_evidence, write_run_facts
from .analysis.session import analyze_session
from .errors import path_error_report
from .logdir import DiscoveryError, Session, find_sessions, label_runs, session_identity
from .runs import RunContext, read_run, run_dir_of, run_facts, session_time
from .schema import SessionDict

#: Show a progress bar on stderr from this many sessions on.
PROGRESS_FROM = 4
#: Where sessions are looked for, as the messages say it.
SESSION_LAYOUT = ("<run>/plugins/profile/<session>/*.xplane.pb, PyTorch's <run>/*.pt.trace.json[.gz], "
                  "or a system record from tfbneck watch --output")


def no_session_message(paths: Sequence[str]) -> str:
    """The one line said when no profiling session is under ``paths``."""
    return f"no profiling session found under {', '.join(paths)} (looked for {SESSION_LAYOUT})"


def analyze_one(session: Session, opener: Optional[Callable] = None, use_cache: bool = True) -> SessionDict:
    """The report of one session's trace (:func:`.analysis.session.analyze_session`), before
    its run's facts (:func:`with_run_facts` adds them). With ``use_cache`` (and the default opener) the report
    comes from the persistent report cache when the same files were analysed by the same
    analyzer, and goes there otherwise (:func:`.cache.cached_analyze`). Never raises for
    bad input (``status: "error"``)."""
    if use_cache and opener is None:
        return cache.cached_analyze(session)
    return analyze_session(session, opener)


def analyze_uncached(session: Session) -> SessionDict:
    """:func:`analyze_one` without the report cache (picklable, for process pools)."""
    return analyze_session(session)


def reports_in_runs(sessions: Sequence[Session],
                    analyze: Callable[[Session], SessionDict] = analyze_one) -> List[SessionDict]:
    """The finished reports of ``sessions``, in their order: each one's report of its trace
    (``analyze``, default :func:`analyze_one`) with what its run's step-time trend files say
    (:func:`with_run_facts`). Each report is a new dict: the one ``analyze`` returned (a
    cached report) is left as it was. Never raises for bad input (as ``analyze``)."""
    return with_run_facts([analyze(s) for s in sessions], sessions)


def run_mates(sessions: Sequence[Session], among: Sequence[Session]) -> List[Session]:
    """What a front door that shows only some sessions of a logdir gives :func:`with_run_facts`
    so that their finished reports equal those of a call with all of ``among`` (the logdir's
    sessions, as ``tfbneck analyze LOGDIR`` finishes them): ``sessions`` and the sessions of
    ``among`` that can take a run's slow stretches not profiled from them. That sentence is
    the one fact another session decides (it goes on the run's newest analysed session, the
    later one of equal times), so these are the complete sessions of ``among`` in a run folder
    of ``sessions`` recorded no earlier (:func:`.runs.session_time`) than the earliest of
    ``sessions`` there, when that folder's trend files record such a stretch. Sessions are
    matched by ``key`` (run, session name); the ones given replace those of ``among``.

    Returns:
      a new list in ``among``'s order (the order decides ties), then the sessions of
      ``sessions`` that ``among`` lacks. Reads the trend files (:func:`.runs.read_run`) of
      only the run folders that hold such newer sessions, each once; never raises.
    """
    given = {s.key: s for s in sessions}
    earliest: Dict[str, float] = {}  # run folder -> the earliest time of `sessions` there
    for s in sessions:
        if not s.incomplete:
            d = run_dir_of(s)
            earliest[d] = min(earliest.get(d, float("inf")), session_time(s))
    newer: Dict[str, List[Session]] = {}  # run folder -> its sessions in `among` that may be newer
    for s in among:
        if s.key not in given and not s.incomplete and earliest:
            d = run_dir_of(s)
            if d in earliest and session_time(s) >= earliest[d]:
                newer.setdefault(d, []).append(s)
    mates = {s.key for d, found in newer.items() if read_run(d).uncaptured for s in found}
    out = [given.get(s.key, s) for s in among if s.key in given or s.key in mates]
    listed = {s.key for s in out}
    return out + [s for s in sessions if s.key not in listed]


def with_run_facts(reports: Sequence[SessionDict], sessions: Sequence[Session]) -> List[SessionDict]:
    """The finished reports of ``sessions`` whose trace reports were already made (the tab's
    background threads, a Beam step): shallow copies of ``reports`` (``reports[i]`` the report
    of ``sessions[i]``) with what their runs' trend files say, each run folder's files read once (:func:`.runs.read_run`):
    each complete session's :func:`.runs.run_facts`, written with the sentences they support
    (:func:`.analysis.run_evidence.write_run_facts`); the newest analysed session of each run
    (``status: ok``, latest ``session_time``, the later one of equal times) gets
    :func:`.analysis.run_evidence.uncaptured_evidence` in its evidence. The writers replace
    the fields and lists they change, so the reports given keep theirs. Never raises."""
    shown: List[SessionDict] = [r.copy() for r in reports]
    contexts: Dict[str, RunContext] = {}
    newest: Dict[str, Tuple[float, SessionDict]] = {}  # run folder -> its newest analysed session
    for report, s in zip(shown, sessions):
        if s.incomplete:
            continue
        d = run_dir_of(s)
        ctx = contexts.get(d)
        if ctx is None:
            ctx = contexts[d] = read_run(d)
        write_run_facts(report, run_facts(ctx, s))
        if report.get("status") == "ok" and (d not in newest or (report["session_time"] or 0) >= newest[d][0]):
            newest[d] = (report["session_time"] or 0, report)
    for d, (_t, report) in newest.items():  # once per run: on its newest session
        said = uncaptured_evidence(contexts[d].uncaptured)
        if said:
            add_evidence(report, said)
    return shown


def discover(paths: Sequence[str], labelled: bool = False) -> Tuple[List[Session], List[str]]:
    """(sessions, discovery warnings) under ``paths``, each session once (overlapping paths
    name the same session once: :func:`.logdir.session_identity`), in the order found; with
    ``labelled``, runs named as :func:`find` names them (:func:`.logdir.label_runs`).

    Raises:
      DiscoveryError: a path that does not exist or cannot be listed (one line).
    """
    sessions: List[Session] = []
    problems: List[str] = []
    seen: Set[Tuple[str, ...]] = set()
    for path in paths:
        found = find_sessions(path)
        _add_once(sessions, seen, label_runs(path, found.sessions, several=len(paths) > 1) if labelled
                  else found.sessions)
        problems.extend(found.problems)
    return sessions, problems


def _add_once(sessions: List[Session], seen: Set[Tuple[str, ...]], found: Sequence[Session]) -> None:
    """Appends to ``sessions`` those of ``found`` not yet ``seen`` (overlapping PATHs name the
    same session once: :func:`.logdir.session_identity`), and marks them seen."""
    for s in found:
        key = session_identity(s)
        if key not in seen:
            seen.add(key)
            sessions.append(s)


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
    seen: Set[Tuple[str, ...]] = set()
    for path in paths:
        try:
            found = find_sessions(path)
        except DiscoveryError as err:
            if len(paths) == 1:
                raise
            errors.append(err)
            failed.append(path_error_report(path, err))
            continue
        _add_once(sessions, seen, label_runs(path, found.sessions, several=len(paths) > 1))
        problems.extend(found.problems)
    if errors and len(errors) == len(paths):
        raise DiscoveryError("; ".join(str(e) for e in errors), errors[0].cause)
    return Found(sessions, problems, failed)


def analyze_many(sessions: List[Session], jobs: int = 1, use_cache: bool = True,
                 progress: bool = True) -> List[SessionDict]:
    """The finished reports of ``sessions``, in their order, as :func:`with_run_facts`
    makes them; ``jobs`` > 1 analyses the traces in that many processes. A tqdm progress
    bar goes to stderr from :data:`PROGRESS_FROM` sessions when ``progress`` (the Python API
    passes False: in a notebook a stderr bar is a red block). ``use_cache``: read and fill
    the report cache (then trimmed to its bound)."""
    results = with_run_facts(_analyze_each(sessions, jobs, use_cache, progress), sessions)
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
