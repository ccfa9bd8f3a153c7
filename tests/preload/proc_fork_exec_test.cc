// fork and exec under the shim.
//
// fork: the child inherits the parent's table (the truth of its copied
// memory), keeps recording, says who it was forked from, numbers its own
// snapshots from 1; the parent never sees the child's allocations. A
// multi-threaded parent can fork over and over while its threads allocate
// without any child hanging on a lock inherited held.
//
// exec: the new image loads the shim again only when LD_PRELOAD is still in
// its environment.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

// Key of a snapshot in one process tree: (pid, sequence).
std::map<std::pair<uint32_t, uint32_t>, v1::Snapshot> ByPidAndSequence(const std::string& dir) {
  std::map<std::pair<uint32_t, uint32_t>, v1::Snapshot> snapshots;
  for (v1::Snapshot& snapshot : LoadAll(dir)) {
    const auto key = std::make_pair(snapshot.header().pid(), snapshot.header().sequence());
    EXPECT_EQ(snapshots.count(key), 0u)
        << "two snapshots with pid and sequence " << key.first << "." << key.second;
    snapshots[key] = std::move(snapshot);
  }
  return snapshots;
}

TEST(ProcFork, ChildInheritsTableAndNumbersItsOwnSnapshots) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_fork")};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  options.env["RETAIN_CHILD_EXIT_MIN"] = "0";  // the child's exit snapshot is one of the five
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_TRUE(RetainLines(run.stderr_data).empty()) << run.stderr_data;

  const std::string parent_line = LineStartingWith(run.stdout_data, "parent pid=");
  const std::string child_line = LineStartingWith(run.stdout_data, "child pid=");
  ASSERT_FALSE(parent_line.empty()) << run.stdout_data;
  ASSERT_FALSE(child_line.empty()) << run.stdout_data;
  const uint32_t parent_pid = static_cast<uint32_t>(Field(parent_line, "pid").value_or(0));
  const uint64_t parent_block = Field(parent_line, "alloc").value_or(0);
  const uint32_t child_pid = static_cast<uint32_t>(Field(child_line, "pid").value_or(0));
  const uint64_t child_block = Field(child_line, "alloc").value_or(0);
  EXPECT_EQ(Field(child_line, "snapshot"), 0u) << "retain_snapshot failed in the child";
  EXPECT_NE(LineStartingWith(run.stdout_data, "parent done child_status=0 snapshot=0,0"), "")
      << run.stdout_data;

  // Parent: before-fork (1), after-fork (2), exit (3). Child: its own (1),
  // exit (2), under its own pid.
  auto snapshots = ByPidAndSequence(retain_dir.path());
  EXPECT_EQ(snapshots.size(), 5u);
  ASSERT_TRUE(snapshots.count({parent_pid, 1}) && snapshots.count({parent_pid, 2}) &&
              snapshots.count({child_pid, 1}))
      << "missing snapshots; files: " << ::testing::PrintToString(DirEntries(retain_dir.path()));
  EXPECT_TRUE(snapshots.count({parent_pid, 3})) << "parent's exit snapshot";
  EXPECT_TRUE(snapshots.count({child_pid, 2})) << "child's exit snapshot";

  const v1::Snapshot& child = snapshots[std::make_pair(child_pid, 1u)];
  EXPECT_EQ(child.header().label(), "child");
  EXPECT_EQ(child.header().trigger(), v1::TRIGGER_API);
  EXPECT_EQ(child.header().forked_from_pid(), parent_pid);
  EXPECT_EQ(child.header().ppid(), parent_pid);
  // The inherited allocation, with its stack from the parent...
  const auto inherited = FindAllocation(child, parent_block);
  ASSERT_TRUE(inherited.has_value()) << "parent's block missing from the child's table";
  EXPECT_EQ(inherited->size, 111111u);
  EXPECT_EQ(inherited->kind, v1::KIND_HEAP);
  EXPECT_TRUE(FirstFrame(child, inherited->stack_id).has_value());
  // ... and the child's own, born after it.
  const auto own = FindAllocation(child, child_block);
  ASSERT_TRUE(own.has_value()) << "child's block missing from the child's table";
  EXPECT_EQ(own->size, 222222u);
  EXPECT_GT(own->birth_sequence, inherited->birth_sequence);
  EXPECT_LT(own->birth_sequence, child.header().next_birth_sequence());
  // The child's exit snapshot is its sequence 2, still forked_from the parent.
  const v1::Header& child_exit = snapshots[{child_pid, 2}].header();
  EXPECT_EQ(child_exit.forked_from_pid(), parent_pid);
  EXPECT_EQ(child_exit.trigger(), v1::TRIGGER_EXIT);

  // Parent: not a forked process; after the fork it has its own block and
  // none of the child's.
  for (uint32_t sequence : {1u, 2u}) {
    const v1::Snapshot& parent = snapshots[std::make_pair(parent_pid, sequence)];
    EXPECT_EQ(parent.header().forked_from_pid(), 0u);
    EXPECT_EQ(parent.header().label(), sequence == 1 ? "parent-before" : "parent-after");
    EXPECT_TRUE(FindAllocation(parent, parent_block).has_value());
    EXPECT_TRUE(AllocationsOfSize(parent, 222222).empty())
        << "the child's allocation appears in the parent (sequence " << sequence << ")";
  }
}

// What the snapshots of proc_forkstorm's run in `dir` hold: the children's
// API and exit snapshots, and the parent's exit snapshot.
struct ForkStormSnapshots {
  int child_api = 0;
  int child_exit = 0;
  int parent_exit = 0;
};

ForkStormSnapshots CountForkStormSnapshots(const std::string& dir) {
  ForkStormSnapshots counts;
  uint32_t parent_pid = 0;
  std::vector<v1::Snapshot> snapshots = LoadAll(dir);
  for (const v1::Snapshot& snapshot : snapshots) {
    if (snapshot.header().forked_from_pid() == 0) {
      ++counts.parent_exit;
      parent_pid = snapshot.header().pid();
      EXPECT_EQ(snapshot.header().trigger(), v1::TRIGGER_EXIT);
    }
  }
  for (const v1::Snapshot& snapshot : snapshots) {
    const v1::Header& header = snapshot.header();
    if (header.forked_from_pid() == 0) continue;
    EXPECT_EQ(header.forked_from_pid(), parent_pid);
    if (header.trigger() == v1::TRIGGER_API) {
      ++counts.child_api;
      EXPECT_EQ(header.sequence(), 1u);
      EXPECT_EQ(header.label(), "forkstorm-child");
    } else {
      ++counts.child_exit;
      EXPECT_EQ(header.trigger(), v1::TRIGGER_EXIT);
      EXPECT_EQ(header.sequence(), 2u);
    }
  }
  for (const std::string& name : DirEntries(dir)) {
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
  }
  return counts;
}

TEST(ProcFork, ThreadedParentForksFiftyTimesWithoutDeadlock) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_forkstorm"), "50"};
  const RunResult plain = test::Run(options);
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  options.env["RETAIN_CHILD_EXIT_MIN"] = "0";  // every child's exit snapshot too
  options.timeout_seconds = 150;
  const RunResult traced = test::Run(options);
  EXPECT_EQ(plain.stdout_data, "forks=50 ok=50 hung=0 failed=0\n") << plain.stderr_data;
  ASSERT_FALSE(traced.timed_out) << "the forking parent hung under the shim";
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
  EXPECT_EQ(traced.stdout_data, plain.stdout_data) << traced.stderr_data;
  EXPECT_TRUE(RetainLines(traced.stderr_data).empty()) << traced.stderr_data;

  // 50 child snapshots, 25 child exit snapshots (odd children call exit(),
  // even ones _exit()), and the parent's exit snapshot.
  const ForkStormSnapshots counts = CountForkStormSnapshots(retain_dir.path());
  EXPECT_EQ(counts.parent_exit, 1);
  EXPECT_EQ(counts.child_api, 50);
  EXPECT_EQ(counts.child_exit, 25);
}

// The same storm with the workers allocating from code no unwind table
// covers (as a JIT's: the fixture writes it): their stacks go to libunwind,
// which is inside its own locks at many of the forks. No thread is inside
// libunwind when the process forks (UnwinderLockForFork), so no child
// inherits one of its mutexes held and hangs at its first capture (a JVM
// forking its subprocesses hung so in the child's malloc before exec).
TEST(ProcFork, ForksWhileOtherThreadsWalkJitStacksWithLibunwind) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_forkstorm"), "100", "0", "jit"};
  const RunResult plain = test::Run(options);
  ASSERT_EQ(plain.stdout_data, "forks=100 ok=100 hung=0 failed=0\n") << plain.stderr_data;
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  options.timeout_seconds = 150;
  const RunResult traced = test::Run(options);
  ASSERT_FALSE(traced.timed_out) << "the forking parent hung under the shim";
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
  EXPECT_EQ(traced.stdout_data, plain.stdout_data) << traced.stderr_data;
  const ForkStormSnapshots counts = CountForkStormSnapshots(retain_dir.path());
  EXPECT_EQ(counts.parent_exit, 1);
  EXPECT_EQ(counts.child_api, 100);
  // The workers' stacks did go through libunwind.
  for (const v1::Snapshot& snapshot : LoadAll(retain_dir.path())) {
    if (snapshot.header().forked_from_pid() != 0) continue;
    EXPECT_GT(snapshot.health().cfi_fallbacks(), 1000u);
  }
}

// A fork child that ends soon after the fork (a shell's $(...), a worker per
// connection) writes no exit snapshot: it would be the parent's heap again,
// a full snapshot per fork (a bash loop of subshells ran 18x slower and a
// PostgreSQL under connection churn filled its disk with one file per
// connection). What the child asks for is still written, and a child that
// lives RETAIN_CHILD_EXIT_MIN writes its exit snapshot as before.
TEST(ProcFork, OnlyChildrenThatLiveLongEnoughWriteAnExitSnapshot) {
  RunOptions options;
  options.preload = true;
  {
    TempDir retain_dir;
    options.argv = {FixturePath("proc_forkstorm"), "10"};
    options.env["RETAIN_DIR"] = retain_dir.path();  // RETAIN_CHILD_EXIT_MIN: 5 s
    const RunResult run = test::Run(options);
    ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
    EXPECT_EQ(run.stdout_data, "forks=10 ok=10 hung=0 failed=0\n");
    const ForkStormSnapshots counts = CountForkStormSnapshots(retain_dir.path());
    EXPECT_EQ(counts.parent_exit, 1);
    EXPECT_EQ(counts.child_api, 10);
    EXPECT_EQ(counts.child_exit, 0);
  }
  {
    TempDir retain_dir;
    options.argv = {FixturePath("proc_forkstorm"), "6", "400"};  // each child lives 400 ms
    options.env["RETAIN_DIR"] = retain_dir.path();
    options.env["RETAIN_CHILD_EXIT_MIN"] = "200ms";
    const RunResult run = test::Run(options);
    ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
    const ForkStormSnapshots counts = CountForkStormSnapshots(retain_dir.path());
    EXPECT_EQ(counts.parent_exit, 1);
    EXPECT_EQ(counts.child_api, 6);
    EXPECT_EQ(counts.child_exit, 3);  // the three that leave by exit()
  }
}

// exec with LD_PRELOAD kept: the new image writes its own exit snapshot
// (and the replaced image, which never exited, writes none).
TEST(ProcExec, ExecKeepingPreloadTracesTheNewImage) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_exec"), "keep", FixturePath("proc_true")};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_NE(run.stdout_data.find("proc_true ran"), std::string::npos) << run.stdout_data;
  EXPECT_TRUE(RetainLines(run.stderr_data).empty()) << run.stderr_data;
  const v1::Snapshot snapshot =
      ExpectSingleExitSnapshot(retain_dir.path(), FixturePath("proc_true"));
  // The 777-byte block proc_true allocates and frees was seen.
  EXPECT_GE(TotalsFor(snapshot, v1::KIND_HEAP).allocated_count(), 1u);
  EXPECT_EQ(snapshot.header().forked_from_pid(), 0u);
}

// exec with LD_PRELOAD removed: no shim in the new image, so no snapshot.
TEST(ProcExec, ExecWithoutPreloadIsNotTraced) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_exec"), "drop", FixturePath("proc_true")};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_NE(run.stdout_data.find("proc_true ran"), std::string::npos) << run.stdout_data;
  EXPECT_TRUE(DirEntries(retain_dir.path()).empty())
      << ::testing::PrintToString(DirEntries(retain_dir.path()));
}

}  // namespace
}  // namespace retain::test::proc
