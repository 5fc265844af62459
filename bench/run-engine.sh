#!/usr/bin/env bash
# Builds llama-batched-bench from the pinned tree and the ~125M Q4_0 benchmark model, then runs
# the engine benchmarks: throughput (vs llama-batched-bench), multiturn (TTFT with and without
# prefix reuse) and overhead (engine vs single-stream generate). Arguments are passed to every
# run before the subcommand, e.g. bench/run-engine.sh --rounds 3 -t 2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llama-batched-bench llamapp-engine-bench bench-model >&2
bench=("$build/bin/llamapp-engine-bench" -m "$build/models/bench-125m-q4_0.gguf" "$@")
"${bench[@]}" throughput --batched-bench "$build/bin/llama-batched-bench"
"${bench[@]}" throughput --batched-bench "$build/bin/llama-batched-bench" --split-kv
"${bench[@]}" multiturn
"${bench[@]}" overhead
