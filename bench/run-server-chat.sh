#!/usr/bin/env bash
# Chat scenarios through HTTP, `llamapp serve` next to llama-server from the same tree (same
# model, slots, threads, context; ChatML for both, bench/chatgen.py as the client):
#   multi-turn  8 conversations of 4 turns at once on 4 slots, 1,000-word (~1,300-token) system
#               prompts and 20-word user turns, every turn resending the history (32-token
#               replies); llamapp gets each conversation's `session` id.
#   deep        one user alone: a ~1,600-token system prompt, then 5 turns of 12-word messages
#               and 8-token replies (the short-turn-on-a-long-history case).
#   restart     one ~2,000-token conversation, then a server restart, then the same
#               conversation again; llamapp with --cache-disk, llama-server as it comes.
#   bench/run-server-chat.sh [--rounds N] [-t N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 threads=2 port=18400 slots=4
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
source "$root/bench/servers.sh"
cache=$(mktemp -d)
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true; rm -rf "$cache"' EXIT
start() {  # name [extra args...]: ChatML on both (llamapp reads it from the model)
  local name=$1
  shift
  [ "$name" = llama-server ] && set -- --chat-template chatml "$@"
  server_start "$name" 16384 "$slots" "$@"
}
record() { echo "{\"server\": \"$1\", \"scenario\": \"$2\", \"round\": $3, \"result\": $4}" | tee -a "$results" >&2; }

long=(--system-words 1200 --turns 3 --user-words 40 --max-tokens 16)
for r in $(seq 1 "$rounds"); do
  order="llamapp llama-server"; [ $((r % 2)) -eq 0 ] && order="llama-server llamapp"
  for s in $order; do
    session=(); [ "$s" = llamapp ] && session=(--session)
    start "$s"
    record "$s" multiturn "$r" "$(python3 "$root/bench/chatgen.py" multiturn --port "$port" \
      --conversations 8 --turns 4 --system-words 1000 --user-words 20 --seed "$r" "${session[@]}")"
    server_stop

    start "$s"
    record "$s" deep "$r" "$(python3 "$root/bench/chatgen.py" multiturn --port "$port" \
      --conversations 1 --turns 5 --system-words 1200 --user-words 12 --max-tokens 8 \
      --seed "$r" "${session[@]}")"
    server_stop

    extra=(); [ "$s" = llamapp ] && { rm -rf "$cache/kv"; extra=(--cache-disk "$cache/kv"); }
    start "$s" "${extra[@]}"
    cold=$(python3 "$root/bench/chatgen.py" once --port "$port" --seed "$r" "${long[@]}")
    server_stop
    start "$s" "${extra[@]}"
    again=$(python3 "$root/bench/chatgen.py" once --port "$port" --seed "$r" "${long[@]}")
    server_stop
    record "$s" restart "$r" "{\"cold\": $cold, \"after_restart\": $again}"
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(server, scenario, get):
    return statistics.median(get(r["result"]) for r in rows
                             if r["server"] == server and r["scenario"] == scenario)
print("| scenario | llama-server | llamapp | ratio |")
print("|---|---:|---:|---:|")
for label, key in [("multi-turn wall s (8 conversations x 4 turns)", "wall_s"),
                   ("multi-turn TTFT p50 ms, turns 2-4", "later_ttft_p50_ms"),
                   ("multi-turn TTFT p90 ms, turns 2-4", "later_ttft_p90_ms"),
                   ("multi-turn TTFT p50 ms, first turns", "first_ttft_p50_ms")]:
    a = med("llama-server", "multiturn", lambda x: x[key])
    b = med("llamapp", "multiturn", lambda x: x[key])
    print(f"| {label} | {a:.1f} | {b:.1f} | {a/b:.2f}x |")
for label, key in [("deep: wall s (5 turns)", "wall_s"),
                   ("deep: TTFT p50 ms, turns 2-5", "later_ttft_p50_ms")]:
    a = med("llama-server", "deep", lambda x: x[key])
    b = med("llamapp", "deep", lambda x: x[key])
    print(f"| {label} | {a:.1f} | {b:.1f} | {a/b:.2f}x |")
for label, key in [("restart: TTFT ms, first run", "cold"),
                   ("restart: TTFT ms, same chat after restart", "after_restart")]:
    a = med("llama-server", "restart", lambda x: x[key]["ttft_ms"])
    b = med("llamapp", "restart", lambda x: x[key]["ttft_ms"])
    print(f"| {label} | {a:.1f} | {b:.1f} | {a/b:.2f}x |")
PY
