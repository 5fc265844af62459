#!/usr/bin/env bash
# llamapp next to llama.cpp's own tools on one NVIDIA GPU, in one run of a few minutes on a machine
# with no network and no package manager (issue 38, "Figures on a real GPU"; first run on an H200).
#
#   bench/gpu/run.sh OUTDIR
#
# What it does, in this order, each stage only while the time budget lasts (a stage that no
# longer fits is skipped and says so), writing OUTDIR after every stage so that a run cut short
# still returns what it measured:
#   1. env       the machine: GPU, driver, compilers, and which of llamapp's -dev packages the
#                image has itself (env.txt)
#   2. build     a CUDA build (-DGGML_CUDA=ON, CMAKE_CUDA_ARCHITECTURES 90 unless told otherwise)
#                of llamapp (the llamapp CLI, llamapp-bench, the model generator) and
#                of llama-bench and llama-server from the same pinned llama.cpp tree, with every
#                core; Debian -dev packages brought as .deb files are unpacked into a private
#                prefix (never into /) and CMake is pointed at it
#   3. models    random-weight llama models from tools/gen_model.cpp, Q4_0: a ~1.1B shape
#                (Llama 3.2 1B: n_embd 2048, 16 layers, 32/8 heads, ff 8192) and a ~7.2B shape
#                (Llama 3 8B: 4096, 32 layers, 32/8 heads, ff 14336), both with the 32000-token
#                llama vocabulary; generated in the background as soon as the generator is
#                linked (the generator is single-threaded: the 8B takes minutes)
#   4. single-1b, single-8b   single-stream prefill and decode, llamapp vs llama-bench
#                (bench/llamapp_bench.cpp: alternating rounds, medians), every layer on the GPU
#   5. server-1b, server-8b   `llamapp serve` vs `llama-server` (-kvu), 64 slots and a 32768-token
#                shared context, -ngl 99, at 1, 16 and 64 streaming clients (bench/loadgen.py's
#                requests: ~100-word prompts, 128 tokens, ignore_eos; spread over processes):
#                throughput and TTFT p50/p99; servers alternate order per round
#   6. kv-*      a 4k- (and 32k-) token prompt after a restart: `llamapp serve --cache-disk` in
#                a fresh process serving it from its disk tier, vs the same prompt computed cold
#                by llamapp and by llama-server (wall time of a max_tokens 1 request)
#
# OUTDIR gets: summary.md (the tables), results.jsonl (every figure), env.txt, progress.log and
# logs.tar.gz (build, generator and server logs). Nothing else; at most these five files.
#
# Where the sources come from (the machine has no network, so scripts/fetch-llama.sh cannot run):
#   LLAMAPP_GPU_CARRY  a folder made by bench/gpu/prepare.sh (llamapp.tar.gz, llama.cpp.tar.gz,
#                      debs/); default: the folder above this script when it holds those files
#                      (.gpu/bench-gpu/run.sh), else <repo>/.gpu
#   LLAMAPP_SRC        a llamapp source tree to build instead of the carried llamapp.tar.gz
#                      (default without one: the repository this script lies in)
#   LLAMAPP_LLAMA_DIR  a llama.cpp tree instead of the carried llama.cpp.tar.gz
#   LLAMAPP_GPU_DEBS   a folder of .deb files instead of the carried debs/ (none: use the system's)
# Settings:
#   LLAMAPP_GPU_WORK     work folder: unpacked sources, build, prefix, models, state
#                        (default /var/tmp/llamapp-gpu). A second run on the same machine reuses
#                        the build and the models and skips the stages already done (their
#                        figures are copied into the new OUTDIR); LLAMAPP_GPU_REDO=1 redoes them.
#   LLAMAPP_GPU_BUDGET_S seconds this script may run (default 530); stages that no longer fit
#                        are skipped
#   LLAMAPP_GPU_STAGES   the stages to run (default: "single-1b server-1b single-8b server-8b
#                        kv-1b-4k kv-1b-32k kv-8b-4k")
#   LLAMAPP_GPU_THREADS  CPU threads given to every program measured (default 8)
#   LLAMAPP_GPU_CUDA_ARCH  CMAKE_CUDA_ARCHITECTURES (default 90)
#   LLAMAPP_CMAKE_ARGS   further CMake arguments (as for scripts/setup.sh)
#   LLAMAPP_GPU_LLAMAPP_ARGS, LLAMAPP_GPU_LLAMA_SERVER_ARGS   further flags for every start of
#                        `llamapp serve` / `llama-server` (e.g. "--cache-ram 0" for llama-server)
#   LLAMAPP_GPU_DRY=1    stop after configuring (checks a prepared folder where no GPU is)
#
# Preparing a run for the H200 machine of this workplace (its `run` tool sends the repository's
# working tree, plus ignored folders named in `carry`):
#   echo /.gpu/ >> .git/info/exclude && bench/gpu/prepare.sh <commit>    # about 16 MB
#   then, there, from the repository root:  bash .gpu/bench-gpu/run.sh "$OUT"   (carry: .gpu)
# On the H200 (2026-12-04) the build took ~5.5 min and the single-threaded generator ~3 min for
# the 8B, so one 9-minute call measures the 1B stages; a second call on the still-warm machine
# does the 8B and the restart stages (docs/gpu-figures.md has the figures and the details).
set -uo pipefail

out=${1:?usage: bench/gpu/run.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
deadline=$((t0 + ${LLAMAPP_GPU_BUDGET_S:-530}))
work=${LLAMAPP_GPU_WORK:-/var/tmp/llamapp-gpu}
threads=${LLAMAPP_GPU_THREADS:-8}
jobs=$(nproc)
stages=${LLAMAPP_GPU_STAGES:-single-1b server-1b single-8b server-8b kv-1b-4k kv-1b-32k kv-8b-4k}
mkdir -p "$work/state" "$work/logs" "$work/models" "$work/src"
logs=$work/logs
results=$work/state/results.jsonl
touch "$results"
export PATH=$PATH:/usr/local/cuda/bin
export CMAKE_POLICY_VERSION_MINIMUM=3.5   # Debian's CMake package files under a CMake 4
export PYTHONUNBUFFERED=1

left() { echo $((deadline - $(date +%s))); }
log() {
  printf '[%4ds] %s\n' $(($(date +%s) - t0)) "$*" | tee -a "$out/progress.log" "$logs/progress.log" >&2
}
# emit key=value...: one JSON line into results (a value that parses as JSON is kept as JSON).
emit() {
  python3 -c '
import json, sys
d = {}
for a in sys.argv[1:]:
    k, v = a.split("=", 1)
    try:
        d[k] = json.loads(v)
    except ValueError:
        d[k] = v
print(json.dumps(d))' "$@" >>"$results"
}
# jget JSON a.b.c: a field of a JSON text, as JSON (null when absent).
jget() {
  python3 -c '
import json, sys
try:
    d = json.loads(sys.argv[1])
except ValueError:
    d = None
for k in sys.argv[2].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print(json.dumps(d))' "$1" "$2"
}
status() {  # status NAME STATUS SECONDS [NOTE]
  emit stage=status "name=$1" "status=$2" "seconds=$3" "note=${4:-}"
  log "stage $1: $2 (${3}s)${4:+ - $4}"
}
publish() {
  cp "$results" "$out/results.jsonl"
  python3 "$here/gpu_bench.py" summary "$results" >"$out/summary.md" 2>>"$logs/summary.log"
  tar -czf "$out/logs.tar.gz.tmp" -C "$work" logs 2>/dev/null && mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
}
# ---- helpers for the measuring stages ----------------------------------------------------------
srv_pid=""
port=18400
server_start() {  # NAME MODEL CTX SLOTS LOG [EXTRA...]
  local name=$1 model=$2 ctx=$3 slots=$4 slog=$5
  shift 5
  port=$((port + 1))  # a fresh port each time: no wait for the previous listener's sockets
  echo "== $(date -u +%T) $name -c $ctx slots $slots port $port $*" >>"$slog"
  if [ "$name" = llamapp ]; then
    # shellcheck disable=SC2086  # the extra arguments are split on purpose
    "$bin/llamapp" serve -m "$model" -t "$threads" -c "$ctx" --parallel "$slots" --port "$port" \
      -ngl 99 --log-level warning --max-queue 256 ${LLAMAPP_GPU_LLAMAPP_ARGS:-} "$@" >>"$slog" 2>&1 &
  else
    # shellcheck disable=SC2086
    "$bin/llama-server" -m "$model" -t "$threads" -c "$ctx" -np "$slots" -kvu --port "$port" \
      --no-webui -ngl 99 ${LLAMAPP_GPU_LLAMA_SERVER_ARGS:-} "$@" >>"$slog" 2>&1 &
  fi
  srv_pid=$!
  if ! python3 "$here/gpu_bench.py" health "$port" "$srv_pid" 240 2>>"$slog"; then
    server_stop
    return 1
  fi
}
server_stop() {
  [ -n "${srv_pid:-}" ] || return 0
  kill -TERM "$srv_pid" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$srv_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$srv_pid" 2>/dev/null
  wait "$srv_pid" 2>/dev/null
  srv_pid=""
}
trap 'server_stop; publish' EXIT

log "llamapp GPU benchmark: work $work, budget $(left) s, stages: $stages"

# ---- sources -------------------------------------------------------------------------------
carry=${LLAMAPP_GPU_CARRY:-}
if [ -z "$carry" ]; then
  if [ -f "$here/../llama.cpp.tar.gz" ]; then carry=$(cd "$here/.." && pwd)
  elif [ -d "$here/../../.gpu" ]; then carry=$(cd "$here/../../.gpu" && pwd)
  fi
fi
# unpack TARBALL DEST: once per tarball content (kept while its checksum stays the same, so that
# a second run on this machine does not make ninja rebuild everything)
unpack() {
  local sum
  sum=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$(cat "$2.sha256" 2>/dev/null)" = "$sum" ] && [ -d "$2" ] && return 0
  rm -rf "$2" && mkdir -p "$2" && tar -xzf "$1" -C "$2" && echo "$sum" >"$2.sha256"
}
if [ -n "${LLAMAPP_SRC:-}" ]; then
  src=$LLAMAPP_SRC
elif [ -n "$carry" ] && [ -f "$carry/llamapp.tar.gz" ]; then
  unpack "$carry/llamapp.tar.gz" "$work/src/llamapp" || { log "cannot unpack llamapp.tar.gz"; exit 1; }
  src=$work/src/llamapp
else
  src=$(cd "$here/../.." && pwd)
fi
if [ -n "${LLAMAPP_LLAMA_DIR:-}" ]; then
  llama=$LLAMAPP_LLAMA_DIR
elif [ -n "$carry" ] && [ -f "$carry/llama.cpp.tar.gz" ]; then
  unpack "$carry/llama.cpp.tar.gz" "$work/src/llama.cpp" || { log "cannot unpack llama.cpp.tar.gz"; exit 1; }
  llama=$work/src/llama.cpp
else
  llama=$("$src/scripts/fetch-llama.sh") || { log "no llama.cpp tree (set LLAMAPP_LLAMA_DIR)"; exit 1; }
fi
llamapp_commit=$(cat "$carry/llamapp.commit" 2>/dev/null || git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
llama_commit=$(cat "$carry/llama.cpp.commit" 2>/dev/null || git -C "$llama" rev-parse HEAD 2>/dev/null || echo unknown)
export LLAMAPP_LLAMA_DIR=$llama
log "llamapp ${llamapp_commit:0:12} from $src; llama.cpp ${llama_commit:0:12} from $llama"

# ---- 1. env ----------------------------------------------------------------------------------
ts=$(date +%s)
{
  echo "== date"; date -u
  echo "== system"; uname -a; head -4 /etc/os-release 2>/dev/null; echo "cores $(nproc)"; free -g
  echo "== gpu"; nvidia-smi 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv 2>&1
  echo "== tools"
  for t in nvcc g++ gcc c++ cmake ninja python3 ccache curl git dpkg-deb ar setsid timeout flock; do
    printf '%-9s %s\n' "$t" "$(command -v $t || echo MISSING)"
  done
  nvcc --version 2>&1 | tail -2; g++ --version 2>&1 | head -1; cmake --version 2>&1 | head -1
  echo "ninja $(ninja --version 2>&1)"; python3 --version 2>&1
  echo "== llamapp's -dev packages in the image itself (before the carried ones)"
  for h in fmt/core.h spdlog/spdlog.h CLI/CLI.hpp openssl/ssl.h xxhash.h benchmark/benchmark.h; do
    if [ -f "/usr/include/$h" ]; then echo "present  /usr/include/$h"; else echo "absent   /usr/include/$h"; fi
  done
  ldconfig -p 2>/dev/null | grep -E 'libfmt|libspdlog|libssl\.so|libcrypto\.so|libxxhash|libbenchmark' || echo "(no such shared libraries in ldconfig's cache)"
  dpkg-query -W -f='${Package} ${Version}\n' 2>/dev/null | grep -E '^(libfmt|libspdlog|libcli11|libssl|libxxhash|libbenchmark|g\+\+|gcc-[0-9]|libstdc\+\+-)' || true
  echo "== disk"; df -h "$work" 2>&1
} >"$out/env.txt" 2>&1
cp "$out/env.txt" "$logs/env.txt"
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
emit stage=env "gpu=${gpu:-none}" "llamapp_commit=$llamapp_commit" "llama_commit=$llama_commit" \
  "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "threads=$threads"
status env "done" $(($(date +%s) - ts))
publish

# ---- 2. build --------------------------------------------------------------------------------
ts=$(date +%s)
build=$work/build
bin=$build/bin
prefix=$work/prefix
debs=${LLAMAPP_GPU_DEBS:-${carry:+$carry/debs}}
# llamapp is compiled by Debian 12's GCC 12 everywhere else; GCC 13 and 14 dropped some of the
# standard headers that others used to pull in, so the two most often missed come first here
# (no effect on the code generated).
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMAPP_LLAMA_DIR="$llama"
            -DLLAMAPP_BUILD_TESTS=OFF -DLLAMAPP_BUILD_BENCH=ON
            "-DCMAKE_CXX_FLAGS=-include cstdint -include algorithm"
            -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${LLAMAPP_GPU_CUDA_ARCH:-90}")
command -v nvcc >/dev/null && export CUDACXX=${CUDACXX:-$(command -v nvcc)}
if [ -n "$debs" ] && ls "$debs"/*.deb >/dev/null 2>&1; then
  sum=$(cat "$debs"/*.deb | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$prefix.sha256" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$prefix" && mkdir -p "$prefix"
    for f in "$debs"/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$f" "$prefix"
      else  # a .deb is an ar archive holding data.tar.*
        (d=$(mktemp -d) && cd "$d" && ar x "$f" && tar -xf data.tar.* -C "$prefix"; rm -rf "$d")
      fi || { log "cannot unpack $f"; exit 1; }
    done
    echo "$sum" >"$prefix.sha256"
    log "packages: $(find "$debs" -maxdepth 1 -name "*.deb" | wc -l) .deb files unpacked into $prefix"
  fi
  lib=$prefix/usr/lib/x86_64-linux-gnu
  inc=$prefix/usr/include
  # The packages' own CMake files, named one by one (the prefix is not a multiarch system root).
  cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr" -Dfmt_DIR="$lib/cmake/fmt"
               -Dspdlog_DIR="$lib/cmake/spdlog" -Dbenchmark_DIR="$lib/cmake/benchmark"
               -DCLI11_DIR="$prefix/usr/share/cmake/CLI11" -DOPENSSL_ROOT_DIR="$prefix/usr"
               -DOPENSSL_INCLUDE_DIR="$inc" -DOPENSSL_SSL_LIBRARY="$lib/libssl.so"
               -DOPENSSL_CRYPTO_LIBRARY="$lib/libcrypto.so" -DXXHASH_INCLUDE_DIR="$inc"
               -DXXHASH_LIBRARY="$lib/libxxhash.so")
  # openssl/configuration.h lies in the multiarch folder; as system folders (no warnings).
  export C_INCLUDE_PATH=$inc/x86_64-linux-gnu:$inc${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
  export CPLUS_INCLUDE_PATH=$inc/x86_64-linux-gnu:$inc${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
  # No LIBRARY_PATH: CMake would take its folders for the compiler's own and leave them out of
  # the programs' RPATH (seen on the H200 machine: libspdlog.so.1.10 not found).
fi
# shellcheck disable=SC2206
cmake_args+=(${LLAMAPP_CMAKE_ARGS:-})
targets=(llamapp-gen-model llama-bench llamapp-bench llamapp-cli llama-server)

# The generator runs as soon as it is linked, in its own session (it outlives this script if the
# run is cut short, so a second run on the same machine finds the models).
models=$work/models
vocab=$llama/models/ggml-vocab-llama-spm.gguf
m1b=$models/llama-1b-q4_0.gguf
m8b=$models/llama-8b-q4_0.gguf
cat >"$work/gen-models.sh" <<EOF
#!/usr/bin/env bash
# Written by bench/gpu/run.sh: waits for the generator, then makes both models side by side.
echo \$\$ >"$models/gen.pid"
for _ in \$(seq 1 2400); do
  awk -F'\t' '\$4 == "bin/llamapp-gen-model" {f = 1} END {exit !f}' "$build/.ninja_log" 2>/dev/null \
    && [ -x "$bin/llamapp-gen-model" ] && break
  sleep 0.5
done
gen() {  # NAME OUT SHAPE...
  local name=\$1 out=\$2; shift 2
  [ -f "\$out" ] && return 0
  if [ -f "$models/\$name.pid" ] && kill -0 "\$(cat "$models/\$name.pid")" 2>/dev/null; then return 0; fi
  echo \$BASHPID >"$models/\$name.pid"
  rm -f "$models/\$name.failed"
  local s=\$(date +%s)
  "$bin/llamapp-gen-model" --arch llama --type q4_0 --vocab "$vocab" --seed 5 --n-ctx 131072 \\
      --name "llamapp-gpu-\$name" --out "\$out" "\$@" >"$logs/gen-\$name.log" 2>&1 \\
    || touch "$models/\$name.failed"
  echo "seconds \$((\$(date +%s) - s))" >>"$logs/gen-\$name.log"
  rm -f "$models/\$name.pid"
}
gen 1b "$m1b" --n-embd 2048 --n-layer 16 --n-head 32 --n-head-kv 8 --n-ff 8192 &
gen 8b "$m8b" --n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336 &
wait
rm -f "$models/gen.pid"
EOF

if [ ! -f "$build/build.ninja" ] || [ "$(cat "$build/.gpu-settings" 2>/dev/null)" != "${cmake_args[*]}" ]; then
  log "configure: cmake ${cmake_args[*]}"
  timeout $(($(left) - 60)) cmake -S "$src" -B "$build" "${cmake_args[@]}" >"$logs/configure.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    tail -n 40 "$logs/configure.log" >&2
    status build failed $(($(date +%s) - ts)) "configure failed (rc $rc): $(grep -m1 -E 'Error|error' "$logs/configure.log" | cut -c1-300)"
    exit 1
  fi
  printf '%s' "${cmake_args[*]}" >"$build/.gpu-settings"
  log "configured in $(($(date +%s) - ts)) s"
fi
if [ "${LLAMAPP_GPU_DRY:-0}" = 1 ]; then
  status build "configured only" $(($(date +%s) - ts)) "LLAMAPP_GPU_DRY=1"
  exit 0
fi
if [ ! -f "$m1b" ] || [ ! -f "$m8b" ]; then
  if [ -f "$models/gen.pid" ] && kill -0 "$(cat "$models/gen.pid")" 2>/dev/null; then
    log "models: the generator of an earlier run is still at work"
  elif command -v setsid >/dev/null; then
    setsid nohup bash "$work/gen-models.sh" >>"$logs/gen.log" 2>&1 </dev/null &
  else
    nohup bash "$work/gen-models.sh" >>"$logs/gen.log" 2>&1 </dev/null &
  fi
fi
tb=$(date +%s)
log "build: ${targets[*]} with $jobs jobs"
# The generator first, alone: its ggml-cuda is most of the build, and the 8B model takes the
# single-threaded generator about 190 s on that machine, so every second it starts earlier counts.
# Then the rest (llamapp's and llama-server's C++), while the generator runs.
timeout $(($(left) - 45)) cmake --build "$build" --parallel "$jobs" --target llamapp-gen-model -- -k 0 \
  >"$logs/build.log" 2>&1
log "build: the generator is linked after $(($(date +%s) - tb)) s"
timeout $(($(left) - 45)) cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" -- -k 0 \
  >>"$logs/build.log" 2>&1
rc=$?
build_s=$(($(date +%s) - tb))
missing=()
for b in llamapp-gen-model llama-bench llamapp-bench llamapp llama-server; do
  [ -x "$bin/$b" ] || missing+=("$b")
done
steps=$(grep -c . "$build/.ninja_log" 2>/dev/null || echo 0)
cp "$build/.ninja_log" "$logs/ninja_log.txt" 2>/dev/null  # per-file compile times
{ echo "== ldd"; for b in llamapp llama-server; do [ -x "$bin/$b" ] && ldd "$bin/$b"; done; } >>"$logs/env.txt" 2>&1
notfound=$(for b in "$bin"/*; do [ -x "$b" ] && ldd "$b" 2>/dev/null | grep 'not found'; done | sort -u | tr '\n' ' ')
# The build tree's RPATH names the prefix's libraries; only if that failed, the loader is told.
if [ -n "$notfound" ] && [ -n "${lib:-}" ]; then
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  log "unresolved libraries ($notfound): LD_LIBRARY_PATH=$lib from here on"
fi
emit stage=build "seconds=$build_s" "rc=$rc" "jobs=$jobs" "ninja_log_lines=$steps" \
  "missing=$(printf '%s ' "${missing[@]}")" "unresolved=$notfound"
if [ ${#missing[@]} -gt 0 ] || [ "$rc" -ne 0 ]; then
  grep -m5 -E 'error|Error' "$logs/build.log" >&2
  status build "partial" $(($(date +%s) - ts)) "rc $rc after ${build_s}s; missing: ${missing[*]:-none (any present may be from an earlier build)}; $(grep -m1 -E 'error' "$logs/build.log" | cut -c1-300)"
else
  status build "done" $(($(date +%s) - ts)) "build ${build_s}s, $jobs jobs${notfound:+; unresolved libraries: $notfound}"
fi
publish

# wait_model NAME PATH: until the generator has written it (or failed, or time is short)
wait_model() {
  local name=$1 path=$2
  while [ ! -f "$path" ]; do
    [ -f "$models/$name.failed" ] && return 1
    [ "$(left)" -lt 40 ] && return 1
    # neither the generator script nor this model's generator alive: it will not come
    if ! { [ -f "$models/gen.pid" ] && kill -0 "$(cat "$models/gen.pid")" 2>/dev/null; } \
       && ! { [ -f "$models/$name.pid" ] && kill -0 "$(cat "$models/$name.pid")" 2>/dev/null; }; then
      sleep 1
      [ -f "$path" ]
      return
    fi
    sleep 2
  done
}
done_marker() { echo "$work/state/$1.done"; }
# rounds_that_fit PER_ROUND MAX RESERVE: how many rounds fit in the time left minus RESERVE
rounds_that_fit() {
  local n=$((($(left) - $3) / $1))
  [ "$n" -gt "$2" ] && n=$2
  echo "$n"
}
model_of() { case "$1" in 1b) echo "$m1b" ;; 8b) echo "$m8b" ;; esac; }

stage_single() {  # TAG PER_ROUND
  local tag=$1 per=$2 model rounds s
  s=$(date +%s)
  model=$(model_of "$tag")
  wait_model "$tag" "$model" || { status "single-$tag" skipped $(($(date +%s) - s)) "model $tag not generated (see gen-$tag.log)"; return; }
  rounds=$(rounds_that_fit "$per" 3 10)
  [ "$rounds" -ge 1 ] || { status "single-$tag" skipped 0 "$(left) s left, a round needs ~$per"; return; }
  log "single-$tag: $rounds round(s)"
  local json
  json=$(timeout $(($(left) - 5)) "$bin/llamapp-bench" -m "$model" --llama-bench "$bin/llama-bench" \
         -t "$threads" -p 512 -n 128 -r 3 --rounds "$rounds" --json 2>>"$logs/single-$tag.log")
  local rc=$?
  if [ $rc -ne 0 ] || [ -z "$json" ]; then
    status "single-$tag" failed $(($(date +%s) - s)) "llamapp-bench rc $rc: $(tail -n 2 "$logs/single-$tag.log" | tr '\n' ' ' | cut -c1-300)"
    return
  fi
  emit stage=single "model=$tag" "rounds=$rounds" "bench=$json"
  touch "$(done_marker "single-$tag")"
  status "single-$tag" "done" $(($(date +%s) - s)) "$rounds round(s)"
}

stage_server() {  # TAG PER_ROUND
  local tag=$1 per=$2 model rounds s slog=$logs/server-$1.log
  s=$(date +%s)
  model=$(model_of "$tag")
  wait_model "$tag" "$model" || { status "server-$tag" skipped $(($(date +%s) - s)) "model $tag not generated"; return; }
  rounds=$(rounds_that_fit "$per" 3 5)
  [ "$rounds" -ge 1 ] || { status "server-$tag" skipped 0 "$(left) s left, a round needs ~$per"; return; }
  log "server-$tag: $rounds round(s)"
  local r n srv order line req mem got=0
  for r in $(seq 1 "$rounds"); do
    order="llamapp llama-server"
    [ $((r % 2)) -eq 0 ] && order="llama-server llamapp"
    for srv in $order; do
      [ "$(left)" -gt 20 ] || break 2
      if ! server_start "$srv" "$model" 32768 64 "$slog"; then
        log "server-$tag: $srv did not start (see server-$tag.log)"
        continue
      fi
      # Warm-up, not measured: every batch width once, then one stream.
      timeout 120 python3 "$here/gpu_bench.py" loadgen --port "$port" --clients 64 --requests 1 \
        --max-tokens 16 --seed 999 --loadgen-dir "$src/bench" >>"$slog" 2>&1
      # GPU memory held by the whole machine with this server loaded and warm (MiB)
      mem=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
      for n in 1 16 64; do
        req=$((n >= 64 ? 2 : (n >= 16 ? 4 : 8)))
        line=$(timeout 180 python3 "$here/gpu_bench.py" loadgen --port "$port" --clients "$n" \
               --requests "$req" --max-tokens 128 --seed $((r * 100 + n)) --loadgen-dir "$src/bench" 2>>"$slog")
        if [ -n "$line" ]; then
          emit stage=server "model=$tag" "server=$srv" "round=$r" "result=$line" "gpu_mem_mib=${mem:-null}"
          got=$((got + 1))
          log "  $srv r$r n$n: $line"
        fi
      done
      server_stop
    done
    publish
  done
  if [ "$got" -gt 0 ]; then
    touch "$(done_marker "server-$tag")"
    status "server-$tag" "done" $(($(date +%s) - s)) "$rounds round(s), $got measurements"
  else
    status "server-$tag" failed $(($(date +%s) - s)) "no measurement (see server-$tag.log)"
  fi
}

stage_kv() {  # TAG TOKENS PER_ROUND
  local tag=$1 ntok=$2 per=$3 model rounds s slog=$logs/kv-$1-$2.log name=kv-$1-$(($2 / 1000))k
  s=$(date +%s)
  model=$(model_of "$tag")
  wait_model "$tag" "$model" || { status "$name" skipped $(($(date +%s) - s)) "model $tag not generated"; return; }
  rounds=$(rounds_that_fit "$per" 2 5)
  [ "$rounds" -ge 1 ] || { status "$name" skipped 0 "$(left) s left, a round needs ~$per"; return; }
  log "$name: $rounds round(s)"
  local r dir ctx=$((ntok + 256)) cold restart lscold mib got=0
  post() { timeout 300 python3 "$here/gpu_bench.py" kvpost --port "$port" --tokens "$1" --seed "$2" 2>>"$slog"; }
  for r in $(seq 1 "$rounds"); do
    dir=$work/kv/$tag-$ntok-$r
    rm -rf "$dir" && mkdir -p "$dir"
    cold="" restart="" lscold="" mib=""
    # 1. llamapp, empty store: computed on the GPU, then saved
    if server_start llamapp "$model" "$ctx" 1 "$slog" --cache-disk "$dir"; then
      post 16 7 >>"$slog"                       # warm-up (CUDA, allocator), not measured
      cold=$(post "$ntok" $((ntok + r)))
      sleep 1
      server_stop
    fi
    mib=$(du -sm "$dir" 2>/dev/null | cut -f1)
    # 2. llamapp restarted on the same store: from the disk tier (files in the page cache)
    if server_start llamapp "$model" "$ctx" 1 "$slog" --cache-disk "$dir"; then
      post 16 7 >>"$slog"
      restart=$(post "$ntok" $((ntok + r)))
      server_stop
    fi
    # 3. llama-server, fresh process: computed on the GPU
    if server_start llama-server "$model" "$ctx" 1 "$slog"; then
      post 16 7 >>"$slog"
      lscold=$(post "$ntok" $((ntok + r)))
      server_stop
    fi
    echo "round $r: cold $cold | restart $restart | llama-server $lscold | store ${mib} MiB" >>"$slog"
    emit stage=kvrestart "model=$tag" "prompt_tokens=$ntok" "round=$r" \
      "llamapp_cold_ms=$(jget "$cold" wall_ms)" "llamapp_restart_ms=$(jget "$restart" wall_ms)" \
      "llama_server_cold_ms=$(jget "$lscold" wall_ms)" \
      "restart_cached_tokens=$(jget "$restart" usage.prompt_tokens_details.cached_tokens)" \
      "disk_mib=${mib:-null}" "cold=${cold:-null}" "restart=${restart:-null}" "llama_server=${lscold:-null}"
    [ -n "$cold" ] && [ -n "$restart" ] && got=$((got + 1))
    log "  $name r$r: cold $(jget "$cold" wall_ms) ms, after restart $(jget "$restart" wall_ms) ms (cached $(jget "$restart" usage.prompt_tokens_details.cached_tokens)), llama-server cold $(jget "$lscold" wall_ms) ms, store ${mib} MiB"
    rm -rf "$dir"
    publish
    [ "$(left)" -gt "$per" ] || break
  done
  if [ "$got" -gt 0 ]; then
    touch "$(done_marker "$name")"
    status "$name" "done" $(($(date +%s) - s)) "$got round(s)"
  else
    status "$name" failed $(($(date +%s) - s)) "no measurement (see kv-$tag-$ntok.log)"
  fi
}

# ---- 3-6. measuring stages, in priority order ------------------------------------------------------
need_bins() {
  local b
  for b in "$@"; do [ -x "$bin/$b" ] || return 1; done
}
for st in $stages; do
  if [ -f "$(done_marker "$st")" ] && [ "${LLAMAPP_GPU_REDO:-0}" != 1 ]; then
    log "stage $st: done in an earlier run (its figures are in results.jsonl)"
    continue
  fi
  case "$st" in
    # The second number: seconds per round, as seen on the H200 on 2026-12-04 (plus a margin).
    single-1b) need_bins llamapp-bench llama-bench && stage_single 1b 12 ;;
    single-8b) need_bins llamapp-bench llama-bench && stage_single 8b 12 ;;
    server-1b) need_bins llamapp llama-server && stage_server 1b 36 ;;
    server-8b) need_bins llamapp llama-server && stage_server 8b 66 ;;
    kv-1b-4k) need_bins llamapp llama-server && stage_kv 1b 4000 12 ;;
    kv-1b-32k) need_bins llamapp llama-server && stage_kv 1b 32000 25 ;;
    kv-8b-4k) need_bins llamapp llama-server && stage_kv 8b 4000 25 ;;
    *) log "unknown stage $st" ;;
  esac || status "$st" skipped 0 "binaries missing (build)"
  publish
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$logs/env.txt" 2>&1
publish
log "finished: $(( $(date +%s) - t0 )) s"
cat "$out/summary.md" >&2
