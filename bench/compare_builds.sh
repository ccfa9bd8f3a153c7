#!/usr/bin/env bash
# compare_builds.sh: which of two libretain.so builds adds less CPU time per
# allocation call, to within a few nanoseconds, on this noisy machine.
#
#   bash bench/compare_builds.sh A.so B.so [PAIRS=60] [OPERATIONS_PER_THREAD=1000000] [WORKLOAD ARGS...]
#
# Runs bench_alloc_workload (default arguments "8 small": the low-work
# workload) under A, then under B, PAIRS times, flipping the order every
# pair, and times each run's CPU (user + system, /usr/bin/time). Short runs
# side by side see the same machine speed, which moves within seconds here;
# the bench's rotations with heaptrack between them do not (bench/README.md,
# sixth round). Prints the medians, the median and mean of the paired
# differences (B - A) in ns per allocation call, and how many pairs B won.
# Two runs of one comparison that disagree in sign mean: no difference this
# machine can see.
#
# Either build may be the word `none`: the workload without the shim, so
# `compare_builds.sh none build/libretain.so` gives what the shim adds per
# allocation call as the median of paired runs (issue 17's measure).
#
# Environment: RETAIN_BUILD_DIR (default ./build; the workload is taken from
# there), COMPARE_ENV (extra VAR=value words for both runs, e.g.
# "RETAIN_SAMPLE=524288").
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
if (($# < 2)); then
  echo "usage: $0 A.so B.so [PAIRS=60] [OPERATIONS_PER_THREAD=1000000] [WORKLOAD ARGS...]" >&2
  exit 2
fi
resolve() { if [[ $1 == none ]]; then echo none; else realpath "$1"; fi; }
a=$(resolve "$1")
b=$(resolve "$2")
pairs=${3:-60}
ops=${4:-1000000}
shift $(($# < 4 ? $# : 4))
workload_args=("$@")
((${#workload_args[@]} > 0)) || workload_args=(8 small)
program=$build/bench/bench_alloc_workload
for file in "$a" "$b" "$program"; do
  [[ $file == none || -f $file ]] || { echo "$0: $file: not found" >&2; exit 2; }
done
[[ $pairs =~ ^[1-9][0-9]*$ && $ops =~ ^[1-9][0-9]*$ ]] || {
  echo "$0: PAIRS and OPERATIONS_PER_THREAD must be positive integers" >&2
  exit 2
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r -a extra_env <<<"${COMPARE_ENV:-}"
for ((i = 0; i < pairs; ++i)); do
  order=(A B)
  ((i % 2 == 0)) || order=(B A)
  for which in "${order[@]}"; do
    shim=$a
    [[ $which == B ]] && shim=$b
    preload=(LD_PRELOAD="$shim")
    [[ $shim == none ]] && preload=()
    rm -rf "$work/out" && mkdir "$work/out"
    /usr/bin/time -o "$work/time" -f "%U %S" env "${extra_env[@]}" "${preload[@]}" \
      RETAIN_DIR="$work/out" RETAIN_SIGNAL=none "$program" "$ops" "${workload_args[@]}" \
      >"$work/stdout"
    echo "$i $which $(cat "$work/time")" >>"$work/times"
  done
  printf '.' >&2
done
echo >&2
calls=$(awk '$1 == "allocation_calls" {print $2}' "$work/stdout")
python3 - "$work/times" "$calls" "$a" "$b" <<'EOF'
import statistics, sys
path, calls, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cpu = {"A": {}, "B": {}}
for line in open(path):
    pair, which, user, system = line.split()
    cpu[which][int(pair)] = float(user) + float(system)
diffs = [(cpu["B"][i] - cpu["A"][i]) * 1e9 / calls for i in cpu["A"]]
print(f"A {a}: CPU median {statistics.median(cpu['A'].values()):.3f} s")
print(f"B {b}: CPU median {statistics.median(cpu['B'].values()):.3f} s")
print(f"{len(diffs)} pairs of {calls:,} allocation calls: B - A per call: "
      f"median {statistics.median(diffs):+.1f} ns, mean {statistics.mean(diffs):+.1f} ns; "
      f"B faster in {sum(d < 0 for d in diffs)} of {len(diffs)}")
EOF
