// Memory domains (tools/lib/domain.h) on snapshots built here: a GPU
// allocation made of host memory (Snapshot.gpu_backings) is read as one
// gpu-driver-host row, resident as its block, its block's row gone
// (CountedAllocations), and the per-kind totals move with it
// (CountedTotals); a link to rows that are gone changes nothing; real device
// memory keeps its own domain, resident as allocated, apart from the
// host's total in the diff; and device memory is a domain per device
// (Snapshot.devices) in the totals, the diff and the trend, or per API
// where rows name no device (older snapshots).
#include "tools/lib/domain.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tools/lib/diff.h"
#include "tools/lib/owner.h"
#include "tools/lib/snapshot_reader.h"
#include "tools/lib/symbolizer.h"
#include "tools/lib/trend.h"

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

namespace devices {

struct DeviceRow {
  uint64_t address;
  uint64_t size;
  v1::Kind kind;
  uint32_t device;  // Device.id; 0: none
  uint64_t birth;
};

void AddDevice(v1::Snapshot& snapshot, uint32_t id, v1::DeviceApi api, uint32_t index,
               const std::string& name, const std::string& uuid) {
  v1::Device* device = snapshot.add_devices();
  device->set_id(id);
  device->set_api(api);
  device->set_index(index);
  device->set_name(name);
  device->set_uuid(uuid);
}

// Two CUDA devices (ids 1 and 2 are ordinals 1 and 0: ids are the shim's
// order of first sight, the domain is the API's number), a Vulkan device,
// and `rows` with their device column.
v1::Snapshot WithDevices(const std::vector<DeviceRow>& rows, uint32_t sequence = 1) {
  std::vector<Row> plain;
  for (const DeviceRow& r : rows) plain.push_back({r.address, r.size, r.kind, 0, r.birth});
  v1::Snapshot snapshot = SnapshotOf(plain);
  snapshot.mutable_header()->set_sequence(sequence);
  snapshot.mutable_header()->set_next_birth_sequence(100 * sequence);
  for (const DeviceRow& r : rows) snapshot.mutable_allocations(0)->add_device(r.device);
  AddDevice(snapshot, 1, v1::DEVICE_API_CUDA, 1, "NVIDIA H200", std::string(16, '\x11'));
  AddDevice(snapshot, 2, v1::DEVICE_API_CUDA, 0, "NVIDIA H200", std::string(16, '\x22'));
  AddDevice(snapshot, 3, v1::DEVICE_API_VULKAN, 0, "llvmpipe (LLVM 15.0.6, 256 bits)", "");
  return snapshot;
}

const DomainKindTotals* Find(const std::vector<DomainKindTotals>& totals, v1::Kind kind,
                             const std::string& domain) {
  for (const DomainKindTotals& t : totals) {
    if (t.totals.kind() == kind && t.domain == domain) return &t;
  }
  return nullptr;
}

TEST(DeviceDomainTest, ARowsDomainIsItsDevicesOrItsApis) {
  const v1::Snapshot snapshot = WithDevices({});
  EXPECT_EQ(DomainName(snapshot, v1::KIND_CUDA_DEVICE, 1), "device:cuda:1");
  EXPECT_EQ(DomainName(snapshot, v1::KIND_CUDA_MANAGED, 2), "device:cuda:0");
  EXPECT_EQ(DomainName(snapshot, v1::KIND_VULKAN_DEVICE, 3), "device:vulkan:0");
  EXPECT_EQ(DomainName(snapshot, v1::KIND_CUDA_DEVICE, 0), "device:cuda") << "no device";
  EXPECT_EQ(DomainName(snapshot, v1::KIND_CUDA_DEVICE, 9), "device:cuda") << "not listed";
  EXPECT_EQ(DomainName(snapshot, v1::KIND_CUDA_HOST, 1), "host") << "pinned memory is the host's";
  EXPECT_EQ(DomainName(snapshot, v1::KIND_HEAP, 0), "host");
  ASSERT_NE(DeviceOfDomain(snapshot, "device:cuda:0"), nullptr);
  EXPECT_EQ(DeviceOfDomain(snapshot, "device:cuda:0")->id(), 2u);
  EXPECT_EQ(DeviceOfDomain(snapshot, "device:cuda"), nullptr);
  EXPECT_EQ(DeviceOfDomain(snapshot, "host"), nullptr);
  EXPECT_EQ(FormatUuid(
                std::string("\x5f\x0d\x3c\x1e\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c", 16),
                v1::DEVICE_API_CUDA),
            "GPU-5f0d3c1e-0102-0304-0506-0708090a0b0c");
  EXPECT_EQ(FormatUuid(std::string(16, '\0'), v1::DEVICE_API_VULKAN),
            "00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(FormatUuid("short", v1::DEVICE_API_CUDA), "");
  EXPECT_EQ(DeviceDescription(snapshot.devices(2)), "llvmpipe (LLVM 15.0.6, 256 bits)");
  EXPECT_EQ(DeviceDescription(snapshot.devices(1)),
            "NVIDIA H200, GPU-22222222-2222-2222-2222-222222222222");
}

TEST(DeviceDomainTest, DomainsAreOrderedHostApiThenDevicesByNumber) {
  std::vector<std::string> domains = {"device:cuda:10", "device:vulkan:0", "device:cuda:2", "host",
                                      "device:cuda",    "device:cuda:0",   "device:hip:1"};
  std::sort(domains.begin(), domains.end(), &DomainLess);
  EXPECT_EQ(domains,
            (std::vector<std::string>{"host", "device:cuda", "device:cuda:0", "device:cuda:2",
                                      "device:cuda:10", "device:hip:1", "device:vulkan:0"}));
  EXPECT_FALSE(DomainLess("host", "host"));
}

TEST(DeviceDomainTest, TotalsSplitPerDeviceAndTheRestStaysWithTheApi) {
  v1::Snapshot snapshot = WithDevices({
      {0x1000, 4096, v1::KIND_HEAP, 0, 1},
      {0x10000, 64 * kMiB, v1::KIND_CUDA_DEVICE, 2, 2},
      {0x20000, 32 * kMiB, v1::KIND_CUDA_DEVICE, 1, 3},
      {0x30000, 8 * kMiB, v1::KIND_CUDA_MANAGED, 1, 4},
      {0x40000, 1 * kMiB, v1::KIND_CUDA_HOST, 1, 5},
  });
  // The shim counted 2 MiB more cuda-device memory than its rows hold
  // (records it dropped): that stays with the API.
  for (v1::KindTotals& t : *snapshot.mutable_totals()) {
    if (t.kind() == v1::KIND_CUDA_DEVICE) {
      t.set_live_bytes(t.live_bytes() + 2 * kMiB);
      t.set_live_count(t.live_count() + 1);
    }
  }
  const std::vector<DomainKindTotals> totals = CountedTotalsByDomain(snapshot);
  const DomainKindTotals* zero = Find(totals, v1::KIND_CUDA_DEVICE, "device:cuda:0");
  const DomainKindTotals* one = Find(totals, v1::KIND_CUDA_DEVICE, "device:cuda:1");
  const DomainKindTotals* rest = Find(totals, v1::KIND_CUDA_DEVICE, "device:cuda");
  const DomainKindTotals* managed = Find(totals, v1::KIND_CUDA_MANAGED, "device:cuda:1");
  ASSERT_NE(zero, nullptr);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(rest, nullptr);
  ASSERT_NE(managed, nullptr);
  EXPECT_EQ(zero->totals.live_bytes(), 64 * kMiB);
  EXPECT_EQ(zero->totals.resident_bytes(), 64 * kMiB) << "device memory: resident as allocated";
  EXPECT_EQ(one->totals.live_bytes(), 32 * kMiB);
  EXPECT_EQ(one->totals.live_count(), 1u);
  EXPECT_EQ(rest->totals.live_bytes(), 2 * kMiB);
  EXPECT_EQ(rest->totals.live_count(), 1u);
  EXPECT_EQ(managed->totals.live_bytes(), 8 * kMiB);
  EXPECT_NE(Find(totals, v1::KIND_CUDA_HOST, "host"), nullptr);
  EXPECT_EQ(Find(totals, v1::KIND_CUDA_MANAGED, "device:cuda"), nullptr)
      << "nothing left for the API: no domain of its own";

  // Without a device column (an older shim's snapshot): one domain per API.
  v1::Snapshot old = snapshot;
  old.clear_devices();
  old.mutable_allocations(0)->clear_device();
  const std::vector<DomainKindTotals> before = CountedTotalsByDomain(old);
  const DomainKindTotals* api = Find(before, v1::KIND_CUDA_DEVICE, "device:cuda");
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->totals.live_bytes(), 98 * kMiB);
  EXPECT_EQ(Find(before, v1::KIND_CUDA_DEVICE, "device:cuda:0"), nullptr);
}

TEST(DeviceDomainTest, TheDiffHasADomainPerDevice) {
  const v1::Snapshot snapshot = WithDevices({
      {0x1000, 4096, v1::KIND_HEAP, 0, 1},
      {0x10000, 64 * kMiB, v1::KIND_CUDA_DEVICE, 2, 2},
      {0x20000, 32 * kMiB, v1::KIND_CUDA_DEVICE, 1, 3},
      {0x30000, 8 * kMiB, v1::KIND_CUDA_MANAGED, 1, 4},
      {0x40000, 1 * kMiB, v1::KIND_CUDA_HOST, 1, 5},
  });
  Symbolizer symbolizer;
  OwnerOptions options;
  options.by = GroupBy::kKind;
  auto owners = OwnerResolver::Create(symbolizer, options);
  ASSERT_TRUE(owners.ok());
  absl::StatusOr<DiffResult> diff = ComputeDiff(nullptr, snapshot, **owners, DiffOptions());
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_EQ(diff->total_retained.allocated, static_cast<int64_t>(4096 + kMiB)) << "host only";
  ASSERT_EQ(diff->devices.size(), 2u);
  EXPECT_EQ(diff->devices[0].domain, "device:cuda:0");
  EXPECT_EQ(diff->devices[0].retained_bytes, static_cast<int64_t>(64 * kMiB));
  EXPECT_EQ(diff->devices[0].name, "NVIDIA H200");
  EXPECT_EQ(diff->devices[0].uuid, "GPU-22222222-2222-2222-2222-222222222222");
  EXPECT_EQ(diff->devices[1].domain, "device:cuda:1");
  EXPECT_EQ(diff->devices[1].retained_bytes, static_cast<int64_t>(40 * kMiB));
  // Rows: host first, then device 0's, then device 1's two kinds.
  ASSERT_EQ(diff->rows.size(), 5u);
  EXPECT_EQ(diff->rows[2].owner.domain, "device:cuda:0");
  EXPECT_EQ(diff->rows[2].owner.key, "cuda-device @device:cuda:0");
  EXPECT_EQ(diff->rows[3].owner.domain, "device:cuda:1");
  EXPECT_EQ(diff->rows[3].owner.key, "cuda-device @device:cuda:1");
  EXPECT_EQ(diff->rows[4].owner.key, "cuda-managed @device:cuda:1");
  // The stack shares (folded, pprof) carry the device.
  int64_t on[3] = {0, 0, 0};
  for (const StackShare& share : diff->retained_stacks) {
    if (share.kind == v1::KIND_CUDA_DEVICE || share.kind == v1::KIND_CUDA_MANAGED) {
      ASSERT_LT(share.device, 3u);
      on[share.device] += share.bytes;
    }
  }
  EXPECT_EQ(on[2], static_cast<int64_t>(64 * kMiB));
  EXPECT_EQ(on[1], static_cast<int64_t>(40 * kMiB));
  // The per-kind growth is per device.
  std::map<std::string, int64_t> tracked;
  for (const KindGrowth& g : diff->rss.tracked) {
    if (IsDeviceKind(g.kind)) tracked[g.domain] += g.live_bytes_growth;
  }
  EXPECT_EQ(tracked, (std::map<std::string, int64_t>{{"device:cuda:0", 64 * kMiB},
                                                     {"device:cuda:1", 40 * kMiB}}));
}

TEST(DeviceDomainTest, AnExactDiffAndATrendPerDevice) {
  // Device 0 holds 64 MiB throughout; device 1 gains 16 MiB a snapshot.
  std::vector<v1::Snapshot> series;
  for (uint32_t s = 1; s <= 5; ++s) {
    std::vector<DeviceRow> rows = {{0x10000, 64 * kMiB, v1::KIND_CUDA_DEVICE, 2, 1}};
    for (uint32_t i = 1; i <= s; ++i) {
      rows.push_back({0x100000 * i, 16 * kMiB, v1::KIND_CUDA_DEVICE, 1, 100 * i - 50});
    }
    series.push_back(WithDevices(rows, s));
  }
  Symbolizer symbolizer;
  auto owners = OwnerResolver::Create(symbolizer, OwnerOptions());
  ASSERT_TRUE(owners.ok());
  absl::StatusOr<DiffResult> diff = ComputeDiff(&series[0], series[4], **owners, DiffOptions());
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_EQ(diff->mode, DiffMode::kExact);
  ASSERT_EQ(diff->devices.size(), 1u);
  EXPECT_EQ(diff->devices[0].domain, "device:cuda:1");
  EXPECT_EQ(diff->devices[0].retained_bytes, static_cast<int64_t>(64 * kMiB));

  std::vector<const v1::Snapshot*> pointers;
  for (const v1::Snapshot& s : series) pointers.push_back(&s);
  absl::StatusOr<TrendResult> trend = ComputeTrend(pointers, **owners);
  ASSERT_TRUE(trend.ok()) << trend.status();
  ASSERT_EQ(trend->devices.size(), 2u);
  EXPECT_EQ(trend->devices[0].owner.domain, "device:cuda:0");
  EXPECT_EQ(trend->devices[0].owner.display, "tracked device:cuda:0 (NVIDIA H200)");
  EXPECT_EQ(trend->devices[0].live_bytes,
            (std::vector<int64_t>(5, static_cast<int64_t>(64 * kMiB))));
  EXPECT_EQ(trend->devices[1].owner.domain, "device:cuda:1");
  EXPECT_EQ(trend->devices[1].live_bytes.back(), static_cast<int64_t>(80 * kMiB));
  EXPECT_EQ(trend->devices[1].fit.verdict, Verdict::kLinear);
  EXPECT_NEAR(trend->devices[1].fit.slope, 16.0 * kMiB, 1.0);
}

}  // namespace devices

}  // namespace
}  // namespace retain::tool
