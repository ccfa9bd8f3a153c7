// errno: the shim never changes errno. proc_errno makes each allocation and
// mapping call with errno preset to 4242 and prints what errno was after:
// successful calls must leave 4242, failing calls must set exactly what
// the real call sets. The whole output must be identical with the shim.
#include <cerrno>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

constexpr char kSentinel[] = "errno=4242";

// Steps that succeed: they must print "ok errno=4242" in both runs.
const std::vector<std::string> kSucceeding = {
    "first-malloc", "malloc-small", "free-small",     "malloc-large",  "free-large",
    "calloc",       "realloc-grow", "realloc-shrink", "realloc-null",  "reallocarray",
    "free",         "free-null",    "posix_memalign", "aligned_alloc", "memalign",
    "valloc",       "pvalloc",      "malloc-zero",    "mmap-anon",     "munmap-head",
    "mremap-grow",  "munmap-rest",  "mmap-file",      "munmap-file",   "retain_snapshot"};

// Steps that fail, with the errno glibc and the kernel give them.
const std::vector<std::pair<std::string, int>> kFailing = {
    {"malloc-max", ENOMEM},       {"calloc-overflow", ENOMEM},
    {"realloc-max", ENOMEM},      {"reallocarray-overflow", ENOMEM},
    {"mmap-zero-length", EINVAL}, {"mmap-bad-fd", EBADF},
    {"mmap-huge", ENOMEM},        {"mmap-bad-offset", EINVAL},
    {"munmap-unaligned", EINVAL}, {"mremap-bad", EFAULT}};

void ExpectErrnoReport(const std::string& output, const std::string& who) {
  for (const std::string& step : kSucceeding) {
    EXPECT_EQ(LineStartingWith(output, step + " "), step + " ok " + kSentinel) << who;
  }
  for (const auto& [step, error] : kFailing) {
    EXPECT_EQ(LineStartingWith(output, step + " "), step + " fail errno=" + std::to_string(error))
        << who;
  }
  // posix_memalign reports by return value and leaves errno alone.
  EXPECT_EQ(LineStartingWith(output, "posix_memalign-bad "),
            std::string("posix_memalign-bad fail ") + kSentinel)
      << who;
  EXPECT_EQ(LineStartingWith(output, "posix_memalign-bad returned"),
            "posix_memalign-bad returned " + std::to_string(EINVAL))
      << who;
}

TEST(ProcErrno, SameErrnoWithAndWithoutShim) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_errno")};
  const RunResult plain = test::Run(options);
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const RunResult traced = test::Run(options);

  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  ASSERT_EQ(traced.exit_code, 0) << traced.stderr_data;
  // The fixture's own expectations hold without the shim, then with it.
  ExpectErrnoReport(plain.stdout_data, "without the shim");
  ExpectErrnoReport(traced.stdout_data, "under the shim");
  // Everything else the fixture printed (aligned_alloc and memalign with
  // impossible sizes) matches too.
  EXPECT_EQ(plain.stdout_data, traced.stdout_data);
  EXPECT_TRUE(RetainLines(traced.stderr_data).empty()) << traced.stderr_data;

  // The shim was really there: the retain_snapshot step wrote a snapshot
  // (sequence 1) before the exit snapshot (sequence 2).
  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 2u);
  EXPECT_EQ(snapshots[0].header().label(), "errno");
  EXPECT_EQ(snapshots[0].header().trigger(), v1::TRIGGER_API);
  EXPECT_EQ(snapshots[1].header().trigger(), v1::TRIGGER_EXIT);
}

}  // namespace
}  // namespace retain::test::proc
