// The snapshot signal does not cut the host's waits short. signal(7): with
// SA_RESTART, sleeps, poll/select/epoll and sigtimedwait still fail with
// EINTR when a handler runs. proc_waits waits 2 s in one of them, after
// allocating for the last time; the test sends SIGUSR2 in the middle. Under
// the shim the wait must last its whole time and return what it returns
// untouched by any signal, and the snapshot must be written meanwhile, not
// at exit. A host with a signal handler of its own gets the EINTR (it may be
// its own signal's). And a program whose last thread ends, ends: the shim's
// threads never keep it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

constexpr int kWaitMs = 2000;

struct WaitReport {
  std::string result_and_errno;  // "result=R errno=E"
  long elapsed_ms = -1;
};

WaitReport ParseReport(const std::string& output) {
  WaitReport report;
  const std::string line = LineStartingWith(output, "result=");
  const size_t at = line.find(" elapsed_ms=");
  if (at == std::string::npos) return report;
  report.result_and_errno = line.substr(0, at);
  report.elapsed_ms = std::stol(line.substr(at + 12));
  return report;
}

RunOptions WaitOptions(const std::string& mode, bool handler) {
  RunOptions options;
  options.argv = {FixturePath("proc_waits"), mode, std::to_string(kWaitMs)};
  if (handler) options.argv.push_back("handler");
  options.timeout_seconds = 30;
  return options;
}

class ProcWaits : public ::testing::TestWithParam<std::string> {};

TEST_P(ProcWaits, ResumeAfterTheSnapshotSignalAndTheSnapshotIsWrittenMeanwhile) {
  const RunResult plain = test::Run(WaitOptions(GetParam(), false));
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  const WaitReport expected = ParseReport(plain.stdout_data);
  ASSERT_GE(expected.elapsed_ms, kWaitMs - 5) << plain.stdout_data;

  TempDir retain_dir;
  RunOptions options = WaitOptions(GetParam(), false);
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("waiting\n", 10000)) << child.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(child.Signal(SIGUSR2));
  // Written by the service thread the interrupted wait started, while the
  // program still waits (it never allocates again).
  const std::vector<std::string> during = WaitForSnapshots(retain_dir.path(), 1, 1000);
  EXPECT_FALSE(child.Ended()) << "the wait ended early: " << child.Stdout();
  EXPECT_EQ(during.size(), 1u) << "no snapshot while the program waited";
  const RunResult traced = child.Wait(30);
  ASSERT_EQ(traced.exit_code, 0) << traced.stderr_data;
  const WaitReport got = ParseReport(traced.stdout_data);
  EXPECT_EQ(got.result_and_errno, expected.result_and_errno) << traced.stdout_data;
  EXPECT_GE(got.elapsed_ms, kWaitMs - 5) << traced.stdout_data;
  EXPECT_EQ(traced.stderr_data, "");

  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 2u);
  EXPECT_EQ(snapshots[0].header().trigger(), v1::TRIGGER_SIGNAL);
  EXPECT_EQ(snapshots[1].header().trigger(), v1::TRIGGER_EXIT);
}

INSTANTIATE_TEST_SUITE_P(EveryWait, ProcWaits,
                         ::testing::Values("sleep", "usleep", "nanosleep", "clock_nanosleep",
                                           "clock_nanosleep_abs", "poll", "ppoll", "select",
                                           "pselect", "epoll_wait", "epoll_pwait", "sigtimedwait"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// glibc's sleep() rounds what is left to the nearest second: interrupted in
// its last half second it returns 0 as if it had slept it all. The shim's
// sleep still resumes it (it returned 0 early, 3 runs of 3, before).
TEST(ProcWaitsSleep, ASignalInTheLastHalfSecondStillSleepsItAll) {
  constexpr int kSleepMs = 3000;
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_waits"), "sleep", std::to_string(kSleepMs)};
  options.timeout_seconds = 30;
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("waiting\n", 10000)) << child.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(2600));  // 400 ms or less left
  ASSERT_TRUE(child.Signal(SIGUSR2));
  const RunResult traced = child.Wait(30);
  ASSERT_EQ(traced.exit_code, 0) << traced.stderr_data;
  const WaitReport got = ParseReport(traced.stdout_data);
  EXPECT_EQ(got.result_and_errno, "result=0 errno=4242") << traced.stdout_data;
  EXPECT_GE(got.elapsed_ms, kSleepMs - 5) << traced.stdout_data;
  EXPECT_FALSE(LoadAll(retain_dir.path()).empty());
}

// With a handler of its own the host must see EINTR for its own signals, and
// one EINTR cannot be told from another: it gets this one too.
TEST(ProcWaitsWithHostHandler, GetsTheInterruption) {
  TempDir retain_dir;
  RunOptions options = WaitOptions("poll", true);
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("waiting\n", 10000)) << child.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(child.Signal(SIGUSR2));
  const RunResult traced = child.Wait(30);
  ASSERT_EQ(traced.exit_code, 0) << traced.stderr_data;
  const WaitReport got = ParseReport(traced.stdout_data);
  EXPECT_EQ(got.result_and_errno, "result=-1 errno=" + std::to_string(EINTR));
  EXPECT_LT(got.elapsed_ms, kWaitMs);
  // The snapshot is written all the same.
  EXPECT_EQ(WaitForSnapshots(retain_dir.path(), 2, 5000).size(), 2u);
}

// A program that allocates nothing after start and then blocks in read():
// the snapshot is written while it blocks, not at exit. Also with read()
// built with _FORTIFY_SOURCE (Debian's packages are): the program calls
// glibc's __read_chk, hooked as read() is.
class ProcSignalSnapshot : public testing::TestWithParam<const char*> {};

TEST_P(ProcSignalSnapshot, WrittenWhileAProgramThatNeverAllocatesBlocksInRead) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath(GetParam())};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("waiting\n", 10000)) << child.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(child.Signal(SIGUSR2));
  EXPECT_EQ(WaitForSnapshots(retain_dir.path(), 1, 10000).size(), 1u)
      << "no snapshot while the program blocked";
  // Written on the program's own thread (proc_single_thread_test.cc).
  EXPECT_EQ(ThreadNames(child.pid()), std::vector<std::string>{"proc_blocked_re"});
  ASSERT_TRUE(child.WriteStdin("bytes the program reads\n"));
  child.CloseStdin();
  const RunResult run = child.Wait(30);
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 2u);
  EXPECT_EQ(snapshots[0].header().trigger(), v1::TRIGGER_SIGNAL);
  EXPECT_EQ(snapshots[1].header().trigger(), v1::TRIGGER_EXIT);
}

INSTANTIATE_TEST_SUITE_P(PlainAndFortified, ProcSignalSnapshot,
                         testing::Values("proc_blocked_read", "proc_blocked_read_fortified"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// The main thread ends with pthread_exit after the shim's service thread
// started (the program ran a thread of its own first) and wrote a signal
// snapshot, and with the control endpoint's thread running: the process
// still ends, with status 0, when its worker does, and leaves its exit
// snapshot.
void ExpectEndsWhenItsLastThreadDoes(const std::map<std::string, std::string>& env) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_last_thread")};
  options.preload = true;
  options.env = env;
  options.env["RETAIN_DIR"] = retain_dir.path();
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("ready\n", 10000)) << child.Stderr();
  ASSERT_TRUE(child.Signal(SIGUSR2));
  ASSERT_EQ(WaitForSnapshots(retain_dir.path(), 1, 5000).size(), 1u);
  const std::vector<std::string> threads = ThreadNames(child.pid());
  EXPECT_NE(std::find(threads.begin(), threads.end(), "retain"), threads.end())
      << testing::PrintToString(threads);
  ASSERT_TRUE(child.WriteStdin("go\n"));
  const auto start = std::chrono::steady_clock::now();
  const RunResult run = child.Wait(20);
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(run.timed_out) << "the shim kept the process alive";
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_NE(run.stdout_data.find("worker done\n"), std::string::npos);
  EXPECT_LT(seconds, 10.0);
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 2u);
  EXPECT_EQ(snapshots[1].header().trigger(), v1::TRIGGER_EXIT);
}

TEST(ProcLastThread, ServiceThreadDoesNotKeepTheProcess) { ExpectEndsWhenItsLastThreadDoes({}); }

TEST(ProcLastThread, ControlThreadDoesNotKeepTheProcess) {
  TempDir socket_dir;
  ExpectEndsWhenItsLastThreadDoes({{"RETAIN_CONTROL", "unix:" + socket_dir.path() + "/ctl"}});
}

}  // namespace
}  // namespace retain::test::proc
