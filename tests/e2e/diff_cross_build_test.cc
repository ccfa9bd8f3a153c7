// End-to-end tests of the cross-build diff (aggregate mode): one source,
// tests/fixtures/diff_server.c, built twice with different code layouts
//   A: diff_build_a/diff_server, -O1, LEAK_KB=64
//   B: diff_build_b/diff_server, -O2 plus unrelated functions placed before
//      the sites (EXTRA_PADDING), LEAK_KB=128
// each run once under libretain.so. Diffing A's last snapshot against B's
// must say aggregate mode and why, line owners up by function name (keys
// carry no address and no line), and show growth only for the leak: 12
// requests * 64 KiB more; the cache and the warm-up are equal in both.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kExtraLeak = kIterations * (128 - 64) * kKiB;  // 786432
// Bytes an unrelated owner may differ by between two runs (stdio buffers).
constexpr int64_t kNoise = 4 * kKiB;

class DiffCrossBuildTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    a_ = new ServerRun(RunServer("diff_build_a/diff_server"));
    b_ = new ServerRun(RunServer("diff_build_b/diff_server"));
  }
  static void TearDownTestSuite() {
    delete a_;
    delete b_;
    a_ = b_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(RunComplete(*a_)) << a_->Describe();
    ASSERT_TRUE(RunComplete(*b_)) << b_->Describe();
    ASSERT_EQ(a_->leak_kb, 64);
    ASSERT_EQ(b_->leak_kb, 128);
  }

  // retain-diff [args] FIRST SECOND, which must exit 0 with no stderr.
  static std::string Diff(const ServerRun& first, const ServerRun& second,
                          std::vector<std::string> args) {
    args.push_back(first.Snapshot(kIterations));
    args.push_back(second.Snapshot(kIterations));
    const RunResult result = RunDiff(args);
    EXPECT_EQ(result.exit_code, 0) << Describe(result);
    EXPECT_EQ(result.stderr_data, "") << Describe(result);
    return result.stdout_data;
  }
  static Json DiffJson(const ServerRun& first, const ServerRun& second,
                       std::vector<std::string> args) {
    args.push_back("--json");
    Json json = ParseJson(Diff(first, second, args));
    EXPECT_TRUE(json.ok) << json.error;
    return json;
  }

  static ServerRun* a_;
  static ServerRun* b_;
};
ServerRun* DiffCrossBuildTest::a_ = nullptr;
ServerRun* DiffCrossBuildTest::b_ = nullptr;

// Proves the premise: the two builds are different builds of one program
// (same executable name, different build-ids) and their code is laid out
// differently (the leak site sits at another offset), so any key with an
// address in it would not line up.
TEST_F(DiffCrossBuildTest, TheBuildsDifferInLayout) {
  const v1::Snapshot a = LoadSnapshot(a_->Snapshot(kIterations));
  const v1::Snapshot b = LoadSnapshot(b_->Snapshot(kIterations));
  EXPECT_NE(a.header().exe_build_id(), b.header().exe_build_id());
  EXPECT_FALSE(a.header().exe_build_id().empty());
  EXPECT_NE(a.header().exe_path(), b.header().exe_path());
  EXPECT_TRUE(absl::EndsWith(a.header().exe_path(), "/diff_server"));
  EXPECT_TRUE(absl::EndsWith(b.header().exe_path(), "/diff_server"));
  EXPECT_NE(a_->site_offset, b_->site_offset) << "the padding did not move the leak site";
}

// Proves: the JSON says aggregate mode and why (different processes), the
// owner keys are bare function names (no address, no line) while the
// display keeps the line; only the leak grew, by exactly 12 * 64 KiB; the
// cache and the warm-up are unchanged; nothing else moved by more than
// stdio's noise; the total is the leak's growth within that noise.
TEST_F(DiffCrossBuildTest, AggregateLinesOwnersUpByFunction) {
  const Json json = DiffJson(*a_, *b_, {});
  ASSERT_TRUE(json.ok);
  const v1::Snapshot a = LoadSnapshot(a_->Snapshot(kIterations));
  const v1::Snapshot b = LoadSnapshot(b_->Snapshot(kIterations));
  EXPECT_EQ(json.Str("mode"), "aggregate");
  EXPECT_THAT(json.Str("mode_reason"),
              StartsWith(absl::StrCat("different processes (pid ", a.header().pid(), " and ",
                                      b.header().pid(), ")")));
  EXPECT_EQ(json.Int("before.pid"), a.header().pid());
  EXPECT_EQ(json.Int("after.pid"), b.header().pid());
  EXPECT_EQ(json.Str("before.label"), "iter-12");

  const size_t rows = json.Size("rows");
  for (size_t i = 0; i < rows; ++i) {
    const std::string key = json.Str(absl::StrCat("rows.", i, ".owner.key"));
    EXPECT_THAT(key, ::testing::Not(HasSubstr("0x"))) << "an address in a cross-build key";
    EXPECT_THAT(key, ::testing::Not(HasSubstr(".c:"))) << "a line in a cross-build key";
  }
  const int leak = json.FindRow("rows", "owner.key", kLeak);
  ASSERT_EQ(leak, 0) << "the leak, keyed by its function, grew most";
  EXPECT_EQ(json.Str("rows.0.owner.display"), b_->Site(kLeak));
  EXPECT_EQ(json.Int("rows.0.retained_bytes"), kExtraLeak);
  EXPECT_EQ(json.Int("rows.0.released_bytes"), 0);
  EXPECT_EQ(json.Int("rows.0.net_bytes"), kExtraLeak);
  for (const char* function : {kCache, kWarmUp}) {
    const int row = json.FindRow("rows", "owner.key", function);
    ASSERT_GE(row, 0) << function << " is missing: the builds did not line up";
    EXPECT_EQ(json.Int(absl::StrCat("rows.", row, ".retained_bytes")), 0) << function;
    EXPECT_EQ(json.Int(absl::StrCat("rows.", row, ".released_bytes")), 0) << function;
  }
  int64_t others = 0;
  for (size_t i = 1; i < rows; ++i) {
    const std::string row = absl::StrCat("rows.", i, ".");
    EXPECT_LE(json.Int(row + "retained_bytes"), kNoise) << json.Str(row + "owner.key");
    EXPECT_LE(json.Int(row + "released_bytes"), kNoise) << json.Str(row + "owner.key");
    others += json.Int(row + "retained_bytes");
  }
  EXPECT_EQ(json.Int("total.retained_bytes"), kExtraLeak + others);
  EXPECT_LE(others, kNoise);
}

// Proves: the table's header says aggregate and why; the leak's row shows
// 768.0 KiB retained, the two other sites 0 B.
TEST_F(DiffCrossBuildTest, TableSaysAggregateAndWhy) {
  const std::string out = Diff(*a_, *b_, {});
  const Table table = ParseDiffTable(out);
  EXPECT_THAT(table.mode_line, StartsWith("aggregate: different processes (pid ")) << out;
  ASSERT_GE(table.rows.size(), 3u) << out;
  EXPECT_EQ(table.rows[0].owner, b_->Site(kLeak)) << out;
  EXPECT_EQ(table.rows[0].retained, "768.0 KiB") << out;
  for (const TableRow& row : table.rows) {
    if (row.owner == b_->Site(kCache) || row.owner == b_->Site(kWarmUp)) {
      EXPECT_EQ(row.retained, "0 B") << out;
      EXPECT_EQ(row.released, "0 B") << out;
    }
  }
}

// Proves: in the other direction (B before A) the leak's extra bytes are
// released, not retained; --by function lines up the same way; --folded in
// aggregate mode sums to the total retained.
TEST_F(DiffCrossBuildTest, OtherDirectionFunctionsAndFolded) {
  Json json = DiffJson(*b_, *a_, {"--by", "function"});
  ASSERT_TRUE(json.ok);
  EXPECT_EQ(json.Str("mode"), "aggregate");
  const int leak = json.FindRow("rows", "owner.key", kLeak);
  ASSERT_GE(leak, 0);
  EXPECT_EQ(json.Int(absl::StrCat("rows.", leak, ".retained_bytes")), 0);
  EXPECT_EQ(json.Int(absl::StrCat("rows.", leak, ".released_bytes")), kExtraLeak);
  EXPECT_EQ(json.Int(absl::StrCat("rows.", leak, ".net_bytes")), -kExtraLeak);
  EXPECT_GE(json.Int("total.released_bytes"), kExtraLeak);

  json = DiffJson(*a_, *b_, {"--by", "function"});
  EXPECT_EQ(json.Str("rows.0.owner.key"), kLeak);
  EXPECT_EQ(json.Int("rows.0.retained_bytes"), kExtraLeak);

  const std::vector<FoldedLine> folded = ParseFolded(Diff(*a_, *b_, {"--folded"}));
  int64_t sum = 0;
  int64_t leak_bytes = 0;
  for (const FoldedLine& line : folded) {
    sum += line.bytes;
    if (!line.frames.empty() && absl::StartsWith(line.frames.back(), kLeak)) {
      leak_bytes += line.bytes;
    }
  }
  EXPECT_EQ(sum, DiffJson(*a_, *b_, {}).Int("total.retained_bytes"));
  EXPECT_EQ(leak_bytes, kExtraLeak);
}

}  // namespace
}  // namespace retain::test
