"""The C fast path and the numpy path of the reader decode the same columns and stats."""
import glob
import json
import os
import re
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


def _mapped_rss_kb(path) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    real = os.path.realpath(path)
    with open("/proc/self/smaps") as f:
        for row in f:
            head = row.split()
            if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head[0]):  # a mapping's header; its path, if any, last
                inside = len(head) >= 6 and head[5] == real
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


def _big_trace(tmp_path, events=60_000):
    b = SpaceBuilder()
    line = b.plane("/host:CPU").line("t")
    for k in range(events):
        line.event("op:MatMul" if k % 3 else "ExecutorState::Process", k * 10, 5, _c=k + 2 ** 63, x="s" * (k % 7))
    p = tmp_path / "big.xplane.pb"
    p.write_bytes(b.bytes())
    return p


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps") or not wire.FAST,
                    reason="needs Linux's /proc and the C decoder")
def test_a_local_trace_is_mapped_and_its_pages_given_back(tmp_path):
    """read_space maps a local file and drops each line's pages once decoded, and again after
    a stat read: the process keeps the columns, not the file; every column and stat is what
    decoding the file's bytes gives."""
    from tfbneck_plugin.trace import decoder, tracefile
    p = _big_trace(tmp_path)
    assert p.stat().st_size > 2 ** 21
    mapped = tracefile.read_space(str(p))
    line = mapped.planes[0].lines[0]
    assert line.pages is not None and isinstance(line.pages[0].mapped, __import__("mmap").mmap)
    assert _mapped_rss_kb(p) < 64, "the file's pages stayed in the process after decoding"
    read = decoder.decode_space(tracefile.read_bytes(str(p)), str(p))
    other = read.planes[0].lines[0]
    assert other.pages is None
    for col in ("start_ps", "dur_ps", "name_id", "ev_start", "ev_end"):
        assert np.array_equal(getattr(line, col), getattr(other, col)), col
    idx = np.arange(0, len(line), 3)
    got = mapped.planes[0].stat_ints(line, idx, "_c")
    want = read.planes[0].stat_ints(other, idx, "_c")
    assert all(np.array_equal(a, b) for a, b in zip(got, want)) and got[1].all()
    assert _mapped_rss_kb(p) < 64, "a stat read left the line's pages in the process"
    strings = mapped.planes[0].stat_column(line, idx[:20], "x")  # each from its event's message
    assert strings == read.planes[0].stat_column(other, idx[:20], "x") == ["s" * (k % 7) for k in range(0, 60, 3)]
    assert _mapped_rss_kb(p) < 64


def test_files_that_cannot_be_mapped_are_read(tmp_path):
    """A .gz, an opener's file without a descriptor (fsspec's remote files), an empty file: read
    (or refused) as before, never mapped."""
    import gzip
    import io
    from tfbneck_plugin.trace import tracefile, xspace
    b = SpaceBuilder()
    b.plane("/host:CPU").line("t").event("a", 0, 5)
    raw = b.bytes()
    gz = tmp_path / "h.xplane.pb.gz"
    gz.write_bytes(gzip.compress(raw))
    assert tracefile.map_file(str(gz)) is not None  # a regular file: read_space reads it as gzip instead
    assert tracefile.read_space(str(gz)).planes[0].lines[0].pages is None
    plain = tmp_path / "h.xplane.pb"
    plain.write_bytes(raw)
    assert tracefile.map_file(str(plain), lambda path, mode: io.BytesIO(raw)) is None
    sp = tracefile.read_space(str(plain), lambda path, mode: io.BytesIO(raw))
    assert sp.n_events == 1 and sp.planes[0].lines[0].pages is None
    empty = tmp_path / "e.xplane.pb"
    empty.write_bytes(b"")
    assert tracefile.map_file(str(empty)) is None
    with pytest.raises(xspace.TraceReadError, match="empty"):
        tracefile.read_space(str(empty))


def _line_of(ids):
    from tfbneck_plugin.trace import xspace
    ids = np.asarray(ids, dtype=np.int64)
    z = np.zeros(len(ids), dtype=np.int64)
    return xspace.Line(id=0, name="t", display_name="", start_ps=z, dur_ps=z, name_id=ids, buf=b"",
                       ev_start=z.astype(np.int32), ev_end=z.astype(np.int32))


@pytest.mark.parametrize("fast", [True, False])
def test_postings_and_where_are_a_stable_sort_and_isin(monkeypatch, fast):
    """The per-line index (a counting sort, in C or numpy; numpy's sort for ids spanning 2**16
    values or more) lists each id's events in order, and where()/mask()/first_of_each() answer
    as np.isin / np.unique would."""
    if fast and not wire.FAST:
        pytest.skip("the C fast path is not compiled here")
    monkeypatch.setattr(wire, "FAST", fast)
    rng = np.random.default_rng(5)
    for ids in (rng.integers(0, 300, 5000), rng.integers(-7, 3, 100), rng.integers(0, 2 ** 40, 3000),
                np.full(10, 2 ** 62), rng.integers(1, 65537, 2000), [4]):
        line = _line_of(ids)
        ids = line.name_id
        uniq, bounds, order = line._postings()
        assert uniq.tolist() == np.unique(ids).tolist()
        assert np.asarray(order).tolist() == np.argsort(ids, kind="stable").tolist()
        assert np.diff(bounds).tolist() == [int((ids == u).sum()) for u in uniq]
        assert line.first_of_each()[1].tolist() == np.unique(ids, return_index=True)[1].tolist()
        for ask in (uniq[:1], uniq[::3], uniq, np.array([-99, 2 ** 63 - 1]), np.concatenate([uniq[:5], uniq[:5]]),
                    np.zeros(0, dtype=np.int64)):
            want = np.flatnonzero(np.isin(ids, ask))
            assert line.where(ask).tolist() == want.tolist()
            assert line.where(ask).dtype == np.int64
            assert np.flatnonzero(line.mask(ask)).tolist() == want.tolist()


def _two_plane_trace():
    b = SpaceBuilder()
    for p in ("/host:CPU", "/device:GPU:0"):
        plane = b.plane(p)
        for t in range(3):
            line = plane.line(f"t{t}")
            for k in range(200 * (t + 1)):
                line.event(f"e{k % 7}", k * 3 + t, 2, x=k)
    return bytearray(b.bytes())


def _line_ranges(raw):
    from tfbneck_plugin.trace import decoder
    out = []
    for number, _, ps, pe, _ in decoder._fields(bytes(raw), 0, len(raw), "t", "XSpace"):
        if number == 1:
            out.append([(vs, fs) for n, w, vs, ve, fs in decoder._fields(bytes(raw), ps, pe, "t", "plane")
                        if n == 3 and w == 2])
    return out


@pytest.mark.parametrize("threads", [1, 4])
def test_lines_decoded_in_threads_are_the_lines_decoded_in_turn(monkeypatch, threads):
    """decode_space decodes lines in threads (here from any size): the same columns, and on
    corrupt bytes the error a plane-by-plane reading meets first, whichever thread met it."""
    from tfbneck_plugin.trace import decoder, xspace
    monkeypatch.setattr(decoder, "THREADS_FROM_BYTES", 0)
    raw = _two_plane_trace()
    monkeypatch.setattr(decoder, "_threads", lambda: 1)
    want = decoder.decode_space(bytes(raw), "t.xplane.pb")
    monkeypatch.setattr(decoder, "_threads", lambda: threads)
    got = decoder.decode_space(bytes(raw), "t.xplane.pb")
    assert [[len(l) for l in p.lines] for p in got.planes] == [[200, 400, 600]] * 2
    for p, q in zip(got.planes, want.planes):
        for a, b in zip(p.lines, q.lines):
            assert a.name == b.name and all(np.array_equal(getattr(a, c), getattr(b, c))
                                            for c in ("start_ps", "dur_ps", "name_id", "ev_start", "ev_end"))
    ranges = _line_ranges(raw)
    bad = bytearray(raw)
    for plane, line in ((1, 0), (0, 2), (0, 1)):  # line 1 of plane 0 comes first
        bad[ranges[plane][line][0]] = 0x0F  # the line's first field: wire type 7, which does not exist
    with pytest.raises(xspace.TraceReadError, match=r"line 1 of plane '/host:CPU' is corrupt"):
        decoder.decode_space(bytes(bad), "t.xplane.pb")
    bad = bytearray(raw)
    bad[ranges[0][2][0]] = 0x0F
    name = bad.index(b"/device:GPU:0")
    bad[name:name + 2] = b"\xff\xfe"  # plane 1's name is not UTF-8: protobuf refuses the plane
    with pytest.raises(xspace.TraceReadError, match=r"line 2 of plane '/host:CPU' is corrupt"):
        decoder.decode_space(bytes(bad), "t.xplane.pb")
    bad[ranges[0][2][0]] = raw[ranges[0][2][0]]
    with pytest.raises(xspace.TraceReadError, match=r"plane 1"):
        decoder.decode_space(bytes(bad), "t.xplane.pb")
