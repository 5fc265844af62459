#!/usr/bin/env bash
# The model manager's figures: for each generator family a model of the "demo" shape (256 wide,
# 4 layers, a 32k vocabulary) is generated, and its estimated footprint is set against the RSS
# its load adds; then 50 load/unload cycles, the TTFT of a request that loads its model, and two
# models serving at once. Arguments go to every run, e.g. bench/run-models.sh -t 2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llamapp-models-bench llamapp-gen-model >&2
bin=$build/bin
models=$build/models-bench
mkdir -p "$models"
llama=$root/../shared/models/vocab/ggml-vocab-llama-spm.gguf
[ -f "$llama" ] || llama=$(ls "${LLAMAPP_CACHE:-$HOME/.cache/llamapp}"/llama.cpp-*/models/ggml-vocab-llama-spm.gguf | head -1)
for arch in llama qwen3 gemma2 mamba jamba; do
  out=$models/$arch-demo-q8_0.gguf
  [ -f "$out" ] || "$bin/llamapp-gen-model" --arch "$arch" --preset demo --type q8_0 \
    --vocab "$llama" --seed 11 --out "$out" >&2
done
echo "| family | weights MiB | context MiB | compute MiB | estimate MiB | RSS added MiB | vs RSS | allocated MiB | vs allocated |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for arch in llama qwen3 gemma2 mamba jamba; do
  "$bin/llamapp-models-bench" "$@" footprint -m "$models/$arch-demo-q8_0.gguf"
done
"$bin/llamapp-models-bench" "$@" cycles -m "$models/llama-demo-q8_0.gguf" -n 50
"$bin/llamapp-models-bench" "$@" ondemand -m "$models/llama-demo-q8_0.gguf" --rounds 5
"$bin/llamapp-models-bench" "$@" ondemand -m "$build/models/bench-125m-q4_0.gguf" --rounds 5
"$bin/llamapp-models-bench" "$@" interleave -a "$models/llama-demo-q8_0.gguf" \
  -b "$models/qwen3-demo-q8_0.gguf" --requests 8 --tokens 32
