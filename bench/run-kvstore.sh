#!/usr/bin/env bash
# The KV store's restart benchmark, next to llama-server from the same tree.
#   bench/run-kvstore.sh [--rounds N] [-t N] [--prompt-tokens N]
# Per round, on the ~125M Q4_0 benchmark model with one slot: process 1 times a random prompt
# cold (empty store), then on a fresh engine from the RAM tier; process 2 (a restart) times it
# from the disk tier. TTFT is the engine's own (submit to first token; model load and the
# model's fingerprint happen at engine creation, before it). Then bench/llama-server-restart.sh
# runs the same scenario on llama-server. Entry files stay in the page cache across the
# "restart", as llama-server's slot files would.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 threads=2 tokens=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --prompt-tokens) tokens=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh"
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llamapp-engine-bench bench-model llama-server >&2
model="$build/models/bench-125m-q4_0.gguf"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
results=()
for r in $(seq 1 "$rounds"); do
  bench=("$build/bin/llamapp-engine-bench" -m "$model" -t "$threads" kvstore
         --cache-disk "$dir" --prompt-tokens "$tokens" --seed "$r")
  first=$("${bench[@]}" --phase first)
  restart=$("${bench[@]}" --phase restart)
  echo "round $r: $first $restart"
  results+=("$first" "$restart")
done
printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
med = lambda k: statistics.median(r[k] for r in rows if k in r)
cold, ram, disk = med("cold_ms"), med("ram_ms"), med("disk_ms")
print(f"llamapp-kvstore: cold_ms={cold:.1f} ram_ms={ram:.1f} disk_after_restart_ms={disk:.1f} "
      f"cold_over_ram={cold/ram:.1f} cold_over_disk={cold/disk:.1f}")'
"$root/bench/llama-server-restart.sh" "$model" --threads "$threads" --rounds "$rounds" \
  --prompt-tokens "$tokens" | tail -1
