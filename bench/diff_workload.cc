// diff_workload: the retain-diff benchmark's subject. Holds about 1M live
// allocations made through ~2,000 distinct call paths (recursion of varying
// depth over a few functions), snapshots, allocates 5% more, snapshots
// again. Run under the shim by bench/diff_bench.sh.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "retain/retain.h"

namespace {

std::vector<void*> g_held;

__attribute__((noinline)) void* Leaf(size_t size) { return malloc(size); }

// Distinct return addresses per (branch, depth): a tree of call paths.
__attribute__((noinline)) void* Walk(int depth, unsigned path, size_t size) {
  if (depth == 0) return Leaf(size);
  void* p = (path & 1) ? Walk(depth - 1, path >> 1, size + 1) : Walk(depth - 1, path >> 1, size);
  __asm__ volatile("" ::: "memory");
  return p;
}

void AllocateRound(size_t count, unsigned seed) {
  for (size_t i = 0; i < count; ++i) {
    unsigned path = (seed + static_cast<unsigned>(i) * 2654435761u) % 2048;
    g_held.push_back(Walk(11, path, 16 + (i % 200)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = argc > 1 ? strtoul(argv[1], nullptr, 10) : 1000000;
  g_held.reserve(count * 2);
  AllocateRound(count, 1);
  RETAIN_SNAPSHOT("before");
  AllocateRound(count / 20, 7);
  RETAIN_SNAPSHOT("after");
  printf("held %zu allocations\n", g_held.size());
  return 0;
}
