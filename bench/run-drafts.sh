#!/usr/bin/env bash
# Speculation kinds side by side: for each kind, bench/run-server.sh with that kind on llamapp and
# on llama-server from the same tree (llamapp's own `lookup` against llama-server without drafts,
# which has no such kind), then the same with drafts off on both, as the baseline. The workload is
# run-server.sh's: the random-weight 125M model's greedy replies, which fall into loops (the
# repetitive case n-gram drafting is for).
#   bench/run-drafts.sh [--rounds N] [--clients "1 4"] [--kinds "lookup ngram-simple ..."]
#                       [--pair bench|stories]
# draft-simple (a draft model) and its baseline none-with-pair run on a target and draft pair:
# bench (default), the random-weight 125M model in F16 drafted by its own Q4_0 copy; stories,
# the trained stories260K drafted by its Q4_0 copy. draft-miss drafts with the random-weight demo
# model (the same vocabulary, other weights): the cost of drafts that miss.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 clients="1 4" pair=bench
kinds="none lookup ngram-simple ngram-map-k ngram-map-k4v ngram-mod"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --kinds) kinds=$2; shift 2 ;;
    --pair) pair=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
build=${LLAMAPP_BUILD_DIR:-$root/build}
miss=$build/models/demo.gguf
if [ "$pair" = stories ]; then
  cmake --build "$build" --target test-models >&2
  target=$root/../shared/models/stories260K.gguf draft=$build/models/stories260K-q4_0.gguf
else
  cmake --build "$build" --target bench-draft-pair demo-model >&2
  target=$build/models/bench-125m-f16.gguf draft=$build/models/bench-125m-q4_0.gguf
fi
for kind in $kinds; do
  theirs=$kind model="" extra=""
  [ "$kind" = lookup ] && theirs=none
  case "$kind" in
    draft-simple) model=$target extra="-md $draft" ;;
    # A draft with the same vocabulary and other weights: its drafts (almost) always miss.
    draft-miss) model=$target kind=draft-simple theirs=draft-simple extra="-md $miss" ;;
    none-with-pair) model=$target kind=none theirs=none ;;
  esac
  echo
  echo "### --spec-type $kind $extra (llama-server: --spec-type $theirs)${model:+ on $model}"
  BENCH_MODEL=$model "$root/bench/run-server.sh" --rounds "$rounds" --clients "$clients" \
    --llamapp-args "--spec-type $kind $extra" --llama-server-args "--spec-type $theirs $extra" \
    2>/dev/null
done
