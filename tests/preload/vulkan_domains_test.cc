// Memory domains on the real Vulkan loader and Mesa's lavapipe: lavapipe
// keeps "device" memory in host RAM, taken with posix_memalign inside
// vkAllocateMemory. The shim records that block (gpu-driver-host) and the
// VkDeviceMemory (vulkan-device), and links the two (Snapshot.gpu_backings);
// retain-diff must then count each allocation once, as host memory, under
// the program's function, resident as the block is, in every output: the
// table, --json, --folded and --pprof (read back with protobuf here). The
// rows still name lavapipe's device (Snapshot.devices), as the program
// itself reads it.
//
// The fixture vulkan_alloc --details --touch keeps 1 MiB and 64 MiB on each
// of its four routes (260 MiB) and writes the first half of each block.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "profile.pb.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/preload/acct_util.h"

namespace retain::test::acct {
namespace {

constexpr char kLavapipeIcd[] = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kPerRoute = 65 * kMiB;  // 1 MiB + 64 MiB kept per route
constexpr uint64_t kLive = 4 * kPerRoute;
// Half of each block is written; the pages around the halves' ends and
// lavapipe's own small structures may add a little.
constexpr uint64_t kTouched = kLive / 2;
constexpr uint64_t kSlack = 256 * 1024;
const char* const kFunctions[] = {"AllocThroughExport", "AllocThroughInstanceProc",
                                  "AllocThroughDeviceProc", "AllocOnSecondDevice"};

std::string Gunzip(const std::string& in) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return "";
  std::string out;
  char buffer[1 << 16];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  int status = Z_OK;
  while (status == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof(buffer);
    status = inflate(&z, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - z.avail_out);
  }
  inflateEnd(&z);
  return status == Z_STREAM_END ? out : "";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class VulkanDomainsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* name : {"VK_ADD_LAYER_PATH", "VK_LAYER_PATH", "VK_LOADER_LAYERS_ENABLE",
                             "VK_LOADER_LAYERS_DISABLE", "VK_INSTANCE_LAYERS", "RETAIN_VULKAN"}) {
      unsetenv(name);
    }
    if (!std::filesystem::exists(kLavapipeIcd)) return;
    dir_ = new TempDir();
    const RunResult run = RunFixture("vulkan_alloc", {"--details", "--touch"}, dir_->path(), true,
                                     {{"VK_DRIVER_FILES", kLavapipeIcd},
                                      {"VK_ICD_FILENAMES", kLavapipeIcd},
                                      {"XDG_RUNTIME_DIR", dir_->path()}});
    ASSERT_EQ(run.exit_code, 0) << ::retain::test::Describe(run);
    stdout_ = new std::string(run.stdout_data);
    for (const std::string& file : ListSnapshots(dir_->path())) {
      if (LoadSnapshot(file).header().label() == "vulkan") snapshot_ = new std::string(file);
    }
    ASSERT_NE(snapshot_, nullptr) << "no snapshot labelled vulkan";
  }
  static void TearDownTestSuite() {
    delete snapshot_;
    delete stdout_;
    delete dir_;
    snapshot_ = nullptr;
    stdout_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!std::filesystem::exists(kLavapipeIcd)) {
      GTEST_SKIP() << "Mesa's lavapipe Vulkan driver is not installed (" << kLavapipeIcd
                   << " missing: apt-get install mesa-vulkan-drivers, as scripts/"
                      "install-deps.sh does)";
    }
    ASSERT_NE(snapshot_, nullptr);
  }

  static TempDir* dir_;
  static std::string* snapshot_;
  static std::string* stdout_;  // the fixture's output
};
TempDir* VulkanDomainsTest::dir_ = nullptr;
std::string* VulkanDomainsTest::snapshot_ = nullptr;
std::string* VulkanDomainsTest::stdout_ = nullptr;

// Proves: the snapshot lists lavapipe's physical device once (both
// VkDevices are on it): Vulkan, index 0 in the enumeration, with the name
// and UUID the program itself reads (vkGetPhysicalDeviceProperties2);
// every vulkan-device row names it and no other row names a device; the
// backed allocations stay host memory; retain-dump lists the device.
TEST_F(VulkanDomainsTest, TheSnapshotNamesLavapipesDevice) {
  const v1::Snapshot snapshot = LoadSnapshot(*snapshot_);
  // "physical 0 UUID NAME": what the program read.
  std::string uuid, name;
  for (absl::string_view line : absl::StrSplit(*stdout_, '\n')) {
    if (!absl::StartsWith(line, "physical 0 ")) continue;
    const std::vector<std::string> words = absl::StrSplit(line, absl::MaxSplits(' ', 3));
    ASSERT_EQ(words.size(), 4u) << line;
    uuid = words[2];
    name = words[3];
  }
  ASSERT_FALSE(name.empty()) << *stdout_;
  EXPECT_TRUE(absl::StartsWith(name, "llvmpipe")) << name;
  ASSERT_EQ(snapshot.devices_size(), 1) << snapshot.DebugString().substr(0, 2000);
  const v1::Device& device = snapshot.devices(0);
  EXPECT_EQ(device.id(), 1u);
  EXPECT_EQ(device.api(), v1::DEVICE_API_VULKAN);
  EXPECT_EQ(device.index(), 0u);
  EXPECT_EQ(device.name(), name);
  std::string hex;
  for (unsigned char c : device.uuid()) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  EXPECT_EQ(hex, uuid);
  size_t named = 0;
  for (const Allocation& row : Rows(snapshot)) {
    if (row.kind == v1::KIND_VULKAN_DEVICE) {
      EXPECT_EQ(row.device, device.id());
      ++named;
    } else {
      EXPECT_EQ(row.device, 0u) << tool::KindName(row.kind);
    }
  }
  EXPECT_EQ(named, 8u) << "both VkDevices' allocations";

  RunOptions options;
  options.argv = {RETAIN_DUMP_PATH, *snapshot_};
  const RunResult dump = ::retain::test::Run(options);
  ASSERT_EQ(dump.exit_code, 0) << ::retain::test::Describe(dump);
  EXPECT_THAT(dump.stdout_data, ::testing::HasSubstr("GPU devices"));
  EXPECT_THAT(dump.stdout_data, ::testing::ContainsRegex("#1 +device:vulkan:0 +260\\.0 MiB +8  " +
                                                         std::string("llvmpipe")))
      << dump.stdout_data;
}

// Proves: the snapshot links every live VkDeviceMemory to lavapipe's block
// (one GpuBacking per live allocation, its host block among the
// gpu-driver-host rows, of the allocation's size).
TEST_F(VulkanDomainsTest, TheSnapshotLinksEachAllocationToItsHostBlock) {
  const v1::Snapshot snapshot = LoadSnapshot(*snapshot_);
  std::map<uint64_t, uint64_t> host_rows;  // address -> size
  for (const Allocation& a : Rows(snapshot, v1::KIND_GPU_DRIVER_HOST))
    host_rows[a.address] = a.size;
  std::map<uint64_t, uint64_t> device_rows;
  for (const Allocation& a : Rows(snapshot, v1::KIND_VULKAN_DEVICE))
    device_rows[a.address] = a.size;
  ASSERT_EQ(device_rows.size(), 8u);
  ASSERT_EQ(snapshot.gpu_backings_size(), 8) << snapshot.DebugString().substr(0, 2000);
  for (const v1::GpuBacking& link : snapshot.gpu_backings()) {
    EXPECT_EQ(link.kind(), v1::KIND_VULKAN_DEVICE);
    ASSERT_TRUE(device_rows.count(link.handle())) << std::hex << link.handle();
    const uint64_t size = device_rows.at(link.handle());
    EXPECT_GE(link.host_bytes(), size);
    uint64_t linked = 0;
    for (uint64_t address : link.host_address()) {
      if (host_rows.count(address)) linked += host_rows.at(address);
    }
    EXPECT_GE(linked, size) << "the block that backs it is a live gpu-driver-host row";
    EXPECT_LT(linked, size + 64 * 1024);
  }
}

// Proves: --json by function names each allocating function once with its
// 65 MiB allocated and about half of it resident, in the host domain; no
// device domain (lavapipe has no VRAM); the host total is the sum of its
// rows and holds the 260 MiB once; per kind, vulkan-device has no device
// bytes left and gpu-driver-host holds the 260 MiB.
TEST_F(VulkanDomainsTest, JsonCountsEachAllocationOnceAsHostMemory) {
  const RunResult diff = RunDiff({*snapshot_, "--json", "--by", "function", "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << ::retain::test::Describe(diff);
  const Json json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  EXPECT_EQ(json.Str("measure"), "resident");
  EXPECT_EQ(json.Size("devices"), 0u) << diff.stdout_data;
  int64_t allocated = 0, resident = 0;
  for (size_t i = 0; i < json.Size("rows"); ++i) {
    const std::string row = absl::StrCat("rows.", i, ".");
    EXPECT_EQ(json.Str(row + "owner.domain"), "host");
    allocated += json.Int(row + "retained_allocated_bytes");
    resident += json.Int(row + "retained_resident_bytes");
  }
  EXPECT_EQ(json.Int("total.retained_allocated_bytes"), allocated);
  EXPECT_EQ(json.Int("total.retained_resident_bytes"), resident);
  for (const char* function : kFunctions) {
    const int row = json.FindRow("rows", "owner.key", function);
    ASSERT_GE(row, 0) << function << "\n" << diff.stdout_data;
    const std::string at = absl::StrCat("rows.", row, ".");
    EXPECT_EQ(json.Int(at + "retained_allocated_bytes"), static_cast<int64_t>(kPerRoute))
        << function;
    EXPECT_NEAR(static_cast<double>(json.Int(at + "retained_resident_bytes")),
                static_cast<double>(kPerRoute / 2), static_cast<double>(kSlack))
        << function;
    EXPECT_EQ(json.Int(at + "retained_count"), 2) << function;
  }
  // All of it at most once: the host total is not 2 x 260 MiB.
  EXPECT_LT(allocated, static_cast<int64_t>(kLive + 64 * kMiB));
  EXPECT_LT(resident, static_cast<int64_t>(kTouched + 32 * kMiB));
  const int vulkan = json.FindRow("rss.tracked", "kind", "vulkan-device");
  if (vulkan >= 0) {
    EXPECT_EQ(json.Int(absl::StrCat("rss.tracked.", vulkan, ".live_bytes")), 0);
  }
  const int driver = json.FindRow("rss.tracked", "kind", "gpu-driver-host");
  ASSERT_GE(driver, 0) << diff.stdout_data;
  EXPECT_GE(json.Int(absl::StrCat("rss.tracked.", driver, ".live_bytes")),
            static_cast<int64_t>(kLive));
  EXPECT_LT(json.Int(absl::StrCat("rss.tracked.", driver, ".live_bytes")),
            static_cast<int64_t>(kLive + 16 * kMiB));
}

// Proves: the live table by function shows each function once, 65.0 MiB
// allocated beside about half of it resident, and no device section.
TEST_F(VulkanDomainsTest, TableShowsEachFunctionOnce) {
  const RunResult diff = RunDiff({*snapshot_, "--by", "function", "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << ::retain::test::Describe(diff);
  for (const char* function : kFunctions) {
    int seen = 0;
    for (absl::string_view line : absl::StrSplit(diff.stdout_data, '\n')) {
      if (!absl::EndsWith(line, absl::StrCat("  ", function))) continue;
      ++seen;
      // resident, allocated, count, share, owner
      EXPECT_THAT(std::string(line),
                  ::testing::MatchesRegex(" *32\\.[45] MiB +65\\.0 MiB +2 +[0-9.]+%  .*"))
          << line;
    }
    EXPECT_EQ(seen, 1) << function << "\n" << diff.stdout_data;
  }
  EXPECT_EQ(diff.stdout_data.find("device:"), std::string::npos) << diff.stdout_data;
}

// Proves: --folded (allocated bytes) puts 65 MiB, not 130, under each
// function (and the driver's few bytes of bookkeeping).
TEST_F(VulkanDomainsTest, FoldedCountsOnce) {
  const RunResult diff = RunDiff({*snapshot_, "--folded", "--measure", "allocated"});
  ASSERT_EQ(diff.exit_code, 0) << ::retain::test::Describe(diff);
  std::map<std::string, int64_t> under;
  for (const FoldedLine& line : ParseFolded(diff.stdout_data)) {
    for (const char* function : kFunctions) {
      for (const std::string& frame : line.frames) {
        if (frame.rfind(function, 0) == 0) {
          under[function] += line.bytes;
          break;
        }
      }
    }
  }
  for (const char* function : kFunctions) {
    // lavapipe's object structure (about 100 bytes an allocation) stays
    // the driver's own row, under the same function.
    EXPECT_GE(under[function], static_cast<int64_t>(kPerRoute)) << function << diff.stdout_data;
    EXPECT_LT(under[function], static_cast<int64_t>(kPerRoute + 4096))
        << function << diff.stdout_data;
  }
}

// Proves: --pprof's samples (allocated sample type) add up to 260 MiB once,
// every sample carries its domain label, and all of them say host.
TEST_F(VulkanDomainsTest, PprofCountsOnceAndLabelsTheDomain) {
  const std::string path = dir_->path() + "/live.pb.gz";
  const RunResult diff = RunDiff({*snapshot_, "--pprof", path});
  ASSERT_EQ(diff.exit_code, 0) << ::retain::test::Describe(diff);
  retain::pprof::Profile profile;
  ASSERT_TRUE(profile.ParseFromString(Gunzip(ReadAll(path))));
  int allocated_type = -1;
  for (int i = 0; i < profile.sample_type_size(); ++i) {
    if (profile.string_table(profile.sample_type(i).type()) == "inuse_space") allocated_type = i;
  }
  ASSERT_GE(allocated_type, 0) << profile.DebugString().substr(0, 1000);
  int64_t gpu_bytes = 0;
  for (const auto& sample : profile.sample()) {
    std::string domain, kind;
    for (const auto& label : sample.label()) {
      if (profile.string_table(label.key()) == "domain") domain = profile.string_table(label.str());
      if (profile.string_table(label.key()) == "kind") kind = profile.string_table(label.str());
    }
    EXPECT_EQ(domain, "host");
    if (kind == "gpu-driver-host" || kind == "vulkan-device") {
      gpu_bytes += sample.value(allocated_type);
    }
  }
  EXPECT_GE(gpu_bytes, static_cast<int64_t>(kLive));
  EXPECT_LT(gpu_bytes, static_cast<int64_t>(kLive + 16 * kMiB));
}

}  // namespace
}  // namespace retain::test::acct
