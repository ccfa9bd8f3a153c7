#!/usr/bin/env bash
# test.sh: the test command. Installs what is missing (Debian 12), builds
# everything, then runs every test with ctest.
#
#   bash scripts/test.sh [CTEST_ARGS...]     e.g. -R Fork, -L preload, -V
#
# Environment: RETAIN_BUILD_DIR (default build), RETAIN_JOBS, RETAIN_SKIP_DEPS=1
# (see build.sh and install-deps.sh).
#
# Exit status: ctest's (0 when every test passed); non-zero earlier if the
# dependencies cannot be installed or the build fails.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

bash scripts/install-deps.sh
bash scripts/build.sh

exec ctest --test-dir "${RETAIN_BUILD_DIR:-build}" --output-on-failure -j2 "$@"
