// Configuration under the shim (fixture acct_many): a bad value is reported
// in one stderr line and replaced by the default without changing the
// program; good values are silent and honoured; a small RETAIN_MAX_MEMORY
// degrades recording but keeps every total exact.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <ostream>
#include <string>

#include "tests/preload/acct_util.h"

namespace retain::test::acct {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kDefaultArenaCap = uint64_t{2} << 30;  // 2 GiB

// A bad value for one variable, and how the snapshot shows the default won.
struct BadValue {
  const char* variable;
  const char* value;
};

void PrintTo(const BadValue& bad, std::ostream* os) { *os << bad.variable << "=" << bad.value; }

class AcctBadConfig : public ::testing::TestWithParam<BadValue> {};

// Proves: each bad value prints exactly one stderr line, starting with
// "retain: " and naming the variable; the program's stdout and exit code are
// those of a run without the shim; the shim still works and uses the
// default for that variable.
TEST_P(AcctBadConfig, OneLineOnStderrAndTheDefaultIsUsed) {
  const BadValue bad = GetParam();
  TempDir dir;
  const std::vector<std::string> args = {"1000", "7"};
  const RunResult plain = RunFixture("acct_many", args, dir.path(), /*preload=*/false);
  ASSERT_EQ(plain.exit_code, 7) << Describe(plain);
  ASSERT_EQ(plain.stderr_data, "");

  const RunResult run =
      RunFixture("acct_many", args, dir.path(), true, {{bad.variable, bad.value}});
  ASSERT_EQ(run.exit_code, 7) << Describe(run);
  EXPECT_EQ(run.stdout_data, plain.stdout_data);
  const std::string& err = run.stderr_data;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_TRUE(!err.empty() && err.back() == '\n') << err;
  EXPECT_EQ(err.rfind("retain: ", 0), 0u) << err;
  EXPECT_NE(err.find(bad.variable), std::string::npos) << err;

  const v1::Snapshot many = SnapshotLabeled(dir.path(), "many");
  const std::string variable = bad.variable;
  if (variable == "RETAIN_DEPTH") {
    EXPECT_EQ(many.header().max_depth(), 48u);
  }
  if (variable == "RETAIN_UNWIND") {
    EXPECT_EQ(many.header().unwind_method(), v1::UNWIND_METHOD_CFI);
  }
  if (variable == "RETAIN_MAX_MEMORY") {
    EXPECT_EQ(many.health().arena_cap_bytes(), kDefaultArenaCap);
  }
  // Every variable: recording itself is unaffected.
  EXPECT_EQ(TotalsFor(many, v1::KIND_HEAP).allocated_count() -
                TotalsFor(SnapshotLabeled(dir.path(), "baseline"), v1::KIND_HEAP).allocated_count(),
            1000u);
}

INSTANTIATE_TEST_SUITE_P(Variables, AcctBadConfig,
                         ::testing::Values(BadValue{"RETAIN_DEPTH", "abc"},
                                           BadValue{"RETAIN_UNWIND", "magic"},
                                           BadValue{"RETAIN_SIGNAL", "NOPE"},
                                           BadValue{"RETAIN_MAX_MEMORY", "lots"},
                                           BadValue{"RETAIN_MIN_FREE", "plenty"},
                                           BadValue{"RETAIN_CHILD_EXIT_MIN", "soon"}),
                         [](const ::testing::TestParamInfo<BadValue>& info) {
                           return std::string(info.param.variable);
                         });

// Proves (the control for the test above): good values print nothing and
// are honoured.
TEST(AcctConfig, GoodValuesAreSilentAndHonoured) {
  TempDir dir;
  const RunResult run = RunFixture("acct_many", {"1000", "0"}, dir.path(), true,
                                   {{"RETAIN_DEPTH", "16"},
                                    {"RETAIN_UNWIND", "fp"},
                                    {"RETAIN_SIGNAL", "USR1"},
                                    {"RETAIN_MAX_MEMORY", "64MiB"}});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.stderr_data, "");
  const v1::Snapshot many = SnapshotLabeled(dir.path(), "many");
  EXPECT_EQ(many.header().max_depth(), 16u);
  EXPECT_EQ(many.header().unwind_method(), v1::UNWIND_METHOD_FRAME_POINTER);
  EXPECT_EQ(many.health().arena_cap_bytes(), 64 * kMiB);
}

// Proves: with the smallest cap, RETAIN_MAX_MEMORY=8MiB, and 400,000 live
// allocations the shim degrades (says so, counts dropped records and bytes,
// stays under its cap) but still records something, allocated_* counts every
// one of the 400,000 allocations, each of which is either a row or a dropped
// record, and live_* still count every live block: the rows, plus the dropped
// blocks by their usable size (proto: ShimHealth.degraded); the program's
// output and exit code are those of a run without the shim.
TEST(AcctConfig, ArenaCapDegradesButTotalsStayExact) {
  constexpr uint64_t kCount = 400'000;
  constexpr uint64_t kSize = 32;
  void* probe = malloc(kSize);
  const uint64_t usable = malloc_usable_size(probe);  // the same glibc as the fixture's
  free(probe);
  TempDir dir;
  const std::vector<std::string> args = {std::to_string(kCount), "0"};
  const RunResult plain = RunFixture("acct_many", args, dir.path(), /*preload=*/false);
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  const RunResult run =
      RunFixture("acct_many", args, dir.path(), true, {{"RETAIN_MAX_MEMORY", "8MiB"}});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_EQ(run.stdout_data, plain.stdout_data);
  EXPECT_EQ(run.stderr_data, plain.stderr_data);

  const v1::Snapshot baseline = SnapshotLabeled(dir.path(), "baseline");
  const v1::Snapshot many = SnapshotLabeled(dir.path(), "many");
  const v1::ShimHealth& health = many.health();
  EXPECT_EQ(health.arena_cap_bytes(), 8 * kMiB);
  EXPECT_LE(health.arena_bytes(), 8 * kMiB);
  EXPECT_TRUE(health.degraded());
  EXPECT_FALSE(baseline.health().degraded());
  const uint64_t dropped = health.dropped_records() - baseline.health().dropped_records();
  const uint64_t dropped_bytes = health.dropped_bytes() - baseline.health().dropped_bytes();
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(dropped_bytes, dropped * kSize);
  EXPECT_EQ(health.dropped_live_count(), dropped);
  EXPECT_EQ(health.dropped_live_bytes(), dropped * usable);

  // Every allocation is counted, and is either kept as a row or dropped.
  const v1::KindTotals before = TotalsFor(baseline, v1::KIND_HEAP);
  const v1::KindTotals after = TotalsFor(many, v1::KIND_HEAP);
  EXPECT_EQ(after.allocated_count() - before.allocated_count(), kCount);
  EXPECT_EQ(after.allocated_bytes() - before.allocated_bytes(), kCount * kSize);
  EXPECT_EQ(after.freed_count(), before.freed_count());
  const Sum kept = SumOf(RowsBornAfter(many, baseline, v1::KIND_HEAP));
  EXPECT_GT(kept.count, 100'000u) << "the smallest cap must still record";
  EXPECT_LT(kept.count, kCount);
  EXPECT_EQ(kept.count + dropped, kCount);
  EXPECT_EQ(kept.bytes + dropped_bytes, kCount * kSize);
  // The live totals hold every live block, rows or not.
  EXPECT_EQ(after.live_count(), LiveCount(many, v1::KIND_HEAP) + dropped);
  EXPECT_EQ(after.live_bytes(), LiveBytes(many, v1::KIND_HEAP) + dropped * usable);
  EXPECT_EQ(after.live_count() - before.live_count(), kCount);
}

}  // namespace
}  // namespace retain::test::acct
