#!/usr/bin/env bash
# Speculation kinds side by side: for each kind, bench/run-server.sh with that kind on llamapp and
# on llama-server from the same tree (llamapp's own `lookup` against llama-server without drafts,
# which has no such kind), then the same with drafts off on both, as the baseline. The workload is
# run-server.sh's: the random-weight 125M model's greedy replies, which fall into loops (the
# repetitive case n-gram drafting is for).
#   bench/run-drafts.sh [--rounds N] [--clients "1 4"] [--kinds "lookup ngram-simple ..."]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 clients="1 4"
kinds="none lookup ngram-simple ngram-map-k ngram-map-k4v ngram-mod"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --kinds) kinds=$2; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
for kind in $kinds; do
  theirs=$kind
  [ "$kind" = lookup ] && theirs=none
  echo
  echo "### --spec-type $kind (llama-server: --spec-type $theirs)"
  "$root/bench/run-server.sh" --rounds "$rounds" --clients "$clients" \
    --llamapp-args "--spec-type $kind" --llama-server-args "--spec-type $theirs" 2>/dev/null
done
