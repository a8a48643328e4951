"""Trace files: reading a ``.xplane.pb`` (or ``.xplane.pb.gz``) from a local or remote path
with its size limits, and decoding it into a :class:`.xspace.Space` (:func:`read_space`).
The XSpace schema and columns are :mod:`.xspace`'s, the decoder :mod:`.decoder`'s; this module
is the file I/O around them.

Errors: every failure to read a file raises :class:`.xspace.TraceReadError` whose message is
one line and names the file.
"""
from __future__ import annotations

import mmap
import os
import stat as statmod
import zlib
from typing import Optional

from ..errors import first_line
from .decoder import decode_space
from .xspace import Space, TraceReadError

#: Largest uncompressed trace read by default (bytes). Parsing holds the file plus its
#: parsed form (about 3x the file size, measured on a 65 MB Keras trace); 2 GiB is also
#: protobuf's hard limit for one message. Override with TFBNECK_MAX_TRACE_BYTES.
MAX_TRACE_BYTES = int(os.environ.get("TFBNECK_MAX_TRACE_BYTES", 2 * 1024 ** 3 - 1))



def read_bytes(path: str, opener=open) -> bytes:
    """Return the serialized XSpace in ``path`` (``.xplane.pb`` or ``.xplane.pb.gz``).

    ``opener`` opens a path for binary reading (``fsspec.open`` for remote paths).
    Raises TraceReadError when the file is missing, unreadable, empty, or too large, and
    (local paths) when it is not a regular file: a FIFO would block the read forever, a
    device such as /dev/zero would feed it without end.
    """
    st = _local_stat(path)
    if st is not None and not statmod.S_ISREG(st.st_mode):
        raise TraceReadError(path, f"not a regular file ({_file_kind(st.st_mode)}); it was not read", kind="unreadable")
    if st is not None and st.st_size > MAX_TRACE_BYTES:
        raise TraceReadError(path, f"larger than the {MAX_TRACE_BYTES} byte limit ({st.st_size} bytes; "
                                   "set TFBNECK_MAX_TRACE_BYTES to raise it)", kind="too_large")
    try:
        with opener(path, "rb") as f:
            data = _read_capped(f, MAX_TRACE_BYTES + 1, st.st_size if st is not None else getattr(f, "size", None))
    except OSError as err:
        raise TraceReadError(path, f"cannot read file ({err.strerror or err})", kind="unreadable") from None
    except Exception as err:  # remote file systems raise their own errors (credentials...)
        raise TraceReadError(path, f"cannot read file ({type(err).__name__}: {first_line(err)})",
                             kind="unreadable") from None
    if len(data) > MAX_TRACE_BYTES:
        raise TraceReadError(path, f"larger than the {MAX_TRACE_BYTES} byte limit "
                                   "(set TFBNECK_MAX_TRACE_BYTES to raise it)", kind="too_large")
    if str(path).endswith(".gz"):
        try:
            inflated = _gunzip(data, MAX_TRACE_BYTES)
        except (OSError, EOFError, zlib.error) as err:
            raise TraceReadError(path, f"not a valid gzip file ({err})") from None
        if inflated is None:  # never inflated past the limit: a small file can expand to terabytes
            raise TraceReadError(path, f"decompresses to more than the {MAX_TRACE_BYTES} byte limit "
                                       "(set TFBNECK_MAX_TRACE_BYTES to raise it)", kind="too_large")
        data = inflated
    if not data:
        raise TraceReadError(path, "file is empty (0 bytes): the profiler may still be writing "
                                   "it, or it crashed before writing", kind="empty_file")
    return data


def _read_capped(f, limit: int, expected: Optional[int]) -> bytes:
    """At most ``limit`` bytes of ``f``. The first read asks for the size the file reports
    (plus one byte, to see that it ended): ``f.read(limit)`` would allocate ``limit`` bytes
    up front, 2 GiB for every trace, which fails under a memory cap (ulimit -v, containers).
    A file that grows while it is read (or of unknown size) is read on in 64 MiB chunks."""
    first = min(limit, expected + 1) if isinstance(expected, int) and expected >= 0 else min(limit, 64 << 20)
    data = f.read(first)
    if len(data) < first:
        return data
    parts, total = [data], len(data)
    while total < limit:
        chunk = f.read(min(64 << 20, limit - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)


def _local_stat(path: str) -> Optional[os.stat_result]:
    """``os.stat`` of a local path; None for URLs and paths that cannot be stat'ed (opening
    them then reports why)."""
    if "://" in str(path) and not str(path).startswith("file://"):
        return None
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def _file_kind(mode: int) -> str:
    for test, name in ((statmod.S_ISDIR, "a folder"), (statmod.S_ISFIFO, "a FIFO"),
                       (statmod.S_ISCHR, "a character device"), (statmod.S_ISBLK, "a block device"),
                       (statmod.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _gunzip(data: bytes, limit: int) -> Optional[bytes]:
    """gzip members of ``data`` inflated, or None when they hold more than ``limit`` bytes
    (found without inflating more than that). Raises EOFError when a member is cut short."""
    out, total = [], 0
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = d.decompress(data, limit + 1 - total)
        total += len(chunk)
        if total > limit:
            return None
        out.append(chunk)
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        data = d.unused_data
        if not data.strip(b"\0"):  # zero padding after the last member, as gzip.decompress allows
            break
    return b"".join(out)


def read_space(path: str, opener=open, plane_filter=None) -> Space:
    """Read and decode one ``.xplane.pb`` file (:func:`read_bytes`, then
    :func:`.decoder.decode_space`). Raises TraceReadError (one line, names the file).

    ``opener`` opens a path for binary reading (``fsspec.open`` for remote paths);
    ``plane_filter``: a predicate on plane names (planes it refuses are not decoded).

    A local uncompressed file is mapped into memory rather than read (:func:`map_file`):
    the decoder drops each part of it from the process's memory once decoded, so the file
    is never resident as a whole (the kernel's page cache keeps it for the next reader).
    """
    if not str(path).endswith(".gz"):
        mapped = map_file(path, opener)
        if mapped is not None:
            return decode_space(mapped, path, plane_filter)
    return decode_space(read_bytes(path, opener), path, plane_filter)


def map_file(path: str, opener=open) -> Optional[mmap.mmap]:
    """The file ``path`` mapped read-only, or None where it cannot be: not a local regular
    file (the opener's file has no descriptor: a URL, an in-memory file), empty, above the
    size limit, or a system without ``madvise(MADV_DONTNEED)`` to give read pages back.
    Never raises: :func:`read_bytes` then reads it, or says why it cannot.

    Caveat of any mapping: a file cut shorter while it is mapped (rewritten in place, not
    replaced) ends the process (SIGBUS) where a read would have reported it as truncated.
    A profiler writes each trace once, to a new file."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return None
    st = _local_stat(path)
    if st is None or not statmod.S_ISREG(st.st_mode) or st.st_size == 0 or st.st_size > MAX_TRACE_BYTES:
        return None
    try:
        with opener(path, "rb") as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            if not 0 < size <= MAX_TRACE_BYTES:
                return None
            return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except Exception:  # no descriptor (io.UnsupportedOperation), or any failure to open: read instead
        return None


def host_name_from_file(filename: str) -> str:
    """``worker-0.xplane.pb`` -> ``worker-0``; the profiler names each file after its host
    (PyTorch's ``<worker>.<time>.pt.trace.json[.gz]`` after its worker and time)."""
    base = os.path.basename(filename)
    for suffix in (".xplane.pb.gz", ".xplane.pb", ".pt.trace.json.gz", ".pt.trace.json"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base
