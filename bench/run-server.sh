#!/usr/bin/env bash
# `llamapp serve` next to llama-server from the same tree: same model, slots (= clients),
# threads and context, one load generator (bench/loadgen.py: streaming /v1/completions, distinct
# prompts, ignore_eos) for both. Per round and client count the two servers alternate order.
#   bench/run-server.sh [--rounds N] [-t N] [--clients "1 4 16"] [--max-tokens N]
#                       [--llamapp-args "ARGS"] [--llama-server-args "ARGS"]
# The last two add flags to one server, e.g. speculation on both:
#   --llamapp-args "--draft-tokens 3" --llama-server-args "--spec-type ngram-simple"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 threads=2 clients_list="1 4 16" max_tokens=64 llamapp_args="" llama_server_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    --llamapp-args) llamapp_args=$2; shift 2 ;;
    --llama-server-args) llama_server_args=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --clients) clients_list=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
source "$root/bench/servers.sh"
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT

for r in $(seq 1 "$rounds"); do
  for n in $clients_list; do
    requests=$(( n >= 16 ? 2 : (n >= 4 ? 4 : 8) ))
    order="llamapp llama-server"; [ $((r % 2)) -eq 0 ] && order="llama-server llamapp"
    for s in $order; do
      # shellcheck disable=SC2086  # the extra args are split on purpose
      server_start "$s" $((4096 > n * 256 ? 4096 : n * 256)) "$n" \
        $([ "$s" = llamapp ] && echo --max-queue 256 $llamapp_args || echo $llama_server_args)
      line=$(python3 "$root/bench/loadgen.py" --port "$port" --clients "$n" --requests "$requests" \
             --max-tokens "$max_tokens" --seed "$r")
      server_stop
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
