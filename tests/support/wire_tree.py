"""A protobuf wire-format tree of an XSpace, for the fuzz tests: parse, mutate, re-serialize.

Written for tests/test_fuzz.py. Independent of ``tfbneck_plugin.wire`` on purpose (a fuzzer
that shared the reader's decoder would share its blind spots). Only the wire format
(https://protobuf.dev/programming-guides/encoding/) and the field numbers of
``tsl/profiler/protobuf/xplane.proto`` are assumed.

A node is ``(field, wire_type, value)``: ``value`` is an int (varint), bytes (fixed32,
fixed64, or a length-delimited leaf) or a list of child nodes (a length-delimited
sub-message of the XSpace schema). ``serialize`` writes a tree back with correct lengths,
so a mutation deep inside (a huge varint, a wrong wire type) keeps every enclosing message
well framed and reaches the code that decodes events and stats.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

#: For each message: field number -> message type of a length-delimited sub-message.
SUBMESSAGES: Dict[str, Dict[int, str]] = {
    "XSpace": {1: "XPlane"},
    "XPlane": {3: "XLine", 4: "EventMetadataEntry", 5: "StatMetadataEntry", 6: "XStat"},
    "XLine": {4: "XEvent"},
    "XEvent": {4: "XStat"},
    "EventMetadataEntry": {2: "XEventMetadata"},
    "StatMetadataEntry": {2: "XStatMetadata"},
    "XEventMetadata": {5: "XStat"},
    "XStatMetadata": {},
    "XStat": {},
}

Node = Tuple[int, int, object]


class WireParseError(ValueError):
    pass


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128 of ``value % 2**64`` (negative int64 take 10 bytes, as protobuf writes them)."""
    value %= 2 ** 64
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise WireParseError("varint runs past the end")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise WireParseError("over-long varint")


def parse(data: bytes, msg: str = "XSpace") -> List[Node]:
    """The tree of a well-formed serialized ``msg``."""
    return _parse(data, 0, len(data), msg, None)


def _parse(data: bytes, pos: int, end: int, msg: str, bounds: Optional[list]) -> List[Node]:
    out: List[Node] = []
    subs = SUBMESSAGES.get(msg, {})
    while pos < end:
        if bounds is not None:
            bounds.append(pos)
        key, pos = _read_varint(data, pos)
        field, wt = key >> 3, key & 7
        if wt == 0:
            value, pos = _read_varint(data, pos)
        elif wt == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wt == 5:
            value, pos = data[pos:pos + 4], pos + 4
        elif wt == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > end:
                raise WireParseError("length runs past the end")
            if field in subs:
                if bounds is not None:
                    bounds.append(pos)
                value = _parse(data, pos, pos + length, subs[field], bounds)
            else:
                value = data[pos:pos + length]
            pos += length
        else:
            raise WireParseError(f"wire type {wt}")
        out.append((field, wt, value))
    if pos != end:
        raise WireParseError("field runs past the end")
    return out


def field_boundaries(data: bytes, msg: str = "XSpace") -> List[int]:
    """Every offset where a field (at any depth) or a sub-message payload starts, plus the
    end: the places where a half-written file can stop. Sorted, unique."""
    bounds: List[int] = []
    _parse(data, 0, len(data), msg, bounds)
    bounds.append(len(data))
    return sorted(set(bounds))


def serialize(nodes: List[Node], replace: Optional[Dict[int, object]] = None,
              cache: Optional["Cache"] = None) -> bytes:
    """Bytes of a tree. ``replace`` maps ``id(node)`` to a replacement: a node, a list of
    nodes (spliced in; empty to drop it), or raw bytes written verbatim instead of it.
    With a ``Cache`` of the tree, only the messages enclosing a replaced node are rebuilt."""
    out = bytearray()
    dirty = cache.dirty(replace or {}) if cache is not None else None
    _write(nodes, replace or {}, out, cache if dirty is not None else None, dirty)
    return bytes(out)


class Cache:
    """Each node's encoding and parent, so that a mutated copy of a large tree costs only
    the path from the root to the mutation."""

    def __init__(self, nodes: List[Node]):
        self.parent: Dict[int, Node] = {}
        self.encoded: Dict[int, bytes] = {}
        self._fill(nodes, None)

    def _fill(self, nodes, parent):
        for node in nodes:
            if parent is not None:
                self.parent[id(node)] = parent
            if isinstance(node[2], list):
                self._fill(node[2], node)
            self.encoded[id(node)] = serialize([node])

    def dirty(self, replace) -> set:
        out = set()
        for key in replace:
            node = self.parent.get(key)
            while node is not None and id(node) not in out:
                out.add(id(node))
                node = self.parent.get(id(node))
        return out


def _write(nodes, replace, out: bytearray, cache=None, dirty=None) -> None:
    for node in nodes:
        r = replace.get(id(node), node)
        if r is node and cache is not None and id(node) not in dirty and id(node) in cache.encoded:
            out += cache.encoded[id(node)]
        elif isinstance(r, list):  # spliced: the node itself may be among them (written as it is)
            for item in r:
                if item is node:
                    out += cache.encoded[id(node)] if cache is not None else serialize([node])
                else:
                    _write_one(item, replace, out, cache, dirty)
        else:
            _write_one(r, replace, out, cache, dirty)


def _write_one(r, replace, out: bytearray, cache=None, dirty=None) -> None:
    if isinstance(r, (bytes, bytearray)):
        out += r
        return
    field, wt, value = r
    out += encode_varint(field << 3 | wt)
    if wt == 0:
        out += encode_varint(value)
    elif wt in (1, 5):
        out += value
    elif wt == 2:
        if isinstance(value, (bytes, bytearray)):
            payload = value
        else:
            buf = bytearray()
            _write(value, replace, buf, cache, dirty)
            payload = bytes(buf)
        out += encode_varint(len(payload))
        out += payload
    # wire types 3, 4, 6, 7: a bare tag (the fuzzer writes invalid ones on purpose)


def walk(nodes: List[Node], msg: str = "XSpace", path: Tuple = ()):
    """Every node with its message type and the list of (message type, field) above it."""
    subs = SUBMESSAGES.get(msg, {})
    for node in nodes:
        field, wt, value = node
        yield node, msg, path
        if isinstance(value, list):
            yield from walk(value, subs[field], path + ((msg, field),))
