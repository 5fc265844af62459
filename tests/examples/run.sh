#!/usr/bin/env bash
# Runs every program in examples/ on tiny models and checks what each prints.
#   tests/examples/run.sh EXAMPLES_DIR STORIES_GGUF QWEN3_TINY_GGUF
# Exits 77 (skipped, with one line naming it) when a model file is missing.
set -euo pipefail
dir=$1 stories=$2 qwen=$3
for f in "$stories" "$qwen"; do
  if [ ! -f "$f" ]; then echo "SKIP: missing model file $f"; exit 77; fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$dir/generate" "$stories" "Once upon a time" 2>/dev/null)
# stories260K's greedy continuation (the golden test's text).
[[ $out == ", there was a little girl named Lily."* ]] || fail "generate printed: $out"

out=$("$dir/stream" "$stories" 2>"$work/stream.err")
grep -q "finished: cancelled" "$work/stream.err" || fail "stream did not stop early: $(cat "$work/stream.err")"
[[ $out == *. ]] || fail "stream printed: $out"

out=$("$dir/chat_tool" "$qwen" 2>/dev/null) || fail "chat_tool made no tool call: $out"
[[ $out == "tool call get_weather("* ]] || fail "chat_tool printed: $out"

out=$("$dir/engine_threads" "$stories" 2>/dev/null) || fail "engine_threads: $out"
[ "$(grep -c '^\[[0-5]\] ' <<<"$out")" -eq 6 ] || fail "engine_threads printed: $out"

# The trained model drafted by its Q4_0 copy (generated beside the tests' models): its reply,
# and most drafts kept.
draft=$(dirname "$qwen")/stories260K-q4_0.gguf
out=$("$dir/draft_model" "$stories" "$draft" "Once upon a time" 2>/dev/null) || fail "draft_model: $out"
[[ $out == ", there was a little girl named Lily."* ]] || fail "draft_model printed: $out"
kept=$(sed -n 's/^drafted \([0-9]*\) tokens, kept \([0-9]*\)$/\1 \2/p' <<<"$out")
read -r drafted accepted <<<"$kept"
[ "${accepted:-0}" -gt 0 ] && [ $((accepted * 2)) -gt "$drafted" ] || fail "draft_model kept: $out"

first=$("$dir/kv_store_restart" "$stories" "$work/cache" 2>/dev/null)
second=$("$dir/kv_store_restart" "$stories" "$work/cache" 2>/dev/null)
[[ $first == *"(none)"* ]] || fail "kv_store_restart, first run: $first"
[[ $second == *"(stored)"* ]] || fail "kv_store_restart, second run: $second"

# The embedded server: started with pipes for its input and output, asked over HTTP, stopped by
# closing its input.
mkfifo "$work/in" "$work/out"
"$dir/embedded_server" "$stories" 0 <"$work/in" >"$work/out" 2>"$work/server.err" &
pid=$!
exec 3>"$work/in" 4<"$work/out"
read -r -t 300 line <&4 || fail "embedded_server printed nothing: $(cat "$work/server.err")"
port=$(sed -n 's|^listening on http://127.0.0.1:\([0-9]*\)/v1$|\1|p' <<<"$line")
[ -n "$port" ] || fail "embedded_server printed: $line"
reply=$(curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"embedded","prompt":"Once upon a time","max_tokens":4,"temperature":0}') ||
  fail "the embedded server did not answer"
[[ $reply == *'"text":", there was a'* ]] || fail "the embedded server answered: $reply"
exec 3>&-
read -r -t 300 line <&4 || fail "embedded_server did not stop: $(cat "$work/server.err")"
[ "$line" = "stopped" ] || fail "embedded_server printed: $line"
wait "$pid" || fail "embedded_server failed: $(cat "$work/server.err")"
echo "examples: all seven ran"
