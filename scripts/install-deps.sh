#!/usr/bin/env bash
# install-deps.sh: installs the Debian 12 packages retain needs to build and
# test, and nothing else. Idempotent: prints nothing and touches nothing when
# every package is already installed; runs `apt-get update` only when
# something is missing; uses sudo only when not root.
#
#   bash scripts/install-deps.sh [--build-only]
#
# --build-only leaves out what only the tests need (scripts/demo.sh uses it).
#
# Environment:
#   RETAIN_SKIP_DEPS=1   do nothing (an offline machine set up by hand).
#
# Exit status: 0 when every package is installed, 1 otherwise.
set -euo pipefail

BUILD_PACKAGES=(
  cmake g++ make pkg-config            # the build
  libunwind-dev                        # the shim's unwinder (headers; the .so is loaded at run time)
  libabsl-dev                          # the tools' base library
  libprotobuf-dev protobuf-compiler    # snapshot schema (tools side)
  libdw-dev elfutils                   # DWARF symbolization in the tools
  zlib1g-dev                           # gzip for the pprof exporter
  libcpp-httplib-dev                   # the llama-server look-alike (examples/llm-server-sim)
  libgtest-dev libgmock-dev            # the test binaries (configured with the rest)
  python3                              # scripts/retain-bisect
  libvulkan-dev                        # Vulkan headers for the shim's layer (never linked) and the loader for its test programs
)
TEST_PACKAGES=(
  git                                  # real programs the transparency tests run (and python3)
  golang-go                            # `go tool pprof`: the pprof test's independent reader
  clang-14 libclang-rt-14-dev          # libFuzzer: the fuzz tests (HTTP sniffer, snapshot reader, rules)
  ninja-build                          # cmake -G Ninja: the project builds with it as with make
  mesa-vulkan-drivers                  # lavapipe, the CPU Vulkan driver the Vulkan layer tests run on
  libamdhip64-dev                      # HIP tests: the real runtime (no GPU needed) and its header
  libpython3.11-testsuite              # CPython's regression tests run under the shim (tests/peer)
  clang-format                         # style.format: the sources are as clang-format 14 writes them
  nodejs                               # js.*: the HTML report's JavaScript units (node:test, no npm package)
  chromium                             # browser.*: the HTML report opened in headless Chromium (DevTools pipe)
  prometheus                           # prometheus.*: promtool test rules on share/prometheus/, and a real Prometheus scraping retain-exporter (tests/prometheus)
  libjemalloc2 libgoogle-perftools4 libmimalloc2.0  # other mallocs preloaded beside the shim (tests/preload/proc_allocators_test.cc)
)

die() {
  echo "install-deps: $*" >&2
  exit 1
}

PACKAGES=("${BUILD_PACKAGES[@]}")
case "${1:-}" in
  "") PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  --build-only) ;;
  *) die "unknown argument '$1' (usage: install-deps.sh [--build-only])" ;;
esac

if [[ "${RETAIN_SKIP_DEPS:-0}" == 1 ]]; then
  exit 0
fi

command -v dpkg-query >/dev/null 2>&1 ||
  die "dpkg-query not found: this script supports Debian 12 (and derivatives) only; install by hand: ${PACKAGES[*]}"

missing=()
for package in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2

as_root=()
if ((EUID != 0)); then
  command -v sudo >/dev/null 2>&1 ||
    die "not root and sudo not found; as root run: apt-get update && apt-get install -y ${missing[*]}"
  as_root=(sudo)
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Runs apt-get as root, its output kept in $log and shown only on failure.
run_apt_get() {
  if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    return 1
  fi
}

command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: ${missing[*]}"
run_apt_get -q update ||
  die "apt-get update failed (network or apt sources?); needed: ${missing[*]}"
run_apt_get -q install -y --no-install-recommends "${missing[@]}" ||
  die "apt-get install failed for: ${missing[*]}"

# Confirm: apt-get can succeed and still leave a package out (held, renamed).
still_missing=()
for package in "${missing[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || still_missing+=("$package")
done
((${#still_missing[@]} == 0)) || die "still not installed after apt-get: ${still_missing[*]}"
echo "install-deps: done" >&2
