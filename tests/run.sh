#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian machine, then runs them. Safe to re-run.
#
#   bash tests/run.sh [PYTEST ARGS...]          the whole suite: the type checker and every test in
#                                               $VENV, with the lowest-versions job
#                                               (tests/run_min_versions.sh) beside the first phases.
#                                               README and CI (.ci/run).
#   bash tests/run.sh --quick [PYTEST ARGS...]  the quick tier: the same installs, then every test
#                                               that starts no TensorFlow and is not marked slow,
#                                               with one real browser (tests/conftest.py, QUICK_MARKERS);
#                                               given test files (tests/test_rules.py ...), only
#                                               their quick-tier tests
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TFBNECK_VENV:-.venv}
TIER=whole
if [ "${1:-}" = "--quick" ]; then TIER=quick; shift; fi

# Headless Chromium for the browser tests (Debian's package; Playwright drives it).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "tests/run.sh: chromium is not installed and cannot be installed without root; browser tests will skip" >&2
  fi
fi

# The frontend's build tools, so that a test can check the committed bundle against its
# sources (optional: without Node that one test skips).
if command -v npm >/dev/null 2>&1; then
  (cd frontend && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1) \
    || echo "tests/run.sh: npm ci failed; the bundle freshness test will skip" >&2
fi

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# uv installs what pip would (the same requirements, the newest releases that fit), in about 10 s
# where pip takes 100 (it unpacks in parallel and links from its cache). uv does not read pip's
# configuration, so pip's find-links (a local wheel folder: this project's machines keep
# PyTorch's CPU build in one) and constraint files are passed on to it.
"$VENV/bin/python" -m pip install -q --upgrade pip uv
# uv writes no bytecode caches (.pyc) where pip compiles every module at install: Python writes
# them on first import instead, here and in the lowest-versions job's venvs, unless
# PYTHONDONTWRITEBYTECODE forbids it (set on this project's machines), which made every test
# process compile what it imports, the checkout's modules included: the suite ran 30 % slower.
unset PYTHONDONTWRITEBYTECODE
uv_args=()
pip_config=$("$VENV/bin/python" -m pip config list 2>/dev/null || true)  # its files and PIP_* variables
for key in find-links constraint; do
  for value in $(printf '%s\n' "$pip_config" | sed -n "s/^[^.]*\.$key='\(.*\)'\$/\1/p" | tr ' ' '\n' | sort -u); do
    value=${value#file://}
    if [ -e "$value" ]; then uv_args+=("--$key" "$value"); fi
  done
done
"$VENV/bin/uv" pip install -q -p "$VENV/bin/python" "${uv_args[@]}" -e ".[test,docs]"
if [ "$TIER" = quick ]; then
  # TFBNECK_TEST_TIER=quick: tests/conftest.py selects the tier's tests and makes any import of
  # TensorFlow fail, in the tests and in the processes they start; two workers, a file each.
  # Test files or node ids among the arguments replace the default "tests".
  where=tests
  for arg in "$@"; do case "$arg" in tests/*) where=; break ;; esac; done
  TFBNECK_TEST_TIER=quick exec "$VENV/bin/python" -m pytest $where -n 2 --dist loadfile --no-loadscope-reorder "$@"
fi
status=0
# Each phase's wall time on stderr, so a slow suite says where its time went.
phase_t0=0  # SECONDS counts from the script's start: the first phase is the installs
phase_done() { echo "tests/run.sh: $1 took $((SECONDS - phase_t0)) s" >&2; phase_t0=$SECONDS; }
phase_done "installs"
# The lowest-versions job (tests/run_min_versions.sh: the floors setup.py declares, in their own
# venvs) runs beside the phases that tolerate a busy machine (its installs, then its tests on one
# worker: the floors tier, the tests that drive a floor library through our code, tests/conftest.py),
# and ends before the TensorFlow tests that need the machine to themselves. Its output is printed
# when it ends.
mkdir -p build
min_log=build/min-versions.log
min_t0=$SECONDS
TFBNECK_MIN_WORKERS=1 bash tests/run_min_versions.sh "$@" >"$min_log" 2>&1 &
min_pid=$!
trap 'pkill -P "$min_pid" 2>/dev/null; kill "$min_pid" ${mypy_pid:-} 2>/dev/null; exit 130' INT TERM
# The type checker over the whole package (mypy.ini; the report's types are tfbneck_plugin/schema.py),
# beside the first tests (one core for ~25 s); its output is printed when they end.
mypy_log=build/mypy.log
"$VENV/bin/python" -m mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
# Every test that starts no TensorFlow job, and the README's blocks (mostly a pip install in a
# fresh venv): two workers, a file each, so the README's run overlaps the rest.
"$VENV/bin/python" -m pytest tests -m "not tf or readme" -n 2 --dist loadfile --no-loadscope-reorder "$@" \
  || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
phase_done "tests without TensorFlow (mypy beside them)"
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
cat "$mypy_log"
[ "$mypy_status" -eq 0 ] || [ "$status" -ne 0 ] || status=$mypy_status
# The TensorFlow jobs: two at a time (a file each), then those marked serial one at a time (they
# time steps or measure CPU shares and need the machine to themselves).
"$VENV/bin/python" -m pytest tests -m "tf and not readme and not serial" -n 2 --dist loadfile --no-loadscope-reorder "$@" \
  || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
phase_done "TensorFlow tests two at a time"
min_status=0
wait "$min_pid" || min_status=$?
cat "$min_log"
echo "tests/run.sh: lowest-versions job took $((SECONDS - min_t0)) s (beside the phases above)" >&2
[ "$min_status" -eq 0 ] || [ "$status" -ne 0 ] || status=$min_status
phase_done "waiting for the lowest-versions job"
"$VENV/bin/python" -m pytest tests -m "tf and not readme and serial" "$@" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
phase_done "TensorFlow tests alone"
exit "$status"
