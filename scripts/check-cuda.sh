#!/usr/bin/env bash
# Compiles the CUDA variant (LLAMAPP_BACKEND=cuda) into build-cuda/: proof that the GPU build
# still builds where the toolkit is installed and no GPU is (this project's machines), without
# running it. ggml's ~190 CUDA kernel files take about an hour on 2 cores the first time (ccache
# keeps them for the llama.cpp pin, so a later check rebuilds what changed), which does not fit
# CI: run it before a stop whose change touches GPU code (cmake/backend.cmake, src/core device
# and placement code, the patches). bench/gpu/run.sh builds and measures the same variant on a
# real GPU.
#   scripts/check-cuda.sh [ARCHS]   CMAKE_CUDA_ARCHITECTURES, default 90 (the H200 the figures
#                                   in docs/performance.md come from)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export LLAMAPP_BACKEND=cuda
# The test programs list their tests when ctest runs, not after linking: listing them here would
# start them, and without a GPU driver (libcuda.so.1) they cannot start.
export LLAMAPP_CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=${1:-90} -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST ${LLAMAPP_CMAKE_ARGS:-}"
# What a server on a GPU needs, and the tests that would run there; not the benchmarks.
export LLAMAPP_BUILD_TARGETS=${LLAMAPP_BUILD_TARGETS:-"llamapp-cli llamapp_integration_tests llamapp_e2e_tests"}
start=$SECONDS
"$root/scripts/setup.sh"
echo "check-cuda: the CUDA variant built in $((SECONDS - start)) s ($root/build-cuda)" >&2
