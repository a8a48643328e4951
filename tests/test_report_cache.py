"""The persistent report cache (``tfbneck_plugin/cache.py``) as the CLI, the API and the tab
use it: where it lives, what invalidates an entry, several processes writing at once, its
bound, and the tab's ``/fleet`` route answered from it. Real sessions (the demo runs,
hard-linked under many run names: ``tests/support/fleet_logs.py``), real processes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from tensorboard.plugins import base_plugin

from conftest import DEMO_LOGS, tfbneck_cmd
from support.fleet_logs import build_fleet, real_sessions
from support.logdir_cli import snapshot


def cli(*args, cache_dir, timeout=600):
    return subprocess.run(tfbneck_cmd() + list(args), capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, TFBNECK_CACHE_DIR=str(cache_dir)))


def entries(cache_dir):
    out = []
    for folder, _dirs, files in os.walk(cache_dir):
        out += [os.path.join(folder, f) for f in files]
    return sorted(out)


def check_entries_valid(cache_dir):
    """Every file is a whole entry whose key is its name; no temporary file is left."""
    files = entries(cache_dir)
    assert files
    for path in files:
        name = os.path.basename(path)
        assert not name.startswith(".tmp-"), f"temporary file left: {path}"
        key = name.split(".")[0]
        with open(path) as f:
            entry = json.load(f)  # a torn entry does not parse
        assert entry["key"] == key and entry["format"] == 1
        body = entry.get("report") or entry.get("summary")
        assert body["status"] == "ok" and body["session"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cachelogs") / "logs"
    build_fleet(str(root), real_sessions(DEMO_LOGS, None), runs=24, sessions_per_run=1)
    return str(root)


def test_two_fleet_processes_at_once_leave_a_valid_cache(logs, tmp_path):
    cache_dir = tmp_path / "cache"
    cmd = tfbneck_cmd() + ["fleet", logs, "--format", "json"]
    env = dict(os.environ, TFBNECK_CACHE_DIR=str(cache_dir))
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-1500:] for o in outs]
    first, second = (json.loads(o[0]) for o in outs)
    assert first == second and first["sessions"] == 24
    check_entries_valid(cache_dir)
    assert len(entries(cache_dir)) == 2 * 24  # a report and its summary per session
    third = cli("fleet", logs, "--format", "json", cache_dir=cache_dir)
    assert json.loads(third.stdout) == first


def test_cache_lives_outside_the_logdir_and_follows_xdg(logs, tmp_path):
    before = snapshot(logs)
    r = cli("analyze", logs, "--format", "json", cache_dir=tmp_path / "c")
    assert r.returncode == 0
    assert snapshot(logs) == before  # nothing written into the logdir
    env = {k: v for k, v in os.environ.items() if k != "TFBNECK_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run([sys.executable, "-c", "from tfbneck_plugin import cache; print(cache.cache_dir())"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == str(tmp_path / "xdg" / "tfbneck" / "reports")


def test_changed_trace_torn_entry_and_no_cache(logs, tmp_path, monkeypatch):
    from tfbneck_plugin import cache
    from tfbneck_plugin.logdir import find_sessions
    cache_dir = tmp_path / "c"
    cli("analyze", logs, "--format", "json", cache_dir=cache_dir)
    n = len(entries(cache_dir))
    assert n == 2 * 24
    monkeypatch.setenv("TFBNECK_CACHE_DIR", str(cache_dir))  # this process reads the same cache
    s = find_sessions(logs).sessions[0]
    key = cache.key_of(s)
    assert cache.get(s, key)["session"] == s.name
    # A trace written again (a new file, a new mtime) is a new key: the old report is not
    # served. (Copied, not touched: the fixture's files are hard links to the demo runs.)
    shutil.copyfile(s.files[0], s.files[0] + ".new")
    t = os.stat(s.files[0]).st_mtime_ns + 10**9
    os.utime(s.files[0] + ".new", ns=(t, t))
    os.replace(s.files[0] + ".new", s.files[0])
    assert cache.key_of(s) != key and cache.get(s) is None
    # A torn entry is a miss.
    with open(os.path.join(str(cache_dir), key[:2], key + ".json"), "w") as f:
        f.write('{"format": 1, "key": "')
    assert cache.get(s, key) is None
    # --no-cache neither reads nor writes.
    fresh = tmp_path / "none"
    r = cli("fleet", logs, "--no-cache", "--format", "json", cache_dir=fresh)
    assert r.returncode == 0 and not os.path.exists(fresh)


def test_trim_drops_the_least_recently_used(logs, tmp_path, monkeypatch):
    from tfbneck_plugin import cache
    from tfbneck_plugin.logdir import find_sessions
    monkeypatch.setenv("TFBNECK_CACHE_DIR", str(tmp_path / "c"))
    sessions = find_sessions(logs).sessions[:6]
    for i, s in enumerate(sessions):
        cache.cached_analyze(s)
        for path in entries(tmp_path / "c"):  # the i-th session's entries are the (10 - i)-th hour old
            if os.path.basename(path).startswith(cache.key_of(s)):
                os.utime(path, (time.time() - 3600 * (10 - i),) * 2)
    sizes = {p: os.path.getsize(p) for p in entries(tmp_path / "c")}
    keep = [cache.key_of(s) for s in sessions[3:]]
    limit = sum(size for p, size in sizes.items() if os.path.basename(p).split(".")[0] in keep)
    result = cache.trim(limit)
    assert result["bytes"] <= limit
    left = {os.path.basename(p).split(".")[0] for p in entries(tmp_path / "c")}
    assert left == set(keep)


def test_tab_fleet_route_answers_from_the_cache(logs, tmp_path, monkeypatch):
    from tfbneck_plugin.plugin import BottleneckPlugin
    cache_dir = tmp_path / "c"
    cli_fleet = json.loads(cli("fleet", logs, "--format", "json", cache_dir=cache_dir).stdout)
    monkeypatch.setenv("TFBNECK_CACHE_DIR", str(cache_dir))
    plugin = BottleneckPlugin(base_plugin.TBContext(logdir=logs))
    deadline = time.monotonic() + 120
    while True:
        try:
            code, body, _ = plugin.fleet_impl({})
            break
        except Exception as err:  # 503 while the first scan runs
            assert getattr(err, "status", None) == 503 and time.monotonic() < deadline
            time.sleep(0.2)
    assert code == 200 and body["pending"] == 0 and body["sessions"] == 24
    assert body["categories_ms"] == pytest.approx(cli_fleet["categories_ms"], rel=1e-9)
    assert [r["run"] for r in body["runs"]] == [r["run"] for r in cli_fleet["runs"]]
    code, grouped, _ = plugin.fleet_impl({"group_by": r"exp-(\w+)-"})
    assert {g["group"] for g in grouped["groups"]} == {r["run"].split("exp-")[1].rsplit("-", 1)[0]
                                                        for r in cli_fleet["runs"]}
    with pytest.raises(Exception) as err:
        plugin.fleet_impl({"group_by": "("})
    assert err.value.status == 400 and "group_by" in str(err.value.body())


def test_remote_logdir_keyed_by_the_stores_size_and_time(tmp_path, monkeypatch):
    """An fsspec logdir (memory://, as s3:// or gs:// would be): the entry is keyed by what
    the store says of each file; a file written again is a new key, and the report read
    back from the cache is the one analysed."""
    fsspec = pytest.importorskip("fsspec")
    from tfbneck_plugin import cache
    from tfbneck_plugin.logdir import find_sessions
    monkeypatch.setenv("TFBNECK_CACHE_DIR", str(tmp_path / "c"))
    fs = fsspec.filesystem("memory")
    root = f"memory://tfb-cache-test-{os.getpid()}-{time.monotonic_ns()}/logs"
    trace = next(iter(sorted(
        os.path.join(d, f) for d, _, fs_ in os.walk(os.path.join(DEMO_LOGS, "cpu_bound_input")) for f in fs_
        if f.endswith(".xplane.pb"))))
    path = f"{root}/run/plugins/profile/2026_11_30_12_21_03/vm.xplane.pb"
    try:
        with fs.open(path, "wb") as f:
            f.write(open(trace, "rb").read())
        s = find_sessions(root).sessions[0]
        key = cache.key_of(s)
        assert key is not None and cache.get(s, key) is None
        first = cache.cached_analyze(s)
        assert first["status"] == "ok" and cache.get(s, key) == first
        time.sleep(0.01)  # the memory store stamps files with their creation time
        with fs.open(path, "wb") as f:
            f.write(open(trace, "rb").read())
        assert cache.key_of(s) != key
    finally:
        fs.rm(root.split("/logs")[0], recursive=True)
