"""XSpace schema and reader: the profiler's trace format, read without TensorFlow.

The profiler (TensorFlow >= 2.2, JAX, XProf) writes one ``<host>.xplane.pb`` per host and
profiling session: a serialized ``XSpace`` protobuf. Its schema is published in
``tsl/profiler/protobuf/xplane.proto`` (formerly ``tensorflow/core/profiler/protobuf/
xplane.proto``). We declare the same messages here, field numbers as published there, and
build the message classes at import time from a ``FileDescriptorProto``: no generated code,
no ``protoc``, no dependency on TensorFlow's protobuf pin. Parsing goes through protobuf's
``upb`` C backend (the default since protobuf 4.21), which parses ~100 MB/s on one core.

Times in an XSpace:
    ``XLine.timestamp_ns``  line start, ns since the epoch (or since boot).
    ``XEvent.offset_ps``    event start relative to the line start, ps.
    ``XEvent.duration_ps``  event duration, ps.
This module converts every event to an absolute start in ps (``timestamp_ns * 1000 +
offset_ps``) so events of different lines and planes can be compared directly.

Errors: every failure to read a file raises :class:`TraceReadError` whose message is one
line and names the file.
"""
from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

# Field numbers from xplane.proto (tsl/profiler/protobuf/xplane.proto, package
# tensorflow.profiler). Each entry: (name, number, type, label, message type name).
_T = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED
_SCHEMA = {
    "XSpace": [
        ("planes", 1, _T.TYPE_MESSAGE, _REP, "XPlane"),
        ("errors", 2, _T.TYPE_STRING, _REP, None),
        ("warnings", 3, _T.TYPE_STRING, _REP, None),
        ("hostnames", 4, _T.TYPE_STRING, _REP, None),
    ],
    "XPlane": [
        ("id", 1, _T.TYPE_INT64, _OPT, None),
        ("name", 2, _T.TYPE_STRING, _OPT, None),
        ("lines", 3, _T.TYPE_MESSAGE, _REP, "XLine"),
        ("event_metadata", 4, _T.TYPE_MESSAGE, _REP, "XPlane.EventMetadataEntry"),
        ("stat_metadata", 5, _T.TYPE_MESSAGE, _REP, "XPlane.StatMetadataEntry"),
        ("stats", 6, _T.TYPE_MESSAGE, _REP, "XStat"),
    ],
    "XLine": [
        ("id", 1, _T.TYPE_INT64, _OPT, None),
        ("display_id", 10, _T.TYPE_INT64, _OPT, None),
        ("name", 2, _T.TYPE_STRING, _OPT, None),
        ("display_name", 11, _T.TYPE_STRING, _OPT, None),
        ("timestamp_ns", 3, _T.TYPE_INT64, _OPT, None),
        ("duration_ps", 9, _T.TYPE_INT64, _OPT, None),
        ("events", 4, _T.TYPE_MESSAGE, _REP, "XEvent"),
    ],
    "XEvent": [
        ("metadata_id", 1, _T.TYPE_INT64, _OPT, None),
        ("offset_ps", 2, _T.TYPE_INT64, _OPT, None),  # oneof data
        ("num_occurrences", 5, _T.TYPE_INT64, _OPT, None),  # oneof data
        ("duration_ps", 3, _T.TYPE_INT64, _OPT, None),
        ("stats", 4, _T.TYPE_MESSAGE, _REP, "XStat"),
    ],
    "XStat": [
        ("metadata_id", 1, _T.TYPE_INT64, _OPT, None),
        ("double_value", 2, _T.TYPE_DOUBLE, _OPT, None),  # oneof value ...
        ("uint64_value", 3, _T.TYPE_UINT64, _OPT, None),
        ("int64_value", 4, _T.TYPE_INT64, _OPT, None),
        ("str_value", 5, _T.TYPE_STRING, _OPT, None),
        ("bytes_value", 6, _T.TYPE_BYTES, _OPT, None),
        ("ref_value", 7, _T.TYPE_UINT64, _OPT, None),  # id into stat_metadata (interned string)
    ],
    "XEventMetadata": [
        ("id", 1, _T.TYPE_INT64, _OPT, None),
        ("name", 2, _T.TYPE_STRING, _OPT, None),
        ("display_name", 4, _T.TYPE_STRING, _OPT, None),
        ("metadata", 3, _T.TYPE_BYTES, _OPT, None),
        ("stats", 5, _T.TYPE_MESSAGE, _REP, "XStat"),
        ("child_id", 6, _T.TYPE_INT64, _REP, None),
    ],
    "XStatMetadata": [
        ("id", 1, _T.TYPE_INT64, _OPT, None),
        ("name", 2, _T.TYPE_STRING, _OPT, None),
        ("description", 3, _T.TYPE_STRING, _OPT, None),
    ],
}
_ONEOFS = {"XEvent": ("data", {"offset_ps", "num_occurrences"}),
           "XStat": ("value", {"double_value", "uint64_value", "int64_value", "str_value",
                               "bytes_value", "ref_value"})}
_PACKAGE = "tfbneck.xplane"  # our own package name: never clashes with TensorFlow's pool


def _build_classes():
    fdp = descriptor_pb2.FileDescriptorProto(name="tfbneck_xplane.proto", package=_PACKAGE,
                                             syntax="proto3")
    for msg_name, fields in _SCHEMA.items():
        msg = fdp.message_type.add(name=msg_name)
        oneof = _ONEOFS.get(msg_name)
        if oneof:
            msg.oneof_decl.add(name=oneof[0])
        for name, number, ftype, label, type_name in fields:
            f = msg.field.add(name=name, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = f".{_PACKAGE}.{type_name}"
            if oneof and name in oneof[1]:
                f.oneof_index = 0
        if msg_name == "XPlane":  # map<int64, XEventMetadata> / map<int64, XStatMetadata>
            for entry, value_type in (("EventMetadataEntry", "XEventMetadata"),
                                      ("StatMetadataEntry", "XStatMetadata")):
                e = msg.nested_type.add(name=entry)
                e.options.map_entry = True
                e.field.add(name="key", number=1, type=_T.TYPE_INT64, label=_OPT)
                e.field.add(name="value", number=2, type=_T.TYPE_MESSAGE, label=_OPT,
                            type_name=f".{_PACKAGE}.{value_type}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in _SCHEMA}


_CLASSES = _build_classes()
XSpace = _CLASSES["XSpace"]
XPlane = _CLASSES["XPlane"]
XLine = _CLASSES["XLine"]
XEvent = _CLASSES["XEvent"]
XStat = _CLASSES["XStat"]

#: Largest uncompressed trace read by default (bytes). Parsing holds the file plus its
#: parsed form (about 3x the file size, measured on a 65 MB Keras trace); 2 GiB is also
#: protobuf's hard limit for one message. Override with TFBNECK_MAX_TRACE_BYTES.
MAX_TRACE_BYTES = int(os.environ.get("TFBNECK_MAX_TRACE_BYTES", 2 * 1024 ** 3 - 1))


class TraceReadError(Exception):
    """A trace file could not be read. ``str(err)`` is one line naming the file."""

    def __init__(self, path: str, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def read_bytes(path: str, opener=open) -> bytes:
    """Return the serialized XSpace in ``path`` (``.xplane.pb`` or ``.xplane.pb.gz``).

    ``opener`` opens a path for binary reading (``fsspec.open`` for remote paths).
    Raises TraceReadError when the file is missing, unreadable, empty, or too large.
    """
    try:
        with opener(path, "rb") as f:
            data = f.read(MAX_TRACE_BYTES + 1)
    except OSError as err:
        raise TraceReadError(path, f"cannot read file ({err.strerror or err})") from None
    if len(data) > MAX_TRACE_BYTES:
        raise TraceReadError(path, f"larger than the {MAX_TRACE_BYTES} byte limit "
                                   "(set TFBNECK_MAX_TRACE_BYTES to raise it)")
    if str(path).endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise TraceReadError(path, f"not a valid gzip file ({err})") from None
    if not data:
        raise TraceReadError(path, "file is empty (0 bytes): the profiler may still be writing "
                                   "it, or it crashed before writing")
    return data


def parse_xspace(data: bytes, path: str = "<bytes>"):
    """Parse serialized bytes into an ``XSpace`` message.

    Raises TraceReadError when the bytes are not a well-formed XSpace (truncated,
    corrupt, or another kind of file).
    """
    space = XSpace()
    try:
        space.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise TraceReadError(path, f"not a valid XSpace protobuf, truncated or corrupt "
                                   f"({len(data)} bytes; {str(err).splitlines()[0] if str(err) else 'decode error'})") from None
    if not space.planes:
        raise TraceReadError(path, "not an XSpace trace: it holds no planes")
    if not any(p.name for p in space.planes):
        raise TraceReadError(path, "not an XSpace trace: its planes have no names")
    return space


# --------------------------------------------------------------------------------------
# Columnar view: what the analysis works on.
# --------------------------------------------------------------------------------------

@dataclass
class Line:
    """One XLine as columns. Arrays have shape (n_events,).

    ``start_ps``/``end_ps`` are absolute (int64 ps); ``name_id`` indexes the plane's
    ``event_names``. ``proto`` keeps the XLine so stats can be read for chosen events only.
    """
    id: int
    name: str
    display_name: str
    start_ps: np.ndarray
    dur_ps: np.ndarray
    name_id: np.ndarray
    proto: object = field(repr=False, default=None)

    @property
    def end_ps(self) -> np.ndarray:
        return self.start_ps + self.dur_ps

    def __len__(self) -> int:
        return len(self.start_ps)


@dataclass
class Plane:
    """One XPlane: its lines as columns, interned event and stat names.

    ``event_names``: metadata id -> name. ``stat_names``: stat metadata id -> name.
    """
    id: int
    name: str
    lines: List[Line]
    event_names: Dict[int, str]
    stat_names: Dict[int, str]
    proto: object = field(repr=False, default=None)

    def stat_id(self, name: str) -> Optional[int]:
        for k, v in self.stat_names.items():
            if v == name:
                return k
        return None

    def ids_where(self, predicate) -> np.ndarray:
        """Metadata ids whose event name satisfies ``predicate(name) -> bool``."""
        return np.fromiter((k for k, v in self.event_names.items() if predicate(v)), dtype=np.int64)

    def plane_stats(self) -> Dict[str, object]:
        return {self.stat_names.get(s.metadata_id, str(s.metadata_id)): stat_value(s, self.stat_names)
                for s in self.proto.stats}

    def event_stats(self, line: Line, index: int) -> Dict[str, object]:
        """Stats of event ``index`` of ``line`` (and of its metadata), as name -> value."""
        ev = line.proto.events[int(index)]
        out = {}
        md = self.proto.event_metadata.get(ev.metadata_id) if ev.metadata_id in self.proto.event_metadata else None
        if md is not None:
            for s in md.stats:
                out[self.stat_names.get(s.metadata_id, str(s.metadata_id))] = stat_value(s, self.stat_names)
        for s in ev.stats:
            out[self.stat_names.get(s.metadata_id, str(s.metadata_id))] = stat_value(s, self.stat_names)
        return out


def stat_value(stat, stat_names: Dict[int, str]):
    """The value of an XStat; a ``ref_value`` is resolved to the interned string."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    value = getattr(stat, kind)
    if kind == "bytes_value":
        return bytes(value)
    return value


@dataclass
class Space:
    """A whole XSpace: planes by name, the host name, and the source path."""
    path: str
    planes: List[Plane]
    hostnames: List[str]
    errors: List[str]
    warnings: List[str]

    def plane(self, name: str) -> Optional[Plane]:
        for p in self.planes:
            if p.name == name:
                return p
        return None

    @property
    def n_events(self) -> int:
        return sum(len(l) for p in self.planes for l in p.lines)


def _line_columns(line_proto) -> Line:
    events = line_proto.events
    n = len(events)
    base_ps = line_proto.timestamp_ns * 1000
    if n:
        # One pass over the events; the three columns are unpacked by numpy.
        flat = np.fromiter((v for e in events for v in (e.offset_ps, e.duration_ps, e.metadata_id)),
                           dtype=np.int64, count=3 * n).reshape(n, 3)
        start = flat[:, 0] + base_ps
        dur = np.maximum(flat[:, 1], 0)  # a negative duration is corrupt: treat as instant
        name_id = flat[:, 2].copy()
    else:
        start = dur = name_id = np.zeros(0, dtype=np.int64)
    return Line(id=line_proto.id, name=line_proto.name, display_name=line_proto.display_name,
                start_ps=start, dur_ps=dur, name_id=name_id, proto=line_proto)


def to_space(space_proto, path: str, plane_filter=None) -> Space:
    """Convert a parsed XSpace into columns. ``plane_filter(name) -> bool`` skips planes."""
    planes = []
    for p in space_proto.planes:
        if plane_filter is not None and not plane_filter(p.name):
            continue
        event_names = {k: v.name or v.display_name for k, v in p.event_metadata.items()}
        stat_names = {k: v.name for k, v in p.stat_metadata.items()}
        planes.append(Plane(id=p.id, name=p.name, lines=[_line_columns(l) for l in p.lines],
                            event_names=event_names, stat_names=stat_names, proto=p))
    return Space(path=str(path), planes=planes, hostnames=list(space_proto.hostnames),
                 errors=list(space_proto.errors), warnings=list(space_proto.warnings))


def read_space(path: str, opener=open, plane_filter=None) -> Space:
    """Read and convert one ``.xplane.pb`` file. Raises TraceReadError (one line, names the file)."""
    data = read_bytes(path, opener)
    proto = parse_xspace(data, path)
    del data
    return to_space(proto, path, plane_filter)


def host_name_from_file(filename: str) -> str:
    """``worker-0.xplane.pb`` -> ``worker-0``; the profiler names each file after its host."""
    base = os.path.basename(filename)
    for suffix in (".xplane.pb.gz", ".xplane.pb"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base
