// symbolizer_bench: how fast tools/lib/symbolizer is, cold and cached.
// Measured here, by hand (bench/README.md), never asserted in a test; the
// unit test (tests/unit/tools/symbolizer_test.cc) checks only that the caches
// are used.
//
//   build/bench/bench_symbolizer [STACKS=10000] [ALLOCATIONS=1000000]
//
// This process's own modules (DWARF for this file, the tools' library and
// protobuf's generated code; symbol tables only for the shared libraries),
// STACKS stacks of depth 20 over 2 x STACKS random code addresses,
// ALLOCATIONS allocations over those stacks, every frame of every allocation
// symbolized, as a naive caller would. Timed in thread CPU time.
#include <elf.h>
#include <link.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "retain.pb.h"
#include "tests/support/process_modules.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool {
namespace {

// This thread's CPU time: the machine's other load does not count.
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int Run(int stack_count, int allocation_count) {
  constexpr int kDepth = 20;
  const int distinct_addresses = 2 * stack_count;
  v1::Snapshot snapshot;
  retain::test::AddProcessModules(&snapshot);
  // Half the addresses in this executable (DWARF), half in the libraries.
  std::vector<std::pair<uint64_t, uint64_t>> own, others;
  for (const v1::Module& module : snapshot.modules()) {
    for (const v1::Segment& segment : module.executable_segments()) {
      (&module == &snapshot.modules(0) ? own : others).emplace_back(segment.start(), segment.end());
    }
  }
  if (own.empty() || others.empty()) {
    std::fprintf(stderr, "bench_symbolizer: no executable segments found\n");
    return 1;
  }
  std::mt19937_64 random(42);
  auto pick = [&](const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
    const auto& [start, end] = ranges[random() % ranges.size()];
    return start + 1 + random() % (end - start - 1);
  };
  std::vector<uint64_t> pool;
  for (int i = 0; i < distinct_addresses; ++i) pool.push_back(pick(i % 2 == 0 ? own : others));
  std::vector<std::vector<uint64_t>> stacks(stack_count);
  for (auto& stack : stacks) {
    for (int i = 0; i < kDepth; ++i) stack.push_back(pool[random() % pool.size()]);
  }
  std::vector<uint32_t> allocations(allocation_count);
  for (uint32_t& stack : allocations) stack = static_cast<uint32_t>(random() % stack_count);

  Symbolizer symbolizer;
  double start = CpuSeconds();
  size_t with_lines = 0, with_names = 0;
  for (const auto& stack : stacks) {
    for (int i = 0; i < kDepth; ++i) {
      const SymbolizedAddress& address = symbolizer.Symbolize(snapshot, stack[i], i);
      if (!address.frames.empty() && !address.frames[0].function.empty()) ++with_names;
      if (!address.frames.empty() && address.frames[0].line > 0) ++with_lines;
    }
  }
  const double cold = CpuSeconds() - start;

  // What a caller that symbolizes each distinct stack once does.
  start = CpuSeconds();
  size_t stack_frames = 0;
  for (const auto& stack : stacks) {
    for (int i = 0; i < kDepth; ++i) {
      stack_frames += symbolizer.Symbolize(snapshot, stack[i], i).frames.size();
    }
  }
  const double per_stack = CpuSeconds() - start;

  // The same walk over allocations and frames without symbolizing: what
  // the caller's own memory traffic costs.
  start = CpuSeconds();
  uint64_t checksum = 0;
  for (uint32_t id : allocations) {
    const auto& stack = stacks[id];
    for (int i = 0; i < kDepth; ++i) checksum += stack[i];
  }
  const double baseline = CpuSeconds() - start;

  start = CpuSeconds();
  size_t frames = 0;
  for (uint32_t id : allocations) {
    const auto& stack = stacks[id];
    for (int i = 0; i < kDepth; ++i)
      frames += symbolizer.Symbolize(snapshot, stack[i], i).frames.size();
  }
  const double warm = CpuSeconds() - start;

  const double lookups = static_cast<double>(allocation_count) * kDepth;
  std::printf(
      "symbolizer speed (thread CPU time): %d stacks x %d frames (%d distinct addresses) first "
      "pass %.3f s (%zu of %d frames named, %zu with lines); %d allocations x %d frames = %.0f "
      "lookups %.3f s (%.1f ns each; the walk alone %.3f s); cached, once per stack: %.4f s\n",
      stack_count, kDepth, distinct_addresses, cold, with_names, stack_count * kDepth, with_lines,
      allocation_count, kDepth, lookups, warm, warm * 1e9 / lookups, baseline, per_stack);
  const SymbolizerStats stats = symbolizer.Stats();
  std::printf(
      "caches: %llu module files opened, %llu DWARF lookups, %llu address misses of %llu "
      "lookups (checksum %llu, %zu + %zu frames)\n",
      static_cast<unsigned long long>(stats.module_files_opened),
      static_cast<unsigned long long>(stats.dwarf_lookups),
      static_cast<unsigned long long>(stats.address_misses),
      static_cast<unsigned long long>(stats.lookups), static_cast<unsigned long long>(checksum),
      frames, stack_frames);
  return frames > 0 && with_lines > 0 ? 0 : 1;
}

}  // namespace
}  // namespace retain::tool

int main(int argc, char** argv) {
  const int stacks = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int allocations = argc > 2 ? std::atoi(argv[2]) : 1000000;
  if (stacks <= 0 || allocations <= 0) {
    std::fprintf(stderr, "usage: bench_symbolizer [STACKS=10000] [ALLOCATIONS=1000000]\n");
    return 2;
  }
  return retain::tool::Run(stacks, allocations);
}
