#!/usr/bin/env bash
# Builds the folder that bench/gpu/run.sh takes to a GPU machine that has no network and no
# package manager (the H200 machine of issue 38): everything the CUDA build needs that such a
# machine lacks, packed so that it travels as a handful of files.
#
#   bench/gpu/prepare.sh [COMMIT] [DEST]      defaults: HEAD, <repo>/.gpu
#
# DEST then holds
#   llamapp.tar.gz      `git archive COMMIT` of this repository (the code measured), and
#   llamapp.commit      its full hash
#   llama.cpp.tar.gz    the pinned llama.cpp tree (scripts/fetch-llama.sh, or LLAMAPP_LLAMA_DIR),
#   llama.cpp.commit    without .git, docs, media, the conversion scripts and all vocabularies
#                       but ggml-vocab-llama-spm.gguf (the generator's): about 10 MB
#   debs/*.deb          the Debian -dev packages llamapp needs and the libraries they name
#                       (fmt, spdlog, CLI11, OpenSSL, xxHash, Google Benchmark for bench/),
#                       from this machine's apt sources; run.sh unpacks them into a private prefix
#   bench-gpu/          a copy of bench/gpu/ from the working tree, so that the run does not
#                       depend on the rest of the working tree being in a buildable state
# Tarballs rather than unpacked trees: run.sh unpacks them once per machine into its work folder
# and keeps the unpacked tree while the tarball's checksum stays the same, so a second run on the
# same machine reuses its build instead of compiling everything again (a copy that arrives anew,
# with new timestamps, would make ninja rebuild it all).
#
# Ignore DEST in git (`echo /.gpu/ >> .git/info/exclude`), then on the GPU machine, from the
# repository root:  bash .gpu/bench-gpu/run.sh OUTDIR   (see run.sh for the settings).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
commit=${1:-HEAD}
dest=${2:-$root/.gpu}
mkdir -p "$dest/debs" "$dest/bench-gpu"
dest=$(cd "$dest" && pwd)

full=$(git -C "$root" rev-parse --verify "$commit^{commit}")
if [ "$(cat "$dest/llamapp.commit" 2>/dev/null)" != "$full" ] || [ ! -f "$dest/llamapp.tar.gz" ]; then
  git -C "$root" archive --format=tar "$full" | gzip -n -6 >"$dest/llamapp.tar.gz"
  echo "$full" >"$dest/llamapp.commit"
fi

llama=${LLAMAPP_LLAMA_DIR:-$("$root/scripts/fetch-llama.sh")}
llama_commit=$(git -C "$llama" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$(cat "$dest/llama.cpp.commit" 2>/dev/null)" != "$llama_commit" ] || [ ! -f "$dest/llama.cpp.tar.gz" ] \
   || [ "$llama_commit" = unknown ]; then
  # Everything the CMake configuration reads stays (tests/, examples/, tools/ui's CMake files);
  # what goes is documentation, media, Python conversion code, git history and vocabularies.
  tar -C "$llama" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
      --exclude=./.git --exclude=./docs --exclude=./media --exclude=./gguf-py \
      --exclude=./conversion --exclude=./benches --exclude=./tools/ui/tests \
      --exclude=./tools/ui/node_modules --exclude=./.llamapp-verified \
      --exclude='./models/ggml-vocab-*' -cf - . | gzip -n -6 >"$dest/llama.cpp.tar.gz.new"
  # The generator's vocabulary goes in after all.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  gzip -dc "$dest/llama.cpp.tar.gz.new" >"$tmp/t.tar"
  tar -C "$llama" -rf "$tmp/t.tar" --owner=0 --group=0 --numeric-owner \
      ./models/ggml-vocab-llama-spm.gguf
  gzip -n -6 <"$tmp/t.tar" >"$dest/llama.cpp.tar.gz"
  rm -f "$dest/llama.cpp.tar.gz.new"
  echo "$llama_commit" >"$dest/llama.cpp.commit"
fi

# The Debian packages (names as in scripts/setup.sh) and the shared libraries they link to.
packages=(libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libcli11-dev libssl-dev libssl3
          libxxhash-dev libxxhash0 libbenchmark-dev libbenchmark1debian)
for p in "${packages[@]}"; do
  [ -f "$dest/debs/$p.deb" ] && continue
  (cd "$dest/debs" && apt-get download "$p" >/dev/null 2>&1) \
    || { echo "prepare: apt-get download $p failed" >&2; exit 1; }
  # Plain names: the version goes to VERSIONS (file names with '%3a' and '~' travel badly).
  f=$(find "$dest/debs" -maxdepth 1 -name "${p}_*.deb" | head -1)
  dpkg-deb -f "$f" Package Version | sed 's/^[A-Za-z]*: //' | paste -sd' ' >>"$dest/debs/VERSIONS"
  mv "$f" "$dest/debs/$p.deb"
done

rm -rf "$dest/bench-gpu"
cp -r "$here" "$dest/bench-gpu"
rm -rf "$dest/bench-gpu/__pycache__"
echo "prepare: $dest ($(du -sh "$dest" | cut -f1)): llamapp $(cut -c1-7 "$dest/llamapp.commit"), llama.cpp $(cut -c1-7 "$dest/llama.cpp.commit")" >&2
echo "prepare: on the GPU machine, from the repository root: bash .gpu/bench-gpu/run.sh OUTDIR" >&2
