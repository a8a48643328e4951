"""Protobuf wire format, decoded in bulk with numpy: the hot path of the reader.

An XLine holds up to millions of XEvents. Materialising one Python object per event
costs ~2 us each (measured: 2.5 s for the 0.8 M events of a 21 MB Keras trace, against
0.18 s for protobuf's own C parser); here each event's fields are decoded for all
events at once, one numpy pass per field slot. Only the split of a line into events
(a length-prefixed chain, inherently sequential) is a Python loop, ~0.2 us per event.

Wire format (https://protobuf.dev/programming-guides/encoding/): a message is a
sequence of ``tag value``; ``tag = field_number << 3 | wire_type``; wire type 0 is a
varint, 1 a fixed 8 bytes, 2 a varint length then that many bytes, 5 a fixed 4 bytes.

Errors: :class:`WireError` (one line) when the bytes are not a well-formed message.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

PAD = 16  # zero bytes appended to every buffer so that vectorised reads never run off the end

try:  # the optional C fast path (tfbneck_plugin/trace/_wirescan.c); same results, ~50x faster
    from . import _wirescan  # type: ignore[attr-defined]
except ImportError:  # not compiled here: the numpy path below does the same work
    _wirescan = None
#: Set TFBNECK_PURE_PYTHON=1 to force the numpy path (tests compare both).
FAST = _wirescan is not None and not __import__("os").environ.get("TFBNECK_PURE_PYTHON")


class WireError(ValueError):
    """Malformed protobuf bytes."""


def padded(data: bytes) -> np.ndarray:
    """``data`` followed by PAD zero bytes, as a uint8 array (one copy)."""
    out = np.zeros(len(data) + PAD, dtype=np.uint8)
    out[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    return out


def varints(buf: np.ndarray, pos: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Decode one varint at each position. Returns (values as uint64, positions after).

    Works on the shrinking set of varints still open after each byte: most are 1-2 bytes
    (tags, ids), ps offsets 5-6 bytes.
    """
    pos = np.minimum(np.asarray(pos, dtype=np.int64), len(buf) - PAD)  # corrupt positions read padding
    b = buf[pos]
    value = (b & 0x7F).astype(np.uint64)
    length = np.ones(len(pos), dtype=np.int64)
    open_ = np.flatnonzero(b >= 128)
    k = 1
    while len(open_) and k < 10:
        b = buf[np.minimum(pos[open_] + k, len(buf) - 1)]
        value[open_] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        k += 1
        length[open_] = k
        open_ = open_[b >= 128]
    length[open_] = len(buf)  # still open after 10 bytes: malformed, its end lies past every message
    return value, pos + length


def split_line(data: bytes, events_field: int = 4,
               buf: Optional[np.ndarray] = None) -> Tuple[Dict[int, object], np.ndarray, np.ndarray]:
    """Split a serialized XLine into its header fields and the byte ranges of its events.

    Returns (fields, starts, ends): ``fields`` maps field number to the decoded value of
    each non-event field (varint -> int, length-delimited -> bytes); ``starts``/``ends``
    (int64, shape (n_events,)) delimit each event's payload in ``data``.
    ``buf`` is ``padded(data)`` when the caller already has it (saves a copy).
    Raises WireError when the bytes are malformed.
    """
    n = len(data)
    pos = 0
    tags: List[int] = []  # position of each event's tag byte; lengths are decoded in bulk below
    append = tags.append
    fields: Dict[int, object] = {}
    event_tag = (events_field << 3) | 2
    try:
        while pos < n:
            tag = data[pos]
            if tag == event_tag:
                b = data[pos + 1]
                append(pos)
                if b < 128:  # the common case: a payload under 128 bytes
                    pos += 2 + b
                else:
                    length, q = _varint_py(data, pos + 1)
                    pos = q + length
                continue
            key, q = _varint_py(data, pos)
            field, wt = key >> 3, key & 7
            if wt == 0:
                value, pos = _varint_py(data, q)
                fields[field] = value
            elif wt == 2:
                length, q = _varint_py(data, q)
                fields[field] = data[q:q + length]
                pos = q + length
            elif wt == 1:
                pos = q + 8
            elif wt == 5:
                pos = q + 4
            else:
                raise WireError(f"invalid wire type {wt} at byte {pos}")
    except IndexError:
        raise WireError("message ends inside a field (truncated)") from None
    if pos != n:
        raise WireError(f"last field runs {pos - n} bytes past the end (truncated)")
    if buf is None:
        buf = padded(data)
    lengths, starts = varints(buf, np.array(tags, dtype=np.int64) + 1)
    return fields, starts, starts + lengths.astype(np.int64)


def _varint_py(data: bytes, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 128:
            return value, pos
        shift += 7
        if shift > 63:
            raise WireError(f"over-long varint at byte {pos}")


def as_int64(u: np.ndarray) -> np.ndarray:
    """Reinterpret uint64 varint values as int64 (protobuf's two's complement int64)."""
    return u.view(np.int64)


def _walk(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, stop_after: Optional[int] = None):
    """Walk the fields of many messages ``buf[starts[i]:ends[i]]`` at once, one field of
    every unfinished message per round. Yields (idx, field, wt, value, vstart, vend, end)
    per round: ``idx`` the messages still walking, ``value`` a varint's value, ``vstart``/
    ``vend`` the field's value bytes, ``end`` each message's end. A message stops at its
    end, at a malformed field, or at a field numbered above ``stop_after``."""
    idx = np.arange(len(starts))
    cur = starts.astype(np.int64).copy()
    end = ends.astype(np.int64)
    while len(idx):
        key, after_tag = varints(buf, cur)
        field = (key >> np.uint64(3)).astype(np.int64)
        wt = (key & np.uint64(7)).astype(np.int64)
        value = np.zeros(len(idx), dtype=np.uint64)
        vstart = after_tag.copy()
        vend = np.full(len(idx), -1, dtype=np.int64)
        is_var = wt == 0
        if is_var.any():
            value[is_var], vend[is_var] = varints(buf, after_tag[is_var])
        is_len = wt == 2
        if is_len.any():
            ln, p = varints(buf, after_tag[is_len])
            vstart[is_len] = p
            vend[is_len] = p + ln.astype(np.int64)
        vend[wt == 1] = after_tag[wt == 1] + 8
        vend[wt == 5] = after_tag[wt == 5] + 4
        yield idx, field, wt, value, vstart, vend, end
        go_on = (vend > cur) & (vend < end)
        if stop_after is not None:
            go_on &= field <= stop_after
        idx, cur, end = idx[go_on], vend[go_on], end[go_on]


def scalar_fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, wanted: Tuple[int, ...],
                  stop_after: int, present: Optional[Dict[int, np.ndarray]] = None) -> Dict[int, np.ndarray]:
    """Decode varint fields ``wanted`` of many messages at once (last occurrence wins).

    Messages are ``buf[starts[i]:ends[i]]``. Fields are walked in order and the walk stops
    at the first field numbered above ``stop_after`` (serializers write fields in number
    order, so later fields cannot be wanted ones). Returns field -> uint64 array, 0 where
    absent (protobuf's default); pass a dict as ``present`` to get field -> bool mask too.
    """
    n = len(starts)
    out = {f: np.zeros(n, dtype=np.uint64) for f in wanted}
    if present is not None:
        present.update({f: np.zeros(n, dtype=bool) for f in wanted})
    for idx, field, wt, value, _, vend, end in _walk(buf, starts, ends, stop_after):
        complete = (wt == 0) & (vend <= end)  # a varint cut by the message's end (or over-long) is no value
        for f in wanted:
            m = complete & (field == f)
            if m.any():
                out[f][idx[m]] = value[m]
                if present is not None:
                    present[f][idx[m]] = True
    return out


def submessages(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, field_no: int):
    """Byte ranges of every length-delimited field ``field_no`` inside each message.

    Returns (owner, sub_starts, sub_ends): ``owner[k]`` is the index (into ``starts``) of
    the message holding sub-message k.
    """
    owners, s_out, e_out = [], [], []
    for idx, field, wt, _, vstart, vend, end in _walk(buf, starts, ends):
        hit = (wt == 2) & (field == field_no) & (vend <= end)  # only whole sub-messages, as the C path
        owners.append(idx[hit])
        s_out.append(vstart[hit])
        e_out.append(vend[hit])
    if not owners:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    return np.concatenate(owners), np.concatenate(s_out), np.concatenate(e_out)


def decode_events(data: bytes, buf: np.ndarray, events_field: int = 4):
    """Split a serialized XLine and decode fields 1-3 (metadata_id, offset_ps, duration_ps)
    of every event. Returns (fields, starts, ends, metadata_id, offset, duration): writable
    arrays of shape (n_events,), the last three int64, ``starts``/``ends`` int32 from the C
    path and int64 from the numpy one. Raises WireError when the bytes are malformed."""
    if FAST:
        try:
            fields, *cols = _wirescan.scan_line(data, events_field)
        except ValueError as err:
            raise WireError(str(err)) from None
        starts, ends = (np.frombuffer(c, dtype=np.int32) for c in cols[:2])
        mid, offset, duration = (np.frombuffer(c, dtype=np.int64) for c in cols[2:])
        return fields, starts, ends, mid, offset, duration
    fields, starts, ends = split_line(bytes(data), events_field, buf)
    if len(starts) == 0:
        z = np.zeros(0, dtype=np.int64)
        return fields, starts, ends, z, z, z
    cols = scalar_fields(buf, starts, ends, (1, 2, 3), 3)
    return fields, starts, ends, as_int64(cols[1]), as_int64(cols[2]), as_int64(cols[3])


def stat_ints(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, stat_id: int):
    """Integer value of the first XStat with ``stat_id`` holding a value in each event
    payload [starts, ends) (TensorFlow's XEventVisitor also takes the first).

    Returns (values uint64, kind uint8): kind 0 absent, 3 uint64, 4 int64, 7 ref_value
    (an interned string id), 9 another kind (double, string: read it from the message)."""
    n = len(starts)
    if FAST and not isinstance(buf, np.ndarray):
        values, kinds = _wirescan.stat_ints(buf, np.ascontiguousarray(starts, dtype=np.int64),
                                            np.ascontiguousarray(ends, dtype=np.int64), int(stat_id))
        return np.frombuffer(values, dtype=np.uint64).copy(), np.frombuffer(kinds, dtype=np.uint8).copy()
    values = np.zeros(n, dtype=np.uint64)
    kinds = np.zeros(n, dtype=np.uint8)
    if not isinstance(buf, np.ndarray):
        buf = padded(bytes(buf))
    owner, ss, se = submessages(buf, starts, ends, 4)
    if len(owner) == 0:
        return values, kinds
    mid, value, kind = _stat_fields(buf, ss, se)
    hit = np.flatnonzero((mid == np.uint64(stat_id)) & (kind != 0))
    # Sub-messages come out in field order for each event: the first match of each event wins.
    _, first = np.unique(owner[hit], return_index=True)
    k = hit[first]
    values[owner[k]] = value[k]
    kinds[owner[k]] = kind[k]
    return values, kinds


def _stat_fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """(metadata_id, integer value, kind) of each XStat ``buf[starts[i]:ends[i]]``, as the C
    path reads them: the value is a oneof, so the last value field wins (kind 3/4/7 with its
    integer, 9 for a double, string or bytes); fields of other numbers or wire types are
    unknown ones and skipped; a malformed field ends the stat, what came before it stands."""
    n = len(starts)
    mid = np.zeros(n, dtype=np.uint64)
    value = np.zeros(n, dtype=np.uint64)
    kind = np.zeros(n, dtype=np.uint8)
    idx = np.arange(n)
    cur = starts.astype(np.int64).copy()
    end = ends.astype(np.int64)
    while len(idx):
        key, after_tag = varints(buf, cur)
        field = (key >> np.uint64(3)).astype(np.int64)
        wt = (key & np.uint64(7)).astype(np.int64)
        ok = after_tag <= end
        nxt = np.full(len(idx), -1, dtype=np.int64)
        is_var = ok & (wt == 0)
        if is_var.any():
            v, p = varints(buf, after_tag[is_var])
            whole = p <= end[is_var]
            nxt[is_var] = np.where(whole, p, -1)
            f, at = field[is_var], idx[is_var]
            m = whole & (f == 1)
            mid[at[m]] = v[m]
            m = whole & ((f == 3) | (f == 4) | (f == 7))
            value[at[m]] = v[m]
            kind[at[m]] = f[m]
        is_len = ok & (wt == 2)
        if is_len.any():
            ln, p = varints(buf, after_tag[is_len])
            pe = p + ln.astype(np.int64)
            whole = (p <= end[is_len]) & (pe <= end[is_len]) & (pe >= p)
            nxt[is_len] = np.where(whole, pe, -1)
            f = field[is_len]
            kind[idx[is_len][whole & ((f == 5) | (f == 6))]] = 9
        for w, size in ((1, 8), (5, 4)):
            is_fixed = ok & (wt == w)
            pe = after_tag[is_fixed] + size
            whole = pe <= end[is_fixed]
            nxt[is_fixed] = np.where(whole, pe, -1)
            if w == 1:
                kind[idx[is_fixed][whole & (field[is_fixed] == 2)]] = 9
        go_on = (nxt > cur) & (nxt < end)
        idx, cur, end = idx[go_on], nxt[go_on], end[go_on]
    return mid, value, kind
