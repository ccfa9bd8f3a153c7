#!/usr/bin/env bash
# cpython_suite.sh: runs one module of CPython's regression tests (Debian
# package libpython3.11-testsuite) under libretain.so and checks that it
# passes, as it does without the shim, and that the shim really was active.
#
#   cpython_suite.sh --lib LIBRETAIN --module test_os [--python PY]
#                    [--dump RETAIN_DUMP] [--limit SECONDS] [--baseline]
#                    [-- REGRTEST_ARGS...]      e.g. -- -i test_foo -m 'Test*'
#
# The module runs as `PY -m test -v MODULE REGRTEST_ARGS` (in-process, one
# interpreter; no -u: resource-gated tests such as network stay off) with
# LD_PRELOAD=LIBRETAIN and RETAIN_DIR, TMPDIR in a fresh temporary directory,
# removed afterwards. Checks, in order:
#   1. the exit status of `python -m test` is 0 (every selected test passed);
#   2. RETAIN_DIR holds the exit snapshot of that interpreter
#      (python3.11.<pid>.<n>.pb, pid taken from regrtest's "== cwd:" line), and,
#      with --dump, retain-dump reads it and finds that pid and trigger exit.
# --limit (default 540 s) bounds the whole run: past it every process of the
# run (its process group, forked children included) gets SIGTERM, then SIGKILL
# 5 s later, and the run fails. --baseline runs without the shim (no check 2),
# to compare by hand.
#
# Exit status: 0 pass, 1 fail, 77 skipped (the test suite is not installed:
# no test.libregrtest),
# 2 usage error.
set -uo pipefail

lib="" module="" python=/usr/bin/python3 dump="" limit=540 baseline=0
regrtest_args=()
usage() {
  echo "usage: cpython_suite.sh --lib LIBRETAIN --module MODULE [--python PY] [--dump RETAIN_DUMP] [--limit S] [--baseline] [-- ARGS...]" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --lib) lib=${2:-}; shift 2 || usage ;;
    --module) module=${2:-}; shift 2 || usage ;;
    --python) python=${2:-}; shift 2 || usage ;;
    --dump) dump=${2:-}; shift 2 || usage ;;
    --limit) limit=${2:-}; shift 2 || usage ;;
    --baseline) baseline=1; shift ;;
    --) shift; regrtest_args=("$@"); break ;;
    *) usage ;;
  esac
done
[[ -n "$module" ]] || usage
((baseline)) || [[ -n "$lib" ]] || usage
[[ "$limit" =~ ^[0-9]+$ ]] || usage

if [[ ! -x "$python" ]] || ! "$python" -c "import test.libregrtest" 2>/dev/null; then
  echo "SKIP: $python has no test suite (install libpython3.11-testsuite)"
  exit 77
fi
if ! "$python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('test.$module') is None)"; then
  echo "FAIL: $python's test suite has no module $module" >&2
  exit 1
fi
if ((!baseline)) && [[ ! -f "$lib" ]]; then
  echo "FAIL: $lib not found" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/retain-cpython.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
mkdir "$work/snapshots" "$work/tmp" "$work/cwd"
log=$work/regrtest.log

preload=()
((baseline)) || preload=(LD_PRELOAD="$lib" RETAIN_DIR="$work/snapshots")
echo "running: ${preload[*]} $python -m test -v $module ${regrtest_args[*]}"
start=$SECONDS
# timeout (not --foreground) runs the command in its own process group and
# signals the whole group: a forked grandchild that hangs goes too.
(cd "$work/cwd" && exec timeout -k 5 "$limit" env TMPDIR="$work/tmp" "${preload[@]}" \
  "$python" -m test -v "$module" "${regrtest_args[@]}") >"$log" 2>&1 </dev/null &
group=$!
wait "$group"
rc=$?
# Whatever of the run is still alive (a forked child that never exited) is
# in timeout's process group: end it, so nothing outlives the test.
kill -KILL -- "-$group" 2>/dev/null
elapsed=$((SECONDS - start))
cat "$log"
echo "----"
echo "python -m test exited $rc after ${elapsed}s"

status=0
if ((rc == 124 || rc == 137)); then
  echo "FAIL: $module did not finish within ${limit}s (killed)"
  status=1
elif ((rc != 0)); then
  echo "FAIL: $module: python -m test exited $rc"
  grep -E '^(FAIL|ERROR): ' "$log" | sed 's/^/  /'
  status=1
fi

if ((!baseline && (rc == 124 || rc == 137))); then
  echo "snapshot check skipped: the run was killed (no exit snapshot is written then)"
elif ((!baseline)); then
  pid=$(sed -n 's/^== cwd: .*test_python_\([0-9]*\).*/\1/p' "$log" | head -n 1)
  count=$(find "$work/snapshots" -name '*.pb' | wc -l)
  echo "snapshots written: $count"
  if [[ -z "$pid" ]]; then
    echo "FAIL: no '== cwd: ...test_python_<pid>' line: cannot tell regrtest's pid"
    status=1
  else
    snapshot=$(find "$work/snapshots" -name "python3*.$pid.*.pb" -size +0 | sort | tail -n 1)
    if [[ -z "$snapshot" ]]; then
      echo "FAIL: no snapshot of the regrtest process (pid $pid) in RETAIN_DIR: the shim was not active"
      ls -la "$work/snapshots" | head -n 20
      status=1
    elif [[ -n "$dump" ]]; then
      if ! out=$("$dump" "$snapshot" 2>&1); then
        echo "FAIL: retain-dump cannot read $snapshot:"
        echo "$out" | head -n 5
        status=1
      elif ! grep -Eq "^pid +$pid " <<<"$out" || ! grep -Eq "trigger exit" <<<"$out"; then
        echo "FAIL: $snapshot is not the exit snapshot of pid $pid:"
        echo "$out" | head -n 8
        status=1
      else
        echo "exit snapshot of pid $pid: $(basename "$snapshot") (read by retain-dump)"
      fi
    else
      echo "exit snapshot of pid $pid: $(basename "$snapshot")"
    fi
  fi
fi

((status == 0)) && echo "PASS: $module"
exit "$status"
