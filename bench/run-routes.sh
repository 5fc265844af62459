#!/usr/bin/env bash
# What a protocol costs: one `llamapp serve` on the benchmark model, the same load (bench/loadgen.py,
# streaming, distinct prompts, ignore_eos) sent to /v1/completions, llama-server's native
# /completion, /v1/chat/completions, Anthropic's /v1/messages and OpenAI's /v1/responses, the routes
# alternating within each round.
#   bench/run-routes.sh [--rounds N] [-t N] [--clients N] [--max-tokens N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=5 threads=2 clients=4 max_tokens=64
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
server_start llamapp 4096 "$clients" --max-queue 256
for r in $(seq 1 "$rounds"); do
  routes="openai native chat messages responses"
  [ $((r % 2)) -eq 0 ] && routes="responses messages chat native openai"
  for route in $routes; do
    line=$(python3 "$root/bench/loadgen.py" --port "$port" --clients "$clients" --requests 4 \
           --max-tokens "$max_tokens" --seed "$r" --route "$route")
    echo "{\"route\": \"$route\", \"round\": $r, \"result\": $line}" | tee -a "$results" >&2
  done
done
server_stop
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {r: statistics.median(x["result"]["tokens_per_s"] for x in rows if x["route"] == r)
       for r in ("openai", "native", "chat", "messages", "responses")}
ttft = {r: statistics.median(x["result"]["ttft_p50_ms"] for x in rows if x["route"] == r)
        for r in med}
errors = sum(x["result"]["errors"] for x in rows)
print("| route | tok/s (median) | vs /v1/completions | TTFT p50 ms (median) |")
print("|---|---:|---:|---:|")
for r, path in (("openai", "/v1/completions"), ("native", "/completion"),
                ("chat", "/v1/chat/completions"), ("messages", "/v1/messages"),
                ("responses", "/v1/responses")):
    print(f"| {path} | {med[r]:.1f} | {med[r] / med['openai']:.3f} | {ttft[r]:.0f} |")
print(f"errors: {errors}")
PY
