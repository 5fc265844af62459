#!/usr/bin/env bash
# Fetches the pinned llama.cpp tree (shipped inside an npm package as a git bundle), verifies both
# checksums, clones it into a cache outside the tracked tree and applies scripts/llama-patches/
# (each says why it exists). Prints the checkout path.
# Idempotent: a verified checkout at the pinned commit with the same patches is reused; one with
# other patches is reset and patched again in place (same path: ccache keeps its objects).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=llama-pin.env
source "$here/llama-pin.env"

cache=${LLAMAPP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llamapp}
dest="$cache/llama.cpp-${LLAMA_COMMIT:0:7}"

patches=("$here"/llama-patches/*.patch)
[ -e "${patches[0]}" ] || patches=()
patch_set=$(cat /dev/null "${patches[@]}" | sha256sum | cut -c1-16)

# A patch that no longer applies (the pin moved) stops here with its name.
apply_patches() {
  git -C "$dest" reset --quiet --hard
  for p in "${patches[@]}"; do
    git -C "$dest" apply -p1 "$p" >&2 ||
      { echo "fetch-llama: $(basename "$p") does not apply to $LLAMA_COMMIT; update it" >&2; exit 1; }
  done
  echo "$patch_set" > "$dest/.llamapp-verified"
}

if [ -f "$dest/.llamapp-verified" ] && [ "$(git -C "$dest" rev-parse HEAD 2>/dev/null)" = "$LLAMA_COMMIT" ]; then
  [ "$(cat "$dest/.llamapp-verified")" = "$patch_set" ] || apply_patches
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
apply_patches
echo "$dest"
