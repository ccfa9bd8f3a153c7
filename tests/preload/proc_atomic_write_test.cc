// Atomic snapshot writes: a snapshot is written to $RETAIN_DIR/.<name>.tmp
// and renamed into place when complete, so a writer killed half-way leaves
// the temporary and never a partial .pb; a completed write leaves no
// temporary behind.
#include <signal.h>
#include <sys/statvfs.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// proc_bigtable holds 2,000,000 live blocks, so writing its snapshot takes
// seconds; the test SIGKILLs it the moment the temporary appears.
TEST(ProcAtomicWrite, KilledWriterLeavesNoPartialSnapshot) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_bigtable"), "2000000"};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  Child child(options);
  ASSERT_GT(child.pid(), 0);

  std::string temporary;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (temporary.empty() && std::chrono::steady_clock::now() < deadline) {
    for (const std::string& name : DirEntries(retain_dir.path())) {
      if (EndsWith(name, ".tmp")) temporary = name;
      ASSERT_FALSE(EndsWith(name, ".pb"))
          << "a snapshot was complete (" << name << ") before the test saw its temporary";
    }
    if (!temporary.empty()) break;
    ASSERT_FALSE(child.Ended()) << "proc_bigtable ended first: " << child.Stderr();
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_FALSE(temporary.empty()) << "no temporary within 120 s";
  ASSERT_TRUE(child.Signal(SIGKILL));
  const RunResult run = child.Wait(30);
  EXPECT_EQ(run.term_signal, SIGKILL);
  EXPECT_EQ(run.stdout_data.find("written"), std::string::npos)
      << "the write had finished before the kill: " << run.stdout_data;

  // Only the temporary: .<exe>.<pid>.<seq>.pb.tmp, nothing under a final name.
  const std::string final_name = "proc_bigtable." + std::to_string(child.pid()) + ".1.pb";
  EXPECT_EQ(temporary, "." + final_name + ".tmp");
  EXPECT_TRUE(SnapshotPaths(retain_dir.path()).empty());
  EXPECT_EQ(DirEntries(retain_dir.path()), std::vector<std::string>{temporary});
}

// A write that completes: two snapshots (the API one with every block, and
// the exit one), both parseable, and no temporary left.
TEST(ProcAtomicWrite, CompletedWriteLeavesNoTemporary) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_bigtable"), "100000"};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_NE(run.stdout_data.find("written rc=0"), std::string::npos) << run.stdout_data;
  const std::vector<std::string> entries = DirEntries(retain_dir.path());
  ASSERT_EQ(entries.size(), 2u) << ::testing::PrintToString(entries);
  for (const std::string& name : entries) {
    EXPECT_TRUE(EndsWith(name, ".pb")) << name;
    EXPECT_NE(name[0], '.') << name;
  }
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 2u);
  EXPECT_EQ(snapshots[0].header().label(), "big");
  EXPECT_GE(AllocationsOfSize(snapshots[0], 24).size(), 100000u);
  EXPECT_EQ(snapshots[1].header().trigger(), v1::TRIGGER_EXIT);
  EXPECT_LT(AllocationsOfSize(snapshots[1], 24).size(), 100000u);
}

// RETAIN_MIN_FREE (snapshot/disk_reserve.h): a snapshot that would leave
// less free on RETAIN_DIR's filesystem is not written. The program is not
// told (retain_snapshot returns its error, as for any failed write) and
// runs on unharmed; RETAIN_LOG says why. The control: a reserve the disk
// has room for.
TEST(ProcDiskReserve, NoSnapshotTakesTheFilesystemsLastSpace) {
  TempDir retain_dir;
  struct statvfs fs;
  ASSERT_EQ(statvfs(retain_dir.path().c_str(), &fs), 0);
  const unsigned long long available = static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize;
  RunOptions options;
  options.argv = {FixturePath("proc_bigtable"), "1000"};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  options.env["RETAIN_LOG"] = "1";
  options.env["RETAIN_MIN_FREE"] = std::to_string(available + (1ull << 30));
  const RunResult refused = test::Run(options);
  ASSERT_EQ(refused.exit_code, 0) << refused.stderr_data;
  EXPECT_EQ(refused.stdout_data.find("written rc=0"), std::string::npos) << refused.stdout_data;
  EXPECT_TRUE(DirEntries(retain_dir.path()).empty());
  EXPECT_NE(refused.stderr_data.find("snapshot not written"), std::string::npos)
      << refused.stderr_data;
  EXPECT_NE(refused.stderr_data.find("RETAIN_MIN_FREE"), std::string::npos) << refused.stderr_data;

  options.env["RETAIN_MIN_FREE"] = "1MiB";
  const RunResult written = test::Run(options);
  ASSERT_EQ(written.exit_code, 0) << written.stderr_data;
  EXPECT_NE(written.stdout_data.find("written rc=0"), std::string::npos) << written.stdout_data;
  EXPECT_EQ(LoadAll(retain_dir.path()).size(), 2u);
}

}  // namespace
}  // namespace retain::test::proc
