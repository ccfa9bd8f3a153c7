// Stacks and modules under the shim: the private libunwind does not replace
// the process's unwinder (fixture acct_unwinder); frame-pointer and libunwind
// capture attribute the same sites; the depth cap; stack interning; the
// module table (fixture acct_sites); allocations on coroutine stacks
// (fixture acct_coroutine).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/preload/acct_util.h"

namespace retain::test::acct {
namespace {

const char* const kSites[] = {"site_a", "site_b", "site_c", "site_d"};

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (const unsigned char c : bytes) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

// One run of acct_sites under the shim with `env`, and its "acct" snapshot.
struct SitesRun {
  RunResult run;
  std::map<std::string, Range> ranges;
  v1::Snapshot baseline;
  v1::Snapshot acct;
};

SitesRun RunSites(const TempDir& dir, const std::map<std::string, std::string>& env = {}) {
  SitesRun r;
  r.run = RunFixture("acct_sites", {}, dir.path(), true, env);
  if (r.run.exit_code != 0) {
    ADD_FAILURE() << Describe(r.run);
    return r;
  }
  r.ranges = FunctionRanges(FixtureOutput(r.run.stdout_data));
  r.baseline = SnapshotLabeled(dir.path(), "baseline");
  r.acct = SnapshotLabeled(dir.path(), "acct");
  return r;
}

// For each site: the rows born after the baseline whose frames[0] lies in it.
std::map<std::string, std::vector<Allocation>> RowsBySite(const SitesRun& r) {
  std::map<std::string, std::vector<Allocation>> by_site;
  for (const Allocation& row : RowsBornAfter(r.acct, r.baseline, v1::KIND_HEAP)) {
    const std::vector<uint64_t> frames = FramesOf(r.acct, row.stack_id);
    for (const char* site : kSites) {
      if (!frames.empty() && r.ranges.at(site).Contains(frames[0])) by_site[site].push_back(row);
    }
  }
  return by_site;
}

// A site's first two frames as offsets into the site function and main:
// equal across runs of one binary whatever the load address.
using FrameOffsets = std::set<std::pair<uint64_t, uint64_t>>;
std::map<std::string, FrameOffsets> SiteFrameOffsets(const SitesRun& r) {
  std::map<std::string, FrameOffsets> offsets;
  const Range main_range = r.ranges.at("main");
  for (const auto& [site, rows] : RowsBySite(r)) {
    for (const Allocation& row : rows) {
      const std::vector<uint64_t> frames = FramesOf(r.acct, row.stack_id);
      EXPECT_GE(frames.size(), 2u) << site;
      if (frames.size() < 2) continue;
      EXPECT_TRUE(main_range.Contains(frames[1])) << site << ": frames[1] is not in main";
      offsets[site].insert({frames[0] - r.ranges.at(site).begin, frames[1] - main_range.begin});
    }
  }
  return offsets;
}

// Proves (contract: libunwind is loaded privately): under the shim the
// process's _Unwind_* still come from libgcc_s and backtrace from libc,
// libunwind's own symbols are not in the global scope, a C++ exception is
// thrown and caught, backtrace() works, and the output is identical to a run
// without the shim.
TEST(AcctStacks, UnwinderStaysIsolated) {
  TempDir dir;
  const RunResult plain = RunFixture("acct_unwinder", {}, dir.path(), /*preload=*/false);
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  const RunResult run = RunFixture("acct_unwinder", {}, dir.path());
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const FixtureOutput out(run.stdout_data);

  auto defining_object = [&](const std::string& symbol) {
    const std::vector<std::string> f = out.Named("symbol", symbol);
    return f.empty() ? std::string("missing") : Basename(f[0]);
  };
  EXPECT_EQ(defining_object("_Unwind_RaiseException").rfind("libgcc_s.so", 0), 0u)
      << defining_object("_Unwind_RaiseException");
  EXPECT_EQ(defining_object("_Unwind_Backtrace").rfind("libgcc_s.so", 0), 0u)
      << defining_object("_Unwind_Backtrace");
  EXPECT_EQ(defining_object("backtrace").rfind("libc.so", 0), 0u) << defining_object("backtrace");
  EXPECT_EQ(defining_object("unw_backtrace"), "none");

  EXPECT_EQ(out.Word("caught"), "through");  // "caught through three frames"
  EXPECT_GE(out.Number("backtrace_frames"), 3u);
  EXPECT_EQ(out.Number("backtrace_has_caller"), 1u);
  EXPECT_EQ(run.stdout_data, plain.stdout_data);
  EXPECT_EQ(run.stderr_data, plain.stderr_data);
}

// Proves: with RETAIN_UNWIND=fp on a frame-pointer build, every site row is
// attributed exactly as with libunwind capture: same frames[0] inside the
// site, same caller frame inside main (compared as offsets).
TEST(AcctStacks, FramePointerModeAttributesLikeLibunwind) {
  TempDir default_dir, fp_dir;
  const SitesRun by_default = RunSites(default_dir, {{"RETAIN_UNWIND", "libunwind"}});
  const SitesRun by_fp = RunSites(fp_dir, {{"RETAIN_UNWIND", "fp"}});
  ASSERT_EQ(by_default.run.exit_code, 0);
  ASSERT_EQ(by_fp.run.exit_code, 0);
  EXPECT_EQ(by_default.acct.header().unwind_method(), v1::UNWIND_METHOD_LIBUNWIND);
  EXPECT_EQ(by_fp.acct.header().unwind_method(), v1::UNWIND_METHOD_FRAME_POINTER);

  const std::map<std::string, FrameOffsets> want = SiteFrameOffsets(by_default);
  const std::map<std::string, FrameOffsets> got = SiteFrameOffsets(by_fp);
  for (const char* site : kSites) {
    ASSERT_EQ(want.count(site), 1u) << site << " has no rows with libunwind";
    EXPECT_EQ(want.at(site).size(), 1u) << site << ": one call instruction, one return address";
    ASSERT_EQ(got.count(site), 1u) << site << " has no rows in fp mode";
    EXPECT_EQ(got.at(site), want.at(site)) << site;
  }
  const std::map<std::string, std::vector<Allocation>> fp_rows = RowsBySite(by_fp);
  EXPECT_EQ(fp_rows.at("site_a").size(), 7u);
  EXPECT_EQ(fp_rows.at("site_d").size(), 100u);
}

// Every frame of a stack as "module basename+offset": equal across runs of
// one binary whatever the load addresses.
std::vector<std::string> PortableFrames(const v1::Snapshot& s, uint32_t stack_id) {
  std::vector<std::string> out;
  for (uint64_t address : FramesOf(s, stack_id)) {
    std::string name = "?";
    for (const v1::Module& m : s.modules()) {
      for (const v1::Segment& segment : m.executable_segments()) {
        if (segment.start() <= address && address < segment.end()) {
          std::ostringstream text;
          text << Basename(m.path()) << "+0x" << std::hex << address - m.load_bias();
          name = text.str();
        }
      }
    }
    out.push_back(name);
  }
  return out;
}

// Proves: the default CFI walker (RETAIN_UNWIND=cfi) records, for every
// site row, the very stack libunwind records (every frame, down through
// main, libc's start-up and _start), without falling back to libunwind.
TEST(AcctStacks, CfiModeRecordsLibunwindsStacks) {
  TempDir cfi_dir, libunwind_dir;
  const SitesRun by_cfi = RunSites(cfi_dir);
  const SitesRun by_libunwind = RunSites(libunwind_dir, {{"RETAIN_UNWIND", "libunwind"}});
  ASSERT_EQ(by_cfi.run.exit_code, 0);
  ASSERT_EQ(by_libunwind.run.exit_code, 0);
  EXPECT_EQ(by_cfi.acct.header().unwind_method(), v1::UNWIND_METHOD_CFI);
  EXPECT_EQ(by_cfi.acct.health().cfi_fallbacks(), 0u);
  const auto cfi_rows = RowsBySite(by_cfi);
  const auto libunwind_rows = RowsBySite(by_libunwind);
  for (const char* site : kSites) {
    ASSERT_EQ(cfi_rows.count(site), 1u) << site;
    ASSERT_EQ(libunwind_rows.count(site), 1u) << site;
    std::set<std::vector<std::string>> want, got;
    for (const Allocation& row : libunwind_rows.at(site)) {
      want.insert(PortableFrames(by_libunwind.acct, row.stack_id));
    }
    for (const Allocation& row : cfi_rows.at(site)) {
      got.insert(PortableFrames(by_cfi.acct, row.stack_id));
    }
    EXPECT_EQ(got, want) << site;
    ASSERT_FALSE(got.empty());
    EXPECT_GT(got.begin()->size(), 3u) << site;  // site, main, libc start-up, _start
  }
}

// Proves: RETAIN_DEPTH=4 keeps at most 4 frames in every stack, marks the
// site stacks (which are deeper: site, main, libc start-up, _start) as
// truncated while keeping the innermost frames; the default depth is 48 and
// does not truncate them.
TEST(AcctStacks, DepthCapTruncates) {
  TempDir capped_dir, default_dir;
  const SitesRun capped = RunSites(capped_dir, {{"RETAIN_DEPTH", "4"}});
  const SitesRun by_default = RunSites(default_dir);
  ASSERT_EQ(capped.run.exit_code, 0);
  ASSERT_EQ(by_default.run.exit_code, 0);
  EXPECT_EQ(capped.acct.header().max_depth(), 4u);
  EXPECT_EQ(by_default.acct.header().max_depth(), 48u);

  for (const v1::Stack& stack : capped.acct.stacks()) EXPECT_LE(stack.frames_size(), 4);
  const auto capped_rows = RowsBySite(capped);
  for (const char* site : kSites) {
    ASSERT_EQ(capped_rows.count(site), 1u) << site;
    for (const Allocation& row : capped_rows.at(site)) {
      const v1::Stack* stack = tool::FindStack(capped.acct, row.stack_id);
      ASSERT_NE(stack, nullptr);
      EXPECT_EQ(stack->frames_size(), 4) << site;
      EXPECT_TRUE(stack->truncated()) << site;
      EXPECT_TRUE(capped.ranges.at("main").Contains(stack->frames(1))) << site;
    }
  }
  for (const auto& [site, rows] : RowsBySite(by_default)) {
    for (const Allocation& row : rows) {
      const v1::Stack* stack = tool::FindStack(by_default.acct, row.stack_id);
      ASSERT_NE(stack, nullptr);
      EXPECT_GT(stack->frames_size(), 4) << site;
      EXPECT_FALSE(stack->truncated()) << site;
    }
  }
}

// Proves: identical call paths are interned into one Stack: site_d's 100
// allocations from one loop share one stack id, site_a's 7 another; no two
// stacks in the snapshot have the same frames; ids are unique.
// Coroutines on stacks taken from the heap (ucontext, 64 KiB each: outside
// the thread's own stack, where the CFI walker refuses and libunwind takes
// the stack): the host runs as it does without the shim, every block kept
// on a coroutine is counted to the byte, and its stack goes from the site
// through the coroutine's frames to its entry function, in both unwinders.
TEST(AcctStacks, AllocationsOnCoroutineStacksAreCountedAndWalkedToTheCoroutinesEntry) {
  TempDir plain_dir;
  const RunResult plain = RunFixture("acct_coroutine", {}, plain_dir.path(), false);
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  const FixtureOutput plain_out(plain.stdout_data);
  for (const char* unwinder : {"cfi", "libunwind"}) {
    SCOPED_TRACE(unwinder);
    TempDir dir;
    const RunResult run =
        RunFixture("acct_coroutine", {}, dir.path(), true, {{"RETAIN_UNWIND", unwinder}});
    ASSERT_EQ(run.exit_code, 0) << Describe(run);
    const FixtureOutput out(run.stdout_data);
    EXPECT_EQ(out.Number("checksum", 0), plain_out.Number("checksum", 0));
    const std::map<std::string, Range> ranges = FunctionRanges(out);
    const v1::Snapshot baseline = SnapshotLabeled(dir.path(), "baseline");
    const v1::Snapshot acct = SnapshotLabeled(dir.path(), "acct");
    uint64_t bytes = 0, count = 0;
    for (const Allocation& row : RowsBornAfter(acct, baseline, v1::KIND_HEAP)) {
      const std::vector<uint64_t> frames = FramesOf(acct, row.stack_id);
      if (frames.empty() || !ranges.at("coroutine_site").Contains(frames[0])) continue;
      bytes += row.size;
      ++count;
      bool through_entry = false;
      for (uint64_t frame : frames) through_entry |= ranges.at("coroutine_entry").Contains(frame);
      EXPECT_TRUE(through_entry) << "a stack of " << frames.size() << " frames misses the entry";
      // coroutine_site, 13 of coroutine_descend, coroutine_entry.
      EXPECT_GE(frames.size(), 15u);
    }
    EXPECT_EQ(bytes, out.Number("expect", 1));
    EXPECT_EQ(count, out.Number("expect", 2));
  }
}

TEST(AcctStacks, IdenticalPathsShareOneStack) {
  TempDir dir;
  const SitesRun r = RunSites(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  const auto by_site = RowsBySite(r);
  std::map<std::string, std::set<uint32_t>> ids;
  for (const auto& [site, rows] : by_site) {
    for (const Allocation& row : rows) ids[site].insert(row.stack_id);
  }
  ASSERT_EQ(by_site.at("site_d").size(), 100u);
  EXPECT_EQ(ids["site_d"].size(), 1u);
  EXPECT_EQ(ids["site_a"].size(), 1u);
  EXPECT_NE(ids["site_a"], ids["site_d"]);
  EXPECT_NE(*ids["site_d"].begin(), 0u) << "0 means no stack was captured";

  std::set<uint32_t> stack_ids;
  std::set<std::vector<uint64_t>> frame_lists;
  for (const v1::Stack& stack : r.acct.stacks()) {
    EXPECT_TRUE(stack_ids.insert(stack.id()).second) << "stack id " << stack.id() << " twice";
    EXPECT_TRUE(frame_lists.insert({stack.frames().begin(), stack.frames().end()}).second)
        << "stack " << stack.id() << " duplicates another's frames";
  }
}

// Proves: the module table lists the fixture executable under its real path
// with the GNU build-id it reads from its own notes (also the header's
// exe_build_id), a load bias that maps each site's ELF st_value to its
// address, and executable segments covering every site function.
TEST(AcctStacks, ModuleTableHasExecutableBuildIdAndSegments) {
  TempDir dir;
  const SitesRun r = RunSites(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  const FixtureOutput out(r.run.stdout_data);
  const std::string build_id = out.Word("build_id");
  ASSERT_GE(build_id.size(), 16u);

  const std::string exe = RealPath(FixturePath("acct_sites"));
  EXPECT_EQ(RealPath(r.acct.header().exe_path()), exe);
  EXPECT_EQ(Hex(r.acct.header().exe_build_id()), build_id);
  const v1::Module* module = ModuleWithPath(r.acct, exe);
  ASSERT_NE(module, nullptr) << "no module for " << exe;
  EXPECT_EQ(Hex(module->build_id()), build_id);
  EXPECT_FALSE(module->unloaded());

  for (const char* site : kSites) {
    const std::vector<std::string> line = out.Named("range", site);
    ASSERT_EQ(line.size(), 3u);
    const uint64_t st_value = ParseNumber(line[2]);
    const Range range = r.ranges.at(site);
    EXPECT_EQ(module->load_bias() + st_value, range.begin) << site;
    bool covered = false;
    for (const v1::Segment& segment : module->executable_segments()) {
      covered = covered || (segment.start() <= range.begin && range.end <= segment.end());
    }
    EXPECT_TRUE(covered) << site << " is in no executable segment of " << exe;
  }
}

}  // namespace
}  // namespace retain::test::acct
