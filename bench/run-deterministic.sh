#!/usr/bin/env bash
# What --deterministic costs: one `llamapp serve` on the benchmark model per mode and round, the
# default and --deterministic alternating which goes first. Each round sends the same two loads
# to both: streaming greedy completions from several clients (bench/loadgen.py: tokens/s, TTFT),
# and multi-turn conversations (bench/chatgen.py: the TTFT of later turns, which the default
# serves from the cached earlier turns and the deterministic mode computes in full).
#   bench/run-deterministic.sh [--rounds N] [-t N] [--clients N] [--max-tokens N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 threads=2 clients=4 max_tokens=64
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
source "$root/bench/servers.sh"
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT
for r in $(seq 1 "$rounds"); do
  modes="default deterministic"
  [ $((r % 2)) -eq 0 ] && modes="deterministic default"
  for mode in $modes; do
    extra=()
    [ "$mode" = deterministic ] && extra=(--deterministic)
    server_start llamapp 4096 "$clients" --max-queue 256 "${extra[@]}"
    load=$(python3 "$root/bench/loadgen.py" --port "$port" --clients "$clients" --requests 4 \
           --max-tokens "$max_tokens" --seed "$r")
    chat=$(python3 "$root/bench/chatgen.py" multiturn --port "$port" --conversations "$clients" \
           --turns 4 --seed "$r")
    server_stop
    echo "{\"mode\": \"$mode\", \"round\": $r, \"load\": $load, \"chat\": $chat}" | tee -a "$results" >&2
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def median(mode, part, key):
    return statistics.median(r[part][key] for r in rows if r["mode"] == mode)
print("| mode | tok/s | TTFT p50 ms | later-turn TTFT p50 ms | later-turn cached share |")
print("|---|---:|---:|---:|---:|")
base = median("default", "load", "tokens_per_s")
for mode in ("default", "deterministic"):
    tps = median(mode, "load", "tokens_per_s")
    print(f"| {mode} | {tps:.1f} ({tps / base:.2f}x) | {median(mode, 'load', 'ttft_p50_ms'):.0f} | "
          f"{median(mode, 'chat', 'later_ttft_p50_ms'):.0f} | "
          f"{median(mode, 'chat', 'reported_cached_share'):.2f} |")
PY
