// gpu_backing: the host blocks a driver takes inside a GPU allocation call
// are linked to the GPU record when they are its backing (blocks of a page
// or more, together at least half the allocation), never when they are
// bookkeeping; the link ends with the record; the table never allocates.
#include "record/gpu_backing.h"

#include <gtest/gtest.h>

#include <vector>

#include "record/gpu_recorder.h"

namespace retain::shim {
namespace {

constexpr uint8_t kVulkan = static_cast<uint8_t>(GpuApi::kVulkan);

std::vector<GpuBacking> Links() {
  std::vector<GpuBacking> links(kMaxGpuBackings);
  links.resize(CopyGpuBackings(links.data(), links.size()));
  return links;
}

const GpuBacking* LinkOf(const std::vector<GpuBacking>& links, uintptr_t handle) {
  for (const GpuBacking& link : links) {
    if (link.handle == handle) return &link;
  }
  return nullptr;
}

TEST(GpuBackingTest, ABlockTheSizeOfTheAllocationBacksIt) {
  BeginGpuHostNotes();
  NoteGpuHostBlock(0x10000, 104);  // the driver's object structure
  NoteGpuHostBlock(0x7f0000000000, 32 << 20);
  LinkGpuBacking(kVulkan, Kind::kVulkanDevice, 0xa1, 32 << 20);
  const std::vector<GpuBacking> links = Links();
  const GpuBacking* link = LinkOf(links, 0xa1);
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->kind, Kind::kVulkanDevice);
  ASSERT_EQ(link->count, 1) << "the structure (under a page) is not the backing";
  EXPECT_EQ(link->host[0], 0x7f0000000000u);
  EXPECT_EQ(link->host_bytes, (32u << 20) + 104);
  UnlinkGpuBacking(kVulkan, 0xa1);
  EXPECT_EQ(LinkOf(Links(), 0xa1), nullptr);
}

TEST(GpuBackingTest, BookkeepingIsNotABacking) {
  BeginGpuHostNotes();
  NoteGpuHostBlock(0x20000, 64 << 10);  // a discrete GPU's handles: 64 KiB for 256 MiB
  LinkGpuBacking(kVulkan, Kind::kVulkanDevice, 0xa2, 256 << 20);
  EXPECT_EQ(LinkOf(Links(), 0xa2), nullptr);
  // Nothing noted: nothing linked.
  BeginGpuHostNotes();
  LinkGpuBacking(kVulkan, Kind::kVulkanDevice, 0xa3, 4096);
  EXPECT_EQ(LinkOf(Links(), 0xa3), nullptr);
}

TEST(GpuBackingTest, TheLargestBlocksAreKeptAndSmallAllocationsLinkToo) {
  BeginGpuHostNotes();
  for (uintptr_t i = 1; i <= 6; ++i) NoteGpuHostBlock(0x100000 * i, i * 4096);
  LinkGpuBacking(kVulkan, Kind::kVulkanDevice, 0xa4, 40000);
  const std::vector<GpuBacking> links = Links();
  const GpuBacking* link = LinkOf(links, 0xa4);
  ASSERT_NE(link, nullptr);
  ASSERT_EQ(link->count, kMaxBackingBlocks);
  for (int i = 0; i < link->count; ++i) EXPECT_GE(link->host[i], 0x300000u) << "the 4 largest";
  UnlinkGpuBacking(kVulkan, 0xa4);
  // A 1000-byte allocation backed by a 1000-byte block (under a page).
  BeginGpuHostNotes();
  NoteGpuHostBlock(0x30000, 1000);
  LinkGpuBacking(kVulkan, Kind::kVulkanDevice, 0xa5, 1000);
  ASSERT_NE(LinkOf(Links(), 0xa5), nullptr);
  UnlinkGpuBacking(kVulkan, 0xa5);
}

TEST(GpuBackingTest, TheGpuRecordsFreeEndsTheLink) {
  // Through the recorder, as a hook does: notes inside the outermost call.
  {
    GpuCall call;
    ASSERT_TRUE(call.records());
    NoteGpuHostBlock(0x40000, 8 << 20);
    RecordGpuAlloc(GpuApi::kVulkan, 0xa6, 8 << 20, Kind::kVulkanDevice, 0);
  }
  ASSERT_NE(LinkOf(Links(), 0xa6), nullptr);
  LiveRecord taken;
  ASSERT_TRUE(TakeGpuRecord(GpuApi::kVulkan, 0xa6, &taken));
  CompleteGpuFree(GpuApi::kVulkan, taken);
  EXPECT_EQ(LinkOf(Links(), 0xa6), nullptr);
  // The next call starts with no notes of its own.
  {
    GpuCall call;
    RecordGpuAlloc(GpuApi::kVulkan, 0xa7, 8 << 20, Kind::kVulkanDevice, 0);
  }
  EXPECT_EQ(LinkOf(Links(), 0xa7), nullptr);
  ASSERT_TRUE(TakeGpuRecord(GpuApi::kVulkan, 0xa7, &taken));
  CompleteGpuFree(GpuApi::kVulkan, taken);
}

}  // namespace
}  // namespace retain::shim
