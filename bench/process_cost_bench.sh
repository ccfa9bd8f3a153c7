#!/usr/bin/env bash
# process_cost_bench.sh: what the shim adds per process, apart from the
# program's allocations: per exec'd process (its start, loading the shim and
# libunwind, and its exit snapshot) and per fork.
#
#   bash bench/process_cost_bench.sh [ROUNDS=10] [RUNS=50] [FORKS=200]
#
# Each round runs, in turn without a profiler, under libretain.so and, with
# RETAIN_BENCH_BASELINE_SHIM set, under that other libretain.so: RUNS
# executions of /bin/true (each writes its exit snapshot, into a scratch
# directory emptied after each round) and one bench_fork_loop of FORKS
# forks. Alternating rounds put background load on every configuration
# alike. Prints, per configuration, the median over rounds of the wall time
# per exec and per fork and what it adds to the run without a profiler,
# and the page faults of one /bin/true (bench/README.md, "Per process").
#
# Environment: RETAIN_BUILD_DIR (default ./build), RETAIN_BENCH_NO_BUILD=1 (do
# not build first), RETAIN_BENCH_BASELINE_SHIM (another libretain.so).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
rounds=${1:-10}
runs=${2:-50}
forks=${3:-200}
baseline_shim=${RETAIN_BENCH_BASELINE_SHIM:-}

if [[ -z ${RETAIN_BENCH_NO_BUILD:-} ]]; then
  RETAIN_SKIP_DEPS=1 bash "$repo/scripts/build.sh" retain bench_fork_loop >&2
fi
fork_loop=$build/bench/bench_fork_loop
shim=$build/libretain.so
[[ -x $fork_loop && -f $shim ]] || { echo "process_cost_bench: $fork_loop or $shim missing" >&2; exit 1; }
if [[ -n $baseline_shim && ! -f $baseline_shim ]]; then
  echo "process_cost_bench: RETAIN_BENCH_BASELINE_SHIM $baseline_shim missing" >&2
  exit 1
fi
configs=(none "$shim")
[[ -n $baseline_shim ]] && configs+=("$baseline_shim")

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

now_ns() { date +%s%N; }
# run CONFIG COMMAND...: the command without a profiler or under CONFIG.
run() {
  local config=$1
  shift
  if [[ $config == none ]]; then
    "$@"
  else
    RETAIN_DIR=$scratch LD_PRELOAD=$config "$@"
  fi
}

results=$scratch/results
for ((round = 0; round < rounds; ++round)); do
  for config in "${configs[@]}"; do
    start=$(now_ns)
    for ((i = 0; i < runs; ++i)); do run "$config" /bin/true; done
    echo "exec $config $(( ($(now_ns) - start) / runs ))" >>"$results"
    start=$(now_ns)
    run "$config" "$fork_loop" "$forks"
    echo "fork $config $(( ($(now_ns) - start) / forks ))" >>"$results"
  done
  find "$scratch" -name '*.pb' -delete
done
for config in "${configs[@]}"; do
  faults=$(run "$config" /usr/bin/time -f %R /bin/true 2>&1 | tail -1)
  echo "faults $config $faults" >>"$results"
done

python3 - "$results" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
faults = {}
for line in open(sys.argv[1]):
    what, config, value = line.split()
    if what == "faults":
        faults[config] = int(value)
    else:
        times[(what, config)].append(int(value) / 1e6)
configs = list(dict.fromkeys(config for _, config in times))
print("| configuration | ms per exec (added) | ms per fork (added) | page faults of /bin/true |")
print("|---|---|---|---|")
base = {what: statistics.median(times[(what, "none")]) for what in ("exec", "fork")}
for config in configs:
    cells = []
    for what in ("exec", "fork"):
        value = statistics.median(times[(what, config)])
        cells.append(f"{value:.3f} ({value - base[what]:+.3f})")
    name = "no profiler" if config == "none" else config
    print(f"| {name} | {cells[0]} | {cells[1]} | {faults.get(config, '?')} |")
PY
