# Sourced by the server benchmarks: builds what they need and starts/stops one server at a time.
# The caller sets root and threads (and may set port, the last port used) before sourcing;
# results names the file whose .log gets llamapp's stderr.
#   server_start NAME CTX SLOTS [EXTRA_ARGS...]   NAME is llamapp or llama-server
#   server_stop
"$root/scripts/setup.sh"
build=${LLAMAPP_BUILD_DIR:-$root/build}
cmake --build "$build" --target llamapp-cli bench-model llama-server >&2
model=${BENCH_MODEL:-$build/models/bench-125m-q4_0.gguf}  # BENCH_MODEL (set, non-empty): another
port=${port:-18300}
pid=""
results=$(mktemp)

server_start() {
  local name=$1 ctx=$2 slots=$3
  shift 3
  port=$((port + 1))  # a fresh port each time: no wait for the previous listener's sockets
  if [ "$name" = llamapp ]; then
    "$build/bin/llamapp" serve -m "$model" -t "$threads" -c "$ctx" --parallel "$slots" \
      --port "$port" --log-level none "$@" 2>>"$results.log" &
  else
    "$build/bin/llama-server" -m "$model" -t "$threads" -c "$ctx" -np "$slots" \
      --port "$port" --no-webui "$@" >/dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$name did not start" >&2
  exit 1
}

server_stop() {
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}
