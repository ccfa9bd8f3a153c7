#!/usr/bin/env bash
# overhead_bench.sh: the shim's overhead on an allocation-heavy workload
# (bench_alloc_workload: 2 threads, ~6M allocation calls, deep stacks, no
# forced frame pointers), side by side with heaptrack.
#
#   bash bench/overhead_bench.sh [REPETITIONS=3] [OPERATIONS_PER_THREAD]
#
# Environment: RETAIN_BUILD_DIR (default ./build), HEAPTRACK (default
# /usr/bin/heaptrack; skipped when missing), HEAPTRACK_TIMEOUT (seconds per
# heaptrack run, default 90; a killed run is reported, its times are the cap),
# HEAPTRACK_MEM_KB (its address-space cap, default 6000000).
#
# One run, paired repetitions: every repetition runs each configuration once,
# in turn (none, retain, retain fp, heaptrack), so background load hits all of
# them alike. For each configuration: median wall and CPU (user+sys) time,
# median peak RSS (/usr/bin/time %M: the largest process; for heaptrack that
# may be its interpreter rather than the workload), ratio of medians to the
# no-profiler run, output size, and whether the tool reports the workload's
# never-freed total (printed by the workload) exactly:
#   retain:    rows of `retain-diff --json --by function --top 0 END.pb` whose
#              owner contains LeakForever, END.pb being the snapshot the
#              workload takes with RETAIN_SNAPSHOT("end") after freeing
#              everything else;
#   heaptrack: sum of the `heaptrack_print --flamegraph-cost-type leaked`
#              stacks that contain LeakForever (exact bytes), and its
#              "total memory leaked" line (rounded, all leaks).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
reps=${1:-3}
ops=${2:-}
heaptrack=${HEAPTRACK:-/usr/bin/heaptrack}
ht_timeout=${HEAPTRACK_TIMEOUT:-90}
ht_mem_kb=${HEAPTRACK_MEM_KB:-6000000}
cmake --build "$build" --target retain retain-diff bench_alloc_workload -j"$(nproc)" >/dev/null
prog="$build/bench/bench_alloc_workload"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

configs=(none retain retain_fp)
[[ -x "$heaptrack" ]] && configs+=(heaptrack)

loads=()
run_one() {  # config rep
  local c=$1 r=$2 out="$dir/$1.$2"
  mkdir -p "$out/data"
  case $c in
    none)
      /usr/bin/time -o "$out/time" -f '%e %U %S %M' "$prog" $ops >"$out/stdout" 2>"$out/stderr" ;;
    retain)
      /usr/bin/time -o "$out/time" -f '%e %U %S %M' \
        env LD_PRELOAD="$build/libretain.so" RETAIN_DIR="$out/data" RETAIN_SIGNAL=none "$prog" $ops >"$out/stdout" 2>"$out/stderr" ;;
    retain_fp)
      /usr/bin/time -o "$out/time" -f '%e %U %S %M' \
        env LD_PRELOAD="$build/libretain.so" RETAIN_DIR="$out/data" RETAIN_SIGNAL=none RETAIN_UNWIND=fp "$prog" $ops >"$out/stdout" 2>"$out/stderr" ;;
    heaptrack)
      # heaptrack's interpreter can take minutes and many GB on this workload:
      # bounded by HEAPTRACK_TIMEOUT seconds (default 90), reported as such.
      # Address space capped at HEAPTRACK_MEM_KB (default 6 GB) so that the
      # interpreter cannot take the machine's memory.
      (ulimit -v "$ht_mem_kb"; exec /usr/bin/time -o "$out/time" -f '%e %U %S %M' \
        timeout -s KILL "$ht_timeout" "$heaptrack" -o "$out/data/ht" "$prog" $ops \
        >"$out/stdout" 2>"$out/stderr") || echo "exit $?" >"$out/failed" ;;
  esac
}

for r in $(seq "$reps"); do
  for c in "${configs[@]}"; do
    run_one "$c" "$r"
    loads+=("$(cut -d' ' -f1 /proc/loadavg)")
    echo "rep $r $c: $(cat "$dir/$c.$r/time")" >&2
  done
done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

expected=$(awk '/^leaked_bytes/ {print $2}' "$dir/none.1/stdout")
echo "workload: $(tr '\n' ' ' <"$dir/none.1/stdout")"
echo "machine: nproc $(nproc); load average (1 min) after each run: ${loads[*]}"
echo
echo "| configuration | wall s (median) | CPU s (median) | peak RSS MB | wall × | CPU × | output | LeakForever bytes reported | exact |"
echo "|---|---|---|---|---|---|---|---|---|"
base_wall="" base_cpu=""
for c in "${configs[@]}"; do
  walls=() cpus=() rss=() sizes=() leaked=() other=""
  for r in $(seq "$reps"); do
    out="$dir/$c.$r"
    read -r e u s m < <(grep -v '^Command' "$out/time")
    walls+=("$e"); cpus+=("$(echo "$u + $s" | bc)"); rss+=("$m")
    sizes+=("$(du -sb "$out/data" | cut -f1)")
    case $c in
      none) leaked+=("-") ;;
      retain|retain_fp)
        end=$(ls "$out"/data/*.1.pb 2>/dev/null | head -1 || true)
        if [[ -n "$end" ]]; then
          leaked+=("$("$build/bin/retain-diff" --json --by function --top 0 "$end" | python3 -c '
import json, sys
rows = json.load(sys.stdin)["rows"]
print(sum(r["retained_bytes"] for r in rows if "LeakForever" in r["owner"]["key"]))')")
        else
          leaked+=("no-snapshot")
        fi ;;
      heaptrack)
        f=$(ls "$out"/data/ht* 2>/dev/null | head -1 || true)
        if [[ -f "$out/failed" || -z "$f" ]]; then
          leaked+=("failed($(cat "$out/failed" 2>/dev/null || echo no-file))"); continue
        fi
        leaked+=("$(heaptrack_print -f "$f" --flamegraph-cost-type leaked -F "$out/leaked.txt" >"$out/print.txt" 2>&1;
                   awk '/LeakForever/ {s += $NF} END {print s + 0}' "$out/leaked.txt")")
        other=$(grep -m1 'total memory leaked' "$out/print.txt" || true) ;;
    esac
  done
  mw=$(printf '%s\n' "${walls[@]}" | median); mc=$(printf '%s\n' "${cpus[@]}" | median)
  mr=$(printf '%s\n' "${rss[@]}" | median); ms=$(printf '%s\n' "${sizes[@]}" | median)
  [[ $c == none ]] && { base_wall=$mw; base_cpu=$mc; }
  exact="-"
  if [[ $c != none ]]; then
    exact=yes
    for l in "${leaked[@]}"; do [[ "$l" == "$expected" ]] || exact="no"; done
  fi
  printf '| %s | %s (%s) | %s (%s) | %.1f | %.2f | %.2f | %s | %s | %s |\n' \
    "$c" "$mw" "${walls[*]}" "$mc" "${cpus[*]}" "$(echo "$mr / 1024" | bc -l)" \
    "$(echo "$mw / $base_wall" | bc -l)" "$(echo "$mc / $base_cpu" | bc -l)" \
    "$([[ $c == none ]] && echo - || echo "$ms B")" "${leaked[*]}" "$exact"
  [[ -n "$other" ]] && echo "heaptrack_print (last rep): $other" >&2
done
echo "| retain sampled | n/a (RETAIN_SAMPLE does not exist yet) | | | | | | | |"
echo
echo "expected LeakForever bytes (printed by the workload): $expected"
