// The RSS explanation adds up on a multi-threaded program with every sort
// of memory (tests/fixtures/threaded_heap.c: 8 threads, each in its own
// malloc arena, with small blocks, freed memory malloc keeps, a 48 MiB
// buffer a tenth written, an 8 MiB mapping half written): tracked resident
// + allocator-held free + untracked = RssAnon+VmSwap, no term negative, and
// untracked within the stated tolerance (8 MiB beyond the shim's own arena:
// 8 thread stacks, libc's and the loader's pages). Shares are computed on
// resident bytes: the 48 MiB buffers count the tenth that was written.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kUntrackedTolerance = 8 * kMiB;
constexpr int kThreads = 8;
constexpr int64_t kBigBytes = 48 * kMiB;

TEST(RssAddsUpTest, MultiThreadedProgramWithReservedAndFreedMemory) {
  TempDir dir;
  RunOptions options;
  options.argv = {FixturePath("threaded_heap")};
  options.env = {{"RETAIN_DIR", dir.path()}};
  options.preload = true;
  const RunResult run = ::retain::test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  std::string snapshot;
  for (const std::string& file : ListSnapshots(dir.path())) {
    if (LoadSnapshot(file).header().label() == "threads") snapshot = file;
  }
  ASSERT_FALSE(snapshot.empty());

  const RunResult diff = RunDiff({snapshot, "--json", "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << Describe(diff);
  const Json json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  ASSERT_EQ(json.Str("measure"), "resident");
  const int64_t anon = json.Int("rss.after_level.anon_swap");
  const int64_t tracked = json.Int("rss.after_level.tracked_anon");
  const int64_t free_held = json.Int("rss.after_level.allocator_free_held");
  const int64_t untracked = json.Int("rss.after_level.untracked");
  const int64_t own = json.Int("rss.after_level.shim_own");
  const std::string numbers = absl::StrCat("anon ", anon, " tracked ", tracked, " free ", free_held,
                                           " untracked ", untracked, " retain ", own);
  EXPECT_TRUE(json.Bool("rss.adds_up")) << numbers;
  EXPECT_EQ(tracked + free_held + untracked, anon) << numbers;
  EXPECT_GT(tracked, 0) << numbers;
  EXPECT_GT(free_held, 8 * kMiB) << "every third small block was freed: " << numbers;
  EXPECT_GE(untracked, 0) << numbers;
  EXPECT_LE(untracked, own + kUntrackedTolerance) << numbers;

  // The 48 MiB buffers: 8 of them, 384 MiB allocated, a tenth of each
  // resident (the pages around the tenth's end: a page more each at most).
  bool found = false;
  for (size_t i = 0; i < json.Size("rows"); ++i) {
    const std::string row = absl::StrCat("rows.", i, ".");
    if (json.Int(row + "retained_allocated_bytes") != kThreads * kBigBytes) continue;
    found = true;
    EXPECT_EQ(json.Int(row + "retained_count"), kThreads);
    const int64_t resident = json.Int(row + "retained_resident_bytes");
    EXPECT_GE(resident, kThreads * (kBigBytes / 10) - kThreads * 4096) << numbers;
    EXPECT_LE(resident, kThreads * (kBigBytes / 10) + kThreads * 8192) << numbers;
    EXPECT_EQ(json.Int(row + "retained_bytes"), resident) << "the measure is resident";
  }
  EXPECT_TRUE(found) << diff.stdout_data.substr(0, 4000);
}

}  // namespace
}  // namespace retain::test
