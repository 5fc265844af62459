#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs every test with ctest.
#   scripts/test.sh                      the normal Release build in build/ (LLAMAPP_BACKEND:
#                                        scripts/setup.sh; a GPU backend tests in build-<backend>/)
#   scripts/test.sh --sanitize address   a separate AddressSanitizer build in build-asan/
#   scripts/test.sh --sanitize thread    a separate ThreadSanitizer build in build-tsan/
# Extra arguments after -- go to ctest (e.g. -- -R Golden).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

sanitize=""
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize="$2"; shift 2 ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "usage: $0 [--sanitize address|thread] [-- ctest args]" >&2; exit 2 ;;
  esac
done

# shellcheck source=backend.sh
source "$root/scripts/backend.sh"
if [ -n "$sanitize" ]; then
  export LLAMAPP_BUILD_DIR=${LLAMAPP_BUILD_DIR:-$root/build-${sanitize:0:1}san$backend_suffix}
  # AddressSanitizer: Release, as the normal build, so that llama.cpp (not instrumented, see
  # CMakeLists.txt) comes from the same ccache entries.
  if [ "$sanitize" = address ]; then build_type=Release; else build_type=RelWithDebInfo; fi
  export LLAMAPP_BUILD_TYPE=$build_type
  # The benchmark programs are timed in the normal build only.
  export LLAMAPP_CMAKE_ARGS="-DLLAMAPP_SANITIZE=$sanitize -DLLAMAPP_BUILD_BENCH=OFF ${LLAMAPP_CMAKE_ARGS:-}"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp}
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp}
fi
export LLAMAPP_BUILD_DIR=${LLAMAPP_BUILD_DIR:-$root/build$backend_suffix}
# The Vulkan build runs the device tests only (below): it builds their programs, no benchmarks.
if [ "$backend" = vulkan ]; then
  export LLAMAPP_BUILD_TARGETS=${LLAMAPP_BUILD_TARGETS:-"llamapp_integration_tests llamapp_e2e_tests"}
fi
"$root/scripts/setup.sh"
# The official OpenAI, Anthropic and Ollama Node libraries for the server's end-to-end tests,
# pinned by their lock file.
sdk="$root/tests/e2e/client_sdks"
if ! cmp -s "$sdk/package-lock.json" "$sdk/node_modules/.installed-from-lock" 2>/dev/null; then
  npm ci --prefix "$sdk" --no-audit --no-fund --loglevel=error >&2
  cp "$sdk/package-lock.json" "$sdk/node_modules/.installed-from-lock"
fi
build=${LLAMAPP_BUILD_DIR:-$root/build}
cd "$build"
# The regular expressions of a list file (tests/*-tests.txt), one per line, joined for ctest -R;
# each must match a test, so that a renamed test cannot drop out of a job unnoticed. Lines that
# start with "-" are the exceptions (patterns_of FILE -: those, for ctest -E).
patterns_of() {
  local patterns=() line
  while IFS= read -r line; do
    [[ -z "$line" || "$line" == \#* ]] && continue
    if [ "${2:-}" = - ]; then [[ "$line" == -* ]] || continue; line=${line#-}
    else [[ "$line" == -* ]] && continue; fi
    # grep reads all of it: with -q it would stop early and pipefail would see ctest's SIGPIPE.
    if ! ctest -N -R "$line" | grep "Test *#" >/dev/null; then
      echo "$1: '$line' matches no test" >&2
      return 1
    fi
    patterns+=("$line")
  done <"$1"
  (IFS='|'; echo "${patterns[*]}")
}
# ThreadSanitizer runs the concurrency tests listed in tests/tsan-tests.txt, unless told which.
if [ "$sanitize" = thread ] && [ ${#ctest_args[@]} -eq 0 ]; then
  patterns=$(patterns_of "$root/tests/tsan-tests.txt")
  ctest_args=(-R "$patterns")
fi
# The Vulkan build runs the tests in tests/vulkan-tests.txt with every layer on the first Vulkan
# device: lavapipe where there is no GPU (ggml-vulkan skips CPU-type devices unless they are
# named). They fail at once if the build sees no Vulkan device at all.
if [ "$backend" = vulkan ]; then
  export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0}
  if ! "$build/bin/llamapp" devices | grep -q "Vulkan0"; then
    echo "test: LLAMAPP_BACKEND=vulkan but no Vulkan device is visible (llamapp devices):" >&2
    "$build/bin/llamapp" devices >&2
    exit 1
  fi
  if [ ${#ctest_args[@]} -eq 0 ]; then
    patterns=$(patterns_of "$root/tests/vulkan-tests.txt")
    exceptions=$(patterns_of "$root/tests/vulkan-tests.txt" -)
    ctest_args=(-R "$patterns")
    [ -n "$exceptions" ] && ctest_args+=(-E "$exceptions")
  fi
fi
# One test at a time: every test decodes with all cores, and ggml's thread pool spins at its
# barriers, so two tests side by side on a small machine slow each other down about tenfold.
ctest --output-on-failure -j 1 --timeout 900 "${ctest_args[@]}"
