// Programs under a seccomp filter that kills them for a system call it does
// not list (base/syscall_filter.h): the shim must not be what makes such a
// call. proc_seccomp's filters kill for mincore and msync (as systemd's
// SystemCallFilter=@system-service, inherited through exec) or for those and
// process_vm_readv (a sandbox the program installs itself, as Chromium's
// renderers do). The program allocates on a coroutine stack, where the
// shim's capture falls back to libunwind (which validates its reads), and
// takes a snapshot (which measures residency). And the real thing: headless
// Chromium with its sandbox on, as a user other than root runs it.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test::proc {
namespace {

constexpr uint64_t kCoroutineBlock = 54321;  // tests/fixtures/proc_seccomp.c

struct SeccompRun {
  RunResult run;
  std::vector<v1::Snapshot> snapshots;
};

SeccompRun RunSeccomp(const std::string& mode) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_seccomp"), mode};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  SeccompRun result;
  result.run = test::Run(options);
  result.snapshots = LoadAll(retain_dir.path());
  return result;
}

size_t FramesOf(const v1::Snapshot& snapshot, uint32_t stack_id) {
  const v1::Stack* stack = tool::FindStack(snapshot, stack_id);
  return stack == nullptr ? 0 : static_cast<size_t>(stack->frames_size());
}

// Checks what every mode shares; returns the coroutine block's frame count.
size_t ExpectRanAndRecorded(const SeccompRun& got) {
  EXPECT_EQ(got.run.exit_code, 0) << "signal " << got.run.term_signal << "\n"
                                  << got.run.stderr_data;
  EXPECT_EQ(got.run.stdout_data, "ok\n");
  if (got.snapshots.size() != 2u) {
    ADD_FAILURE() << got.snapshots.size() << " snapshots";
    return 0;
  }
  const v1::Snapshot& filtered = got.snapshots[0];
  EXPECT_EQ(filtered.header().trigger(), v1::TRIGGER_API);
  EXPECT_EQ(got.snapshots[1].header().trigger(), v1::TRIGGER_EXIT);
  // Residency is measured (by mincore, or under a filter by the pagemap).
  EXPECT_TRUE(filtered.header().residency_measured());
  EXPECT_GT(TotalsFor(filtered, v1::KIND_HEAP).resident_bytes(), 0u);
  const std::vector<tool::Allocation> blocks = AllocationsOfSize(filtered, kCoroutineBlock);
  if (blocks.size() != 1u) {
    ADD_FAILURE() << blocks.size() << " blocks of " << kCoroutineBlock << " bytes";
    return 0;
  }
  // The first frame is the program's own (coroutine_site), never the shim's.
  const std::optional<uint64_t> first = FirstFrame(filtered, blocks[0].stack_id);
  const v1::Module* program = FindModule(filtered, FixturePath("proc_seccomp"));
  EXPECT_TRUE(first.has_value() && program != nullptr && InExecutableSegment(*program, *first));
  return FramesOf(filtered, blocks[0].stack_id);
}

TEST(ProcSandbox, WithoutAFilterTheCoroutinesStackIsWalkedByLibunwind) {
  // The baseline the filtered runs are compared with.
  const size_t frames = ExpectRanAndRecorded(RunSeccomp("work"));
  EXPECT_GE(frames, 3u);  // coroutine_site, coroutine_entry, and makecontext's trampoline
}

TEST(ProcSandbox, AServiceManagersFilterInheritedThroughExecKillsNothing) {
  // mincore and msync kill; process_vm_readv is allowed, so libunwind's
  // reads are still checked and its stack is as long as without a filter.
  const size_t unfiltered = ExpectRanAndRecorded(RunSeccomp("work"));
  const size_t frames = ExpectRanAndRecorded(RunSeccomp("inherit"));
  EXPECT_EQ(frames, unfiltered);
}

TEST(ProcSandbox, ASandboxTheProgramInstallsItselfKillsNothing) {
  // process_vm_readv kills too: libunwind is not used, and the stack keeps
  // the allocating function alone.
  const size_t frames = ExpectRanAndRecorded(RunSeccomp("install"));
  EXPECT_EQ(frames, 1u);
}

// Chromium as a user other than root runs it: with its sandbox (namespaces,
// an empty root, seccomp-bpf filters that crash the renderer on purpose for
// a call they do not list). Under a shim that validated libunwind's reads
// with process_vm_readv, every renderer died ("seccomp-bpf failure in
// syscall 0136") and the browser never ended.
TEST(ProcSandbox, ChromiumWithItsSandboxRendersAPageUnderTheShim) {
  const std::string chromium = RETAIN_CHROMIUM_PATH;
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh)";
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run Chromium as nobody";
  TempDir work;
  // nobody must reach the page, the shim and its snapshot directory.
  ASSERT_EQ(chmod(work.path().c_str(), 0755), 0);
  const std::string shim = work.path() + "/libretain.so";
  std::filesystem::copy_file(ShimPath(), shim);
  ASSERT_EQ(chmod(shim.c_str(), 0755), 0);
  const std::string page = work.path() + "/page.html";
  ASSERT_TRUE(WriteFile(page,
                        "<html><body><p id=x>static</p><script>"
                        "document.getElementById('x').textContent = 'js ran ' + "
                        "[1, 2, 3].map(n => n * 2);</script></body></html>\n"));
  ASSERT_EQ(chmod(page.c_str(), 0644), 0);
  const std::string home = work.path() + "/home";
  ASSERT_EQ(mkdir(home.c_str(), 0777), 0);
  ASSERT_EQ(chmod(home.c_str(), 0777), 0);
  auto render = [&](bool preload, const std::string& profile) {
    RunOptions options;
    options.argv = {"/usr/bin/setpriv", "--reuid=65534",  "--regid=65534",
                    "--clear-groups",   chromium,         "--headless",
                    "--disable-gpu",    "--no-first-run", "--user-data-dir=" + home + "/" + profile,
                    "--dump-dom",       "file://" + page};
    options.env["HOME"] = home;
    if (preload) {
      options.env["LD_PRELOAD"] = shim;
      options.env["RETAIN_DIR"] = home;
    }
    options.timeout_seconds = 90;
    return test::Run(options);
  };
  const RunResult plain = render(false, "profile-plain");
  if (plain.exit_code != 0 || plain.stdout_data.find("js ran 2,4,6") == std::string::npos) {
    GTEST_SKIP() << "Chromium's sandbox does not run here without the shim either:\n"
                 << plain.stderr_data.substr(0, 2000);
  }
  const RunResult traced = render(true, "profile-traced");
  EXPECT_FALSE(traced.timed_out);
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data.substr(0, 4000);
  EXPECT_EQ(traced.stdout_data, plain.stdout_data);
  EXPECT_EQ(traced.stderr_data.find("seccomp-bpf failure"), std::string::npos)
      << traced.stderr_data.substr(0, 4000);
  size_t browser_snapshots = 0;
  for (const std::string& path : ListSnapshots(home)) {
    if (std::filesystem::path(path).filename().string().rfind("chromium.", 0) == 0) {
      ++browser_snapshots;
    }
  }
  EXPECT_GE(browser_snapshots, 1u);
}

}  // namespace
}  // namespace retain::test::proc
