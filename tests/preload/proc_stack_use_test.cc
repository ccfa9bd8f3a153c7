// The host's stack: an allocation call under the shim must leave room for
// the host's own frames. Servers run request handlers on threads with small
// stacks, and coroutine libraries give each coroutine a few tens of KiB; a
// hook that took tens of KiB of that would overflow a stack the host sized
// right. proc_stack_use measures the deepest byte one malloc/free pair
// writes below its caller, over 320 calls from recursion depths 1..40
// (stack walks on the common path and on new call paths), after a round
// that warms the shim up.
#include <string>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

// What the fixture cannot see (its scan starts this far below its frame).
constexpr long kResolution = 1024;
// The hook's share: the capture (its frame array and the walk's kept
// frames, 4.4 KiB with the CFI walker), the recorder, the hook's frames.
// libunwind's own cursor adds about 1 KiB (5.8 KiB measured).
constexpr long kMostBytes = 6 * 1024;
constexpr long kMostBytesWithLibunwind = 8 * 1024;

long StackUse(const RunResult& result, const std::string& who) {
  EXPECT_EQ(result.exit_code, 0) << who << ": " << result.stderr_data;
  EXPECT_EQ(LineStartingWith(result.stdout_data, "calls "), "calls 320") << who;
  const std::string line = LineStartingWith(result.stdout_data, "stack-use ");
  return line.empty() ? -1 : std::stol(line.substr(10));
}

TEST(ProcStackUse, AnAllocationTakesAtMostSixKibibytesOfTheHostsStack) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_stack_use")};
  const long plain = StackUse(test::Run(options), "without the shim");
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const long traced = StackUse(test::Run(options), "under the shim");
  options.env["RETAIN_UNWIND"] = "libunwind";
  const long libunwind = StackUse(test::Run(options), "RETAIN_UNWIND=libunwind");
  // glibc's malloc and free alone stay within the fixture's gap.
  EXPECT_EQ(plain, 0);
  // The measure sees the hook (it is not a test that cannot fail)...
  EXPECT_GT(traced, kResolution);
  // ...and the hook stays small.
  EXPECT_LE(traced, kMostBytes);
  EXPECT_LE(libunwind, kMostBytesWithLibunwind);
  RecordProperty("stack_use_cfi", std::to_string(traced));
  RecordProperty("stack_use_libunwind", std::to_string(libunwind));
}

}  // namespace
}  // namespace retain::test::proc
