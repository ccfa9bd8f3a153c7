#!/usr/bin/env bash
# demo.sh: retain in one command, for a first look. Installs what is missing
# (Debian 12), builds the shim, retain-dump, retain-diff and the llama-server
# look-alike (examples/llm-server-sim: a leaking prefix trie beside a bounded
# prompt cache), runs the server under libretain.so with a snapshot after
# every request, sends it 16 requests, stops it, then shows the snapshots
# with retain-diff, says what to look at, and ends with the path of the
# series' HTML report (retain-diff --trend --html: one file, opens offline).
#
#   bash scripts/demo.sh
#
# Environment: RETAIN_DEMO_DIR (where snapshots go; default retain-demo under
# the repository root, emptied of earlier demo snapshots first),
# RETAIN_BUILD_DIR (default build), RETAIN_JOBS, RETAIN_SKIP_DEPS=1.
#
# Exit status: 0 when the demo ran; 1 if a step failed (it says which).
# The last line printed is the report's path.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

build_dir=${RETAIN_BUILD_DIR:-build}
demo_dir=${RETAIN_DEMO_DIR:-retain-demo}
server="$build_dir/bin/llm-server-sim"
dump="$build_dir/bin/retain-dump"
diff="$build_dir/bin/retain-diff"
requests=16
server_flags=(--leak-trie --state-mib 4 --cache-mib 16)
server_pid=

step() { printf '\n== %s\n' "$*"; }
die() {
  echo "demo.sh: $*" >&2
  exit 1
}

# Stops the server this script started (that PID only), on any exit.
stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=
}
trap stop_server EXIT
trap 'exit 1' INT TERM

step "1. Dependencies (Debian 12 packages; installed only if missing)"
bash scripts/install-deps.sh --build-only || die "could not install the dependencies (see above)"
echo "ok"

step "2. Build libretain.so, the tools and the demo server in $build_dir/ (a few minutes the first time)"
targets=(retain retain-dump retain-diff llm-server-sim)
bash scripts/build.sh "${targets[@]}" >/dev/null ||
  die "the build failed; run 'bash scripts/build.sh ${targets[*]}' to see why"
for built in "$build_dir/libretain.so" "$dump" "$diff" "$server"; do
  [[ -x "$built" ]] || die "$built was not built (llm-server-sim needs libcpp-httplib-dev)"
  echo "$built"
done

step "3. Start the llama-server look-alike under the shim, a snapshot after every request"
mkdir -p "$demo_dir"
rm -f "$demo_dir"/llm-server-sim.*.pb "$demo_dir"/.llm-server-sim.*.tmp \
  "$demo_dir"/server.out "$demo_dir"/server.log "$demo_dir"/report.html
echo "\$ RETAIN_SNAPSHOT_EVERY=1 scripts/retain-run -o $demo_dir -- $server --port 0 ${server_flags[*]} &"
echo "  (the same as: LD_PRELOAD=$(readlink -f "$build_dir/libretain.so") RETAIN_DIR=$demo_dir RETAIN_SNAPSHOT_EVERY=1 $server ...)"
RETAIN_LIB="$build_dir/libretain.so" RETAIN_SNAPSHOT_EVERY=1 \
  scripts/retain-run -o "$demo_dir" -- "$server" --port 0 "${server_flags[@]}" \
  >"$demo_dir/server.out" 2>"$demo_dir/server.log" &
server_pid=$!
sim_pid=$server_pid
port=
for _ in $(seq 300); do # 30 s at most
  port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$demo_dir/server.out")
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null ||
    die "the server exited before listening; see $demo_dir/server.log"
  sleep 0.1
done
[[ -n "$port" ]] || die "the server did not print 'listening on' within 30 s; see $demo_dir/server.log"
echo "pid $server_pid, listening on 127.0.0.1:$port"

step "4. Send it $requests requests (X-Request-Id: req-1 .. req-$requests)"
echo "\$ python3 examples/llm-server-sim/send_requests.py --port $port --count $requests --id-prefix req"
python3 examples/llm-server-sim/send_requests.py --port "$port" --count "$requests" --id-prefix req |
  sed -n '1,2p;$p' || die "sending the requests failed; see $demo_dir/server.log"
echo "  (lines 3..$((requests - 1)) left out; the server's log: $demo_dir/server.log)"

step "5. Stop it (SIGTERM: a clean exit, and one last snapshot)"
echo "\$ kill -TERM $server_pid; wait $server_pid"
kill -TERM "$server_pid" || die "could not signal the server (pid $server_pid)"
status=0
wait "$server_pid" || status=$?
server_pid=
((status == 0)) || die "the server exited with status $status; see $demo_dir/server.log"
mapfile -t snapshots < <(cd "$demo_dir" && find . -maxdepth 1 -name "llm-server-sim.$sim_pid.*.pb" -printf '%f\n' |
  sort -t. -k2,2n -k3,3n)
count=${#snapshots[@]}
# One per request (RETAIN_SNAPSHOT_EVERY=1, labelled requests-N, sequence N),
# then one at exit (the highest sequence).
((count == requests + 1)) ||
  die "expected $requests request snapshots and one at exit in $demo_dir, found $count"
for i in "${!snapshots[@]}"; do
  [[ "${snapshots[i]}" == "llm-server-sim.$sim_pid.$((i + 1)).pb" ]] ||
    die "expected llm-server-sim.$sim_pid.$((i + 1)).pb in $demo_dir, found ${snapshots[i]}"
  snapshots[i]="$demo_dir/${snapshots[i]}"
done
running=("${snapshots[@]:0:requests}")
last=${running[-1]}
echo "$count snapshots in $demo_dir/ (<program>.<pid>.<sequence>.pb):"
echo "  ${running[0]##*/} .. ${last##*/}   after request N, labelled requests-N, N = 1..$requests"
echo "  ${snapshots[-1]##*/}   at exit"

step "6. The trend over the $requests request snapshots (and its HTML report)"
report="$demo_dir/report.html"
echo "\$ $diff --trend --top 5 --html $report $demo_dir/llm-server-sim.$sim_pid.{1..$requests}.pb"
"$diff" --trend --top 5 --html "$report" "${running[@]}" || die "retain-diff --trend failed"

step "7. What is live after request $requests, by the request that allocated it"
echo "\$ $diff --by tag --top 5 $last"
"$diff" --by tag --top 5 "$last" || die "retain-diff --by tag failed"

step "8. What to look at"
cat <<EOF
The server handled $requests requests (256-character prompts) and its RSS grew
by about 4 MiB a request. retain-diff tells the two reasons apart:

 * PrefixTrie::Insert (inference.cc:140): "linear", +4.0 MiB/request to the
   end: 16 new trie nodes of 256 KiB per request that nothing frees, not even
   at exit (64.0 MiB after request $requests). A leak: orphaned trie nodes. The
   small linear rows below it (inference.cc:137 and :139, the std::map nodes)
   are the same trie's bookkeeping, about 145 B a node.
 * PromptCache::Save (inference.cc:115): "plateau", at 16.0 MiB from request 5:
   the LRU prompt cache, 4 entries x 4 MiB (--cache-mib 16, --state-mib 4).
   Request n saves request n-1's state, so it fills at request 5 and from then
   on evicts one entry per request. Bounded, by design.
 * VmRSS, RssAnon and "tracked (host)": the process as a whole, linear
   because after request 5 only the trie still grows. The header of step 7
   splits RSS into tracked allocations, what malloc holds after free() and
   the untracked rest.
 * --by tag: the shim read each request's X-Request-Id on the wire and tagged
   what was allocated while it was the latest open request (the inference
   thread never reads a socket). Every request still holds its 4 MiB of trie
   nodes; req-13 .. req-$requests hold 8 MiB: their trie nodes plus the cache
   entry saved while they ran, the 4 the cache still keeps.

Try next:
  $diff ${running[4]} $last      # retained between requests 5 and $requests
  $diff ${snapshots[-1]}      # at exit: the cache is freed, the trie leak alone
  $dump --top 3 $last
  $diff --html $demo_dir/live.html $last    # the live view as a page: icicle, RSS bar
  scripts/retain-run -o /tmp/r -- YOUR_PROGRAM ARGS    # kill -USR2 <pid> takes a snapshot
  examples/llm-server-sim/README.md: the server; README.md: configuration, the snapshot format.

The trend of step 6 as a page: the curves per request (the trie climbing above
the prompt cache's flat 16 MiB, each with its verdict; hover a point for its
request). One file, no network access; open it in any browser:
EOF
readlink -f "$report"
