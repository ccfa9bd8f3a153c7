// RegionGroups (record/region_groups.h): a region keeps its group, the first
// kGroups regions never share one, and racing threads agree.
#include "record/region_groups.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace retain::shim {
namespace {

constexpr uintptr_t kRegion = uintptr_t{1} << RegionGroups::kRegionShift;

TEST(RegionGroupsTest, EveryAddressOfARegionHasItsGroupForever) {
  auto groups = std::make_unique<RegionGroups>();  // zeroed: value-initialised
  const uintptr_t base = 0x7f3a00000000;
  const uint32_t group = groups->GroupOf(base);
  ASSERT_LT(group, RegionGroups::kGroups);
  for (uintptr_t offset = 0; offset < kRegion; offset += kRegion / 97) {
    EXPECT_EQ(groups->GroupOf(base + offset), group) << offset;
  }
  // Other regions seen meanwhile do not move it.
  for (uintptr_t i = 1; i < 300; ++i) groups->GroupOf(base + i * kRegion);
  EXPECT_EQ(groups->GroupOf(base + kRegion - 1), group);
}

// Whatever the addresses (here: heaps 64 MiB apart, as glibc lays out its
// thread arenas, and far apart ones), the first kGroups regions get one
// group each.
TEST(RegionGroupsTest, TheFirstRegionsGetDistinctGroups) {
  for (uintptr_t stride : {kRegion, kRegion * 1024, kRegion * 3}) {
    auto groups = std::make_unique<RegionGroups>();
    std::set<uint32_t> seen;
    for (uint32_t i = 0; i < RegionGroups::kGroups; ++i) {
      seen.insert(groups->GroupOf(0x7f0000000000 + i * stride + 16));
    }
    EXPECT_EQ(seen.size(), size_t{RegionGroups::kGroups}) << stride;
  }
}

// More regions than the table's probe windows can hold: each still reads
// the same group every time.
TEST(RegionGroupsTest, ManyRegionsStayFixed) {
  auto groups = std::make_unique<RegionGroups>();
  constexpr int kRegions = 5000;
  std::vector<uint32_t> first(kRegions);
  for (int i = 0; i < kRegions; ++i) first[i] = groups->GroupOf(uintptr_t(i) * kRegion);
  for (int i = kRegions - 1; i >= 0; --i) {
    ASSERT_EQ(groups->GroupOf(uintptr_t(i) * kRegion + 4096), first[i]) << i;
    ASSERT_LT(first[i], RegionGroups::kGroups);
  }
}

TEST(RegionGroupsTest, RacingThreadsAgree) {
  auto groups = std::make_unique<RegionGroups>();
  constexpr int kThreads = 4;
  constexpr int kRegions = 64;
  std::vector<std::vector<uint32_t>> answers(kThreads, std::vector<uint32_t>(kRegions));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRegions; ++i) {
        const int region = (i * 7 + t * 13) % kRegions;  // each thread its own order
        answers[t][region] = groups->GroupOf(0x7e0000000000 + uintptr_t(region) * kRegion);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(answers[t], answers[0]);
}

}  // namespace
}  // namespace retain::shim
