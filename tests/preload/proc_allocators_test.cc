// Hosts that start threads and allocate in ways plain glibc programs do not:
// threads that ask glibc for their own stack before they allocate anything
// (Rust's, JVMs', garbage collectors'), and programs whose malloc is another
// allocator's, preloaded (Debian's jemalloc, tcmalloc and mimalloc) after
// the shim (retain-run's order) or before it. Under the shim none of them
// may hang or print anything else; where the shim's malloc is the
// process's, every leaked block is in the snapshot to the byte, with its
// thread's stack walked.
//
// Both hangs these tests pin down were real: a thread whose first
// allocation was inside pthread_getattr_np waited forever on its own
// descriptor lock (the shim asked the same function for the thread's stack
// from inside that allocation), and LD_PRELOAD="libjemalloc.so.2
// libretain.so" /bin/true never ended (the main thread's stack was read
// through stdio, whose malloc waited for the lock jemalloc held while it
// mapped its first arena through the shim's mmap hook).
#include <sys/stat.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

constexpr int kThreads = 4;
constexpr uint64_t kLeakBytes = 12345;
// A hang is what these tests look for: far more than a run takes.
constexpr int kTimeoutSeconds = 60;

struct FixtureRun {
  RunResult result;
  std::vector<std::string> stack_lines;  // "thread N stack SIZE", per thread
  std::vector<uint64_t> leaked;          // each thread's leaked block
};

FixtureRun RunFixture(RunOptions options) {
  options.argv = {FixturePath("proc_thread_attr")};
  options.timeout_seconds = kTimeoutSeconds;
  FixtureRun run;
  run.result = test::Run(options);
  for (int i = 0; i < kThreads; ++i) {
    const std::string line =
        LineStartingWith(run.result.stdout_data, "thread " + std::to_string(i));
    const size_t leaked = line.find(" leaked ");
    run.stack_lines.push_back(line.substr(0, leaked));
    run.leaked.push_back(
        leaked == std::string::npos ? 0 : std::stoull(line.substr(leaked + 8), nullptr, 16));
  }
  return run;
}

// The host's behaviour: it ended by itself, as it does without the shim,
// and the shim said nothing on its stderr but `retain_lines`.
void ExpectSameRun(const FixtureRun& traced, const FixtureRun& plain,
                   const std::vector<std::string>& retain_lines = {}) {
  ASSERT_FALSE(traced.result.timed_out) << "hung under the shim";
  EXPECT_EQ(traced.result.exit_code, 0) << traced.result.stderr_data;
  EXPECT_EQ(traced.stack_lines, plain.stack_lines);
  EXPECT_NE(LineStartingWith(traced.result.stdout_data, "proc_thread_attr done"), "");
  EXPECT_EQ(RetainLines(traced.result.stderr_data), retain_lines);
}

FixtureRun PlainRun() {
  FixtureRun plain = RunFixture(RunOptions{});
  EXPECT_EQ(plain.result.exit_code, 0) << plain.result.stderr_data;
  for (const std::string& line : plain.stack_lines) EXPECT_NE(line, "");
  return plain;
}

// Each thread's leaked block, to the byte, with a stack of at least the
// thread's own frames (LeakFromThread, Worker, start_thread) whose first
// frame is in the fixture.
void ExpectLeaksRecorded(const v1::Snapshot& snapshot, const FixtureRun& run) {
  const v1::Module* fixture = FindModule(snapshot, FixturePath("proc_thread_attr"));
  ASSERT_NE(fixture, nullptr);
  for (int i = 0; i < kThreads; ++i) {
    SCOPED_TRACE("thread " + std::to_string(i));
    const std::optional<tool::Allocation> block = FindAllocation(snapshot, run.leaked[i]);
    ASSERT_TRUE(block.has_value());
    EXPECT_EQ(block->size, kLeakBytes);
    const v1::Stack* stack = tool::FindStack(snapshot, block->stack_id);
    ASSERT_NE(stack, nullptr);
    EXPECT_GE(stack->frames_size(), 3);
    const std::optional<uint64_t> first = FirstFrame(snapshot, block->stack_id);
    ASSERT_TRUE(first.has_value());
    EXPECT_TRUE(InExecutableSegment(*fixture, *first));
  }
}

TEST(ProcThreadStacks, AThreadWhoseFirstAllocationIsInsidePthreadGetattrNp) {
  const FixtureRun plain = PlainRun();
  TempDir retain_dir;
  RunOptions options;
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const FixtureRun traced = RunFixture(options);
  ExpectSameRun(traced, plain);
  const v1::Snapshot snapshot =
      ExpectSingleExitSnapshot(retain_dir.path(), FixturePath("proc_thread_attr"));
  ExpectLeaksRecorded(snapshot, traced);
  // Walked by the CFI walker within the bounds the shim read itself: no
  // stack went to libunwind for want of them.
  EXPECT_EQ(snapshot.health().cfi_fallbacks(), 0u);
}

RunResult RunDiff(const std::vector<std::string>& args) {
  RunOptions options;
  options.argv = {RETAIN_DIFF_PATH};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.timeout_seconds = kTimeoutSeconds;
  return test::Run(options);
}

// Debian's packages (scripts/install-deps.sh installs them).
const char* const kAllocators[] = {"libjemalloc.so.2", "libtcmalloc_minimal.so.4",
                                   "libmimalloc.so.2"};

std::string AllocatorPath(const std::string& name) {
  return std::string(RETAIN_SYSTEM_LIBDIR) + "/" + name;
}

bool Exists(const std::string& path) {
  struct stat status;
  return stat(path.c_str(), &status) == 0;
}

// The fixture with `allocator` preloaded before the shim, or after it,
// snapshots to `retain_dir`.
FixtureRun RunWithAllocator(const std::string& allocator, bool before_the_shim,
                            const std::string& retain_dir) {
  EXPECT_TRUE(Exists(allocator)) << allocator << " missing: run scripts/install-deps.sh";
  RunOptions options;
  options.preload = !before_the_shim;  // the shim first, then the test's LD_PRELOAD
  options.env["LD_PRELOAD"] = before_the_shim ? allocator + ":" + ShimPath() : allocator;
  options.env["RETAIN_DIR"] = retain_dir;
  return RunFixture(options);
}

// retain-run's order: the shim first, the allocator behind it as the real
// malloc the hooks call.
TEST(ProcAllocators, PreloadedAfterTheShimEveryBlockIsRecorded) {
  const FixtureRun plain = PlainRun();
  for (const char* name : kAllocators) {
    SCOPED_TRACE(name);
    const std::string allocator = AllocatorPath(name);
    TempDir retain_dir;
    const FixtureRun traced = RunWithAllocator(allocator, false, retain_dir.path());
    ExpectSameRun(traced, plain);
    const v1::Snapshot snapshot =
        ExpectSingleExitSnapshot(retain_dir.path(), FixturePath("proc_thread_attr"));
    ExpectLeaksRecorded(snapshot, traced);
    EXPECT_EQ(snapshot.header().foreign_malloc_path(), "");
  }
}

// The allocator first: its malloc is the process's, the shim's malloc hooks
// never run. The program still runs as it does without the shim; the shim
// says once why the heap is missing, and every snapshot says it to
// retain-diff, which puts it above its figures.
TEST(ProcAllocators, PreloadedBeforeTheShimTheHostRunsAndTheMissingHeapIsSaid) {
  const FixtureRun plain = PlainRun();
  for (const char* name : kAllocators) {
    SCOPED_TRACE(name);
    const std::string allocator = AllocatorPath(name);
    TempDir retain_dir;
    const FixtureRun traced = RunWithAllocator(allocator, true, retain_dir.path());
    ExpectSameRun(traced, plain,
                  {"retain: malloc here is " + allocator +
                   "'s, which the dynamic linker searches before libretain.so: heap allocations "
                   "are not recorded (mappings and GPU memory are). Put libretain.so first in "
                   "LD_PRELOAD (retain-run does)"});
    // (Not ExpectSingleExitSnapshot: it insists on recorded heap.)
    const std::vector<std::string> paths = SnapshotPaths(retain_dir.path());
    ASSERT_EQ(paths.size(), 1u);
    const std::string& snapshot_path = paths.front();
    const v1::Snapshot snapshot = LoadSnapshot(snapshot_path);
    EXPECT_EQ(snapshot.header().trigger(), v1::TRIGGER_EXIT);
    EXPECT_EQ(snapshot.header().foreign_malloc_path(), allocator);
    EXPECT_EQ(LiveCount(snapshot, v1::KIND_HEAP), 0u);
    const RunResult diff = RunDiff({snapshot_path});
    EXPECT_EQ(diff.exit_code, 0) << diff.stderr_data;
    EXPECT_NE(diff.stdout_data.find("\n  WARNING     heap not recorded in " + snapshot_path +
                                    ": the process's malloc was " + allocator + "'s"),
              std::string::npos)
        << diff.stdout_data;
  }
}

// An executable that defines malloc itself (rustc links jemalloc in): it is
// searched before any preloaded library, so no LD_PRELOAD order records its
// heap. The shim does not say so on the host's stderr (a build would get the
// line from every such process: 16 from one cargo build); the snapshot
// names the malloc for retain-diff, and RETAIN_LOG says it.
TEST(ProcAllocators, AProgramsOwnMallocIsSaidInTheSnapshotNotOnItsStderr) {
  RunOptions options;
  options.argv = {FixturePath("proc_own_malloc")};
  const RunResult plain = test::Run(options);
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  ASSERT_EQ(plain.stdout_data, "allocated 4321 own_calls>0=1\n");
  TempDir retain_dir;
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const RunResult traced = test::Run(options);
  ASSERT_EQ(traced.exit_code, 0) << traced.stderr_data;
  EXPECT_EQ(traced.stdout_data, plain.stdout_data);
  EXPECT_EQ(traced.stderr_data, "");
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 1u);
  EXPECT_EQ(snapshots[0].header().foreign_malloc_path(), FixturePath("proc_own_malloc"));
  EXPECT_TRUE(AllocationsOfSize(snapshots[0], 4321).empty());

  options.env["RETAIN_LOG"] = "1";
  const RunResult logged = test::Run(options);
  EXPECT_NE(logged.stderr_data.find("retain: malloc here is the program's own ("),
            std::string::npos)
      << logged.stderr_data;
}

}  // namespace
}  // namespace retain::test::proc
