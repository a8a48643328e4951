#!/usr/bin/env bash
# Runs COMMAND on a busy machine, as shared CI boxes and laptops often are: N processes that
# spin on the CPU (default: one per core) and a loopback TCP stream of about 20 MB/s (32 x 64 KiB
# every 0.1 s), which the machine-wide network counters see. The load stops when COMMAND ends;
# COMMAND's exit status is printed last and returned.
#   benchmarks/under_load.sh [-j N] COMMAND [ARGS...]
# The benchmarks that measure a busy machine (slowdown_corpus.py, pairs_corpus.py,
# compare_noise.py) run their busy cases under it. Debian's stress-ng gives a similar load
# (`stress-ng --cpu N --sock 1`), with its own rates.
set -u
spinners=$(nproc)
if [ "${1:-}" = "-j" ]; then spinners=$2; shift 2; fi
if [ $# -eq 0 ]; then echo "usage: benchmarks/under_load.sh [-j N] COMMAND [ARGS...]" >&2; exit 2; fi
load=()
for _ in $(seq "$spinners"); do
  python3 -c 'while True: pass' &
  load+=($!)
done
python3 -c '
import socket, threading, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
def drain():
    conn, _ = server.accept()
    while conn.recv(1 << 16):
        pass
threading.Thread(target=drain, daemon=True).start()
sender = socket.create_connection(server.getsockname())
block = b"\0" * (1 << 16)
while True:
    for _ in range(32):
        sender.sendall(block)
    time.sleep(0.1)
' &
load+=($!)
trap 'kill "${load[@]}" 2>/dev/null' EXIT
"$@"
status=$?
echo "under_load.sh: exit status $status"
exit $status
