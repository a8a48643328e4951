"""What the API and notebook tests share: the demo runs' right verdicts and a logdir whose
names carry markup (as user code and folders can name them)."""
import json
import os

import pytest

from support.traces import cpu_input_bound
from support.xspace_builder import SpaceBuilder, session_path
from support.paths import ROOT

EXPECTED_PATH = os.path.join(ROOT, "demo_logs", "EXPECTED.json")
KIND_LABELS = {"cpu": "CPU-bound", "device": "Device-bound", "io": "I/O-bound", "network": "Network-bound"}
#: A tf.data stage and a run named with markup.
HOSTILE_STAGE = "Map<script>window.__tfb_xss=1</script>"
HOSTILE_RUN = "<img src=x onerror=window.__tfb_xss=2>"


def expected():
    """demo_logs/EXPECTED.json: run -> {"bottleneck", "cause"}."""
    if not os.path.exists(EXPECTED_PATH):
        pytest.skip("demo_logs/ has not been generated (python demo_logs/make_demo_logs.py)")
    with open(EXPECTED_PATH) as f:
        return json.load(f)


def hostile_logdir(root) -> str:
    """A logdir whose run and blocking tf.data stage are named with HTML, built with exact
    timings: each 10 ms step waits 6 ms for input in that stage, computes 2 ms on the CPU
    (breakdown: input 60 %, model compute 20 %, host 5 %, idle 15 %; verdict cpu)."""
    b = SpaceBuilder()
    cpu_input_bound(b, stage=HOSTILE_STAGE)
    b.write(session_path(root, run=HOSTILE_RUN))
    return str(root)
