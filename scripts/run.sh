#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job: `llamapp run` on the demo model,
# or with whatever arguments are given (e.g. scripts/run.sh run -m model.gguf -p "Hello").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
if [ $# -eq 0 ]; then set -- run; fi
exec "${LLAMAPP_BUILD_DIR:-$root/build}/bin/llamapp" "$@"
