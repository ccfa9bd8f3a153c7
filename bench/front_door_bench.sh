#!/usr/bin/env bash
# front_door_bench.sh: what the front door (RETAIN_FRONT_DOOR) adds to a
# request's latency, on the llama-server look-alike (examples/llm-server-sim)
# and on raw_http_server (tests/fixtures/raw_http_server.c: sockets through
# raw system calls, each response written at once).
#
#   bash bench/front_door_bench.sh [REQUESTS=2000] [REPETITIONS=3]
#
# The server runs under libretain.so with RETAIN_FRONT_DOOR=DOOR:PORT (and
# RETAIN_HTTP=off, so only the front door tags, as for a server that bypasses
# libc). bench_latency_client (bench/latency_client.cc) sends REQUESTS
# requests one at a time, timed from the request's first byte to its
# response's last, to PORT (direct) and to DOOR (through the front door),
# each on one kept-alive connection and with a new connection per request;
# GET /health (the relay's own cost: the server does nearly nothing) on
# both servers, and POST /completion (a 256-character prompt: the
# look-alike's inference, under the shim). The same process serves both
# ports, so the difference is the relay's. A row without the shim (direct,
# no LD_PRELOAD) is the reference. Every repetition starts the servers anew;
# the table shows the median of the repetitions' medians and p99s (µs).
#
# The look-alike's keep-alive figures are ~40 ms whoever relays: cpp-httplib
# writes a response in two pieces without TCP_NODELAY, and the second waits
# for the ACK of the first, which the receiving side delays (Nagle and
# delayed ACK; bench/server_bench.sh says the same). raw_http_server's
# figures show what the relay itself costs.
#
# Environment: RETAIN_BUILD_DIR (default ./build), RETAIN_BENCH_NO_BUILD=1,
# SERVER_FLAGS (default: --cache-mib 0 --state-mib 1 --http-threads 4).
# Exit status 0 when every request was answered 200, 1 otherwise.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
requests=${1:-2000}
reps=${2:-3}
read -r -a server_flags <<<"${SERVER_FLAGS:---cache-mib 0 --state-mib 1 --http-threads 4}"
if [[ ${RETAIN_BENCH_NO_BUILD:-0} != 1 ]]; then
  cmake --build "$build" --target retain llm-server-sim raw_http_server bench_latency_client \
    -j"$(nproc)" >/dev/null
fi
sim="$build/bin/llm-server-sim"
raw="$build/tests/fixtures/raw_http_server"
shim="$build/libretain.so"
client="$build/bench/bench_latency_client"
for f in "$sim" "$raw" "$shim" "$client"; do
  [[ -f "$f" ]] || { echo "front_door_bench.sh: $f is missing" >&2; exit 1; }
done

source "$(dirname "${BASH_SOURCE[0]}")/server_common.sh"

status=0

# start_server sim|raw shim|none -> sets port, door, server_pid
start_server() {
  port=$(free_port)
  door=$(free_port)
  local env_args=() command=("$sim" --port "$port" "${server_flags[@]}")
  [[ $1 == raw ]] && command=("$raw" "$port")
  if [[ $2 == shim ]]; then
    mkdir -p "$dir/data"
    env_args=(LD_PRELOAD="$shim" RETAIN_DIR="$dir/data" RETAIN_SIGNAL=none RETAIN_HTTP=off
      RETAIN_FRONT_DOOR="$door:$port")
  fi
  env "${env_args[@]}" "${command[@]}" >"$dir/server.out" 2>"$dir/server.log" &
  server_pid=$!
  for _ in $(seq 300); do
    grep -q '^listening on' "$dir/server.out" && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "front_door_bench.sh: the server did not start" >&2
  cat "$dir/server.log" >&2
  exit 1
}

stop_server() {
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" || true
  server_pid=
  rm -rf "$dir/data"
}

measure() {  # label target_port path-args... -> a line in results
  local label=$1 to=$2
  shift 2
  local line
  if ! line=$("$client" --port "$to" --requests "$requests" "$@"); then status=1; fi
  echo "$label $line" >>"$dir/results"
  echo "$label $line" >&2
}

: >"$dir/results"
for r in $(seq "$reps"); do
  for shape in keepalive newconn; do
    flags=()
    [[ $shape == newconn ]] && flags=(--new-connection)
    completion=("${flags[@]}" --method POST --path /completion --body "$body")
    start_server raw none
    measure "raw/none/direct/health/$shape" "$port" "${flags[@]}" --path /health
    stop_server
    start_server raw shim
    measure "raw/shim/direct/health/$shape" "$port" "${flags[@]}" --path /health
    measure "raw/shim/door/health/$shape" "$door" "${flags[@]}" --path /health
    stop_server
    start_server sim none
    measure "sim/none/direct/health/$shape" "$port" "${flags[@]}" --path /health
    measure "sim/none/direct/completion/$shape" "$port" "${completion[@]}"
    stop_server
    start_server sim shim
    measure "sim/shim/direct/health/$shape" "$port" "${flags[@]}" --path /health
    measure "sim/shim/door/health/$shape" "$door" "${flags[@]}" --path /health
    measure "sim/shim/direct/completion/$shape" "$port" "${completion[@]}"
    measure "sim/shim/door/completion/$shape" "$door" "${completion[@]}"
    stop_server
  done
done

python3 - "$dir/results" "$requests" "$reps" "${server_flags[*]}" <<'EOF'
import statistics, sys
path, requests, reps, flags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = {}
for line in open(path):
    parts = line.split()
    values = dict(zip(parts[1::2], parts[2::2]))
    rows.setdefault(parts[0], []).append((float(values["median_us"]), float(values["p99_us"])))
med = statistics.median
print(f"llm-server-sim {flags}; {requests} timed requests one at a time (after 100 untimed), "
      f"{reps} repetitions; µs from the request's first byte to the response's last")
print()
print("| server | request | client | shim | direct median | door median | added | direct p99 | door p99 | added |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
for server, server_name, paths in (("raw", "raw_http_server", ("health",)),
                                   ("sim", "llm-server-sim", ("health", "completion"))):
    for path_name in paths:
        for shape, shape_name in (("keepalive", "keep-alive"), ("newconn", "new connection")):
            ref = rows[f"{server}/none/direct/{path_name}/{shape}"]
            direct = rows[f"{server}/shim/direct/{path_name}/{shape}"]
            door = rows[f"{server}/shim/door/{path_name}/{shape}"]
            dm, dp = med(x[0] for x in direct), med(x[1] for x in direct)
            fm, fp = med(x[0] for x in door), med(x[1] for x in door)
            rm, rp = med(x[0] for x in ref), med(x[1] for x in ref)
            name = "GET /health" if path_name == "health" else "POST /completion"
            print(f"| {server_name} | {name} | {shape_name} | no | {rm:.0f} | – | – | {rp:.0f} | – | – |")
            print(f"| {server_name} | {name} | {shape_name} | yes | {dm:.0f} | {fm:.0f} | "
                  f"{fm - dm:+.0f} | {dp:.0f} | {fp:.0f} | {fp - dp:+.0f} |")
EOF
exit "$status"
