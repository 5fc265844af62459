#!/usr/bin/env bash
# How often a reused prefix changes greedy output (issue 36): for each prompt, the same greedy
# request computed cold (cache_prompt false) and again with part of it cached, by a request for
# its first words or by the same request before; counts the prompts whose continuations differ. Runs the
# default server and --deterministic on the trained stories260K.
#   bench/run-prefix-divergence.sh [--prompts N] [--max-tokens N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prompts=48 max_tokens=48
while [ $# -gt 0 ]; do
  case "$1" in
    --prompts) prompts=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh" >&2
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llamapp-cli >&2
model=${LLAMAPP_STORIES:-$root/../shared/models/stories260K.gguf}
port=18461 pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT
for mode in default deterministic; do
  extra=()
  [ "$mode" = deterministic ] && extra=(--deterministic)
  port=$((port + 1))
  "$build/bin/llamapp" serve -m "$model" -c 1024 --parallel 1 -t 2 --port "$port" \
    --log-level none "${extra[@]}" &
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
  python3 - "$port" "$prompts" "$max_tokens" "$mode" <<'PY'
import json, statistics, sys, urllib.request
port, count, max_tokens, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
names = ["Lily", "Tom", "Sue", "Ben", "Mia", "Max", "Anna", "Sam"]
places = ["park", "garden", "river", "store", "forest", "beach"]
things = ["a big red ball", "a little bird", "a shiny stone", "a funny dog", "a tall tree"]

def complete(prompt, n, cache):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "cache_prompt": cache}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as res:
        return json.load(res)

def differs(prompt, prime):
    cold = complete(prompt, max_tokens, False)["content"]
    complete(prime, 1, True)  # leaves the prime's tokens in the slot
    warm = complete(prompt, max_tokens, True)
    return warm["content"] != cold, warm["timings"]["cache_n"]

# Two ways a prompt meets a cache: a longer prompt after its first words ("prefix"), and the same
# prompt again, all of it cached but its last token, which is computed alone ("repeat").
result = {"mode": mode, "prompts": count}
for kind in ("prefix", "repeat"):
    differ, cached = 0, []
    for i in range(count):
        lead = f"Once upon a time, {names[i % 8]} went to the {places[i // 8 % 6]}"
        prompt = f"{lead} and saw {things[i % 5]}."
        d, c = differs(prompt, lead if kind == "prefix" else prompt)
        differ += d
        cached.append(c)
    result[kind] = {"differ": differ, "cached_tokens_median": statistics.median(cached)}
print(json.dumps(result))
PY
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
done
