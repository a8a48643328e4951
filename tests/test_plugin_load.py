"""The plugin under load and attack: 50 concurrent clients on loopback against a real
TensorBoard while a session's trace is replaced, plus hostile requests meanwhile.

Checks: no error responses to valid requests, no stale report after a file changed,
hostile requests refused with 400/404 and an ``error_kind``, bounded server memory, nothing
written into the logdir. Duration: at least TFBNECK_LOAD_SECONDS (default 15 s; the issue's
30 s run: TFBNECK_LOAD_SECONDS=30), and on until each check has been made often enough
(:data:`TARGETS`), at most :data:`MAX_SECONDS`: a loaded machine serves fewer requests a
second, so the run takes longer instead of checking less. Throughput is not asserted.
"""
import glob
import json
import os
import random
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import DEMO_LOGS
from support.plugin_helpers import TensorBoard, snapshot_tree

psutil = pytest.importorskip("psutil")
CLIENTS = 50
SECONDS = float(os.environ.get("TFBNECK_LOAD_SECONDS", "15"))
#: Checks each run makes at least: reports served, hostile requests refused, reports of the
#: changing session served between two changes (each compared with the file's verdict).
TARGETS = {"ok": 100, "hostile": 20, "checked_fresh": 5}
#: The longest the run goes on to reach TARGETS (seconds).
MAX_SECONDS = max(SECONDS, 300.0)
#: The changing session's file is replaced every CHANGE_EVERY_S seconds, once a report of its
#: current version has been served (at most CHANGE_WAIT_S later, so a slow analysis still
#: sees changes).
CHANGE_EVERY_S = 1.5
CHANGE_WAIT_S = 30.0
#: Server memory may grow by at most this much over the run (caches of four reports and
#: thread stacks are a few MB; a leak per request would exceed it quickly).
MAX_RSS_GROWTH_MB = 300
HOSTILE = ["report?run=../../etc&session=passwd", "report?run=/etc&session=x", "report?run=%2e%2e%2f&session=x",
           "report?run=%ff%fe&session=x", "report?run=nosuchrun&session=s", "report?session=x",
           "report?run=mutating&session=" + "a" * 5000]


def _trace(run):
    return glob.glob(os.path.join(DEMO_LOGS, run, "plugins", "profile", "*", "*.xplane.pb"))[0]


class LoadRun:
    """CLIENTS threads requesting at random from a real TensorBoard (``base``: the plugin's
    route prefix) while :meth:`mutator` replaces the trace of the session 'mutating' between
    ``versions`` ([(bytes, verdict)]). ``problems`` collects every wrong answer."""

    def __init__(self, base: str, sessions: list, versions: list, target):
        self.base, self.sessions, self.versions, self.target = base, sessions, versions, target
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.version = 0
        self.problems = []
        self.counts = {"ok": 0, "analysing": 0, "hostile": 0, "checked_fresh": 0}
        self.fresh_per_version = {}

    def get(self, route):
        try:
            with urllib.request.urlopen(self.base + route, timeout=120) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def client(self, seed):
        rnd = random.Random(seed)
        while not self.done.is_set():
            pick = rnd.random()
            if pick < 0.1:
                route = rnd.choice(HOSTILE)
                code, body = self.get(route)
                if code not in (400, 404) or b"Traceback" in body or b'"error_kind"' not in body:
                    self.problems.append(f"hostile {route}: {code} {body[:200]!r}")
                with self.lock:
                    self.counts["hostile"] += 1
            elif pick < 0.3:
                code, _ = self.get("sessions")
                if code != 200:
                    self.problems.append(f"sessions: {code}")
            else:
                self.report(rnd.choice(self.sessions))

    def report(self, s):
        with self.lock:
            version_at_start = self.version
        code, body = self.get("report?" + urllib.parse.urlencode({"run": s["run"], "session": s["session"]}))
        if code == 202:
            with self.lock:
                self.counts["analysing"] += 1
            return
        if code != 200:
            self.problems.append(f"report {s['run']}: {code} {body[:200]!r}")
            return
        report = json.loads(body)["sessions"][0]
        with self.lock:
            self.counts["ok"] += 1
            # Requested after the last change and answered before the next one: it must
            # describe the file as it is now, never an older version.
            fresh = s["run"] == "mutating" and self.version == version_at_start
            if fresh:
                self.counts["checked_fresh"] += 1
                self.fresh_per_version[version_at_start] = self.fresh_per_version.get(version_at_start, 0) + 1
        want = self.versions[version_at_start % 2][1]
        if fresh and report["bottleneck"] != want:
            self.problems.append(f"stale report: got {report['bottleneck']}, the file holds a '{want}' trace")

    def mutator(self):
        k = 0
        while not self.done.wait(CHANGE_EVERY_S):
            waited = time.monotonic()
            while not self.fresh_per_version.get(k) and time.monotonic() - waited < CHANGE_WAIT_S:
                if self.done.wait(0.1):
                    return
            k += 1
            tmp = self.target.parent / ".host.xplane.pb.tmp"
            tmp.write_bytes(self.versions[k % 2][0])
            with self.lock:
                os.replace(tmp, self.target)  # atomic, as a profiler's rename would be
                self.version = k

    def enough(self) -> bool:
        with self.lock:
            return all(self.counts[k] >= n for k, n in TARGETS.items())

    def run(self) -> float:
        """Runs at least SECONDS, then until TARGETS are met (at most MAX_SECONDS); returns
        the seconds it ran."""
        started = time.monotonic()
        threads = [threading.Thread(target=self.client, args=(i,)) for i in range(CLIENTS)]
        threads.append(threading.Thread(target=self.mutator))
        for t in threads:
            t.start()
        while time.monotonic() - started < MAX_SECONDS:
            if time.monotonic() - started >= SECONDS and self.enough():
                break
            time.sleep(0.2)
        self.done.set()
        for t in threads:
            t.join(timeout=180)
        return time.monotonic() - started


def wait_listed(tb: TensorBoard, count: int, timeout: float = 120.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        code, _, body = tb.get("sessions")
        if code == 200 and len(json.loads(body)["sessions"]) == count:
            return json.loads(body)["sessions"]
        assert time.monotonic() < deadline, f"{count} sessions were not listed: {code} {body[:300]!r}"
        time.sleep(0.1)


def test_fifty_clients_while_files_change(tmp_path):
    expected = os.path.join(DEMO_LOGS, "EXPECTED.json")
    if not os.path.exists(expected):
        pytest.skip("demo_logs/ has not been generated")
    logdir = tmp_path / "logs"
    shutil.copytree(DEMO_LOGS, logdir)
    # One session whose trace flips between two real traces with different verdicts.
    versions = [(open(_trace("compute_bound"), "rb").read(), "device"),
                (open(_trace("cpu_bound_input"), "rb").read(), "cpu")]
    session = logdir / "mutating" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    target = session / "host.xplane.pb"
    target.write_bytes(versions[0][0])
    before = snapshot_tree(logdir)
    with TensorBoard(str(logdir)) as tb:
        proc = psutil.Process(tb.proc.pid)
        demo_runs = len(json.load(open(expected)))
        load = LoadRun(tb.url + "data/plugin/bottleneck/", wait_listed(tb, demo_runs + 1), versions, target)
        rss_start = proc.memory_info().rss
        elapsed = load.run()
        rss_end = proc.memory_info().rss
    assert not load.problems, load.problems[:10]
    assert load.enough(), f"after {elapsed:.0f} s: {load.counts}"
    growth_mb = (rss_end - rss_start) / 2 ** 20
    assert growth_mb < MAX_RSS_GROWTH_MB, f"TensorBoard grew by {growth_mb:.0f} MB"
    after = snapshot_tree(logdir)
    # Only what the test itself touched may differ (the file it replaced, and its folder
    # whose mtime the rename updates): the plugin wrote nothing.
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed <= {str(target.relative_to(logdir)), str(session.relative_to(logdir))}, sorted(changed)[:10]
    print(f"{CLIENTS} clients for {elapsed:.0f} s: {load.counts}; server memory grew {growth_mb:.0f} MB")
