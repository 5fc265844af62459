#!/usr/bin/env bash
# Installs llamapp from a build tree into a fresh prefix, then builds programs against the
# installed files only: examples/ as a separate CMake project (find_package(llamapp)), and one of
# them again with pkg-config. Runs them on a tiny model.
#   tests/install/run.sh BUILD_DIR SOURCE_DIR STORIES_GGUF
set -euo pipefail
build=$1 source=$2 stories=$3
if [ ! -f "$stories" ]; then echo "SKIP: missing model file $stories"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "install: $(cat "$work/install.log")"
for f in include/llamapp/llamapp.hpp include/llamapp/server.hpp lib/libllamapp.a \
         lib/libllamapp-server.a lib/cmake/llamapp/llamappConfig.cmake lib/pkgconfig/llamapp.pc; do
  [ -f "$prefix/$f" ] || fail "not installed: $f"
done
# Internals and llama.cpp's headers stay out of the prefix.
if find "$prefix/include" -name 'llama*.h' | grep -q .; then fail "llama.cpp headers installed"; fi

# A consumer project that knows nothing of the llamapp tree: the examples, on their own.
cmake -S "$source/examples" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" 2>&1 || fail "configure: $(cat "$work/configure.log")"
# The package says which backends the library holds (RPC is in every build).
grep -q "llamapp: backends .*rpc" "$work/configure.log" || fail "the package names no backends"
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || fail "build: $(tail -30 "$work/build.log")"
out=$("$work/consumer/examples/generate" "$stories" "Once upon a time" 2>/dev/null)
[[ $out == ", there was a little girl named Lily."* ]] || fail "the consumer's generate printed: $out"

# pkg-config, for builds without CMake.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
g++ -std=c++23 -O1 "$source/examples/stream.cpp" -o "$work/stream" $(pkg-config --cflags --libs llamapp) ||
  fail "pkg-config build"
"$work/stream" "$stories" >/dev/null 2>&1 || fail "the pkg-config build did not run"
echo "install: the installed package builds and runs the examples"
