#!/usr/bin/env bash
# free_cost_bench.sh: what the shim adds to a free, timed apart from the
# allocations (bench/free_cost.cc), in paired repetitions.
#
#   bash bench/free_cost_bench.sh [REPETITIONS=7] [ROUNDS=2000] [LIVE=4096]
#
# Each repetition runs bench_free_cost once without a profiler, once under
# libretain.so (full tracking) and, with RETAIN_BENCH_BASELINE_SHIM set, once
# under that other libretain.so, in an order rotated per repetition. Each run
# prints the median round's ns per free; this script prints, per
# configuration, the median over repetitions and the ns added per free
# against the run without a profiler (bench/README.md has the latest table).
#
# Environment: RETAIN_BUILD_DIR (default ./build), RETAIN_BENCH_NO_BUILD=1 (do
# not build first), RETAIN_BENCH_BASELINE_SHIM (another libretain.so).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
repetitions=${1:-7}
rounds=${2:-2000}
live=${3:-4096}
baseline_shim=${RETAIN_BENCH_BASELINE_SHIM:-}

if [[ -z ${RETAIN_BENCH_NO_BUILD:-} ]]; then
  RETAIN_SKIP_DEPS=1 bash "$repo/scripts/build.sh" retain bench_free_cost >&2
fi
program=$build/bench/bench_free_cost
shim=$build/libretain.so
[[ -x $program && -f $shim ]] || { echo "free_cost_bench: $program or $shim missing" >&2; exit 1; }
if [[ -n $baseline_shim && ! -f $baseline_shim ]]; then
  echo "free_cost_bench: RETAIN_BENCH_BASELINE_SHIM=$baseline_shim: no such file" >&2
  exit 1
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

configs=(none retain)
[[ -n $baseline_shim ]] && configs+=(retain_baseline)

run_one() {  # config -> prints ns_per_free of one run
  local preload=
  case $1 in
    retain) preload=$shim ;;
    retain_baseline) preload=$baseline_shim ;;
  esac
  RETAIN_DIR=$dir RETAIN_SIGNAL=none LD_PRELOAD=$preload "$program" "$rounds" "$live" |
    awk '$1 == "ns_per_free" { print $2 }'
  rm -f "$dir"/*.pb
}

declare -A results
for ((rep = 0; rep < repetitions; ++rep)); do
  n=${#configs[@]}
  for ((i = 0; i < n; ++i)); do
    config=${configs[$(((i + rep) % n))]}
    value=$(run_one "$config")
    [[ -n $value ]] || { echo "free_cost_bench: $config printed no result" >&2; exit 1; }
    results[$config]="${results[$config]:-} $value"
    echo "repetition $((rep + 1)): $config $value ns per free" >&2
  done
done

median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
base=$(median "${results[none]}")
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $repetitions repetitions, $rounds rounds of $live frees"
echo "| configuration | ns per free, median (runs) | ns added per free |"
echo "|---|---|---|"
for config in "${configs[@]}"; do
  m=$(median "${results[$config]}")
  added=$(awk -v m="$m" -v b="$base" 'BEGIN { printf "%.1f", m - b }')
  [[ $config == none ]] && added="–"
  echo "| $config | $m (${results[$config]# }) | $added |"
done
