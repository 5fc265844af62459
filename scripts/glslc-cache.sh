#!/usr/bin/env bash
# A cache in front of glslc for llama.cpp's Vulkan shaders, which ccache does not cover: about a
# thousand shader variants, compiled on every fresh build, that depend only on the pinned tree.
# cmake/glslc-cache.cmake points the Vulkan build's Vulkan_GLSLC_EXECUTABLE at a shim that calls
#   glslc-cache.sh REAL_GLSLC SOURCES_KEY CACHE_DIR glslc-arguments...
# SOURCES_KEY hashes the shader sources and glslc's version; an entry is keyed by it and by the
# arguments other than the output paths (-o, -MF), which differ between build folders.
# Only a compile that succeeded silently is stored (vulkan-shaders-gen fails on any stderr).
set -euo pipefail
glslc=$1 sources_key=$2 cache=$3
shift 3
original=("$@")
out="" depfile="" keyed=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=${2:-}; shift 2 || shift ;;
    -MF) depfile=${2:-}; shift 2 || shift ;;
    *) keyed+=("$1"); shift ;;
  esac
done
# Feature probes (output to stdout) and anything without an output file go straight through.
if [ -z "$out" ] || [ "$out" = - ]; then exec "$glslc" "${original[@]}"; fi

entry="$cache/$(printf '%s\n' "$sources_key" "${keyed[@]}" | sha256sum | cut -c1-40)"
# The depfile names the output; it is stored with a placeholder and given this build's path back.
placeholder=@LLAMAPP_GLSLC_OUTPUT@
if [ -f "$entry.spv" ] && { [ -z "$depfile" ] || [ -f "$entry.d" ]; }; then
  cp "$entry.spv" "$out"
  if [ -n "$depfile" ]; then
    deps=$(<"$entry.d")
    printf '%s\n' "${deps//"$placeholder"/"$out"}" > "$depfile"
  fi
  exit 0
fi

errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
status=0
"$glslc" "${original[@]}" 2>"$errors" || status=$?
if [ "$status" -eq 0 ] && [ ! -s "$errors" ]; then
  # Written under a temporary name and renamed: two builds filling the cache at once never see
  # half an entry. The depfile goes first, so a present .spv means a complete entry.
  mkdir -p "$cache"
  tmp=$(mktemp "$cache/.partial.XXXXXX")
  if [ -n "$depfile" ]; then
    deps=$(<"$depfile")
    printf '%s\n' "${deps//"$out"/"$placeholder"}" > "$tmp"
    mv "$tmp" "$entry.d"
    tmp=$(mktemp "$cache/.partial.XXXXXX")
  fi
  cp "$out" "$tmp"
  mv "$tmp" "$entry.spv"
fi
cat "$errors" >&2
exit "$status"
