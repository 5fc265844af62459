#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job: `llamapp serve` on the demo model,
# or llamapp with whatever arguments are given (e.g. scripts/run.sh run -m model.gguf -p "Hi").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=backend.sh
source "$root/scripts/backend.sh"
export LLAMAPP_BUILD_DIR=${LLAMAPP_BUILD_DIR:-$root/build$backend_suffix}
# Only what the main job needs: the llamapp binary and the demo model (scripts/test.sh builds
# the rest: tests, examples, benchmarks' tools).
LLAMAPP_BUILD_TARGETS=${LLAMAPP_BUILD_TARGETS:-llamapp-cli demo-model} "$root/scripts/setup.sh"
if [ $# -eq 0 ]; then set -- serve; fi
exec "${LLAMAPP_BUILD_DIR:-$root/build}/bin/llamapp" "$@"
