#!/usr/bin/env bash
# trend_bench.sh: a long trend (issue 13: 1,000 snapshots with rules within
# 30 s, memory that does not grow with the number of snapshots).
#
#   bash bench/trend_bench.sh [REQUESTS]
#
# Runs the llama-server look-alike under the shim with a snapshot after every
# request (prompt cache and leaking trie on), sends REQUESTS (default 1000)
# on one keep-alive connection, then times
# `retain-diff --trend --by category --rules share/rules/llama-server.textproto`
# over the whole series, and over its first half, then once more over the
# whole series with --html (issue 16: the page under 8 MiB, no added cost),
# and prints each run's wall time and peak RSS (GNU time): the peak should
# not double with the series.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
requests=${1:-1000}
cmake --build "$build" --target retain retain-diff llm-server-sim -j"$(nproc)" >/dev/null
dir=$(mktemp -d)
server_pid=
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
LD_PRELOAD="$build/libretain.so" RETAIN_DIR="$dir" RETAIN_SNAPSHOT_EVERY=1 \
  "$build/bin/llm-server-sim" --port 0 --leak-trie --trie-node-kib 4 --state-mib 1 \
  --cache-mib 8 > "$dir/server.out" 2> "$dir/server.err" &
server_pid=$!
for _ in $(seq 100); do
  grep -q 'listening on' "$dir/server.out" 2>/dev/null && break
  sleep 0.1
done
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$dir/server.out")
python3 "$repo/examples/llm-server-sim/send_requests.py" --port "$port" --count "$requests" \
  > /dev/null
kill -TERM "$server_pid"
wait "$server_pid" || true
server_pid=
# In sequence order, without the last one (the exit snapshot).
mapfile -t series < <(ls "$dir"/llm-server-sim.*.pb | sort -V | head -n -1)
echo "snapshots: ${#series[@]}, $(du -sh "$dir" | cut -f1) in all"
run() {
  local label=$1
  shift
  /usr/bin/time -f "%e %M" -o "$dir/time.txt" "$build/bin/retain-diff" --trend --by category \
    --rules "$repo/share/rules/llama-server.textproto" "$@" > "$dir/out.txt"
  read -r seconds kib < "$dir/time.txt"
  echo "$label: ${seconds} s, peak RSS $((kib / 1024)) MiB"
}
half=$(( ${#series[@]} / 2 ))
run "trend over ${half} snapshots" "${series[@]:0:$half}"
run "trend over ${#series[@]} snapshots" "${series[@]}"
head -12 "$dir/out.txt"
run "trend over ${#series[@]} snapshots with --html" --html "$dir/trend.html" "${series[@]}"
echo "page: $(stat -c %s "$dir/trend.html") bytes"
