// File descriptors: the host's are the host's. proc_fds closes every
// descriptor above stderr, puts a socket on 3 and a log on 4, and allocates
// along every unwinding route (plain, signal handler, sigaltstack, a frame
// without unwind tables) under each RETAIN_UNWIND. The shim must not hold a
// descriptor of its own, must not read from or write to the host's, and
// must still capture every route's stack: libunwind's memory validation,
// which used a pipe on fds 3 and 4, now runs without one.
#include <sys/stat.h>

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"
#include "tools/lib/symbolizer.h"

namespace retain::test::proc {
namespace {

constexpr char kExpectedOutput[] = "fd 0\nfd 1\nfd 2\nfd 3\nfd 4\nfd 7\nroutes ok\n";
constexpr char kExpectedLog[] = "round 0\nround 1\nround 2\nround 3\nround 4\n";

// The function the innermost frame of the live block of `size` bytes is in.
std::string AllocatingFunction(const v1::Snapshot& snapshot, uint64_t size,
                               tool::Symbolizer& symbolizer) {
  const std::vector<tool::Allocation> rows = AllocationsOfSize(snapshot, size);
  if (rows.size() != 1) return "<" + std::to_string(rows.size()) + " blocks>";
  const std::optional<uint64_t> frame = FirstFrame(snapshot, rows[0].stack_id);
  if (!frame) return "<no stack>";
  const tool::SymbolizedAddress& where = symbolizer.Symbolize(snapshot, *frame, 0);
  if (where.frames.empty()) return "<unsymbolized>";
  return where.frames.back().function;
}

class ProcFds : public ::testing::TestWithParam<std::string> {};

TEST_P(ProcFds, HostDescriptorsUntouchedOnEveryUnwindingRoute) {
  TempDir work;
  const std::string plain_log = work.path() + "/plain.log";
  const std::string traced_log = work.path() + "/traced.log";
  const std::string retain_dir = work.path() + "/snapshots";
  ASSERT_EQ(mkdir(retain_dir.c_str(), 0700), 0);

  RunOptions options;
  options.timeout_seconds = 60;  // a shim reading the host's socket blocks
  options.argv = {FixturePath("proc_fds"), plain_log};
  const RunResult plain = test::Run(options);
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  ASSERT_EQ(plain.stdout_data, kExpectedOutput);
  ASSERT_EQ(ReadFileOrFail(plain_log), kExpectedLog);

  options.argv = {FixturePath("proc_fds"), traced_log};
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir;
  options.env["RETAIN_UNWIND"] = GetParam();
  const RunResult traced = test::Run(options);
  ASSERT_FALSE(traced.timed_out) << "the shim blocked on a descriptor of the host's";
  ASSERT_EQ(traced.exit_code, 0) << traced.stderr_data;
  EXPECT_EQ(traced.stdout_data, kExpectedOutput) << "the shim holds a descriptor";
  EXPECT_EQ(ReadFileOrFail(traced_log), kExpectedLog) << "the host's log was written to";
  EXPECT_EQ(traced.stderr_data, "");

  const v1::Snapshot snapshot = ExpectSingleExitSnapshot(retain_dir, FixturePath("proc_fds"));
  // The frame without unwind tables sent every unwinder to libunwind's
  // guesses, each checked without a pipe.
  EXPECT_GT(snapshot.health().libunwind_validations(), 0u);
  EXPECT_EQ(snapshot.health().unwind_failures(), 0u);
  tool::Symbolizer symbolizer;
  EXPECT_EQ(AllocatingFunction(snapshot, 40001, symbolizer), "main");
  EXPECT_EQ(AllocatingFunction(snapshot, 40002, symbolizer), "OnSignal");
  EXPECT_EQ(AllocatingFunction(snapshot, 40003, symbolizer), "OnAltStackSignal");
  EXPECT_EQ(AllocatingFunction(snapshot, 40004, symbolizer),
            "proc_fds_allocate_without_unwind_info");
}

INSTANTIATE_TEST_SUITE_P(EveryUnwinder, ProcFds, ::testing::Values("cfi", "libunwind", "fp"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace retain::test::proc
