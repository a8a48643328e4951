"""A persistent cache of session reports, shared by the CLI, the Python API, the Beam
pipeline's local runner and the TensorBoard tab, so that a second look at the same
sessions reads JSON instead of traces. No TensorFlow here.

Where: ``$TFBNECK_CACHE_DIR`` if set, else the user cache directory (``platformdirs``
when installed; else the XDG Base Directory rule: ``$XDG_CACHE_HOME``, default
``~/.cache``) plus ``tfbneck/reports``. Never inside a logdir: the cache never writes
beside a user's traces.

Key: SHA-256 of the analyzer's version (``tfbneck_plugin.__version__`` plus a stamp of
the analyzer's own source files, so that a changed analyzer never reads an old report),
the session's folder and run name as given, and (path, size, modification time) of
every file the analysis reads (:func:`fingerprint`; for fsspec URLs the size and the
time or version the store reports). A changed file is a new key.

Safe with several processes at once: an entry is written to a temporary file in its
final folder and renamed over (``os.replace`` is atomic on POSIX and Windows), so a
reader sees a whole entry or none; an entry that does not parse is a miss. Bounded:
:func:`trim` drops the least recently used entries (hits refresh the file's time)
beyond ``$TFBNECK_CACHE_MAX_MB`` (default :data:`DEFAULT_MAX_MB`).

Only reports with ``status: ok`` are kept: an error may be transient (unreachable
store, out of memory, a file still being written) and is analysed again next time.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple, cast

from .version import __version__
from .logdir import Session, is_remote
from .schema import SessionDict
from .summary import SUMMARY_FORMAT, summarize

CACHE_DIR_ENV = "TFBNECK_CACHE_DIR"
MAX_MB_ENV = "TFBNECK_CACHE_MAX_MB"
#: Default bound of the cache (MiB); a report is 5-60 kB, so about 10,000-50,000 reports.
DEFAULT_MAX_MB = 512
#: Format of an entry; bumped when the entry's layout changes.
ENTRY_FORMAT = 1
#: A hit refreshes the entry's modification time (its age for :func:`trim`) when older than this (s).
TOUCH_AFTER_S = 3600.0
#: Suffix of an entry's fleet summary, beside the report (``<key>.json``).
SUMMARY_SUFFIX = ".sum.json"
#: Report fields that name the session as it was found, rewritten on every hit.
_IDENTITY_KEYS = ("run", "session", "path")
#: Names under which fsspec stores report a file's modification time or version (local,
#: s3fs, gcsfs, adlfs, memory...), tried in order.
STAMP_KEYS = ("mtime", "LastModified", "updated", "last_modified", "generation", "ETag", "etag", "created")

#: A process trims the cache after this many new entries (besides the CLI's trim at the end).
TRIM_EVERY = 500

_analyzer_stamp: Optional[str] = None
_puts = 0


#: Entries larger than this are not read (a report with its top-ops table is ~100-400 KB).
MAX_ENTRY_BYTES = 16 * 2**20


def cache_dir() -> str:
    """The folder of the report cache (created on first write)."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    try:
        import platformdirs
        base = platformdirs.user_cache_dir("tfbneck", appauthor=False)
    except ImportError:  # the XDG Base Directory rule, which platformdirs follows on Linux
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.path.join(xdg if xdg and os.path.isabs(xdg) else os.path.expanduser("~/.cache"), "tfbneck")
    return os.path.join(base, "reports")


def max_bytes() -> int:
    """The cache's bound in bytes (``$TFBNECK_CACHE_MAX_MB``, default :data:`DEFAULT_MAX_MB`)."""
    try:
        mb = float(os.environ.get(MAX_MB_ENV, DEFAULT_MAX_MB))
    except ValueError:
        mb = DEFAULT_MAX_MB
    if not math.isfinite(mb):  # nan, inf: not a bound
        mb = DEFAULT_MAX_MB
    return int(max(mb, 0.0) * 2**20)


#: What a report depends on besides its files: the analysis and trace-reading packages and
#: the top-level modules they read (records, logdir, causes, errors, schema, version).
ANALYZER_PARTS = ("analysis", "trace", "causes.py", "errors.py", "logdir.py", "records.py", "schema.py",
                  "version.py", "__init__.py", "system/triage.py", "summary.py")


def analyzer_version() -> str:
    """``__version__`` plus a stamp of the analyzer's source (names, sizes, mtimes of the
    ``.py`` and ``.c`` files of :data:`ANALYZER_PARTS`): a development checkout whose
    analyzer changed never reads a report its old code made, while edits elsewhere (the
    CLI, the tab) keep the cache. The built extension (``.so``/``.pyd``) is not stamped: it
    gives the same results as the numpy path it speeds up, and rebuilding it from the same
    ``.c`` (another environment's install of the same checkout) must not orphan the cache.
    Computed once per process (~1 ms)."""
    global _analyzer_stamp
    if _analyzer_stamp is None:
        root = os.path.dirname(os.path.abspath(__file__))
        h = hashlib.sha256()
        for part in ANALYZER_PARTS:
            full = os.path.join(root, part)
            files = [full] if os.path.isfile(full) else sorted(
                os.path.join(folder, n) for folder, dirs, names in os.walk(full) for n in names
                if "__pycache__" not in folder)
            for path in files:
                if path.endswith((".py", ".c")):
                    st = os.stat(path)
                    h.update(f"{os.path.relpath(path, root)}:{st.st_size}:{st.st_mtime_ns};".encode())
        _analyzer_stamp = f"{__version__}+{h.hexdigest()[:16]}"
    return _analyzer_stamp


def fingerprint(session: Session) -> Tuple[object, ...]:
    """What a session's report depends on, as a tuple.

    Returns:
      its folder, whether it is an incomplete window, and (path, size in bytes,
      modification time) of every file the analysis reads, sorted by path. Local files:
      mtime in ns (``os.stat``); remote ones (fsspec URLs): the time or version the store
      reports. A file that cannot be stat'ed appears with size and mtime -1.
    """
    paths = list(session.files) + list(session.legacy_files)
    paths += [p for p in (session.sidecar, session.skipped, session.system_record) if p]
    out: list = [session.path, bool(session.incomplete)]
    for p in sorted(paths):
        try:
            out.append((p,) + (remote_stat(p) if is_remote(p) else _local_stat(p)))
        except (OSError, ValueError):
            out.append((p, -1, -1))
    return tuple(out)


def _local_stat(path: str) -> Tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def remote_stat(url: str) -> Tuple[int, str]:
    """(size in bytes, the time or version the store reports) of a file at an fsspec URL.
    Raises OSError when the store cannot say."""
    from . import remote  # only for remote logdirs: the same limits and endpoint as discovery
    try:
        fs, path = remote.filesystem(url)
        info = fs.info(path)
    except Exception as err:  # credentials, network: the file is re-analysed once it can be stat'ed
        raise OSError(f"{url}: {type(err).__name__}") from None
    stamp = next((info[k] for k in STAMP_KEYS if info.get(k) is not None), None)
    return int(info.get("size") or 0), str(stamp)


def key_of(session: Session, fp: Optional[Tuple[object, ...]] = None) -> Optional[str]:
    """The entry name of a session's report (hex SHA-256), or None when it must not be
    cached: an incomplete window, or a file whose size or time cannot be read. ``fp``: the
    session's :func:`fingerprint` when the caller has it already."""
    fp = fingerprint(session) if fp is None else fp
    if session.incomplete or any(isinstance(x, tuple) and x[1] == -1 for x in fp):
        return None
    # repr of str, int and bool tuples is stable across runs and 5x cheaper than JSON here.
    text = repr((ENTRY_FORMAT, analyzer_version(), session.run, session.name, fp))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _entry_path(key: str, suffix: str = "") -> str:
    return os.path.join(cache_dir(), key[:2], key + (suffix or ".json"))


def get(session: Session, key: Optional[str] = None) -> Optional[Dict]:
    """The cached report of ``session``, or None (no entry, or one that does not parse)."""
    return _read_entry(session, key or key_of(session), "", "report")


def _read_entry(session: Session, key: Optional[str], suffix: str, field: str) -> Optional[Dict]:
    if key is None:
        return None
    path = _entry_path(key, suffix)
    try:
        # Only a regular file of bounded size is an entry: a pipe would block the read and a
        # link to a device would never end; both are a miss.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
                return None
            entry = json.loads(f.read(MAX_ENTRY_BYTES + 1).decode("utf-8", "surrogateescape"))
        value = entry[field] if entry.get("format") == ENTRY_FORMAT and entry.get("key") == key else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(value, dict):
        return None
    _touch(path)
    for k in _IDENTITY_KEYS:  # the same files found under another spelling of the path
        value[k] = getattr(session, "name" if k == "session" else k)
    return value


def get_summary(session: Session, key: Optional[str] = None) -> Optional[Dict]:
    """The cached fleet summary of ``session`` (:mod:`tfbneck_plugin.summary`), or None."""
    value = _read_entry(session, key or key_of(session), SUMMARY_SUFFIX, "summary")
    return value if value is not None and value.get("format") == SUMMARY_FORMAT else None


def _touch(path: str) -> None:
    try:
        if time.time() - os.stat(path).st_mtime > TOUCH_AFTER_S:
            os.utime(path)
    except OSError:
        pass


def put(session: Session, report: Mapping[str, Any], key: Optional[str] = None) -> bool:
    """Store ``report`` (only a ``status: ok`` one) and its fleet summary
    (:func:`tfbneck_plugin.summary.summarize`); True when written. Never raises: a cache
    that cannot be written (read-only home, disk full) only costs the next run time."""
    key = key or key_of(session)
    if key is None or not isinstance(report, dict) or report.get("status") != "ok":
        return False
    # The summary first: a reader that finds the report finds its summary too, or makes it.
    written = (_write_entry(_entry_path(key, SUMMARY_SUFFIX), key, "summary", summarize(report))
               and _write_entry(_entry_path(key), key, "report", report))
    global _puts
    _puts += 1
    if _puts % TRIM_EVERY == 0:  # a long-lived writer (the tab, a Beam worker) stays bounded too
        trim()
    return written


def _write_entry(final: str, key: str, field: str, value: Mapping[str, Any]) -> bool:
    folder = os.path.dirname(final)
    try:
        os.makedirs(folder, exist_ok=True)
        data = json.dumps({"format": ENTRY_FORMAT, "key": key, field: value}).encode("utf-8", "surrogateescape")
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    except (OSError, TypeError, ValueError):
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, final)  # atomic: a reader sees the old entry, the new one, or none
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def cached_analyze(session: Session, use_cache: bool = True) -> SessionDict:
    """``analysis.session.analyze_session(session)``, read from the cache when a report of
    the same files by the same analyzer is there, and stored there otherwise. Never raises
    for bad input (as ``analyze_session``)."""
    from .analysis.session import analyze_session
    if not use_cache:
        return analyze_session(session)
    key = key_of(session)
    hit = get(session, key) if key else None
    if hit is not None:
        return cast(SessionDict, hit)
    report = analyze_session(session)
    if key:
        put(session, report, key)
    return report


def cached_summary(session: Session, use_cache: bool = True) -> Dict:
    """The fleet summary of ``session``: the cached one when there is one (a few hundred
    bytes to read), else from the cached report, else from a new analysis (then cached)."""
    if use_cache:
        key = key_of(session)
        hit = get_summary(session, key) if key else None
        if hit is not None:
            return hit
    return summarize(cached_analyze(session, use_cache))


def _entries(folder: str) -> List[Tuple[float, int, str]]:
    out: List[Tuple[float, int, str]] = []
    try:
        subdirs = [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return out
    for sub in subdirs:
        try:
            for e in os.scandir(sub):
                if e.name.endswith(".json") and e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    out.append((st.st_mtime, st.st_size, e.path))
        except OSError:
            continue
    return out


def trim(limit_bytes: Optional[int] = None) -> Dict[str, int]:
    """Drop the least recently used entries until the cache holds at most ``limit_bytes``
    (default :func:`max_bytes`); temporary files of writers that died over an hour ago go
    too. Never raises. Returns ``{"entries", "bytes", "removed"}`` after trimming."""
    limit = max_bytes() if limit_bytes is None else limit_bytes
    entries = _entries(cache_dir())
    removed, now = 0, time.time()
    kept = []
    for mtime, size, path in entries:
        if os.path.basename(path).startswith(".tmp-") and now - mtime > 3600:
            removed += _remove(path)
        elif not os.path.basename(path).startswith(".tmp-"):
            kept.append((mtime, size, path))
    total = sum(size for _, size, _ in kept)
    kept.sort()  # oldest first
    i = 0
    while total > limit and i < len(kept):
        if _remove(kept[i][2]):
            total -= kept[i][1]
            removed += 1
        i += 1
    return {"entries": len(kept) - i, "bytes": total, "removed": removed}


def _remove(path: str) -> int:
    try:
        os.unlink(path)
        return 1
    except OSError:  # another process removed it first
        return 0


def clear() -> int:
    """Remove every entry; returns how many were removed."""
    return sum(_remove(p) for _, _, p in _entries(cache_dir()))
