// retain-diff on real degraded snapshots: acct_many holds 400,000 live
// allocations under RETAIN_MAX_MEMORY=8MiB (the smallest cap), so its shim runs out of memory
// and drops records (tests/preload/acct_config_test.cc proves the shim side).
// In every mode (live, diff, trend; table and JSON) retain-diff must say so
// first, with the dropped count and bytes, and must not present an RSS
// explanation share ("explained 0.0%") computed from incomplete rows. Before,
// it said nothing.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/support/test_support.h"
#include "tools/lib/dump_format.h"

namespace retain::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class DiffDegradedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    RunOptions options;
    options.argv = {FixturePath("acct_many"), "400000", "0"};
    options.env["RETAIN_DIR"] = dir_->path();
    options.env["RETAIN_MAX_MEMORY"] = "8MiB";
    options.preload = true;
    options.timeout_seconds = 120;
    run_ = new RunResult(::retain::test::Run(options));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete run_;
  }
  void SetUp() override {
    ASSERT_EQ(run_->exit_code, 0) << Describe(*run_);
    for (const std::string& path : ListSnapshots(dir_->path())) {
      const v1::Snapshot snapshot = LoadSnapshot(path);
      if (snapshot.header().label() == "baseline") baseline_ = path;
      if (snapshot.header().label() == "many") many_ = path;
      if (snapshot.header().trigger() == v1::TRIGGER_EXIT) exit_ = path;
    }
    ASSERT_FALSE(baseline_.empty() || many_.empty() || exit_.empty()) << Describe(*run_);
    // The precondition, so this test never passes on snapshots that are not
    // degraded: if the shim stops degrading here, pick a smaller cap.
    ASSERT_FALSE(LoadSnapshot(baseline_).health().degraded());
    ASSERT_TRUE(LoadSnapshot(many_).health().degraded())
        << "RETAIN_MAX_MEMORY=8MiB with 400000 live allocations no longer degrades the shim";
    ASSERT_GT(LoadSnapshot(many_).health().dropped_records(), 0u);
  }

  // What retain-diff must say about `path`'s shim, from its health block.
  static std::string Consequence(const std::string& path) {
    const v1::ShimHealth health = LoadSnapshot(path).health();
    return absl::StrCat(
        " reached its memory cap (RETAIN_MAX_MEMORY 8.0 MiB) and dropped ",
        health.dropped_records(), " allocation records (", tool::HumanBytes(health.dropped_bytes()),
        "): rows by owner miss those allocations; the heap totals still count them, ",
        health.dropped_live_count(), " still live (", tool::HumanBytes(health.dropped_live_bytes()),
        " usable). Rerun with a larger RETAIN_MAX_MEMORY");
  }

  std::string baseline_, many_, exit_;
  static TempDir* dir_;
  static RunResult* run_;
};
TempDir* DiffDegradedTest::dir_ = nullptr;
RunResult* DiffDegradedTest::run_ = nullptr;

TEST_F(DiffDegradedTest, LiveTableWarnsFirstAndShowsNoExplainedShare) {
  const RunResult result = RunDiff({many_});
  ASSERT_EQ(result.exit_code, 0) << Describe(result);
  EXPECT_EQ(result.stderr_data, "");  // the table itself carries the warning
  const std::string warning =
      absl::StrCat("  WARNING     ", many_, " is degraded: its shim", Consequence(many_), "\n");
  const size_t first_line = result.stdout_data.find('\n');
  ASSERT_NE(first_line, std::string::npos);
  EXPECT_EQ(result.stdout_data.substr(first_line + 1, warning.size()), warning)
      << result.stdout_data;
  EXPECT_THAT(result.stdout_data,
              HasSubstr("\n  explained   not computed: the shim dropped records (see WARNING "
                        "above)\n"));
  EXPECT_THAT(result.stdout_data, Not(HasSubstr("% of the RssAnon+VmSwap")));
}

TEST_F(DiffDegradedTest, ExactDiffJsonCarriesTheWarningAndNoShare) {
  const RunResult result = RunDiff({"--json", baseline_, many_});
  ASSERT_EQ(result.exit_code, 0) << Describe(result);
  const std::string warning = absl::StrCat(many_, " is degraded: its shim", Consequence(many_));
  // JSON goes to programs: the person running them hears it on stderr.
  EXPECT_EQ(result.stderr_data, absl::StrCat("retain-diff: warning: ", warning, "\n"));
  const Json json = ParseJson(result.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  EXPECT_EQ(json.Str("mode"), "exact");
  EXPECT_EQ(json.Type("degraded"), "bool");
  EXPECT_EQ(json.nodes.at("degraded").text, "true");
  EXPECT_EQ(json.Type("rss.explained_share"), "null");
  EXPECT_EQ(json.Str("warnings.0"), warning);
  EXPECT_EQ(json.nodes.at("before.degraded").text, "false");
  EXPECT_EQ(json.nodes.at("after.degraded").text, "true");
  const v1::ShimHealth health = LoadSnapshot(many_).health();
  EXPECT_EQ(json.Int("after.dropped_records"), static_cast<int64_t>(health.dropped_records()));
  EXPECT_EQ(json.Int("after.dropped_bytes"), static_cast<int64_t>(health.dropped_bytes()));
}

TEST_F(DiffDegradedTest, TrendNamesHowManySnapshotsAreDegraded) {
  const RunResult result = RunDiff({"--trend", baseline_, many_, exit_});
  ASSERT_EQ(result.exit_code, 0) << Describe(result);
  EXPECT_THAT(result.stdout_data,
              HasSubstr(absl::StrCat("\n  WARNING     2 of 3 snapshots are degraded (first ", many_,
                                     ", last ", exit_, "): by the last, the shim",
                                     Consequence(exit_), "\n")));
  const RunResult json = RunDiff({"--trend", "--json", baseline_, many_, exit_});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  EXPECT_THAT(json.stderr_data, StartsWith("retain-diff: warning: 2 of 3 snapshots are degraded"));
  const Json parsed = ParseJson(json.stdout_data);
  ASSERT_TRUE(parsed.ok) << parsed.error;
  EXPECT_EQ(parsed.nodes.at("degraded").text, "true");
  EXPECT_EQ(parsed.nodes.at("snapshots.0.degraded").text, "false");
  EXPECT_EQ(parsed.nodes.at("snapshots.2.degraded").text, "true");
}

// The control: the same program's snapshot from before it degraded reads
// without a warning and with its explained share.
TEST_F(DiffDegradedTest, SnapshotThatIsNotDegradedHasNoWarning) {
  const RunResult result = RunDiff({baseline_});
  ASSERT_EQ(result.exit_code, 0) << Describe(result);
  EXPECT_EQ(result.stderr_data, "");
  EXPECT_THAT(result.stdout_data, Not(HasSubstr("WARNING")));
  EXPECT_THAT(result.stdout_data, HasSubstr("% of the RssAnon+VmSwap is tracked allocations"));
}

}  // namespace
}  // namespace retain::test
