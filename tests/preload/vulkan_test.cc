// The Vulkan layer inside libretain.so, for real: the system's Vulkan loader
// and Mesa's lavapipe (a CPU Vulkan driver, so no GPU is needed), with the
// fixtures vulkan_alloc (loader export, vkGetInstanceProcAddr,
// vkGetDeviceProcAddr) and vulkan_hpp (Vulkan-Hpp's dynamic dispatcher).
//
// Every run points the loader at lavapipe alone (VK_DRIVER_FILES and the
// older VK_ICD_FILENAMES) so a machine with a GPU driver behaves the same,
// and puts the layer manifest under a temporary XDG_RUNTIME_DIR. Tests skip
// when lavapipe's ICD file is not installed (mesa-vulkan-drivers).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/preload/acct_util.h"

namespace retain::test::acct {
namespace {

constexpr char kLavapipeIcd[] = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
constexpr char kLayerName[] = "VK_LAYER_RETAIN_memory";
constexpr uint64_t kMiB = 1 << 20;

// Layer variables of whoever runs the tests are not the runs' business:
// removed from this process's environment, which the runs inherit (set
// empty they would still count: an empty VK_LAYER_PATH hides every layer).
void ClearLayerVariables() {
  for (const char* name : {"VK_ADD_LAYER_PATH", "VK_LAYER_PATH", "VK_LOADER_LAYERS_ENABLE",
                           "VK_LOADER_LAYERS_DISABLE", "VK_INSTANCE_LAYERS", "RETAIN_VULKAN"}) {
    unsetenv(name);
  }
}

#define SKIP_WITHOUT_LAVAPIPE()                                                        \
  ClearLayerVariables();                                                               \
  if (!std::filesystem::exists(kLavapipeIcd)) {                                        \
    GTEST_SKIP() << "Mesa's lavapipe Vulkan driver is not installed (" << kLavapipeIcd \
                 << " missing: apt-get install mesa-vulkan-drivers, as scripts/"       \
                    "install-deps.sh does)";                                           \
  }

// The environment of every run: lavapipe only, manifests under `runtime_dir`.
std::map<std::string, std::string> VulkanEnv(const std::string& runtime_dir) {
  return {{"VK_DRIVER_FILES", kLavapipeIcd},
          {"VK_ICD_FILENAMES", kLavapipeIcd},
          {"XDG_RUNTIME_DIR", runtime_dir}};
}

// One allocation the fixture reported.
struct Block {
  std::string route;
  std::string name;
  uint64_t handle = 0;
  uint64_t size = 0;
  uint32_t type = 0;
};

std::vector<Block> Blocks(const FixtureOutput& out, const std::string& key) {
  std::vector<Block> blocks;
  for (const auto& f : out.All(key)) {
    if (f.size() != 5) {
      ADD_FAILURE() << "bad '" << key << "' line";
      continue;
    }
    blocks.push_back({f[0], f[1], ParseNumber(f[2]), ParseNumber(f[3]),
                      static_cast<uint32_t>(ParseNumber(f[4]))});
  }
  return blocks;
}

// "memtype INDEX FLAGS HEAP": the property flags of each memory type, as
// the program itself read them.
std::map<uint32_t, uint64_t> MemoryTypeFlags(const FixtureOutput& out) {
  std::map<uint32_t, uint64_t> flags;
  for (const auto& f : out.All("memtype")) {
    if (f.size() == 3) flags[static_cast<uint32_t>(ParseNumber(f[0]))] = ParseNumber(f[1]);
  }
  return flags;
}

std::string EnvLine(const FixtureOutput& out, const std::string& name) {
  const std::vector<std::string> value = out.Named("env", name);
  return value.size() == 1 ? value[0] : "";
}

bool HasLayerLine(const FixtureOutput& out) {
  for (const auto& f : out.All("layer")) {
    if (!f.empty() && f[0] == kLayerName) return true;
  }
  return false;
}

// Checks one run's "vulkan" snapshot against what the fixture printed.
// `functions`: route -> the fixture function that allocates through it.
void CheckVulkanSnapshot(const FixtureOutput& out, const v1::Snapshot& snapshot,
                         const std::map<std::string, std::string>& functions) {
  const std::map<std::string, Range> ranges = FunctionRanges(out);
  const std::map<uint32_t, uint64_t> type_flags = MemoryTypeFlags(out);
  ASSERT_FALSE(type_flags.empty()) << "no memtype lines";
  const std::vector<Block> live = Blocks(out, "alloc");
  const std::vector<Block> freed = Blocks(out, "freed");
  ASSERT_FALSE(live.empty());

  // Every live allocation: its own row, exact size, type and flags, and a
  // stack through the fixture function of its route.
  std::map<uint64_t, Allocation> rows;
  for (const Allocation& a : Rows(snapshot, v1::KIND_VULKAN_DEVICE)) rows[a.address] = a;
  EXPECT_EQ(rows.size(), live.size()) << "vulkan-device rows";
  std::set<uint64_t> live_keys;
  uint64_t live_bytes = 0;
  std::multiset<uint64_t> live_sizes;
  for (const Block& block : live) {
    const std::string what = block.route + "/" + block.name;
    live_bytes += block.size;
    live_sizes.insert(block.size);
    // The key is the VkDeviceMemory handle XOR (the device's slot << 56):
    // the handle itself on the first device, slot 1 for the second.
    const uint64_t key = block.handle ^ (block.route == "second" ? uint64_t{1} << 56 : 0);
    const auto row = rows.find(key);
    if (row == rows.end()) {
      ADD_FAILURE() << what << ": no vulkan-device row for handle 0x" << std::hex << block.handle
                    << " (key 0x" << key << ")";
      continue;
    }
    live_keys.insert(key);
    EXPECT_EQ(row->second.size, block.size) << what;
    ASSERT_TRUE(type_flags.count(block.type)) << what;
    const uint64_t want_flags = block.type | ((type_flags.at(block.type) & 0xff) << 8);
    EXPECT_EQ(row->second.flags, want_flags)
        << what << std::hex << ": flags 0x" << row->second.flags << " want 0x" << want_flags;
    const std::string& function = functions.at(block.route);
    ASSERT_TRUE(ranges.count(function)) << "no range line for " << function;
    const Range range = ranges.at(function);
    EXPECT_TRUE(StackContainsRange(snapshot, row->second.stack_id, range.begin, range.end))
        << what << ": the stack does not lead into " << function;
  }
  // Freed ones are gone (a handle the driver handed out again later is live
  // under its new allocation, checked above).
  uint64_t freed_bytes = 0;
  for (const Block& block : freed) {
    freed_bytes += block.size;
    const uint64_t key = block.handle ^ (block.route == "second" ? uint64_t{1} << 56 : 0);
    if (live_keys.count(key) == 0) {
      EXPECT_EQ(rows.count(key), 0u) << block.route << "/" << block.name << " was freed";
    }
  }

  // Totals per kind, exact.
  const v1::KindTotals vulkan = TotalsFor(snapshot, v1::KIND_VULKAN_DEVICE);
  EXPECT_EQ(vulkan.live_bytes(), live_bytes);
  EXPECT_EQ(vulkan.live_count(), live.size());
  EXPECT_EQ(vulkan.allocated_bytes(), live_bytes + freed_bytes);
  EXPECT_EQ(vulkan.allocated_count(), live.size() + freed.size());
  EXPECT_EQ(vulkan.freed_bytes(), freed_bytes);
  EXPECT_EQ(vulkan.freed_count(), freed.size());
  EXPECT_EQ(LiveBytes(snapshot, v1::KIND_VULKAN_DEVICE), live_bytes);
  EXPECT_EQ(out.Number("live", 1), live_bytes);

  // Counted once: lavapipe's backing store of each block (posix_memalign of
  // the whole size inside vkAllocateMemory) is gpu-driver-host, with the
  // same stack through the fixture; none of it is heap.
  std::multiset<uint64_t> driver_sizes;
  for (const Allocation& a : Rows(snapshot, v1::KIND_GPU_DRIVER_HOST)) {
    if (a.size >= kMiB) driver_sizes.insert(a.size);
  }
  EXPECT_EQ(driver_sizes, live_sizes) << "gpu-driver-host blocks of 1 MiB and more";
  EXPECT_GE(TotalsFor(snapshot, v1::KIND_GPU_DRIVER_HOST).live_bytes(), live_bytes);
  for (const Allocation& a : Rows(snapshot, v1::KIND_HEAP)) {
    EXPECT_LT(a.size, kMiB) << "a heap row of " << a.size << " bytes: a block counted twice?";
  }
  EXPECT_LT(TotalsFor(snapshot, v1::KIND_HEAP).live_bytes(), 64 * kMiB);
}

struct VulkanRun {
  RunResult run;
  FixtureOutput out{""};
  v1::Snapshot snapshot;
};

VulkanRun RunDetails(const std::string& fixture, const TempDir& dir,
                     std::map<std::string, std::string> extra = {}) {
  VulkanRun r;
  std::map<std::string, std::string> env = VulkanEnv(dir.path());
  for (const auto& [name, value] : extra) env[name] = value;
  r.run = RunFixture(fixture, {"--details"}, dir.path(), true, env);
  r.out = FixtureOutput(r.run.stdout_data);
  if (r.run.exit_code != 0) {
    ADD_FAILURE() << Describe(r.run);
    return r;
  }
  r.snapshot = SnapshotLabeled(dir.path(), "vulkan");
  return r;
}

// The layer directory the run added (VK_ADD_LAYER_PATH's last element).
std::string LayerDir(const FixtureOutput& out, const std::string& variable = "VK_ADD_LAYER_PATH") {
  std::string value = EnvLine(out, variable);
  const size_t colon = value.rfind(':');
  return colon == std::string::npos ? value : value.substr(colon + 1);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Proves: allocations made through the loader's exported vkAllocateMemory,
// through vkGetInstanceProcAddr and through vkGetDeviceProcAddr, and on a
// second device (its rows keyed apart from the first's), all reach the
// layer: each live one is a vulkan-device row with its exact size, memory
// type index and the type's property flags as the program read them, and a
// stack through the fixture function of its route; freed ones are gone;
// totals exact; each 64 MiB block counted once (its backing store is
// gpu-driver-host, never heap).
TEST(VulkanLayer, EveryWayOfGettingFunctionsIsRecorded) {
  SKIP_WITHOUT_LAVAPIPE();
  TempDir dir;
  VulkanRun r = RunDetails("vulkan_alloc", dir);
  ASSERT_EQ(r.run.exit_code, 0);
  EXPECT_TRUE(HasLayerLine(r.out)) << "the loader does not list " << kLayerName;
  EXPECT_EQ(Blocks(r.out, "alloc").size(), 8u);
  CheckVulkanSnapshot(r.out, r.snapshot,
                      {{"export", "AllocThroughExport"},
                       {"instance", "AllocThroughInstanceProc"},
                       {"device", "AllocThroughDeviceProc"},
                       {"second", "AllocOnSecondDevice"}});
  // At exit everything was freed and destroyed: nothing Vulkan is live.
  for (const std::string& file : ListSnapshots(dir.path())) {
    const v1::Snapshot s = LoadSnapshot(file);
    if (s.header().trigger() != v1::TRIGGER_EXIT) continue;
    EXPECT_EQ(TotalsFor(s, v1::KIND_VULKAN_DEVICE).live_bytes(), 0u);
    EXPECT_EQ(TotalsFor(s, v1::KIND_VULKAN_DEVICE).allocated_count(), 16u);
  }
}

// Proves: Vulkan-Hpp's dynamic dispatcher initialised with
// vkGetInstanceProcAddr, the instance and the device (llama.cpp's
// ggml-vulkan) goes through the layer too, with the same exactness.
TEST(VulkanLayer, VulkanHppDynamicDispatcherIsRecorded) {
  SKIP_WITHOUT_LAVAPIPE();
  TempDir dir;
  VulkanRun r = RunDetails("vulkan_hpp", dir);
  ASSERT_EQ(r.run.exit_code, 0);
  EXPECT_EQ(Blocks(r.out, "alloc").size(), 2u);
  CheckVulkanSnapshot(r.out, r.snapshot, {{"hpp", "HppAllocate"}});
}

// Proves: the programs print the same and exit the same without the shim,
// with it, and with it and RETAIN_VULKAN=off; the shim writes nothing on
// stderr.
TEST(VulkanLayer, ProgramBehaviourUnchanged) {
  SKIP_WITHOUT_LAVAPIPE();
  for (const std::string fixture : {"vulkan_alloc", "vulkan_hpp"}) {
    TempDir dir;
    const auto env = VulkanEnv(dir.path());
    const RunResult plain = RunFixture(fixture, {}, dir.path(), false, env);
    ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
    EXPECT_NE(plain.stdout_data.find("done\n"), std::string::npos);
    const RunResult shim = RunFixture(fixture, {}, dir.path(), true, env);
    auto off_env = env;
    off_env["RETAIN_VULKAN"] = "off";
    const RunResult off = RunFixture(fixture, {}, dir.path(), true, off_env);
    for (const RunResult* r : {&shim, &off}) {
      EXPECT_EQ(r->exit_code, plain.exit_code) << fixture << "\n" << Describe(*r);
      EXPECT_EQ(r->term_signal, 0) << fixture;
      EXPECT_EQ(r->stdout_data, plain.stdout_data) << fixture;
      EXPECT_EQ(r->stderr_data, plain.stderr_data) << fixture;
    }
  }
}

// Proves: RETAIN_VULKAN=off installs no layer (no manifest, no variables,
// the loader does not list it, no vulkan-device records) and the program
// still works; lavapipe's blocks are then the program's heap, as for any
// library's malloc. Off also holds in a child that inherited the variables
// of a parent with the layer on.
TEST(VulkanLayer, OffMeansNoLayer) {
  SKIP_WITHOUT_LAVAPIPE();
  TempDir dir;
  VulkanRun r = RunDetails("vulkan_alloc", dir, {{"RETAIN_VULKAN", "off"}});
  ASSERT_EQ(r.run.exit_code, 0);
  EXPECT_FALSE(HasLayerLine(r.out));
  EXPECT_EQ(EnvLine(r.out, "VK_ADD_LAYER_PATH"), "-");
  EXPECT_EQ(EnvLine(r.out, "VK_LOADER_LAYERS_ENABLE"), "-");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/retain-vulkan"));
  EXPECT_TRUE(Rows(r.snapshot, v1::KIND_VULKAN_DEVICE).empty());
  EXPECT_EQ(TotalsFor(r.snapshot, v1::KIND_VULKAN_DEVICE).allocated_count(), 0u);
  int heap_64 = 0;
  for (const Allocation& a : Rows(r.snapshot, v1::KIND_HEAP)) heap_64 += a.size == 64 * kMiB;
  EXPECT_EQ(heap_64, 4) << "the four live 64 MiB blocks' backing store";

  // Off in a child that inherited an enabled layer: the loader loads the
  // library, which refuses to be the layer.
  TempDir on_dir;
  VulkanRun on = RunDetails("vulkan_alloc", on_dir);
  ASSERT_EQ(on.run.exit_code, 0);
  TempDir child_dir;
  VulkanRun child = RunDetails("vulkan_alloc", child_dir,
                               {{"RETAIN_VULKAN", "off"},
                                {"VK_ADD_LAYER_PATH", LayerDir(on.out)},
                                {"VK_LOADER_LAYERS_ENABLE", kLayerName}});
  ASSERT_EQ(child.run.exit_code, 0);
  EXPECT_TRUE(Rows(child.snapshot, v1::KIND_VULKAN_DEVICE).empty());
  EXPECT_EQ(TotalsFor(child.snapshot, v1::KIND_VULKAN_DEVICE).allocated_count(), 0u);
}

// Proves: the manifest names the real path of the loaded libretain.so even
// when it was preloaded through a symlink; it sits in a 0700 directory of
// its own under XDG_RUNTIME_DIR with nothing else (no temporary left), and
// the layer it describes is the one the loader loads.
TEST(VulkanManifest, WrittenAtTheRealPathOfTheShim) {
  SKIP_WITHOUT_LAVAPIPE();
  TempDir dir;
  const std::string link = dir.path() + "/link-to-libretain.so";
  std::filesystem::create_symlink(ShimPath(), link);
  auto env = VulkanEnv(dir.path());
  env["LD_PRELOAD"] = link;
  env["RETAIN_DIR"] = dir.path();
  const RunResult run = RunFixture("vulkan_alloc", {"--details"}, dir.path(), false, env);
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const FixtureOutput out(run.stdout_data);
  const std::string layer_dir = EnvLine(out, "VK_ADD_LAYER_PATH");
  EXPECT_EQ(layer_dir.rfind(dir.path() + "/retain-vulkan/", 0), 0u) << layer_dir;
  EXPECT_EQ(EnvLine(out, "VK_LOADER_LAYERS_ENABLE"), kLayerName);
  EXPECT_EQ(DirEntries(layer_dir), std::vector<std::string>{std::string(kLayerName) + ".json"});
  const std::string manifest = ReadFile(layer_dir + "/" + kLayerName + ".json");
  EXPECT_NE(manifest.find("\"library_path\": \"" + RealPath(ShimPath()) + "\""), std::string::npos)
      << manifest;
  EXPECT_NE(manifest.find("\"name\": \"VK_LAYER_RETAIN_memory\""), std::string::npos);
  EXPECT_NE(manifest.find("\"type\": \"GLOBAL\""), std::string::npos);
  for (const std::string& d : {layer_dir, dir.path() + "/retain-vulkan"}) {
    struct stat st;
    ASSERT_EQ(lstat(d.c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << d;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
    EXPECT_EQ(st.st_uid, geteuid()) << d;
  }
  EXPECT_TRUE(HasLayerLine(out));
  EXPECT_EQ(Rows(SnapshotLabeled(dir.path(), "vulkan"), v1::KIND_VULKAN_DEVICE).size(), 8u);
}

// Proves: a second run finds the same manifest and leaves the file alone
// (same inode: not rewritten); a child started by a shell under the shim
// inherits the variables, which hold the layer once (not appended twice),
// and its allocations are recorded.
TEST(VulkanManifest, RerunAndInheritingChildReuseIt) {
  SKIP_WITHOUT_LAVAPIPE();
  TempDir dir;
  VulkanRun first = RunDetails("vulkan_alloc", dir);
  ASSERT_EQ(first.run.exit_code, 0);
  const std::string layer_dir = LayerDir(first.out);
  const std::string manifest = layer_dir + "/" + kLayerName + ".json";
  struct stat before;
  ASSERT_EQ(stat(manifest.c_str(), &before), 0) << manifest;

  TempDir dir2;
  auto env = VulkanEnv(dir.path());  // the same runtime directory
  env["RETAIN_DIR"] = dir2.path();
  const RunResult second = RunFixture("vulkan_alloc", {"--details"}, dir2.path(), true, env);
  ASSERT_EQ(second.exit_code, 0) << Describe(second);
  struct stat after;
  ASSERT_EQ(stat(manifest.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "the manifest was rewritten";

  TempDir dir3;
  RunOptions options;
  options.argv = {"/bin/sh", "-c", "\"$0\" --details; status=$?; exit $status",
                  FixturePath("vulkan_alloc")};
  options.env = VulkanEnv(dir.path());
  options.env["RETAIN_DIR"] = dir3.path();
  options.preload = true;
  options.timeout_seconds = 60;
  const RunResult child = retain::test::Run(options);
  ASSERT_EQ(child.exit_code, 0) << Describe(child);
  const FixtureOutput out(child.stdout_data);
  EXPECT_EQ(EnvLine(out, "VK_ADD_LAYER_PATH"), layer_dir);
  EXPECT_EQ(EnvLine(out, "VK_LOADER_LAYERS_ENABLE"), kLayerName);
  EXPECT_EQ(Rows(SnapshotLabeled(dir3.path(), "vulkan"), v1::KIND_VULKAN_DEVICE).size(), 8u);
  ASSERT_EQ(stat(manifest.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(DirEntries(layer_dir).size(), 1u);
}

// Proves: a process that inherits the variables but not LD_PRELOAD (a
// server's child started with a cleaned LD_PRELOAD) is unharmed: the loader
// dlopen()s libretain.so from the manifest, the copy refuses to negotiate
// because it is not the process's shim, the loader skips the layer, and
// the program prints and exits exactly as without any of it.
TEST(VulkanManifest, ChildWithoutPreloadSkipsTheLayer) {
  SKIP_WITHOUT_LAVAPIPE();
  TempDir dir;
  VulkanRun first = RunDetails("vulkan_alloc", dir);
  ASSERT_EQ(first.run.exit_code, 0);
  const std::string layer_dir = LayerDir(first.out);
  ASSERT_FALSE(layer_dir.empty());
  const auto env = VulkanEnv(dir.path());
  const RunResult plain = RunFixture("vulkan_alloc", {}, dir.path(), false, env);
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  auto inherited = env;
  inherited["VK_ADD_LAYER_PATH"] = layer_dir;
  inherited["VK_LOADER_LAYERS_ENABLE"] = kLayerName;
  TempDir child_dir;  // where a copy that started anyway would write
  inherited["RETAIN_DIR"] = child_dir.path();
  const RunResult child = RunFixture("vulkan_alloc", {}, dir.path(), false, inherited);
  EXPECT_EQ(child.exit_code, 0) << Describe(child);
  EXPECT_EQ(child.term_signal, 0);
  EXPECT_EQ(child.stdout_data, plain.stdout_data);
  EXPECT_EQ(child.stderr_data, plain.stderr_data);
  // The copy the loader opened stayed inert: no snapshot, nothing started.
  EXPECT_TRUE(ListSnapshots(child_dir.path()).empty());
}

// Proves: values the user set are kept, the layer appended after them:
// VK_ADD_LAYER_PATH with ':', VK_LOADER_LAYERS_ENABLE with ','; and when
// VK_LAYER_PATH is set (the loader then ignores VK_ADD_LAYER_PATH) the
// directory is appended to VK_LAYER_PATH. The layer works in each case.
TEST(VulkanManifest, ExistingValuesAreAppendedTo) {
  SKIP_WITHOUT_LAVAPIPE();
  {
    TempDir dir;
    VulkanRun r = RunDetails("vulkan_alloc", dir,
                             {{"VK_ADD_LAYER_PATH", "/nonexistent/layers"},
                              {"VK_LOADER_LAYERS_ENABLE", "VK_LAYER_NOT_INSTALLED"}});
    ASSERT_EQ(r.run.exit_code, 0);
    const std::string layer_dir = LayerDir(r.out);
    EXPECT_EQ(layer_dir.rfind(dir.path() + "/retain-vulkan/", 0), 0u) << layer_dir;
    EXPECT_EQ(EnvLine(r.out, "VK_ADD_LAYER_PATH"), "/nonexistent/layers:" + layer_dir);
    EXPECT_EQ(EnvLine(r.out, "VK_LOADER_LAYERS_ENABLE"),
              std::string("VK_LAYER_NOT_INSTALLED,") + kLayerName);
    EXPECT_EQ(Rows(r.snapshot, v1::KIND_VULKAN_DEVICE).size(), 8u);
  }
  {
    TempDir dir;
    VulkanRun r = RunDetails("vulkan_alloc", dir, {{"VK_LAYER_PATH", "/nonexistent/only"}});
    ASSERT_EQ(r.run.exit_code, 0);
    const std::string layer_dir = LayerDir(r.out, "VK_LAYER_PATH");
    EXPECT_EQ(EnvLine(r.out, "VK_LAYER_PATH"), "/nonexistent/only:" + layer_dir);
    EXPECT_EQ(EnvLine(r.out, "VK_ADD_LAYER_PATH"), "-");
    EXPECT_EQ(Rows(r.snapshot, v1::KIND_VULKAN_DEVICE).size(), 8u);
  }
}

// Proves: many processes starting at once with the same runtime directory
// (all writing the manifest for the first time) leave exactly one whole
// manifest and no temporary file, and every one of them runs fine.
TEST(VulkanManifest, ConcurrentStartsLeaveOneWholeManifest) {
  SKIP_WITHOUT_LAVAPIPE();
  TempDir reference_dir;
  VulkanRun reference = RunDetails("vulkan_alloc", reference_dir);
  ASSERT_EQ(reference.run.exit_code, 0);
  const std::string reference_layer_dir = LayerDir(reference.out);
  const std::string want = ReadFile(reference_layer_dir + "/" + kLayerName + ".json");
  ASSERT_FALSE(want.empty());
  for (int round = 0; round < 3; ++round) {
    TempDir dir;
    std::vector<RunResult> results(8);
    std::vector<std::thread> threads;
    for (RunResult& result : results) {
      threads.emplace_back([&result, &dir] {
        RunOptions options;
        options.argv = {FixturePath("proc_true")};
        options.env = VulkanEnv(dir.path());
        options.env["RETAIN_DIR"] = dir.path();
        options.preload = true;
        result = retain::test::Run(options);
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const RunResult& result : results) {
      EXPECT_EQ(result.exit_code, 0) << Describe(result);
      EXPECT_EQ(result.stdout_data, "proc_true ran\n");
    }
    const std::vector<std::string> hashes = DirEntries(dir.path() + "/retain-vulkan");
    ASSERT_EQ(hashes.size(), 1u) << "round " << round;
    const std::string layer_dir = dir.path() + "/retain-vulkan/" + hashes[0];
    EXPECT_EQ(hashes[0], std::filesystem::path(reference_layer_dir).filename().string());
    EXPECT_EQ(DirEntries(layer_dir), std::vector<std::string>{std::string(kLayerName) + ".json"})
        << "round " << round;
    EXPECT_EQ(ReadFile(layer_dir + "/" + kLayerName + ".json"), want) << "round " << round;
  }
}

// Proves: a layer directory another user could write to is refused (a
// manifest planted there would load any library into the program): no
// variables are set, one warning says why, and the program runs unchanged.
TEST(VulkanManifest, UnsafeDirectoryIsRefused) {
  SKIP_WITHOUT_LAVAPIPE();
  TempDir dir;
  const std::string base = dir.path() + "/retain-vulkan";
  ASSERT_EQ(mkdir(base.c_str(), 0700), 0);
  ASSERT_EQ(chmod(base.c_str(), 0777), 0);
  VulkanRun r = RunDetails("vulkan_alloc", dir);
  ASSERT_EQ(r.run.exit_code, 0);
  EXPECT_EQ(EnvLine(r.out, "VK_ADD_LAYER_PATH"), "-");
  EXPECT_EQ(EnvLine(r.out, "VK_LOADER_LAYERS_ENABLE"), "-");
  EXPECT_NE(r.run.stderr_data.find("not a private directory"), std::string::npos)
      << r.run.stderr_data;
  EXPECT_TRUE(DirEntries(base).empty());
  EXPECT_TRUE(Rows(r.snapshot, v1::KIND_VULKAN_DEVICE).empty());
}

}  // namespace
}  // namespace retain::test::acct
