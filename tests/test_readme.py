"""A first reader's test: the code blocks of the README and of every page of the manual
(``docs/``, in the order of ``mkdocs.yml``'s nav), run as written on a fresh copy of the
repository, in order, as a reader following them in one terminal would.

* The copy holds what a clone holds: the files git tracks, and new files it does not ignore
  (``git ls-files -co --exclude-standard``), so a change not yet committed is tested too.
* ```` ```bash ```` blocks run with ``bash -e -o pipefail`` in the copy. Once a block has made
  ``.venv`` (the README's first command), the blocks after it run inside that venv, as in
  the terminal where the reader activated it.
* ```` ```python ```` blocks run as scripts with that venv's Python. A block that is a
  fragment of the reader's own script (it uses ``model`` and ``ds``) says so with
  ``<!-- readme-test: with your model -->`` on the line before it; it then runs after
  :data:`YOUR_MODEL`, a small Keras model and dataset standing in for the reader's.
* ```` ```text ```` blocks preceded by ``<!-- readme-test: output -->`` show what the block
  before them printed: every line that is not ``...`` must appear in that output, so an
  example cannot drift from what the tool says.
* ``<!-- readme-test: server -->``: the block starts a server that runs until stopped (the
  TensorBoard command). It runs in a private network namespace where ``unshare -rn`` is
  allowed (its default port is free there, whatever else runs on the machine; else on this
  machine's loopback) until the Bottleneck tab answers with the logdir's sessions, then it is
  stopped.
* ``<!-- readme-test: skip REASON -->``: not run here, and the reason says where it is tested
  (the test suite itself; a job that needs a cluster of machines). Blocks without a language
  (diagrams, paths) are not code.
* A block the same as one already run (the README's install command, repeated in the manual's
  Getting started) is not run twice, unless an output block follows it.

pip uses its own download cache, as a reader's pip does: the wheels that ``tests/run.sh``
installed into the test venv moments before are found there, not downloaded again
(``TFBNECK_README_PIP_CACHE`` names another cache folder). Slow (a fresh venv with
TensorFlow): marked ``tf`` and ``readme``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List

import pytest

from conftest import ARTIFACTS, ROOT

README = os.path.join(ROOT, "README.md")


def manual_pages(root: str = ROOT) -> List[str]:
    """The manual's pages, ``docs/*.md`` in the order of ``mkdocs.yml``'s nav (the order a reader
    meets them), as paths under ``root``."""
    with open(os.path.join(root, "mkdocs.yml"), encoding="utf-8") as f:
        nav = f.read().split("\nnav:", 1)[1]
    return [os.path.join(root, "docs", page) for page in re.findall(r"^\s+- [^:\n]+: (\S+\.md)\s*$", nav, re.M)]


def documents(root: str = ROOT) -> List[str]:
    """What a reader follows: the README, then the manual's pages."""
    return [os.path.join(root, "README.md")] + manual_pages(root)


def all_text(root: str = ROOT) -> str:
    out = []
    for path in documents(root):
        with open(path, encoding="utf-8") as f:
            out.append(f.read())
    return "\n".join(out)

#: What ``<!-- readme-test: with your model -->`` blocks run after: the reader's own model and
#: data, here 64 batches of 32 random examples and a small dense model, compiled.
YOUR_MODEL = """
import numpy as np
import tensorflow as tf
import keras

x = np.random.rand(2048, 64).astype("float32")
y = np.random.rand(2048, 1).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(tf.data.AUTOTUNE)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
"""
#: How long one block may run (seconds): the TensorFlow install is the longest.
BLOCK_TIMEOUT_S = 1500
_ANNOTATION = re.compile(r"<!--\s*readme-test:\s*(\S+)\s*(.*?)\s*-->")
_FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass
class Block:
    """One fenced block of the README or a manual page: its language, text, line and annotation."""
    lang: str
    code: str
    line: int
    mode: str = ""     # "", "with", "output", "server", "skip"
    note: str = ""
    path: str = README

    def where(self) -> str:
        docs = self.path.rfind(os.sep + "docs" + os.sep)  # a manual page: docs/..., else README.md
        return f"{self.path[docs + 1:] if docs >= 0 else os.path.basename(self.path)} line {self.line}"


def blocks(path: str = README) -> List[Block]:
    """The fenced blocks of one Markdown file in order, each with the annotation on the line before it."""
    lines = open(path, encoding="utf-8").read().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        note = _ANNOTATION.match(lines[start - 1].strip()) if start else None
        b = Block(m.group(1), "\n".join(body) + "\n", start + 1, path=path)
        if note:
            b.mode, b.note = note.group(1), note.group(2)
        out.append(b)
    return out


def test_readme_blocks_are_annotated_consistently():
    """Cheap checks that run without the slow part, over the README and every manual page:
    annotations are known, skips give a reason, output blocks follow a block that runs, and
    nothing asks a reader to open the optional test data outside the repository."""
    pages = manual_pages()
    assert len(pages) >= 10 and all(os.path.isfile(p) for p in pages), pages
    assert blocks(), "the README has no code block"
    bs = [b for path in documents() for b in blocks(path)]
    for i, b in enumerate(bs):
        assert b.mode in ("", "with", "output", "server", "skip"), (b.where(), b.mode)
        if b.mode == "skip":
            assert len(b.note) > 20, f"{b.where()}: a skipped block says why and where it is tested"
        if b.mode == "output":
            assert b.lang == "text" and i and bs[i - 1].lang in ("bash", "python"), b.where()
        if b.lang in ("bash", "python"):
            assert "shared/" not in b.code, f"{b.where()}: asks a reader to use files outside the repository"
    text = all_text()
    # The package is not on an index: the install forms that pip accepts from a clone only.
    assert "tfbneck-plugin[" not in text and "pip install tfbneck" not in text
    langs = [b.lang for b in bs if b.mode != "skip"]
    assert "bash" in langs and "python" in langs


# ---------------------------------------------------------------------------------------------
# Running them
# ---------------------------------------------------------------------------------------------

def fresh_copy(dest: str) -> str:
    """What a clone of the working tree holds, copied to ``dest``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = os.path.join(ROOT, f)
        if os.path.isfile(src) and not os.path.islink(src):
            os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, f))
    return dest


class Reader:
    """A terminal in the copy: runs blocks, remembers the last output."""

    def __init__(self, clone: str, log):
        self.clone, self.log = clone, log
        self.last = ""
        self.env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        self.env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", TF_CPP_MIN_LOG_LEVEL="2")
        if os.environ.get("TFBNECK_README_PIP_CACHE"):
            self.env["PIP_CACHE_DIR"] = os.environ["TFBNECK_README_PIP_CACHE"]
        self.base_path = self.env["PATH"]

    def _venv_env(self):
        env = dict(self.env)
        venv = os.path.join(self.clone, ".venv")
        if os.path.isdir(venv):  # as after `. .venv/bin/activate` in the README's first command
            env.update(VIRTUAL_ENV=venv, PATH=os.path.join(venv, "bin") + os.pathsep + self.base_path)
        return env

    def run(self, b: Block) -> None:
        if b.lang == "bash":
            argv = ["bash", "-e", "-o", "pipefail", "-c", b.code]
        else:
            python = os.path.join(self.clone, ".venv", "bin", "python")
            script = os.path.join(self.clone, f".readme_block_{b.line}.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write((YOUR_MODEL if b.mode == "with" else "") + b.code)
            argv = [python if os.path.exists(python) else sys.executable, script]
        started = time.monotonic()
        r = subprocess.run(argv, cwd=self.clone, env=self._venv_env(), capture_output=True, text=True,
                           timeout=BLOCK_TIMEOUT_S)
        self.log.append({"where": b.where(), "lang": b.lang, "seconds": round(time.monotonic() - started, 1),
                         "rc": r.returncode})
        self.last = r.stdout + r.stderr
        assert r.returncode == 0, f"{b.where()} failed (exit {r.returncode}):\n{b.code}\n--- output ---\n{self.last[-4000:]}"

    def check_output(self, b: Block) -> None:
        have = [line.rstrip() for line in self.last.splitlines()]
        for want in b.code.splitlines():
            want = want.rstrip()
            if want.strip() in ("", "...", "…"):
                continue
            assert any(want in line for line in have), \
                f"{b.where()}: the README shows {want!r}, which the command above does not print:\n{self.last[-4000:]}"

    def serve(self, b: Block) -> None:
        """Start the server block in its own network namespace, wait until the Bottleneck
        tab lists the logdir's sessions, stop it."""
        probe = ("import json, sys, time, urllib.request\n"
                 "deadline = time.time() + 240\n"
                 "while time.time() < deadline:\n"
                 "    try:\n"
                 "        with urllib.request.urlopen('http://localhost:6006/data/plugin/bottleneck/sessions', timeout=5) as r:\n"
                 "            body = json.load(r)\n"
                 "        if body['scanned'] and body['sessions']:\n"
                 "            print(json.dumps([[s['run'], s['session']] for s in body['sessions']])); sys.exit(0)\n"
                 "    except Exception:\n"
                 "        pass\n"
                 "    time.sleep(1)\n"
                 "sys.exit('the Bottleneck tab did not list a session within 240 s')\n")
        private = _can_unshare()  # else on this machine's own loopback: its port 6006 must be free
        script = (f"{'ip link set lo up' if private else 'true'}\n( {b.code.strip()} ) > .readme_server.log 2>&1 &\n"
                  f"server=$!\ntrap 'kill $server' EXIT\n{sys.executable} -c \"$PROBE\"\n")
        env = self._venv_env()
        env["PROBE"] = probe
        started = time.monotonic()
        r = subprocess.run((["unshare", "-rn"] if private else []) + ["bash", "-e", "-c", script], cwd=self.clone,
                           env=env, capture_output=True, text=True, timeout=300)
        self.log.append({"where": b.where(), "lang": "server", "seconds": round(time.monotonic() - started, 1),
                         "rc": r.returncode})
        log = open(os.path.join(self.clone, ".readme_server.log"), encoding="utf-8", errors="replace").read()
        assert r.returncode == 0, f"{b.where()}: {r.stderr[-2000:]}\n--- server ---\n{log[-3000:]}"
        self.last = r.stdout
        assert json.loads(r.stdout.strip().splitlines()[-1]), f"{b.where()}: the tab listed no session"


def _can_unshare() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rn", "true"], capture_output=True).returncode == 0


@pytest.mark.tf
@pytest.mark.readme
@pytest.mark.timeout(3600)
def test_every_readme_block_runs_as_written(tmp_path):
    clone = fresh_copy(str(tmp_path / "tfbneck"))
    log: List[dict] = []
    reader = Reader(clone, log)
    skipped, ran = [], set()
    try:
        bs = [b for path in documents(clone) for b in blocks(path)]
        for i, b in enumerate(bs):
            if b.mode == "skip":
                skipped.append((b.where(), b.note))
            elif b.mode == "output":
                reader.check_output(b)
            elif b.mode == "server":
                reader.serve(b)
            elif b.lang in ("bash", "python"):
                checked = i + 1 < len(bs) and bs[i + 1].mode == "output"
                if (b.lang, b.mode, b.code) in ran and not checked:
                    skipped.append((b.where(), "the same block ran earlier"))
                    continue
                reader.run(b)
                ran.add((b.lang, b.mode, b.code))
    finally:
        os.makedirs(ARTIFACTS, exist_ok=True)
        with open(os.path.join(ARTIFACTS, "readme_blocks.json"), "w", encoding="utf-8") as f:
            json.dump({"ran": log, "skipped": skipped}, f, indent=1)
    assert len(log) >= 5, log


# ---------------------------------------------------------------------------------------------
# What the README says of the code: flags and environment variables that exist
# ---------------------------------------------------------------------------------------------

#: ``--options`` the README names that belong to neither tfbneck nor TensorBoard, and whose.
OTHER_TOOLS_FLAGS = {
    "--runner=DataflowRunner": "Beam pipeline options, passed through --beam-options",
    "--project": "Beam (Dataflow) pipeline option", "--region": "Beam (Dataflow) pipeline option",
    "--temp_location": "Beam (Dataflow) pipeline option", "--runner=DirectRunner": "Beam pipeline option",
    "--cap-add": "docker run", "--resolution": "uv pip install (the lowest-versions job)",
    "--with-tests": "benchmarks/calibration.py", "--pairs-table": "demo_logs/make_demo_logs.py",
    "--epochs": "the reader's own train.py, in a tfbneck watch example",
    "--corpus": "benchmarks/trigger_replay.py",
    "--md": "benchmarks/slowdown_corpus.py report", "--readme": "benchmarks/slowdown_corpus.py report",
    "--make": "benchmarks/compare_noise.py", "--markdown": "benchmarks/compare_noise.py",
    "--pairs": "benchmarks/bench_system_view.py", "--seconds": "benchmarks/bench_system_view.py",
    "--no-system": "benchmarks/bench_steptime.py", "--out": "benchmarks/bench_fleet.py",
    "--windows": "benchmarks/bench_many_windows.py", "--no-xprof": "benchmarks/bench_analyze.py",
    # The manual's development pages (TensorFlow's profiler abort, its reproduction and harness).
    "--steps": "benchmarks/profiler_abort_repro.py", "--passes": "benchmarks/profiler_abort_repro.py",
    "--driver": "benchmarks/profiler_abort_repro.py", "--host-tracer-level": "benchmarks/profiler_abort_repro.py",
    "--worker": "benchmarks/profiler_abort_repro.py", "--ports": "benchmarks/profiler_abort_repro.py",
    "--per-child": "benchmarks/profiler_abort_harness.py", "--every": "benchmarks/profiler_abort_harness.py",
    "--window-steps": "benchmarks/profiler_abort_harness.py", "--gdb": "benchmarks/profiler_abort_harness.py",
    "--job": "tests/tf_jobs/multiworker_fit.py",
    "--args": "gdb", "--start-address": "objdump", "--stop-address": "objdump",
    "--quick": "tests/run.sh (the quick tier)", "--strict": "mkdocs build",
    "--load": "benchmarks/tutorial_corpus.py (and benchmarks/tutorial_fixes.py)",
}


def test_flags_credited_to_a_file_of_ours_are_in_it():
    """Each :data:`OTHER_TOOLS_FLAGS` entry that names one of the project's files is a flag that
    file defines (its text holds the flag), so the table cannot excuse a flag that was removed."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = []
    for flag, owner in OTHER_TOOLS_FLAGS.items():
        path = os.path.join(root, owner.split()[0])
        if owner.split()[0].endswith((".py", ".sh")) and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                if flag.split("=")[0] not in f.read():
                    missing.append(f"{flag} ({owner})")
    assert not missing, f"flags credited to files that do not define them: {missing}"


def _readme_flags():
    text = all_text()
    return sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*(?:=[A-Za-z]+Runner)?", text)))


def test_every_flag_the_readme_names_exists():
    """Each ``--option`` in the README is one of tfbneck's (``tfbneck <command> --help``),
    one of TensorBoard's with the tab loaded (``tensorboard --helpfull``), or another tool's
    (:data:`OTHER_TOOLS_FLAGS`, which says whose): no flag that does not exist, as the tab's
    remote error once named (``--remote-timeout`` is the CLI's, not TensorBoard's)."""
    from tfbneck_plugin.cli.main import _parser
    ours = set()
    for sub in _parser()._subparsers._group_actions[0].choices.values():  # analyze, compare, watch...
        ours |= set(re.findall(r"--[a-z][a-z0-9-]*", sub.format_help()))
    ours |= {"--version", "--help"}
    tb = subprocess.run([os.path.join(os.path.dirname(sys.executable), "tensorboard"), "--helpfull"],
                        capture_output=True, text=True, timeout=300)
    theirs = set(re.findall(r"--[a-z_]+", tb.stdout + tb.stderr))
    assert "--bottleneck_logdir" in theirs and "--logdir" in theirs, "tensorboard --helpfull did not list the tab's flag"
    unknown = [f for f in _readme_flags() if f not in ours | theirs and f not in OTHER_TOOLS_FLAGS]
    assert not unknown, f"the README names options that nothing defines: {unknown}"
    assert "--remote-timeout" not in theirs  # the CLI's flag: the tab's messages must not send users there


def test_every_environment_variable_the_readme_names_is_read_by_the_code():
    text = all_text()
    names = set(re.findall(r"`((?:TFBNECK|AWS_ENDPOINT|STORAGE_EMULATOR)[A-Z0-9_]*)(?:=[^`]*)?`", text))
    assert {"TFBNECK_REMOTE_TIMEOUT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} <= names
    source = ""  # the package, and the tests for the variables that steer them (TFBNECK_FUZZ_...)
    for dirpath, _dirs, files in [w for top in ("tfbneck_plugin", "tests") for w in os.walk(os.path.join(ROOT, top))]:
        for f in files:
            if f.endswith(".py"):
                source += open(os.path.join(dirpath, f), encoding="utf-8").read()
    missing = [n for n in sorted(names) if f'"{n}"' not in source and f"'{n}'" not in source]
    assert not missing, f"the README names environment variables the code never reads: {missing}"


def test_the_slowdown_corpus_table_in_the_manual_is_the_one_in_its_report():
    """The manual's accuracy page carries the slowdown corpus's table and totals, written by
    the same command as ``docs/slowdown_capture.md`` (``--readme docs/accuracy.md``); both must
    come from one run of it (a page edited by hand, or a report made again without
    ``--readme``, fails)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from slowdown_table import README_BEGIN, README_END
    text = open(os.path.join(ROOT, "docs", "accuracy.md"), encoding="utf-8").read()
    assert text.count(README_BEGIN) == 1 and text.count(README_END) == 1
    block = text[text.index(README_BEGIN):text.index(README_END)]
    report = open(os.path.join(ROOT, "docs", "slowdown_capture.md"), encoding="utf-8").read()
    captures = report.split("## Captures", 1)[1].split("\n## ", 1)[0]
    table = [x for x in captures.splitlines() if x.startswith("|")]
    totals = [x for x in captures.splitlines() if x.strip() and not x.startswith("|")]
    assert len(table) > 20 and [x for x in block.splitlines() if x.startswith("|")] == table
    assert totals and all(x in block.splitlines() for x in totals), totals
