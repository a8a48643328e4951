import glob
import gzip
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import DATA
from tfbneck_plugin.trace import tracefile, xspace
from support.xspace_builder import SpaceBuilder

TF_XPLANE = "tensorflow.tsl.profiler.protobuf.xplane_pb2"


def small_space() -> SpaceBuilder:
    b = SpaceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    py.event("train", 0, 1000, step_num=7, _r=1)
    py.event("FunctionRun", 10, 900, _p=2 ** 64 - 5)
    return b


@pytest.mark.tf  # importing TensorFlow's xplane_pb2 starts TensorFlow
def test_schema_field_numbers_match_tensorflows_own_xplane_proto():
    """Our hand-declared schema must agree with the descriptor TensorFlow ships."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed: cannot compare with its xplane_pb2")
    code = (
        "import importlib, json\n"
        f"m = importlib.import_module('{TF_XPLANE}')\n"
        "out = {}\n"
        "for name, d in m.DESCRIPTOR.message_types_by_name.items():\n"
        "    rep = lambda f: bool(f.is_repeated if hasattr(f, 'is_repeated') else f.label == 3)\n"
        "    out[name] = {f.name: [f.number, f.type, rep(f)] for f in d.fields}\n"
        "print(json.dumps(out))\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    import json
    theirs = json.loads(res.stdout.strip().splitlines()[-1])
    for msg_name, cls in xspace._CLASSES.items():
        ours = {f.name: [f.number, f.type, bool(f.is_repeated if hasattr(f, "is_repeated") else f.label == 3)]
                for f in cls.DESCRIPTOR.fields}
        assert msg_name in theirs
        for field, spec in ours.items():
            if field in ("event_metadata", "stat_metadata"):  # map entry types differ only in name
                assert theirs[msg_name][field][0] == spec[0]
                continue
            assert theirs[msg_name][field] == spec, (msg_name, field)


def test_roundtrip_times_names_and_stats(tmp_path):
    p = small_space().write(tmp_path / "h.xplane.pb")
    sp = tracefile.read_space(p)
    plane = sp.plane("/host:CPU")
    line = plane.lines[0]
    assert line.name == "python"
    assert [plane.event_names[i] for i in line.name_id] == ["train", "FunctionRun"]
    assert line.dur_ps.tolist() == [1000 * 10 ** 6, 900 * 10 ** 6]
    assert (line.start_ps[1] - line.start_ps[0]) == 10 * 10 ** 6
    assert plane.event_stats(line, 0) == {"step_num": 7, "_r": 1}
    assert plane.event_stats(line, 1)["_p"] == 2 ** 64 - 5
    assert sp.hostnames == ["testhost"]


def test_gzipped_trace_reads_the_same(tmp_path):
    raw = small_space().bytes()
    p = tmp_path / "h.xplane.pb.gz"
    p.write_bytes(gzip.compress(raw))
    assert tracefile.read_space(str(p)).n_events == 2


@pytest.mark.parametrize("content, needle", [
    (b"", "file is empty"),
    (b"\x0a\xff\xff\xff\x0f\x01", "not a valid XSpace"),          # length prefix past the end
    (b"GIF89a this is not a protobuf at all" * 3, "not a valid XSpace"),
    (b"\x08\x01", "holds no planes"),                                # valid protobuf, no planes
])
def test_bad_files_raise_one_line_error_naming_the_file(tmp_path, content, needle):
    p = tmp_path / "bad.xplane.pb"
    p.write_bytes(content)
    with pytest.raises(xspace.TraceReadError) as ei:
        tracefile.read_space(str(p))
    msg = str(ei.value)
    assert str(p) in msg and needle in msg and "\n" not in msg


def test_truncated_trace_is_rejected(tmp_path):
    raw = small_space().bytes()
    p = tmp_path / "t.xplane.pb"
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(xspace.TraceReadError) as ei:
        tracefile.read_space(str(p))
    assert "truncated or corrupt" in str(ei.value)


def test_truncated_real_trace_is_rejected(tmp_path):
    """A real Keras trace (tests/data) cut in the middle of its host plane, as a profiler
    still writing it leaves it; whole, the same file reads."""
    src = glob.glob(os.path.join(DATA, "keras_profiled_batch", "plugins", "profile", "*", "*.xplane.pb"))[0]
    with open(src, "rb") as f:
        raw = f.read()
    assert tracefile.read_space(src).n_events > 1000
    p = tmp_path / "t.xplane.pb"
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(xspace.TraceReadError) as ei:
        tracefile.read_space(str(p))
    assert "truncated or corrupt" in str(ei.value) and str(p) in str(ei.value)


def test_bad_gzip_is_reported(tmp_path):
    p = tmp_path / "h.xplane.pb.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(xspace.TraceReadError, match="not a valid gzip"):
        tracefile.read_space(str(p))


def test_missing_file_is_reported(tmp_path):
    with pytest.raises(xspace.TraceReadError, match="cannot read file"):
        tracefile.read_space(str(tmp_path / "nope.xplane.pb"))


def test_reader_uses_protobuf_c_backend():
    from google.protobuf.internal import api_implementation
    assert api_implementation.Type() in ("upb", "cpp")
