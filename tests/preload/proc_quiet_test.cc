// The host's stderr is the host's, and the shim's errors say what happened.
// Configuration errors found at start-up are printed once per process tree
// (a child that inherits the same environment stays quiet); a snapshot that
// cannot be written at run time is not printed at all: it is counted, with
// its real cause, in the next snapshot's health block and in RETAIN_LOG. A
// relative RETAIN_DIR is where it was when the program started, whatever
// the program does with its working directory afterwards.
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

TEST(ProcQuiet, RelativeRetainDirIsResolvedAtStart) {
  TempDir work;
  const std::string elsewhere = work.path() + "/elsewhere";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((work.path() + "/snapshots").c_str(), 0700), 0);
  RunOptions options;
  options.argv = {FixturePath("proc_chdir"), elsewhere};
  options.preload = true;
  options.cwd = work.path();
  options.env["RETAIN_DIR"] = "snapshots";
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(run.stderr_data, "");
  EXPECT_EQ(SnapshotPaths(work.path() + "/snapshots").size(), 1u);
  EXPECT_TRUE(DirEntries(elsewhere).empty());
}

TEST(ProcQuiet, ConfigurationErrorsOncePerProcessTree) {
  TempDir work;
  const std::string file = work.path() + "/not-a-directory";
  ASSERT_TRUE(WriteFile(file, "x"));
  RunOptions options;
  // A shell that runs two more programs: three processes under the shim.
  options.argv = {"/bin/sh", "-c", "/bin/true; /bin/true"};
  options.preload = true;
  options.env["RETAIN_DIR"] = file;
  options.env["RETAIN_DEPTH"] = "zero";
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(run.stderr_data,
            "retain: RETAIN_DIR '" + file +
                "' is not a directory; no snapshot can be written\n"
                "retain: RETAIN_DEPTH='zero' is not a number in 1..256; using 48\n");
}

TEST(ProcQuiet, FailedSnapshotsAreCountedWithTheirCauseNotPrinted) {
  TempDir work;
  const std::string dir = work.path() + "/snapshots";
  const std::string log = work.path() + "/retain.log";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  RunOptions options;
  options.argv = {FixturePath("proc_dir_moves"), dir, "/"};
  options.preload = true;
  options.env["RETAIN_DIR"] = dir;
  options.env["RETAIN_LOG"] = log;
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(run.stdout_data, "first=-1 second=0\n");
  EXPECT_EQ(run.stderr_data, "");
  const std::vector<v1::Snapshot> snapshots = LoadAll(dir);
  ASSERT_EQ(snapshots.size(), 2u);  // "back" and the exit snapshot
  EXPECT_EQ(snapshots[0].header().label(), "back");
  EXPECT_EQ(snapshots[0].health().failed_snapshots(), 1u);
  EXPECT_EQ(snapshots[0].health().last_failure(),
            "cannot write snapshots to RETAIN_DIR '" + dir + "': Not a directory");
  EXPECT_NE(ReadFileOrFail(log).find("retain: cannot write snapshots to RETAIN_DIR '" + dir +
                                     "': Not a directory\n"),
            std::string::npos);
}

// A process tree that forks, execs and exits leaves snapshots and nothing
// else: no temporaries, no sockets.
TEST(ProcQuiet, NoLeftoversAfterCleanExit) {
  TempDir retain_dir;
  TempDir socket_dir;
  RunOptions options;
  options.argv = {"/bin/sh", "-c",
                  "/usr/bin/python3 -c 'import subprocess, os; subprocess.run([\"/bin/true\"]);"
                  " os.fork() or os._exit(0)'; /bin/ls > /dev/null; /bin/true"};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  options.env["RETAIN_CONTROL"] = "unix:" + socket_dir.path() + "/ctl";
  const RunResult run = test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_EQ(run.stderr_data, "");
  const std::vector<std::string> entries = DirEntries(retain_dir.path());
  EXPECT_GE(entries.size(), 3u);  // python3, true (twice), ls
  for (const std::string& name : entries) {
    EXPECT_NE(name[0], '.') << name;
    EXPECT_EQ(name.substr(name.size() - 3), ".pb") << name;
  }
  EXPECT_TRUE(DirEntries(socket_dir.path()).empty());
}

}  // namespace
}  // namespace retain::test::proc
