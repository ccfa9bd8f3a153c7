// A program that never starts a thread stays on one thread under the shim
// (base/threads.h): some must, to work at all. unshare(CLONE_NEWUSER)
// refuses a multi-threaded caller, and Chromium's zygote checks
// /proc/self/task before it forks and stops when it finds a second thread
// (the browser then gives up: "GPU process isn't usable"). The snapshot
// signal is still answered, on the program's own thread: at its next
// allocation when it is busy, and inside the read() or accept() it blocks
// in (snapshot/interrupted_call.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

const std::vector<std::string> kOnlyTheProgram = {"proc_one_thread"};

TEST(ProcSingleThread, AProgramWithoutThreadsCanStillUnshareItsUserNamespace) {
  RunOptions options;
  options.argv = {FixturePath("proc_one_thread")};
  const RunResult plain = test::Run(options);
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  ASSERT_NE(plain.stdout_data.find("threads=1\n"), std::string::npos) << plain.stdout_data;

  TempDir retain_dir;
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();  // RETAIN_SIGNAL: SIGUSR2, the default
  const RunResult traced = test::Run(options);
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
  // "unshare=0" where the kernel allows user namespaces, the same errno
  // with and without the shim where it does not; never EINVAL for threads.
  EXPECT_EQ(traced.stdout_data, plain.stdout_data);
  EXPECT_TRUE(RetainLines(traced.stderr_data).empty()) << traced.stderr_data;
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 1u);
  EXPECT_EQ(snapshots[0].header().trigger(), v1::TRIGGER_EXIT);
  EXPECT_EQ(AllocationsOfSize(snapshots[0], 12345).size(), 1u);
}

// The child a threaded program forks has one thread, and keeps it: the
// shim's thread was the parent's.
TEST(ProcSingleThread, TheChildOfAThreadedProgramStaysOnOneThread) {
  RunOptions options;
  options.argv = {FixturePath("proc_one_thread"), "fork"};
  const RunResult plain = test::Run(options);
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  ASSERT_NE(plain.stdout_data.find("child threads=1\n"), std::string::npos) << plain.stdout_data;
  TempDir retain_dir;
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  options.env["RETAIN_CHILD_EXIT_MIN"] = "0";
  const RunResult traced = test::Run(options);
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
  // The parent had the shim's thread when it forked; the child has one.
  EXPECT_EQ(LineStartingWith(plain.stdout_data, "parent threads="), "parent threads=1");
  EXPECT_EQ(LineStartingWith(traced.stdout_data, "parent threads="), "parent threads=2");
  for (const char* line : {"child threads=", "child unshare=", "parent done"}) {
    EXPECT_EQ(LineStartingWith(traced.stdout_data, line),
              LineStartingWith(plain.stdout_data, line));
  }
  // Both wrote their exit snapshots.
  EXPECT_EQ(LoadAll(retain_dir.path()).size(), 2u);
}

// A threaded program whose allocations the sampling skips (RETAIN_SAMPLE)
// records nothing, yet is threaded: the shim sees the worker at its first
// allocation all the same and starts its thread, which answers the signal
// while main waits in pthread_join and the worker in read().
TEST(ProcSingleThread, AThreadedProgramThatRecordsNothingStillGetsTheShimsThread) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_one_thread"), "worker"};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  options.env["RETAIN_SAMPLE"] = "524288";
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("ready\n", 10000)) << child.Stderr();
  std::vector<std::string> threads;
  for (int waited = 0; waited < 5000; waited += 20) {
    threads = ThreadNames(child.pid());
    if (std::find(threads.begin(), threads.end(), "retain") != threads.end()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(std::find(threads.begin(), threads.end(), "retain"), threads.end())
      << testing::PrintToString(threads);
  ASSERT_TRUE(child.Signal(SIGUSR2));
  EXPECT_EQ(WaitForSnapshots(retain_dir.path(), 1, 10000).size(), 1u)
      << "no snapshot while the program waited";
  child.CloseStdin();
  const RunResult run = child.Wait(30);
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(LoadAll(retain_dir.path()).size(), 2u);
}

// Busy, never blocked: the snapshot is written at an allocation soon after
// the signal, while the program runs, by the program's thread.
TEST(ProcSingleThread, ASignalWhileBusyIsAnsweredOnTheProgramsThread) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_one_thread"), "spin"};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("spinning\n", 10000)) << child.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(child.Signal(SIGUSR2));
  EXPECT_EQ(WaitForSnapshots(retain_dir.path(), 1, 10000).size(), 1u)
      << "no snapshot while the program ran";
  EXPECT_FALSE(child.Ended()) << "the snapshot came only at exit";
  EXPECT_EQ(ThreadNames(child.pid()), kOnlyTheProgram);
  child.CloseStdin();
  const RunResult run = child.Wait(30);
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_NE(run.stdout_data.find("threads=1\n"), std::string::npos) << run.stdout_data;
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 2u);
  EXPECT_EQ(snapshots[0].header().trigger(), v1::TRIGGER_SIGNAL);
  EXPECT_EQ(snapshots[1].header().trigger(), v1::TRIGGER_EXIT);
}

// Blocked in accept(2), which the kernel restarts after the shim's handler:
// the handler ends it, the hook writes the snapshot and accepts again, and
// the client that connects later is accepted as without the shim.
TEST(ProcSingleThread, ASignalWhileBlockedInAcceptIsAnsweredThere) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_blocked_read"), "accept"};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  Child child(options);
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(child.WaitForStdout("\n", 10000)) << child.Stderr();
  const std::optional<uint64_t> port = Field(LineStartingWith(child.Stdout(), "waiting"), "port");
  ASSERT_TRUE(port.has_value()) << child.Stdout();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int signal = 1; signal <= 3; ++signal) {
    ASSERT_TRUE(child.Signal(SIGUSR2));
    EXPECT_EQ(WaitForSnapshots(retain_dir.path(), signal, 10000).size(),
              static_cast<size_t>(signal));
  }
  EXPECT_EQ(ThreadNames(child.pid()), std::vector<std::string>{"proc_blocked_re"});

  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(client, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(*port));
  EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const RunResult run = child.Wait(30);
  close(client);
  EXPECT_EQ(run.exit_code, 0) << run.stderr_data;
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 4u);
  EXPECT_EQ(snapshots[2].header().trigger(), v1::TRIGGER_SIGNAL);
  EXPECT_EQ(snapshots[3].header().trigger(), v1::TRIGGER_EXIT);
}

// The real thing: headless Chromium renders a page that runs JavaScript.
// Under a shim that started its thread in every process, the zygote died at
// its single-thread check and the browser aborted.
TEST(ProcSingleThread, ChromiumRendersAPageUnderTheShim) {
  const std::string chromium = RETAIN_CHROMIUM_PATH;
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh)";
  TempDir work;
  const std::string page = work.path() + "/page.html";
  ASSERT_TRUE(WriteFile(page,
                        "<html><body><p id=x>static</p><script>"
                        "document.getElementById('x').textContent = 'js ran ' + "
                        "[1, 2, 3].map(n => n * 2);</script></body></html>\n"));
  auto render = [&](bool preload, const std::string& profile) {
    RunOptions options;
    options.argv = {chromium,        "--headless",     "--no-sandbox",
                    "--disable-gpu", "--no-first-run", "--user-data-dir=" + profile,
                    "--dump-dom",    "file://" + page};
    options.preload = preload;
    options.env["RETAIN_DIR"] = work.path() + "/snapshots";
    options.timeout_seconds = 90;
    return test::Run(options);
  };
  const RunResult plain = render(false, work.path() + "/profile-plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  ASSERT_NE(plain.stdout_data.find("js ran 2,4,6"), std::string::npos) << plain.stdout_data;
  ASSERT_EQ(mkdir((work.path() + "/snapshots").c_str(), 0755), 0);
  const RunResult traced = render(true, work.path() + "/profile-traced");
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
  EXPECT_EQ(traced.stdout_data, plain.stdout_data);
  EXPECT_EQ(traced.stderr_data.find("Did not receive ping from zygote child"), std::string::npos)
      << traced.stderr_data;
  // The shim ran in the browser's processes: those that exit normally
  // (the browser, its utility processes) wrote their exit snapshots.
  size_t browser_snapshots = 0;
  for (const std::string& path : ListSnapshots(work.path() + "/snapshots")) {
    if (std::filesystem::path(path).filename().string().rfind("chromium.", 0) == 0) {
      ++browser_snapshots;
    }
  }
  EXPECT_GE(browser_snapshots, 1u);
}

}  // namespace
}  // namespace retain::test::proc
