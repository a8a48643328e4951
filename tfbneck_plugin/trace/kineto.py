"""Kineto traces: PyTorch's profiler output read into the same columns as an XSpace.

``torch.profiler`` (through libkineto) writes one Chrome-trace JSON file per process,
``<dir>/<worker>.<time>.pt.trace.json`` or ``.pt.trace.json.gz`` (the names
``torch.profiler.tensorboard_trace_handler`` gives). Its layout, from kineto's
``libkineto/src/output_json.cpp`` and the files PyTorch wrote from 2021 on:

    top level   ``schemaVersion``, ``deviceProperties`` (one dict per GPU),
                ``distributedInfo`` (``backend``, ``rank``, ``world_size``; absent or
                partial in some files), ``traceEvents``; a bare list of events is also
                accepted (the Chrome trace array form).
    an event    ``ph`` (``X``: a complete event; ``M``: metadata such as ``thread_name``;
                ``s``/``f``: flows; ``i``: instants), ``cat``, ``name``, ``pid``, ``tid``,
                ``ts`` and ``dur`` in microseconds (integers, or fractions of a
                microsecond since 2023), ``args``.
    categories  host: ``cpu_op`` (``Operator`` before 2022), ``user_annotation``
                (``record_function``, ``ProfilerStep#N``, the DataLoader's
                ``enumerate(DataLoader)#...__next__``), ``python_function``,
                ``cuda_runtime``/``cuda_driver`` (``Runtime``/``Driver``; HIP calls under
                the same names on ROCm); device: ``kernel``/``gpu_memcpy``/``gpu_memset``
                (``Kernel``/``Memcpy``/``Memset``) with ``args.device`` and
                ``args.stream``. ``gpu_user_annotation`` repeats user annotations on the
                device rows, ``cuda_sync`` marks waits on a stream, ``ac2g``/``fwdbwd`` are
                flows and ``Trace`` is the whole window: none of them is activity.

:func:`read_kineto` turns a file into a :class:`KinetoSpace`: a ``/host:CPU`` plane with one
line per thread and one ``/device:GPU:N`` plane per device with one line per stream, each
line as the int64 ps columns the analysis reads from an XSpace (:class:`.xspace.Line`).
Events keep their names; the host plane's metadata ids carry their category
(:attr:`KinetoSpace.categories`). Parsing uses orjson (about 1 GB/s of JSON on one core). A
file of :data:`CHUNKED_MIN_BYTES` or more is parsed a slice of events at a time
(:func:`event_slices` finds them with numpy, without parsing), so that only one slice is held as
Python objects while the events become columns: on a 134 MB trace of 687k events the peak
resident memory of the read is 0.31 GB instead of 1.1 GB (VmHWM; benchmarks/bench_torch_vs_hta.py).

Errors: every failure raises :class:`.xspace.TraceReadError`, one line naming the file.
"""
from __future__ import annotations

import gzip
import os
import re
import stat
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np
import orjson

from ..errors import first_line
from .tracefile import read_bytes
from .xspace import Line, Plane, Space, TraceReadError, XPlane

#: File names ``tensorboard_trace_handler`` writes (torch/profiler/profiler.py).
KINETO_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")

#: Device-side activity, both spellings (2021: ``Kernel``/``Memcpy``/``Memset``).
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
#: Complete events that are not activity: annotations repeated on device rows, stream
#: waits (``cuda_sync``: the device is not busy), the whole-window span (``Trace``).
SKIPPED_CATEGORIES = frozenset({"gpu_user_annotation", "cuda_sync", "Trace", "ac2g", "fwdbwd"})
#: Host op categories (``cpu_op`` since 2022, ``Operator`` before).
OP_CATEGORIES = frozenset({"cpu_op", "Operator"})
#: CPU-side runtime and driver API calls (CUDA or HIP).
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
#: User annotations (``record_function``), which carry the step and DataLoader markers.
ANNOTATION_CATEGORIES = frozenset({"user_annotation", "User annotation"})

_DIGITS = re.compile(r"-?\d+")
#: Kineto's times are microseconds since the epoch (1.7e15 in 2024): in ps they overflow
#: int64 (9.2e18 ps is 106 days). Times are kept relative to the start of the 30-day period
#: holding the first event, a fixed calendar origin, so the files of one job's ranks share
#: it (unless their windows straddle a period boundary).
ORIGIN_PERIOD_US = 30 * 86400 * 1_000_000


#: Names a Kineto trace takes when the script saves it itself (``prof.export_chrome_trace("trace.json")``
#: writes the same JSON as the handler, torch/profiler/profiler.py): such a file is read as one
#: when the user names it and its start says so (:func:`looks_like_kineto`). A logdir is searched
#: by :data:`KINETO_SUFFIXES` only, so a folder's other ``.json`` files are never read as traces.
EXPORTED_SUFFIXES = (".json", ".json.gz")
#: Bytes of a named ``.json`` file :func:`looks_like_kineto` reads: the top-level keys kineto
#: writes before ``traceEvents`` (``schemaVersion``, ``deviceProperties``: about 1 kB per GPU,
#: ``distributedInfo``) fit (our bound).
SNIFF_BYTES = 64 * 1024
#: Top-level keys of kineto's JSON (libkineto/src/output_json.cpp) beside ``traceEvents``; one of
#: them tells its trace from another Chrome trace (TensorFlow's ``*.trace.json.gz`` has neither).
_KINETO_KEYS = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')


def is_kineto_file(name: str) -> bool:
    """Whether a session's trace file is a Kineto trace, by its name: ``*.pt.trace.json[.gz]``,
    or a ``.json[.gz]`` named as PATH that :func:`looks_like_kineto` accepted (a session's other
    files are ``.xplane.pb``)."""
    return str(name).endswith(KINETO_SUFFIXES + EXPORTED_SUFFIXES)


def looks_like_kineto(path: str) -> bool:
    """Whether the local file ``path``, named ``.json`` or ``.json.gz``, begins as a Kineto trace:
    a JSON object whose first :data:`SNIFF_BYTES` (inflated for ``.gz``) name ``traceEvents`` and
    one of :data:`_KINETO_KEYS`. False for other names, files that are not regular (a FIFO would
    block) and files that cannot be read; never raises."""
    path = str(path)
    if not path.endswith(EXPORTED_SUFFIXES):
        return False
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as raw:
            if path.endswith(".gz"):
                with gzip.GzipFile(fileobj=raw) as f:
                    head = f.read(SNIFF_BYTES)
            else:
                head = raw.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error, ValueError):
        return False
    head = head.lstrip()
    return head.startswith(b"{") and b'"traceEvents"' in head and any(k in head for k in _KINETO_KEYS)


def worker_name(filename: str) -> str:
    """``host_123.1700000000000.pt.trace.json.gz`` -> ``host_123.1700000000000``: the file's
    name less the Kineto suffix (the handler's ``<worker>.<time>``); a trace saved as
    ``trace.json[.gz]`` (:data:`EXPORTED_SUFFIXES`) -> ``trace``."""
    base = os.path.basename(str(filename))
    for suffix in sorted(KINETO_SUFFIXES, key=len, reverse=True) + sorted(EXPORTED_SUFFIXES, key=len, reverse=True):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


@dataclass
class KinetoSpace(Space):
    """A Kineto trace as planes of columns (see the module docstring), with what the file
    says about its run.

    ``categories``: metadata id of the host plane -> the events' category (``cpu_op``...).
    ``correlations``: (plane name, line index) -> the CUPTI/roctracer ``correlation`` id of each
    event of that line (in the line's order), -1 where an event has none; only lines holding
    runtime calls or device activity are present. A kernel, copy or memset carries the id
    of the runtime call that launched it (``cudaLaunchKernel``...), on the host thread that
    made it (kineto's ``libkineto/src/output_json.cpp`` writes ``args.correlation`` on both).
    ``time_quantum_ps``: how far apart the doubles holding the file's start times lie at its
    latest time (a quarter microsecond for times since the epoch, 1.7e15 us; half a
    nanosecond for times since boot): two starts closer than that may be in either order.
    ``distributed``: the ``distributedInfo`` keys present (``backend``, ``rank``,
    ``world_size``), empty when the file has none. ``device_names``: device index -> the
    name ``deviceProperties`` gives (``NVIDIA A100-PG509-200``). ``skipped``: complete
    events left out because their time was not a number.
    """
    categories: Dict[int, str] = field(default_factory=dict)
    distributed: Dict[str, object] = field(default_factory=dict)
    device_names: Dict[int, str] = field(default_factory=dict)
    skipped: int = 0
    correlations: Dict[Tuple[str, int], np.ndarray] = field(default_factory=dict)
    time_quantum_ps: int = 0

    @property
    def profiler(self) -> str:
        """Which profiler wrote the file."""
        return "torch.profiler (Kineto)"


def read_kineto(path: str, opener=open) -> KinetoSpace:
    """Read one ``.pt.trace.json[.gz]`` file into a :class:`KinetoSpace`.

    ``opener`` opens a path for binary reading (``fsspec.open`` for remote paths). Size
    limits and gzip are :func:`.tracefile.read_bytes`'s. Raises TraceReadError (one line,
    names the file), of kind ``corrupt`` for JSON that does not parse (truncated files
    included) and for JSON that is not a trace (no ``traceEvents`` list, no complete event).
    """
    data = read_bytes(path, opener)
    split = event_slices(data) if len(data) >= CHUNKED_MIN_BYTES else None
    if split is not None:
        head, slices = split
        try:
            meta = orjson.loads(head)
        except orjson.JSONDecodeError:
            meta = None
        if isinstance(meta, dict) or (meta == [] and not head.lstrip().startswith(b"{")):
            return _to_space(str(path), _chunked_events(path, data, slices), meta if isinstance(meta, dict) else {})
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise TraceReadError(path, f"not valid JSON, truncated or corrupt ({first_line(err)})") from None
    del data
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        meta = doc
    else:
        events, meta = doc, {}
    if not isinstance(events, list):
        raise TraceReadError(path, "not a PyTorch profiler (Kineto) trace: no traceEvents list", kind="corrupt")
    return _to_space(str(path), events, meta)


#: Files from this size (bytes of JSON) are parsed in slices of events (:func:`event_slices`):
#: the whole file parsed at once holds every event as Python objects, about 5x the JSON's size
#: at the peak (1.1 GB for a 134 MB trace of 687k events, measured with VmHWM), where a slice
#: at a time holds the JSON, the columns and one slice.
CHUNKED_MIN_BYTES = 4 * 1024 * 1024
#: Events per slice.
EVENTS_PER_SLICE = 20_000
#: Bytes scanned at a time by :func:`event_slices` (bounds its numpy arrays).
SCAN_WINDOW = 8 * 1024 * 1024


def event_slices(data: bytes):
    """Where the events of ``data`` (a Chrome-trace JSON document) lie, without parsing them:
    ``(head, slices)`` where ``head`` is the document with an empty ``traceEvents`` array (or
    ``[]`` for the bare array form) and ``slices`` are ``(start, end)`` byte ranges, each the
    comma-separated text of up to :data:`EVENTS_PER_SLICE` events. None when the layout is not
    recognised or the brackets do not balance (the caller then parses the whole document, and
    reports its error).

    The scan finds the structural characters outside strings (a quote ends a string unless an
    odd run of backslashes precedes it) in windows of :data:`SCAN_WINDOW` bytes with numpy,
    keeping the nesting depth and the in-string parity across windows.
    """
    start = len(data) - len(data.lstrip())
    if start >= len(data):
        return None
    bare = data[start:start + 1] == b"["
    if bare:
        arr_open = start
    else:
        key = data.find(b'"traceEvents"')
        if key < 0:
            return None
        rest = data[key + 13:key + 13 + 64].lstrip()
        if not rest.startswith(b":") or not rest[1:].lstrip().startswith(b"["):
            return None
        arr_open = data.index(b"[", key + 13)
    item_depth = None      # depth inside the events array, once its '[' is reached
    commas: List[int] = []
    arr_close = -1
    depth, parity = 0, 0
    for w0 in range(0, len(data), SCAN_WINDOW):
        a = np.frombuffer(data, dtype=np.uint8, count=min(SCAN_WINDOW, len(data) - w0), offset=w0)
        q = np.flatnonzero(a == 34) + w0
        if len(q):
            maybe = q[q > 0]
            maybe = maybe[np.frombuffer(data, dtype=np.uint8)[maybe - 1] == 92] if len(maybe) else maybe
            if len(maybe):
                escaped = [p for p in maybe.tolist() if _backslashes_before(data, p) % 2 == 1]
                if escaped:
                    q = np.setdiff1d(q, np.asarray(escaped, dtype=q.dtype), assume_unique=True)
        structural = np.flatnonzero((a == 123) | (a == 125) | (a == 91) | (a == 93) | (a == 44))
        if len(structural):
            in_string = (np.searchsorted(q, structural + w0) + parity) & 1
            structural = structural[in_string == 0]
            ch = a[structural]
            delta = np.where((ch == 123) | (ch == 91), 1, np.where(ch == 44, 0, -1))
            before = depth + np.cumsum(delta) - delta
            pos = structural + w0
            if item_depth is None:
                hit = np.flatnonzero(pos == arr_open)
                if len(hit):
                    if int(before[hit[0]]) != (0 if bare else 1):
                        return None
                    item_depth = int(before[hit[0]]) + 1
            if item_depth is not None and arr_close < 0:
                inside = pos > arr_open
                closes = np.flatnonzero(inside & (ch == 93) & (before == item_depth))
                end = int(pos[closes[0]]) if len(closes) else None
                sel = inside & (ch == 44) & (before == item_depth)
                if end is not None:
                    sel &= pos < end
                    arr_close = end
                commas.extend(pos[sel].tolist())
            depth = int(before[-1] + delta[-1])
        parity = (parity + len(q)) & 1
    if item_depth is None or arr_close < 0 or depth != 0 or parity:
        return None
    bounds = [arr_open] + commas + [arr_close]
    slices = [(bounds[i] + 1, bounds[min(i + EVENTS_PER_SLICE, len(bounds) - 1)])
              for i in range(0, len(bounds) - 1, EVENTS_PER_SLICE)]
    head = data[:arr_open + 1] + data[arr_close:]
    return head, slices


def _backslashes_before(data: bytes, pos: int) -> int:
    """How many backslashes directly precede ``data[pos]``."""
    k = pos - 1
    while k >= 0 and data[k] == 92:
        k -= 1
    return pos - 1 - k


def _chunked_events(path: str, data: bytes, slices):
    """The events of ``data``'s slices, one slice parsed at a time (:func:`event_slices`)."""
    view = memoryview(data)
    for a, b in slices:
        if not view[a:b].tobytes().strip():
            continue
        text = bytearray(b"[")
        text += view[a:b]
        text += b"]"
        try:
            part = orjson.loads(text)
        except orjson.JSONDecodeError as err:
            raise TraceReadError(path, f"not valid JSON, truncated or corrupt ({first_line(err)})") from None
        del text
        yield from part


class _Columns:
    """One line's events while the file is read: parallel lists."""
    __slots__ = ("ts", "dur", "ids", "corr", "linked")

    def __init__(self):
        self.ts: List[float] = []
        self.dur: List[float] = []
        self.ids: List[int] = []
        self.corr: List[int] = []       # correlation id (runtime calls, device activity), -1 if none
        self.linked = False             # whether any event of the line has one


def _int_id(value, fallback: int) -> int:
    """A pid/tid/device/stream as an int: kineto writes ints, older files strings such as
    ``stream 7``; the digits in a string, else ``fallback``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _DIGITS.search(str(value))
    return int(m.group()) if m else fallback


@dataclass
class _Collected:
    """A file's complete events grouped by line while it is read."""
    host_lines: Dict[Tuple[object, object], _Columns]
    dev_lines: Dict[Tuple[int, int], _Columns]
    host_ids: Dict[Tuple[str, str], int]      # (category, name) -> metadata id
    dev_ids: Dict[str, int]                   # name -> metadata id
    thread_names: Dict[Tuple[object, object], str]
    skipped: int


def _collect(events) -> _Collected:
    """Group the complete events by host thread and device stream (module docstring)."""
    host_lines: Dict[Tuple[object, object], _Columns] = {}
    dev_lines: Dict[Tuple[int, int], _Columns] = {}
    host_ids: Dict[Tuple[str, str], int] = {}
    dev_ids: Dict[str, int] = {}
    thread_names: Dict[Tuple[object, object], str] = {}
    skipped = 0
    num = (int, float)
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph != "X":
            if ph == "M" and e.get("name") == "thread_name":
                args = e.get("args")
                if isinstance(args, dict) and isinstance(args.get("name"), str):
                    thread_names[(e.get("pid"), e.get("tid"))] = args["name"].strip()
            continue
        cat = e.get("cat")
        if cat in SKIPPED_CATEGORIES:
            continue
        ts, dur = e.get("ts"), e.get("dur", 0)
        if type(ts) not in num or type(dur) not in num:
            skipped += 1
            continue
        name = e.get("name")
        name = name if isinstance(name, str) else str(name)
        corr = -1
        if cat in DEVICE_CATEGORIES:
            args = e.get("args")
            args = args if isinstance(args, dict) else {}
            corr = args.get("correlation", -1)
            dev = _int_id(args.get("device", e.get("pid")), 0)
            stream = _int_id(args.get("stream", e.get("tid")), 0)
            cols = dev_lines.get((dev, stream))
            if cols is None:
                cols = dev_lines[(dev, stream)] = _Columns()
            mid = dev_ids.get(name)
            if mid is None:
                mid = dev_ids[name] = len(dev_ids) + 1
        else:
            key = (e.get("pid"), e.get("tid"))
            cols = host_lines.get(key)
            if cols is None:
                cols = host_lines[key] = _Columns()
            ck = (str(cat), name)
            mid = host_ids.get(ck)
            if mid is None:
                mid = host_ids[ck] = len(host_ids) + 1
            if cat in RUNTIME_CATEGORIES:
                args = e.get("args")
                corr = args.get("correlation", -1) if isinstance(args, dict) else -1
        cols.ts.append(ts)  # type: ignore[arg-type]  # checked numeric above
        cols.dur.append(dur)
        cols.ids.append(mid)
        if type(corr) is not int:
            corr = -1
        elif corr >= 0:
            cols.linked = True
        cols.corr.append(corr)
    return _Collected(host_lines, dev_lines, host_ids, dev_ids, thread_names, skipped)


def _to_space(path: str, events, meta: dict) -> KinetoSpace:
    c = _collect(events)
    host_lines, dev_lines, host_ids, dev_ids, skipped = c.host_lines, c.dev_lines, c.host_ids, c.dev_ids, c.skipped
    every = list(host_lines.values()) + list(dev_lines.values())
    if not every:
        if skipped:
            raise TraceReadError(path, f"none of its {skipped} complete events has a numeric time", kind="corrupt")
        raise TraceReadError(path, "not a PyTorch profiler (Kineto) trace: it holds no complete (ph X) events",
                             kind="corrupt")
    first = min(min(cols.ts) for cols in every)
    last = max(max(max(cols.ts), -min(cols.ts)) for cols in every)
    quantum_ps = int(np.ceil(float(np.spacing(np.float64(last))) * 1e6))
    base_us = int(np.floor(first / ORIGIN_PERIOD_US)) * ORIGIN_PERIOD_US

    planes: List[Plane] = []
    lines = []
    correlations: Dict[Tuple[str, int], np.ndarray] = {}
    for k, ((pid, tid), cols) in enumerate(sorted(host_lines.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))):
        name = c.thread_names.get((pid, tid)) or f"thread {tid}"
        lines.append(_line(_int_id(tid, k), f"{name} ({pid}/{tid})" if len(host_lines) > 1 else name, cols, base_us,
                           correlations, ("/host:CPU", k)))
    host_names = {i: n for (_c, n), i in host_ids.items()}
    if lines:
        planes.append(Plane(id=0, name="/host:CPU", lines=lines, event_names=host_names, stat_names={},
                            proto=XPlane(id=0, name="/host:CPU")))
    device_names = _device_names(meta)
    vendor = _vendor(device_names, host_names)
    dev_names = {i: n for n, i in dev_ids.items()}
    for dev in sorted({d for d, _s in dev_lines}):
        keys = [(d, stream) for d, stream in sorted(dev_lines) if d == dev]
        dl = [_line(stream, f"Stream #{stream}", dev_lines[(d, stream)], base_us, correlations,
                    (f"/device:GPU:{dev}", k)) for k, (d, stream) in enumerate(keys)]
        proto = XPlane(id=dev + 1, name=f"/device:GPU:{dev}")
        if vendor:
            proto.stat_metadata[1].id = 1
            proto.stat_metadata[1].name = "device_vendor"
            proto.stats.add(metadata_id=1, str_value=vendor)
        planes.append(Plane(id=dev + 1, name=f"/device:GPU:{dev}", lines=dl, event_names=dev_names,
                            stat_names={1: "device_vendor"} if vendor else {}, proto=proto))
    dist = meta.get("distributedInfo")
    distributed = {k: dist[k] for k in ("backend", "rank", "world_size") if k in dist} if isinstance(dist, dict) else {}
    hostname = meta.get("host_name")
    return KinetoSpace(path=path, planes=planes, hostnames=[hostname] if isinstance(hostname, str) else [],
                       errors=[], warnings=[], categories={i: c for (c, _n), i in host_ids.items()},
                       distributed=distributed, device_names=device_names, skipped=skipped,
                       correlations=correlations, time_quantum_ps=quantum_ps)


def _line(line_id: int, name: str, cols: _Columns, base_us: int, correlations: Dict[Tuple[str, int], np.ndarray],
          key: Tuple[str, int]) -> Line:
    """A line's columns: ps since ``base_us`` (:data:`ORIGIN_PERIOD_US`), as exact as the
    double a JSON number parses to (1 ns for times since boot, 4.5e12 us; a quarter
    microsecond for times since the epoch, 1.7e15 us), sorted
    by start, longer events first at equal starts (enclosing before enclosed, as nesting
    needs). The events' correlation ids, in the same order, go to ``correlations[key]``
    when the line has any."""
    ts = np.asarray(cols.ts, dtype=np.float64)
    dur = np.maximum(np.asarray(cols.dur, dtype=np.float64), 0.0)
    start = np.rint((ts - base_us) * 1e6).astype(np.int64)
    dur_ps = np.rint(dur * 1e6).astype(np.int64)
    ids = np.asarray(cols.ids, dtype=np.int64)
    order = np.lexsort((-dur_ps, start))
    if cols.linked:
        correlations[key] = np.asarray(cols.corr, dtype=np.int64)[order]
    n = len(order)
    empty = np.zeros(0, dtype=np.uint8)
    zeros = np.zeros(n, dtype=np.int32)
    return Line(id=line_id, name=name, display_name=name, start_ps=start[order], dur_ps=dur_ps[order],
                name_id=ids[order], buf=empty, ev_start=zeros, ev_end=zeros)


def _device_names(meta: dict) -> Dict[int, str]:
    props = meta.get("deviceProperties")
    out: Dict[int, str] = {}
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and isinstance(p.get("id"), int) and isinstance(p.get("name"), str):
                out[p["id"]] = p["name"]
    return out


def _vendor(device_names: Dict[int, str], host_names: Dict[int, str]) -> str:
    """``AMD`` or ``Nvidia`` (the vendor names TensorFlow's device planes carry), from the
    devices' names or, without them, from the runtime calls (``hip*`` on ROCm)."""
    text = " ".join(device_names.values()).upper()
    if "AMD" in text or "RADEON" in text or "INSTINCT" in text:
        return "AMD"
    if text:
        return "Nvidia"
    if any(n.startswith("hip") for n in host_names.values()):
        return "AMD"
    if any(n.startswith("cuda") for n in host_names.values()):
        return "Nvidia"
    return ""
