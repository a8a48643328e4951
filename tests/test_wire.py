"""The C fast path and the numpy path of the reader decode the same columns and stats."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import DATA
from tfbneck_plugin.trace import wire
from support.xspace_builder import SpaceBuilder


def test_varints_decode_like_protobuf():
    from google.protobuf.internal import encoder
    values = [0, 1, 127, 128, 300, 2 ** 32, 2 ** 63 - 1, 2 ** 64 - 1]
    data = b"".join(encoder._VarintBytes(v) for v in values)
    buf = wire.padded(data)
    pos = [0]
    for v in values[:-1]:
        pos.append(pos[-1] + len(encoder._VarintBytes(v)))
    got, after = wire.varints(buf, np.array(pos))
    assert got.tolist() == values and after[-1] == len(data)


def test_split_and_columns_of_a_built_line():
    b = SpaceBuilder()
    line = b.plane("/host:CPU").line("t")
    line.event("a", 5, 10, x=1)
    line.event("b", 0, 0)  # zero offset and duration are omitted on the wire
    line.event("a", 2 ** 20, 3, x=-7, y="s")
    raw = b.proto.planes[0].lines[0].SerializeToString()
    fields, s, e, mid, off, dur = wire.decode_events(raw, wire.padded(raw))
    assert fields[2] == b"t"
    assert mid.tolist() == [1, 2, 1]
    assert dur.tolist() == [10 * 10 ** 6, 0, 3 * 10 ** 6]
    assert (e - s).tolist() == [len(ev.SerializeToString()) for ev in b.proto.planes[0].lines[0].events]


#: Per line of every plane of each file: sums over its columns and over the ``_p`` stat.
COLUMN_SUMS = ("import json, sys, numpy as np\n"
               "from tfbneck_plugin.trace import tracefile, xspace\n"
               "out = []\n"
               "for f in sys.argv[1:]:\n"
               "    sp = tracefile.read_space(f)\n"
               "    for p in sp.planes:\n"
               "        for l in p.lines:\n"
               "            idx = np.arange(len(l))\n"
               "            v, pr = p.stat_ints(l, idx, '_p') if p.stat_id('_p') else (np.zeros(0), np.zeros(0))\n"
               "            out.append([p.name, l.name, len(l), int(l.start_ps.sum() % 2**61), int(l.dur_ps.sum()),\n"
               "                        int(l.name_id.sum()), int(np.asarray(v, dtype=np.float64).sum()),\n"
               "                        int(np.sum(pr))])\n"
               "print(json.dumps(out))\n")


def _both_paths(files):
    fast = subprocess.run([sys.executable, "-c", COLUMN_SUMS] + files, capture_output=True, text=True, timeout=300)
    pure = subprocess.run([sys.executable, "-c", COLUMN_SUMS] + files, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TFBNECK_PURE_PYTHON="1"))
    assert fast.returncode == 0 and pure.returncode == 0, fast.stderr + pure.stderr
    return json.loads(fast.stdout), json.loads(pure.stdout)


@pytest.mark.skipif(wire._wirescan is None, reason="the C fast path is not compiled here")
def test_fast_and_pure_paths_agree_on_committed_real_traces():
    files = sorted(glob.glob(os.path.join(DATA, "*", "plugins", "profile", "*", "*.xplane.pb*")))
    assert len(files) >= 8
    fast, pure = _both_paths(files)
    assert fast == pure
    assert sum(row[2] for row in fast) > 15_000  # events were decoded, not empty lines compared


@pytest.mark.skipif(wire._wirescan is None, reason="the C fast path is not compiled here")
def test_fast_and_pure_paths_agree_on_real_traces(realtraces):
    files = sorted(glob.glob(os.path.join(realtraces, "**", "*.xplane.pb"), recursive=True))
    fast, pure = _both_paths(files)
    assert fast == pure
    assert sum(row[2] for row in fast) > 100_000


def test_corrupt_line_is_reported_by_both_paths(tmp_path):
    b = SpaceBuilder()
    b.plane("/host:CPU").line("t").event("a", 0, 5)
    raw = bytearray(b.bytes())
    # Make the event's length prefix claim more bytes than the line holds.
    i = raw.index(b"\x22", raw.index(b"t") + 1)
    raw[i + 1] = 0x7F
    p = tmp_path / "c.xplane.pb"
    p.write_bytes(bytes(raw))
    for env in ({}, {"TFBNECK_PURE_PYTHON": "1"}):
        code = ("import sys\nfrom tfbneck_plugin.trace import tracefile, xspace\n"
                "try:\n    tracefile.read_space(sys.argv[1])\nexcept xspace.TraceReadError as e:\n    print('ERR', e)\n")
        r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, **env))
        assert r.stdout.startswith("ERR ") and str(p) in r.stdout, (env, r.stdout, r.stderr)
