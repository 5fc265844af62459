#!/usr/bin/env bash
# What llama.cpp's own prompt cache gives llama-server across a process restart.
#
#   bench/llama-server-restart.sh MODEL [--threads N] [--ctx N] [--prompt-tokens N] [--rounds N]
#                                       [--port P] [--seed S] [--slot-restore] [-- EXTRA_SERVER_ARGS...]
#
# Each round starts build/bin/llama-server (llama.cpp from the pinned tree; build it with
# `cmake --build build --target llama-server`), waits for GET /health == 200 and times one
# non-streaming POST /completion (n_predict 1, cache_prompt, temperature 0) three times:
#   cold           first request in a fresh process
#   warm           the same request again in the same process (the slot's KV / --cache-ram hit)
#   after restart  SIGTERM, wait, start a new process, the same request again
# With --slot-restore the round also measures llama-server's only way to carry a prompt across a
# restart: after "warm" the slot is saved (POST /slots/0?action=save, needs --slot-save-path, which
# the script then passes), and after a second restart the slot is restored
# (POST /slots/0?action=restore) before the same request; "restored" is restore + request wall time.
# The slot file (KV + tokens) lies in a temporary directory, so the restore reads it from the page
# cache, not from a cold disk.
#
# Every figure is reported twice: wall-clock ms around curl (client view, includes HTTP and JSON)
# and the server's own timings.prompt_ms / timings.prompt_n (prompt processing only).
#
# The prompt is plain English-ish text: words drawn from a fixed list with a seeded RNG, in
# sentences. Each round uses its own seed (base seed + round), so rounds are independent; the
# length is fitted with POST /tokenize (BOS included, as /completion adds it) to the largest
# word prefix that is at most --prompt-tokens tokens.
#
# The server runs with -np 1, --no-webui and --offline; everything else is the server's default
# (prompt cache on: --cache-prompt, --cache-ram 8192 MiB). Arguments after `--` go to every server
# start (e.g. -- --cache-ram 0). The last line is machine-readable, medians over rounds:
#   llama-server-restart: cold_ms=... warm_ms=... restart_ms=... cold_over_restart=... [...]
set -euo pipefail

usage() {
  sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() { echo "llama-server-restart: $*" >&2; exit 1; }

root=$(cd "$(dirname "$0")/.." && pwd)
build=${LLAMAPP_BUILD_DIR:-$root/build}
server=${LLAMA_SERVER:-$build/bin/llama-server}

model="" threads=2 ctx=4096 prompt_tokens=2000 rounds=3 port=8089 slot_restore=0 seed=1234
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=${2:?}; shift 2 ;;
    --ctx) ctx=${2:?}; shift 2 ;;
    --prompt-tokens) prompt_tokens=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --slot-restore) slot_restore=1; shift ;;
    -h|--help) usage ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "unknown option: $1" >&2; usage ;;
    *) [ -z "$model" ] || usage; model=$1; shift ;;
  esac
done
[ -n "$model" ] || usage
[ -f "$model" ] || die "model not found: $model"
for v in threads ctx prompt_tokens rounds port seed; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v//_/-} wants a number, got '${!v}'"
done
[ "$rounds" -ge 1 ] || die "--rounds must be at least 1"
[ -x "$server" ] || die "$server not found; build it with: cmake --build $build --target llama-server"
command -v curl >/dev/null || die "curl not found"
command -v python3 >/dev/null || die "python3 not found"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/llama-server-restart.XXXXXX")
srv_pid=""
srv_log=""
starts=0
url="http://127.0.0.1:$port"

stop_server() {
  [ -n "$srv_pid" ] || return 0
  if kill -0 "$srv_pid" 2>/dev/null; then
    kill -TERM "$srv_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do            # 30 s, then SIGKILL
      kill -0 "$srv_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$srv_pid" 2>/dev/null && kill -KILL "$srv_pid" 2>/dev/null
  fi
  wait "$srv_pid" 2>/dev/null || true
  srv_pid=""
}
cleanup() {
  stop_server
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_busy() {
  python3 - "$port" <<'EOF'
import socket, sys
s = socket.socket()
s.settimeout(0.5)
sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
EOF
}

start_server() {
  port_busy && die "port $port is busy (something already listens on 127.0.0.1:$port); pick another with --port"
  starts=$((starts + 1))
  srv_log="$tmp/server-$starts.log"
  local args=(-m "$model" -t "$threads" -c "$ctx" -np 1 --port "$port" --host 127.0.0.1
              --no-webui --offline)
  [ "$slot_restore" = 1 ] && args+=(--slot-save-path "$tmp/slots/")
  "$server" "${args[@]}" ${extra[@]+"${extra[@]}"} >"$srv_log" 2>&1 &
  srv_pid=$!
  local code
  for _ in $(seq 1 1200); do             # 120 s for the model to load
    if ! kill -0 "$srv_pid" 2>/dev/null; then
      tail -n 20 "$srv_log" >&2
      srv_pid=""
      die "llama-server exited during startup (log above)"
    fi
    code=$(curl -s -o /dev/null -w '%{http_code}' "$url/health" || true)
    [ "$code" = 200 ] && return 0
    sleep 0.1
  done
  tail -n 20 "$srv_log" >&2
  die "llama-server did not become healthy within 120 s"
}

# post PATH BODY_FILE OUT_FILE -> prints wall-clock ms
post() {
  local t0 t1
  t0=$(date +%s%N)
  curl -sS --fail-with-body -X POST -H 'Content-Type: application/json' \
       --data-binary @"$2" -o "$3" "$url$1" ||
    { cat "$3" >&2 2>/dev/null; tail -n 20 "$srv_log" >&2; die "POST $1 failed"; }
  t1=$(date +%s%N)
  python3 -c "print(f'{($t1 - $t0) / 1e6:.1f}')"
}

# Writes $tmp/req.json: a /completion request whose prompt is the longest word prefix of the
# round's seeded text that tokenizes (BOS included) to at most $prompt_tokens tokens.
make_prompt() {
  python3 - "$url" "$prompt_tokens" "$1" "$tmp/req.json" <<'EOF'
import json, random, sys, urllib.request
url, target, seed, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
words = """the of and to in is was that for on with as by at from his her they this
which have had are were been has their one all would there what about out up into than them
some could time these two may then first any like now over such our man very even most made
after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see men work
long here between both life being under never day same another know while last might us great
old year off come since against go came right used take three small place house water city
river market garden window letter morning evening summer winter school story number morning
family friend road field country paper table light music animal mountain island forest bridge
village harbor station kitchen doctor teacher farmer soldier captain painter writer student
quiet bright early heavy simple careful narrow gentle sudden ancient modern distant familiar
walked carried opened watched followed noticed wondered answered gathered remembered
slowly quickly together perhaps almost always often rather nearly suddenly finally""".split()
rng = random.Random(seed)
sentences = []
for _ in range(target // 6 + 64):                # far more words than needed; trimmed below
    n = rng.randint(6, 16)
    s = [rng.choice(words) for _ in range(n)]
    s[0] = s[0].capitalize()
    sentences.append(" ".join(s) + rng.choice([".", ".", ".", ",", ";"]))
text_words = " ".join(sentences).split(" ")

def n_tokens(k):
    body = json.dumps({"content": " ".join(text_words[:k]), "add_special": True}).encode()
    req = urllib.request.Request(url + "/tokenize", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return len(json.load(r)["tokens"])

if n_tokens(len(text_words)) <= target:
    sys.exit("word list too short for %d tokens" % target)
lo, hi = 1, len(text_words)                      # n_tokens(lo) <= target < n_tokens(hi)
while hi - lo > 1:
    mid = (lo + hi) // 2
    if n_tokens(mid) <= target:
        lo = mid
    else:
        hi = mid
prompt = " ".join(text_words[:lo])
with open(out, "w") as f:
    json.dump({"prompt": prompt, "n_predict": 1, "cache_prompt": True, "temperature": 0}, f)
print(n_tokens(lo), lo)
EOF
}

# completion LABEL -> runs the request, appends "round label wall_ms prompt_ms prompt_n cache_n"
# to $tmp/results and prints it
completion() {
  local wall
  wall=$(post /completion "$tmp/req.json" "$tmp/resp.json")
  python3 - "$r" "$1" "$wall" "$tmp/resp.json" >>"$tmp/results" <<'EOF'
import json, sys
rnd, label, wall, path = sys.argv[1:5]
t = json.load(open(path))["timings"]
print(rnd, label, wall, "%.1f" % t["prompt_ms"], t["prompt_n"], t.get("cache_n", 0))
EOF
  tail -n 1 "$tmp/results" | awk '{printf "  %-14s wall %9.1f ms   server prompt_ms %9.1f  prompt_n %5d  cache_n %5d\n", $2, $3, $4, $5, $6}'
}

[ "$slot_restore" = 1 ] && mkdir -p "$tmp/slots"
: >"$tmp/results"
echo "llama-server-restart: $server"
echo "  model $model, threads $threads, ctx $ctx, prompt ~$prompt_tokens tokens, rounds $rounds," \
     "port $port${extra[*]+, extra server args: ${extra[*]}}"
echo "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  start_server
  read -r ntok nwords < <(make_prompt $((seed + r))) || die "could not build the prompt"
  echo "round $r: prompt $ntok tokens ($nwords words, seed $((seed + r)))"
  completion cold
  completion warm
  if [ "$slot_restore" = 1 ]; then
    echo "{\"filename\": \"round-$r.bin\"}" >"$tmp/slot.json"
    wall=$(post "/slots/0?action=save" "$tmp/slot.json" "$tmp/slot-resp.json")
    python3 - "$wall" "$tmp/slot-resp.json" "$tmp/slots/round-$r.bin" <<'EOF'
import json, os, sys
d = json.load(open(sys.argv[2]))
print("  %-14s wall %9.1f ms   server save_ms %9.1f  n_saved %5d  file %.1f MiB" % (
    "slot save", float(sys.argv[1]), d["timings"]["save_ms"], d["n_saved"],
    os.path.getsize(sys.argv[3]) / 2**20))
EOF
  fi
  stop_server
  start_server
  completion restart
  if [ "$slot_restore" = 1 ]; then
    stop_server
    start_server
    wall=$(post "/slots/0?action=restore" "$tmp/slot.json" "$tmp/slot-resp.json")
    python3 - "$r" "$wall" "$tmp/slot-resp.json" >>"$tmp/results" <<'EOF'
import json, sys
d = json.load(open(sys.argv[3]))
print(sys.argv[1], "slot-restore", sys.argv[2], "%.1f" % d["timings"]["restore_ms"], d["n_restored"], 0)
EOF
    tail -n 1 "$tmp/results" | awk '{printf "  %-14s wall %9.1f ms   server restore_ms %8.1f  n_restored %5d\n", "slot restore", $3, $4, $5}'
    completion restored
  fi
  stop_server
done

python3 - "$tmp/results" "$slot_restore" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def med(label, col):
    return statistics.median(float(r[col]) for r in rows if r[1] == label)
labels = ["cold", "warm", "restart"]
if sys.argv[2] == "1":
    labels += ["restored"]
print("medians over %d rounds:" % len({r[0] for r in rows}))
for l in labels:
    print("  %-14s wall %9.1f ms   server prompt_ms %9.1f  prompt_n %7.1f" % (
        l, med(l, 2), med(l, 3), med(l, 4)))
cold, warm, restart = med("cold", 2), med("warm", 2), med("restart", 2)
line = "llama-server-restart: cold_ms=%.1f warm_ms=%.1f restart_ms=%.1f cold_over_restart=%.2f" % (
    cold, warm, restart, cold / restart)
line += " cold_prompt_ms=%.1f warm_prompt_ms=%.1f restart_prompt_ms=%.1f" % (
    med("cold", 3), med("warm", 3), med("restart", 3))
line += " cold_prompt_n=%d warm_prompt_n=%d restart_prompt_n=%d" % (
    med("cold", 4), med("warm", 4), med("restart", 4))
if sys.argv[2] == "1":
    by_round = {}
    for r in rows:
        if r[1] in ("restored", "slot-restore"):
            by_round[r[0]] = by_round.get(r[0], 0.0) + float(r[2])
    restored = statistics.median(by_round.values())      # restore + request, per round
    line += " restored_ms=%.1f cold_over_restored=%.2f" % (restored, cold / restored)
print(line)
EOF
