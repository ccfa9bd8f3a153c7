// Memory domains (tools/lib/domain.h) on snapshots built here: a GPU
// allocation made of host memory (Snapshot.gpu_backings) is read as one
// gpu-driver-host row, resident as its block, its block's row gone
// (CountedAllocations), and the per-kind totals move with it
// (CountedTotals); a link to rows that are gone changes nothing; real device
// memory keeps its own domain, resident as allocated, apart from the
// host's total in the diff.
#include "tools/lib/domain.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tools/lib/diff.h"
#include "tools/lib/owner.h"
#include "tools/lib/snapshot_reader.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Row {
  uint64_t address;
  uint64_t size;
  v1::Kind kind;
  uint64_t resident;
  uint64_t birth;
};

// A snapshot with residency holding `rows` (one block, in the order given)
// and per-kind totals summed from them, as the shim writes them.
v1::Snapshot SnapshotOf(const std::vector<Row>& rows) {
  v1::Snapshot snapshot;
  snapshot.mutable_header()->set_format_version(1);
  snapshot.mutable_header()->set_pid(7);
  snapshot.mutable_header()->set_exe_path("/srv/server");
  snapshot.mutable_header()->set_residency_measured(true);
  snapshot.mutable_header()->set_next_birth_sequence(100);
  snapshot.mutable_health();
  v1::AllocationBlock* block = snapshot.add_allocations();
  uint64_t previous = 0;
  for (const Row& row : rows) {
    block->add_address_delta(row.address - previous);
    previous = row.address;
    block->add_size(row.size);
    block->add_kind(row.kind);
    block->add_stack_id(0);
    block->add_birth_sequence(row.birth);
    block->add_birth_time_us(0);
    block->add_thread_id(1);
    block->add_resident_bytes(row.resident);
    v1::KindTotals* totals = nullptr;
    for (v1::KindTotals& t : *snapshot.mutable_totals()) {
      if (t.kind() == row.kind) totals = &t;
    }
    if (totals == nullptr) {
      totals = snapshot.add_totals();
      totals->set_kind(row.kind);
    }
    totals->set_live_bytes(totals->live_bytes() + row.size);
    totals->set_live_count(totals->live_count() + 1);
    totals->set_resident_bytes(totals->resident_bytes() + row.resident);
  }
  return snapshot;
}

void Link(v1::Snapshot& snapshot, v1::Kind kind, uint64_t handle,
          const std::vector<uint64_t>& hosts) {
  v1::GpuBacking* link = snapshot.add_gpu_backings();
  link->set_kind(kind);
  link->set_handle(handle);
  for (uint64_t host : hosts) link->add_host_address(host);
}

const v1::KindTotals* TotalsOf(const std::vector<v1::KindTotals>& totals, v1::Kind kind) {
  for (const v1::KindTotals& t : totals) {
    if (t.kind() == kind) return &t;
  }
  return nullptr;
}

// lavapipe's shape: a 32 MiB block and a 104-byte structure taken inside
// vkAllocateMemory (the structure is not linked: under a page), the
// VkDeviceMemory handle, and a heap block of the program's own.
v1::Snapshot Lavapipe() {
  v1::Snapshot snapshot = SnapshotOf({
      {0x1000, 4096, v1::KIND_HEAP, 4096, 1},
      {0x10000, 104, v1::KIND_GPU_DRIVER_HOST, 104, 2},
      {0x7f0000000000, 32 * kMiB, v1::KIND_GPU_DRIVER_HOST, 16 * kMiB, 3},
      {0xabc0, 32 * kMiB, v1::KIND_VULKAN_DEVICE, 0, 4},
  });
  Link(snapshot, v1::KIND_VULKAN_DEVICE, 0xabc0, {0x7f0000000000});
  return snapshot;
}

TEST(DomainTest, KindsHaveTheirDomains) {
  EXPECT_EQ(DomainName(v1::KIND_HEAP), "host");
  EXPECT_EQ(DomainName(v1::KIND_GPU_DRIVER_HOST), "host");
  EXPECT_EQ(DomainName(v1::KIND_HIP_HOST), "host");
  EXPECT_EQ(DomainName(v1::KIND_CUDA_HOST), "host");
  EXPECT_EQ(DomainName(v1::KIND_METAL), "host");
  EXPECT_EQ(DomainName(v1::KIND_VULKAN_DEVICE), "device:vulkan");
  EXPECT_EQ(DomainName(v1::KIND_HIP_DEVICE), "device:hip");
  EXPECT_EQ(DomainName(v1::KIND_HIP_MANAGED), "device:hip");
  EXPECT_EQ(DomainName(v1::KIND_CUDA_DEVICE), "device:cuda");
  EXPECT_EQ(DomainName(v1::KIND_CUDA_MANAGED), "device:cuda");
  EXPECT_FALSE(IsDeviceKind(v1::KIND_GPU_DRIVER_HOST));
  EXPECT_TRUE(IsDeviceKind(v1::KIND_VULKAN_DEVICE));
}

TEST(DomainTest, ABackedAllocationIsOneHostRowUnderTheProgramsStack) {
  const v1::Snapshot snapshot = Lavapipe();
  EXPECT_EQ(FlattenAllocations(snapshot).size(), 4u) << "the rows as written stay";
  const std::vector<Allocation> rows = CountedAllocations(snapshot);
  ASSERT_EQ(rows.size(), 3u);
  const Allocation* merged = nullptr;
  for (const Allocation& row : rows) {
    EXPECT_NE(row.address, 0x7f0000000000u) << "the host block's row is gone";
    EXPECT_NE(row.kind, v1::KIND_VULKAN_DEVICE);
    if (row.address == 0xabc0) merged = &row;
  }
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->kind, v1::KIND_GPU_DRIVER_HOST);
  EXPECT_EQ(merged->backs_kind, v1::KIND_VULKAN_DEVICE);
  EXPECT_EQ(merged->size, 32 * kMiB);
  EXPECT_EQ(merged->resident_bytes, 16 * kMiB);
  EXPECT_EQ(merged->birth_sequence, 4u) << "the GPU record's birth";
  EXPECT_EQ(merged->backing_bytes, 32 * kMiB);
  EXPECT_EQ(merged->backing_blocks, 1u);

  const std::vector<v1::KindTotals> totals = CountedTotals(snapshot);
  const v1::KindTotals* vulkan = TotalsOf(totals, v1::KIND_VULKAN_DEVICE);
  const v1::KindTotals* driver = TotalsOf(totals, v1::KIND_GPU_DRIVER_HOST);
  ASSERT_NE(vulkan, nullptr);
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(vulkan->live_bytes(), 0u);
  EXPECT_EQ(vulkan->live_count(), 0u);
  EXPECT_EQ(driver->live_bytes(), 32 * kMiB + 104);
  EXPECT_EQ(driver->live_count(), 2u);
  EXPECT_EQ(driver->resident_bytes(), 16 * kMiB + 104);
  // Rows and totals agree.
  uint64_t row_bytes = 0;
  for (const Allocation& row : rows) {
    if (row.kind == v1::KIND_GPU_DRIVER_HOST) row_bytes += row.size;
  }
  EXPECT_EQ(row_bytes, driver->live_bytes());
}

TEST(DomainTest, LinksToRowsThatAreGoneChangeNothing) {
  v1::Snapshot snapshot = Lavapipe();
  Link(snapshot, v1::KIND_VULKAN_DEVICE, 0xdead, {0x10000});  // no such GPU row
  Link(snapshot, v1::KIND_HIP_DEVICE, 0xabc0, {0x10000});     // another kind's handle
  Link(snapshot, v1::KIND_VULKAN_DEVICE, 0xabc0, {0x10000});  // linked twice
  const std::vector<Allocation> rows = CountedAllocations(snapshot);
  ASSERT_EQ(rows.size(), 3u);
  bool structure = false;
  for (const Allocation& row : rows) structure |= row.address == 0x10000;
  EXPECT_TRUE(structure) << "the driver's structure stays its own row";
  v1::Snapshot unmatched = SnapshotOf({{0xabc0, 32 * kMiB, v1::KIND_VULKAN_DEVICE, 0, 4}});
  Link(unmatched, v1::KIND_VULKAN_DEVICE, 0xabc0, {0x7f0000000000});
  const std::vector<Allocation> alone = CountedAllocations(unmatched);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].kind, v1::KIND_VULKAN_DEVICE) << "no host block: device memory";
  EXPECT_EQ(alone[0].resident_bytes, 32 * kMiB) << "device memory: resident as allocated";
}

TEST(DomainTest, TheDiffKeepsDeviceMemoryOutOfTheHostTotal) {
  v1::Snapshot snapshot = Lavapipe();
  v1::Snapshot with_vram = SnapshotOf({
      {0x1000, 4096, v1::KIND_HEAP, 4096, 1},
      {0x5000, 8 * kMiB, v1::KIND_CUDA_DEVICE, 0, 2},
  });
  Symbolizer symbolizer;
  OwnerOptions options;
  options.by = GroupBy::kKind;
  auto owners = OwnerResolver::Create(symbolizer, options);
  ASSERT_TRUE(owners.ok());
  absl::StatusOr<DiffResult> diff = ComputeDiff(nullptr, with_vram, **owners, DiffOptions());
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_EQ(diff->total_retained_bytes, 4096);
  ASSERT_EQ(diff->devices.size(), 1u);
  EXPECT_EQ(diff->devices[0].domain, "device:cuda");
  EXPECT_EQ(diff->devices[0].retained_bytes, static_cast<int64_t>(8 * kMiB));
  ASSERT_EQ(diff->rows.size(), 2u);
  EXPECT_EQ(diff->rows[0].owner.domain, "host") << "host rows first";
  EXPECT_EQ(diff->rows[1].owner.domain, "device:cuda");

  diff = ComputeDiff(nullptr, snapshot, **owners, DiffOptions());
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->devices.empty()) << "lavapipe's memory is the host's";
  EXPECT_EQ(diff->total_retained_bytes, static_cast<int64_t>(4096 + 104 + 16 * kMiB));
  EXPECT_EQ(diff->total_retained.allocated, static_cast<int64_t>(4096 + 104 + 32 * kMiB));
}

}  // namespace
}  // namespace retain::tool
