// Continuous mode (RETAIN_SNAPSHOT_INTERVAL, RETAIN_KEEP) on a real program:
// proc_blocked_read allocates nothing after start and blocks in read(); the
// shim's service thread writes a snapshot every 100 ms meanwhile (with no
// snapshot signal installed: the interval alone starts the thread), and
// RETAIN_KEEP=3 leaves the newest three, also after the exit snapshot,
// which stays the last one even while later destructors run.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

// `fixture` under the shim in continuous mode (every 100 ms, no snapshot
// signal), its snapshots in `dir`.
RunOptions ContinuousRun(const char* fixture, const std::string& dir) {
  RunOptions options;
  options.argv = {FixturePath(fixture)};
  options.preload = true;
  options.env["RETAIN_DIR"] = dir;
  options.env["RETAIN_SIGNAL"] = "none";
  options.env["RETAIN_SNAPSHOT_INTERVAL"] = "100ms";
  return options;
}

TEST(ProcContinuous, IntervalSnapshotsWhileBlockedKeepingTheNewestThree) {
  TempDir retain_dir;
  RunOptions options = ContinuousRun("proc_blocked_read", retain_dir.path());
  options.env["RETAIN_KEEP"] = "3";
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("waiting\n", 10000)) << child.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // The shim deletes as it writes: read the paths, then the newest file
  // only (the older ones may go meanwhile).
  auto sequence_of = [](const std::string& name) {
    const size_t end = name.rfind(".pb");
    const size_t dot = name.rfind('.', end - 1);
    return static_cast<uint32_t>(std::stoul(name.substr(dot + 1, end - dot - 1)));
  };
  std::vector<std::string> names = ListSnapshots(retain_dir.path());
  ASSERT_GE(names.size(), 2u) << "no interval snapshots while the program blocked";
  EXPECT_LE(names.size(), 3u);
  std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return sequence_of(a) < sequence_of(b);
  });
  EXPECT_GE(sequence_of(names.back()), 6u) << "about one every 100 ms for 1.5 s";
  const v1::Snapshot newest = LoadSnapshot(names.back());
  EXPECT_EQ(newest.header().trigger(), v1::TRIGGER_INTERVAL);
  EXPECT_EQ(newest.header().label(), "interval");
  child.CloseStdin();
  const RunResult run = child.Wait(30);
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(run.stderr_data, "");
  std::vector<v1::Snapshot> after = LoadAll(retain_dir.path());
  ASSERT_EQ(after.size(), 3u);
  std::sort(after.begin(), after.end(), [](const v1::Snapshot& a, const v1::Snapshot& b) {
    return a.header().sequence() < b.header().sequence();
  });
  // The newest three, consecutive, the exit snapshot last.
  EXPECT_EQ(after[0].header().trigger(), v1::TRIGGER_INTERVAL);
  EXPECT_EQ(after[2].header().trigger(), v1::TRIGGER_EXIT);
  EXPECT_EQ(after[1].header().sequence(), after[0].header().sequence() + 1);
  EXPECT_EQ(after[2].header().sequence(), after[1].header().sequence() + 1);
  EXPECT_GT(after[2].header().sequence(), sequence_of(names.back()));
}

// Destructors of other libraries may run after the shim's (here one that
// takes 350 ms, three and a half intervals): the service thread must not
// write interval snapshots after the exit snapshot, which stays the last.
TEST(ProcContinuous, NoIntervalSnapshotAfterTheExitSnapshot) {
  TempDir retain_dir;
  Child child(ContinuousRun("proc_slow_teardown", retain_dir.path()));
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("waiting\n", 10000)) << child.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  const auto closed = std::chrono::steady_clock::now();
  child.CloseStdin();
  const RunResult run = child.Wait(30);
  // The fixture's slow destructor ran (else this test would show nothing).
  EXPECT_GE(std::chrono::steady_clock::now() - closed, std::chrono::milliseconds(300));
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(run.stderr_data, "");
  std::vector<v1::Snapshot> all = LoadAll(retain_dir.path());
  ASSERT_GE(all.size(), 2u) << "an interval snapshot while it waited, and the exit snapshot";
  std::sort(all.begin(), all.end(), [](const v1::Snapshot& a, const v1::Snapshot& b) {
    return a.header().sequence() < b.header().sequence();
  });
  EXPECT_EQ(all.back().header().trigger(), v1::TRIGGER_EXIT);
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    EXPECT_EQ(all[i].header().trigger(), v1::TRIGGER_INTERVAL)
        << "snapshot " << all[i].header().sequence() << " of " << all.size();
  }
}

}  // namespace
}  // namespace retain::test::proc
