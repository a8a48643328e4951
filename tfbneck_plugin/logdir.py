"""Finding profiling sessions under a path.

Layout written by the profiler (``tf.profiler.experimental.start(logdir)``, Keras'
``TensorBoard(profile_batch=...)``, XProf)::

    <run>/plugins/profile/<session>/<host>.xplane.pb     (TF >= 2.2; .xplane.pb.gz also read)
    <run>/plugins/profile/<session>/<host>.trace.json.gz (TF <= 2.10 also wrote per-tool files)

Keras 3 puts ``<run>`` at ``<log_dir>/train``; tf-keras at ``<log_dir>`` itself. The run
name is the path of ``<run>`` relative to the path given (``.`` for the path itself), as
TensorBoard names runs. All ``.xplane.pb`` files of one session folder (one per host) form
one session.

``BottleneckProfiler`` records each window in ``<log_dir>/.tfbneck-staging/<pid>-<n>-<id>/``
and moves the finished session into ``plugins/profile/``. A folder left in the staging area
by a process that is gone (killed or crashed inside the window) is reported as one session
with ``incomplete=True`` (the analyzer gives it ``status: error``); the partial files in it
are never read as a trace. While the process that owns it still runs on this host, the
window is being recorded and is not listed.

PyTorch's profiler (``torch.profiler.tensorboard_trace_handler(dir)``) writes one Kineto
trace per process straight into ``dir``: ``<dir>/<worker>.<time>.pt.trace.json[.gz]``.
Every folder at any depth that holds such files is a run (``dir`` relative to the path
given); its files are split into sessions by :func:`kineto_groups`: the ranks of one job
(different ranks in ``distributedInfo``, and/or overlapping windows) are one session, one
host each; each profiling cycle of one worker and each re-run of a script is a session.

A system record (``tfbneck watch --output FILE``, or ``<run>/plugins/bottleneck/system_*.json``
of a run with no profiled session) is a system-only session: ``Session.system_record``,
no trace files; its report is the triage of the system metrics (:mod:`tfbneck_plugin.analysis.system_session`).

Errors: :class:`DiscoveryError` (one line) when the path does not exist or holds no
session. Unreadable folders below it are reported in ``Discovery.problems`` and skipped.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .trace.kineto import KINETO_SUFFIXES, is_kineto_file, looks_like_kineto
from .trace.kineto_files import name_parts, remote_facts, split_sessions
from .records import SIDECAR_NAME, SKIPPED_NAME, STAGING_DIR, STEP_TIMES_DIR, SYSTEM_RUN_FORMAT, read_skip_record
from .errors import TfbneckError

XPLANE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz")
# Per-tool files that TensorFlow <= 2.10 wrote beside (or instead of) the XSpace.
LEGACY_SUFFIXES = (".trace.json.gz", ".overview_page.pb", ".input_pipeline.pb",
                   ".tensorflow_stats.pb", ".kernel_stats.pb", ".memory_profile.json.gz")


#: Session folders named by the profiler's clock, e.g. ``2021_02_02_13_14_02``
#: (``tensorflow/python/profiler/profiler_v2.py`` names them with ``%Y_%m_%d_%H_%M_%S``).
SESSION_TIME_RE = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})")


def session_folder_time(name: str) -> Optional[float]:
    """The time a session folder is named after (unix s; the profiler's local time, to the
    second), or None when the name is not such a time."""
    m = SESSION_TIME_RE.match(name)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    try:
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


class DiscoveryError(TfbneckError):
    """The given path cannot be searched for sessions; the message is one line.

    ``cause``: for remote storage, a key of :data:`tfbneck_plugin.remote.CAUSES`
    (``no_credentials``, ``host_unreachable``, ``bucket_missing``, ``permission_denied``,
    ``timeout``...); None for local paths. ``kind``: the ``error_kind`` for reports and the
    TensorBoard tab (``not_found`` or ``unreachable``; None for local paths)."""

    def __init__(self, message: str, cause: Optional[str] = None):
        super().__init__(message)
        self.cause = cause
        self.kind = None if cause is None else "not_found" if cause in ("not_found", "bucket_missing") \
            else "unreachable"


@dataclass
class Session:
    """One profiling session: a folder ``<run>/plugins/profile/<name>/``.

    ``files``: the host traces (``.xplane.pb``), sorted by name; ``legacy_files``: old
    per-tool files; ``run``: run path relative to the searched root. ``incomplete``: a
    window left in BottleneckProfiler's staging area by a process that stopped inside it
    (``skipped`` is then the record the callback wrote when the window opened, if any).
    """
    run: str
    name: str
    path: str
    files: List[str] = field(default_factory=list)
    legacy_files: List[str] = field(default_factory=list)
    sidecar: Optional[str] = None
    skipped: Optional[str] = None
    incomplete: bool = False
    #: A system-only session: the system record it is (``tfbneck watch --output``, or the
    #: callback's whole-run record of a run without a profiled window); no trace files.
    system_record: Optional[str] = None

    @property
    def hosts(self) -> List[str]:
        from .trace.tracefile import host_name_from_file
        return [host_name_from_file(f) for f in self.files]

    @property
    def key(self) -> Tuple[str, str]:
        return (self.run, self.name)


@dataclass
class Discovery:
    sessions: List[Session]
    problems: List[str]


def _session_from_dir(session_dir: str, run: str) -> Optional[Session]:
    try:
        names = sorted(os.listdir(session_dir))
    except OSError:
        return None
    s = Session(run=run, name=os.path.basename(os.path.normpath(session_dir)), path=session_dir)
    present = set(names)
    for n in names:
        _add_file(s, n, os.path.join(session_dir, n), present)
    if not (s.files or s.legacy_files or s.skipped):
        return None
    return s


def _staging_session(window_dir: str, run: str) -> Optional[Session]:
    """A window folder in ``<log_dir>/.tfbneck-staging/``, as an incomplete session; None
    while its process still runs on this host (the window is being recorded)."""
    if _is_link(window_dir) or not os.path.isdir(window_dir):
        return None
    found = os.path.join(window_dir, SKIPPED_NAME)
    record = found if os.path.isfile(found) else None
    if _owner_alive(window_dir, record):
        return None
    return Session(run=run, name=os.path.basename(os.path.normpath(window_dir)), path=window_dir,
                   skipped=record, incomplete=True)


def _owner_alive(window_dir: str, record: Optional[str]) -> bool:
    """Whether the process that opened this staging window (pid and host from its record,
    else the pid its folder name starts with) is running on this host."""
    host = pid = None
    if record:
        rec = read_skip_record(record, open_any)
        host, pid = rec.host, rec.pid
    if pid is None:
        head = os.path.basename(os.path.normpath(window_dir)).split("-", 1)[0]
        pid = int(head) if head.isdigit() else None
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    if host is not None and host != socket.gethostname():
        return False  # another machine's process: cannot tell, report the folder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists (another user's process)
        return True
    return True


def _add_file(s: Session, name: str, full: str, siblings) -> None:
    """File ``name`` (path ``full``) of session folder ``s``, by kind. ``siblings``: the
    folder's file names; a ``.gz`` twin of a plain trace is the same host, so only the
    plain one is kept."""
    if name.endswith(XPLANE_SUFFIXES) or name.endswith(KINETO_SUFFIXES):
        if not (name.endswith(".gz") and name[:-3] in siblings):
            s.files.append(full)
    elif name.endswith(LEGACY_SUFFIXES):
        s.legacy_files.append(full)
    elif name == SIDECAR_NAME:
        s.sidecar = full
    elif name == SKIPPED_NAME:
        s.skipped = full


def _relrun(root: str, run_dir: str) -> str:
    rel = os.path.relpath(run_dir, root)
    return "." if rel in (".", "") else rel.replace(os.sep, "/")


def find_sessions(path: str) -> Discovery:
    """Sessions under ``path`` (a logdir at any depth, a session folder, or one trace file).

    ``path`` may be a URL that fsspec understands (``gs://``, ``s3://``, ``memory://``...;
    gcsfs / s3fs provide the cloud ones). Sessions are sorted by (run, session name).
    Symlinked folders are not followed (a link loop cannot hang the search); unreadable
    folders are listed in ``problems``. Raises DiscoveryError when ``path`` does not exist
    or cannot be listed (unknown URL scheme, no credentials, host unreachable, bucket
    missing, permission denied); for a URL, within ``remote.timeout_s()`` seconds (default
    10, ``TFBNECK_REMOTE_TIMEOUT``) even when the store does not answer.
    """
    if is_remote(path):
        return _find_remote(path)
    if not os.path.exists(path):
        raise DiscoveryError(f"{path}: {_stat_problem(path)}")
    path = os.path.normpath(path)
    problems: List[str] = []
    if os.path.isfile(path):
        return Discovery([_file_session(path)], problems)

    # A staging window folder given directly.
    if os.path.basename(os.path.dirname(os.path.abspath(path))) == STAGING_DIR:
        s = _staging_session(path, os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(path)))) or ".")
        return Discovery([s] if s else [], problems)

    # A session folder given directly.
    run_dir = _run_dir_of(path)
    if run_dir is not None:
        s = _session_from_dir(path, os.path.basename(run_dir) or ".")
        return Discovery([s] if s else [], problems if s else [_why_no_session(path)])

    sessions: List[Session] = []
    system_records: List[Tuple[Session, bool]] = []  # (session, written by the callback)

    def onerror(err: OSError):
        problems.append(f"{err.filename}: cannot list folder ({err.strerror})")

    for dirpath, dirnames, filenames in os.walk(path, onerror=onerror, followlinks=False):
        dirnames.sort()
        system_records.extend(_system_records_in(path, dirpath, filenames, problems))
        if os.path.basename(dirpath) == STAGING_DIR:
            # Windows that never finished: one incomplete session each, partial files unread.
            run = _relrun(path, os.path.dirname(dirpath))
            for d in dirnames:
                s = _staging_session(os.path.join(dirpath, d), run)
                if s is not None:
                    sessions.append(s)
            dirnames[:] = []
            continue
        kineto = [n for n in filenames if n.endswith(KINETO_SUFFIXES)]
        if kineto:
            sessions.extend(kineto_sessions(dirpath, _relrun(path, dirpath), kineto, problems=problems))
        if os.path.basename(dirpath) == "profile" and os.path.basename(os.path.dirname(dirpath)) == "plugins":
            run = _relrun(path, os.path.dirname(os.path.dirname(dirpath)))
            for d in list(dirnames):
                full = os.path.join(dirpath, d)
                if _is_link(full):
                    problems.append(f"{full}: symbolic link, not followed (to analyse the session it "
                                    "points to, give that folder as PATH)")
                    continue
                s = _session_from_dir(full, run)
                if s is not None:
                    sessions.append(s)
                else:
                    problems.append(_why_no_session(full))
            dirnames[:] = []  # sessions do not nest
    # The callback's whole-run record is its run's trend (the tab draws it beside the step
    # time); it stands as a session of its own only for a run that has no profiled one.
    profiled_runs = {s.run for s in sessions}
    sessions.extend(s for s, by_callback in system_records if not (by_callback and s.run in profiled_runs))
    sessions.sort(key=session_order)
    return Discovery(sessions, problems)


#: How a system record file begins as tfbneck writes it (``json.dump``, ``format`` first): a
#: folder's ``.json`` files are told apart by their first bytes, not read whole.
SYSTEM_RECORD_HEAD = ('{"format": "%s"' % SYSTEM_RUN_FORMAT).encode()


def _head(path: str) -> bytes:
    """The first bytes of the regular file ``path`` (b"" for links and special files: a FIFO
    would block). Raises OSError when it cannot be read."""
    if not stat.S_ISREG(os.lstat(path).st_mode):
        return b""
    with open(path, "rb") as f:
        return f.read(len(SYSTEM_RECORD_HEAD))


def _system_session(path: str, run: str) -> Session:
    return Session(run=run, name=os.path.basename(path), path=path, system_record=path)


def _system_records_in(root: str, dirpath: str, filenames: List[str],
                       problems: List[str]) -> List[Tuple[Session, bool]]:
    """The system records among a folder's files, each as (system-only session, written by
    the callback): the callback's sit in ``<run>/plugins/bottleneck/`` and belong to
    ``<run>``; any other (``tfbneck watch --output``) belongs to the folder that holds it.
    A ``.json`` file that cannot be read is listed in ``problems`` (it may be one)."""
    out = []
    by_callback = dirpath.replace(os.sep, "/").endswith("/" + STEP_TIMES_DIR.replace(os.sep, "/"))
    run_dir = os.path.dirname(os.path.dirname(dirpath)) if by_callback else dirpath
    for name in sorted(filenames):
        if not name.endswith(".json"):
            continue
        full = os.path.join(dirpath, name)
        try:
            head = _head(full)
        except (OSError, ValueError) as err:
            problems.append(f"{full}: cannot read ({getattr(err, 'strerror', None) or err}): if it is a system "
                            "record, it is left out")
            continue
        if head == SYSTEM_RECORD_HEAD:
            out.append((_system_session(full, _relrun(root, run_dir)), by_callback))
    return out


def kineto_sessions(folder: str, run: str, names: List[str], facts=None, problems: Optional[List[str]] = None,
                    size_of=None, given: bool = False) -> List[Session]:
    """The sessions of a folder's Kineto traces (``names``: file names in ``folder``, a local path
    or an fsspec URL), split and named by :func:`.trace.kineto_files.split_sessions` (``facts``,
    ``size_of``: as it takes them; a remote folder's facts: ``remote_facts``). A ``.gz`` twin of a
    plain file is the same trace; the plain one is kept. A file of step markers only is no session:
    its one-line reason goes to ``problems``, or is raised (DiscoveryError) for the file ``given``."""
    present = set(names)
    remote = is_remote(folder)
    folder = folder.rstrip("/") if remote else folder
    kept = [(f"{folder}/{n}" if remote else os.path.join(folder, n)) for n in sorted(names, key=natural_key)
            if not (n.endswith(".gz") and n[:-3] in present)]
    label = folder.rsplit("/", 1)[-1] if remote else os.path.basename(os.path.normpath(folder))
    left_out: List[str] = []
    groups = split_sessions(kept, label, facts, left_out, size_of, given)
    if given and left_out:
        raise DiscoveryError(left_out[0])
    (problems if problems is not None else []).extend(left_out)
    return [Session(run=run, name=name, path=folder, files=files) for name, files in groups]


def session_identity(s: Session) -> Tuple[str, ...]:
    """What tells two sessions found under overlapping PATHs apart: the folder (links
    resolved), and for a folder's Kineto traces, which hold several sessions side by side,
    their files too."""
    folder = s.path if is_remote(s.path) else os.path.realpath(s.path)
    if is_kineto_session(s):
        return (folder,) + tuple(sorted(os.path.basename(f) for f in s.files))
    return (folder,)


def is_kineto_session(s: Session) -> bool:
    """Whether ``s`` is PyTorch profiler traces (:func:`.trace.kineto.is_kineto_file`)."""
    return bool(s.files) and all(is_kineto_file(f) for f in s.files)


def kineto_session_time(s: Session) -> Optional[float]:
    """When a Kineto session was written (unix s): the latest time its files' names carry
    (the handler's ``time.time_ns()`` when it wrote each file, the end of its window); None
    for other sessions, or names without that time."""
    if not is_kineto_session(s):
        return None
    times = [t for t in (name_parts(f)[1] for f in s.files) if t is not None]
    return max(times) / 1e9 if times else None


def _file_session(path: str) -> Session:
    """The session of one file given as PATH: a trace (its session folder's, that file only)
    or a system record. Raises DiscoveryError for anything else, or a file that cannot be read."""
    if path.endswith(".json"):
        try:
            head = _head(path)
        except OSError as err:
            raise DiscoveryError(f"{path}: cannot read ({err.strerror or err})") from None
        if head == SYSTEM_RECORD_HEAD:
            return _system_session(path, folder_label(os.path.dirname(os.path.abspath(path))))
    if path.endswith(KINETO_SUFFIXES) or looks_like_kineto(path):  # a PyTorch trace saved by export_chrome_trace too
        folder = os.path.dirname(os.path.abspath(path))
        return kineto_sessions(folder, folder_label(folder), [os.path.basename(path)], given=True)[0]
    if not path.endswith(XPLANE_SUFFIXES):
        raise DiscoveryError(f"{path}: neither an .xplane.pb trace file, a PyTorch profiler trace (.pt.trace.json) "
                             "nor a tfbneck system record (tfbneck watch --output)")
    session_dir = os.path.dirname(os.path.abspath(path))
    run_dir = _run_dir_of(session_dir)
    return Session(run=os.path.basename(run_dir) if run_dir else ".", name=os.path.basename(session_dir),
                   path=session_dir, files=[path])


def natural_key(text: str) -> Tuple:
    """Sort key that orders digit runs by value, as people number runs: exp2 before exp10."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part)


def session_order(s: Session) -> Tuple:
    """The order sessions are listed in everywhere: by run, then session name, naturally."""
    return (natural_key(s.run), natural_key(s.name))


def folder_label(path: str) -> str:
    """The name a PATH's own folder gives its runs: its last component (``logs/exp1`` ->
    ``exp1``; ``.`` -> the current folder's name; ``gs://b/logs/`` -> ``logs``); a trace file
    outside the profile layout is named without its suffix (``mytrace.xplane.pb`` ->
    ``mytrace``, the host name its file name gives)."""
    if is_remote(path):
        label = path.split("://", 1)[1].rstrip("/").rsplit("/", 1)[-1] or path
    else:
        label = os.path.basename(os.path.abspath(path)) or os.path.abspath(path)
    for suffix in XPLANE_SUFFIXES + KINETO_SUFFIXES:
        if label.endswith(suffix) and len(label) > len(suffix):
            return label[:-len(suffix)]
    return label


def label_runs(path: str, sessions: List[Session], several: bool) -> List[Session]:
    """Sessions found under ``path`` with run names a reader can tell apart: the run that is
    ``path`` itself (``.``) takes the folder's own name (:func:`folder_label`), and when
    several PATHs were given, each run name starts with its PATH's folder name, so that
    ``tfbneck analyze logs/exp*`` names ``exp1/train`` and ``exp2/train`` rather than
    ``train`` twice. With one PATH, runs are named relative to it, as TensorBoard names them."""
    label = folder_label(path)
    prefix = several and not _inside_session(path)  # a session folder or file already names its run
    out = []
    for s in sessions:
        run = s.run
        if run == ".":
            run = label
        elif prefix and run != label and not run.startswith(label + "/"):
            run = f"{label}/{run}"
        out.append(s if run == s.run else dataclasses.replace(s, run=run))
    return out


def _inside_session(path: str) -> bool:
    """Whether ``path`` is a session folder, a file in one, or a staging window."""
    where = path.split("://", 1)[1] if is_remote(path) else os.path.abspath(path).replace(os.sep, "/")
    parts = where.rstrip("/").split("/")
    return STAGING_DIR in parts[:-1] or any(parts[i:i + 2] == ["plugins", "profile"] for i in range(len(parts) - 2))


def _stat_problem(path: str) -> str:
    """Why a path that does not exist for os.path.exists cannot be used, in words."""
    try:
        os.stat(path)
    except OSError as err:
        if err.strerror and err.errno != errno.ENOENT:  # e.g. a symbolic link loop, permission denied
            return err.strerror[0].lower() + err.strerror[1:]
    except ValueError:  # e.g. an embedded NUL
        pass
    return "no such file or directory"


def _why_no_session(folder: str) -> str:
    """Why ``folder`` under ``plugins/profile/`` is not a session, in one line."""
    try:
        os.listdir(folder)
    except OSError as err:
        return f"{folder}: cannot read session folder ({err.strerror})"
    return (f"{folder}: no trace in this session folder (no .xplane.pb): the profiler may still be "
            "writing it, or it stopped before saving one")


def _is_link(p: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(p).st_mode)
    except OSError:
        return False


def _run_dir_of(session_dir: str) -> Optional[str]:
    """For ``<run>/plugins/profile/<session>`` return ``<run>``, else None: whether a folder
    given as PATH is a session folder, and whose (the file system's absolute path). The run
    folder of a session already found is :func:`tfbneck_plugin.runs.run_dir_of`."""
    session_dir = os.path.abspath(session_dir)
    profile = os.path.dirname(session_dir)
    plugins = os.path.dirname(profile)
    if os.path.basename(profile) == "profile" and os.path.basename(plugins) == "plugins":
        return os.path.dirname(plugins)
    return None


# ----------------------------------------------------------------------------------------
# Remote logdirs (fsspec)
# ----------------------------------------------------------------------------------------

def is_remote(path: str) -> bool:
    """True for URLs with a scheme other than ``file://`` (read through fsspec)."""
    return "://" in str(path) and not str(path).startswith("file://")


def open_any(path: str, mode: str = "rb"):
    """Open a local path or an fsspec URL for reading (a URL with the per-request limits
    of :mod:`tfbneck_plugin.remote`).

    Raises OSError for a local path that is not a regular file: a FIFO would block the
    read forever and a device such as /dev/zero would never end."""
    if is_remote(path):
        from . import remote
        try:
            fs, p = remote.filesystem(path)
        except remote.RemoteError as err:
            raise OSError(errno.EIO, str(err), path) from None
        return fs.open(p, mode)
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", path)
    return open(path, mode)


def _list_remote(url: str):
    """``(fs, root, files)``: every file under ``url`` (or ``root`` alone when it is one file),
    as a dict path (without the scheme) -> what the store's listing says of it (fsspec's ``info``).

    Reaching the store, finding credentials and the first listing request share one time
    limit (``remote.timeout_s()``); the full listing that follows has per-request limits.
    Raises DiscoveryError with the cause."""
    from . import remote
    remote.quiet_library_loggers()
    limit = remote.timeout_s()
    host = remote.endpoint(url)
    at = f" {host[0]}:{host[1]}" if host else ""
    stage = [f"connecting to{at or ' the store'}"]
    state: Dict = {}

    def first_contact():
        remote.check_reachable(url, min(limit, 5.0))
        stage[0] = "looking for credentials"
        state["fs"], root = remote.filesystem(url)
        state["root"] = root = root.rstrip("/")
        stage[0] = f"listing{at and ' on' + at}"
        return state["fs"].ls(root, detail=False)

    try:
        try:
            remote.within(limit, url, stage, first_contact)
        except FileNotFoundError as err:  # a missing bucket is final; a missing key may be a file
            if remote.classify(url, err).cause == "bucket_missing":
                raise
        fs, root = state["fs"], state["root"]
        files = {root: fs.info(root)} if fs.isfile(root) else fs.find(root, detail=True)
    except Exception as err:  # credentials, permissions, network: say which, in one line
        fs = state.get("fs")
        e = remote.classify(url, err, anonymous=fs is not None and remote.is_anonymous(fs))
        raise DiscoveryError(str(e), e.cause) from None
    if not files:
        raise DiscoveryError(f"{url}: no such file or directory", "not_found")
    return fs, root, files


def _find_remote(url: str) -> Discovery:
    fs, root, files = _list_remote(url)
    scheme = url.split("://", 1)[0]
    # The URL may name a logdir, a session folder or one file: anchor run names on the
    # folder that holds plugins/, as for local paths.
    base = root
    parts = root.split("/")
    if f"/{STAGING_DIR}/" in f"/{root}/":  # a staging window (or a file in it) given directly
        base = root.split(f"/{STAGING_DIR}")[0].rsplit("/", 1)[0]
    elif len(parts) >= 3 and parts[-3:-1] == ["plugins", "profile"] or \
            (len(parts) >= 4 and parts[-4:-2] == ["plugins", "profile"] and fs.isfile(root)):
        base = root.split("/plugins/profile/")[0].rsplit("/", 1)[0]
    read = remote_facts(fs, files)

    def facts(url: str):
        try:
            return read(url)
        except Exception as err:  # a client's own error (file_facts keeps OSError): one line, as the listing's
            from . import remote
            e = remote.classify(url, err)
            raise DiscoveryError(str(e), e.cause) from None
    def size_of(url: str) -> Optional[int]:
        return (files.get(url.split("://", 1)[1]) or {}).get("size")
    problems: List[str] = []
    if list(files) == [root] and root.endswith(KINETO_SUFFIXES):  # one PyTorch trace given: as locally
        folder, name = f"{scheme}://{root}".rsplit("/", 1)
        return Discovery(kineto_sessions(folder, folder_label(folder), [name], facts, size_of=size_of, given=True), [])
    names = set(files)
    by_dir: Dict[str, Session] = {}
    kineto: Dict[str, List[str]] = {}  # folder -> its Kineto traces' names
    for f in sorted(files):
        session_dir, name = f.rsplit("/", 1)
        rel = session_dir[len(base):].strip("/").split("/") if session_dir.startswith(base) else []
        if STAGING_DIR in rel:  # a window that never finished: one incomplete session, files unread
            i = rel.index(STAGING_DIR)
            if i + 1 < len(rel):
                wdir = "/".join([base] + rel[:i + 2])
                s = by_dir.setdefault(wdir, Session(run="/".join(rel[:i]) or ".", name=rel[i + 1],
                                                    path=f"{scheme}://{wdir}", incomplete=True))
                if len(rel) == i + 2 and name == SKIPPED_NAME:
                    s.skipped = f"{scheme}://{f}"
            continue
        # PyTorch's traces make any folder a run but plugins/profile/<session>/ and below (as locally)
        if name.endswith(KINETO_SUFFIXES) and not any(rel[i:i + 2] == ["plugins", "profile"]
                                                      for i in range(len(rel) - 2)):
            kineto.setdefault(session_dir, []).append(name)
            continue
        if len(rel) < 3 or rel[-3:-1] != ["plugins", "profile"]:
            continue
        run = "/".join(rel[:-3]) or "."
        s = by_dir.setdefault(session_dir, Session(run=run, name=rel[-1], path=f"{scheme}://{session_dir}"))
        _add_file(s, name, f"{scheme}://{f}", {n.rsplit("/", 1)[-1] for n in names if n.startswith(session_dir + "/")}
                  if name.endswith(".gz") else ())
    sessions = [s for s in by_dir.values() if s.files or s.legacy_files or s.skipped or s.incomplete]
    for folder, kineto_names in kineto.items():
        rel = [part for part in folder[len(base):].split("/") if part] if folder.startswith(base) else []
        sessions.extend(kineto_sessions(f"{scheme}://{folder}", "/".join(rel) or ".", kineto_names, facts, problems,
                                        size_of))
    sessions.sort(key=session_order)
    return Discovery(sessions, problems)
