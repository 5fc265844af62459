#!/usr/bin/env bash
# `llamapp serve` next to llama-server from the same tree: same model, slots (= clients),
# threads and context, one load generator (bench/loadgen.py: streaming /v1/completions, distinct
# prompts, ignore_eos) for both. Per round and client count the two servers alternate order.
#   bench/run-server.sh [--rounds N] [-t N] [--clients "1 4 16"] [--max-tokens N] [--ctx N]
#                       [--repeat] [--ceiling]
#                       [--llamapp-args "ARGS"] [--llama-server-args "ARGS"]
# --ctx: the context of every server (default 4096); raised to clients x 256 where that is more,
#   so that every client's prompt and reply fit at once.
# --repeat: after the fresh prompts, the same server gets the same prompts again at once (a busy
#   service's repeated system prompts and retries); reported as a second table.
# --ceiling: llama-batched-bench from the same tree at the same widths, ~130-token prompts and
#   the same reply length, with a shared cache and with one per slot: generated tokens over its
#   whole time (prompts included), the better layout's, the most this model makes on this
#   machine without any server around it.
# The last two options add flags to one server, e.g. speculation on both:
#   --llamapp-args "--draft-tokens 3" --llama-server-args "--spec-type ngram-simple"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 threads=2 clients_list="1 4 16" max_tokens=64 ctx=4096 repeat=0 ceiling=0
llamapp_args="" llama_server_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    --llamapp-args) llamapp_args=$2; shift 2 ;;
    --llama-server-args) llama_server_args=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --clients) clients_list=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --repeat) repeat=1; shift ;;
    --ceiling) ceiling=1; shift ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
source "$root/bench/servers.sh"
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT

load() {  # CLIENTS REQUESTS SEED
  python3 "$root/bench/loadgen.py" --port "$port" --clients "$1" --requests "$2" \
    --max-tokens "$max_tokens" --seed "$3"
}

for r in $(seq 1 "$rounds"); do
  for n in $clients_list; do
    requests=$(( n >= 16 ? 2 : (n >= 4 ? 4 : 8) ))
    order="llamapp llama-server"; [ $((r % 2)) -eq 0 ] && order="llama-server llamapp"
    for s in $order; do
      # shellcheck disable=SC2086  # the extra args are split on purpose
      server_start "$s" $((ctx > n * 256 ? ctx : n * 256)) "$n" \
        $([ "$s" = llamapp ] && echo --max-queue 256 $llamapp_args || echo $llama_server_args)
      line=$(load "$n" "$requests" "$r")
      echo "{\"server\": \"$s\", \"round\": $r, \"phase\": \"fresh\", \"result\": $line}" \
        | tee -a "$results" >&2
      if [ "$repeat" = 1 ]; then
        line=$(load "$n" "$requests" "$r")
        echo "{\"server\": \"$s\", \"round\": $r, \"phase\": \"repeat\", \"result\": $line}" \
          | tee -a "$results" >&2
      fi
      server_stop
    done
  done
done

ceiling_file=$(mktemp)
if [ "$ceiling" = 1 ]; then
  cmake --build "$build" --target llama-batched-bench >&2
  widths=$(echo "$clients_list" | tr ' ' ',')
  most=$(for n in $clients_list; do echo $((n * 256)); done | sort -n | tail -1)
  for layout in -kvu ""; do
    # shellcheck disable=SC2086  # an empty layout is no argument
    "$build/bin/llama-batched-bench" -m "$model" -t "$threads" -c $((ctx > most ? ctx : most)) \
      $layout -npp 130 -ntg "$max_tokens" -npl "$widths" --output-format jsonl 2>/dev/null \
      | grep '^{' >> "$ceiling_file" || true
  done
fi

python3 - "$results" "$ceiling_file" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ceiling = {}
for line in open(sys.argv[2]):
    c = json.loads(line)  # generated tokens over the whole time, prompts included
    ceiling[c["pl"]] = max(ceiling.get(c["pl"], 0), c["pl"] * c["tg"] / c["t"])
for phase in ("fresh", "repeat"):
    mine = [r for r in rows if r.get("phase", "fresh") == phase]
    if not mine:
        continue
    print(f"\n{phase} prompts, medians of {max(r['round'] for r in mine)} rounds:\n")
    head = "| clients | llama-server tok/s | llamapp tok/s | ratio (per round) |"
    if ceiling:
        head += " ceiling tok/s |"
    print(head + " llama-server TTFT p50/p90 ms | llamapp TTFT p50/p90 ms |")
    print("|---:" * (head.count("|") + 1) + "|")
    for n in sorted({r["result"]["clients"] for r in mine}):
        def med(server, key):
            return statistics.median(r["result"][key] for r in mine
                                     if r["server"] == server and r["result"]["clients"] == n)
        a, b = med("llama-server", "tokens_per_s"), med("llamapp", "tokens_per_s")
        # The median of the per-round ratios beside the ratio of the medians: a machine that
        # drifts between rounds can put the two servers' medians in different rounds.
        by_round = {}
        for r in mine:
            if r["result"]["clients"] == n:
                by_round.setdefault(r["round"], {})[r["server"]] = r["result"]["tokens_per_s"]
        per_round = statistics.median(v["llamapp"] / v["llama-server"]
                                      for v in by_round.values() if len(v) == 2)
        cells = [f"{n}", f"{a:.1f}", f"{b:.1f}", f"{b/a:.3f} ({per_round:.3f})"]
        if ceiling:
            cells.append(f"{ceiling[n]:.1f}" if n in ceiling else "")
        cells.append(f"{med('llama-server','ttft_p50_ms'):.0f} / {med('llama-server','ttft_p90_ms'):.0f}")
        cells.append(f"{med('llamapp','ttft_p50_ms'):.0f} / {med('llamapp','ttft_p90_ms'):.0f}")
        print("| " + " | ".join(cells) + " |")
PY
