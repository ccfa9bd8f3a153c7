#!/usr/bin/env bash
# diff_bench.sh: times retain-diff on two snapshots of one process holding
# about 1M live allocations (issue: under 3 s with symbolization).
#
#   bash bench/diff_bench.sh [ALLOCATIONS] [REPETITIONS]
#
# Prints the snapshot sizes, the shim's write time, and the median
# wall-clock time of `retain-diff before.pb after.pb` over the repetitions.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
count=${1:-1000000}
reps=${2:-5}
cmake --build "$build" --target retain retain-diff bench_diff_workload -j"$(nproc)" >/dev/null
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$(date +%s.%N)
LD_PRELOAD="$build/libretain.so" RETAIN_DIR="$dir" RETAIN_SIGNAL=none \
  "$build/bench/bench_diff_workload" "$count"
end=$(date +%s.%N)
before=$(ls "$dir"/bench_diff_workload.*.1.pb)
after=$(ls "$dir"/bench_diff_workload.*.2.pb)
echo "workload under the shim: $(echo "$end - $start" | bc) s"
echo "snapshot sizes: $(stat -c %s "$before") and $(stat -c %s "$after") bytes" \
     "($(echo "scale=1; $(stat -c %s "$after") / ($count * 21 / 20)" | bc) bytes per allocation)"
times=()
for _ in $(seq "$reps"); do
  s=$(date +%s.%N)
  "$build/bin/retain-diff" "$before" "$after" > "$dir/out.txt"
  e=$(date +%s.%N)
  times+=("$(echo "$e - $s" | bc)")
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "retain-diff before after: median ${median} s over $reps runs (${times[*]})"
head -20 "$dir/out.txt"
