"""Which of a folder's Kineto traces (PyTorch's profiler) are one session.

``torch.profiler.tensorboard_trace_handler(dir)`` writes ``<dir>/<worker>.<time>.pt.trace.json``
(``<worker>``: ``<hostname>_<pid>`` unless the script names it; ``<time>``: ``time.time_ns()``
when it writes the file; torch/profiler/profiler.py). A folder may hold the ranks of one job,
one process's profiling cycles (``schedule(repeat=N)``), or the files of a script run several
times. :func:`kineto_groups` tells them apart with what the files say (:func:`file_facts`:
``distributedInfo``'s rank and world size, and the recorded window), read from each file's
first and last bytes only, so that listing a logdir stays cheap.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import stat
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import orjson

from .kineto import SKIPPED_CATEGORIES, worker_name
from .tracefile import MAX_TRACE_BYTES

#: Where :func:`file_facts` looks: the first and the last this many bytes of the JSON (our
#: choice: the top-level keys and ``distributedInfo`` come before ``traceEvents``, one
#: ``deviceProperties`` dict per GPU is under 1 kB; the whole-window ``Trace`` span, the
#: ``Record Window End`` instant and, in files of 2024, ``baseTimeNanoseconds`` come last).
FACTS_HEAD_BYTES = 64 * 1024
FACTS_TAIL_BYTES = 64 * 1024
_FACT_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?=[\s,}])'
                      rb'(?:\s*,\s*"dur"\s*:\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?=[\s,}]))?')
_FACT_BASE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)(?=[\s,}])')
_FACT_DIST = re.compile(rb'"distributedInfo"\s*:\s*')
#: ``<worker>.<time>``: the handler's ``time.time_ns()`` when it wrote the file.
_NAME_TIME = re.compile(r"^(?P<worker>.+)\.(?P<digits>\d+)$")
#: A name's number is read as the handler's time (ns since the epoch) from this value on
#: (1e17 ns: March 1973); smaller numbers (``w.1``) only end the worker's name.
NAME_TIME_MIN_NS = 10 ** 17


@dataclass(frozen=True)
class KinetoFileFacts:
    """What a Kineto file says about the process that wrote it, read from its first and last
    bytes only (:func:`file_facts`).

    ``rank``, ``world_size``: from ``distributedInfo`` (None when absent, partial or not an
    integer). ``window_ns``: (start, end) of the recorded window in ns on the file's clock
    (``ts`` in microseconds plus ``baseTimeNanoseconds`` when the file has it): the earliest
    ``ts`` and the latest ``ts + dur`` among the events in those bytes, which hold the
    whole-window ``Trace`` span and the ``Record Window End`` instant where PyTorch writes
    them (since 2021); None when no time was found (an empty or broken file).
    ``markers_only``: the ``ProfilerStep#N`` names of a file that records nothing else
    (:func:`markers_only`), read only when its whole JSON lies within the first
    :data:`FACTS_HEAD_BYTES`; empty otherwise."""
    rank: Optional[int] = None
    world_size: Optional[int] = None
    window_ns: Optional[Tuple[float, float]] = None
    markers_only: Tuple[str, ...] = ()


def name_parts(filename: str) -> Tuple[str, Optional[int]]:
    """``host_123.1700000000000000000.pt.trace.json`` -> ``("host_123", 1700000000000000000)``:
    the worker (``<hostname>_<pid>`` unless the script named it) and the time (ns since the
    epoch) the handler put in the name. A name that does not end in ``.<digits>`` (a file
    named by hand) is all worker; a number under :data:`NAME_TIME_MIN_NS` ends the worker's
    name but is no time (None)."""
    stem = worker_name(filename)
    m = _NAME_TIME.match(stem)
    if not m:
        return stem, None
    ns = int(m.group("digits"))
    return m.group("worker"), ns if ns >= NAME_TIME_MIN_NS else None


def _int_or_none(value) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _head_and_tail(path: str, opener) -> Tuple[bytes, bytes]:
    """The first :data:`FACTS_HEAD_BYTES` and last :data:`FACTS_TAIL_BYTES` of the file's
    JSON (a ``.gz`` file is inflated as a stream, at most MAX_TRACE_BYTES, keeping only its
    end). Raises OSError (EOFError for a truncated gzip stream is kept as what was read)."""
    with opener(path, "rb") as raw:
        if not str(path).endswith(".gz"):
            head = raw.read(FACTS_HEAD_BYTES)
            if len(head) < FACTS_HEAD_BYTES:
                return head, head
            raw.seek(0, os.SEEK_END)
            size = raw.tell()
            raw.seek(max(size - FACTS_TAIL_BYTES, 0))
            return head, raw.read(FACTS_TAIL_BYTES)
        head, tail, total = b"", b"", 0
        try:
            with gzip.GzipFile(fileobj=raw) as f:
                while total <= MAX_TRACE_BYTES:
                    chunk = f.read(1 << 20)
                    if not chunk:
                        break
                    total += len(chunk)
                    if len(head) < FACTS_HEAD_BYTES:
                        head += chunk[:FACTS_HEAD_BYTES - len(head)]
                    tail = (tail + chunk)[-FACTS_TAIL_BYTES:]
        except (EOFError, zlib.error, gzip.BadGzipFile):
            pass
        return head, tail


def _local_open(path: str, mode: str = "rb"):
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the read
        raise OSError(f"{path}: not a regular file")
    return open(path, mode)


def file_facts(path: str, opener=None) -> KinetoFileFacts:
    """The :class:`KinetoFileFacts` of one Kineto file, read from its first and last bytes
    (a plain file: two reads; a ``.gz`` one is inflated as a stream). ``opener`` opens a path
    for binary reading (default: local regular files only). Never raises: a file that cannot
    be read, or is not a trace, gives ``KinetoFileFacts()``."""
    try:
        head, tail = _head_and_tail(path, opener or _local_open)
    except (OSError, ValueError):
        return KinetoFileFacts()
    rank = world = None
    m = _FACT_DIST.search(head)
    if m:
        try:
            info, _ = json.JSONDecoder().raw_decode(head[m.end():].decode("utf-8", "replace"))
        except ValueError:
            info = None
        if isinstance(info, dict):
            rank, world = _int_or_none(info.get("rank")), _int_or_none(info.get("world_size"))
    base = _FACT_BASE.search(head) or _FACT_BASE.search(tail)
    base_ns = int(base.group(1)) if base else 0
    starts, ends = [], []
    for chunk in (head, tail) if tail is not head else (head,):
        for t in _FACT_TS.finditer(chunk):
            ts = float(t.group(1))
            if ts <= 0:  # metadata events of some versions carry ts 0
                continue
            starts.append(ts)
            ends.append(ts + (float(t.group(2)) if t.group(2) else 0.0))
    window = (min(starts) * 1000.0 + base_ns, max(ends) * 1000.0 + base_ns) if starts else None
    whole = len(head) < FACTS_HEAD_BYTES and (tail is head or tail == head)
    return KinetoFileFacts(rank=rank, world_size=world, window_ns=window,
                           markers_only=markers_only(head) if whole else ())


#: Complete events that are neither activity nor a step marker (:data:`.kineto.SKIPPED_CATEGORIES`:
#: the whole-window ``Trace`` span, device-row copies of annotations, stream waits, flows).
_NOT_ACTIVITY = SKIPPED_CATEGORIES
_STEP_MARKER = re.compile(r"^ProfilerStep#\d+$")


def markers_only(data: bytes) -> Tuple[str, ...]:
    """The ``ProfilerStep#N`` names of a Kineto trace (``data``: its whole JSON) whose complete
    events are those step markers only (besides :data:`_NOT_ACTIVITY`), in the file's order;
    ``()`` for a trace that records any other activity, has no marker, or does not parse.

    Such a file is what ``torch.profiler.profile(schedule=schedule(wait, warmup, active))``
    without ``repeat=`` leaves when the loop goes on past the first cycle: ``repeat=0`` starts
    the cycle again until the loop ends, and the profiler saves the unfinished cycle when the
    ``with`` block exits, one marker of a step it did not record the ops of
    (torch/profiler/profiler.py, ``schedule`` and ``profile.__exit__``; seen with torch 2.13,
    tests/data/kineto_sessions/make.py ``tail``)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return ()
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return ()
    steps: List[str] = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") in _NOT_ACTIVITY:
            continue
        name = e.get("name")
        if not (isinstance(name, str) and _STEP_MARKER.match(name)):
            return ()
        steps.append(name)
    return tuple(steps)


def cut_short_reason(path: str, steps: Tuple[str, ...], fate: str = "left out") -> str:
    """The one line said of a Kineto file that holds step markers only (:func:`markers_only`):
    ``fate`` (what becomes of it: left out of the sessions, :func:`split_sessions`),
    what it is, why PyTorch wrote it, and the fix."""
    shown = ", ".join(steps[:3]) + (", ..." if len(steps) > 3 else "")
    return (f"{path}: {fate}: holds {shown} and no activity (a profiling cycle cut short: "
            "torch.profiler.schedule without repeat= starts its cycle again until the loop ends, "
            "and the profiler saves the unfinished one at exit); pass schedule(..., repeat=1) to "
            "record one cycle")


def without_cut_short(paths: List[str], facts=None, size_of=None, problems: Optional[List[str]] = None,
                      given: bool = False) -> List[str]:
    """``paths`` less the Kineto files that hold ``ProfilerStep#N`` markers and no activity
    (:func:`markers_only`: the unfinished cycle ``schedule()`` without ``repeat=`` leaves at
    exit), whose one-line reasons (:func:`cut_short_reason`) go to ``problems`` when given.
    Only files under :data:`FACTS_HEAD_BYTES` are looked at (``size_of(path)``: bytes, None when
    unknown; default ``os.stat``), so a listing reads no large file; their facts come from
    ``facts`` (default :func:`cached_file_facts`). ``given``: the one file the user named."""
    kept = []
    for p in paths:
        size = (size_of or _local_size)(p)
        steps = (facts or cached_file_facts)(p).markers_only if isinstance(size, int) and size < FACTS_HEAD_BYTES else ()
        if not steps:
            kept.append(p)
        elif problems is not None:
            problems.append(cut_short_reason(p, steps, fate="nothing to analyse" if given else "left out"))
    return kept


def _local_size(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return None


#: Facts of files already read, by path and what tells a changed file (:func:`cached_file_facts`):
#: the tab lists the logdir again every few seconds. Emptied when it reaches this many files (our bound).
_FACTS_CACHE_MAX = 4096
_facts_cache: Dict[Tuple, KinetoFileFacts] = {}


def cached_file_facts(path: str, opener=None, stamp: Optional[Tuple] = None) -> KinetoFileFacts:
    """:func:`file_facts`, kept while the file stays as it was.

    Args:
      path: a local path, or a URL when ``opener`` opens it.
      opener: as :func:`file_facts`' (default: local regular files only).
      stamp: what tells a changed file (a remote file's: what its store's listing says of
        it); default the local file's size and modification time in ns (``os.stat``).
        Never raises (as :func:`file_facts`), unless ``opener`` raises other than OSError.
    """
    if stamp is None:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return KinetoFileFacts()
        stamp = (st.st_size, st.st_mtime_ns)
    key = (path,) + tuple(stamp)
    hit = _facts_cache.get(key)
    if hit is None:
        if len(_facts_cache) >= _FACTS_CACHE_MAX:
            _facts_cache.clear()
        hit = _facts_cache[key] = file_facts(path, opener)
    return hit


def remote_facts(fs, listing: Dict[str, Dict]):
    """``facts(url)`` of files in a remote store, for :func:`kineto_groups`: each file's
    :class:`KinetoFileFacts` read through ``fs`` (an fsspec file system; a plain file at its two
    ends in blocks of :data:`FACTS_HEAD_BYTES`, not the store's default, 50 MiB for s3fs), kept
    while what the store's ``listing`` (path without the scheme -> fsspec ``info``) says of the
    file stays the same. ``facts`` raises what the store's client raises other than OSError."""

    def opener(url: str, mode: str = "rb"):
        path = url.split("://", 1)[1]
        return fs.open(path, mode) if path.endswith(".gz") else fs.open(path, mode, block_size=FACTS_HEAD_BYTES)

    def facts(url: str) -> KinetoFileFacts:
        info = listing.get(url.split("://", 1)[1]) or {}
        stamp = tuple(sorted((str(k), str(v)) for k, v in info.items() if k != "name"))
        return cached_file_facts(url, opener, stamp=stamp) if stamp else file_facts(url, opener)

    return facts


#: How far apart (ns) the windows of two files that both name their rank (``distributedInfo``)
#: may be and still be one job: ranks on different machines compare different clocks (our
#: choice, as :data:`tfbneck_plugin.analysis.grouping.CLOCK_TOLERANCE_S` for TensorFlow jobs:
#: NTP keeps machines within milliseconds). Files without a rank must overlap exactly.
RANK_CLOCK_TOLERANCE_NS = 2e9


def one_job(a: Tuple[str, KinetoFileFacts], b: Tuple[str, KinetoFileFacts]) -> bool:
    """Whether two Kineto files (``(worker, facts)``) may be two processes of one job: other
    workers (one worker's files are its profiling cycles), other ranks of the same world size
    where both say, and windows that overlap (within :data:`RANK_CLOCK_TOLERANCE_NS` when both
    name their rank). A file whose window is unknown joins another only when both name
    different ranks of the same world size."""
    (wa, fa), (wb, fb) = a, b
    if wa == wb:
        return False
    ranked = fa.rank is not None and fb.rank is not None
    if ranked and fa.rank == fb.rank:
        return False
    if fa.world_size is not None and fb.world_size is not None and fa.world_size != fb.world_size:
        return False
    if fa.window_ns is None or fb.window_ns is None:
        return ranked and fa.world_size is not None and fa.world_size == fb.world_size
    slack = RANK_CLOCK_TOLERANCE_NS if ranked else 0.0
    return fa.window_ns[0] <= fb.window_ns[1] + slack and fb.window_ns[0] <= fa.window_ns[1] + slack


def kineto_groups(paths: List[str], facts=None) -> List[List[str]]:
    """The Kineto files of one folder (``paths``, in the order the hosts are listed) split
    into sessions, each a list of files (the hosts, in that order), sessions ordered by their
    earliest window.

    Files are hosts of one job only when the traces say so (:func:`one_job`): different
    ranks in ``distributedInfo``, and/or overlapping windows; so a script re-run into the same
    folder (new pid, no ``distributedInfo``, a later window) and each profiling cycle of one
    process (``schedule(repeat=N)``: one file per cycle, one worker) are sessions of their
    own, and the cycles of a job's ranks pair by time. A file joins the first session, in
    window order, with every file of which it may be one job. ``facts``: path ->
    :class:`KinetoFileFacts` (default :func:`cached_file_facts`; read only when there is
    something to decide: several workers)."""
    facts = facts or cached_file_facts
    files = list(paths)
    workers = [name_parts(p)[0] for p in files]
    if len(files) <= 1:
        return [files] if files else []
    if len(set(workers)) == 1:  # one process: each file a cycle
        return [[f] for _, f in sorted(enumerate(files), key=lambda x: (name_parts(x[1])[1] or 0, x[0]))]
    known = [(w, facts(p)) for w, p in zip(workers, files)]
    order = sorted(range(len(files)), key=lambda i: (known[i][1].window_ns is None,
                                                      (known[i][1].window_ns or (0.0,))[0], i))
    groups: List[List[int]] = []
    for i in order:
        for g in groups:
            if all(one_job(known[i], known[j]) for j in g):
                g.append(i)
                break
        else:
            groups.append([i])
    return [[files[i] for i in sorted(g)] for g in groups]


def split_sessions(paths: List[str], label: str, facts=None, problems: Optional[List[str]] = None,
                   size_of: Optional[Callable[[str], Optional[int]]] = None,
                   given: bool = False) -> List[Tuple[str, List[str]]]:
    """A folder's Kineto files (``paths``, in the order hosts are listed) as sessions, each
    ``(name, files)``: :func:`kineto_groups`' split (``facts`` as it takes them) of the files
    :func:`without_cut_short` keeps (``problems``, ``size_of``, ``given`` as it takes them).
    A folder that holds one session of several files names it ``label`` (the folder's name);
    every other session is named after its first file, less the suffix (``<worker>.<time>``,
    the name the handler gave it), which tells one worker's cycles and re-runs apart and points
    at the file."""
    groups = kineto_groups(without_cut_short(paths, facts, size_of, problems, given), facts)
    return [(label if len(groups) == 1 and len(files) > 1 else worker_name(files[0]), files) for files in groups]
