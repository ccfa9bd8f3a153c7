#!/usr/bin/env bash
# demo.sh: retain in one command, for a first look. Installs what is missing
# (Debian 12), builds the shim, retain-dump, retain-diff and the demo program
# (examples/demo/leaky.cc: a known leak beside a known bounded cache), runs
# the program under libretain.so, then shows its snapshots with retain-dump
# and retain-diff and says what to look at.
#
#   bash scripts/demo.sh
#
# Environment: RETAIN_DEMO_DIR (where snapshots go; default retain-demo under
# the repository root, emptied of earlier demo snapshots first),
# RETAIN_BUILD_DIR (default build), RETAIN_JOBS, RETAIN_SKIP_DEPS=1.
#
# Exit status: 0 when the demo ran; 1 if a step failed (it says which).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

build_dir=${RETAIN_BUILD_DIR:-build}
demo_dir=${RETAIN_DEMO_DIR:-retain-demo}
program="$build_dir/bin/leaky"
dump="$build_dir/bin/retain-dump"
diff="$build_dir/bin/retain-diff"

step() { printf '\n== %s\n' "$*"; }
die() {
  echo "demo.sh: $*" >&2
  exit 1
}

step "1. Dependencies (Debian 12 packages; installed only if missing)"
bash scripts/install-deps.sh --build-only || die "could not install the dependencies (see above)"
echo "ok"

step "2. Build libretain.so, the tools and the demo program in $build_dir/ (a few minutes the first time)"
targets=(retain retain-dump retain-diff retain_demo_leaky)
bash scripts/build.sh "${targets[@]}" >/dev/null ||
  die "the build failed; run 'bash scripts/build.sh ${targets[*]}' to see why"
for built in "$build_dir/libretain.so" "$dump" "$diff" "$program"; do
  [[ -x "$built" ]] || die "$built was not built"
  echo "$built"
done

step "3. Run the demo program under the shim"
mkdir -p "$demo_dir"
rm -f "$demo_dir"/leaky.*.pb "$demo_dir"/.leaky.*.tmp
echo "\$ scripts/retain-run -o $demo_dir -- $program"
echo "  (the same as: LD_PRELOAD=$(readlink -f "$build_dir/libretain.so") RETAIN_DIR=$demo_dir $program)"
RETAIN_LIB="$build_dir/libretain.so" scripts/retain-run -o "$demo_dir" -- "$program" ||
  die "the demo program failed under the shim"

step "4. Snapshots written: <program>.<pid>.<sequence>.pb"
mapfile -t snapshots < <(cd "$demo_dir" && find . -maxdepth 1 -name 'leaky.*.pb' -printf '%f\n' |
  sort -t. -k2,2n -k3,3n)
count=${#snapshots[@]}
# One per request (the program calls retain_snapshot), then one at exit.
((count >= 6)) || die "expected a snapshot per request and one at exit in $demo_dir, found $count"
for i in "${!snapshots[@]}"; do
  snapshots[i]="$demo_dir/${snapshots[i]}"
done
running=("${snapshots[@]:0:count-1}")
requests=${#running[@]}
last=${snapshots[count - 1]}
echo "$count snapshots in $demo_dir/:"
echo "  ${running[0]##*/} .. ${running[-1]##*/}   retain_snapshot(\"after-request-N\"), N = 1..$requests"
echo "  ${last##*/}   at exit"

step "5. The exit snapshot, summarised by retain-dump"
echo "\$ $dump --top 3 $last"
"$dump" --top 3 "$last" || die "retain-dump could not read $last"

step "6. The trend over the $requests snapshots taken while it ran"
echo "\$ $diff --trend --top 4 $demo_dir/leaky.<pid>.{1..$requests}.pb"
"$diff" --trend --top 4 "${running[@]}" || die "retain-diff --trend failed"

step "7. What was retained between request 5 and request $requests (exact, by birth sequence)"
echo "\$ $diff --top 2 --depth 2 ${running[4]} ${running[-1]}"
"$diff" --top 2 --depth 2 "${running[4]}" "${running[-1]}" || die "retain-diff failed"

step "8. What to look at"
cat <<EOF
The program handled $requests requests and keeps memory in two ways:

 * RememberRequest: each request's 64 KiB body goes into a log nothing ever
   frees. At exit it is the top stack: 20 x 64 KiB = 1.25 MiB live in 20
   allocations (retain-dump rounds it to 1.2 MiB). The trend calls it
   "linear": +64 KiB per request, to the end. Between requests 5 and 20 it
   retained 15 x 64 KiB = 960 KiB and released nothing. A leak.
 * ComputeState: the LRU prompt cache, at most 4 entries of 256 KiB. The
   trend calls it "plateau": it grew for 4 requests, then stayed at 1 MiB
   although every request added an entry. Between requests 5 and 20 it
   retained 1 MiB and released 1 MiB: it replaces what it holds. Bounded, by
   design. At exit the cache had been destroyed with the program's static
   objects, so the exit snapshot no longer holds it.
 * About 71 KiB from libstdc++, called by the dynamic loader before main:
   libstdc++'s emergency exception pool, allocated once. Not a request's
   doing. (Allocations made before the shim was ready show as "no stack".)
 * VmRSS, RssAnon and malloc's "free but held": resident memory, and what
   the allocator keeps after free() without returning it to the kernel.
   retain-diff splits RSS growth into tracked allocations, allocator
   retention and the untracked rest (its header lines).

retain-dump prints raw frames (module+offset); retain-diff symbolizes them
(function, file:line) from the modules' DWARF.

Try next:
  $diff $last                 # what is live, by owner
  $dump --json $last
  scripts/retain-run -o /tmp/r -- YOUR_PROGRAM ARGS    # kill -USR2 <pid> takes a snapshot
  README.md: configuration, the snapshot format, what is not built yet.
EOF
