#!/usr/bin/env bash
# Installs everything llamapp needs on Debian 12, fetches the pinned llama.cpp tree and builds.
# Idempotent: installed packages, the verified llama.cpp checkout and the build tree are reused.
#   scripts/setup.sh            configure + build (Release) into build/
#   LLAMAPP_BACKEND=auto|cpu|cuda|vulkan|metal chooses llama.cpp's backend (cmake/backend.cmake;
#   default auto); a GPU backend builds into build-<backend>/ unless LLAMAPP_BUILD_DIR says where.
#   LLAMAPP_BUILD_DIR, LLAMAPP_BUILD_TYPE, LLAMAPP_CMAKE_ARGS override the defaults;
#   LLAMAPP_BUILD_TARGETS (space-separated) builds only those targets instead of everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=backend.sh
source "$root/scripts/backend.sh"

# Debian package names, pinned here and nowhere else. Why each is needed: CONTRIBUTING.md.
packages=(
  g++ cmake ninja-build ccache git pkg-config curl openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev libspdlog-dev libssl-dev libxxhash-dev
  python3-pytest python3-requests python3-wget python3-filelock
  tmux zsh fish
)
# Vulkan: the loader and headers, the shader compiler, and Mesa's drivers (lavapipe runs Vulkan on
# the CPU where there is no GPU).
[ "$backend" = vulkan ] && packages+=(libvulkan-dev glslc spirv-headers mesa-vulkan-drivers)
if [ "$backend" = cuda ] && ! command -v nvcc >/dev/null &&
   [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] && [ ! -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  echo "setup: LLAMAPP_BACKEND=cuda needs the CUDA toolkit's nvcc, which Debian 12 does not package" \
       "in a current version: install the toolkit from NVIDIA and set CUDA_HOME (or put nvcc on PATH)" >&2
  exit 1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

llama_dir=${LLAMAPP_LLAMA_DIR:-$("$root/scripts/fetch-llama.sh")}
build=${LLAMAPP_BUILD_DIR:-$root/build$backend_suffix}
type=${LLAMAPP_BUILD_TYPE:-Release}

export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llamapp/ccache}
# Paths differ between clones: with the clone as base_dir, ccache sees the project's files by
# their path relative to the build folder and llama.cpp's (in the user's cache, outside the clone)
# by the same absolute path, so hits survive a fresh clone at any place and depth.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
export CCACHE_NOHASHDIR=1
# The server's and the CLI's precompiled headers (LLAMAPP_PCH): ccache caches the files that use
# them only when told that the header's macros and time stamps may be taken as they are.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
# Configure on the first run, and again whenever the settings change (a new LLAMAPP_CMAKE_ARGS
# would otherwise be ignored silently by an existing build tree).
settings="$type|$llama_dir|$backend|${LLAMAPP_CMAKE_ARGS:-}"
if [ ! -f "$build/build.ninja" ] || [ "$(cat "$build/.llamapp-settings" 2>/dev/null)" != "$settings" ]; then
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$type" \
    -DLLAMAPP_LLAMA_DIR="$llama_dir" -DLLAMAPP_BACKEND="$backend" ${LLAMAPP_CMAKE_ARGS:-} >&2
  printf '%s' "$settings" > "$build/.llamapp-settings"
fi
if [ -n "${LLAMAPP_BUILD_TARGETS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build "$build" --target $LLAMAPP_BUILD_TARGETS >&2
else
  cmake --build "$build" >&2
fi
