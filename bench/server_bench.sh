#!/usr/bin/env bash
# server_bench.sh: the shim's overhead on the llama-server look-alike
# (examples/llm-server-sim) under a request load. Optional beside
# overhead_bench.sh; needs the llm-server-sim target (libcpp-httplib-dev).
#
#   bash bench/server_bench.sh [REQUESTS=300] [REPETITIONS=3]
#
# Configurations: none (no profiler), retain (libretain.so, defaults: full
# tracking, the default CFI unwinder, HTTP request tagging), retain_sampled
# (RETAIN_SAMPLE=524288). Every repetition starts each configuration once, in
# an order rotated per repetition: the server on a free loopback port
# (--port 0; the port is read from its "listening on" line) with
# SERVER_FLAGS (default: --leak-trie --trie-node-kib 16 --state-mib 4
# --cache-mib 16), WARMUP requests first (default 5, untimed), then REQUESTS
# requests from examples/llm-server-sim/send_requests.py, split over CLIENTS
# concurrent clients (default 4), each on one keep-alive connection
# (256-character prompts), timed; then SIGTERM and a wait for the clean exit
# (the shim writes its exit snapshot then, untimed).
#
# Per configuration: the server's CPU time (user+sys from /proc/PID/stat,
# clock ticks) over the timed requests, per request -- the primary figure:
# what the shim adds to the server's work; the client wall time for the
# REQUESTS and requests/s; ratios of medians to "none"; the server's peak RSS
# (VmHWM) before it is stopped; snapshot bytes. The wall time is bound by
# latency, not CPU: cpp-httplib does not set TCP_NODELAY (its default), so
# each response waits ~40 ms for the client's delayed ACK (Nagle); wall
# ratios near 1.00 say little about the shim's cost.
#
# Environment: RETAIN_BUILD_DIR (default ./build), RETAIN_BENCH_NO_BUILD=1,
# RETAIN_BENCH_SAMPLE (default 524288), SERVER_FLAGS, WARMUP, CLIENTS.
# Exit status 0 when every run served every request, 1 otherwise.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
requests=${1:-300}
reps=${2:-3}
sample=${RETAIN_BENCH_SAMPLE:-524288}
warmup=${WARMUP:-5}
clients=${CLIENTS:-4}
read -r -a server_flags <<<"${SERVER_FLAGS:---leak-trie --trie-node-kib 16 --state-mib 4 --cache-mib 16}"
if [[ ${RETAIN_BENCH_NO_BUILD:-0} != 1 ]]; then
  cmake --build "$build" --target retain llm-server-sim -j"$(nproc)" >/dev/null
fi
server="$build/bin/llm-server-sim"
shim="$build/libretain.so"
send="$repo/examples/llm-server-sim/send_requests.py"
for f in "$server" "$shim"; do
  [[ -f "$f" ]] || { echo "server_bench.sh: $f is missing (llm-server-sim needs libcpp-httplib-dev)" >&2; exit 1; }
done
tck=$(getconf CLK_TCK)

source "$(dirname "${BASH_SOURCE[0]}")/server_common.sh"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run_one() {  # config rep -> appends a line to results.tsv
  local c=$1 r=$2 out="$dir/$1.$2" port="" env_args=()
  mkdir -p "$out/data"
  case $c in
    none) env_args=() ;;
    retain) env_args=(LD_PRELOAD="$shim" RETAIN_DIR="$out/data" RETAIN_SIGNAL=none) ;;
    retain_sampled) env_args=(LD_PRELOAD="$shim" RETAIN_DIR="$out/data" RETAIN_SIGNAL=none RETAIN_SAMPLE="$sample") ;;
  esac
  env "${env_args[@]}" "$server" --port 0 "${server_flags[@]}" >"$out/server.out" 2>"$out/server.log" &
  server_pid=$!
  for _ in $(seq 300); do  # 30 s at most
    port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$out/server.out")
    [[ -n "$port" ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  local status=ok wall=nan ticks=nan rss=0
  if [[ -z "$port" ]]; then
    status="no-listen"
  elif ! python3 "$send" --port "$port" --count "$warmup" --id-prefix warm >/dev/null; then
    status="warmup-failed"
  else
    local t0 c0 t1 c1
    c0=$(cpu_ticks "$server_pid")
    t0=$(date +%s.%N)
    local pids=() k
    for k in $(seq "$clients"); do
      python3 "$send" --port "$port" --count "$(((requests + clients - k) / clients))" --id-prefix "c$k-req" \
        >"$out/client.$k.out" &
      pids+=($!)
    done
    for k in "${pids[@]}"; do wait "$k" || status="requests-failed"; done
    t1=$(date +%s.%N)
    c1=$(cpu_ticks "$server_pid")
    wall=$(echo "$t1 - $t0" | bc)
    ticks=$((c1 - c0))
    rss=$(awk '/^VmHWM/ {print $2}' "/proc/$server_pid/status")
  fi
  kill -TERM "$server_pid" 2>/dev/null || true
  local exit_status=0
  wait "$server_pid" || exit_status=$?
  server_pid=
  ((exit_status == 0)) || status="$status,exit-$exit_status"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$r" "$wall" "$ticks" "$rss" \
    "$(du -sb "$out/data" | cut -f1)" "$status" >>"$dir/results.tsv"
  echo "rep $r $c: wall $wall s, server CPU $ticks ticks, VmHWM $rss kB, $status" >&2
}

configs=(none retain retain_sampled)
n=${#configs[@]}
: >"$dir/loads"
for r in $(seq "$reps"); do
  for i in $(seq 0 $((n - 1))); do
    cut -d' ' -f1 /proc/loadavg >>"$dir/loads"
    run_one "${configs[$(((i + r - 1) % n))]}" "$r"
  done
done

status=0
python3 - "$dir" "$requests" "$tck" "$sample" "${server_flags[*]}" "$warmup" "$clients" <<'EOF' || status=$?
import statistics, sys
d, requests, tck, sample, flags, warmup, clients = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
rows = {}
for line in open(f"{d}/results.tsv"):
    c, r, wall, ticks, rss, size, status = line.rstrip("\n").split("\t")
    rows.setdefault(c, []).append(dict(wall=float(wall), cpu=float(ticks) / tck, rss=int(rss),
                                       size=int(size), status=status))
loads = [float(x) for x in open(f"{d}/loads").read().split()]
med = statistics.median
print(f"llm-server-sim {flags}; {warmup} warm-up requests, then {requests} timed requests "
      f"(send_requests.py, {clients} concurrent keep-alive connections, 256-character prompts)")
print(f"load average (1 min) before each run: {min(loads):.2f}–{max(loads):.2f}; "
      f"{len(rows['none'])} repetitions, order rotated per repetition")
print()
print("| configuration | server CPU ms/request, median (min–max) | server CPU × | client wall s, median (min–max) "
      "| requests/s | wall × | server VmHWM MB | snapshots |")
print("|---|---|---|---|---|---|---|---|")
labels = {"none": "no profiler", "retain": "retain full (CFI walker, HTTP tagging)",
          "retain_sampled": f"retain sampled `RETAIN_SAMPLE={sample}`"}
failed = False
for c, label in labels.items():
    runs = rows.get(c, [])
    bad = [x["status"] for x in runs if x["status"] != "ok"]
    failed |= bool(bad)
    good = [x for x in runs if x["status"] == "ok"]
    if not good:
        print(f"| {label} | failed: {', '.join(bad)} | | | | | | |")
        continue
    w = [x["wall"] for x in good]
    cpu = [x["cpu"] * 1000 / requests for x in good]
    base = [x for x in rows["none"] if x["status"] == "ok"]
    rw = med(w) / med([x["wall"] for x in base]) if base else float("nan")
    bc = med([x["cpu"] * 1000 / requests for x in base]) if base else float("nan")
    rc = med(cpu) / bc if bc else float("nan")
    size = "–" if c == "none" else f"{med([x['size'] for x in good]) / 1e3:.0f} KB"
    note = f" ({', '.join(bad)})" if bad else ""
    print(f"| {label} | {med(cpu):.2f} ({min(cpu):.2f}–{max(cpu):.2f}){note} | **{rc:.2f}** "
          f"| {med(w):.2f} ({min(w):.2f}–{max(w):.2f}) | {requests / med(w):.0f} | {rw:.2f} "
          f"| {med([x['rss'] for x in good]) / 1024:.1f} | {size} |")
sys.exit(1 if failed else 0)
EOF
echo
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); nproc $(nproc); checkout $(git -C "$repo" rev-parse --short HEAD); last commit touching shim/: $(git -C "$repo" log -1 --format='%h (%cs)' -- shim)"
exit $status
