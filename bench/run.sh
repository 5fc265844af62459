#!/usr/bin/env bash
# Builds llama-bench from the pinned tree and the ~125M Q4_0 benchmark model, then compares
# llamapp with llama-bench side by side (alternating rounds, medians). Extra arguments go to
# llamapp-bench, e.g. bench/run.sh --rounds 5 -t 2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llama-bench llamapp-bench bench-model >&2
exec "$build/bin/llamapp-bench" --llama-bench "$build/bin/llama-bench" \
  -m "$build/models/bench-125m-q4_0.gguf" "$@"
