#!/usr/bin/env bash
# What each install weighs (docs/install.md): packages, MB and seconds of
#   1. the base requirements, 2. the same + the xprof extra (tensorboard-plugin-profile),
#   3. pip install . and 4. pip install '.[xprof]' from this clone,
# each in a fresh venv with an empty pip cache, one after the other. Prints a Markdown table.
#
#   bash benchmarks/bench_install.sh [WORKDIR]     # default: a new temporary folder (removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${1:-$(mktemp -d)}
PY=${PYTHON:-python3}
"$PY" tests/min_versions.py --raw > "$WORK/base.txt"
"$PY" tests/min_versions.py xprof --raw > "$WORK/xprof.txt"

measure() {  # measure NAME PIP-ARGS...: one fresh venv, one install, one table row
  local name=$1; shift
  local venv="$WORK/venv-$RANDOM"
  "$PY" -m venv "$venv"
  local n0 mb0 t0 t1 n1 mb1
  n0=$("$venv/bin/pip" list --format=freeze 2>/dev/null | wc -l)
  mb0=$(du -sm "$venv" | cut -f1)
  t0=$(date +%s.%N)
  PIP_CACHE_DIR="$venv.cache" "$venv/bin/pip" install -q "$@" > "$venv.log" 2>&1
  t1=$(date +%s.%N)
  n1=$("$venv/bin/pip" list --format=freeze 2>/dev/null | wc -l)
  mb1=$(du -sm "$venv" | cut -f1)
  printf '| %s | %d | %d MB | %.1f | load %s |\n' "$name" $((n1 - n0)) $((mb1 - mb0)) \
    "$(echo "$t1 - $t0" | bc)" "$(cut -d' ' -f1 /proc/loadavg)"
  rm -rf "$venv" "$venv.cache" "$venv.log"
}

echo "| install | packages added | size added | seconds | conditions |"
echo "|---|---|---|---|---|"
measure "the base requirements" -r "$WORK/base.txt"
measure "the base requirements + xprof" -r "$WORK/xprof.txt"
measure "pip install ." "$ROOT"
measure "pip install '.[xprof]'" "$ROOT[xprof]"
[ -n "${1:-}" ] || rm -rf "$WORK"
