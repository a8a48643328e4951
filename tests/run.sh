#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian machine, then runs them: the main
# suite in $VENV, then the lowest-versions job (tests/run_min_versions.sh).
# Used by the README ("Run the tests") and by CI (.ci/run). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TFBNECK_VENV:-.venv}

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
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e ".[test,docs]"
status=0
# The type checker over the whole package (mypy.ini; the report's types are tfbneck_plugin/schema.py).
"$VENV/bin/python" -m mypy || status=$?
"$VENV/bin/python" -m pytest tests "$@" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
# The lowest-versions job (issue 12.1): the floors setup.py declares, in their own venvs.
bash tests/run_min_versions.sh "$@" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
exit "$status"
