#!/usr/bin/env bash
# The lowest-versions job. Called by tests/run.sh beside its first phases; safe to re-run.
#
#   bash tests/run_min_versions.sh [PYTEST ARGS...]
#
# 1. build/venv-min: exactly the floors setup.py declares for install_requires and the
#    [xprof], [remote], [beam], [gpu] and [test] extras (each ==floor, from tests/min_versions.py; what
#    they pull in at its newest compatible release, as a resolver's "lowest-direct" mode),
#    then the floors tier (TFBNECK_TEST_TIER=floors, tests/conftest.py): the tests that start no
#    TensorFlow and no browser, less those whose outcome no floor can change (FLOORS_LEAVE_OUT:
#    the repository's own text, our handling of odd files and outputs, our words and rules on
#    top of library calls a kept test makes alike). What stays drives each floor library through
#    our code: the reader, analyzer and CLI on recorded traces, the plugin on a real TensorBoard
#    2.12, remote storage, Beam, scipy's tests, psutil, the notebook; tests/README.md names the
#    tests per floor.
# 2. build/venv-min-tf: the [tensorflow] extra's floors with uv's lowest-direct resolution
#    (TensorFlow's own pins rule out some of our floors, e.g. numpy 1.23.2), then the Keras
#    callback test that runs on any TensorFlow (tests/test_tf_floor.py).
#
# TFBNECK_MIN_VENV: where the venvs go (default build/venv-min; stage 2 adds -tf);
# TFBNECK_MIN_WORKERS: pytest workers of stage 1 (default 2; tests/run.sh runs this job with 1
# beside its own phases); PYTHON:
# the interpreter (default python3: the floors are those that exist for it, so use the
# oldest Python that setup.py's python_requires admits).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TFBNECK_MIN_VENV:-build/venv-min}
PY=${PYTHON:-python3}

"$PY" - <<'EOF'
import sys
sys.path.insert(0, "tests")
import min_versions
want = tuple(int(x) for x in min_versions.python_floor().split("."))
if sys.version_info[:len(want)] != want:
    print(f"run_min_versions.sh: note: Python {sys.version.split()[0]} is not the oldest declared "
          f"({'.'.join(map(str, want))}); the floors are tested on this one", file=sys.stderr)
EOF

new_venv() {  # new_venv DIR: a venv with uv in it (uv resolves in seconds where pip's
              # backtracking over boto3 and google-api-core releases took 5 to 9 minutes here)
  if ! "$1/bin/python" -m pip --version >/dev/null 2>&1; then  # absent, or left half-made
    rm -rf "$1" && "$PY" -m venv "$1"
  fi
  "$1/bin/python" -m pip install -q --upgrade pip uv 2>&1 | grep -v "is ignored" >&2 || true
}

install_checkout() {  # install_checkout DIR: this checkout, editable, into DIR's venv. Where the
  # checkout's C extension is already built from its current source (tests/run.sh's main install),
  # the build is skipped (CC=false; the extension is optional in setup.py) and that one is used:
  # rebuilding it writes the .so in place, under the main environment's test processes that have
  # it loaded.
  local so
  so=$(ls tfbneck_plugin/trace/_wirescan*.so 2>/dev/null | head -n 1)
  if [ -n "$so" ] && [ "$so" -nt tfbneck_plugin/trace/_wirescan.c ]; then
    CC=false "$1/bin/uv" pip install -q -p "$1/bin/python" --no-deps --reinstall-package tfbneck-plugin -e .
  else
    "$1/bin/uv" pip install -q -p "$1/bin/python" --no-deps --reinstall-package tfbneck-plugin -e .
  fi
}

versions() {  # versions DIR NAME...: "name version, ..." of what DIR's venv holds
  local dir=$1; shift
  "$dir/bin/python" -c 'import sys, importlib.metadata as m; print(", ".join(f"{n} {m.version(n)}" for n in sys.argv[1:]))' "$@"
}

# Resolver hints, not floors of ours: aiobotocore[boto3] takes the boto3 that the pinned
# aiobotocore was released with (moto needs boto3), and TensorBoard before 2.17 imports
# pkg_resources, which setuptools 81 removed: environments with TensorBoard 2.12 have an
# older setuptools.
HINTS=$'aiobotocore[boto3]\nsetuptools<81'

# --- 1. Floors of everything but the frameworks (TensorFlow; JAX and PyTorch, which only the --
# tests that train use: marked tf, not run here) ---------------------------------------------
new_venv "$VENV"
"$VENV/bin/python" tests/min_versions.py xprof remote beam gpu test --exclude tensorflow,tf-keras,jax,torch > "$VENV/pins.txt"
echo "$HINTS" >> "$VENV/pins.txt"
"$VENV/bin/uv" pip install -q -p "$VENV/bin/python" -r "$VENV/pins.txt"
install_checkout "$VENV"
echo "run_min_versions.sh: floors: $(versions "$VENV" numpy protobuf psutil tqdm tensorboard \
  tensorboard-plugin-profile fsspec scipy s3fs gcsfs apache-beam nvidia-ml-py)"
status=0
# The floors tier, not every test without TensorFlow and a browser: the main phases of tests/run.sh
# run beside this job, and the tier takes a little over half their CPU time (tests/README.md, "The
# lowest-versions job"). It leaves out, besides the rest of FLOORS_LEAVE_OUT, the manual's build
# (marker docs: the docs extra declares no floor of the package's own) and
# test_storage_packages_are_current (it checks the main environment's s3fs: here it is the floor on
# purpose). The fuzz tests with a quarter of their examples (the main environment runs them all):
# hypothesis's floor and the reader's robustness on the floors are tested, in less of the machine.
TFBNECK_TEST_TIER=floors TFBNECK_FUZZ_EXAMPLES=${TFBNECK_FUZZ_EXAMPLES:-50} \
"$VENV/bin/python" -m pytest tests -p no:cacheprovider -n "${TFBNECK_MIN_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
  "$@" || status=$?

# --- 2. The [tensorflow] extra's floors -----------------------------------------------------
TFVENV="$VENV-tf"
new_venv "$TFVENV"
"$TFVENV/bin/python" tests/min_versions.py tensorflow --raw > "$TFVENV/requirements.txt"
printf 'pytest>=7\npytest-timeout>=2.1\n%s\n' "$HINTS" >> "$TFVENV/requirements.txt"
"$TFVENV/bin/uv" pip install -q -p "$TFVENV/bin/python" --resolution lowest-direct -r "$TFVENV/requirements.txt"
install_checkout "$TFVENV"
echo "run_min_versions.sh: TensorFlow floors: $(versions "$TFVENV" tensorflow tf-keras numpy protobuf tensorboard)"
"$TFVENV/bin/python" -m pytest tests/test_tf_floor.py -p no:cacheprovider "$@" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
exit "$status"
