// Signals under the shim.
//
// Handlers that allocate: SIGALRM and SIGUSR1 handlers malloc and free while
// the main loop allocates; the program runs to completion with the same
// output as without the shim.
//
// The snapshot signal (RETAIN_SIGNAL): each SIGUSR2 sent while four threads
// allocate produces one more parseable snapshot (trigger SIGNAL) holding
// every worker's live blocks, and the program finishes normally.
// RETAIN_SIGNAL=USR1 moves the trigger to SIGUSR1; RETAIN_SIGNAL=none leaves
// SIGUSR2 alone, so it kills the process exactly as without the shim.
#include <signal.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

TEST(ProcSignals, HandlersThatAllocate) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_signals")};
  const RunResult plain = test::Run(options);
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const RunResult traced = test::Run(options);

  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  ASSERT_FALSE(traced.timed_out) << "hung under the shim";
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
  EXPECT_EQ(traced.term_signal, 0);
  EXPECT_NE(plain.stdout_data.find("handlers alrm>=100:yes usr1>=100:yes errors=0"),
            std::string::npos)
      << plain.stdout_data;
  EXPECT_EQ(traced.stdout_data, plain.stdout_data);
  EXPECT_TRUE(RetainLines(traced.stderr_data).empty()) << traced.stderr_data;
  const v1::Snapshot snapshot =
      ExpectSingleExitSnapshot(retain_dir.path(), FixturePath("proc_signals"));
  // The main loop alone makes 600,000 allocations; the shim saw them.
  EXPECT_GE(TotalsFor(snapshot, v1::KIND_HEAP).allocated_count(), 600000u);
}

// proc_sigsnap started in the background, ready (its four workers running).
struct Workers {
  std::vector<uint32_t> tids;
};

Workers WaitUntilReady(Child& child) {
  Workers workers;
  EXPECT_TRUE(child.WaitForStdout("\n", 30000))
      << "proc_sigsnap never got ready; stderr: " << child.Stderr();
  std::istringstream line(LineStartingWith(child.Stdout(), "ready "));
  std::string word;
  line >> word;
  uint32_t tid;
  while (line >> tid) workers.tids.push_back(tid);
  EXPECT_EQ(workers.tids.size(), 4u) << child.Stdout();
  return workers;
}

RunOptions SigsnapOptions(const std::string& retain_dir, bool preload) {
  RunOptions options;
  options.argv = {FixturePath("proc_sigsnap")};
  options.preload = preload;
  if (preload) options.env["RETAIN_DIR"] = retain_dir;
  return options;
}

TEST(ProcSnapshotSignal, SigUsr2WhileFourThreadsAllocate) {
  TempDir retain_dir;
  Child child(SigsnapOptions(retain_dir.path(), true));
  ASSERT_GT(child.pid(), 0);
  const Workers workers = WaitUntilReady(child);
  ASSERT_EQ(workers.tids.size(), 4u);

  constexpr size_t kSignals = 4;
  for (size_t i = 1; i <= kSignals; ++i) {
    ASSERT_TRUE(child.Signal(SIGUSR2));
    const auto paths = WaitForSnapshots(retain_dir.path(), i, 30000);
    ASSERT_EQ(paths.size(), i) << "SIGUSR2 number " << i
                               << " wrote no snapshot; stderr: " << child.Stderr();
  }
  ASSERT_TRUE(child.WriteStdin("stop\n"));
  const RunResult run = child.Wait(60);
  EXPECT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(run.stdout_data.substr(run.stdout_data.find('\n') + 1), "done threads=4 corrupt=0\n");
  EXPECT_TRUE(RetainLines(run.stderr_data).empty()) << run.stderr_data;

  std::map<uint32_t, v1::Snapshot> by_sequence;
  for (v1::Snapshot& snapshot : LoadAll(retain_dir.path())) {
    EXPECT_EQ(snapshot.header().pid(), static_cast<uint32_t>(child.pid()));
    by_sequence[snapshot.header().sequence()] = std::move(snapshot);
  }
  ASSERT_EQ(by_sequence.size(), kSignals + 1);  // the signals' and the exit's
  for (uint32_t sequence = 1; sequence <= kSignals; ++sequence) {
    SCOPED_TRACE("snapshot " + std::to_string(sequence));
    ASSERT_TRUE(by_sequence.count(sequence));
    const v1::Snapshot& snapshot = by_sequence[sequence];
    EXPECT_EQ(snapshot.header().trigger(), v1::TRIGGER_SIGNAL);
    // Every worker holds 1024 blocks (1023 between a free and the next
    // malloc) at every instant, and a snapshot is one instant (the shim
    // holds every table lock while it copies), so each worker has exactly
    // 1023 or 1024 rows, and the totals agree with the rows exactly.
    std::map<uint32_t, int> rows_by_thread;
    for (const tool::Allocation& row : tool::FlattenAllocations(snapshot)) {
      if (row.kind == v1::KIND_HEAP) ++rows_by_thread[row.thread_id];
    }
    for (uint32_t tid : workers.tids) {
      EXPECT_GE(rows_by_thread[tid], 1023) << "worker " << tid;
      EXPECT_LE(rows_by_thread[tid], 1024) << "worker " << tid;
    }
    EXPECT_EQ(TotalsFor(snapshot, v1::KIND_HEAP).live_count(), LiveCount(snapshot, v1::KIND_HEAP));
    EXPECT_EQ(TotalsFor(snapshot, v1::KIND_HEAP).live_bytes(), LiveBytes(snapshot, v1::KIND_HEAP));
  }
  EXPECT_EQ(by_sequence[kSignals + 1].header().trigger(), v1::TRIGGER_EXIT);
}

// RETAIN_SIGNAL=USR1: SIGUSR1 (which would kill the fixture without the
// shim) writes a snapshot instead, and the program carries on.
TEST(ProcSnapshotSignal, RetainSignalUsr1) {
  TempDir retain_dir;
  RunOptions options = SigsnapOptions(retain_dir.path(), true);
  options.env["RETAIN_SIGNAL"] = "USR1";
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_EQ(WaitUntilReady(child).tids.size(), 4u);
  ASSERT_TRUE(child.Signal(SIGUSR1));
  ASSERT_EQ(WaitForSnapshots(retain_dir.path(), 1, 30000).size(), 1u)
      << "SIGUSR1 wrote no snapshot; stderr: " << child.Stderr();
  ASSERT_TRUE(child.WriteStdin("stop\n"));
  const RunResult run = child.Wait(60);
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(run.term_signal, 0);
  EXPECT_TRUE(RetainLines(run.stderr_data).empty()) << run.stderr_data;
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 2u);
  EXPECT_EQ(snapshots[0].header().trigger(), v1::TRIGGER_SIGNAL);
  EXPECT_EQ(snapshots[1].header().trigger(), v1::TRIGGER_EXIT);
}

// RETAIN_SIGNAL=none: SIGUSR2 keeps its default action, death, exactly as
// without the shim, and nothing is written.
TEST(ProcSnapshotSignal, RetainSignalNoneLeavesSigUsr2Alone) {
  int term_signal[2] = {0, 0};
  for (bool preload : {false, true}) {
    TempDir retain_dir;
    RunOptions options = SigsnapOptions(retain_dir.path(), preload);
    options.env["RETAIN_SIGNAL"] = "none";
    Child child(options);
    ASSERT_GT(child.pid(), 0);
    ASSERT_EQ(WaitUntilReady(child).tids.size(), 4u);
    ASSERT_TRUE(child.Signal(SIGUSR2));
    const RunResult run = child.Wait(30);
    EXPECT_FALSE(run.timed_out);
    EXPECT_EQ(run.exit_code, -1);
    term_signal[preload] = run.term_signal;
    EXPECT_TRUE(RetainLines(run.stderr_data).empty()) << run.stderr_data;
    EXPECT_TRUE(DirEntries(retain_dir.path()).empty())
        << ::testing::PrintToString(DirEntries(retain_dir.path()));
  }
  EXPECT_EQ(term_signal[0], SIGUSR2);
  EXPECT_EQ(term_signal[1], SIGUSR2);
}

}  // namespace
}  // namespace retain::test::proc
