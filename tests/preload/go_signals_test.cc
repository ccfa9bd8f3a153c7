// Snapshots of a Go program (cgo, Debian's Go toolchain) under the shim:
// the Go runtime installs its own handler for every signal at start-up, so
// the shim chains its handlers with the runtime's
// (shim/src/snapshot/signal_chain.h). The fixture (tests/fixtures/go_signals)
// reports what its own signal handling saw, so each test checks both sides:
// the snapshot was written, and the program behaved as it does without the
// shim (same signals received, same exit status, same signal.Ignored).
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

constexpr int kWaitMs = 20000;

RunOptions GoSignals(const std::string& mode, const TempDir& dir, bool preload = true) {
  RunOptions options;
  options.argv = {FixturePath("go_signals"), mode};
  options.env["RETAIN_DIR"] = dir.path();
  options.preload = preload;
  return options;
}

// The snapshots in `dir` written for `trigger`, loaded.
std::vector<v1::Snapshot> WithTrigger(const std::string& dir, v1::Trigger trigger) {
  std::vector<v1::Snapshot> found;
  for (v1::Snapshot& snapshot : proc::LoadAll(dir)) {
    if (snapshot.header().trigger() == trigger) found.push_back(std::move(snapshot));
  }
  return found;
}

// The program's behaviour without the shim, for comparison.
RunResult WithoutShim(const std::string& mode, int signo) {
  TempDir dir;
  proc::Child child(GoSignals(mode, dir, /*preload=*/false));
  EXPECT_TRUE(child.WaitForStdout("ready", kWaitMs)) << child.Stderr();
  if (signo != 0) {
    EXPECT_TRUE(child.Signal(signo));
  }
  return child.Wait(30);
}

TEST(GoSignalsTest, SnapshotSignalReachesTheShimAndTheProgramsNotify) {
  TempDir dir;
  proc::Child child(GoSignals("notify", dir));
  ASSERT_TRUE(child.WaitForStdout("ready ignored=false", kWaitMs)) << child.Stderr();
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(child.Signal(SIGUSR2));
    // The program's channel got it (Go's handler ran after the shim's)...
    ASSERT_TRUE(child.WaitForStdout("usr2 " + std::to_string(i), kWaitMs)) << child.Stdout();
    // ...and the shim wrote a snapshot for it.
    EXPECT_EQ(proc::WaitForSnapshots(dir.path(), i, kWaitMs).size(), static_cast<size_t>(i));
  }
  ASSERT_TRUE(child.Signal(SIGTERM));
  RunResult result = child.Wait(30);
  EXPECT_EQ(result.exit_code, 0) << result.stderr_data;
  EXPECT_NE(result.stdout_data.find("stop terminated"), std::string::npos) << result.stdout_data;

  std::vector<v1::Snapshot> signal_snapshots = WithTrigger(dir.path(), v1::TRIGGER_SIGNAL);
  ASSERT_EQ(signal_snapshots.size(), 3u);
  // The program's 1 MiB C block, with its stack.
  EXPECT_GE(LiveBytes(signal_snapshots.back(), v1::KIND_HEAP), uint64_t{1} << 20);
  // SIGTERM: the stop snapshot, written before Go's handler passed the
  // signal on to the program's shutdown.
  std::vector<v1::Snapshot> stop = WithTrigger(dir.path(), v1::TRIGGER_STOP_SIGNAL);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].header().label(), "SIGTERM");
  EXPECT_GE(LiveBytes(stop[0], v1::KIND_HEAP), uint64_t{1} << 20);
  // Go leaves with a raw exit_group: no exit snapshot.
  EXPECT_TRUE(WithTrigger(dir.path(), v1::TRIGGER_EXIT).empty());
}

TEST(GoSignalsTest, SigintStopsTheProgramAfterItsSnapshot) {
  TempDir dir;
  proc::Child child(GoSignals("notify", dir));
  ASSERT_TRUE(child.WaitForStdout("ready", kWaitMs)) << child.Stderr();
  ASSERT_TRUE(child.Signal(SIGINT));
  RunResult result = child.Wait(30);
  EXPECT_EQ(result.exit_code, 0) << result.stderr_data;
  EXPECT_NE(result.stdout_data.find("stop interrupt"), std::string::npos) << result.stdout_data;
  std::vector<v1::Snapshot> stop = WithTrigger(dir.path(), v1::TRIGGER_STOP_SIGNAL);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].header().label(), "SIGINT");
}

TEST(GoSignalsTest, DeathBySigtermIsTheRuntimesDefaultAndLeavesASnapshot) {
  RunResult plain = WithoutShim("default", SIGTERM);
  ASSERT_EQ(plain.term_signal, SIGTERM) << "Go's default for SIGTERM: " << plain.exit_code;

  TempDir dir;
  proc::Child child(GoSignals("default", dir));
  ASSERT_TRUE(child.WaitForStdout("ready", kWaitMs)) << child.Stderr();
  ASSERT_TRUE(child.Signal(SIGTERM));
  RunResult result = child.Wait(30);
  // Killed by the signal, as without the shim (the runtime set SIG_DFL and
  // raised it again: the shim passed SIG_DFL to the kernel).
  EXPECT_EQ(result.term_signal, SIGTERM) << result.exit_code << " " << result.stderr_data;
  std::vector<v1::Snapshot> stop = WithTrigger(dir.path(), v1::TRIGGER_STOP_SIGNAL);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].header().label(), "SIGTERM");
  EXPECT_GE(LiveBytes(stop[0], v1::KIND_HEAP), uint64_t{1} << 20);
}

TEST(GoSignalsTest, ASnapshotSignalTheProgramIgnoresStillWritesASnapshot) {
  TempDir dir;
  proc::Child child(GoSignals("ignore", dir));
  // signal.Ignored reads the disposition through sigaction: the program's.
  ASSERT_TRUE(child.WaitForStdout("ready ignored=true", kWaitMs)) << child.Stdout();
  ASSERT_TRUE(child.Signal(SIGUSR2));
  EXPECT_EQ(proc::WaitForSnapshots(dir.path(), 1, kWaitMs).size(), 1u);
  EXPECT_FALSE(child.Ended()) << "the program ignores SIGUSR2";
  ASSERT_TRUE(child.Signal(SIGTERM));
  RunResult result = child.Wait(30);
  EXPECT_EQ(result.term_signal, SIGTERM);
  EXPECT_EQ(WithTrigger(dir.path(), v1::TRIGGER_SIGNAL).size(), 1u);
}

TEST(GoSignalsTest, WithoutTheShimSigusr2IsIgnoredAsWithIt) {
  // Go's runtime ignores a SIGUSR2 nobody asked for; under the shim the
  // program does too (it only gains the snapshot).
  TempDir dir;
  proc::Child child(GoSignals("default", dir, /*preload=*/false));
  ASSERT_TRUE(child.WaitForStdout("ready ignored=false", kWaitMs));
  ASSERT_TRUE(child.Signal(SIGUSR2));
  usleep(300 * 1000);
  EXPECT_FALSE(child.Ended());

  TempDir shim_dir;
  proc::Child traced(GoSignals("default", shim_dir));
  ASSERT_TRUE(traced.WaitForStdout("ready ignored=false", kWaitMs));
  ASSERT_TRUE(traced.Signal(SIGUSR2));
  EXPECT_EQ(proc::WaitForSnapshots(shim_dir.path(), 1, kWaitMs).size(), 1u);
  EXPECT_FALSE(traced.Ended());
}

// C code in a Go program setting a handler with glibc's signal() (which
// calls its own sigaction internally): the handler runs as without the
// shim, after the stop snapshot.
TEST(GoSignalsTest, AHandlerSetWithSignalRunsAfterTheStopSnapshot) {
  RunResult plain = WithoutShim("csignal", SIGINT);
  ASSERT_EQ(plain.exit_code, 5) << plain.stderr_data;
  ASSERT_NE(plain.stdout_data.find("c handler"), std::string::npos);

  TempDir dir;
  proc::Child child(GoSignals("csignal", dir));
  ASSERT_TRUE(child.WaitForStdout("ready", kWaitMs)) << child.Stderr();
  ASSERT_TRUE(child.Signal(SIGINT));
  RunResult result = child.Wait(30);
  EXPECT_EQ(result.exit_code, 5) << result.stderr_data;
  EXPECT_NE(result.stdout_data.find("c handler"), std::string::npos) << result.stdout_data;
  std::vector<v1::Snapshot> stop = WithTrigger(dir.path(), v1::TRIGGER_STOP_SIGNAL);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].header().label(), "SIGINT");
}

TEST(GoSignalsTest, OsExitLeavesNoSnapshotAndTheSameStatus) {
  // A documented limit: os.Exit is a raw exit_group, invisible to the shim.
  TempDir dir;
  RunResult result = retain::test::Run(GoSignals("exit", dir));
  EXPECT_EQ(result.exit_code, 3) << result.stderr_data;
  EXPECT_NE(result.stdout_data.find("exiting"), std::string::npos);
  EXPECT_TRUE(ListSnapshots(dir.path()).empty());
}

TEST(GoSignalsTest, GoSignalsOffLeavesTheRuntimeAlone) {
  // RETAIN_GO_SIGNALS=off: the shim's handler is replaced by Go's, as
  // before chaining existed: no snapshot on SIGUSR2 or SIGTERM.
  TempDir dir;
  RunOptions options = GoSignals("notify", dir);
  options.env["RETAIN_GO_SIGNALS"] = "off";
  proc::Child child(options);
  ASSERT_TRUE(child.WaitForStdout("ready", kWaitMs)) << child.Stderr();
  ASSERT_TRUE(child.Signal(SIGUSR2));
  ASSERT_TRUE(child.WaitForStdout("usr2 1", kWaitMs));
  ASSERT_TRUE(child.Signal(SIGTERM));
  RunResult result = child.Wait(30);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_TRUE(ListSnapshots(dir.path()).empty());
}

}  // namespace
}  // namespace retain::test
