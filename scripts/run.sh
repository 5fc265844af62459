#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job: `llamapp serve` on the demo model,
# or llamapp with whatever arguments are given (e.g. scripts/run.sh run -m model.gguf -p "Hi").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
if [ $# -eq 0 ]; then set -- serve; fi
exec "${LLAMAPP_BUILD_DIR:-$root/build}/bin/llamapp" "$@"
