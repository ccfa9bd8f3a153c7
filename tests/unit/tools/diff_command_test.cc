// Tests for tools/lib/diff_command: retain-diff's decisions without running
// it (which flags go together, the --fail-over threshold and its verdicts,
// the duplicate-snapshot check, the help), and cli's FlagsHelp over flags
// defined here. The end-to-end tests (tests/e2e) run the binary.
#include "tools/lib/diff_command.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tools/lib/cli.h"

ABSL_FLAG(int, test_count, 3, "how many things to count");
ABSL_FLAG(bool, test_loud, false, "say it loudly");
ABSL_FLAG(std::string, test_empty_default, "",
          "a flag whose help is long enough that it has to be wrapped onto a second line, since "
          "one line holds at most one hundred columns");

namespace retain::tool {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

DiffCommand Command(std::vector<std::string> paths) {
  DiffCommand command;
  command.paths = std::move(paths);
  return command;
}

std::string PlanError(const DiffCommand& command) {
  absl::StatusOr<DiffPlan> plan = PlanDiffCommand(command);
  EXPECT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(plan.status().message());
}

TEST(ParseFailOverTest, SizeOrSizePerRequest) {
  absl::StatusOr<FailOver> none = ParseFailOver("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->set);

  absl::StatusOr<FailOver> total = ParseFailOver("10MiB");
  ASSERT_TRUE(total.ok());
  EXPECT_TRUE(total->set);
  EXPECT_FALSE(total->per_request);
  EXPECT_EQ(total->bytes, 10u << 20);

  absl::StatusOr<FailOver> per_request = ParseFailOver("64KiB/request");
  ASSERT_TRUE(per_request.ok());
  EXPECT_TRUE(per_request->per_request);
  EXPECT_EQ(per_request->bytes, 64u << 10);

  absl::StatusOr<FailOver> bad = ParseFailOver("lots");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), StartsWith("--fail-over: 'lots' is not a size"));
}

TEST(PlanDiffCommandTest, PicksTheOutputAndGrouping) {
  DiffCommand command = Command({"a.pb", "b.pb"});
  command.by = "function";
  command.json = true;
  absl::StatusOr<DiffPlan> plan = PlanDiffCommand(command);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->by, GroupBy::kFunction);
  EXPECT_EQ(plan->output, DiffOutput::kJson);
  EXPECT_FALSE(plan->fail_over.set);

  command.json = false;
  command.folded = true;
  EXPECT_EQ(PlanDiffCommand(command)->output, DiffOutput::kFolded);
  command.folded = false;
  EXPECT_EQ(PlanDiffCommand(command)->output, DiffOutput::kTable);
}

TEST(PlanDiffCommandTest, CountsSnapshotsPerMode) {
  EXPECT_THAT(PlanError(Command({})), StartsWith("give one or two snapshots (usage: retain-diff"));
  EXPECT_THAT(PlanError(Command({"a", "b", "c"})), StartsWith("give one or two snapshots"));
  DiffCommand trend = Command({"a", "b"});
  trend.trend = true;
  EXPECT_THAT(PlanError(trend), StartsWith("--trend needs 3 or more snapshots (usage:"));
  trend.paths.push_back("c");
  EXPECT_TRUE(PlanDiffCommand(trend).ok());
}

TEST(PlanDiffCommandTest, RefusesFlagsThatDoNotGoTogether) {
  DiffCommand command = Command({"a.pb"});
  command.by = "colour";
  EXPECT_EQ(PlanError(command),
            "--by: 'colour' is not site, stack, function, module, kind, tag or category");

  command = Command({"a.pb"});
  command.json = command.folded = true;
  EXPECT_EQ(PlanError(command), "--json and --folded are alternatives; pick one");

  command = Command({"a", "b", "c"});
  command.trend = true;
  command.pprof = "out.pb.gz";
  EXPECT_EQ(PlanError(command), "--folded and --pprof describe one diff, not a --trend");

  command = Command({"a.pb"});
  command.depth = -1;
  EXPECT_EQ(PlanError(command), "--top and --depth must be 0 or more");

  command = Command({"a.pb"});
  command.fail_over = "1MiB/request";
  EXPECT_EQ(PlanError(command), "--fail-over SIZE/request needs --trend");

  command = Command({"-"});
  command.rules = "-";
  EXPECT_THAT(PlanError(command), StartsWith("standard input (-) can be read once"));

  command = Command({"a.pb"});
  command.html = "-";
  EXPECT_EQ(PlanError(command),
            "--html -: standard output carries the table, --json or --folded; give a file");
  command.html = "before.pb";  // `--html before.pb after.pb`: the page's name forgotten
  EXPECT_EQ(PlanError(command),
            "--html before.pb: a snapshot's name; the page would replace it (give a .html)");
  command.html = "report.html";
  command.folded = true;
  EXPECT_TRUE(PlanDiffCommand(command).ok()) << "--html goes with any output";
  command = Command({"a", "b", "c"});
  command.trend = true;
  command.html = "trend.html";
  EXPECT_TRUE(PlanDiffCommand(command).ok());
}

TEST(CheckDistinctSnapshotsTest, NamesTheFilesThatHoldOneSnapshot) {
  v1::Snapshot a, b, c;
  a.mutable_header()->set_pid(7);
  a.mutable_header()->set_sequence(1);
  b.mutable_header()->set_pid(7);
  b.mutable_header()->set_sequence(2);
  c = a;
  EXPECT_TRUE(CheckDistinctSnapshots({&a, &b}, {"a.pb", "b.pb"}).ok());
  absl::Status twice = CheckDistinctSnapshots({&a, &b, &c}, {"a.pb", "b.pb", "copy.pb"});
  EXPECT_EQ(twice.message(), "--trend got the same snapshot twice (a.pb and copy.pb)");
  // Another process may use the same sequence numbers.
  c.mutable_header()->set_pid(8);
  EXPECT_TRUE(CheckDistinctSnapshots({&a, &b, &c}, {"a.pb", "b.pb", "other.pb"}).ok());
}

DiffRow RowOf(const std::string& display, int64_t retained) {
  DiffRow row;
  row.owner.key = row.owner.display = display;
  row.retained_bytes = retained;
  return row;
}

TEST(DiffOverFailOverTest, NamesTheTotalAndTheLargestOwners) {
  DiffResult diff;
  diff.rows = {RowOf("f()", 6 << 20), RowOf("g()", 4 << 20), RowOf("h()", 1 << 20),
               RowOf("i()", 1 << 20), RowOf("j()", 0)};
  diff.total_retained_bytes = 12 << 20;
  FailOver fail_over;
  EXPECT_EQ(DiffOverFailOver(diff, fail_over), "");  // not set
  fail_over.set = true;
  fail_over.bytes = 12 << 20;
  EXPECT_EQ(DiffOverFailOver(diff, fail_over), "");  // at the limit is not over
  fail_over.bytes = 10 << 20;
  EXPECT_EQ(DiffOverFailOver(diff, fail_over),
            "over --fail-over 10.0 MiB: +12.0 MiB retained, most by f() (+6.0 MiB), g() "
            "(+4.0 MiB), h() (+1.0 MiB)");
  diff.rows = {RowOf("f()", 12 << 20), RowOf("g()", 0)};
  EXPECT_EQ(DiffOverFailOver(diff, fail_over),
            "over --fail-over 10.0 MiB: +12.0 MiB retained, most by f() (+12.0 MiB)");
}

TrendRow TrendRowOf(const std::string& display, Verdict verdict, double slope, double growth) {
  TrendRow row;
  row.owner.key = row.owner.display = display;
  row.fit.verdict = verdict;
  row.fit.slope = slope;
  row.fit.growth = growth;
  return row;
}

TEST(TrendOverFailOverTest, PerRequestCountsOnlyLinearOwners) {
  TrendResult trend;
  trend.requests_from_tags = true;
  trend.rows = {TrendRowOf("leak()", Verdict::kLinear, 8192, 800000),
                TrendRowOf("cache()", Verdict::kPlateau, 9000, 900000),
                TrendRowOf("small()", Verdict::kLinear, 100, 10000)};
  FailOver fail_over;
  EXPECT_THAT(TrendOverFailOver(trend, fail_over), IsEmpty());
  fail_over.set = true;
  fail_over.per_request = true;
  fail_over.bytes = 4096;
  EXPECT_THAT(TrendOverFailOver(trend, fail_over),
              ElementsAre("over --fail-over: leak() grows +8.0 KiB/request"));
  trend.requests_from_tags = false;
  EXPECT_THAT(TrendOverFailOver(trend, fail_over),
              ElementsAre("over --fail-over: leak() grows +8.0 KiB/snapshot"));
}

TEST(TrendOverFailOverTest, TotalCountsEveryOwnersGrowth) {
  TrendResult trend;
  trend.rows = {TrendRowOf("leak()", Verdict::kLinear, 8192, 800000),
                TrendRowOf("cache()", Verdict::kPlateau, 0, 900000),
                TrendRowOf("small()", Verdict::kFlat, 0, 1000)};
  FailOver fail_over;
  fail_over.set = true;
  fail_over.bytes = 500000;
  EXPECT_THAT(TrendOverFailOver(trend, fail_over),
              ElementsAre("over --fail-over: leak() grows +781.2 KiB in all",
                          "over --fail-over: cache() grows +878.9 KiB in all"));
}

TEST(DiffHelpTest, UsageExamplesFlagsAndExitStatus) {
  const std::string help = DiffHelp("  --flag  what it does\n");
  EXPECT_THAT(help, StartsWith(std::string(kDiffUsage) + "\n"));
  EXPECT_THAT(help, HasSubstr("retain-diff before.pb after.pb"));
  EXPECT_THAT(help, HasSubstr("Flags:\n  --flag  what it does\n"));
  EXPECT_THAT(help,
              HasSubstr("Exit status: 0 done, 1 over --fail-over, 2 usage or input error.\n"));
}

TEST(JoinDashValuesTest, JoinsDashValuesOfFlagsThatTakeOne) {
  std::vector<std::string> args = {"tool", "--test_count",           "-",  "--test_loud",  "-",
                                   "-x",   "--test_empty_default=-", "--", "--test_count", "-"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  std::vector<std::string> storage;
  std::vector<char*> joined = JoinDashValues(static_cast<int>(argv.size()), argv.data(), &storage);
  ASSERT_FALSE(joined.empty());
  EXPECT_EQ(joined.back(), nullptr);
  joined.pop_back();
  std::vector<std::string> seen(joined.begin(), joined.end());
  // A bool takes no value: its "-" stays a positional (standard input).
  EXPECT_THAT(seen, ElementsAre("tool", "--test_count=-", "--test_loud", "-", "-x",
                                "--test_empty_default=-", "--", "--test_count", "-"));
}

TEST(FlagsHelpTest, ListsTheFlagsOfOneFileByNameWithDefaultsAndWrappedHelp) {
  EXPECT_EQ(FlagsHelp(__FILE__),
            "  --test-count=3            how many things to count\n"
            "  --test-empty-default=...  a flag whose help is long enough that it has to be "
            "wrapped onto a second\n"
            "                            line, since one line holds at most one hundred columns\n"
            "  --test-loud               say it loudly\n");
  EXPECT_EQ(FlagsHelp("no/such/file.cc"), "");
}

}  // namespace
}  // namespace retain::tool
