// live_table_microbench: a deterministic run of LiveTable::Insert and
// LiveTable::Remove for counting their instructions, not a test.
//
// One thread, real glibc heap addresses (malloc'd and freed alongside, so
// the table sees the address reuse a program's heap gives it), in the shape
// of bench/alloc_workload.cc: most blocks freed at once, the rest in a ring
// of medium-lived blocks, a few kept. Six ring sizes take the index through
// its load range (1/2 to 3/4 full). Single-threaded and with the shim not
// preloaded, every run of one build executes the same instructions, so two
// builds compare exactly (bench_alloc_workload under callgrind does not:
// its two threads interleave differently with every change of the code, and
// the table's load, hence its probe lengths, moves by +-15 instructions per
// call). Run:
//
//   cd build/tests/unit/shim
//   valgrind --tool=callgrind --callgrind-out-file=t.out ./live_table_microbench
//   callgrind_annotate --inclusive=yes t.out | grep 'LiveTable::\(Insert\|Remove\)('
//
// and divide by the calls (1,200,000 inserts; 1,198,176 removes).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "record/live_table.h"

namespace retain::shim {
namespace {

LiveTable g_table;
BirthSequence g_sequence;

void Insert(void* block, size_t size) {
  LiveRecord record{};
  record.address = reinterpret_cast<uintptr_t>(block);
  record.size = size;
  record.kind = Kind::kHeap;
  record.stack_id = 7;
  record.thread_id = 1;
  record.birth_time_us = 1000;
  g_table.Insert(record, g_sequence);
}

void Free(void* block) {
  g_table.Remove(reinterpret_cast<uintptr_t>(block));
  free(block);
}

int Run(int operations_per_ring) {
  uint32_t seed = 12345;
  auto random = [&seed] {
    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
  };
  std::vector<void*> kept;
  for (int ring_size : {6000, 9000, 12000, 16000, 21000, 30000}) {
    std::vector<void*> ring(ring_size, nullptr);
    for (int i = 0; i < operations_per_ring; ++i) {
      const size_t size = 16 + random() % 200;
      void* block = malloc(size);
      Insert(block, size);
      const uint32_t lifetime = random() % 8;
      if (lifetime < 5) {  // short: freed at once
        Free(block);
        continue;
      }
      if (lifetime == 7 && random() % 64 == 0) {  // kept to the end
        kept.push_back(block);
        continue;
      }
      void*& slot = ring[random() % ring_size];  // medium: replaces a ring slot
      if (slot != nullptr) Free(slot);
      slot = block;
    }
    for (void* block : ring) {
      if (block != nullptr) Free(block);
    }
  }
  std::printf("live records at the end: %zu\n", g_table.Count());
  return 0;
}

}  // namespace
}  // namespace retain::shim

int main(int argc, char** argv) {
  return retain::shim::Run(argc > 1 ? std::atoi(argv[1]) : 200000);
}
