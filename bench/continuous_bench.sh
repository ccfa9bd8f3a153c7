#!/usr/bin/env bash
# continuous_bench.sh: what continuous mode (RETAIN_SNAPSHOT_INTERVAL with
# RETAIN_KEEP) costs a server over a long-ish run: request latency, and the
# shim's own memory, the server's RSS and the disk over time.
#
#   bash bench/continuous_bench.sh [DURATION_S=60] [BATCH=500]
#
# The llama-server look-alike (examples/llm-server-sim, SERVER_FLAGS,
# default --cache-mib 16 --state-mib 1 --http-threads 4: a bounded cache, no
# leak, so every figure should stay flat) runs DURATION_S seconds per
# configuration, serving POST /completion (a 256-character prompt) from
# bench_latency_client (bench/latency_client.cc), one request at a time on a
# new connection each (keep-alive figures are ~44 ms of Nagle and delayed
# ACK whatever the shim does: bench/README.md), in batches of BATCH. After
# each batch: the shim's arena bytes (GET /stats on RETAIN_CONTROL), the
# server's VmRSS, the snapshot files present and their bytes.
#
# Configurations: none (no shim); retain (the shim, no interval: the
# reference for the interval's cost); interval-1s (RETAIN_SNAPSHOT_INTERVAL=1s
# RETAIN_KEEP=10); sampled-1s (the same with RETAIN_SAMPLE=512KiB);
# interval-200ms (RETAIN_SNAPSHOT_INTERVAL=200ms RETAIN_KEEP=10: a snapshot
# during most batches).
#
# Per configuration: requests served per second (the client's requests
# over DURATION_S, which includes the bookkeeping between batches), the median of the batches' median
# latencies, the median and the worst of their p99s, the largest single
# request; the arena after the first batch, at each quarter of the run and at
# the end; VmRSS after the first batch and at the end; snapshots
# written (the newest sequence number), the median time to write one (the
# shim's RETAIN_LOG lines), files kept and their bytes at the end.
#
# Environment: RETAIN_BUILD_DIR (default ./build), RETAIN_BENCH_NO_BUILD=1,
# SERVER_FLAGS, CONFIGS (the configurations to run, by name, space-separated). Exit status 0 when every request was answered 200.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
duration=${1:-60}
batch=${2:-500}
read -r -a server_flags <<<"${SERVER_FLAGS:---cache-mib 16 --state-mib 1 --http-threads 4}"
if [[ ${RETAIN_BENCH_NO_BUILD:-0} != 1 ]]; then
  cmake --build "$build" --target retain llm-server-sim bench_latency_client -j2 >/dev/null
fi
sim="$build/bin/llm-server-sim"
shim="$build/libretain.so"
client="$build/bench/bench_latency_client"
for f in "$sim" "$shim" "$client"; do
  [[ -f "$f" ]] || { echo "continuous_bench.sh: $f is missing" >&2; exit 1; }
done

source "$(dirname "${BASH_SOURCE[0]}")/server_common.sh"
status=0
: >"$dir/results"

run_config() {  # name env-assignments...
  local name=$1
  shift
  local port control
  port=$(free_port)
  control=$(free_port)
  rm -rf "$dir/data" && mkdir -p "$dir/data"
  local env_args=()
  if [[ $name != none ]]; then
    rm -f "$dir/shim.log"
    env_args=(LD_PRELOAD="$shim" RETAIN_DIR="$dir/data" RETAIN_CONTROL="tcp:127.0.0.1:$control"
      RETAIN_LOG="$dir/shim.log" "$@")
  fi
  env "${env_args[@]}" "$sim" --port "$port" "${server_flags[@]}" >"$dir/server.out" 2>"$dir/server.log" &
  server_pid=$!
  for _ in $(seq 300); do
    grep -q '^listening on' "$dir/server.out" && break
    sleep 0.1
  done
  local end=$((SECONDS + duration)) b=0
  while ((SECONDS < end)); do
    b=$((b + 1))
    local line arena=0 rss files bytes newest
    if ! line=$("$client" --port "$port" --requests "$batch" --warmup 0 --new-connection \
      --method POST --path /completion --body "$body"); then status=1; fi
    if [[ $name != none ]]; then
      # curl, not python3: its start-up (over a second on a loaded machine) would be
      # counted against the configuration's requests per second.
      arena=$(curl -s "http://127.0.0.1:$control/stats" | grep -o '"arena_bytes":[0-9]*' | cut -d: -f2)
    fi
    rss=$(awk '/^VmRSS/ {print $2 * 1024}' "/proc/$server_pid/status")
    # The shim deletes old snapshots (RETAIN_KEEP) while find lists them: one
    # listing, its vanished files ignored.
    find "$dir/data" -name '*.pb' -printf '%f %s\n' 2>/dev/null >"$dir/listing" || true
    files=$(wc -l <"$dir/listing")
    bytes=$(awk '{s += $2} END {print s + 0}' "$dir/listing")
    newest=$(awk '{n = split($1, p, "."); if (p[n-1] + 0 > m) m = p[n-1] + 0} END {print m + 0}' "$dir/listing")
    echo "$name batch $b $line arena $arena rss $rss files $files bytes $bytes newest $newest" >>"$dir/results"
  done
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" || true
  server_pid=
  # The shim's "wrote PATH in N us" lines: each snapshot's writing time.
  local writes=0
  [[ -f $dir/shim.log ]] && writes=$(grep -o 'in [0-9]* us' "$dir/shim.log" | awk '{print $2}' |
    sort -n | awk '{v[NR] = $1} END {print (NR ? v[int((NR + 1) / 2)] : 0)}')
  echo "$name write_median_us $writes" >>"$dir/writes"
  tail -1 "$dir/results" >&2
}

configs=${CONFIGS:-none retain interval-1s sampled-1s interval-200ms}
for config in $configs; do
  case $config in
    none) run_config none ;;
    retain) run_config retain RETAIN_SIGNAL=none ;;
    interval-1s) run_config interval-1s RETAIN_SNAPSHOT_INTERVAL=1s RETAIN_KEEP=10 ;;
    sampled-1s) run_config sampled-1s RETAIN_SNAPSHOT_INTERVAL=1s RETAIN_KEEP=10 RETAIN_SAMPLE=512KiB ;;
    interval-200ms) run_config interval-200ms RETAIN_SNAPSHOT_INTERVAL=200ms RETAIN_KEEP=10 ;;
    *) echo "continuous_bench.sh: unknown configuration $config" >&2; exit 2 ;;
  esac
done

python3 - "$dir/results" "$duration" "$batch" "${server_flags[*]}" "$dir/writes" <<'PY'
import statistics, sys
path, duration, batch, flags, writes_path = sys.argv[1:6]
writes = dict(line.split()[0::2] for line in open(writes_path))
configs = {}
for line in open(path):
    parts = line.split()
    name = parts[0]
    values = dict(zip(parts[1::2], parts[2::2]))
    configs.setdefault(name, []).append({k: float(v) for k, v in values.items()})
print(f"continuous_bench.sh: {duration} s per configuration, batches of {batch}, server flags: {flags}")
print("| configuration | requests/s | median µs | p99 µs (median / worst batch) | max µs | arena at 0, ¼, ½, ¾, end | VmRSS first → last | snapshots written | write µs (median) | files kept | bytes kept |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
mib = lambda b: f"{b / 1048576:.1f} MiB"
def quarters(rows, key):
    return ", ".join(f"{rows[min(len(rows) - 1, q * len(rows) // 4)][key] / 1048576:.1f}"
                     for q in range(5)) + " MiB"
for name, rows in configs.items():
    requests = sum(r["requests"] for r in rows) / float(duration)
    median = statistics.median(r["median_us"] for r in rows)
    p99s = [r["p99_us"] for r in rows]
    print(f"| {name} | {requests:.0f} | {median:.0f} | {statistics.median(p99s):.0f} / {max(p99s):.0f} | "
          f"{max(r['max_us'] for r in rows):.0f} | {quarters(rows, 'arena')} | "
          f"{mib(rows[0]['rss'])} → {mib(rows[-1]['rss'])} | {rows[-1]['newest']:.0f} | "
          f"{writes.get(name, '0') if rows[-1]['newest'] else '–'} | "
          f"{rows[-1]['files']:.0f} | {rows[-1]['bytes'] / 1024:.0f} KiB |")
PY
exit $status
