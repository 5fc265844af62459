#!/usr/bin/env bash
# `llamapp serve` next to llama-server from the same tree: same model, slots (= clients),
# threads and context, one load generator (bench/loadgen.py: streaming /v1/completions, distinct
# prompts, ignore_eos) for both. Per round and client count the two servers alternate order.
#   bench/run-server.sh [--rounds N] [-t N] [--clients "1 4 16"] [--max-tokens N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 threads=2 clients_list="1 4 16" max_tokens=64 port=18300
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --clients) clients_list=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh"
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llamapp-cli bench-model llama-server >&2
model="$build/models/bench-125m-q4_0.gguf"
pid=""
results=$(mktemp)
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT

start() {  # name slots
  port=$((port + 1))  # a fresh port each time: no wait for the previous listener's sockets
  local ctx=$((4096 > $2 * 256 ? 4096 : $2 * 256))
  if [ "$1" = llamapp ]; then
    "$build/bin/llamapp" serve -m "$model" -t "$threads" -c "$ctx" --parallel "$2" \
      --port "$port" --log-level none --max-queue 256 2>>"$results.log" &
  else
    "$build/bin/llama-server" -m "$model" -t "$threads" -c "$ctx" -np "$2" -kvu \
      --port "$port" --no-webui >/dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$1 did not start" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

for r in $(seq 1 "$rounds"); do
  for n in $clients_list; do
    requests=$(( n >= 16 ? 2 : (n >= 4 ? 4 : 8) ))
    order="llamapp llama-server"; [ $((r % 2)) -eq 0 ] && order="llama-server llamapp"
    for s in $order; do
      start "$s" "$n"
      line=$(python3 "$root/bench/loadgen.py" --port "$port" --clients "$n" --requests "$requests" \
             --max-tokens "$max_tokens" --seed "$r")
      stop
      echo "{\"server\": \"$s\", \"round\": $r, \"result\": $line}" | tee -a "$results" >&2
    done
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| clients | llama-server tok/s | llamapp tok/s | ratio | llama-server TTFT p50/p90 ms | llamapp TTFT p50/p90 ms |")
print("|---:|---:|---:|---:|---:|---:|")
for n in sorted({r["result"]["clients"] for r in rows}):
    def med(server, key):
        return statistics.median(r["result"][key] for r in rows
                                 if r["server"] == server and r["result"]["clients"] == n)
    a, b = med("llama-server", "tokens_per_s"), med("llamapp", "tokens_per_s")
    print(f"| {n} | {a:.1f} | {b:.1f} | {b/a:.3f} | {med('llama-server','ttft_p50_ms'):.0f} / "
          f"{med('llama-server','ttft_p90_ms'):.0f} | {med('llamapp','ttft_p50_ms'):.0f} / "
          f"{med('llamapp','ttft_p90_ms'):.0f} |")
PY
