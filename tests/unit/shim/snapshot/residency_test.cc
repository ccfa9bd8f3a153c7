// The residency meter (snapshot/residency.h) on memory this test maps: pages
// touched in part, bytes apportioned at a row's partial pages, a hole
// (unmapped pages: the rest of the row counts 0), a freed range, a row
// larger than one mincore window, and many rows served by one window; each
// by mincore and by the pagemap alone (as under a seccomp filter).
#include "snapshot/residency.h"

#include <gtest/gtest.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace retain::shim {
namespace {

const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));

char* MapAnon(size_t bytes, int prot = PROT_READ | PROT_WRITE) {
  void* p = mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return static_cast<char*>(p);
}

uintptr_t At(const char* p) { return reinterpret_cast<uintptr_t>(p); }

// The parameter: measured from the pagemap alone.
class ResidencyMeterTest : public testing::TestWithParam<bool> {
 protected:
  bool Pagemap() const { return GetParam(); }
  void Start(ResidencyMeter& meter) {
    if (Pagemap()) meter.UsePagemapOnly();
    ASSERT_TRUE(meter.Begin());
  }
};

TEST_P(ResidencyMeterTest, CountsTouchedPagesAndApportionsPartialOnes) {
  char* region = MapAnon(16 * kPage);
  region[0] = region[kPage] = region[5 * kPage] = 1;
  ResidencyMeter meter;
  Start(meter);
  EXPECT_EQ(meter.Measure(At(region), 16 * kPage).resident, 3 * kPage);
  // 100 bytes into page 0, through 100 bytes of page 2 (not resident).
  EXPECT_EQ(meter.Measure(At(region) + 100, 2 * kPage).resident, 2 * kPage - 100);
  // Two small rows on one page: each counts its own bytes.
  EXPECT_EQ(meter.Measure(At(region) + 8, 24).resident, 24u);
  EXPECT_EQ(meter.Measure(At(region) + 32, 40).resident, 40u);
  EXPECT_EQ(meter.Measure(At(region) + 2 * kPage, 3 * kPage).resident, 0u);
  EXPECT_EQ(meter.Measure(At(region), 0).resident, 0u);
  EXPECT_EQ(meter.Measure(At(region), 16 * kPage).swapped, 0u);
  munmap(region, 16 * kPage);
}

TEST_P(ResidencyMeterTest, AHoleEndsTheRowAndAFreedRangeCountsZero) {
  char* region = MapAnon(8 * kPage);
  memset(region, 1, 8 * kPage);
  ASSERT_EQ(munmap(region + 3 * kPage, 2 * kPage), 0);
  char* freed = MapAnon(4 * kPage);
  memset(freed, 1, 4 * kPage);
  ASSERT_EQ(munmap(freed, 4 * kPage), 0);
  ResidencyMeter meter;
  Start(meter);
  // mincore stops at the hole; the pagemap reads it as not present and
  // goes on (residency.h).
  EXPECT_EQ(meter.Measure(At(region), 8 * kPage).resident, (Pagemap() ? 6 : 3) * kPage);
  EXPECT_EQ(meter.Measure(At(region) + 5 * kPage, 3 * kPage).resident, 3 * kPage);
  EXPECT_EQ(meter.Measure(At(freed), 4 * kPage).resident, 0u);
  munmap(region, 3 * kPage);
  munmap(region + 5 * kPage, 3 * kPage);
}

TEST_P(ResidencyMeterTest, AReservationLargerThanAWindowCountsWhatWasCommitted) {
  const size_t window_bytes = ResidencyMeter::kWindowPages * kPage;
  const size_t size = window_bytes + window_bytes / 2;
  char* reserve = MapAnon(size, PROT_NONE);
  char* committed = reserve + size - (1 << 20);
  ASSERT_EQ(mprotect(committed, 1 << 20, PROT_READ | PROT_WRITE), 0);
  memset(committed, 1, 1 << 20);
  ResidencyMeter meter;
  Start(meter);
  EXPECT_EQ(meter.Measure(At(reserve), size).resident, uint64_t{1} << 20);
  EXPECT_GE(meter.calls(), 2u);
  EXPECT_LE(meter.calls(), 3u);
  munmap(reserve, size);
}

TEST_P(ResidencyMeterTest, RowsInAddressOrderShareOneWindow) {
  char* region = MapAnon(256 * kPage);
  memset(region, 1, 256 * kPage);
  ResidencyMeter meter;
  Start(meter);
  uint64_t resident = 0;
  for (size_t offset = 0; offset + 48 <= 256 * kPage; offset += 48) {
    resident += meter.Measure(At(region) + offset, 48).resident;
  }
  EXPECT_EQ(resident, (256 * kPage / 48) * 48);
  EXPECT_EQ(meter.calls(), 1u);
  munmap(region, 256 * kPage);
}

INSTANTIATE_TEST_SUITE_P(MincoreAndPagemap, ResidencyMeterTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "pagemap" : "mincore";
                         });

TEST(ResidencyKindsTest, OnlyHostKindsAreMeasured) {
  EXPECT_TRUE(MeasuresResidency(Kind::kHeap));
  EXPECT_TRUE(MeasuresResidency(Kind::kMmapAnon));
  EXPECT_TRUE(MeasuresResidency(Kind::kMmapFile));
  EXPECT_TRUE(MeasuresResidency(Kind::kGpuDriverHost));
  EXPECT_FALSE(MeasuresResidency(Kind::kCudaDevice));
  EXPECT_FALSE(MeasuresResidency(Kind::kHipDevice));
  EXPECT_FALSE(MeasuresResidency(Kind::kVulkanDevice));
}

}  // namespace
}  // namespace retain::shim
