"""Fuzzing the reader and the analyzer with mutated and constructed XSpace files.

For every input, through the C decoder and through the numpy one (``TFBNECK_PURE_PYTHON=1``),
``read_space`` must return or raise :class:`TraceReadError` with a one-line message naming
the file, and ``analyze_session`` must return a report, or ``status: error`` with that
message: no other exception, no "analysis failed" (a bug caught by the safety net), within
a time bound per input, under an address-space cap. The two decoders must agree: the same
report (compared whole), or both an error. Inputs run in a subprocess worker (tests/fuzz_worker.py) so that a hang,
a crash or a memory blow-up is observed instead of taking the test run down.

Inputs: hypothesis-driven mutations of traces built with the project's schema and of small
real traces (``../shared/realtraces``; where it is absent, those committed in tests/data/);
truncation at every protobuf field boundary; constructed extremes (tests/support/fuzz_harness.py: CONSTRUCTIONS); and every
crash found so far, kept in tests/fuzz_regressions/.

Budget (CI: about 2 minutes on 2 cores) and longer runs, all by environment variables:

    TFBNECK_FUZZ_EXAMPLES   hypothesis examples per seed group (built, real; default 200)
    TFBNECK_FUZZ_SEED       a seed: random inputs instead of the fixed CI sequence
    TFBNECK_FUZZ_TIMEOUT    seconds allowed per input (default 30), plus 4 s per MB of input
    TFBNECK_FUZZ_MEM_MB     address-space cap of the worker (default 3072)
    TFBNECK_FUZZ_EXHAUSTIVE=1  truncate the real seeds at every field boundary (CI: a sample)
    TFBNECK_FUZZ_SHRINK=1   let hypothesis shrink a failing input (slow with a hang)

A longer run (random inputs, 200,000 of them: a few hours on one core):

    TFBNECK_FUZZ_EXAMPLES=50000 TFBNECK_FUZZ_SEED=$RANDOM TFBNECK_FUZZ_EXHAUSTIVE=1 \\
        python -m pytest tests/test_fuzz.py -q -x

A failing input is saved in tests/_artifacts/fuzz_failures/; after fixing the bug, copy it to
tests/fuzz_regressions/ and describe it in REGRESSIONS below.
"""
from __future__ import annotations

import collections
import functools
import hashlib
import os

import pytest
from hypothesis import HealthCheck, Phase, given, seed as hyp_seed, settings, strategies as st

from support import fuzz_harness as fh
from conftest import DATA, REALTRACES
from support import wire_tree as wt
from support.faults_table import Section
from support.paths import TESTS

HERE = TESTS
REGRESSION_DIR = os.path.join(HERE, "fuzz_regressions")
FAILURES_DIR = os.path.join(HERE, "_artifacts", "fuzz_failures")

EXAMPLES = int(os.environ.get("TFBNECK_FUZZ_EXAMPLES", "200"))
SEED = os.environ.get("TFBNECK_FUZZ_SEED")
TIMEOUT_S = float(os.environ.get("TFBNECK_FUZZ_TIMEOUT", "30"))
#: Added to the time bound per MB of input. The largest construction (30 MB, 6 million events)
#: took 4.6 s (C decoder) and 10.8 s (numpy) here (2 cores, lightly loaded), over 30 s
#: when the machine is loaded (tools/under-load beside other jobs): 4 s/MB leaves it 14x, and
#: still stops a quadratic walk (minutes) or a hang.
SECONDS_PER_MB = 4.0
MEM_MB = int(os.environ.get("TFBNECK_FUZZ_MEM_MB", "3072"))
EXHAUSTIVE = os.environ.get("TFBNECK_FUZZ_EXHAUSTIVE") == "1"
SHRINK = os.environ.get("TFBNECK_FUZZ_SHRINK") == "1"
#: Truncation points of each real seed in CI (all of them with TFBNECK_FUZZ_EXHAUSTIVE=1).
REAL_TRUNCATIONS_CI = 600

#: Every file in tests/fuzz_regressions/: what it is, what the analyzer did wrong, the fix.
REGRESSIONS = {
    "corrupt_event_stats.xplane.pb":
        "a `train` event whose stat sub-message claims more bytes than the event holds. Was: `analysis failed "
        "(DecodeError)` from `Line.event_proto`; now the event's stats read as absent, as the bulk decoder reads them",
    "line_id_wrong_wire_type.xplane.pb":
        "an XLine whose `id` is written as a length-delimited field. Was: `analysis failed (ValueError)` in "
        "`xspace._decode_line`; now ignored, as protobuf ignores a field of the wrong wire type",
    "line_timestamp_wrong_wire_type.xplane.pb":
        "an XLine whose `timestamp_ns` is written as a length-delimited field. Was: `analysis failed (TypeError: "
        "not all arguments converted during bytes formatting)` in `xspace._decode_line`; now ignored",
    "identical_nested_events_300k.xplane.pb.gz":
        "300,000 identical iterator events on one thread (3 KB gzipped): each encloses the next. Was: over a "
        "minute in `timeline.nesting_parents` (one pass per nesting level); now one vectorised search, 0.2 s",
    "overlong_event_duration.xplane.pb":
        "an event whose duration is an 11-byte varint (protobuf allows 10). Was: the decoders disagreed (C: no "
        "duration, the numpy path: 10 bytes' worth, then it read on mid-varint); `wire.varints` now marks it "
        "malformed and `wire.scalar_fields` keeps no value, as the C path",
    "event_field_zero.xplane.pb":
        "an event holding a field numbered 0 before its stats. Was: the C path stored its value as the event's "
        "end offset (`_wirescan.c` scan_line), losing the event's stats; now skipped like any unknown field",
    "stat_past_event_end.xplane.pb":
        "a stat whose length runs past its event's end. Was: the decoders disagreed (the numpy path read the stat "
        "cut short, the C path dropped it); `wire.submessages` now keeps whole sub-messages only",
    "duplicate_stats.xplane.pb":
        "`train` events carrying `step_num` twice. Was: the decoders disagreed on the step numbers (C: the "
        "first stat, the numpy path: the last); both now take the first stat that holds a value "
        "(`wire.stat_ints`, `_wirescan.c` stat_ints), and read a stat's value as the oneof it is",
    "idle_gap_at_int64_limit.xplane.pb":
        "a GPU idle gap ending at 2^63-1 ps. Was: `analysis failed (OverflowError)` in "
        "`analyze._device_evidence` (the gap's end, from its rounded ms duration, passed int64); now clamped",
}

try:
    from tfbneck_plugin.trace import _wirescan  # noqa: F401
    HAVE_C = True
except ImportError:
    HAVE_C = False

# ----------------------------------------------------------------------------------------
# Mutations: each draws its parameters with hypothesis and returns (bytes, description).
# ----------------------------------------------------------------------------------------


def _node(draw, nodes):
    return draw(st.sampled_from(nodes))


def m_bit_flips(draw, seed: fh.Seed):
    flips = draw(st.lists(st.tuples(st.integers(0, len(seed.data) - 1), st.integers(0, 7)), min_size=1, max_size=16))
    return fh.flip_bits(seed.data, flips), f"bit flips at {flips}"


def m_truncate(draw, seed: fh.Seed):
    cut = draw(st.one_of(st.sampled_from(seed.boundaries[:-1]), st.integers(0, len(seed.data) - 1)))
    return seed.data[:cut], f"truncated to {cut} of {len(seed.data)} bytes"


def m_truncate_inner(draw, seed: fh.Seed):
    node, msg = draw(st.sampled_from(seed.messages))
    payload = seed.payload(node)
    cut = draw(st.sampled_from(wt.field_boundaries(payload, msg)))
    raw = fh.tag(node[0], 2) + wt.encode_varint(cut) + payload[:cut]
    return seed.render({id(node): raw}), f"a {msg} cut at byte {cut} of {len(payload)} (framing kept)"


def m_huge_varint(draw, seed: fh.Seed):
    node = _node(draw, seed.varints)
    value = draw(st.one_of(st.sampled_from(fh.EXTREME_INTS), st.integers(0, 2 ** 64 - 1)))
    return seed.render({id(node): (node[0], 0, value)}), f"field {node[0]} varint = {value}"


def m_overlong_varint(draw, seed: fh.Seed):
    node = _node(draw, seed.varints)
    extra = draw(st.integers(1, 12))
    raw = fh.tag(node[0], 0) + fh.overlong_varint(node[2], extra)
    return seed.render({id(node): raw}), f"field {node[0]} varint padded by {extra} bytes"


def m_wrong_wire_type(draw, seed: fh.Seed):
    node = _node(draw, seed.all)
    new = draw(st.sampled_from([w for w in range(8) if w != node[1]]))
    return (seed.render({id(node): fh.with_wire_type(node, new, seed.payload(node) if node[1] == 2 else None)}),
            f"field {node[0]} wire type {node[1]} -> {new}")


def m_lying_length(draw, seed: fh.Seed):
    node = _node(draw, seed.delimited)
    delta = draw(st.sampled_from([-1000, -3, -1, 1, 2, 7, 1000, 2 ** 31, 2 ** 62]))
    return seed.render({id(node): fh.lying_length(node, delta, seed.payload(node))}), f"field {node[0]} length {delta:+d}"


INT64 = st.one_of(st.sampled_from(fh.EXTREME_INTS), st.integers(-2 ** 63, 2 ** 63 - 1))


def m_extreme_times(draw, seed: fh.Seed):
    targets = draw(st.lists(st.sampled_from(seed.timed), min_size=1, max_size=6))
    repl = {}
    for node, msg in targets:
        fields = (2, 3) if msg == "XEvent" else (3, 9)
        chosen = draw(st.lists(st.sampled_from(fields), min_size=1, max_size=2, unique=True))
        repl[id(node)] = fh.set_fields(node, {f: draw(INT64) for f in chosen})
    return seed.render(repl), f"extreme times on {len(repl)} events/lines"


def m_deep_nesting(draw, seed: fh.Seed):
    node = _node(draw, seed.all)
    depth = draw(st.one_of(st.sampled_from([64, 101, 1000, 100_000]), st.integers(1, 20_000)))
    groups = draw(st.booleans())
    field = draw(st.sampled_from([node[0], 4, 15]))
    raw = fh.nested_groups(depth, field) if groups else fh.nested_messages(depth, field)
    return (seed.render({id(node): [node, raw]}),
            f"{depth} nested {'groups' if groups else 'messages'} (field {field}) after a field {node[0]}")


def m_ref_cycle(draw, seed: fh.Seed):
    repl = {}
    for node in draw(st.lists(st.sampled_from(seed.stats), min_size=1, max_size=4)):
        own = fh.field_value(node, 1)
        target = draw(st.one_of(st.just(own), st.sampled_from(seed.stat_ids), st.integers(0, 2 ** 64 - 1)))
        repl[id(node)] = (node[0], 2, [c for c in node[2] if c[0] == 1] + [(7, 0, target)])
    if seed.stat_entries and draw(st.booleans()):
        entry = draw(st.sampled_from(seed.stat_entries))
        repl[id(entry)] = fh.set_fields(entry, {1: draw(st.sampled_from(seed.stat_ids))})
    return seed.render(repl), f"{len(repl)} stats made ref_values (self / other / missing ids)"


def m_duplicate(draw, seed: fh.Seed):
    node = _node(draw, seed.all)
    size = len(seed.cache.encoded[id(node)])
    k = draw(st.integers(2, max(2, min(20_000, 2_000_000 // size))))
    return seed.render({id(node): [node] * k}), f"field {node[0]} repeated {k} times"


def m_drop(draw, seed: fh.Seed):
    nodes = draw(st.lists(st.sampled_from(seed.all), min_size=1, max_size=5))
    return seed.render({id(n): [] for n in nodes}), f"{len(nodes)} fields removed"


def m_graft(draw, seed: fh.Seed):
    a, b = _node(draw, seed.delimited), _node(draw, seed.delimited)
    payload = seed.payload(b)
    return seed.render({id(a): (a[0], 2, payload)}), f"field {a[0]} holds a field {b[0]}'s payload"


#: kind -> (mutator, description for the results table)
MUTATIONS = {
    "bit_flips": (m_bit_flips, "1-16 random bit flips"),
    "truncate": (m_truncate, "truncated at a field boundary or any byte (a half-written file)"),
    "truncate_inner": (m_truncate_inner, "one message cut at an inner field boundary, enclosing lengths fixed up"),
    "huge_varint": (m_huge_varint, "a varint set to 2^63, 2^64-1, -1... (ids, times, lengths of nothing)"),
    "overlong_varint": (m_overlong_varint, "a varint padded with redundant bytes, up to past the 10-byte limit"),
    "wrong_wire_type": (m_wrong_wire_type, "a field re-encoded with another wire type (0-7, incl. groups and invalid)"),
    "lying_length": (m_lying_length, "a length prefix off by -1000..+2^62 (payload unchanged)"),
    "extreme_times": (m_extreme_times, "event offsets/durations, line timestamps/durations at int64 extremes"),
    "deep_nesting": (m_deep_nesting, "up to 100,000 nested messages or groups inserted next to a field"),
    "ref_cycle": (m_ref_cycle, "stats turned into ref_values naming themselves, each other, missing ids"),
    "duplicate": (m_duplicate, "a field (event, line, plane, metadata) repeated up to 20,000 times"),
    "drop": (m_drop, "fields removed (metadata, names, timestamps, events)"),
    "graft": (m_graft, "a message's payload replaced by another message's payload"),
}


class Case:
    """One mutated input (its repr stays short in hypothesis' failure reports)."""

    def __init__(self, seed: str, kind: str, data: bytes, what: str):
        self.seed, self.kind, self.data, self.what = seed, kind, data, what

    def __repr__(self):
        return (f"Case({self.seed}, {self.kind}: {self.what[:200]}; {len(self.data)} bytes, "
                f"sha1 {hashlib.sha1(self.data).hexdigest()[:12]})")


@st.composite
def mutated(draw, seeds):
    seed = draw(st.sampled_from(seeds))
    kind = draw(st.sampled_from(sorted(MUTATIONS)))
    data, what = MUTATIONS[kind][0](draw, seed)
    if kind not in ("bit_flips", "truncate") and draw(st.integers(0, 9)) == 0:
        data, more = m_bit_flips(draw, fh.Seed.raw(data))  # now and then, framing damage on top
        what += "; then " + more
    return Case(seed.name, kind, data, what)


# ----------------------------------------------------------------------------------------
# Fixtures
# ----------------------------------------------------------------------------------------

TABLE = Section(
    "fuzz", "Mutated and constructed traces (tests/test_fuzz.py)",
    f"""Each input is analysed by `analyze_session` in a worker process (address space capped at
{MEM_MB} MiB, {TIMEOUT_S:.0f} s per input), once with the C decoder and once with the numpy one, which
must agree (the same report, or both an error).
Counts are from the last complete run (`TFBNECK_FUZZ_EXAMPLES={EXAMPLES}` hypothesis examples per
seed group{', seed ' + SEED if SEED else ', fixed CI sequence'}); outcomes are counted over
both decoders. "report" is `status: ok`; error messages are grouped by kind. No input raised any other
exception, hung, crashed the process or ran out of memory (the test fails otherwise). Time and peak
memory: the slowest / largest input's, rounded up.""",
    ["fault / bad input", "inputs (C / numpy)", "observed behaviour", "slowest, peak RSS"],
    [f"mutation:{k}" for k in sorted(MUTATIONS)] + ["truncation:every-boundary"] +
    [f"construction:{k}" for k in fh.CONSTRUCTIONS] + [f"regression:{k}" for k in sorted(REGRESSIONS)])


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    TABLE.write()


class Tally:
    """Outcomes per table row and decoder: counts of each kind of message, slowest input."""

    def __init__(self):
        self.classes = collections.defaultdict(collections.Counter)   # key -> Counter(class)
        self.inputs = collections.defaultdict(lambda: collections.Counter())  # key -> Counter(decoder)
        self.slowest = collections.defaultdict(float)
        self.peak = collections.defaultdict(float)

    def add(self, key, decoder, ans, path):
        self.classes[key][fh.message_class(ans, path)] += 1
        self.inputs[key][decoder] += 1
        self.slowest[key] = max(self.slowest[key], float(ans.get("seconds") or 0))
        self.peak[key] = max(self.peak[key], float(ans.get("peak_rss_mb") or 0))

    def done(self, key) -> bool:
        return key in self.inputs and {"c", "numpy"} <= set(self.inputs[key]) | ({"c"} if not HAVE_C else set())

    def row(self, key, what):
        counts = self.classes[key]
        parts = []
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        for cls, n in ranked[:6]:
            parts.append(f"{cls.replace('status error: ', 'error `') + '`' if cls.startswith('status error') else cls} ×{n}")
        if len(ranked) > 6:
            parts.append(f"{len(ranked) - 6} other kinds of error ×{sum(n for _c, n in ranked[6:])}")
        n = self.inputs[key]
        return [what, f"{n['c']} / {n['numpy']}", "; ".join(parts), f"{_bucket_s(self.slowest[key])}, "
                f"{_bucket_mb(self.peak[key])}"]


TALLY = Tally()


def _bucket_s(s: float) -> str:  # coarse, so that the table does not change with the machine's load
    for b in (1, 30, 60):
        if s < b:
            return f"< {b:g} s"
    return f"{s:.0f} s"


def _bucket_mb(mb: float) -> str:
    for b in (256, 1024, 3072):
        if mb < b:
            return f"< {b} MB"
    return f"{mb:.0f} MB"


@pytest.fixture(scope="module")
def workers():
    """One worker per decoder (the C one only where it is compiled); each input goes to both."""
    pool = ([fh.Worker(pure_python=False, mem_mb=MEM_MB, timeout_s=TIMEOUT_S)] if HAVE_C else []) + \
        [fh.Worker(pure_python=True, mem_mb=MEM_MB, timeout_s=TIMEOUT_S)]
    yield pool
    for w in pool:
        w.stop()


@pytest.fixture(scope="module")
def inputs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def session_file(root, name: str, suffix: str = ".xplane.pb") -> str:
    d = os.path.join(str(root), "run", "plugins", "profile", name)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, "fuzzhost" + suffix)


def check(workers, path: str, data: bytes, key: str, what: str) -> list:
    """Analyse ``data`` (written to ``path``) with each decoder; fail, with the input saved,
    on any problem or when the decoders disagree (one reports, the other fails; or their
    reports differ)."""
    with open(path, "wb") as f:
        f.write(data)
    bound_s = TIMEOUT_S + SECONDS_PER_MB * len(data) / 1e6
    answers = [w.analyze(path, bound_s) for w in workers]
    bad = [f"{a.get('decoder')} decoder: {p}" for a in answers for p in fh.problems(a, path)]
    if not bad and len(answers) == 2:
        c, n = answers
        if c["outcome"] != n["outcome"] or (c["outcome"] == "ok" and c["digest"] != n["digest"]):
            bad.append(f"the C and numpy decoders disagree: C {c['outcome']} {c.get('message') or ''} "
                       f"(events {c.get('events')}, {c.get('bottleneck')}); numpy {n['outcome']} "
                       f"{n.get('message') or ''} (events {n.get('events')}, {n.get('bottleneck')})")
    if bad:
        os.makedirs(FAILURES_DIR, exist_ok=True)
        keep = os.path.join(FAILURES_DIR, f"{key.replace(':', '-')}-{hashlib.sha1(data).hexdigest()[:12]}.xplane.pb")
        with open(keep, "wb") as f:
            f.write(data)
        raise AssertionError(f"{key} ({what}): input saved as {keep}\n" + "\n".join(bad))
    for a in answers:
        TALLY.add(key, a["decoder"], a, path)
    return answers


def _settings(n):
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if SHRINK else [])
    return settings(max_examples=n, deadline=None, database=None, derandomize=SEED is None, phases=phases,
                    suppress_health_check=list(HealthCheck), print_blob=True)


def run_mutations(workers, seeds, root, label: str):
    path = session_file(root, f"mut-{label}")

    @_settings(EXAMPLES)
    @given(mutated(seeds))
    def one(case):
        check(workers, path, case.data, f"mutation:{case.kind}", f"{case.seed}: {case.what}")

    if SEED is not None:
        one = hyp_seed(int(SEED))(one)
    one()


def _record_mutation_rows():
    for kind in sorted(MUTATIONS):
        key = f"mutation:{kind}"
        if TALLY.done(key):
            TABLE.record(key, TALLY.row(key, MUTATIONS[kind][1]))


@functools.lru_cache(maxsize=None)
def built_seeds():
    return [fh.Seed(n, d) for n, d in sorted(fh.builder_seeds().items())]


@functools.lru_cache(maxsize=None)
def real_seeds():
    """The real seed traces of ../shared/realtraces where it is present, else the real traces
    committed in tests/data/ (a user's clone)."""
    found = fh.real_seeds(REALTRACES if os.path.isdir(REALTRACES) else None) or fh.data_seeds(DATA)
    return [fh.Seed(n, d) for n, d in sorted(found.items())]


# ----------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------

def test_the_c_decoder_is_tested():
    if not HAVE_C:
        pytest.skip("the C decoder (_wirescan) is not compiled here (python setup.py build_ext --inplace): "
                    "the fuzz tests run the numpy decoder only")


def test_mutations_of_built_traces(workers, inputs_dir):
    run_mutations(workers, built_seeds(), inputs_dir, "built")
    _record_mutation_rows()


def test_mutations_of_real_traces(workers, inputs_dir):
    seeds = real_seeds()
    assert len(seeds) == 3, [s.name for s in seeds]  # REAL_SEEDS, or DATA_SEEDS in a clone
    run_mutations(workers, seeds, inputs_dir, "real")
    _record_mutation_rows()


def _truncation_points(seed: fh.Seed, limit=None):
    points = seed.boundaries[:-1]
    if limit is None or len(points) <= limit:
        return points
    step = len(points) / limit
    return sorted(set(seed.top_level_boundaries) | {points[int(i * step)] for i in range(limit)})


def test_truncation_at_every_field_boundary(workers, inputs_dir):
    """A half-written trace stops at any field boundary: each prefix is a report or a clean error."""
    seeds = list(built_seeds()) + real_seeds()
    path = session_file(inputs_dir, "trunc")
    key = "truncation:every-boundary"
    for seed in seeds:
        limit = None if (EXHAUSTIVE or seed.name.startswith("built:")) else REAL_TRUNCATIONS_CI
        for cut in _truncation_points(seed, limit):
            check(workers, path, seed.data[:cut], key, f"{seed.name} truncated to {cut} bytes")
    n_built = sum(len(s.boundaries) - 1 for s in seeds if s.name.startswith("built:"))
    what = (f"each trace cut at every protobuf field boundary, at any depth ({n_built} cuts of the built traces; "
            f"real traces: {'all' if EXHAUSTIVE else f'{REAL_TRUNCATIONS_CI} evenly spread and every plane'} boundaries)")
    if TALLY.done(key):
        TABLE.record(key, TALLY.row(key, what))


@pytest.mark.parametrize("name", list(fh.CONSTRUCTIONS))
def test_constructed_extremes(name, workers, inputs_dir):
    what, build = fh.CONSTRUCTIONS[name]
    path = session_file(inputs_dir, "construct")
    data = build()
    try:
        check(workers, path, data, f"construction:{name}", what)
    finally:
        os.remove(path)  # up to 30 MB each
    key = f"construction:{name}"
    if TALLY.done(key):
        TABLE.record(key, TALLY.row(key, f"{what} ({len(data) / 1e6:.1f} MB)" if len(data) > 1e6 else what))


def test_every_regression_input_is_described():
    files = sorted(f for f in os.listdir(REGRESSION_DIR) if not f.startswith(".")) \
        if os.path.isdir(REGRESSION_DIR) else []
    assert files == sorted(REGRESSIONS), "describe each file of tests/fuzz_regressions/ in REGRESSIONS"


def test_regression_inputs(workers, inputs_dir):
    """Every input that once crashed, hung or blew up the analyzer, or made the decoders
    disagree, replayed through both decoders."""
    for name in sorted(REGRESSIONS):
        suffix = ".xplane.pb.gz" if name.endswith(".gz") else ".xplane.pb"
        path = session_file(inputs_dir, f"regr-{name.split('.')[0]}", suffix)
        with open(os.path.join(REGRESSION_DIR, name), "rb") as f:
            check(workers, path, f.read(), f"regression:{name}", REGRESSIONS[name])
    for name in sorted(REGRESSIONS):
        key = f"regression:{name}"
        if TALLY.done(key):
            TABLE.record(key, TALLY.row(key, f"regression `tests/fuzz_regressions/{name}`: {REGRESSIONS[name]}"))
