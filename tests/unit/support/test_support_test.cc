// Tests for tests/support: the preload and end-to-end tests trust Run() to
// report exit codes and signals exactly, to never deadlock on large output,
// and to enforce its timeout, so those are checked here with /bin/sh.
//
// Inside a TEST body a bare Run(...) names testing::Test::Run, hence the
// qualified calls.
#include "tests/support/test_support.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace retain::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RunOptions Shell(const std::string& script) {
  RunOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.timeout_seconds = 60;
  return options;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

TEST(RunTest, ReportsExitCode) {
  RunResult result = retain::test::Run(Shell("exit 3"));
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.term_signal, 0);
  EXPECT_FALSE(result.timed_out);
}

TEST(RunTest, ReportsTerminatingSignal) {
  RunResult result = retain::test::Run(Shell("kill -TERM $$; sleep 5"));
  EXPECT_EQ(result.exit_code, -1);
  EXPECT_EQ(result.term_signal, SIGTERM);
  EXPECT_FALSE(result.timed_out);
}

TEST(RunTest, CapturesLargeStdoutAndStderrWithoutDeadlock) {
  // stderr first: a reader that drained stdout to its end before touching
  // stderr would deadlock on the full stderr pipe.
  RunResult result = retain::test::Run(
      Shell("head -c 2000000 /dev/zero | tr '\\0' e >&2; head -c 3000000 /dev/zero | tr '\\0' o"));
  EXPECT_EQ(result.exit_code, 0);
  ASSERT_EQ(result.stdout_data.size(), 3000000u);
  ASSERT_EQ(result.stderr_data.size(), 2000000u);
  EXPECT_EQ(result.stdout_data, std::string(3000000, 'o'));
  EXPECT_EQ(result.stderr_data, std::string(2000000, 'e'));
}

TEST(RunTest, PassesStdin) {
  RunOptions options = Shell("cat");
  options.stdin_data = std::string(3 << 20, 'x') + "end";
  RunResult result = retain::test::Run(options);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_data, options.stdin_data);
}

TEST(RunTest, ChildThatIgnoresStdinDoesNotKillTheTest) {
  RunOptions options = Shell("exec 0<&-; exit 5");
  options.stdin_data = std::string(4 << 20, 'x');  // more than a pipe holds
  RunResult result = retain::test::Run(options);
  EXPECT_EQ(result.exit_code, 5);
  EXPECT_EQ(result.term_signal, 0);
}

TEST(RunTest, KillsChildAndItsChildrenAtTimeout) {
  RunOptions options = Shell("sleep 60 & echo started; sleep 60");
  options.timeout_seconds = 1;
  const auto start = std::chrono::steady_clock::now();
  RunResult result = retain::test::Run(options);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.term_signal, SIGKILL);
  EXPECT_EQ(result.exit_code, -1);
  EXPECT_EQ(result.stdout_data, "started\n");
  // The background sleep holds stdout too: only the group kill lets Run
  // return well before it would end.
  EXPECT_LT(elapsed, std::chrono::seconds(10));
}

TEST(RunTest, AppliesEnvironmentOnTopOfTheTests) {
  RunOptions options = Shell("echo \"$RETAIN_RUN_TEST_A|${HOME+home-set}\"");
  options.env["RETAIN_RUN_TEST_A"] = "value with spaces";
  RunResult result = retain::test::Run(options);
  EXPECT_EQ(result.stdout_data, "value with spaces|home-set\n");
}

TEST(RunTest, PreloadSetsOrRemovesLdPreload) {
  RunOptions options = Shell("echo \"${LD_PRELOAD-unset}\"");
  options.preload = true;
  // The shim may not be built when this unit test runs; the loader then
  // complains on stderr, which does not matter here.
  EXPECT_EQ(retain::test::Run(options).stdout_data, ShimPath() + "\n");
  options.preload = false;
  EXPECT_EQ(retain::test::Run(options).stdout_data, "unset\n");
}

TEST(RunTest, RunsInRequestedDirectory) {
  TempDir dir;
  RunOptions options = Shell("pwd -P");
  options.cwd = dir.path();
  RunResult result = retain::test::Run(options);
  char resolved[PATH_MAX];
  ASSERT_NE(realpath(dir.path().c_str(), resolved), nullptr);
  EXPECT_EQ(result.stdout_data, std::string(resolved) + "\n");
}

TEST(RunTest, SearchesPathForBareProgramName) {
  RunOptions options;
  options.argv = {"sh", "-c", "exit 4"};
  EXPECT_EQ(retain::test::Run(options).exit_code, 4);
}

TEST(RunTest, MissingProgramExitsWith127) {
  RunOptions options;
  options.argv = {"/nonexistent/retain-no-such-program"};
  RunResult result = retain::test::Run(options);
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_THAT(result.stderr_data, HasSubstr("execve"));
}

TEST(TempDirTest, CreatesAndRemovesRecursivelyWithoutFollowingLinks) {
  TempDir outside;
  const std::string canary = outside.path() + "/canary";
  std::ofstream(canary) << "keep";
  std::string path;
  {
    TempDir dir;
    path = dir.path();
    ASSERT_FALSE(path.empty());
    ASSERT_TRUE(Exists(path));
    ASSERT_EQ(mkdir((path + "/sub").c_str(), 0755), 0);
    std::ofstream(path + "/sub/file") << "data";
    ASSERT_EQ(symlink(outside.path().c_str(), (path + "/link-out").c_str()), 0);
  }
  EXPECT_FALSE(Exists(path));
  EXPECT_TRUE(Exists(canary));
}

TEST(ListSnapshotsTest, ListsOnlyFinishedSnapshotsSorted) {
  TempDir dir;
  for (const char* name : {"b.pb", "a.pb", ".a.pb", "c.pb.tmp", "notes.txt"}) {
    std::ofstream(dir.path() + "/" + name) << "x";
  }
  ASSERT_EQ(mkdir((dir.path() + "/dir.pb").c_str(), 0755), 0);
  EXPECT_THAT(ListSnapshots(dir.path()), ElementsAre(dir.path() + "/a.pb", dir.path() + "/b.pb"));
  EXPECT_TRUE(ListSnapshots(dir.path() + "/absent").empty());
}

TEST(SnapshotHelpersTest, SumsRowsAndFindsTotals) {
  v1::Snapshot snapshot;
  snapshot.mutable_header()->set_format_version(v1::FORMAT_VERSION_CURRENT);
  v1::Stack* stack = snapshot.add_stacks();
  stack->set_id(1);
  stack->add_frames(0x5000);
  stack->add_frames(0x6000);
  v1::AllocationBlock* block = snapshot.add_allocations();
  for (uint64_t delta : {0x100, 0x100}) block->add_address_delta(delta);
  block->add_size(10);
  block->add_size(20);
  block->add_kind(v1::KIND_HEAP);
  block->add_kind(v1::KIND_MMAP_ANON);
  block->add_stack_id(1);
  block->add_stack_id(0);
  block->add_birth_sequence(1);
  block->add_birth_sequence(2);
  block->add_birth_time_us(0);
  block->add_birth_time_us(0);
  block->add_thread_id(1);
  block->add_thread_id(1);
  v1::KindTotals* totals = snapshot.add_totals();
  totals->set_kind(v1::KIND_HEAP);
  totals->set_live_bytes(10);

  EXPECT_EQ(LiveBytes(snapshot, v1::KIND_HEAP), 10u);
  EXPECT_EQ(LiveCount(snapshot, v1::KIND_MMAP_ANON), 1u);
  EXPECT_EQ(LiveBytes(snapshot, v1::KIND_MMAP_FILE), 0u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_HEAP).live_bytes(), 10u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_METAL).live_bytes(), 0u);
  EXPECT_TRUE(StackContainsRange(snapshot, 1, 0x6000, 0x6001));
  EXPECT_FALSE(StackContainsRange(snapshot, 1, 0x5001, 0x6000));
  EXPECT_FALSE(StackContainsRange(snapshot, 2, 0, UINT64_MAX));
}

}  // namespace
}  // namespace retain::test
