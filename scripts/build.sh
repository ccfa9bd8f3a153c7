#!/usr/bin/env bash
# build.sh: configures (RelWithDebInfo) and builds retain.
#
#   bash scripts/build.sh [TARGET...]
#
# With no TARGET builds everything (the shim, the tools, the tests, the
# examples); otherwise only the named targets (e.g. retain retain-dump).
#
# Environment:
#   RETAIN_BUILD_DIR   build directory (default: build, under the repository root)
#   RETAIN_JOBS        parallel jobs (default: nproc)
#
# Exit status: cmake's (0 when built).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

build_dir=${RETAIN_BUILD_DIR:-build}
jobs=${RETAIN_JOBS:-$(nproc)}

targets=()
for target in "$@"; do
  targets+=(--target "$target")
done

# Configure every time (quick when nothing changed), so a build directory
# whose earlier configure failed is repaired. cmake's errors go to stderr.
echo "build.sh: configuring $build_dir (RelWithDebInfo)" >&2
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
