"""The fleet view: where the time of many runs goes, which runs waste the most and which
fix would recover it (``tfbneck fleet``, ``tfbneck_plugin.fleet()``, the tab's Fleet view).
No TensorFlow here.

Input: one summary per session (:mod:`tfbneck_plugin.summary`, read from the report cache
or made by analysing the session) and each run's :class:`~tfbneck_plugin.runs.RunContext`
(its trend files). The figures, all from the session reports:

* **Categories.** ``categories_ms``: each breakdown category's time in the profiled steps
  (share x mean step x steady steps), summed over the sessions; ``categories_pct`` its share
  of their sum. ``accelerator_hours``: over the runs whose length a trend file gives (and
  whose sessions found steps, to split the length by), each
  run's time (:mod:`tfbneck_plugin.runs`) split by the run's profiled shares (its sessions'
  ``categories_ms`` over their ``profiled_ms``), in hours.
* **A run's state** is its latest session with a report (by session time, then name).
* **Recoverable time** of a run: (time per batch now - the best fix's predicted time per
  batch) x the run's batches (``analysis.whatif`` predicts per batch, so runs with
  ``steps_per_execution`` compare with the others). Batches: the trend file's count when
  known (``length_known``), else the profiled batches only (said so in ``basis``). A first
  fix with neither a prediction nor a bound (``summary.best_fix`` basis None: XLA, a GPU for a
  CPU-only run, cheaper dataset work) leaves it unknown (None), never 0: a run ranks by
  :func:`rank_key`, the runs of unknown worth after those with a known one to recover and
  before those with none.
* **Sessions without a report** are named, each with its one-line ``error`` as ``tfbneck
  analyze`` gives it (``failed``; a run's latest one in its ``error``).
* **Groups**: the first capture group of ``group_by`` (a regular expression searched in the
  run's name; the whole match without a group), else the run name's first ``group_level``
  folders.
* **Trend**: sessions per day of their session time (local time, as the profiler names
  session folders), with the day's category shares.
"""
from __future__ import annotations

import datetime
import functools
import re
from collections import Counter, defaultdict
from typing import Callable, Dict, Iterable, List, Optional

from ..version import __version__
from ..analysis.breakdown import CATEGORIES
from ..errors import first_line
from ..logdir import natural_key
from ..schema import category_label
from ..runs import RunContext, window_of

#: Group of a run that ``group_by`` does not match.
NO_MATCH = "(no match)"
_MS_PER_HOUR = 3.6e6
#: Show a progress bar on stderr from this many sessions on (as ``tfbneck analyze``).
PROGRESS_FROM = 4


#: The longest one search of ``--group-by`` in a run name may take (seconds). A pattern that
#: backtracks without end (``(a|aa)+$``) would hang the CLI or the tab's server thread; a
#: usual one takes microseconds on a run name. Our choice; the ``regex`` package enforces it.
GROUP_BY_TIMEOUT_S = 0.1


def grouper(group_by: Optional[str] = None, group_level: int = 1) -> Callable[[str], str]:
    """``run name -> group``. Raises ValueError (one line) for a pattern that does not compile
    and, from the returned function, for one whose search of a run name takes longer than
    :data:`GROUP_BY_TIMEOUT_S` (catastrophic backtracking). Patterns are Python's ``re``
    syntax, run by the ``regex`` package (its version 0 behaviour is ``re``'s) for its timeout."""
    if group_by:
        import regex
        try:
            pattern = regex.compile(group_by)
        except (regex.error, re.error) as err:
            raise ValueError(f"--group-by {group_by!r}: not a regular expression ({err})") from None

        def by_pattern(run: str) -> str:
            try:
                m = pattern.search(run, timeout=GROUP_BY_TIMEOUT_S)
            except TimeoutError:
                raise ValueError(f"--group-by {group_by!r}: searching the run name {run[:80]!r} took over "
                                 f"{GROUP_BY_TIMEOUT_S} s (the pattern backtracks without end); simplify it") from None
            if m is None:
                return NO_MATCH
            return next((g for g in m.groups() if g is not None), m.group(0)) if m.groups() else m.group(0)
        return by_pattern
    level = max(int(group_level), 1)
    return lambda run: "/".join(str(run).split("/")[:level]) or "."


def _pct(parts: Dict[str, float]) -> Dict[str, float]:
    total = sum(parts.values())
    return {c: round(100.0 * v / total, 2) if total > 0 else 0.0 for c, v in parts.items()}


def _add(into: Dict[str, float], more: Dict[str, float]) -> None:
    # Summaries hold every category (summary.summarize); added up once per session per total.
    for c, v in more.items():
        into[c] = into.get(c, 0.0) + (v or 0.0)


@functools.lru_cache(maxsize=4096)
def _day_of_hour(hour: int) -> str:
    return datetime.datetime.fromtimestamp(hour * 3600).strftime("%Y-%m-%d")


def _day(t: Optional[float]) -> str:
    # Local days begin on a whole hour in every time zone but a few (+05:45...), so the
    # day of the hour is the day of the time (the view's ten thousand sessions share few hours).
    return _day_of_hour(int(t // 3600)) if t else "unknown"


def _error_line(item: Dict) -> str:
    """The one line that says why a session has no report (its report's ``error``, which
    names the file: :func:`tfbneck_plugin.errors.error_report`), never a traceback."""
    return first_line(item.get("error"), f"no report ({item.get('error_kind') or 'error'})")


def _run_entry(run_dir: str, items: List[Dict], ctx: Optional[RunContext], group: str) -> Dict:
    """One run of the ranked list (fields in :func:`build`)."""
    by_time = sorted(items, key=lambda i: (i.get("time") or 0, i["session"]))
    ok = [i for i in by_time if i.get("status") == "ok"]
    failed = [i for i in by_time if i.get("status") != "ok"]
    latest = ok[-1] if ok else by_time[-1]
    cats: Dict[str, float] = {}
    for i in ok:
        _add(cats, i.get("categories_ms") or {})
    profiled = sum(float(i.get("profiled_ms") or 0.0) for i in ok)
    entry = {"run": latest.get("run"), "path": run_dir, "group": group, "sessions": len(items),
             "errors": len(items) - len(ok), "session": latest.get("session"), "session_time": latest.get("time"),
             "status": latest.get("status"), "bottleneck": latest.get("bottleneck", "error" if not ok else None),
             "cause": latest.get("cause"), "step_time_ms": latest.get("step_time_ms"),
             "time_per_batch_ms": latest.get("time_per_batch_ms"), "window": latest.get("window"),
             "fix_first": (latest.get("fix_first") or {}).get("fix"), "fix": None, "fix_title": None,
             "fix_worth": None, "fix_basis": None, "error": _error_line(failed[-1]) if failed else None,
             "predicted_time_per_batch_ms": None, "speedup": None, "recoverable_ms": None,
             "length_known": bool(ctx and ctx.length_known), "batches": None, "run_time_ms": None,
             "hours_by_category": None, "categories_ms": cats}
    if not ok:
        return entry
    bps = int(latest.get("batches_per_step") or 1)
    entry["batches"] = int(latest.get("steps") or 0) * bps
    if ctx is not None and ctx.batches is not None and ctx.time_ms is not None:  # the run's length is known
        run_ms = ctx.time_ms
        entry.update(batches=ctx.batches, run_time_ms=run_ms)
        if profiled > 0:
            entry["hours_by_category"] = {c: v / profiled * run_ms / _MS_PER_HOUR for c, v in cats.items()}
    best, tpb = latest.get("best_fix"), latest.get("time_per_batch_ms")
    if not best:  # the report recommends nothing: nothing to recover that it knows of
        entry["recoverable_ms"] = 0.0
        return entry
    # The session report's first fix, worded as the report words it; with neither a
    # prediction nor a bound its worth stays unknown (recoverable_ms None).
    entry.update(fix=best.get("fix"), fix_title=best.get("title"), fix_worth=best.get("worth"))
    if best and isinstance(tpb, (int, float)) and isinstance(best.get("time_per_batch_ms"), (int, float)):
        speedup = best.get("speedup")
        length_ms = entry["run_time_ms"]
        if isinstance(length_ms, (int, float)) and isinstance(speedup, (int, float)) and speedup > 0:
            # The run's own clock and the fix's speedup: a profiled step slower or faster than
            # the job's own (the profiler's cost, a prefetch buffer drained in the window) does
            # not make the recoverable time exceed the run's.
            recoverable = float(length_ms) * max(0.0, 1.0 - 1.0 / float(speedup))
        else:
            recoverable = max(0.0, float(tpb) - best["time_per_batch_ms"]) * entry["batches"]
        entry.update(fix=best.get("fix"), fix_title=best.get("title"), fix_basis=best.get("basis", "predicted"),
                     predicted_time_per_batch_ms=best["time_per_batch_ms"], speedup=speedup,
                     recoverable_ms=recoverable)
    return entry


def worth_known(r: Dict) -> bool:
    """Whether run ``r`` (a :func:`build` run) has a known recoverable time (0 included)."""
    return isinstance(r.get("recoverable_ms"), (int, float))


def rank_key(r: Dict) -> tuple:
    """The order of the ranked runs: first the runs with time to recover, most first; then
    the analysed runs whose first fix has no predicted worth (unknown is not 0: they may
    hold the most), the most time at stake first (the run's own time when a trend file gives
    it, else the profiled batches' time per batch x batches); then the runs with nothing to
    recover (a known 0), then the runs with no report; ties by run name, then path."""
    name = (natural_key(str(r["run"])), r["path"])
    rec = r.get("recoverable_ms")
    if isinstance(rec, (int, float)) and rec > 0:
        return (0, -float(rec)) + name
    if r.get("status") != "ok":
        return (3, 0.0) + name
    if not worth_known(r):
        at_stake = r.get("run_time_ms")
        if not isinstance(at_stake, (int, float)):
            tpb, batches = r.get("time_per_batch_ms"), r.get("batches")
            at_stake = tpb * batches if isinstance(tpb, (int, float)) and isinstance(batches, int) else 0.0
        return (1, -float(at_stake)) + name
    return (2, 0.0) + name


def _groups(runs: List[Dict]) -> List[Dict]:
    by: Dict[str, Dict] = {}
    for r in runs:
        g = by.setdefault(r["group"], {"group": r["group"], "runs": 0, "sessions": 0, "errors": 0,
                                       "recoverable_ms": None, "runs_worth_unknown": 0, "categories_ms": {}})
        g["runs"] += 1
        g["sessions"] += r["sessions"]
        g["errors"] += r["errors"]
        if worth_known(r):
            g["recoverable_ms"] = (g["recoverable_ms"] or 0.0) + r["recoverable_ms"]
        elif r.get("status") == "ok":
            g["runs_worth_unknown"] += 1
        _add(g["categories_ms"], r["categories_ms"])
    for g in by.values():
        g["categories_pct"] = _pct(g["categories_ms"])
    return sorted(by.values(), key=lambda g: natural_key(g["group"]))  # exp2 before exp10, as runs are listed


def _trend(items: List[Dict]) -> List[Dict]:
    days: Dict[str, Dict] = {}
    for i in items:
        d = days.setdefault(_day(i.get("time")), {"date": _day(i.get("time")), "sessions": 0, "errors": 0,
                                                  "by_bottleneck": Counter(), "categories_ms": {}})
        d["sessions"] += 1
        if i.get("status") != "ok":
            d["errors"] += 1
            continue
        d["by_bottleneck"][i.get("bottleneck") or "unknown"] += 1
        _add(d["categories_ms"], i.get("categories_ms") or {})
    out = []
    for key in sorted(days, key=lambda k: (k == "unknown", k)):
        d = days[key]
        d["by_bottleneck"] = dict(d["by_bottleneck"])
        d["categories_pct"] = _pct(d["categories_ms"])
        d["input_pct"] = d["categories_pct"].get("input", 0.0)
        out.append(d)
    return out


def _verdict_counts(items: List[Dict], runs: List[Dict]) -> Dict:
    ok = [i for i in items if i.get("status") == "ok"]
    by_cause: Dict[str, Dict[str, int]] = defaultdict(lambda: {"sessions": 0, "runs": 0})
    for i in ok:
        by_cause[f"{i.get('bottleneck')}/{i.get('cause')}"]["sessions"] += 1
    for r in runs:
        if r["status"] == "ok":
            by_cause[f"{r['bottleneck']}/{r['cause']}"]["runs"] += 1
    return {"by_bottleneck": dict(Counter(i.get("bottleneck") or "unknown" for i in ok)),
            "runs_by_bottleneck": dict(Counter(r["bottleneck"] for r in runs if r["status"] == "ok")),
            "by_cause": dict(sorted(by_cause.items(), key=lambda kv: (-kv[1]["sessions"], kv[0])))}


def _hours(runs: List[Dict]) -> Dict:
    known = [r for r in runs if r["hours_by_category"]]
    by_cat = {c: sum(r["hours_by_category"][c] for r in known) for c in CATEGORIES}
    return {"runs_with_length": len(known), "runs": len(runs), "total": sum(by_cat.values()),
            "by_category": by_cat}


def build(items: Iterable[Dict], contexts: Dict[str, RunContext], group_by: Optional[str] = None,
          group_level: int = 1, problems: Iterable[str] = ()) -> Dict:
    """The fleet report of the sessions' summaries.

    Args:
      items: :func:`tfbneck_plugin.summary.summarize` dicts, each with ``run_dir`` (the
        run's folder), ``time`` (session time, unix s, or None) and ``window``
        (:func:`tfbneck_plugin.runs.window_of`).
      contexts: ``{run_dir: RunContext}``.
      group_by, group_level: how runs are grouped (:func:`grouper`).
      problems: warnings to carry (discovery, unreadable trend files), one line each.

    Returns:
      ``{"version", "sessions", "ok_sessions", "runs_total", "errors": {"sessions",
      "by_kind"}, "skipped_windows", "failed", "by_bottleneck", "runs_by_bottleneck", "by_cause":
      {"kind/cause": {"sessions", "runs"}}, "categories_ms", "categories_pct",
      "accelerator_hours": {"runs_with_length", "runs", "total", "by_category"}, "groups",
      "trend", "runs", "basis", "problems", "device_kind", "category_labels"}``: ``device_kind``
      the one device kind of the analysed sessions (None when they differ or none has one),
      ``category_labels`` each category's name for it (:func:`tfbneck_plugin.schema.category_label`,
      as ``tfbneck analyze`` names it: "Model compute on the CPU" for CPU-only runs); ``failed``
      every session without a report, by run and session name, each ``{"run", "session",
      "path", "error_kind", "error"}`` (``error``: one line naming the file and what is wrong,
      as ``tfbneck analyze`` says it); ``groups`` each with ``recoverable_ms`` (the sum of its
      known ones; None when none of its runs has one) and ``runs_worth_unknown`` (its analysed runs
      whose recoverable time is unknown); ``runs`` ranked by :func:`rank_key`,
      each with ``run``, ``path``, ``group``, ``bottleneck``, ``cause``, ``fix`` (the best
      fix's id), ``fix_title``, ``fix_worth`` (the session report's ``worth`` string),
      ``fix_basis`` (``predicted``, or ``bound``: a change with no
      model counted halfway to its bound), ``fix_first``, ``predicted_time_per_batch_ms``,
      ``speedup``, ``time_per_batch_ms``, ``batches``, ``length_known``, ``recoverable_ms``
      (ms: the run's own time x (1 - 1 / speedup) when its length is known, else the profiled
      time per batch less the predicted one, times its batches; 0.0 when the report
      recommends nothing; None when unknown: a first fix with neither a prediction nor a bound,
      or no report), ``errors`` (its sessions without a report) and ``error`` (the latest
      one's one-line error, else None),
      ``session`` (the latest), ``session_time``, ``window`` and the category times.
    Raises:
      ValueError: ``group_by`` is not a regular expression.
    """
    items = list(items)
    group_of = grouper(group_by, group_level)
    by_run: Dict[str, List[Dict]] = defaultdict(list)
    for i in items:
        by_run[i["run_dir"]].append(i)
    runs = [_run_entry(d, its, contexts.get(d), group_of(its[0].get("run") or ".")) for d, its in by_run.items()]
    runs.sort(key=rank_key)
    cats: Dict[str, float] = {}
    for i in items:
        if i.get("status") == "ok":
            _add(cats, i.get("categories_ms") or {})
    errors = Counter(i.get("error_kind") or "error" for i in items if i.get("status") != "ok")
    out = {"version": __version__, "sessions": len(items), "ok_sessions": len(items) - sum(errors.values()),
           "runs_total": len(runs), "errors": {"sessions": sum(errors.values()), "by_kind": dict(errors)},
           "skipped_windows": {"sessions": errors.get("skipped", 0),
                               "in_trend_files": sum(c.skipped_windows for c in contexts.values())},
           "failed": _failed(items)}
    out.update(_verdict_counts(items, runs))
    kinds = {i.get("device_kind") for i in items if i.get("status") == "ok"}
    device_kind = next(iter(kinds)) if len(kinds) == 1 else None  # several kinds: "Device compute"
    out.update(device_kind=device_kind, category_labels={c: category_label(c, device_kind) for c in CATEGORIES})
    out.update(categories_ms=cats, categories_pct=_pct(cats), accelerator_hours=_hours(runs),
               groups=_groups(runs), trend=_trend(items), runs=runs, basis=_basis(runs), problems=list(problems))
    return out


def _failed(items: List[Dict]) -> List[Dict]:
    """Every session without a report, by run then session name (as ``tfbneck analyze``
    lists them), with its one-line error."""
    bad = [i for i in items if i.get("status") != "ok"]
    bad.sort(key=lambda i: (natural_key(str(i.get("run"))), natural_key(str(i.get("session")))))
    return [{"run": i.get("run"), "session": i.get("session"), "path": i.get("path"),
             "error_kind": i.get("error_kind") or "error", "error": _error_line(i)} for i in bad]


def _basis(runs: List[Dict]) -> List[str]:
    known = sum(1 for r in runs if r["length_known"])
    out = ["categories_pct: shares of the profiled steps' time, summed over all sessions."]
    unknown = sum(1 for r in runs if r["status"] == "ok" and not worth_known(r))
    if unknown:
        out.append(f"{unknown} of {len(runs)} runs have a first fix with no predicted worth (no model, no bound): "
                   "their recoverable time is unknown, not 0; they rank after the runs with time to recover, "
                   "the most time at stake first.")
    if known < len(runs):
        out.append(f"{len(runs) - known} of {len(runs)} runs have no step-time trend file with timed steps: their "
                   "recoverable time counts the profiled batches only, and they are left out of accelerator_hours.")
    return out


def attach_context(item: Dict, run_dir: str, time_s: Optional[float], ctx: Optional[RunContext]) -> Dict:
    """``item`` (a session summary) with the fields :func:`build` reads beside it."""
    item["run_dir"], item["time"] = run_dir, (time_s or None)
    item["window"] = window_of(ctx, item.get("session") or "")
    return item


def parse_since(text: Optional[str]) -> Optional[float]:
    """``--since``: an ISO date or date-time (local time) as unix seconds; None for None.
    Raises ValueError (one line) for anything else."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"--since {text!r}: not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM)") from None


def collect(paths: List[str], jobs: int = 1, use_cache: bool = True, since: Optional[float] = None,
            progress: bool = False):
    """Find, analyse (or read from the cache) and summarise the sessions under ``paths``.

    Args:
      paths: logdirs, session folders or trace files (local or fsspec URLs).
      jobs: processes that analyse sessions at once (1: this process).
      use_cache: read and fill the report cache (:mod:`tfbneck_plugin.cache`).
      since: keep sessions recorded at or after this time (unix s); sessions whose time is
        unknown are then left out (counted in the problems).
      progress: a progress bar on stderr.
    Returns:
      ``(items, contexts, problems)`` for :func:`build`. Runs are named as ``tfbneck
      analyze`` names them (:func:`tfbneck_plugin.logdir.label_runs`): traces straight in a
      PATH take its folder's name, never ``.``; with several PATHs each run name starts
      with its PATH's folder.
    Raises:
      tfbneck_plugin.logdir.DiscoveryError: a path cannot be searched.
    """
    from .. import batch, cache
    from ..runs import read_run, run_dir_of, session_time
    sessions, problems = batch.discover(paths, labelled=True)  # named as `tfbneck analyze` names them
    times = [session_time(s) for s in sessions]
    if since is not None:
        undated = sum(1 for t in times if not t)
        if undated:
            problems.append(f"--since: {undated} session(s) without a known time left out")
        kept = [(s, t) for s, t in zip(sessions, times) if t and t >= since]
        sessions, times = [s for s, _ in kept], [t for _, t in kept]
    summaries = _summaries(sessions, jobs, use_cache, progress and len(sessions) >= PROGRESS_FROM)
    contexts: Dict[str, RunContext] = {}
    items = []
    for s, t, summ in zip(sessions, times, summaries):
        d = run_dir_of(s)
        if d not in contexts:
            contexts[d] = read_run(d)
            problems.extend(contexts[d].problems)
        items.append(attach_context(summ, d, t, contexts[d]))
    if use_cache:
        cache.trim()
    return items, contexts, problems


def _summaries(sessions, jobs: int, use_cache: bool, progress: bool) -> List[Dict]:
    """One summary per session: cache hits read here, the rest analysed (``jobs`` processes)."""
    import functools
    import sys
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    from ..cache import cached_summary, get_summary
    out: List[Optional[Dict]] = [get_summary(s) if use_cache else None for s in sessions]
    todo = [i for i, summ in enumerate(out) if summ is None]
    work = functools.partial(cached_summary, use_cache=use_cache)
    bar = tqdm(total=len(todo), desc="analysing", unit="session", file=sys.stderr, disable=not (progress and todo))
    try:
        if jobs <= 1 or len(todo) <= 1:
            results = map(work, (sessions[i] for i in todo))
            for i, r in zip(todo, results):
                out[i] = r
                bar.update()
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                chunk = max(1, len(todo) // (jobs * 8))
                for i, r in zip(todo, pool.map(work, [sessions[i] for i in todo], chunksize=chunk)):
                    out[i] = r
                    bar.update()
    finally:
        bar.close()
    return out  # type: ignore[return-value]
