#!/usr/bin/env bash
# Fetches the pinned llama.cpp tree (shipped inside an npm package as a git bundle), verifies both
# checksums and clones it into a cache outside the tracked tree. Prints the checkout path.
# Idempotent: a verified checkout at the pinned commit is reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=llama-pin.env
source "$here/llama-pin.env"

cache=${LLAMAPP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llamapp}
dest="$cache/llama.cpp-${LLAMA_COMMIT:0:7}"

if [ -f "$dest/.llamapp-verified" ] && [ "$(git -C "$dest" rev-parse HEAD 2>/dev/null)" = "$LLAMA_COMMIT" ]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$LLAMA_NPM_PACKAGE" >/dev/null)
tarball=$(ls "$work"/*.tgz)
echo "$LLAMA_NPM_TARBALL_SHA256  $tarball" | sha256sum --check --quiet - >&2 \
  || { echo "fetch-llama: tarball checksum mismatch" >&2; exit 1; }
tar -xzf "$tarball" -C "$work" package/llama/gitRelease.bundle
bundle="$work/package/llama/gitRelease.bundle"
echo "$LLAMA_BUNDLE_SHA256  $bundle" | sha256sum --check --quiet - >&2 \
  || { echo "fetch-llama: bundle checksum mismatch" >&2; exit 1; }

rm -rf "$dest"
git -c advice.detachedHead=false clone --quiet "$bundle" "$dest" >&2
[ "$(git -C "$dest" rev-parse HEAD)" = "$LLAMA_COMMIT" ] \
  || { echo "fetch-llama: bundle HEAD is not $LLAMA_COMMIT" >&2; exit 1; }
touch "$dest/.llamapp-verified"
echo "$dest"
