#!/usr/bin/env bash
# What oversized requests leave resident (issue 36): one `llamapp serve` on stories260K with the
# default --max-body-bytes (8 MiB), then 100 requests of each kind from 8 clients at once, so
# that many of the server's connection threads (each with its own malloc arena) read one:
# a 50 MB Content-Length with no body, the same with Expect: 100-continue, and a chunked body
# sent past the limit. Prints the server's RSS before and after each kind.
#   bench/run-oversized-rss.sh [--requests N] [-- extra serve flags]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
requests=100
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) requests=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh" >&2
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llamapp-cli >&2
model=${LLAMAPP_STORIES:-$root/../shared/models/stories260K.gguf}
port=18471
"$build/bin/llamapp" serve -m "$model" -c 256 -t 2 --port "$port" --log-level none \
  "${extra[@]}" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
python3 - "$port" "$pid" "$requests" <<'PY'
import socket, sys
from concurrent.futures import ThreadPoolExecutor
port, pid, requests = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"

def rss_mb():
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024

def send(kind):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        if kind == "announced":
            s.sendall(head + b"Content-Length: 52428800\r\n\r\n")
        elif kind == "announced_expect":
            s.sendall(head + b"Content-Length: 52428800\r\nExpect: 100-continue\r\n\r\n")
        else:
            s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
            chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
            for _ in range(9 * 16 + 2):  # 9 MiB and a bit: past the 8 MiB limit
                s.sendall(chunk)
    except OSError:
        pass  # answered and closed before the whole upload
    try:
        first = s.recv(12)
    except OSError:
        first = b""
    s.close()
    return first

print(f"start: {rss_mb():.1f} MB")
for kind in ("announced", "announced_expect", "chunked"):
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, [kind] * requests))
    statuses = sorted(set(a.decode(errors="replace") for a in answers))
    print(f"after {requests} x {kind}: {rss_mb():.1f} MB, answers {statuses}")
PY
