// free_cost: what a free costs, timed apart from the allocations (issue 17's
// "frees <= 30 ns added"; bench/free_cost_bench.sh runs it with and without
// the shim).
//
//   bench_free_cost [ROUNDS=2000] [LIVE=4096]
//
// Each round allocates LIVE blocks of 16-256 bytes (untimed: under the shim
// that is where the stack walks happen), then frees them in a shuffled order
// with the clock read only around the whole free loop; one thread. Prints
//   frees N
//   ns_per_free X      (the median round, in ns per free)
//   ns_per_free_min X  (the fastest round)
// The live set is a server's working set (a few thousand blocks), so the
// shim's table stays in the CPU's caches as it does under a real load; the
// frees are out of allocation order, as they mostly are.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <vector>

namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

struct Rng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 2000;
  const long live = argc > 2 ? atol(argv[2]) : 4096;
  if (rounds <= 0 || live <= 0) {
    fprintf(stderr, "usage: bench_free_cost [ROUNDS>0] [LIVE>0]\n");
    return 2;
  }
  std::vector<void*> blocks(static_cast<size_t>(live));
  std::vector<double> per_free;
  per_free.reserve(static_cast<size_t>(rounds));
  Rng rng;
  for (long round = 0; round < rounds; ++round) {
    for (auto& block : blocks) block = malloc(16 + rng.Next() % 241);
    for (size_t i = blocks.size() - 1; i > 0; --i) {
      std::swap(blocks[i], blocks[rng.Next() % (i + 1)]);
    }
    const uint64_t start = NowNs();
    for (void* block : blocks) free(block);
    const uint64_t elapsed = NowNs() - start;
    per_free.push_back(static_cast<double>(elapsed) / static_cast<double>(live));
  }
  std::vector<double> sorted = per_free;
  std::sort(sorted.begin(), sorted.end());
  printf("frees %ld\n", rounds * live);
  printf("ns_per_free %.1f\n", sorted[sorted.size() / 2]);
  printf("ns_per_free_min %.1f\n", sorted.front());
  return 0;
}
