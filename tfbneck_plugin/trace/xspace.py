"""XSpace schema and its columns: the profiler's trace format, read without TensorFlow.

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
The columns (:class:`Line`, :class:`Plane`, :class:`Space`) hold every event's absolute start
in ps (``timestamp_ns * 1000 + offset_ps``) so events of different lines and planes can be
compared directly; :mod:`.decoder` makes them from a file's bytes.

Errors: every failure to decode a file raises :class:`TraceReadError` whose message is one
line and names the file. Reading the file (local or remote, size limits, gzip) is
:mod:`.tracefile`'s.
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from . import wire
from ..errors import TfbneckError

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
_ONEOFS: Dict[str, Tuple[str, Set[str]]] = {"XEvent": ("data", {"offset_ps", "num_occurrences"}),
           "XStat": ("value", {"double_value", "uint64_value", "int64_value", "str_value",
                               "bytes_value", "ref_value"})}
_PACKAGE = "tfbneck.xplane"  # our own package name: never clashes with TensorFlow's pool


def _build_classes(package: str = _PACKAGE):
    """Message classes for the schema, in a descriptor pool of their own."""
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax="proto3")
    for msg_name, fields in _SCHEMA.items():
        msg = fdp.message_type.add(name=msg_name)
        oneof = _ONEOFS.get(msg_name)
        if oneof:
            msg.oneof_decl.add(name=oneof[0])
        for name, number, ftype, label, type_name in fields:  # type: ignore[attr-defined]
            f = msg.field.add(name=name, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = f".{package}.{type_name}"
            if oneof and name in oneof[1]:
                f.oneof_index = 0
        if msg_name == "XPlane":  # map<int64, XEventMetadata> / map<int64, XStatMetadata>
            for entry, value_type in (("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")):
                e = msg.nested_type.add(name=entry)
                e.options.map_entry = True
                e.field.add(name="key", number=1, type=_T.TYPE_INT64, label=_OPT)
                e.field.add(name="value", number=2, type=_T.TYPE_MESSAGE, label=_OPT,
                            type_name=f".{package}.{value_type}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    # GetMessageClass: protobuf >= 4.22; 4.21 (TF 2.12/2.13 pins) has only GetPrototype (gone in 5).
    get_class = getattr(message_factory, "GetMessageClass", None) or message_factory.MessageFactory(pool).GetPrototype
    return {name: get_class(pool.FindMessageTypeByName(f"{package}.{name}")) for name in _SCHEMA}


_CLASSES = _build_classes()
XSpace = _CLASSES["XSpace"]
XPlane = _CLASSES["XPlane"]
XLine = _CLASSES["XLine"]
XEvent = _CLASSES["XEvent"]
XStat = _CLASSES["XStat"]

class TraceReadError(TfbneckError):
    """A trace file could not be read. ``str(err)`` is one line naming the file; ``kind``
    is the machine-readable ``error_kind`` of the report (:mod:`tfbneck_plugin.errors`):
    ``unreadable``, ``too_large``, ``empty_file``, ``corrupt`` or ``not_xspace``."""

    def __init__(self, path: str, problem: str, kind: str = "corrupt"):
        self.path = str(path)
        self.problem = problem
        self.kind = kind
        super().__init__(f"{self.path}: {problem}")


# --------------------------------------------------------------------------------------
# Columnar view: what the analysis works on.
# --------------------------------------------------------------------------------------

# XStat field numbers (xplane.proto): the kinds wire.stat_ints reports.
_ST_METADATA, _ST_DOUBLE, _ST_UINT64, _ST_INT64, _ST_STR, _ST_BYTES, _ST_REF = 1, 2, 3, 4, 5, 6, 7


def _counting_sort(ids: np.ndarray) -> Optional[Tuple[int, np.ndarray, np.ndarray]]:
    """(lo, counts, order) of metadata ids spanning fewer than 65536 values (shape (n,), n >
    0): ``counts[c]`` events have id ``lo + c``; ``order`` (int32, or int64 from 2**31
    events) lists the events by id, then by index: a stable argsort of ``ids``. None for a
    wider span."""
    if wire.FAST and hasattr(wire._wirescan, "postings"):  # an extension built before it has none
        got = wire._wirescan.postings(np.ascontiguousarray(ids, dtype=np.int64))
        if got is None and len(ids) < 2 ** 31:
            return None
        if got is not None:
            lo, counts, order = got
            return lo, np.frombuffer(counts, dtype=np.int64), np.frombuffer(order, dtype=np.int32)
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo >= 2 ** 16:
        return None
    codes = (ids - lo).astype(np.uint16)
    order = np.argsort(codes, kind="stable").astype(np.int32 if len(ids) < 2 ** 31 else np.int64)
    return lo, np.bincount(codes, minlength=hi - lo + 1), order


#: Events per chunk of :meth:`Line.bounds`.
_CHUNK = 1 << 20


@dataclass
class Line:
    """One XLine as columns. Arrays have shape (n_events,).

    ``start_ps``/``dur_ps`` are absolute start and duration (int64 ps); ``name_id``
    indexes the plane's ``event_names``. ``buf`` (the line's bytes) and ``ev_start``/
    ``ev_end`` (int32 offsets of each event's payload in it) keep the raw events so stats
    are decoded only for the events that need them.
    """
    id: int
    name: str
    display_name: str
    start_ps: np.ndarray
    dur_ps: np.ndarray
    name_id: np.ndarray
    buf: np.ndarray = field(repr=False)
    ev_start: np.ndarray = field(repr=False)
    ev_end: np.ndarray = field(repr=False)
    _index: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]] = field(repr=False, default=None, compare=False)
    _slots: Optional[Dict[int, int]] = field(repr=False, default=None, compare=False)  # id -> its place in _index
    #: Where ``buf`` lies in a mapped file (:class:`FilePages`, start, end), None when in memory.
    pages: Optional[Tuple["FilePages", int, int]] = field(repr=False, default=None, compare=False)
    _bounds: Optional[Tuple[int, int]] = field(repr=False, default=None, compare=False)  # see bounds()

    def release(self) -> None:
        """Give back the memory the line's bytes take once read, where they are pages of a
        mapped file (read again from the page cache when next needed); nothing otherwise."""
        if self.pages is not None:
            pages, start, end = self.pages
            pages.drop(start, end)

    @property
    def end_ps(self) -> np.ndarray:
        """Each event's end (ps), shape (n_events,)."""
        return self.start_ps + self.dur_ps

    def ends(self, idx: np.ndarray) -> np.ndarray:
        """The end (ps) of events ``idx``, without the whole line's ends."""
        return self.start_ps[idx] + self.dur_ps[idx]

    def bounds(self) -> Optional[Tuple[int, int]]:
        """(earliest start, latest end) of the line's events in ps, None for an empty line;
        computed on the first call and kept (the decoder makes it for the host plane's lines
        in its threads)."""
        if self._bounds is None and len(self.start_ps):
            s, d, n = self.start_ps, self.dur_ps, len(self.start_ps)
            # The ends a chunk at a time: 8 MiB of them at most beside the columns (one line of
            # a 1 GB trace holds 11 million events), in two threads while the file is decoded.
            last = max(int((s[k:k + _CHUNK] + d[k:k + _CHUNK]).max()) for k in range(0, n, _CHUNK))
            self._bounds = (int(s.min()), last)
        return self._bounds

    def __len__(self) -> int:
        return len(self.start_ps)

    def _postings(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, bounds, order): the distinct metadata ids of the line, ascending (int64,
        shape (k,)); ``order[bounds[j]:bounds[j + 1]]`` are the indices of the events
        named ``ids[j]``, ascending (int32 or int64, shape (n_events,)). One stable sort
        of the ids, made on the first lookup and kept: a counting sort when the ids span
        fewer than 65536 values (every trace seen: ids are the plane's metadata keys, a
        few hundred), in C where the extension is compiled (``_wirescan.postings``) else
        numpy's radix sort; else numpy's merge sort."""
        if self._index is None:
            ids = self.name_id
            if len(ids) == 0:
                z = np.zeros(0, dtype=np.int64)
                self._index = (z, np.zeros(1, dtype=np.int64), z)
                return self._index
            counted = _counting_sort(ids)
            if counted is not None:
                lo, counts, order = counted
                present = np.flatnonzero(counts)
                uniq = present.astype(np.int64) + lo
                bounds = np.concatenate([[0], np.cumsum(counts[present])])
            else:
                small = np.int32 if len(ids) < 2 ** 31 else np.int64
                order = np.argsort(ids, kind="stable").astype(small)
                sorted_ids = ids[order]
                starts = np.flatnonzero(np.concatenate([[True], sorted_ids[1:] != sorted_ids[:-1]]))
                uniq = sorted_ids[starts].astype(np.int64)
                bounds = np.concatenate([starts, [len(ids)]])
            self._index = (uniq, bounds.astype(np.int64), order)
        return self._index

    def first_of_each(self) -> Tuple[np.ndarray, np.ndarray]:
        """(ids, first): each distinct metadata id of the line, ascending, and the index of
        its first event; int64 arrays of shape (k,). As ``np.unique(name_id, return_index=True)``."""
        uniq, bounds, order = self._postings()
        return uniq, order[bounds[:-1]].astype(np.int64)

    def where(self, ids) -> np.ndarray:
        """Indices (int64, ascending) of the events whose metadata id is one of ``ids``;
        as ``np.flatnonzero(np.isin(name_id, ids))``, in time proportional to the events
        found rather than to the line."""
        uniq, bounds, order = self._postings()
        slots = self._slots
        if slots is None:
            slots = self._slots = {v: k for k, v in enumerate(uniq.tolist())}
        j = sorted({slots[i] for i in np.asarray(ids, dtype=np.int64).ravel().tolist() if i in slots})
        if not j:
            return np.zeros(0, dtype=np.int64)
        if len(j) == 1:
            return order[bounds[j[0]]:bounds[j[0] + 1]].astype(np.int64)
        parts = [order[bounds[k]:bounds[k + 1]] for k in j]
        if sum(len(p) for p in parts) * 8 > len(order):  # a large share of the line: mark them, one pass
            hit = np.zeros(len(order), dtype=bool)
            for p in parts:
                hit[p] = True
            return np.flatnonzero(hit)
        return np.sort(np.concatenate(parts)).astype(np.int64)

    def mask(self, ids) -> np.ndarray:
        """Bool mask (shape (n_events,)) of the events whose metadata id is one of ``ids``;
        as ``np.isin(name_id, ids)``, by a lookup table over the line's id range."""
        uniq, _, _ = self._postings()
        ids = np.asarray(ids, dtype=np.int64).ravel()
        if len(uniq) == 0 or len(ids) == 0:
            return np.zeros(len(self.name_id), dtype=bool)
        lo, hi = int(uniq[0]), int(uniq[-1])
        if hi - lo >= 2 ** 20:
            return np.isin(self.name_id, ids)
        table = np.zeros(hi - lo + 1, dtype=bool)
        inside = ids[(ids >= lo) & (ids <= hi)]
        table[inside - lo] = True
        return table[self.name_id - lo]

    def event_proto(self, index: int):
        """The full ``XEvent`` message of one event (for reading all its stats)."""
        s, e = int(self.ev_start[index]), int(self.ev_end[index])
        try:
            return XEvent.FromString(bytes(self.buf[s:e]))
        except DecodeError:  # a corrupt event: no stats, as the bulk decoder (wire.stat_ints) reads it
            return XEvent(metadata_id=int(self.name_id[index]))


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
    proto: Any = field(repr=False, default=None)   # the plane's XPlane message, lines left out
    _stat_ids: Optional[Dict[str, int]] = field(repr=False, default=None)
    _stat_cache: Dict[tuple, tuple] = field(repr=False, default_factory=dict, compare=False)

    def stat_id(self, name: str) -> Optional[int]:
        """The stat metadata id of ``name`` in this plane, None when absent."""
        if self._stat_ids is None:
            self._stat_ids = {}
            for k, v in sorted(self.stat_names.items(), reverse=True):
                self._stat_ids[v] = k  # lowest id wins for duplicated names
        return self._stat_ids.get(name)

    def ids_where(self, predicate) -> np.ndarray:
        """Metadata ids whose event name satisfies ``predicate(name) -> bool``."""
        return np.fromiter((k for k, v in self.event_names.items() if predicate(v)), dtype=np.int64)

    def plane_stats(self) -> Dict[str, object]:
        """The plane's own stats (name -> value)."""
        return {self.stat_names.get(s.metadata_id, str(s.metadata_id)): stat_value(s, self.stat_names)
                for s in self.proto.stats}

    def event_stats(self, line: Line, index: int) -> Dict[str, object]:
        """All stats of event ``index`` of ``line`` (and of its metadata), as name -> value."""
        ev = line.event_proto(int(index))
        out = {}
        if ev.metadata_id in self.proto.event_metadata:
            for s in self.proto.event_metadata[ev.metadata_id].stats:
                out[self.stat_names.get(s.metadata_id, str(s.metadata_id))] = stat_value(s, self.stat_names)
        for s in ev.stats:
            out[self.stat_names.get(s.metadata_id, str(s.metadata_id))] = stat_value(s, self.stat_names)
        return out

    def stat_ints(self, line: Line, idx: np.ndarray, name: str) -> Tuple[np.ndarray, np.ndarray]:
        """Integer stat ``name`` of events ``idx`` of ``line``, decoded in bulk.

        Returns (values, present): uint64 array of shape (len(idx),) holding the raw 64
        bits (view as int64 for signed stats; a ``ref_value`` is the interned string's id)
        and a bool mask of the events that carry the stat as an integer.
        """
        values, present, is_ref = self._stat_raw(line, idx, name)
        return values, present & ~is_ref

    def _stat_raw(self, line: Line, idx, name: str):
        """(values, present, is_ref) of stat ``name`` for events ``idx`` of ``line``; read-only
        arrays, kept for the last few requests: the analysis asks for the same link stats
        (``_c`` of executor events) of the same events from several places."""
        idx = np.asarray(idx, dtype=np.int64)
        key = (id(line), name, idx.tobytes())
        hit = self._stat_cache.get(key)
        if hit is not None and hit[0] is line:
            return hit[1]
        values = np.zeros(len(idx), dtype=np.uint64)
        present = np.zeros(len(idx), dtype=bool)
        is_ref = np.zeros(len(idx), dtype=bool)
        sid = self.stat_id(name)
        if sid is not None and len(idx):
            values, kinds = wire.stat_ints(line.buf, line.ev_start[idx], line.ev_end[idx], sid)
            line.release()
            present = (kinds == _ST_UINT64) | (kinds == _ST_INT64) | (kinds == _ST_REF)
            is_ref = kinds == _ST_REF
        out = (values, present, is_ref)
        for a in out:
            a.flags.writeable = False
        if len(self._stat_cache) >= _STAT_CACHE_SIZE:
            self._stat_cache.pop(next(iter(self._stat_cache)))
        self._stat_cache[key] = (line, out)
        return out

    def stat_column(self, line: Line, idx: np.ndarray, name: str) -> List[object]:
        """Stat ``name`` of events ``idx`` as Python values (None where absent).

        Integers come from the bulk decoder (int64 semantics, except values above 2**63
        which are kept unsigned: ids such as ``_p``/``_c`` are uint64); other kinds
        (double, string, ref) are read from the full message of each event.
        """
        values, present, is_ref = self._stat_raw(line, idx, name)
        signed = values.view(np.int64)
        out: List[object] = [None] * len(idx)
        for k in np.flatnonzero(present):
            if is_ref[k]:
                out[k] = self.stat_names.get(int(values[k]), "")
            else:
                out[k] = int(values[k]) if signed[k] < 0 and name in _UNSIGNED_IDS else int(signed[k])
        missing = np.flatnonzero(~present)
        for k in missing:
            if self.stat_id(name) is None:
                break
            v = self.event_stats(line, int(idx[k])).get(name)
            out[k] = v
        if len(missing):
            line.release()
        return out


#: Stat requests a plane remembers (:meth:`Plane._stat_raw`), oldest dropped first.
_STAT_CACHE_SIZE = 16

#: Stats that carry 64-bit unsigned ids (tsl/profiler/utils/xplane_schema.h: producer and
#: consumer ids are uint64 fingerprints).
_UNSIGNED_IDS = {"_p", "_c", "correlation_id", "element_id", "input_element_id"}


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
        """The plane named ``name``, or None."""
        for p in self.planes:
            if p.name == name:
                return p
        return None

    @property
    def n_events(self) -> int:
        """Events over all planes."""
        return sum(len(l) for p in self.planes for l in p.lines)


class FilePages:
    """A trace file mapped into memory (``mmap``), whose pages the decoder gives back once
    read: ``madvise(MADV_DONTNEED)`` drops them from the process (not from the kernel's
    page cache), so its resident memory holds the event columns, not the file; a later
    read of the same bytes (stats of some events) faults them in again from the cache."""

    def __init__(self, mapped: mmap.mmap):
        self.mapped = mapped

    def drop(self, start: int, end: int) -> None:
        """Drop the pages holding bytes [start, end) of the file (whole pages: the ones it
        shares with its neighbours too; they are read again where needed)."""
        lo = start - start % mmap.PAGESIZE
        hi = min(end, len(self.mapped))
        if hi > lo:
            try:
                self.mapped.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            except (OSError, ValueError):  # advice only: keeping the pages is always correct
                pass
