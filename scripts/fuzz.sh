#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (build-fuzz/) and runs each for a fixed
# time, from its seed corpus in tests/fuzz/corpus/<target>. A crash, a hang (over 10 s on one
# input), a leak or an ASan/UBSan report fails the run; its input is left in build-fuzz/findings
# to be fixed and added to the corpus. Prints each target's executions and coverage.
#   scripts/fuzz.sh [--seconds N] [target...]   (default: 60 s each, every target)
# llama.cpp's libraries come from the normal build (build/, or LLAMAPP_FUZZ_LLAMA_FROM) when it
# has them: only llamapp's own files are compiled with clang. Without one, clang builds them too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_requests fuzz_grammar fuzz_chat_template fuzz_kv_entry fuzz_tokenizer)
# clang with libFuzzer, the fuzz build's own packages (Debian 12's clang 14 and 15 lack the
# concepts libstdc++'s std::expected needs).
missing=()
for p in clang-19 libclang-rt-19-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
export LLAMAPP_BUILD_DIR=${LLAMAPP_FUZZ_BUILD_DIR:-$root/build-fuzz}
export LLAMAPP_BUILD_TYPE=RelWithDebInfo
prebuilt=${LLAMAPP_FUZZ_LLAMA_FROM:-$root/build}
if [ -f "$prebuilt/llama.cpp/src/libllama.a" ]; then prebuilt_arg="-DLLAMAPP_LLAMA_PREBUILT=$prebuilt"; else prebuilt_arg=""; fi
export LLAMAPP_CMAKE_ARGS="-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DLLAMAPP_FUZZ=ON -DLLAMAPP_BUILD_TESTS=OFF -DLLAMAPP_BUILD_BENCH=OFF $prebuilt_arg"
export LLAMAPP_BUILD_TARGETS=fuzz-targets
"$root/scripts/setup.sh"
# Stack traces with names: any llvm-symbolizer will do.
for s in llvm-symbolizer-19 llvm-symbolizer-14 llvm-symbolizer; do
  if command -v "$s" >/dev/null; then export ASAN_SYMBOLIZER_PATH=$(command -v "$s"); break; fi
done
findings="$LLAMAPP_BUILD_DIR/findings"
mkdir -p "$findings"
failed=0
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  log="$LLAMAPP_BUILD_DIR/$t.log"
  # The new inputs go to a scratch corpus; the seeds are read, never rewritten.
  if ! "$LLAMAPP_BUILD_DIR/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$findings/$t-" "$work" "$root/tests/fuzz/corpus/$t" \
      >"$log" 2>&1; then
    failed=1
    echo "fuzz: $t FAILED (log: $log, input: $findings)" >&2
    grep -m5 -E "ERROR|runtime error|Test unit written" "$log" >&2 || true
  fi
  runs=$(grep -oE "stat::number_of_executed_units: [0-9]+" "$log" | grep -oE "[0-9]+$" || echo 0)
  cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+" "$log" | tail -1)
  echo "{\"target\": \"$t\", \"seconds\": $seconds, \"executions\": ${runs:-0}, \"coverage\": \"${cov}\", \"corpus_added\": $(ls "$work" | wc -l)}"
  rm -rf "$work"
done
exit $failed
