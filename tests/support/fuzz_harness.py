"""Machinery of tests/test_fuzz.py: seed traces, mutations, and the subprocess worker pool.

* **Seeds**: small real traces from ../shared/realtraces (when present; else those committed in
  tests/data/) and traces built
  with the project's schema (tests/support/xspace_builder.py) that reach every analysis path:
  step markers, tf.data stages with producer/consumer links, GPU streams, copies,
  collectives, a device ``Steps`` line, JAX metadata.
* **Mutations** (each returns new bytes): bit flips, truncation at a protobuf field
  boundary, huge/over-long varints, wrong wire types, lying length prefixes, extreme event
  and line times, deep nesting (nested messages and groups), ref-stat cycles, duplicated,
  dropped and grafted nodes. Tree mutations go through ``wire_tree`` so that the enclosing
  messages stay well framed and the damage reaches the event and stat decoders.
* **Constructions**: inputs too large or too regular for random mutation (a line with
  millions of zero-length events, 100,000 nested events, 100,000 lines...), built from raw
  bytes in a fraction of a second.
* **Worker**: ``tests/fuzz_worker.py`` in a subprocess with an address-space cap; the
  parent kills it when one input takes longer than the time bound.
"""
from __future__ import annotations

import glob
import json
import os
import re
import select
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Tuple

from support import wire_tree as wt
from support.paths import TESTS
from support.xspace_builder import SpaceBuilder

# ----------------------------------------------------------------------------------------
# Seeds
# ----------------------------------------------------------------------------------------

#: Real traces used as seeds: the small ones (fast to analyse many times), one per source.
REAL_SEEDS = (
    "amd-jax/jax08_gemm/plugins/profile/session/tw003.xplane.pb",
    "laptop-cpu/eager_inference/train/plugins/profile/2023_09_19_17_36_40/hoon-950QED.xplane.pb",
    "pfe-thesis-gpu/cnn_prefetch8/train/plugins/profile/2021_02_03_16_14_38/sandor.xplane.pb",
)


#: Real traces committed in tests/data/ (real TensorFlow runs: tests/data/make_traces.py):
#: the real seeds where ../shared/realtraces is absent, so that a clone fuzzes real traces too.
DATA_SEEDS = ("step_markers_tf_keras", "train_function_calls", "iterator_cadence")


def real_seeds(realtraces: Optional[str]) -> Dict[str, bytes]:
    out = {}
    if realtraces:
        for rel in REAL_SEEDS:
            p = os.path.join(realtraces, rel)
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    out["real:" + rel.split("/plugins/")[0]] = f.read()
    return out


def data_seeds(data_dir: str) -> Dict[str, bytes]:
    """The traces of DATA_SEEDS (plain ``.xplane.pb``), by name."""
    out = {}
    for name in DATA_SEEDS:
        for p in glob.glob(os.path.join(data_dir, name, "plugins", "profile", "*", "*.xplane.pb")):
            with open(p, "rb") as f:
                out["data:" + name] = f.read()
    return out


def tf_cpu_trace() -> bytes:
    """A CPU-only tf.keras-like trace: markers, FunctionRun/_p -> executor/_c, a tf.data
    pipeline whose map function runs through FunctionRun on a tf.data thread."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    gn = host.line("tf_data_iterator_get_next/1")
    cp = host.line("tf_Compute/2")
    td = host.line("tf_data_private_threadpool/3")
    for k in range(4):
        t = k * 10_000
        py.event("train", t, 10_000, step_num=k + 1, _r=1)
        py.event("FunctionRun", t + 1000, 8000, _r=1, _p=100 + k, _pt=2, id=k)
        py.event("EagerKernelExecute", t + 9000, 300)
        gn.event("IteratorGetNextOp::DoCompute", t + 1000, 5000, id=k)
        gn.event("Iterator::Root::Prefetch", t + 1000, 5000, parallelism=-1, autotune=True)
        gn.event("Iterator::Root::Prefetch::ParallelMapV2", t + 1100, 4800, parallelism=4)
        cp.event("ExecutorState::Process", t + 6000, 2500, _c=100 + k, _ct=2)
        cp.event("IteratorGetNext:IteratorGetNext", t + 6100, 100)
        td.event("ParallelMapProduce", t + 200, 3000)
        td.event("FunctionRun", t + 300, 2500, _p=900 + k)
        td.event("Iterator::Root::Prefetch::ParallelMapV2::TFRecord", t + 400, 300, allocator_name="cpu")
        cp.event("ExecutorState::Process", t + 400, 2000, _c=900 + k)
        cp.event("MemoryAllocation", t + 500, 1, allocator_name="pluggable_device_host_bfc")
    return b.bytes()


def tf_gpu_trace() -> bytes:
    """A GPU host: launches, streams with kernels/copies/NCCL, derived lines, a Steps line."""
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    cp = host.line("tf_Compute/2")
    gpu = b.plane("/device:GPU:0").plane_stat("device_vendor", "Nvidia")
    comp = gpu.line("Stream #1(Compute)", line_id=1)
    copy = gpu.line("Stream #9(MemcpyH2D)", line_id=9)
    steps = gpu.line("Steps", line_id=20)
    ops = gpu.line("TensorFlow Ops", line_id=21)
    for k in range(3):
        t = k * 10_000
        py.event("train_function", t, 9_000)
        py.event("FunctionRun", t, 9000, _p=50 + k, _r=1)
        cp.event("ExecutorState::Process", t + 100, 1000, _c=50 + k)
        cp.event("cudaLaunchKernel", t + 200, 20, correlation_id=2 ** 64 - 1 - k)
        cp.event("Send:_Send", t + 300, 5)
        cp.event("x:CollectiveReduceV2", t + 400, 50)
        for j in range(5):
            comp.event("volta_sgemm_128x64", t + 1000 + j * 1000, 600, correlation_id=k * 10 + j)
        comp.event("ncclKernel_AllReduce", t + 7000, 500)
        copy.event("MemcpyH2D", t + 500, 300, bytes_transferred=1 << 20)
        copy.event("MemcpyD2H", t + 8000, 100)
        steps.event(str(k), t, 10_000)
        ops.event("dense/MatMul", t + 1000, 4000)
    tpu = b.plane("/device:TPU:0")
    tpu.line("XLA Ops").event("fusion.1", 100, 50)
    meta = b.plane("/host:metadata")
    meta.plane_stat("tf_version", "2.15.0")
    return b.bytes()


def jax_trace() -> bytes:
    b = SpaceBuilder()
    b.plane("/host:metadata").plane_stat("jax_version", "0.4.30")
    host = b.plane("/host:CPU")
    host.line("python").event("PjitFunction(step)", 0, 1000)
    gpu = b.plane("/device:GPU:0")
    gpu.line("Stream #1").event("fusion", 10, 500)
    return b.bytes()


def builder_seeds() -> Dict[str, bytes]:
    return {"built:tf_cpu": tf_cpu_trace(), "built:tf_gpu": tf_gpu_trace(), "built:jax": jax_trace()}


class Seed:
    """One seed trace, parsed once: its tree, its nodes by kind, its field boundaries."""

    def __init__(self, name: str, data: bytes, parse: bool = True):
        self.name = name
        self.data = data
        if not parse:
            return
        self.tree = wt.parse(data)
        self.cache = wt.Cache(self.tree)
        assert self.render({}) == data, f"{name}: the wire tree does not round-trip"
        walked = list(wt.walk(self.tree))
        self.all = [n for n, _m, _p in walked]
        self.varints = [n for n in self.all if n[1] == 0]
        self.delimited = [n for n in self.all if n[1] == 2]
        #: (node, message type) of every sub-message
        self.messages = [(n, wt.SUBMESSAGES[m][n[0]]) for n, m, _p in walked
                         if n[1] == 2 and isinstance(n[2], list)]
        self.timed = [(n, m) for n, m in self.messages if m in ("XEvent", "XLine")]
        self.stats = [n for n, m in self.messages if m == "XStat"]
        self.stat_entries = [n for n, m in self.messages if m == "StatMetadataEntry"]
        self.stat_ids = sorted({field_value(n, 1) for n in self.stat_entries}) or [0]
        self.boundaries = wt.field_boundaries(data)
        self.top_level_boundaries = []
        pos = 0
        for node in self.tree:
            self.top_level_boundaries.append(pos)
            pos += len(self.cache.encoded[id(node)])

    def payload(self, node) -> bytes:
        """The bytes inside a length-delimited node."""
        if isinstance(node[2], list):
            return b"".join(self.cache.encoded[id(c)] for c in node[2])
        return node[2]

    def render(self, replace) -> bytes:
        """The seed's bytes with nodes replaced (see ``wire_tree.serialize``)."""
        return wt.serialize(self.tree, replace, self.cache)

    @classmethod
    def raw(cls, data: bytes) -> "Seed":
        """Bytes to bit-flip, not parsed (they may no longer be a well-formed message)."""
        return cls("raw", data or b"\0", parse=False)


# ----------------------------------------------------------------------------------------
# Mutations (hypothesis draws their parameters; see test_fuzz.mutation())
# ----------------------------------------------------------------------------------------

#: Values that break arithmetic: signs, int64/uint64 limits, ps counts beyond a century.
EXTREME_INTS = (0, 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, -1 % 2 ** 64, (-2 ** 63) % 2 ** 64,
                2 ** 62, (-2 ** 62) % 2 ** 64, 10 ** 18, 2 ** 32, 2 ** 31 - 1, 2 ** 53 + 1)


def tag(field: int, wire_type: int) -> bytes:
    return wt.encode_varint(field << 3 | wire_type)


def flip_bits(data: bytes, flips: List[Tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for pos, bit in flips:
        out[pos % len(out)] ^= 1 << bit
    return bytes(out)


def overlong_varint(value: int, extra: int) -> bytes:
    """``value`` encoded with ``extra`` redundant continuation bytes (up to 11 bytes: past
    protobuf's 10-byte limit when ``extra`` is large)."""
    v = bytearray(wt.encode_varint(value))
    for _ in range(extra):
        v[-1] |= 0x80
        v.append(0)
    return bytes(v)


def with_wire_type(node, new_wt: int, payload: Optional[bytes] = None) -> bytes:
    """``node`` re-encoded with another wire type (the payload adapted to the new type)."""
    field, old_wt, value = node
    raw = (wt.encode_varint(value) if old_wt == 0 else payload if payload is not None else
           value if isinstance(value, (bytes, bytearray)) else wt.serialize(value))
    if new_wt == 0:
        return tag(field, 0) + wt.encode_varint(int.from_bytes(raw[:8].ljust(1, b"\0"), "little"))
    if new_wt == 1:
        return tag(field, 1) + raw[:8].ljust(8, b"\0")
    if new_wt == 5:
        return tag(field, 5) + raw[:4].ljust(4, b"\0")
    if new_wt == 2:
        return tag(field, 2) + wt.encode_varint(len(raw)) + raw
    return tag(field, new_wt) + raw  # 3/4 (groups) and 6/7 (invalid): tag, then the old bytes


def lying_length(node, delta: int, payload: Optional[bytes] = None) -> bytes:
    field, _wt, value = node
    if payload is None:
        payload = value if isinstance(value, (bytes, bytearray)) else wt.serialize(value)
    return tag(field, 2) + wt.encode_varint(max(len(payload) + delta, 0)) + payload


def nested_messages(depth: int, field: int = 15) -> bytes:
    """``depth`` length-delimited fields each holding the next (built in O(depth))."""
    t = tag(field, 2)
    lengths = [0]
    for _ in range(depth - 1):
        lengths.append(lengths[-1] + len(t) + len(wt.encode_varint(lengths[-1])))
    return b"".join(t + wt.encode_varint(n) for n in reversed(lengths))


def nested_groups(depth: int, field: int = 15) -> bytes:
    return tag(field, 3) * depth + tag(field, 4) * depth


def set_fields(node, values: Dict[int, int]):
    """A sub-message node with varint fields ``values`` set (replacing existing ones)."""
    field, wire_type, children = node
    kept = [c for c in children if c[0] not in values]
    return (field, wire_type, kept + [(f, 0, v % 2 ** 64) for f, v in sorted(values.items())])


def field_value(node, field: int, default: int = 0) -> int:
    for c in node[2]:
        if c[0] == field and c[1] == 0:
            return c[2]
    return default


# ----------------------------------------------------------------------------------------
# Constructions: large, regular inputs built from raw bytes
# ----------------------------------------------------------------------------------------

def _ld(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + wt.encode_varint(len(payload)) + payload


def _vi(field: int, value: int) -> bytes:
    return tag(field, 0) + wt.encode_varint(value)


def _event_meta(mid: int, name: str) -> bytes:
    return _ld(4, _vi(1, mid) + _ld(2, _vi(1, mid) + _ld(2, name.encode())))


def _stat_meta(sid: int, name: str) -> bytes:
    return _ld(5, _vi(1, sid) + _ld(2, _vi(1, sid) + _ld(2, name.encode())))


def _space(planes: List[bytes]) -> bytes:
    return b"".join(_ld(1, p) for p in planes) + _ld(4, b"fuzzhost")


def _plane(pid: int, name: str, lines: List[bytes], names: Dict[int, str], stats: Dict[int, str] = None) -> bytes:
    body = _vi(1, pid) + _ld(2, name.encode())
    body += b"".join(_ld(3, l) for l in lines)
    body += b"".join(_event_meta(k, v) for k, v in names.items())
    body += b"".join(_stat_meta(k, v) for k, v in (stats or {}).items())
    return body


def _line(lid: int, name: str, events: bytes, ts_ns: int = 1_000_000) -> bytes:
    return _vi(1, lid) + _ld(2, name.encode()) + _vi(3, ts_ns) + events


def zero_length_events(n: int = 3_000_000) -> bytes:
    """One python line with ``n`` zero-length ``train`` events at the same instant, beside a
    tf.data line with ``n`` zero-length iterator events: 4-6 bytes each."""
    py = b"\x22\x02\x08\x01" * n                      # metadata_id 1, offset 0, duration 0
    td = b"\x22\x04\x08\x02\x18\x00" * n              # metadata_id 2, duration 0 (explicit)
    host = _plane(1, "/host:CPU", [_line(1, "python", py), _line(2, "tf_data_iterator_get_next", td)],
                  {1: "train", 2: "Iterator::Root::Map"})
    return _space([host])


def many_short_steps(n: int = 100_000) -> bytes:
    """``n`` back-to-back 1 ps ``train`` steps with ``_r`` and ``step_num`` stats."""
    ev = bytearray()
    head, r_stat, tail = _vi(1, 1), _ld(4, _vi(1, 1) + _vi(4, 1)), _vi(3, 1)
    for k in range(n):
        k_enc = wt.encode_varint(k)
        body = head + b"\x10" + k_enc + tail + r_stat + _ld(4, b"\x08\x02\x20" + k_enc)
        ev += tag(4, 2) + wt.encode_varint(len(body)) + body
    host = _plane(1, "/host:CPU", [_line(1, "python", bytes(ev))], {1: "train"}, {1: "_r", 2: "step_num"})
    return _space([host])


def deep_event_nesting(n: int = 100_000) -> bytes:
    """``n`` properly nested iterator events on one tf.data thread (event k spans
    [k, 2n - k) ps), with a FunctionRun at the centre: worst case for nesting walks."""
    ev = bytearray()
    for k in range(n):
        ev += _ld(4, _vi(1, 1 + (k % 3)) + _vi(2, k) + _vi(3, 2 * (n - k)))
    ev += _ld(4, _vi(1, 4) + _vi(2, n) + _vi(3, 0) + _ld(4, _vi(1, 1) + _vi(3, 7)))
    names = {1: "Iterator::Root", 2: "Iterator::Root::Map", 3: "MapProduce", 4: "FunctionRun"}
    host = _plane(1, "/host:CPU", [_line(1, "tf_data_private", bytes(ev)),
                                   _line(2, "python", _ld(4, _vi(1, 5) + _vi(3, 2 * n)))],
                  {**names, 5: "IteratorGetNextOp::DoCompute"}, {1: "_p"})
    return _space([host])


def many_lines(n: int = 5_000) -> bytes:
    """``n`` lines of one event each on the host plane, and ``n`` event names."""
    lines = [_line(k, f"tf_Compute/{k}", _ld(4, _vi(1, k + 1) + _vi(2, k) + _vi(3, 10))) for k in range(n)]
    host = _plane(1, "/host:CPU", lines, {k + 1: f"op{k}:MatMul" for k in range(n)})
    return _space([host])


def many_planes(n: int = 2_000) -> bytes:
    planes = [_plane(k, f"/device:GPU:{k}", [_line(1, "Stream #1", _ld(4, _vi(1, 1) + _vi(3, 5)))], {1: "k"})
              for k in range(n)]
    return _space(planes)


def extreme_times() -> bytes:
    """Events and lines at the limits of int64: negative, enormous, overflowing sums."""
    big, neg = 2 ** 63 - 1, (-2 ** 63) % 2 ** 64
    lines = []
    for lid, ts in enumerate((big, neg, 0, 2 ** 62)):
        ev = b"".join(_ld(4, _vi(1, m) + _vi(2, off) + _vi(3, dur))
                      for m, off, dur in ((1, big, big), (2, neg, big), (1, 0, neg), (3, big, 1), (2, 5, 10)))
        lines.append(_line(lid, "python" if lid == 0 else f"tf_data_{lid}", ev, ts_ns=ts))
    host = _plane(1, "/host:CPU", lines, {1: "train", 2: "IteratorGetNextOp::DoCompute", 3: "Iterator::Root::Map"})
    gpu = _plane(2, "/device:GPU:0", [_line(1, "Stream #1", _ld(4, _vi(1, 1) + _vi(2, big) + _vi(3, big)), ts_ns=big),
                                      _line(2, "Steps", _ld(4, _vi(1, 2) + _vi(2, neg) + _vi(3, big)), ts_ns=neg)],
                 {1: "MemcpyH2D", 2: "1"})
    return _space([host, gpu])


def ref_cycles() -> bytes:
    """Stats whose ref_value names themselves, each other, or no stat at all; stat metadata
    whose map key differs from its id; an event metadata's stats referring to itself."""
    ev = bytearray()
    for k in range(4):
        stats = (_ld(4, _vi(1, 1) + _vi(7, 1)) +          # step_num -> ref to itself
                 _ld(4, _vi(1, 2) + _vi(7, 3)) +          # _r -> ref to 3
                 _ld(4, _vi(1, 3) + _vi(7, 2)) +          # 3 -> ref to 2 (a cycle)
                 _ld(4, _vi(1, 4) + _vi(7, 2 ** 64 - 1)))  # ref to a missing id
        ev += _ld(4, _vi(1, 1) + _vi(2, k * 1000) + _vi(3, 1000) + stats)
    body = _vi(1, 1) + _ld(2, b"/host:CPU") + _ld(3, _line(1, "python", bytes(ev)))
    body += _ld(4, _vi(1, 1) + _ld(2, _vi(1, 1) + _ld(2, b"train") + _ld(5, _vi(1, 1) + _vi(7, 1))))
    for sid, key, name in ((1, 1, "step_num"), (2, 3, "_r"), (3, 2, "_p"), (4, 4, "_c")):
        body += _ld(5, _vi(1, key) + _ld(2, _vi(1, sid) + _ld(2, name.encode())))
    body += _ld(6, _vi(1, 2) + _vi(7, 2))  # a plane stat referring to itself
    return _space([body])


def huge_declared_length() -> bytes:
    """A plane whose length prefix claims 2**63 bytes, then a few real ones."""
    return tag(1, 2) + wt.encode_varint(2 ** 63) + b"\x0a\x03abc"


#: name -> (what it is, builder). Each is analysed once per decoder.
CONSTRUCTIONS: Dict[str, Tuple[str, Callable[[], bytes]]] = {
    "zero_length_events": ("a line with 3,000,000 zero-length events (and a tf.data line with as many)",
                           zero_length_events),
    "many_short_steps": ("100,000 back-to-back 1 ps steps with `_r`/`step_num` stats", many_short_steps),
    "deep_event_nesting": ("100,000 properly nested events on one thread", deep_event_nesting),
    "many_lines": ("5,000 lines and 5,000 event names on one plane", many_lines),
    "many_planes": ("2,000 GPU planes", many_planes),
    "extreme_times": ("line timestamps and event offsets/durations at +-2^63 (sums overflow int64)",
                      extreme_times),
    "ref_cycles": ("ref stats naming themselves / each other / missing ids; map keys != ids", ref_cycles),
    "huge_declared_length": ("a plane whose length prefix claims 2^63 bytes", huge_declared_length),
    "nested_messages_100k": ("100,000 nested length-delimited messages inside an event",
                             lambda: _space([_plane(1, "/host:CPU", [_line(1, "python", _ld(4, nested_messages(100_000)))],
                                                    {1: "train"})])),
    "nested_groups_100k": ("100,000 nested groups (wire types 3/4) in a plane's metadata",
                           lambda: _space([_plane(1, "/host:CPU", [], {1: "train"}) + nested_groups(100_000)])),
}


# ----------------------------------------------------------------------------------------
# Worker pool
# ----------------------------------------------------------------------------------------

class Worker:
    """One ``fuzz_worker.py`` subprocess. ``analyze(path)`` returns the worker's answer, or
    ``{"outcome": "timeout"}`` (the worker is killed) / ``{"outcome": "crashed"}`` (it died:
    a segfault, or the kernel's OOM killer)."""

    def __init__(self, pure_python: bool = False, mem_mb: int = 3072, timeout_s: float = 30.0):
        self.pure_python = pure_python
        self.mem_mb = mem_mb
        self.timeout_s = timeout_s
        self.proc: Optional[subprocess.Popen] = None
        self.stderr = None

    @property
    def decoder(self) -> str:
        return "numpy" if self.pure_python else "c"

    def start(self) -> None:
        env = dict(os.environ, TFBNECK_FUZZ_MEM_MB=str(self.mem_mb), OPENBLAS_NUM_THREADS="1",
                   OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([os.path.dirname(TESTS), TESTS]))
        env.pop("TFBNECK_PURE_PYTHON", None)
        if self.pure_python:
            env["TFBNECK_PURE_PYTHON"] = "1"
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, os.path.join(TESTS, "fuzz_worker.py")], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        hello = self._answer(120.0)
        assert hello and hello.get("ready"), f"fuzz worker did not start: {hello} {self._stderr_tail()}"
        assert hello["decoder"] == self.decoder, hello

    def _stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        return self.stderr.read()[-2000:].decode("utf-8", "replace")

    def _answer(self, timeout: float) -> Optional[dict]:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"eof": True}

    def analyze(self, path: str, timeout_s: Optional[float] = None) -> dict:
        """The worker's answer for ``path``; ``timeout_s`` (default: the worker's) bounds the wait."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write((json.dumps({"path": path}) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        ans = self._answer(timeout_s)
        if ans is None:
            self.stop()
            return {"outcome": "timeout", "seconds": timeout_s, "decoder": self.decoder}
        if ans.get("eof"):
            rc = self.proc.wait()
            tail = self._stderr_tail()
            self.proc = None
            return {"outcome": "crashed", "returncode": rc, "stderr": tail, "decoder": self.decoder}
        return ans

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()  # this worker only: the process this object started
            self.proc.wait()
            for s in (self.proc.stdin, self.proc.stdout):
                try:
                    s.close()
                except OSError:
                    pass
            self.proc = None
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


def problems(ans: dict, path: str) -> List[str]:
    """What is wrong with a worker's answer for the file ``path`` (empty when it is fine):
    ``read_space`` must return or raise TraceReadError (one line naming the file), and the
    analyzer must give a report, or ``status: error`` with that one line; a bug caught by
    analyze_session's safety net ("analysis failed") counts as a crash."""
    out = []
    kind = ans.get("outcome")
    read = ans.get("read")
    if read == "exception":
        out.append(f"read_space raised {ans.get('type')}, not TraceReadError: {ans.get('message')}\n{ans.get('tb')}")
    elif read == "TraceReadError":
        msg = ans.get("read_message", "")
        if "\n" in msg or "\r" in msg or path not in msg:
            out.append(f"TraceReadError message is not one line naming the file: {msg!r}")
        if kind == "ok" or (kind == "error" and ans.get("message") != msg):
            out.append(f"analyze_session did not report the read error {msg!r}: {kind} {ans.get('message')!r}")
    if kind in ("timeout", "crashed", "exception"):
        out.append(f"{kind}: {ans.get('type', '')} {ans.get('message', '')} {ans.get('returncode', '')}\n"
                   f"{ans.get('tb', '') or ans.get('stderr', '')}")
    elif kind == "error":
        msg = ans.get("message")
        if not isinstance(msg, str) or not msg:
            out.append(f"error without a message: {ans}")
        else:
            if "\n" in msg or "\r" in msg:
                out.append(f"error message is not one line: {msg!r}")
            if path not in msg:
                out.append(f"error message does not name the file: {msg!r}")
            if "analysis failed" in msg or "out of memory" in msg:
                out.append(f"analysis bug or memory blow-up: {msg}")
    elif kind != "ok":
        out.append(f"unexpected answer: {ans}")
    if kind in ("ok", "error") and not ans.get("json"):
        out.append(f"report is not valid JSON: {ans.get('json_problem')}")
    return out


_NUM = re.compile(r"\d+")


def message_class(ans: dict, path: str) -> str:
    """An answer reduced to its kind of outcome, for the results table: the file's path,
    numbers and quoted names are replaced so equal kinds of failure compare equal."""
    kind = ans.get("outcome")
    if kind == "ok":
        return "report (status ok)"
    if kind != "error":
        return kind
    msg = ans.get("message", "").replace(path, "FILE")
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = _NUM.sub("N", msg)
    msg = re.sub(r"\(N bytes; .*\)$", "(N bytes; …)", msg)
    return "status error: " + msg
