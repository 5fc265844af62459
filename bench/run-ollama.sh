#!/usr/bin/env bash
# What Ollama's protocol costs: one `llamapp serve` on the benchmark model, the same greedy load
# (bench/loadgen.py, streaming, distinct prompts) sent to /v1/chat/completions and Ollama's
# /api/chat, alternating which goes first each round. Neither sets ignore_eos (Ollama has none);
# the benchmark model's random weights seldom end a reply early, and each route's own usage
# counts the tokens.
# Then one conversation of four turns through /api/chat, showing what each turn computes.
#   bench/run-ollama.sh [--rounds N] [-t N] [--clients N] [--max-tokens N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=6 threads=2 clients=4 max_tokens=64
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
  routes="chat ollama"
  [ $((r % 2)) -eq 0 ] && routes="ollama chat"
  for route in $routes; do
    # A seed of its own per route and round: no route is served from the other's cache.
    seed=$((r * 2))
    [ "$route" = ollama ] && seed=$((seed + 1))
    line=$(python3 "$root/bench/loadgen.py" --port "$port" --clients "$clients" --requests 4 \
           --max-tokens "$max_tokens" --seed "$seed" --route "$route" --extra '{"ignore_eos": false}')
    echo "{\"route\": \"$route\", \"round\": $r, \"result\": $line}" | tee -a "$results" >&2
  done
done
python3 - "$port" <<'PY'
import http.client, json, sys
port = int(sys.argv[1])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
conn.request("GET", "/api/tags")
model = json.loads(conn.getresponse().read())["models"][0]["name"]
messages = [{"role": "system", "content": "You are a storyteller."}]
def post(path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return json.loads(conn.getresponse().read())
print("| turn | prompt tokens | prompt_eval_count | prompt_eval_duration ms | eval_count | total ms |")
print("|---:|---:|---:|---:|---:|---:|")
for turn, text in enumerate(["Tell me a story about a river.", "What happened next?",
                             "And then?", "How did it end?"], 1):
    messages.append({"role": "user", "content": text})
    # The whole prompt, for comparison: llama-server's /apply-template and /tokenize.
    text = post("/apply-template", {"messages": messages})["prompt"]
    whole = len(post("/tokenize", {"content": text})["tokens"])
    r = post("/api/chat", {"model": model, "messages": messages, "stream": False,
                           "options": {"num_predict": 48, "temperature": 0}})
    messages.append(r["message"])
    print(f"| {turn} | {whole} | {r['prompt_eval_count']} | {r['prompt_eval_duration'] / 1e6:.1f} | "
          f"{r['eval_count']} | {r['total_duration'] / 1e6:.1f} |")
PY
server_stop
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(route, key):
    return statistics.median(x["result"][key] for x in rows if x["route"] == route)
print("| route | tok/s (median) | ratio | TTFT p50 ms (median) |")
print("|---|---:|---:|---:|")
for r, path in (("chat", "/v1/chat/completions"), ("ollama", "/api/chat")):
    print(f"| {path} | {med(r, 'tokens_per_s'):.1f} | "
          f"{med(r, 'tokens_per_s') / med('chat', 'tokens_per_s'):.3f} | {med(r, 'ttft_p50_ms'):.0f} |")
print("errors:", sum(x["result"]["errors"] for x in rows))
PY
