// gpu_recorder: GPU records live in their API's own table, keyed by handle;
// only the outermost GPU call on a thread records; host allocations made
// inside a GPU call are the driver's (Kind::kGpuDriverHost), not the heap's.
#include "record/gpu_recorder.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/thread_state.h"
#include "record/recorder.h"

namespace retain::shim {
namespace {

KindCounters CountersOf(LiveTable& table, Kind kind) {
  KindCounters counters[kKindCount] = {};
  table.SumCounters(counters);
  return counters[KindIndex(kind)];
}

std::vector<LiveRecord> CopyAll(LiveTable& table) {
  table.LockAll();
  std::vector<LiveRecord> records(table.CountLocked());
  records.resize(table.CopyLocked(records.data()));
  table.UnlockAll();
  return records;
}

TEST(GpuRecorderTest, RecordsInTheApisOwnTableWithKindAndFlags) {
  RecordGpuAlloc(GpuApi::kVulkan, 0x1000, 64 << 20, Kind::kVulkanDevice, 0x0103);
  // The same handle value under another API is another allocation.
  RecordGpuAlloc(GpuApi::kHip, 0x1000, 4096, Kind::kHipDevice, 0);

  std::vector<LiveRecord> vulkan = CopyAll(GpuTable(GpuApi::kVulkan));
  ASSERT_EQ(vulkan.size(), 1u);
  EXPECT_EQ(vulkan[0].address, 0x1000u);
  EXPECT_EQ(vulkan[0].size, uint64_t{64} << 20);
  EXPECT_EQ(vulkan[0].kind, Kind::kVulkanDevice);
  EXPECT_EQ(vulkan[0].flags, 0x0103);
  EXPECT_LT(vulkan[0].birth_sequence, NextBirthSequence());
  EXPECT_EQ(vulkan[0].thread_id, CurrentThreadId());
  ASSERT_EQ(CopyAll(GpuTable(GpuApi::kHip)).size(), 1u);
  EXPECT_EQ(CountersOf(GpuTable(GpuApi::kHip), Kind::kHipDevice).live_bytes, 4096u);

  LiveRecord taken;
  ASSERT_TRUE(TakeGpuRecord(GpuApi::kVulkan, 0x1000, &taken));
  EXPECT_TRUE(CopyAll(GpuTable(GpuApi::kVulkan)).empty());
  // The real release failed: the record comes back unchanged.
  RestoreGpuRecord(GpuApi::kVulkan, taken);
  ASSERT_EQ(CopyAll(GpuTable(GpuApi::kVulkan)).size(), 1u);
  ASSERT_TRUE(TakeGpuRecord(GpuApi::kVulkan, 0x1000, &taken));
  CompleteGpuFree(GpuApi::kVulkan, taken);
  KindCounters vulkan_counters = CountersOf(GpuTable(GpuApi::kVulkan), Kind::kVulkanDevice);
  EXPECT_EQ(vulkan_counters.live_bytes, 0u);
  EXPECT_EQ(vulkan_counters.allocated_bytes, uint64_t{64} << 20);
  EXPECT_EQ(vulkan_counters.freed_bytes, uint64_t{64} << 20);

  // Releasing what was never recorded is counted, not an error.
  const uint64_t unknown_before = UnknownGpuFrees();
  EXPECT_FALSE(TakeGpuRecord(GpuApi::kVulkan, 0x1000, &taken));
  EXPECT_EQ(UnknownGpuFrees(), unknown_before + 1);
  ASSERT_TRUE(TakeGpuRecord(GpuApi::kHip, 0x1000, &taken));
  CompleteGpuFree(GpuApi::kHip, taken);
}

// The Darwin build's Metal hooks (shim/src/hooks/darwin/metal_swizzle.mm) record
// in their own table and release from a swizzled dealloc, which also runs
// for objects never recorded: that must count nothing.
TEST(GpuRecorderTest, MetalTableAndReleaseOfWhatMayNotBeRecorded) {
  const uint64_t unknown_before = UnknownGpuFrees();
  EXPECT_FALSE(RemoveGpuRecordIfAny(GpuApi::kMetal, 0x2000));
  EXPECT_EQ(UnknownGpuFrees(), unknown_before);

  RecordGpuAlloc(GpuApi::kMetal, 0x2000, 1 << 20, Kind::kMetal, 0x0020);
  ASSERT_EQ(CopyAll(GpuTable(GpuApi::kMetal)).size(), 1u);
  EXPECT_TRUE(CopyAll(GpuTable(GpuApi::kVulkan)).empty());
  EXPECT_TRUE(RemoveGpuRecordIfAny(GpuApi::kMetal, 0x2000));
  EXPECT_FALSE(RemoveGpuRecordIfAny(GpuApi::kMetal, 0x2000));  // dealloc seen twice
  KindCounters counters = CountersOf(GpuTable(GpuApi::kMetal), Kind::kMetal);
  EXPECT_EQ(counters.live_bytes, 0u);
  EXPECT_EQ(counters.allocated_bytes, uint64_t{1} << 20);
  EXPECT_EQ(counters.freed_bytes, uint64_t{1} << 20);
  EXPECT_EQ(UnknownGpuFrees(), unknown_before);
}

TEST(GpuRecorderTest, OnlyTheOutermostCallRecords) {
  ASSERT_EQ(g_thread.gpu_depth, 0u);
  {
    GpuCall outer;
    EXPECT_TRUE(outer.records());
    {
      GpuCall inner;  // hipHostAlloc reaching hipHostMalloc
      EXPECT_FALSE(inner.records());
    }
    EXPECT_EQ(g_thread.gpu_depth, 1u);
  }
  EXPECT_EQ(g_thread.gpu_depth, 0u);
  {
    BusyScope shim_code;  // the shim's own calls never record
    GpuCall call;
    EXPECT_FALSE(call.records());
  }
}

TEST(GpuRecorderTest, HostAllocationsInsideAGpuCallAreTheDrivers) {
  EXPECT_EQ(HostKind(Kind::kHeap), Kind::kHeap);
  EXPECT_EQ(HostKind(Kind::kMmapAnon), Kind::kMmapAnon);
  GpuCall call;
  EXPECT_EQ(HostKind(Kind::kHeap), Kind::kGpuDriverHost);
  EXPECT_EQ(HostKind(Kind::kMmapAnon), Kind::kGpuDriverHost);
  EXPECT_EQ(HostKind(Kind::kMmapFile), Kind::kGpuDriverHost);
}

}  // namespace
}  // namespace retain::shim
