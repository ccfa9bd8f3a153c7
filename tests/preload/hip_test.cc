// hip_test: the shim's HIP hooks (shim/src/gpu/hip_hooks.cc).
//
// No AMD GPU exists where these tests run. So:
//  - RealRuntime*: the real runtime (Debian's libamdhip64.so.5, ROCm 5.2)
//    fails every call here; under the shim it must fail identically (same
//    results, same out-parameters, same exit status) and nothing HIP may be
//    recorded;
//  - everything else runs against a FAKE libamdhip64 built by the tests
//    (tests/fixtures/fake_hip/fake_amdhip64.c, whose header says what it
//    imitates): SONAME libamdhip64.so.5, the real library's version nodes
//    (checked here), device memory from raw mmap system calls, internal
//    calls through its own PLT (checked here). That is the success path:
//    exact sizes and kinds, nested calls recorded once, failures recorded
//    never, the runtime found when only a library opened RTLD_LOCAL links it,
//    the runtime's own host memory counted as gpu-driver-host, per-kind
//    totals exact in the snapshot and in retain-diff.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/preload/acct_util.h"

namespace retain::test {
namespace {

using acct::Describe;
using acct::FixtureOutput;
using acct::FramesOf;
using acct::ParseNumber;
using acct::Range;
using acct::Rows;
using acct::RunFixture;
using acct::SnapshotLabeled;
using tool::Allocation;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kKiB = uint64_t{1} << 10;
// The fake's rules (fake_amdhip64.c).
constexpr uint64_t kFakeBookkeepingBytes = 48;

std::string FakeRuntimePath() { return FixturePath("fake_hip/libamdhip64.so.5"); }

bool IsHipKind(v1::Kind kind) {
  return kind == v1::KIND_HIP_DEVICE || kind == v1::KIND_HIP_HOST || kind == v1::KIND_HIP_MANAGED;
}

std::vector<Allocation> HipRows(const v1::Snapshot& s) {
  std::vector<Allocation> rows;
  for (const Allocation& a : Rows(s)) {
    if (IsHipKind(a.kind)) rows.push_back(a);
  }
  return rows;
}

// "range NAME START END" lines.
std::map<std::string, Range> Ranges(const FixtureOutput& out) {
  std::map<std::string, Range> ranges;
  for (const auto& f : out.All("range")) {
    if (f.size() != 3) {
      ADD_FAILURE() << "short range line";
      continue;
    }
    ranges[f[0]] = Range{ParseNumber(f[1]), ParseNumber(f[2])};
  }
  return ranges;
}

// The executable segments of the module at `path`, as address ranges.
std::vector<Range> ModuleRanges(const v1::Snapshot& s, const std::string& path) {
  std::vector<Range> ranges;
  const v1::Module* module = acct::ModuleWithPath(s, path);
  if (module == nullptr) {
    ADD_FAILURE() << "no module " << path << " in the snapshot";
    return ranges;
  }
  for (const auto& segment : module->executable_segments()) {
    ranges.push_back(Range{segment.start(), segment.end()});
  }
  return ranges;
}

bool AnyFrameIn(const v1::Snapshot& s, const Allocation& a, const std::vector<Range>& ranges) {
  for (uint64_t frame : FramesOf(s, a.stack_id)) {
    for (const Range& r : ranges) {
      if (r.Contains(frame)) return true;
    }
  }
  return false;
}

// Runs `argv` (a tool) and returns its stdout; fails the test on a non-zero exit.
std::string RunTool(const std::vector<std::string>& argv, const std::string& stdin_data = "") {
  RunOptions options;
  options.argv = argv;
  options.stdin_data = stdin_data;
  options.timeout_seconds = 60;
  RunResult r = Run(options);
  EXPECT_EQ(r.exit_code, 0) << argv[0] << "\n" << Describe(r);
  return r.stdout_data;
}

// --- the fake is a faithful stand-in ------------------------------------------

// The "Version definitions" section of `objdump -p`.
std::string VersionDefinitions(const std::string& library) {
  const std::string text = RunTool({"objdump", "-p", library});
  const size_t begin = text.find("Version definitions:");
  const size_t end = text.find("Version References:");
  if (begin == std::string::npos) return "";
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// Version node of each dynamic symbol `objdump -T` lists as defined.
std::map<std::string, std::string> SymbolVersions(const std::string& library) {
  std::map<std::string, std::string> versions;
  std::istringstream lines(RunTool({"objdump", "-T", library}));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    std::string word;
    while (words >> word) w.push_back(word);
    if (w.size() >= 6 && w[2] == "DF" && w[3] == ".text") versions[w.back()] = w[w.size() - 2];
  }
  return versions;
}

std::vector<std::string> HookNames() {
  std::vector<std::string> names;
  std::ifstream list(RETAIN_HIP_EXPORTS);
  std::string line;
  while (std::getline(list, line)) {
    if (!line.empty() && line[0] != '#') names.push_back(line);
  }
  EXPECT_FALSE(names.empty()) << RETAIN_HIP_EXPORTS;
  return names;
}

TEST(HipFakeRuntimeTest, HasTheRealRuntimesSonameVersionNodesAndSymbolVersions) {
  const std::string real = RETAIN_REAL_AMDHIP64;
  if (real.empty() || real.find("NOTFOUND") != std::string::npos) {
    GTEST_SKIP() << "libamdhip64-dev is not installed (scripts/install-deps.sh installs it)";
  }
  const std::string real_definitions = VersionDefinitions(real);
  ASSERT_NE(real_definitions, "");
  EXPECT_EQ(VersionDefinitions(FakeRuntimePath()), real_definitions);
  const std::map<std::string, std::string> real_versions = SymbolVersions(real);
  const std::map<std::string, std::string> fake_versions = SymbolVersions(FakeRuntimePath());
  for (const std::string& name : HookNames()) {
    ASSERT_TRUE(real_versions.count(name)) << name << " is not in " << real;
    EXPECT_EQ(fake_versions.count(name) ? fake_versions.at(name) : "(missing)",
              real_versions.at(name))
        << name;
  }
  EXPECT_NE(
      RunTool({"objdump", "-p", FakeRuntimePath()}).find("SONAME               libamdhip64.so.5"),
      std::string::npos);
}

TEST(HipFakeRuntimeTest, CallsItsOwnExportsThroughThePlt) {
  const std::string relocations = RunTool({"objdump", "-R", FakeRuntimePath()});
  for (const char* name :
       {"hipMalloc", "hipHostMalloc", "hipHostFree", "hipMallocPitch", "hipMallocAsync"}) {
    EXPECT_NE(relocations.find(std::string("R_X86_64_JUMP_SLOT  ") + name + "@"), std::string::npos)
        << name << " is not called through the PLT:\n"
        << relocations;
  }
}

// --- every entry point, against the fake --------------------------------------

struct Expected {
  uint64_t size;
  v1::Kind kind;
  uint64_t flags;
  const char* function;  // the fixture function that called HIP
};

// What hip_calls has live at its "hip" snapshot, by label (fake_amdhip64.c:
// pitches are widths rounded up to 256).
const std::map<std::string, Expected>& ExpectedAtHip() {
  static const auto* expected = new std::map<std::string, Expected>{
      {"A", {1 * kMiB, v1::KIND_HIP_DEVICE, 0, "alloc_device"}},
      {"C", {2 * kMiB, v1::KIND_HIP_DEVICE, 0, "alloc_device"}},
      {"D", {1024 * 10, v1::KIND_HIP_DEVICE, 0, "alloc_device"}},    // hipMallocPitch 1000 x 10
      {"E", {512 * 7, v1::KIND_HIP_DEVICE, 0, "alloc_device"}},      // hipMemAllocPitch 300 x 7
      {"F", {256 * 3 * 5, v1::KIND_HIP_DEVICE, 0, "alloc_device"}},  // hipMalloc3D 100 x 3 x 5
      {"H", {6 * kMiB, v1::KIND_HIP_DEVICE, 0, "alloc_device"}},
      {"M", {256 * kKiB, v1::KIND_HIP_MANAGED, 0, "alloc_managed"}},
      {"P", {64 * kKiB, v1::KIND_HIP_HOST, 2, "alloc_host"}},
      {"S", {12 * kKiB, v1::KIND_HIP_HOST, 0, "alloc_host"}},
      {"V1", {2 * kMiB, v1::KIND_HIP_DEVICE, 0, "alloc_virtual"}},  // hipMemCreate, mapped once
  };
  return *expected;
}

// The fixture's own account of its calls, comparable across runs: every
// "fail" line whole, and label + result of every "ok" line (pointers differ
// from run to run).
std::vector<std::string> ComparableOutput(const FixtureOutput& out) {
  std::vector<std::string> lines;
  for (const auto& f : out.All("ok")) lines.push_back("ok " + f[0] + " " + f[1]);
  for (const auto& f : out.All("fail")) {
    std::string line = "fail";
    for (const std::string& word : f) line += " " + word;
    lines.push_back(line);
  }
  for (const auto& f : out.All("fail-pitch")) lines.push_back("fail-pitch " + f[0]);
  for (const auto& f : out.All("errno")) lines.push_back("errno " + f[0]);
  return lines;
}

class HipCallsTest : public testing::Test {
 public:
  // (A fork child's snapshot is read by ForkChildHasNoneOfTheParentsDeviceMemory.)
  const std::string& dir() const { return dir_.path(); }

 protected:
  void SetUp() override {
    run_ = RunFixture("hip_calls", {}, dir_.path());
    ASSERT_EQ(run_.exit_code, 0) << Describe(run_);
    out_ = FixtureOutput(run_.stdout_data);
    hip_ = SnapshotLabeled(dir_.path(), "hip");
    end_ = SnapshotLabeled(dir_.path(), "end");
    ranges_ = Ranges(out_);
  }

  uint64_t Pointer(const std::string& label) { return ParseNumber(out_.Named("ok", label).at(1)); }

  TempDir dir_;
  RunResult run_;
  FixtureOutput out_{""};
  v1::Snapshot hip_;
  v1::Snapshot end_;
  std::map<std::string, Range> ranges_;
};

TEST_F(HipCallsTest, RunsAgainstTheFakeRuntime) {
  const std::string runtime = out_.Word("runtime");
  EXPECT_EQ(acct::RealPath(runtime), acct::RealPath(FakeRuntimePath()));
  ASSERT_NE(acct::ModuleWithPath(hip_, FakeRuntimePath()), nullptr);
}

TEST_F(HipCallsTest, EveryLiveAllocationRecordedOnceWithItsSizeKindFlagsAndCaller) {
  // Pitches as the fake reported them.
  EXPECT_EQ(out_.Named("ok", "D").at(2), "1024");
  EXPECT_EQ(out_.Named("ok", "E").at(2), "512");
  EXPECT_EQ(out_.Named("ok", "F").at(2), "256");

  std::map<uint64_t, Allocation> by_address;
  for (const Allocation& a : HipRows(hip_)) {
    EXPECT_TRUE(by_address.emplace(a.address, a).second) << "two HIP rows at " << a.address;
  }
  EXPECT_EQ(by_address.size(), ExpectedAtHip().size());
  for (const auto& [label, want] : ExpectedAtHip()) {
    SCOPED_TRACE(label);
    const uint64_t pointer = Pointer(label);
    ASSERT_NE(pointer, 0u);
    auto found = by_address.find(pointer);
    ASSERT_NE(found, by_address.end()) << "no record at the pointer (handle) the call returned";
    const Allocation& a = found->second;
    EXPECT_EQ(a.size, want.size);
    EXPECT_EQ(a.kind, want.kind);
    EXPECT_EQ(a.flags, want.flags);
    const std::vector<uint64_t> frames = FramesOf(hip_, a.stack_id);
    ASSERT_FALSE(frames.empty());
    EXPECT_TRUE(ranges_.at(want.function).Contains(frames[0]))
        << "frames[0] " << std::hex << frames[0] << " is not in " << want.function;
  }
}

// A fork child has no device memory of its parent's: its GPU records start
// empty (its inherited heap is still there).
TEST_F(HipCallsTest, ForkChildHasNoneOfTheParentsDeviceMemory) {
  ASSERT_FALSE(HipRows(hip_).empty());
  const v1::Snapshot child = SnapshotLabeled(dir(), "child");
  EXPECT_NE(child.header().pid(), hip_.header().pid());
  EXPECT_TRUE(HipRows(child).empty());
  for (v1::Kind kind : {v1::KIND_HIP_DEVICE, v1::KIND_HIP_HOST, v1::KIND_HIP_MANAGED}) {
    EXPECT_EQ(TotalsFor(child, kind).live_bytes(), 0u) << kind;
  }
  EXPECT_GT(TotalsFor(child, v1::KIND_HEAP).live_count(), 0u);
}

TEST_F(HipCallsTest, PerKindTotalsCountNestedCallsOnceAndFailuresNever) {
  // Allocated: A B C D E F G H V1 V2 (C D E F H reach hipMalloc or
  // hipMallocAsync again inside the fake: not counted twice; the failed
  // calls not at all).
  const uint64_t device_allocated = (1 + 3 + 2 + 5 + 6 + 2 + 4) * kMiB + 10240 + 3584 + 3840;
  const v1::KindTotals device = TotalsFor(hip_, v1::KIND_HIP_DEVICE);
  EXPECT_EQ(device.allocated_count(), 10u);
  EXPECT_EQ(device.allocated_bytes(), device_allocated);
  EXPECT_EQ(device.freed_count(), 3u);  // B G V2
  EXPECT_EQ(device.freed_bytes(), (3 + 5 + 4) * kMiB);
  EXPECT_EQ(device.live_bytes(), device_allocated - (3 + 5 + 4) * kMiB);
  // P Q R S (Q and R reach hipHostMalloc / hipHostFree again inside).
  const v1::KindTotals host = TotalsFor(hip_, v1::KIND_HIP_HOST);
  EXPECT_EQ(host.allocated_count(), 4u);
  EXPECT_EQ(host.allocated_bytes(), (64 + 128 + 8 + 12) * kKiB);
  EXPECT_EQ(host.freed_count(), 2u);  // Q R
  EXPECT_EQ(host.live_bytes(), (64 + 12) * kKiB);
  const v1::KindTotals managed = TotalsFor(hip_, v1::KIND_HIP_MANAGED);
  EXPECT_EQ(managed.allocated_count(), 1u);
  EXPECT_EQ(managed.live_bytes(), 256 * kKiB);
  // The totals agree with the rows.
  EXPECT_EQ(LiveBytes(hip_, v1::KIND_HIP_DEVICE), device.live_bytes());
  EXPECT_EQ(LiveBytes(hip_, v1::KIND_HIP_HOST), host.live_bytes());
  EXPECT_EQ(LiveBytes(hip_, v1::KIND_HIP_MANAGED), managed.live_bytes());
}

TEST_F(HipCallsTest, ReleasedAreGoneAndEverythingIsGoneAtTheEnd) {
  std::set<uint64_t> live;
  for (const Allocation& a : HipRows(hip_)) live.insert(a.address);
  for (const char* label : {"B", "G", "Q", "R", "V2"}) {
    EXPECT_EQ(live.count(Pointer(label)), 0u) << label << " was released";
  }
  EXPECT_TRUE(HipRows(end_).empty());
  for (v1::Kind kind : {v1::KIND_HIP_DEVICE, v1::KIND_HIP_HOST, v1::KIND_HIP_MANAGED}) {
    const v1::KindTotals totals = TotalsFor(end_, kind);
    EXPECT_EQ(totals.live_bytes(), 0u) << tool::KindName(kind);
    EXPECT_EQ(totals.freed_bytes(), totals.allocated_bytes()) << tool::KindName(kind);
    EXPECT_EQ(totals.allocated_count(), TotalsFor(hip_, kind).allocated_count());
  }
}

TEST_F(HipCallsTest, FailuresReturnWhatTheRuntimeReturnedAndMatchARunWithoutTheShim) {
  // The fake's answers (fake_amdhip64.c), *ptr left at the sentinel.
  const std::map<std::string, std::vector<std::string>> want = {
      {"huge", {"2", "0x1234"}},           {"pitch-huge", {"2", "0x1234"}},
      {"pitch-null", {"1", "0x1234"}},     {"managed-flags", {"1", "0x1234"}},
      {"ext-flags", {"1", "0x1234"}},      {"pool-null", {"1", "0x1234"}},
      {"host-huge", {"2", "0x1234"}},      {"create-size", {"1", "0x1234"}},
      {"free-bogus", {"1", "0x1000"}},     {"freeasync-bogus", {"1", "0x1000"}},
      {"hostfree-bogus", {"1", "0x2000"}}, {"release-bogus", {"1", "0x3000"}},
      {"free-host-P", {"1", "(nil)"}},     {"hostfree-device-A", {"1", "(nil)"}},
      {"map-bogus", {"1", "(nil)"}},
  };
  for (const auto& [label, fields] : want) EXPECT_EQ(out_.Named("fail", label), fields) << label;
  EXPECT_EQ(out_.Word("fail-pitch"), "77");
  EXPECT_EQ(out_.Word("errno"), "4242") << "errno changed by the first call";
  // "zero": hipMalloc(0) succeeds with NULL: nothing recorded (checked by
  // the row count above), NULL handed back.
  EXPECT_EQ(out_.Named("ok", "zero"), (std::vector<std::string>{"0", "(nil)"}));

  TempDir plain;
  RunResult without = RunFixture("hip_calls", {}, plain.path(), /*preload=*/false);
  ASSERT_EQ(without.exit_code, 0) << Describe(without);
  EXPECT_EQ(ComparableOutput(FixtureOutput(without.stdout_data)), ComparableOutput(out_));
  EXPECT_EQ(without.stderr_data, run_.stderr_data);
}

TEST_F(HipCallsTest, RuntimeHostMemoryIsGpuDriverHostNotHeap) {
  const std::vector<Range> fake = ModuleRanges(hip_, FakeRuntimePath());
  ASSERT_FALSE(fake.empty());
  // Live in the fake at "hip": one bookkeeping block per live allocation
  // (A C D E F H M P S V1) and per reserved range (VA), all malloc()ed
  // inside HIP calls; the scratch blocks were freed.
  std::vector<Allocation> driver;
  for (const Allocation& a : Rows(hip_)) {
    if (!AnyFrameIn(hip_, a, fake)) continue;
    EXPECT_NE(a.kind, v1::KIND_HEAP) << "runtime malloc counted as the program's heap";
    EXPECT_NE(a.kind, v1::KIND_MMAP_ANON);
    if (a.kind == v1::KIND_GPU_DRIVER_HOST) driver.push_back(a);
  }
  EXPECT_EQ(driver.size(), 11u);
  for (const Allocation& a : driver) {
    EXPECT_EQ(a.size, kFakeBookkeepingBytes);
    EXPECT_EQ(a.flags, 0u) << "a heap block, not a mapping";
  }
  // The HIP calls' callers are on those stacks too.
  int with_caller = 0;
  for (const Allocation& a : driver) {
    for (const char* function : {"alloc_device", "alloc_managed", "alloc_host", "alloc_virtual"}) {
      if (AnyFrameIn(hip_, a, {ranges_.at(function)})) {
        ++with_caller;
        break;
      }
    }
  }
  EXPECT_EQ(with_caller, 11);
  // Everything the fake took was given back by the end.
  for (const Allocation& a : Rows(end_)) EXPECT_FALSE(AnyFrameIn(end_, a, fake)) << a.size;
}

// --- a runtime only a library opened RTLD_LOCAL links -----------------------

TEST(HipRtldLocalTest, FoundThroughTheLoadedObjectsAndAFailedLookupIsNotCached) {
  const std::string backend = FixtureLibraryPath("hip_backend");
  TempDir dir;
  RunResult run = RunFixture("hip_dlopen", {backend}, dir.path());
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  FixtureOutput out(run.stdout_data);
  // A program probing with dlsym(RTLD_DEFAULT, "hipMalloc") finds nothing,
  // as without the shim. The hook itself, called with no runtime loaded,
  // answers as libamdhip64 does when it cannot initialise, without touching
  // *ptr.
  EXPECT_EQ(out.Word("probe-found"), "0");
  EXPECT_EQ(out.Word("hook-found"), "1");
  EXPECT_EQ(out.All("probe").at(0), (std::vector<std::string>{"101", "0x1234"}));
  EXPECT_EQ(out.Word("runtime-global"), "0") << "the runtime must be local to the backend";
  // The backend itself, probing with RTLD_DEFAULT, finds the runtime in its
  // own scope, as without the shim.
  EXPECT_EQ(out.Word("backend-probe"), "1");
  EXPECT_EQ(out.All("late").at(0).at(0), "0") << "the hook must find the runtime loaded later";

  const v1::Snapshot s = SnapshotLabeled(dir.path(), "local");
  const std::map<std::string, Range> ranges = Ranges(out);
  const std::map<std::string, std::pair<Expected, uint64_t>> want = {
      {"device",
       {{2 * kMiB, v1::KIND_HIP_DEVICE, 0, "backend_alloc"},
        ParseNumber(out.Named("ok", "device").at(1))}},
      {"host",
       {{1 * kMiB, v1::KIND_HIP_HOST, 0, "backend_alloc_host"},
        ParseNumber(out.Named("ok", "host").at(1))}},
      {"late",
       {{8 * kKiB, v1::KIND_HIP_DEVICE, 0, "probe_again"},
        ParseNumber(out.All("late").at(0).at(1))}},
  };
  std::map<uint64_t, Allocation> by_address;
  for (const Allocation& a : HipRows(s)) by_address.emplace(a.address, a);
  EXPECT_EQ(by_address.size(), want.size()) << "the released block must be gone";
  for (const auto& [label, expected] : want) {
    SCOPED_TRACE(label);
    auto found = by_address.find(expected.second);
    ASSERT_NE(found, by_address.end());
    EXPECT_EQ(found->second.size, expected.first.size);
    EXPECT_EQ(found->second.kind, expected.first.kind);
    const std::vector<uint64_t> frames = FramesOf(s, found->second.stack_id);
    ASSERT_FALSE(frames.empty());
    EXPECT_TRUE(ranges.at(expected.first.function).Contains(frames[0]));
  }
  EXPECT_EQ(TotalsFor(s, v1::KIND_HIP_HOST).allocated_count(), 1u) << "hipHostAlloc nests";
  EXPECT_EQ(TotalsFor(s, v1::KIND_HIP_DEVICE).allocated_count(), 3u);
  EXPECT_EQ(TotalsFor(s, v1::KIND_HIP_DEVICE).freed_bytes(), 1 * kMiB);

  // Without the shim: no hook to find, the same results otherwise.
  TempDir plain;
  RunResult without = RunFixture("hip_dlopen", {backend}, plain.path(), /*preload=*/false);
  ASSERT_EQ(without.exit_code, 0) << Describe(without);
  FixtureOutput plain_out(without.stdout_data);
  EXPECT_EQ(plain_out.Word("probe-found"), "0");
  EXPECT_EQ(plain_out.Word("runtime-global"), "0");
  for (const char* label : {"device", "host", "free-gone"}) {
    EXPECT_EQ(plain_out.Named("ok", label).at(0), out.Named("ok", label).at(0)) << label;
  }
}

// --- the real runtime, no GPU -------------------------------------------------

TEST(HipRealRuntimeTest, FailsExactlyAsWithoutTheShimAndRecordsNothing) {
  if (!std::ifstream(FixturePath("hip_real")).good()) {
    GTEST_SKIP() << "hip_real not built: libamdhip64-dev is not installed "
                    "(scripts/install-deps.sh installs it)";
  }
  TempDir plain;
  RunResult without = RunFixture("hip_real", {}, plain.path(), /*preload=*/false);
  TempDir dir;
  RunResult with = RunFixture("hip_real", {}, dir.path());
  EXPECT_EQ(with.exit_code, without.exit_code) << Describe(with);
  EXPECT_EQ(with.term_signal, without.term_signal);
  EXPECT_EQ(with.stdout_data, without.stdout_data);
  EXPECT_EQ(with.stderr_data, without.stderr_data);
  ASSERT_EQ(without.exit_code, 0) << Describe(without);

  // Every call failed (no GPU here); had one succeeded, this machine has an
  // AMD GPU and the rest of this test does not apply.
  std::istringstream lines(without.stdout_data);
  std::string line;
  int calls = 0;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string call;
    int rc = -1;
    words >> call >> rc;
    if (call.empty()) continue;
    ++calls;
    if (rc == 0 && call != "hipFree-null") GTEST_SKIP() << "a real AMD GPU answered: " << line;
  }
  EXPECT_EQ(calls, 23);

  const std::vector<std::string> files = ListSnapshots(dir.path());
  ASSERT_EQ(files.size(), 1u) << "the exit snapshot";
  const v1::Snapshot s = LoadSnapshot(files[0]);
  EXPECT_TRUE(HipRows(s).empty());
  for (v1::Kind kind : {v1::KIND_HIP_DEVICE, v1::KIND_HIP_HOST, v1::KIND_HIP_MANAGED}) {
    EXPECT_EQ(TotalsFor(s, kind).allocated_count(), 0u) << tool::KindName(kind);
  }
  // The calls did reach the real runtime: what it allocated on the host
  // while trying to initialise inside them is gpu-driver-host.
  EXPECT_GT(TotalsFor(s, v1::KIND_GPU_DRIVER_HOST).allocated_count(), 0u);
}

// --- heap, mmap, Vulkan and HIP in one process ---------------------------------

// Whether libretain.so has a Vulkan layer (the vulkan branch adds it).
bool ShimHasVulkanLayer() {
  return RunTool({"nm", "-D", "--defined-only", ShimPath()})
             .find(" vkNegotiateLoaderLayerInterfaceVersion\n") != std::string::npos;
}

TEST(HipMixedTest, PerKindTotalsExactInTheSnapshotAndInRetainDiff) {
  if (!std::ifstream(FixturePath("hip_mixed")).good()) {
    GTEST_SKIP() << "hip_mixed not built: the Vulkan headers or loader are missing";
  }
  const std::string icd = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
  TempDir dir;
  // LP_NUM_THREADS=0: lavapipe without its worker threads, which would
  // otherwise allocate and free small blocks of their own between the two
  // snapshots and make the heap's growth differ from the program's.
  RunResult run =
      RunFixture("hip_mixed", {}, dir.path(), /*preload=*/true,
                 {{"VK_DRIVER_FILES", icd}, {"VK_ICD_FILENAMES", icd}, {"LP_NUM_THREADS", "0"}});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  FixtureOutput out(run.stdout_data);
  const v1::Snapshot before = SnapshotLabeled(dir.path(), "before");
  const v1::Snapshot after = SnapshotLabeled(dir.path(), "after");
  ASSERT_TRUE(ShimHasVulkanLayer()) << "libretain.so must export its Vulkan layer";
  ASSERT_GT(LiveCount(after, v1::KIND_VULKAN_DEVICE), 0u) << "the layer recorded nothing";
  ASSERT_EQ(out.Word("vulkan"), "1") << "lavapipe did not allocate:\n" << Describe(run);

  // The exact diff of the two snapshots (by birth sequence).
  std::vector<std::string> files = ListSnapshots(dir.path());
  std::string before_file, after_file;
  for (const std::string& f : files) {
    const std::string label = LoadSnapshot(f).header().label();
    if (label == "before") before_file = f;
    if (label == "after") after_file = f;
  }
  const std::string json = RunTool({RETAIN_DIFF_PATH, "--json", before_file, after_file});
  // lavapipe's own thread (its queue's, which LP_NUM_THREADS does not stop)
  // may free blocks of its own in the window: the 16 bytes Mesa's thread
  // start hands the new thread, freed when the thread first runs, on a loaded
  // machine after "before". Those are the driver's heap, not the program's:
  // the heap's growth is the program's 3 MiB plus their net, to the byte.
  // (lavapipe's blocks taken inside vkAllocateMemory are gpu-driver-host.)
  const int64_t lavapipe_heap_net = std::stoll(RunTool(
      {"python3", "-c",
       "import json, sys\n"
       "rows = json.load(sys.stdin)['rows']\n"
       "print(sum(r['net_bytes'] for r in rows if r['owner']['key'].startswith('libvulkan_lvp')\n"
       "          and not any('AllocateMemory' in f for f in r['owner']['chain'])))\n"},
      json));

  // Growth between the snapshots, per kind: exactly what the program did
  // (and, on the heap, lavapipe's thread).
  const std::map<std::string, int64_t> want = {
      {"heap", static_cast<int64_t>(3 * kMiB) + lavapipe_heap_net},
      {"mmap-anon", 5 * kMiB},
      {"vulkan-device", 16 * kMiB},
      {"hip-device", 7 * kMiB},
      {"hip-host", 1 * kMiB},
  };
  std::map<std::string, int64_t> growth;
  for (const v1::KindTotals& t : after.totals()) {
    growth[tool::KindName(t.kind())] += static_cast<int64_t>(t.live_bytes());
  }
  for (const v1::KindTotals& t : before.totals()) {
    growth[tool::KindName(t.kind())] -= static_cast<int64_t>(t.live_bytes());
  }
  for (const auto& [kind, bytes] : want) {
    EXPECT_EQ(growth[kind], static_cast<int64_t>(bytes)) << kind << " in the snapshots";
  }
  // lavapipe backs the Vulkan block with host memory taken inside the call,
  // the fake HIP runtime takes a bookkeeping block per allocation: both are
  // the drivers', not the program's heap (checked exact above).
  EXPECT_GE(growth["gpu-driver-host"], static_cast<int64_t>(16 * kMiB + 2 * kFakeBookkeepingBytes));

  // retain-diff's RSS explanation says the same, kind by kind.
  const std::string rows = RunTool({"python3", "-c",
                                    "import json, sys\n"
                                    "for t in json.load(sys.stdin)['rss']['tracked']:\n"
                                    "    print(t['kind'], t['live_bytes'])\n"},
                                   json);
  std::map<std::string, int64_t> tracked;
  std::istringstream lines(rows);
  std::string kind;
  int64_t bytes = 0;
  while (lines >> kind >> bytes) tracked[kind] = bytes;
  // lavapipe's 16 MiB of "device" memory is its host block: retain-diff
  // counts it once, as host memory (gpu-driver-host), and no device memory.
  for (const auto& [name, want_bytes] : want) {
    EXPECT_EQ(tracked[name], name == "vulkan-device" ? 0 : static_cast<int64_t>(want_bytes))
        << name << " in retain-diff\n"
        << json;
  }
  EXPECT_EQ(tracked["gpu-driver-host"], growth["gpu-driver-host"]);
}

}  // namespace
}  // namespace retain::test
