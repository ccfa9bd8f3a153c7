// Device memory per device: CUDA and HIP allocations on two devices land in
// two memory domains ("device:cuda:0", "device:cuda:1"), with exact byte
// counts, in the snapshot (Snapshot.devices, AllocationBlock.device) and in
// every output of retain-diff: the table, --json, --folded, --pprof (read
// back with protobuf), --trend and an exact diff; a snapshot without the
// device column (an older shim's) reads as before, one domain per API.
//
// There is no GPU on the machines this project is tested on: the programs
// run on FAKE runtimes built by the tests (tests/fixtures/cuda/fake_libcuda.c
// and fake_libcudart.c, tests/fixtures/fake_hip/fake_amdhip64.c), each with
// two devices, device selection (cudaSetDevice, cuCtxSetCurrent,
// hipSetDevice) and device names and UUIDs, behind the real ABI. The shim
// asks them which device each allocation is on exactly as it asks a real
// runtime. Lavapipe's device, on the real Vulkan loader, is checked in
// vulkan_domains_test.cc.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "profile.pb.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/preload/acct_util.h"

namespace retain::test::acct {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int kRounds = 5;

// What a fixture (cuda_devices_app, hip_devices) keeps where (see each).
struct Program {
  std::string fixture;
  std::string api;  // "cuda", "hip"
  v1::DeviceApi device_api;
  v1::Kind device_kind, managed_kind, host_kind;
  int64_t device0;        // bytes on device 0 at every snapshot
  int64_t device1_start;  // on device 1 before the rounds (1 MiB each)
  int64_t pinned;         // pinned host bytes (device 1 current)
  // Function -> (domain's device, bytes) at the last round.
  std::map<std::string, std::pair<int, int64_t>> functions;
  std::string name_prefix;  // the fake's device names
};

const Program& Cuda() {
  static const Program* program = new Program{"cuda_devices_app",
                                              "cuda",
                                              v1::DEVICE_API_CUDA,
                                              v1::KIND_CUDA_DEVICE,
                                              v1::KIND_CUDA_MANAGED,
                                              v1::KIND_CUDA_HOST,
                                              50 * kMiB,
                                              28 * kMiB,
                                              1 * kMiB,
                                              {{"OnDeviceZero", {0, 48 * kMiB}},
                                               {"CreateOnZeroFromOne", {0, 2 * kMiB}},
                                               {"OnDeviceOne", {1, 20 * kMiB}},
                                               {"DriverOnDeviceOne", {1, 8 * kMiB}},
                                               {"GrowOnDeviceOne", {1, kRounds * kMiB}}},
                                              "Fake CUDA GPU "};
  return *program;
}

const Program& Hip() {
  static const Program* program = new Program{"hip_devices",
                                              "hip",
                                              v1::DEVICE_API_HIP,
                                              v1::KIND_HIP_DEVICE,
                                              v1::KIND_HIP_MANAGED,
                                              v1::KIND_HIP_HOST,
                                              42 * kMiB,
                                              16 * kMiB,
                                              1 * kMiB,
                                              {{"OnDeviceZero", {0, 40 * kMiB}},
                                               {"CreateOnZeroFromOne", {0, 2 * kMiB}},
                                               {"OnDeviceOne", {1, 16 * kMiB}},
                                               {"GrowOnDeviceOne", {1, kRounds * kMiB}}},
                                              "Fake HIP GPU "};
  return *program;
}

std::string Domain(const Program& p, int device) {
  return absl::StrCat("device:", p.api, ":", device);
}

int64_t Device1At(const Program& p, int round) { return p.device1_start + round * kMiB; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

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

// One run of a program under the shim: its output and its snapshots.
struct ProgramRun {
  std::unique_ptr<TempDir> dir;
  RunResult run;
  std::map<std::string, std::string> by_label;  // "round-N" -> path
  // "device ORDINAL UUID NAME" lines: ordinal -> (uuid hex, name).
  std::map<int, std::pair<std::string, std::string>> devices;

  std::string Round(int n) const {
    auto it = by_label.find(absl::StrCat("round-", n));
    return it == by_label.end() ? "" : it->second;
  }
};

ProgramRun RunProgram(const Program& p) {
  ProgramRun r;
  r.dir = std::make_unique<TempDir>();
  r.run = RunFixture(p.fixture, {absl::StrCat(kRounds)}, r.dir->path());
  for (const std::string& file : ListSnapshots(r.dir->path())) {
    const std::string label = LoadSnapshot(file).header().label();
    if (absl::StartsWith(label, "round-")) r.by_label[label] = file;
  }
  for (const std::string& line : Lines(r.run.stdout_data)) {
    std::vector<std::string> words = absl::StrSplit(line, absl::MaxSplits(' ', 3));
    if (words.size() == 4 && words[0] == "device") {
      r.devices[std::stoi(words[1])] = {words[2], words[3]};
    }
  }
  return r;
}

// "GPU-facec0da-0000-..." from 32 hex digits (CUDA's form has the prefix).
std::string UuidText(const Program& p, const std::string& hex) {
  if (hex.size() != 32) return "";
  return absl::StrCat(p.device_api == v1::DEVICE_API_CUDA ? "GPU-" : "", hex.substr(0, 8), "-",
                      hex.substr(8, 4), "-", hex.substr(12, 4), "-", hex.substr(16, 4), "-",
                      hex.substr(20));
}

std::string Hex(const std::string& bytes) {
  std::string hex;
  for (unsigned char c : bytes) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return hex;
}

// The table of a live diff, by section ("host", "device:cuda:0", ...):
// owner -> its first column, and each section's total line's.
struct Sections {
  std::map<std::string, std::map<std::string, std::string>> owners;
  std::map<std::string, std::string> totals;
  std::map<std::string, std::string> headings;  // domain -> its heading line
};

Sections ParseSections(const std::string& text) {
  Sections sections;
  std::string section = "host";
  bool in_table = false;
  const std::regex row(" *([0-9.]+ [KMG]?i?B) .*  ([^ ].*)");
  for (const std::string& line : Lines(text)) {
    if (absl::StrContains(line, "owner (")) {
      in_table = true;
      continue;
    }
    if (!in_table || line.empty()) continue;
    if (absl::StartsWith(line, "  device:") && absl::StrContains(line, ": device memory")) {
      // "  device:cuda:1 (NAME, UUID): device memory ...", or without a device
      // "  device:cuda: device memory ...".
      section = line.substr(2, line.find(' ', 2) - 2);
      if (absl::EndsWith(section, ":")) section.pop_back();
      sections.headings[section] = line;
      continue;
    }
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    const std::string owner = m[2];
    if (absl::StartsWith(owner, "total")) {
      sections.totals[section] = m[1];
      EXPECT_EQ(owner, section == "host" ? "total" : "total " + section) << line;
    } else {
      sections.owners[section][owner] = m[1];
    }
  }
  return sections;
}

class GpuDevicesTest : public ::testing::TestWithParam<const Program*> {
 protected:
  void SetUp() override {
    run_ = RunProgram(*GetParam());
    ASSERT_EQ(run_.run.exit_code, 0) << ::retain::test::Describe(run_.run);
    ASSERT_EQ(run_.by_label.size(), static_cast<size_t>(kRounds)) << run_.run.stdout_data;
    ASSERT_EQ(run_.devices.size(), 2u) << run_.run.stdout_data;
  }
  const Program& p() const { return *GetParam(); }
  ProgramRun run_;
};

// Proves: the snapshot lists both devices with the API's number, the name
// and UUID the program itself reads, and every device row names the device
// its bytes are on (device 0: 48 + 2 MiB, device 1: the rest); the pinned
// host row keeps the device whose context pinned it; host rows name none.
TEST_P(GpuDevicesTest, TheSnapshotNamesEachRowsDevice) {
  const v1::Snapshot snapshot = LoadSnapshot(run_.Round(kRounds));
  ASSERT_EQ(snapshot.devices_size(), 2) << snapshot.DebugString().substr(0, 3000);
  std::map<uint32_t, int> index_of;  // Device.id -> ordinal
  for (const v1::Device& device : snapshot.devices()) {
    EXPECT_EQ(device.api(), p().device_api);
    ASSERT_LT(device.index(), 2u);
    index_of[device.id()] = static_cast<int>(device.index());
    const auto& [uuid, name] = run_.devices.at(static_cast<int>(device.index()));
    EXPECT_EQ(device.name(), name);
    EXPECT_EQ(device.name(), absl::StrCat(p().name_prefix, device.index()));
    EXPECT_EQ(Hex(device.uuid()), uuid);
  }
  ASSERT_EQ(index_of.size(), 2u) << "two ids";
  int64_t on[2] = {0, 0};
  for (const Allocation& row : Rows(snapshot)) {
    if (row.kind == p().device_kind || row.kind == p().managed_kind) {
      ASSERT_TRUE(index_of.count(row.device)) << "a device row names device " << row.device;
      on[index_of.at(row.device)] += static_cast<int64_t>(row.size);
    } else if (row.kind == p().host_kind) {
      ASSERT_TRUE(index_of.count(row.device)) << "pinned memory names its device";
      EXPECT_EQ(index_of.at(row.device), 1);
      EXPECT_EQ(static_cast<int64_t>(row.size), p().pinned);
    } else {
      EXPECT_EQ(row.device, 0u) << tool::KindName(row.kind) << " is host memory";
    }
  }
  EXPECT_EQ(on[0], p().device0);
  EXPECT_EQ(on[1], Device1At(p(), kRounds));
}

// Proves: the live table has a section per device, headed by its domain,
// name and UUID, each owner in its device's section with its bytes, each
// device's total; pinned memory in the host's; the device line splits the
// kinds per device.
TEST_P(GpuDevicesTest, TheTableHasASectionPerDevice) {
  const RunResult diff = RunDiff({run_.Round(kRounds), "--by", "function", "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << ::retain::test::Describe(diff);
  const Sections sections = ParseSections(diff.stdout_data);
  for (int device : {0, 1}) {
    const std::string domain = Domain(p(), device);
    ASSERT_TRUE(sections.headings.count(domain)) << domain << "\n" << diff.stdout_data;
    const auto& [uuid, name] = run_.devices.at(device);
    EXPECT_TRUE(absl::StartsWith(
        sections.headings.at(domain),
        absl::StrCat("  ", domain, " (", name, ", ", UuidText(p(), uuid), "): device memory")))
        << sections.headings.at(domain);
  }
  for (const auto& [function, where] : p().functions) {
    const std::string domain = Domain(p(), where.first);
    ASSERT_TRUE(sections.owners.count(domain)) << domain << "\n" << diff.stdout_data;
    ASSERT_TRUE(sections.owners.at(domain).count(function)) << function << " in " << domain << "\n"
                                                            << diff.stdout_data;
    EXPECT_EQ(sections.owners.at(domain).at(function), absl::StrCat(where.second / kMiB, ".0 MiB"))
        << function;
  }
  EXPECT_EQ(sections.totals.at(Domain(p(), 0)), absl::StrCat(p().device0 / kMiB, ".0 MiB"));
  EXPECT_EQ(sections.totals.at(Domain(p(), 1)),
            absl::StrCat(Device1At(p(), kRounds) / kMiB, ".0 MiB"));
  EXPECT_FALSE(sections.headings.count(absl::StrCat("device:", p().api))) << diff.stdout_data;
  ASSERT_TRUE(sections.owners.count("host"));
  EXPECT_EQ(sections.owners.at("host").count("PinnedOnDeviceOne"), 1u) << diff.stdout_data;
  const std::string device_line =
      absl::StrCat("  device      ", Domain(p(), 0), " ", tool::KindName(p().device_kind), " +",
                   p().device0 / kMiB, ".0 MiB");
  EXPECT_TRUE(absl::StrContains(diff.stdout_data, device_line)) << diff.stdout_data;
  EXPECT_TRUE(absl::StrContains(
      diff.stdout_data,
      absl::StrCat(", ", Domain(p(), 1), " ", tool::KindName(p().managed_kind), " +4.0 MiB")))
      << diff.stdout_data;
}

// Proves: --json has each device's domain with its exact bytes, name and
// UUID; every row's owner.domain is its device's; the per-kind growth
// (rss.tracked) is per device; the host total holds none of it.
TEST_P(GpuDevicesTest, JsonSplitsDomainsWithExactBytes) {
  const RunResult diff = RunDiff({run_.Round(kRounds), "--json", "--by", "function", "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << ::retain::test::Describe(diff);
  const Json json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  ASSERT_EQ(json.Size("devices"), 2u) << diff.stdout_data;
  const int64_t expected[2] = {p().device0, Device1At(p(), kRounds)};
  for (int device : {0, 1}) {
    const int at = json.FindRow("devices", "domain", Domain(p(), device));
    ASSERT_GE(at, 0) << diff.stdout_data;
    const std::string prefix = absl::StrCat("devices.", at, ".");
    EXPECT_EQ(json.Int(prefix + "retained_bytes"), expected[device]);
    EXPECT_EQ(json.Str(prefix + "name"), run_.devices.at(device).second);
    EXPECT_EQ(json.Str(prefix + "uuid"), UuidText(p(), run_.devices.at(device).first));
  }
  for (const auto& [function, where] : p().functions) {
    const int row = json.FindRow("rows", "owner.key", function + " @" + Domain(p(), where.first));
    ASSERT_GE(row, 0) << function << "\n" << diff.stdout_data;
    EXPECT_EQ(json.Str(absl::StrCat("rows.", row, ".owner.domain")), Domain(p(), where.first));
    EXPECT_EQ(json.Int(absl::StrCat("rows.", row, ".retained_allocated_bytes")), where.second);
  }
  const int pinned = json.FindRow("rows", "owner.key", "PinnedOnDeviceOne");
  ASSERT_GE(pinned, 0) << diff.stdout_data;
  EXPECT_EQ(json.Str(absl::StrCat("rows.", pinned, ".owner.domain")), "host");
  int64_t tracked_device[2] = {0, 0};
  for (size_t i = 0; i < json.Size("rss.tracked"); ++i) {
    const std::string prefix = absl::StrCat("rss.tracked.", i, ".");
    for (int device : {0, 1}) {
      if (json.Str(prefix + "domain") == Domain(p(), device)) {
        tracked_device[device] += json.Int(prefix + "live_bytes");
      }
    }
    EXPECT_NE(json.Str(prefix + "domain"), absl::StrCat("device:", p().api));
  }
  EXPECT_EQ(tracked_device[0], expected[0]);
  EXPECT_EQ(tracked_device[1], expected[1]);
  EXPECT_LT(json.Int("total.retained_allocated_bytes"), 16 * kMiB) << "host: no device bytes";
}

// Proves: --folded puts each device's bytes under a root frame of its own
// domain, exactly; --pprof labels every sample with its domain and the
// samples of each domain add up to its bytes.
TEST_P(GpuDevicesTest, FoldedAndPprofSplitByDevice) {
  const RunResult folded = RunDiff({run_.Round(kRounds), "--folded", "--measure", "allocated"});
  ASSERT_EQ(folded.exit_code, 0) << ::retain::test::Describe(folded);
  std::map<std::string, int64_t> by_root;
  for (const FoldedLine& line : ParseFolded(folded.stdout_data)) {
    ASSERT_FALSE(line.frames.empty());
    by_root[absl::StartsWith(line.frames[0], "[device:") ? line.frames[0] : "host"] += line.bytes;
  }
  EXPECT_EQ(by_root[absl::StrCat("[", Domain(p(), 0), "]")], p().device0) << folded.stdout_data;
  EXPECT_EQ(by_root[absl::StrCat("[", Domain(p(), 1), "]")], Device1At(p(), kRounds));
  EXPECT_EQ(by_root.count(absl::StrCat("[device:", p().api, "]")), 0u);

  const std::string path = run_.dir->path() + "/live.pb.gz";
  const RunResult pprof = RunDiff({run_.Round(kRounds), "--pprof", path});
  ASSERT_EQ(pprof.exit_code, 0) << ::retain::test::Describe(pprof);
  retain::pprof::Profile profile;
  ASSERT_TRUE(profile.ParseFromString(Gunzip(ReadAll(path))));
  int allocated_type = -1;
  for (int i = 0; i < profile.sample_type_size(); ++i) {
    if (profile.string_table(profile.sample_type(i).type()) == "inuse_space") allocated_type = i;
  }
  ASSERT_GE(allocated_type, 0);
  std::map<std::string, int64_t> by_domain;
  for (const auto& sample : profile.sample()) {
    std::string domain;
    for (const auto& label : sample.label()) {
      if (profile.string_table(label.key()) == "domain") domain = profile.string_table(label.str());
    }
    EXPECT_FALSE(domain.empty()) << "every sample says its domain";
    by_domain[domain] += sample.value(allocated_type);
  }
  EXPECT_EQ(by_domain[Domain(p(), 0)], p().device0);
  EXPECT_EQ(by_domain[Domain(p(), 1)], Device1At(p(), kRounds));
}

// Proves: the trend has a line per device: device 0 flat at its bytes,
// device 1 linear at 1 MiB a snapshot, each named; an exact diff between
// the first and last rounds retains kRounds - 1 MiB on device 1 and nothing
// on 0.
TEST_P(GpuDevicesTest, TrendAndExactDiffPerDevice) {
  std::vector<std::string> args = {"--trend", "--json"};
  for (int round = 1; round <= kRounds; ++round) args.push_back(run_.Round(round));
  const RunResult trend = RunDiff(args);
  ASSERT_EQ(trend.exit_code, 0) << ::retain::test::Describe(trend);
  const Json json = ParseJson(trend.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  ASSERT_EQ(json.Size("devices"), 2u) << trend.stdout_data;
  for (int device : {0, 1}) {
    const int at = json.FindRow("devices", "domain", Domain(p(), device));
    ASSERT_GE(at, 0) << trend.stdout_data;
    const std::string series = absl::StrCat("devices.", at, ".series.");
    EXPECT_EQ(json.Str(absl::StrCat("devices.", at, ".name")), run_.devices.at(device).second);
    ASSERT_EQ(json.Size(series + "live_bytes"), static_cast<size_t>(kRounds));
    for (int round = 1; round <= kRounds; ++round) {
      EXPECT_EQ(json.Int(absl::StrCat(series, "live_bytes.", round - 1)),
                device == 0 ? p().device0 : Device1At(p(), round))
          << Domain(p(), device) << " round " << round;
    }
    if (device == 1) {
      EXPECT_EQ(json.Str(series + "verdict"), "linear") << trend.stdout_data;
      EXPECT_NEAR(json.Number(series + "bytes_per_request"), static_cast<double>(kMiB), 1.0);
    } else {
      EXPECT_NE(json.Str(series + "verdict"), "linear") << trend.stdout_data;
    }
  }
  args = {"--trend"};
  for (int round = 1; round <= kRounds; ++round) args.push_back(run_.Round(round));
  const RunResult text = RunDiff(args);
  ASSERT_EQ(text.exit_code, 0) << ::retain::test::Describe(text);
  EXPECT_TRUE(absl::StrContains(text.stdout_data, absl::StrCat("tracked ", Domain(p(), 1), " (",
                                                               run_.devices.at(1).second, ")")))
      << text.stdout_data;

  const RunResult exact = RunDiff({run_.Round(1), run_.Round(kRounds), "--json"});
  ASSERT_EQ(exact.exit_code, 0) << ::retain::test::Describe(exact);
  const Json diff = ParseJson(exact.stdout_data);
  ASSERT_TRUE(diff.ok) << diff.error;
  EXPECT_EQ(diff.Str("mode"), "exact");
  ASSERT_EQ(diff.Size("devices"), 1u) << exact.stdout_data;
  EXPECT_EQ(diff.Str("devices.0.domain"), Domain(p(), 1));
  EXPECT_EQ(diff.Int("devices.0.retained_bytes"), (kRounds - 1) * kMiB);
  EXPECT_EQ(diff.Int("devices.0.released_bytes"), 0);
}

// Proves: a snapshot without the device column and table (as older shims
// wrote them; rewritten here without them) reads as before: one domain per
// API holding both devices' bytes.
TEST_P(GpuDevicesTest, ASnapshotWithoutDevicesHasOneDomainPerApi) {
  v1::Snapshot snapshot = LoadSnapshot(run_.Round(kRounds));
  snapshot.clear_devices();
  for (v1::AllocationBlock& block : *snapshot.mutable_allocations()) block.clear_device();
  snapshot.mutable_header()->set_ends_with_footer(false);  // no footer, as before it existed
  snapshot.clear_footer();
  const std::string path = run_.dir->path() + "/old.pb";
  {
    std::ofstream out(path, std::ios::binary);
    ASSERT_TRUE(snapshot.SerializeToOstream(&out));
  }
  const RunResult diff = RunDiff({path, "--json", "--by", "function", "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << ::retain::test::Describe(diff);
  const Json json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  ASSERT_EQ(json.Size("devices"), 1u) << diff.stdout_data;
  EXPECT_EQ(json.Str("devices.0.domain"), absl::StrCat("device:", p().api));
  EXPECT_EQ(json.Type("devices.0.name"), "null");
  EXPECT_EQ(json.Int("devices.0.retained_bytes"), p().device0 + Device1At(p(), kRounds));
  const RunResult table = RunDiff({path});
  ASSERT_EQ(table.exit_code, 0) << ::retain::test::Describe(table);
  EXPECT_TRUE(
      absl::StrContains(table.stdout_data, absl::StrCat("\n  device:", p().api, ": device memory")))
      << table.stdout_data;
}

// Proves: the programs' own output is the same with and without the shim
// (the device queries change nothing they see).
TEST_P(GpuDevicesTest, ProgramBehaviourUnchanged) {
  TempDir dir;
  const RunResult plain = RunFixture(p().fixture, {absl::StrCat(kRounds)}, dir.path(), false);
  ASSERT_EQ(plain.exit_code, 0) << ::retain::test::Describe(plain);
  auto comparable = [](const std::string& text) {
    std::string out;
    for (const std::string& line : Lines(text)) {
      if (!absl::StartsWith(line, "range ")) absl::StrAppend(&out, line, "\n");
    }
    return out;
  };
  EXPECT_EQ(comparable(run_.run.stdout_data), comparable(plain.stdout_data));
  EXPECT_EQ(run_.run.stderr_data, plain.stderr_data);
}

INSTANTIATE_TEST_SUITE_P(FakeRuntimes, GpuDevicesTest, ::testing::Values(&Cuda(), &Hip()),
                         [](const ::testing::TestParamInfo<const Program*>& info) {
                           return info.param->api;
                         });

}  // namespace
}  // namespace retain::test::acct
