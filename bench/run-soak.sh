#!/usr/bin/env bash
# The soak of issue 19: one `llamapp serve` with two models (the second loaded and unloaded by
# the soak), a disk cache and slot files, driven by bench/soak.py for N minutes. Exits non-zero
# when a check fails (a 5xx, a request not answered exactly once, memory or descriptors growing).
#   bench/run-soak.sh [--minutes N] [--workers N] [-t N]   (SOAK_LOG: where the server's log goes)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
minutes=20 workers=6 threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh" >&2
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llamapp-cli test-models >&2
dir=$(mktemp -d)
log=${SOAK_LOG:-/tmp/llamapp-soak-server.log}  # the server's log, kept for a look afterwards
trap 'kill "$pid" 2>/dev/null || true; cp "$dir/server.log" "$log"; rm -rf "$dir"' EXIT
mkdir -p "$dir/models" "$dir/cache" "$dir/slots"
ln -s "$build/models/llama-tiny.gguf" "$dir/models/second.gguf"
port=18411
"$build/bin/llamapp" serve -m "$build/models/qwen3-tiny.gguf" --models-dir "$dir/models" \
  --cache-disk "$dir/cache" --slot-save-path "$dir/slots" --parallel 2 -c 2048 -t "$threads" \
  --max-body-bytes 1048576 --port "$port" 2>"$dir/server.log" &
pid=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
python3 "$root/bench/soak.py" --port "$port" --pid "$pid" --log "$dir/server.log" \
  --minutes "$minutes" --workers "$workers" --second-model second --max-body-bytes 1048576
