"""The decoder: a serialized XSpace (a file's bytes, or the file mapped) into the columns of
:mod:`.xspace` (:func:`decode_space`).

Each XLine is split into its events and their three scalar fields in one pass by
:mod:`.wire` (in C where compiled, several lines at once in threads); the few fields of the
XSpace and its XPlanes are walked here, and each plane's metadata (event and stat names, its
stats) is parsed by protobuf from the plane's non-line fields.

Errors: :class:`.xspace.TraceReadError` (one line, names the file) for bytes that are not a
well-formed XSpace.
"""
from __future__ import annotations

import mmap
import os
import threading
from typing import Any, List, Optional, Tuple

import numpy as np
from google.protobuf.message import DecodeError

from ..errors import first_line
from . import wire
from .xspace import FilePages, Line, Plane, Space, TraceReadError, XPlane

# XLine field numbers (xplane.proto).
_LINE_ID, _LINE_NAME, _LINE_TS, _LINE_EVENTS, _LINE_DISPLAY_NAME = 1, 2, 3, 4, 11


def _line(decoded, buf) -> Line:
    """The Line of one serialized XLine from what :func:`.wire.decode_events` made of it
    (``decoded``). ``buf``: what stats are later decoded from (the line's bytes for the C
    path, a slice of a zero-padded copy of the file for the numpy path)."""
    fields, ev_start, ev_end, name_id, offset, duration = decoded

    def number(f):  # a field of the wrong wire type is ignored, as protobuf parsers do
        v = fields.get(f, 0)
        return v if isinstance(v, int) else 0

    ts = number(_LINE_TS) % 2**64
    ts = ts - 2**64 if ts >= 2**63 else ts  # int64, as the schema declares
    base_ps = max(min(ts * 1000, 2**62), -2**62)  # a corrupt timestamp is clamped, never overflows
    with np.errstate(over="ignore"):
        start = np.add(offset, np.int64(base_ps), out=offset)  # in place: the columns are fresh
    dur = np.maximum(duration, 0, out=duration)  # a negative duration is corrupt: an instant

    def text(f):
        v = fields.get(f, b"")
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else ""

    line_id = int(wire.as_int64(np.array([number(_LINE_ID) % 2**64], dtype=np.uint64))[0])
    # Offsets into one line fit in 32 bits (a trace is < 2 GiB): half the memory of int64.
    return Line(id=line_id, name=text(_LINE_NAME), display_name=text(_LINE_DISPLAY_NAME), start_ps=start,
                dur_ps=dur, name_id=name_id, buf=buf, ev_start=ev_start.astype(np.int32, copy=False),
                ev_end=ev_end.astype(np.int32, copy=False))


#: Lines hold at least this many bytes in all before they are decoded in threads (a thread
#: costs ~0.1 ms to start; the C decoder reads ~0.7 GB/s per core).
THREADS_FROM_BYTES = 4 << 20


#: Planes whose lines are indexed by event name as they are decoded (:meth:`Line._postings`,
#: in the decoding threads), and their bounds found (:meth:`Line.bounds`): the host plane's,
#: which the host view looks up by name, all of them, and whose time span it reads.
INDEXED_PLANES = ("/host:CPU",)


def _decode_lines(view, padded, pages: Optional[FilePages], ranges: List[Tuple[int, int, bool]]) -> List[Any]:
    """The :class:`Line` of each line ``view[start:end]`` of ``ranges`` (start, end, whether
    to index it), or the exception its decoding raised, in the order of ``ranges``. The C
    decoder runs without the GIL: from :data:`THREADS_FROM_BYTES` on, lines are decoded by
    one thread per available core (largest first). Each line's pages of a mapped file are
    given back once it is decoded."""
    out: List[Any] = [None] * len(ranges)

    def decode(k: int) -> None:
        ls, le, index = ranges[k]
        buf = view[ls:le] if padded is None else padded[ls:le + wire.PAD]
        try:
            line = out[k] = _line(wire.decode_events(view[ls:le], buf, _LINE_EVENTS), buf)
            if pages is not None:
                line.pages = (pages, ls, le)
            if index:
                line._postings()
                line.bounds()
        except BaseException as err:  # raised by the caller, in the lines' order
            out[k] = err
        if pages is not None:
            pages.drop(ls, le)

    workers = _threads() if wire.FAST and len(ranges) > 1 else 1
    if workers <= 1 or sum(le - ls for ls, le, _ in ranges) < THREADS_FROM_BYTES:
        for k in range(len(ranges)):
            decode(k)
        return out
    todo = sorted(range(len(ranges)), key=lambda k: ranges[k][1] - ranges[k][0])  # largest last: popped first
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                k = todo.pop()
            decode(k)

    threads = [threading.Thread(target=work, name=f"tfbneck-decode-{i}", daemon=True)
               for i in range(min(workers, len(ranges)) - 1)]
    for t in threads:
        t.start()
    work()
    for t in threads:
        t.join()
    return out


def _threads() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _fields(data, start: int, end: int, path: str, what: str):
    """Top-level fields of the message in ``data[start:end]``: (field, wire type, value
    start, value end, field start). Used for the few fields of XSpace and XPlane; the
    millions of events go through ``wire``. Raises TraceReadError when malformed."""
    out = []
    pos = start
    try:
        while pos < end:
            fstart = pos
            key, pos = wire._varint_py(data, pos)
            field, wt = key >> 3, key & 7
            if wt == 0:
                vstart = pos
                _, pos = wire._varint_py(data, pos)
            elif wt == 2:
                length, vstart = wire._varint_py(data, pos)
                pos = vstart + length
            elif wt == 1:
                vstart, pos = pos, pos + 8
            elif wt == 5:
                vstart, pos = pos, pos + 4
            else:
                raise wire.WireError(f"invalid wire type {wt} at byte {fstart}")
            if pos > end:
                raise wire.WireError(f"a field runs {pos - end} bytes past the end")
            out.append((field, wt, vstart, pos, fstart))
    except (wire.WireError, IndexError) as err:
        detail = str(err) if isinstance(err, wire.WireError) else "message ends inside a field"
        raise TraceReadError(path, f"not a valid XSpace protobuf, truncated or corrupt "
                                   f"({len(data)} bytes; {what}: {detail})") from None
    return out


def _plane(data, view, start: int, end: int, path: str, k: int):
    """(XPlane message of plane ``k``'s fields other than its lines, the lines' byte ranges).
    Raises TraceReadError when the plane is malformed."""
    meta, lines = [], []
    for number, wt, vs, ve, fs in _fields(data, start, end, path, f"plane {k}"):
        if number == 3 and wt == 2:
            lines.append((vs, ve))
        else:
            meta.append(view[fs:ve])
    try:
        return XPlane.FromString(b"".join(meta)), lines
    except (DecodeError, RuntimeError, ValueError) as err:
        raise TraceReadError(path, f"not a valid XSpace protobuf, truncated or corrupt (plane {k}: "
                                   f"{first_line(err, 'decode error')})") from None


def decode_space(data, path: str, plane_filter=None) -> Space:
    """Convert one serialized XSpace (the bytes of the file ``path``, named in errors).
    Raises TraceReadError (one line, names the file).

    ``data``: bytes, or the file mapped read-only (``mmap``). The bytes are kept and every
    line decodes from a slice of them (no copy), several lines at once in threads
    (:func:`_decode_lines`): peak memory is the file plus the event columns (~32 bytes per
    event); of a mapped file, each line's pages are given back once decoded
    (:class:`FilePages`), so that beside the columns only the lines being decoded are
    resident. Plane metadata (names, stats) is parsed by protobuf from the plane's non-line
    fields. ``plane_filter``: a predicate on plane names; planes it refuses are not decoded.
    """
    view = memoryview(data)
    padded = None if wire.FAST else wire.padded(data)  # the numpy path reads past a line's end
    pages = FilePages(data) if isinstance(data, mmap.mmap) and padded is None else None
    hostnames: List[str] = []
    errors: List[str] = []
    warnings: List[str] = []
    plane_ranges: List[Tuple[int, int]] = []
    for number, wt, vs, ve, _ in _fields(data, 0, len(data), path, "XSpace"):
        if wt != 2:
            continue
        if number == 1:
            plane_ranges.append((vs, ve))
        elif number in (2, 3, 4):
            text = bytes(view[vs:ve]).decode("utf-8", "replace")
            (errors, warnings, hostnames)[number - 2].append(text)
    if not plane_ranges:
        raise TraceReadError(path, "not an XSpace trace: it holds no planes", kind="not_xspace")
    # The planes' metadata first, then their lines all together (in threads), then the
    # errors in the order a plane-by-plane reading would meet them: the lines before the
    # first plane that cannot be read are decoded, and their errors come before its own.
    chosen: List[Tuple[Any, List[Tuple[int, int]]]] = []  # (metadata, line ranges) of each plane decoded
    unreadable: Optional[TraceReadError] = None
    for k, (ps, pe) in enumerate(plane_ranges):
        try:
            proto, lines = _plane(data, view, ps, pe, path, k)
        except TraceReadError as err:
            unreadable = err
            break
        if plane_filter is None or plane_filter(proto.name):
            chosen.append((proto, lines))
    decoded = iter(_decode_lines(view, padded, pages, [(ls, le, proto.name in INDEXED_PLANES)
                                                       for proto, lines in chosen for ls, le in lines]))
    planes = []
    for proto, lines in chosen:
        plane_lines = []
        for j in range(len(lines)):
            got = next(decoded)
            if isinstance(got, wire.WireError):
                raise TraceReadError(path, f"line {j} of plane {proto.name!r} is corrupt: {got}") from None
            if isinstance(got, BaseException):
                raise got
            plane_lines.append(got)
        planes.append(Plane(id=proto.id, name=proto.name, lines=plane_lines,
                            event_names={i: v.name or v.display_name for i, v in proto.event_metadata.items()},
                            stat_names={i: v.name for i, v in proto.stat_metadata.items()}, proto=proto))
    if unreadable is not None:
        raise unreadable
    if pages is not None:  # the planes' metadata, and the lines of planes left out
        pages.drop(0, len(data))
    if not any(p.name for p in planes) and plane_filter is None:
        raise TraceReadError(path, "not an XSpace trace: its planes have no names", kind="not_xspace")
    return Space(path=str(path), planes=planes, hostnames=hostnames, errors=errors, warnings=warnings)
