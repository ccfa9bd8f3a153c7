#!/usr/bin/env bash
# overhead_bench.sh: the shim's overhead on an allocation-heavy workload,
# side by side with heaptrack, in one run with paired repetitions.
#
#   bash bench/overhead_bench.sh [REPETITIONS=3] [OPERATIONS_PER_THREAD=2000000]
#
# Configurations (bench/README.md has the details and the latest table):
#   none            bench_alloc_workload (-O2 -g, no forced frame pointers)
#   retain          the same under libretain.so, default unwinder (the CFI walker)
#   retain_libunwind  the same with RETAIN_UNWIND=libunwind
#   none_fp         bench_alloc_workload_fp (same source, -fno-omit-frame-pointer)
#   retain_fp       bench_alloc_workload_fp under libretain.so, RETAIN_UNWIND=fp
#   retain_sampled  bench_alloc_workload under libretain.so, RETAIN_SAMPLE=524288
#   heaptrack       bench_alloc_workload under `heaptrack --raw` (recording only)
# Ratios are medians over the matching baseline: retain_fp over none_fp, every
# other row over none.
#
# Every repetition runs each configuration once, in an order rotated by one
# per repetition, so background load and warm caches hit all of them alike.
# Timed: the process tree /usr/bin/time reports (wall, user+sys of every
# waited-for process, largest peak RSS). For heaptrack that is its wrapper
# script, the workload with libheaptrack_preload.so and the zstd compressing
# the raw stream: what runs while the target runs. Not timed, after all
# repetitions: reading the outputs for the leak check.
#
# Leak check ("exact": the LeakForever total the workload prints, to the byte):
#   retain*:    rows of `retain-diff --json --by function --top 0 END.pb` whose
#               owner contains LeakForever; END.pb is the snapshot the workload
#               takes with RETAIN_SNAPSHOT("end") after freeing everything else.
#               Sampled snapshots (header sample_interval_bytes > 0) give an
#               estimate; its error relative to the true total is reported.
#   heaptrack:  (1) the raw file read by bench/heaptrack_raw_leaks.py (what
#               heaptrack recorded), every repetition; (2) heaptrack's own
#               pipeline on repetition 1 only: heaptrack_interpret then
#               `heaptrack_print --flamegraph-cost-type leaked`, under an
#               address-space cap and a timeout; (3) if (2) fails, the same
#               pipeline on a run of HEAPTRACK_SMALL_OPS operations per thread.
#
# Workloads (BENCH_WORKLOAD): "mixed" (default: bench_alloc_workload OPS,
# 56 work iterations per call, sizes up to 64 KB), "low" (OPS 8 small: 8
# work iterations per call, every block 1-256 bytes: ~50-100 ns of the
# program's own work per allocation call) or "deep" (OPS 8 small deep: the
# low-work workload with call paths 60-100 frames deep, every stack cut at
# RETAIN_DEPTH).
#
# Environment: BENCH_WORKLOAD (above), BENCH_CONFIGS (space-separated subset
# of the configurations, e.g. "none retain retain_sampled heaptrack"),
# RETAIN_BENCH_BASELINE_SHIM (another libretain.so, e.g. an older build: adds
# the row retain_baseline, full tracking with that shim, in the same
# rotation), RETAIN_BUILD_DIR (default ./build), RETAIN_BENCH_NO_BUILD=1
# (do not build first), RETAIN_BENCH_SAMPLE (bytes, default 524288),
# HEAPTRACK (default /usr/bin/heaptrack; the row is skipped when missing),
# HEAPTRACK_TIMEOUT (s per recording run, default 300), HEAPTRACK_MEM_KB
# (address-space cap of the interpreter and heaptrack_print, default 4000000),
# HEAPTRACK_INTERPRET_TIMEOUT (s, default 300), HEAPTRACK_SMALL_OPS (default
# 20000; 0 = skip (3)), BENCH_KEEP_DIR (keep every run's files there).
#
# Output: progress on stderr; on stdout a summary and a markdown table for
# bench/README.md. Exit status 0 when every run finished, 1 otherwise.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETAIN_BUILD_DIR:-$repo/build}
reps=${1:-3}
ops=${2:-2000000}
sample=${RETAIN_BENCH_SAMPLE:-524288}
heaptrack=${HEAPTRACK:-/usr/bin/heaptrack}
ht_timeout=${HEAPTRACK_TIMEOUT:-300}
ht_mem_kb=${HEAPTRACK_MEM_KB:-4000000}
ht_interp_timeout=${HEAPTRACK_INTERPRET_TIMEOUT:-300}
ht_small_ops=${HEAPTRACK_SMALL_OPS:-20000}
ht_interpret=/usr/lib/heaptrack/libexec/heaptrack_interpret
workload=${BENCH_WORKLOAD:-mixed}
case $workload in
  mixed) wargs=() ;;
  low) wargs=(8 small) ;;
  deep) wargs=(8 small deep) ;;
  *) echo "overhead_bench.sh: BENCH_WORKLOAD is mixed, low or deep" >&2; exit 2 ;;
esac
baseline_shim=${RETAIN_BENCH_BASELINE_SHIM:-}

if [[ ${RETAIN_BENCH_NO_BUILD:-0} != 1 ]]; then
  cmake --build "$build" --target retain retain-diff retain-dump bench_alloc_workload bench_alloc_workload_fp \
    -j"$(nproc)" >/dev/null
fi
prog="$build/bench/bench_alloc_workload"
prog_fp="$build/bench/bench_alloc_workload_fp"
shim="$build/libretain.so"
diff_tool="$build/bin/retain-diff"
dump_tool="$build/bin/retain-dump"
for f in "$prog" "$prog_fp" "$shim" "$diff_tool" "$dump_tool"; do
  [[ -x "$f" || -f "$f" ]] || { echo "overhead_bench.sh: $f is missing (build it first)" >&2; exit 1; }
done

if [[ -n ${BENCH_KEEP_DIR:-} ]]; then
  dir=$BENCH_KEEP_DIR
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi

configs=(none retain retain_libunwind none_fp retain_fp retain_sampled)
[[ -n "$baseline_shim" ]] && configs+=(retain_baseline)
if [[ -x "$heaptrack" ]]; then
  configs+=(heaptrack)
  [[ -x "$ht_interpret" ]] || ht_interpret=$(dirname "$(readlink -f "$heaptrack")")/../lib/heaptrack/libexec/heaptrack_interpret
fi
if [[ -n ${BENCH_CONFIGS:-} ]]; then
  wanted=()
  for c in "${configs[@]}"; do [[ " $BENCH_CONFIGS " == *" $c "* ]] && wanted+=("$c"); done
  [[ " ${wanted[*]} " == *" none "* ]] || wanted=(none "${wanted[@]}")
  configs=("${wanted[@]}")
fi

timed() {  # out-dir command...: runs the command under /usr/bin/time
  local out=$1
  shift
  /usr/bin/time -o "$out/time" -f '%e %U %S %M' "$@" >"$out/stdout" 2>"$out/stderr" ||
    echo "exit $?" >"$out/failed"
}

run_one() {  # config rep
  local c=$1 out="$dir/$1.$2"
  rm -rf "$out"
  mkdir -p "$out/data"
  local retain_env=(env LD_PRELOAD="$shim" RETAIN_DIR="$out/data" RETAIN_SIGNAL=none)
  case $c in
    none) timed "$out" "$prog" "$ops" "${wargs[@]}" ;;
    retain) timed "$out" "${retain_env[@]}" "$prog" "$ops" "${wargs[@]}" ;;
    retain_baseline)
      timed "$out" env LD_PRELOAD="$baseline_shim" RETAIN_DIR="$out/data" RETAIN_SIGNAL=none \
        "$prog" "$ops" "${wargs[@]}" ;;
    retain_libunwind) timed "$out" "${retain_env[@]}" RETAIN_UNWIND=libunwind "$prog" "$ops" "${wargs[@]}" ;;
    none_fp) timed "$out" "$prog_fp" "$ops" "${wargs[@]}" ;;
    retain_fp) timed "$out" "${retain_env[@]}" RETAIN_UNWIND=fp "$prog_fp" "$ops" "${wargs[@]}" ;;
    retain_sampled) timed "$out" "${retain_env[@]}" RETAIN_SAMPLE="$sample" "$prog" "$ops" "${wargs[@]}" ;;
    heaptrack)
      # Recording only (--raw: libheaptrack_preload.so writes its event
      # stream to a pipe, zstd compresses it); heaptrack_interpret is not
      # run here (see the leak check below).
      timed "$out" timeout -s KILL "$ht_timeout" "$heaptrack" --raw -o "$out/data/ht" "$prog" "$ops" "${wargs[@]}" ;;
  esac
}

date_run=$(date -u '+%Y-%m-%d %H:%M UTC')
shim_commit=$(git -C "$repo" log -1 --format='%h (%cs)' -- shim 2>/dev/null || echo unknown)
head_commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$repo" status --porcelain -- shim 2>/dev/null | head -1)
n=${#configs[@]}
: >"$dir/loads"
for r in $(seq "$reps"); do
  for i in $(seq 0 $((n - 1))); do
    c=${configs[$(((i + r - 1) % n))]}
    cut -d' ' -f1 /proc/loadavg >>"$dir/loads"
    run_one "$c" "$r"
    echo "rep $r $c: $(cat "$dir/$c.$r/time" 2>/dev/null | grep -v '^Command' | tr '\n' ' ')$(cat "$dir/$c.$r/failed" 2>/dev/null || true)" >&2
  done
done

# ---- leak check, outside the timed region ----
echo "reading the outputs (not timed)..." >&2
retain_leak() {  # snapshot -> "bytes estimated interval"
  "$diff_tool" --json --by function --top 0 "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
b = sum(r["retained_bytes"] for r in d["rows"] if "LeakForever" in r["owner"]["key"])
print(b, int(bool(d.get("estimated"))), d["after"].get("sample_interval_bytes", 0))'
}
for r in $(seq "$reps"); do
  for c in "${configs[@]}"; do
    out="$dir/$c.$r"
    leak="- - -"
    case $c in
      retain | retain_baseline | retain_libunwind | retain_fp | retain_sampled)
        end=$(ls "$out"/data/*.1.pb 2>/dev/null | head -1 || true)
        if [[ -n "$end" ]]; then leak=$(retain_leak "$end" || echo "error - -"); else leak="no-snapshot - -"; fi
        # Shim health: frame-pointer walks that broke and fell back to libunwind.
        [[ -n "$end" ]] && "$dump_tool" --json --top 0 "$end" |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["health"]["fp_fallbacks"])' \
            >"$out/fp_fallbacks" 2>/dev/null || true
        # And stacks the CFI walker handed to libunwind.
        [[ -n "$end" ]] && "$dump_tool" --json --top 0 "$end" |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["health"]["cfi_fallbacks"])' \
            >"$out/cfi_fallbacks" 2>/dev/null || true ;;
      heaptrack)
        f=$(ls "$out"/data/ht.raw.* 2>/dev/null | head -1 || true)
        if [[ -n "$f" ]]; then
          leak="$(python3 "$repo/bench/heaptrack_raw_leaks.py" "$f" LeakForever 2>"$out/raw_leaks.err" |
            awk '{print $6}') - -"
          [[ "$leak" == " - -" ]] && leak="error - -"
        else
          leak="no-file - -"
        fi ;;
    esac
    read -r e u s m < <(grep -v '^Command' "$out/time" 2>/dev/null || echo "nan nan nan nan")
    expected=$(awk '/^leaked_bytes/ {print $2}' "$out/stdout" 2>/dev/null || true)
    size=0
    [[ $c == none || $c == none_fp ]] || size=$(du -sb "$out/data" | cut -f1)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$r" "$e" "$u" "$s" "$m" "$size" \
      "${expected:-none}" "$leak" "$([[ -f $out/failed ]] && cat "$out/failed" || echo ok)" >>"$dir/results.tsv"
  done
done

# heaptrack's own pipeline, repetition 1 (and a small run if it fails).
ht_pipeline() {  # raw-file out-prefix -> writes out-prefix.{status,leak,print}
  local raw=$1 pre=$2 st=0
  (
    ulimit -v "$ht_mem_kb"
    zstd -dc "$raw" | /usr/bin/time -o "$pre.interp_time" -f '%e %U %S %M' \
      timeout -s KILL "$ht_interp_timeout" "$ht_interpret" 2>"$pre.interp_err" | zstd -q -c >"$pre.zst"
    exit "${PIPESTATUS[1]}"
  ) || st=$?
  if ((st != 0)); then
    local why="status $st"
    grep -q 'std::bad_alloc' "$pre.interp_err" && why="std::bad_alloc, status $st"
    ((st == 137)) && why="killed at the ${ht_interp_timeout} s timeout"
    echo "heaptrack_interpret: $why" >"$pre.status"
    return 1
  fi
  st=0
  (ulimit -v "$ht_mem_kb"; timeout -s KILL "$ht_interp_timeout" heaptrack_print -f "$pre.zst" \
    --flamegraph-cost-type leaked -F "$pre.leaked.txt" >"$pre.print" 2>&1) || st=$?
  if ((st != 0)); then
    echo "heaptrack_print failed (status $st)" >"$pre.status"
    return 1
  fi
  awk '/LeakForever/ {s += $NF} END {print s + 0}' "$pre.leaked.txt" >"$pre.leak"
  echo ok >"$pre.status"
}
if [[ " ${configs[*]} " == *" heaptrack "* ]]; then
  raw=$(ls "$dir"/heaptrack.1/data/ht.raw.* 2>/dev/null | head -1 || true)
  if [[ -n "$raw" ]]; then
    echo "heaptrack_interpret + heaptrack_print on repetition 1 (cap ${ht_mem_kb} KB, ${ht_interp_timeout} s)..." >&2
    if ! ht_pipeline "$raw" "$dir/ht_full" && ((ht_small_ops > 0)); then
      echo "... failed; the same on a run of $ht_small_ops operations per thread..." >&2
      mkdir -p "$dir/ht_small"
      "$heaptrack" --raw -o "$dir/ht_small/ht" "$prog" "$ht_small_ops" "${wargs[@]}" >"$dir/ht_small/stdout" 2>&1 || true
      awk '/^leaked_bytes/ {print $2}' "$dir/ht_small/stdout" >"$dir/ht_small.expected"
      small_raw=$(ls "$dir"/ht_small/ht.raw.* 2>/dev/null | head -1 || true)
      [[ -n "$small_raw" ]] && ht_pipeline "$small_raw" "$dir/ht_small" || true
    fi
  fi
fi

status=0
python3 - "$dir" "$reps" "$ops" "$sample" "$ht_small_ops" "$workload" <<'EOF' || status=$?
import os, statistics, sys
d, reps, ops, sample, small_ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
workload = sys.argv[6]
rows = {}
for line in open(os.path.join(d, "results.tsv")):
    f = line.rstrip("\n").split("\t")
    leak = f[8].split(" ")
    rows.setdefault(f[0], []).append(dict(
        rep=int(f[1]), wall=float(f[2]), cpu=float(f[3]) + float(f[4]), rss=int(f[5]) if f[5] != "nan" else 0,
        size=int(f[6]), expected=f[7], leak=leak[0], estimated=leak[1], interval=leak[2],
        status=f[9]))

def read(name, default=""):
    p = os.path.join(d, name)
    return open(p).read().strip() if os.path.exists(p) else default

def med(xs):
    return statistics.median(xs)

def human(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000

expected = {x["expected"] for runs in rows.values() for x in runs if x["expected"] != "none"}
truth = int(next(iter(expected))) if len(expected) == 1 else None
labels = {
    "none": ("no profiler", "–"),
    "retain": ("retain full (CFI walker)", "none"),
    "retain_baseline": ("retain full, baseline shim (RETAIN_BENCH_BASELINE_SHIM)", "none"),
    "retain_libunwind": ("retain full `RETAIN_UNWIND=libunwind`", "none"),
    "none_fp": ("no profiler, fp build", "–"),
    "retain_fp": ("retain `RETAIN_UNWIND=fp`, fp build", "none_fp"),
    "retain_sampled": (f"retain sampled `RETAIN_SAMPLE={sample}`", "none"),
    "heaptrack": ("heaptrack 1.4 `--raw` (recording)", "none"),
}
loads = [float(x) for x in read("loads").split()]
workload_args = {"mixed": "", "low": " 8 small", "deep": " 8 small deep"}[workload]
print(f"workload {workload}: bench_alloc_workload {ops}{workload_args} ops/thread, 2 threads; LeakForever total printed by "
      f"every run: {', '.join(sorted(expected)) or 'none'}")
if len(expected) > 1:
    print("WARNING: the runs printed different leaked totals")
print(f"load average (1 min) before each run: {min(loads):.2f}–{max(loads):.2f} "
      f"(median {med(loads):.2f}); {reps} repetitions, order rotated per repetition")
print()
calls = None
for line in read("none.1/stdout").splitlines():
    if line.startswith("allocation_calls "):
        calls = int(line.split()[1])
print("| configuration | ratio vs | wall s median (min–max) | CPU s median (min–max) | wall × | CPU × "
      "| CPU ns added per call | wall ns added per call | peak RSS MB | output | LeakForever bytes |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
failed = False
for c, (label, base) in labels.items():
    if c not in rows:
        continue
    runs = rows[c]
    bad = [x["status"] for x in runs if x["status"] != "ok"]
    failed |= bool(bad)
    w = [x["wall"] for x in runs]
    u = [x["cpu"] for x in runs]
    wall_s = f"{med(w):.2f} ({min(w):.2f}–{max(w):.2f})"
    cpu_s = f"{med(u):.2f} ({min(u):.2f}–{max(u):.2f})"
    if base in rows:
        rw = med(w) / med([x["wall"] for x in rows[base]])
        rc = med(u) / med([x["cpu"] for x in rows[base]])
        ratios = (f"**{rw:.2f}**", f"{rc:.2f}")
        added = (f"{(med(u) - med([x['cpu'] for x in rows[base]])) * 1e9 / calls:.0f}"
                 if calls else "?")
        # Per call on its thread: the 2 threads run side by side.
        added_wall = (f"{(med(w) - med([x['wall'] for x in rows[base]])) * 2e9 / calls:.0f}"
                      if calls else "?")
    else:
        ratios = ("1.00", "1.00")
        added = "–"
        added_wall = "–"
    rss = f"{med([x['rss'] for x in runs]) / 1024:.1f}"
    if c.startswith("none"):
        out, leak = "–", "–"
    else:
        kind = "heaptrack raw .zst" if c == "heaptrack" else "2 snapshots"
        out = f"{human(med([x['size'] for x in runs]))} ({kind})"
        vals = [x["leak"] for x in runs]
        intervals = {x["interval"] for x in runs}
        if c == "retain_sampled" and intervals != {"0"}:
            errs = []
            for v in vals:
                try:
                    errs.append((int(v) - truth) / truth * 100)
                except (ValueError, TypeError):
                    errs.append(float("nan"))
            est = [x["estimated"] for x in runs]
            leak = (f"estimate {', '.join(vals)}; error {', '.join(f'{e:+.1f}%' for e in errs)}"
                    f" (retain-diff says estimated: {'yes' if set(est) == {'1'} else 'NO'})")
        else:
            ok = truth is not None and all(v == str(truth) for v in vals)
            leak = f"exact ×{len(vals)}" if ok else f"**no**: {', '.join(vals)}"
            if c == "retain_sampled":
                leak += " (snapshot sample_interval_bytes 0: RETAIN_SAMPLE not in this shim, full tracking)"
            if c == "heaptrack":
                leak = "raw file: " + leak
                st = read("ht_full.status", "not run")
                if st == "ok":
                    v = read("ht_full.leak")
                    leak += "; heaptrack_print: " + (f"exact" if v == str(truth) else f"**no**: {v}")
                else:
                    leak += f"; heaptrack's own tools: **failed** ({st})"
    if bad:
        leak += f"; runs failed: {', '.join(bad)}"
    print(f"| {label} | {base} | {wall_s} | {cpu_s} | {ratios[0]} | {ratios[1]} | {added} | {added_wall} | {rss} | {out} | {leak} |")
print()
if calls:
    print(f"allocation calls per run: {calls:,}; 'CPU ns added per call' = (CPU median - baseline CPU "
          f"median) / calls; 'wall ns added per call' = (wall median - baseline wall median) x 2 "
          f"threads / calls (each thread's calls run side by side)")
# Issue 17's measure: the median over repetitions of one repetition's
# difference (each configuration's run and its baseline's ran in the same
# rotation, seconds apart), less exposed to this machine's drifting speed
# than the difference of the two medians above.
for c, (label, base) in labels.items():
    if not calls or c not in rows or base not in rows:
        continue
    base_cpu = {x["rep"]: x["cpu"] for x in rows[base]}
    paired = [(x["cpu"] - base_cpu[x["rep"]]) * 1e9 / calls for x in rows[c] if x["rep"] in base_cpu]
    if paired:
        print(f"{c}: CPU ns added per call, median of {len(paired)} paired repetitions: "
              f"{med(paired):.0f} (min {min(paired):.0f}, max {max(paired):.0f})")
if calls and "retain_fp" in rows:
    fb = [int(read(f"retain_fp.{r}/fp_fallbacks", "-1")) for r in range(1, reps + 1)]
    print(f"retain_fp: frame-pointer walks that broke and fell back to the CFI walker (shim health "
          f"fp_fallbacks): median {med(fb):,.0f} per run, {med(fb) / calls * 100:.0f}% of allocation calls")
if calls and "retain" in rows:
    fb = [int(read(f"retain.{r}/cfi_fallbacks", "-1")) for r in range(1, reps + 1)]
    print(f"retain: stacks the CFI walker handed to libunwind (shim health cfi_fallbacks): "
          f"median {med(fb):,.0f} per run")
if "heaptrack" in rows and "retain" in rows:
    hw, hc = med([x["wall"] for x in rows["heaptrack"]]), med([x["cpu"] for x in rows["heaptrack"]])
    bw, bc = med([x["wall"] for x in rows["none"]]), med([x["cpu"] for x in rows["none"]])
    for c in ("retain", "retain_baseline", "retain_fp", "retain_sampled"):
        if c in rows:
            base = "none_fp" if c == "retain_fp" else "none"
            rw = med([x["wall"] for x in rows[c]]) / med([x["wall"] for x in rows[base]])
            rc = med([x["cpu"] for x in rows[c]]) / med([x["cpu"] for x in rows[base]])
            print(f"{c}: heaptrack recording's overhead (ratio - 1) over {c}'s: "
                  f"{(hw / bw - 1) / (rw - 1):.1f} in wall time, {(hc / bc - 1) / (rc - 1):.1f} in CPU time "
                  f"(goal for retain full: >= 5)"
                  if rw > 1 and rc > 1 else f"{c}: ratio <= 1, no overhead measured")
if "heaptrack" in rows:
    t = read("ht_full.interp_time").split("\n")[-1].split()
    if t and t[0] != "Command":
        print(f"heaptrack_interpret on repetition 1's raw file: {read('ht_full.status')}; "
              f"{t[0]} s wall, peak RSS {int(t[3]) / 1024:.0f} MB (address space capped)")
    if os.path.exists(os.path.join(d, "ht_small.status")):
        st, v, e = read("ht_small.status"), read("ht_small.leak"), read("ht_small.expected")
        t = read("ht_small.interp_time").split("\n")[-1].split()
        extra = f", interpreter {t[0]} s, peak RSS {int(t[3]) / 1024:.0f} MB" if len(t) == 4 and t[0] != "Command" else ""
        res = (f"LeakForever {v} B, workload printed {e}: {'exact' if v == e else 'NOT exact'}"
               if st == "ok" else st)
        print(f"heaptrack's own pipeline on a smaller run ({small_ops} "
              f"ops/thread, untimed): {res}{extra}")
sys.exit(1 if failed else 0)
EOF
echo
echo "date: $date_run; nproc $(nproc); checkout $head_commit; last commit touching shim/: $shim_commit${dirty:+ (shim/ has uncommitted changes)}"
exit $status
