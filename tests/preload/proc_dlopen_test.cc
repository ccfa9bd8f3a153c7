// dlopen/dlclose: allocations made by a dlopen'ed library are attributed to
// it (stack frame 0 in its executable segment, the module listed with its
// path and GNU build-id), and after dlclose the module stays in the table,
// marked unloaded, so its still-live allocations keep resolving into it,
// even when the library came and went between two snapshots.
#include <cstdint>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

constexpr uint64_t kKeptSize = 123457;      // proc_dlib's constructor
constexpr uint64_t kAllocateSize = 654321;  // proc_dlib_allocate, called by proc_dlopen

// The GNU build-id of an ELF file, as `readelf -n` prints it (lower hex).
std::string BuildIdOf(const std::string& path) {
  RunOptions options;
  options.argv = {"/usr/bin/readelf", "-n", path};
  options.env = {{"LC_ALL", "C"}};
  const RunResult run = test::Run(options);
  const std::string marker = "Build ID: ";
  const size_t at = run.stdout_data.find(marker);
  if (at == std::string::npos) return "";
  std::istringstream rest(run.stdout_data.substr(at + marker.size()));
  std::string id;
  rest >> id;
  return id;
}

// Checks that the live block at `address` has `size` bytes and was
// allocated from code of `module`.
void ExpectAllocatedIn(const v1::Snapshot& snapshot, const v1::Module& module, uint64_t address,
                       uint64_t size, const std::string& what) {
  const auto row = FindAllocation(snapshot, address);
  ASSERT_TRUE(row.has_value()) << what << " is not live in snapshot " << snapshot.header().label();
  EXPECT_EQ(row->size, size) << what;
  const auto frame = FirstFrame(snapshot, row->stack_id);
  ASSERT_TRUE(frame.has_value()) << what << " has no stack";
  EXPECT_TRUE(InExecutableSegment(module, *frame))
      << what << ": frame 0 at 0x" << std::hex << *frame << " is not in " << module.path()
      << "'s executable segments";
}

TEST(ProcDlopen, LibraryAllocationsResolveBeforeAndAfterDlclose) {
  TempDir retain_dir;
  const std::string library = FixtureLibraryPath("proc_dlib");
  RunOptions options;
  options.argv = {FixturePath("proc_dlopen"), library};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_TRUE(RetainLines(run.stderr_data).empty()) << run.stderr_data;
  const std::string line = LineStartingWith(run.stdout_data, "kept=");
  ASSERT_FALSE(line.empty()) << run.stdout_data;
  const uint64_t kept = Field(line, "kept").value_or(0);
  const uint64_t allocated = Field(line, "allocated").value_or(0);
  // The library really went away (else "unloaded" would prove nothing).
  ASSERT_EQ(Field(line, "unloaded"), 1u) << line;
  const uint64_t kept_again = Field(line, "kept2").value_or(0);
  const uint64_t second_base = Field(line, "base2").value_or(0);
  // The second load really went to a new place (else the first load's
  // module entry would cover it and prove nothing).
  ASSERT_EQ(Field(line, "moved"), 1u) << line;
  EXPECT_NE(line.find("snapshots=0,0,0"), std::string::npos) << line;

  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 4u);  // loaded, unloaded, reloaded, exit
  const v1::Snapshot& loaded = snapshots[0];
  const v1::Snapshot& unloaded = snapshots[1];
  const v1::Snapshot& reloaded = snapshots[2];
  ASSERT_EQ(loaded.header().label(), "loaded");
  ASSERT_EQ(unloaded.header().label(), "unloaded");
  ASSERT_EQ(reloaded.header().label(), "reloaded");

  const std::string build_id = BuildIdOf(library);
  ASSERT_FALSE(build_id.empty()) << "readelf found no build-id in " << library;

  {
    SCOPED_TRACE("while loaded");
    const v1::Module* module = FindModule(loaded, library);
    ASSERT_NE(module, nullptr) << library << " is not in the module table";
    EXPECT_EQ(Hex(module->build_id()), build_id);
    EXPECT_FALSE(module->unloaded());
    EXPECT_FALSE(module->executable_segments().empty());
    ExpectAllocatedIn(loaded, *module, allocated, kAllocateSize, "proc_dlib_allocate's block");
    ExpectAllocatedIn(loaded, *module, kept, kKeptSize, "the constructor's block");
  }
  {
    SCOPED_TRACE("after dlclose");
    const v1::Module* module = FindModule(unloaded, library);
    ASSERT_NE(module, nullptr) << library << " was dropped from the module table";
    EXPECT_TRUE(module->unloaded());
    EXPECT_EQ(Hex(module->build_id()), build_id);
    ExpectAllocatedIn(unloaded, *module, kept, kKeptSize, "the constructor's block");
    ExpectAllocatedIn(unloaded, *module, allocated, kAllocateSize, "proc_dlib_allocate's block");
  }
  {
    // Loaded elsewhere and unloaded again with no snapshot in between: the
    // second constructor's block must resolve into a module entry of the
    // library at its second load address, marked unloaded.
    SCOPED_TRACE("after a second dlopen/dlclose");
    const auto row = FindAllocation(reloaded, kept_again);
    ASSERT_TRUE(row.has_value()) << "the second constructor's block is not live";
    EXPECT_EQ(row->size, kKeptSize);
    const auto frame = FirstFrame(reloaded, row->stack_id);
    ASSERT_TRUE(frame.has_value());
    const v1::Module* owner = nullptr;
    for (const v1::Module& module : reloaded.modules()) {
      if (InExecutableSegment(module, *frame)) owner = &module;
    }
    ASSERT_NE(owner, nullptr) << "frame 0 at 0x" << std::hex << *frame
                              << " is in no module: the library's second load was never seen";
    EXPECT_EQ(Canonical(owner->path()), Canonical(library));
    EXPECT_TRUE(owner->unloaded());
    EXPECT_EQ(owner->load_bias(), second_base);
    EXPECT_EQ(Hex(owner->build_id()), build_id);
  }
}

}  // namespace
}  // namespace retain::test::proc
