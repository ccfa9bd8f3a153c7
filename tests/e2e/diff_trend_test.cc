// End-to-end tests of `retain-diff --trend` on a real series: fixture
// diff_server (LEAK_KB=256) runs 12 requests under libretain.so with a
// snapshot before the first and after each: 13 snapshots and no request
// tags, so the x axis is the snapshot number, 1 (iter-00, before any
// request) to 13 (iter-12), one request between two snapshots. Each of the
// three owners must get its verdict and exact numbers:
//   LeakyTrieInsert     linear, +256 KiB (262144 B) per snapshot = request, fit 1
//   PromptCacheStore    plateau at 256 KiB from snapshot 5 (after request 4)
//   LoadVocabularyOnce  warm-up: one step to 1 MiB at snapshot 2 (request 1)
// in the table and in --json (read back by python3's json module), and
// --fail-over SIZE/request must name the leak.
#include <algorithm>
#include <cstdint>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kLeakStep = 256 * kKiB;

class DiffTrendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerRun(RunServer("diff_server")); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(RunComplete(*server_)) << server_->Describe();
    ASSERT_EQ(server_->leak_kb, 256);
  }

  static RunResult Trend(std::vector<std::string> args, bool reversed = false) {
    args.insert(args.begin(), "--trend");
    std::vector<std::string> series = server_->Series();
    if (reversed) std::reverse(series.begin(), series.end());
    args.insert(args.end(), series.begin(), series.end());
    return RunDiff(args);
  }
  static Json TrendJson(std::vector<std::string> args, bool reversed = false) {
    args.push_back("--json");
    const RunResult result = Trend(args, reversed);
    EXPECT_EQ(result.exit_code, 0) << Describe(result);
    EXPECT_EQ(result.stderr_data, "") << Describe(result);
    Json json = ParseJson(result.stdout_data);
    EXPECT_TRUE(json.ok) << json.error;
    return json;
  }
  static std::string Site(const std::string& function) { return server_->Site(function); }

  static ServerRun* server_;
};
ServerRun* DiffTrendTest::server_ = nullptr;

// One owner line of the trend table.
struct TrendLine {
  std::string verdict, first, last, allocated, detail, owner;
};

// The owner lines of the table, by owner (display) text.
std::map<std::string, TrendLine> ParseTrendTable(const std::string& text) {
  // verdict(9) first(11) last(11) [allocated(11), with the resident measure]
  // "  " detail(padded to 34) owner; the details are those of
  // diff_format.cc's VerdictDetail.
  static const std::regex kLine(
      R"(^(linear|plateau|warm-up|flat|noise) +([0-9.]+ (?:B|KiB|MiB|GiB)) +([0-9.]+ (?:B|KiB|MiB|GiB)))"
      R"((?: +([0-9.]+ (?:B|KiB|MiB|GiB)))?)"
      R"(  ([+-][0-9.]+ (?:B|KiB|MiB|GiB)/\w+ \(fit [0-9.]+\)|at [0-9.]+ (?:B|KiB|MiB|GiB) from \w+ [0-9]+|)"
      R"(one step to [0-9.]+ (?:B|KiB|MiB|GiB) at \w+ [0-9]+|[+-]?[0-9.]+ (?:B|KiB|MiB|GiB) overall))"
      R"( +(\S.*)$)");
  std::map<std::string, TrendLine> lines;
  std::smatch m;
  for (const std::string& line : Lines(text)) {
    if (!std::regex_match(line, m, kLine)) continue;
    lines[m[6].str()] = {m[1].str(), m[2].str(), m[3].str(), m[4].str(), m[5].str(), m[6].str()};
  }
  return lines;
}

// Proves: the table says where the x axis comes from and how many
// snapshots, and gives each owner, named by function and line, its verdict
// and numbers: linear +256.0 KiB per snapshot (one request each) with a
// perfect fit, plateau at 256.0 KiB from snapshot 5, warm-up one step to
// 1.0 MiB at snapshot 2.
TEST_F(DiffTrendTest, TableGivesEachOwnerItsVerdict) {
  const RunResult result = Trend({});
  ASSERT_EQ(result.exit_code, 0) << Describe(result);
  EXPECT_EQ(result.stderr_data, "");
  const std::string& out = result.stdout_data;
  EXPECT_THAT(out, HasSubstr("13 snapshots")) << out;
  EXPECT_THAT(out, HasSubstr("  x axis      snapshot number (no request tags): 1 .. 13\n")) << out;
  const std::map<std::string, TrendLine> lines = ParseTrendTable(out);

  ASSERT_TRUE(lines.count(Site(kLeak))) << out;
  const TrendLine& leak = lines.at(Site(kLeak));
  EXPECT_EQ(leak.verdict, "linear") << out;
  EXPECT_EQ(leak.first, "0 B") << out;
  EXPECT_EQ(leak.last, "3.0 MiB") << out;
  EXPECT_EQ(leak.detail, "+256.0 KiB/snapshot (fit 1.00)") << out;

  ASSERT_TRUE(lines.count(Site(kCache))) << out;
  const TrendLine& cache = lines.at(Site(kCache));
  EXPECT_EQ(cache.verdict, "plateau") << out;
  EXPECT_EQ(cache.last, "256.0 KiB") << out;
  EXPECT_EQ(cache.detail, "at 256.0 KiB from snapshot 5") << out;

  ASSERT_TRUE(lines.count(Site(kWarmUp))) << out;
  const TrendLine& warm_up = lines.at(Site(kWarmUp));
  EXPECT_EQ(warm_up.verdict, "warm-up") << out;
  EXPECT_EQ(warm_up.last, "1.0 MiB") << out;
  EXPECT_EQ(warm_up.detail, "one step to 1.0 MiB at snapshot 2") << out;

  // The leak comes first among owners (largest growth).
  const size_t leak_at = out.find(Site(kLeak));
  EXPECT_LT(leak_at, out.find(Site(kWarmUp))) << out;
  EXPECT_LT(out.find(Site(kWarmUp)), out.find(Site(kCache))) << out;
  // The process lines come before the owners.
  EXPECT_LT(out.find("VmRSS"), leak_at) << out;
  EXPECT_LT(out.find("tracked (host)"), leak_at) << out;
}

// Proves: --json carries every documented trend field and the exact series
// and fit of each owner: bytes_per_request exactly 262144 for the leak,
// level 262144 from snapshot 5 for the cache, level 1048576 at snapshot 2
// for the warm-up, growth exact, live_bytes exact at each of the 13
// snapshots, and x (requests) the snapshot numbers 1..13.
TEST_F(DiffTrendTest, JsonGivesExactSlopesLevelsAndSeries) {
  const Json json = TrendJson({});
  ASSERT_TRUE(json.ok);
  EXPECT_EQ(json.Str("schema"), "retain-trend/1");
  EXPECT_EQ(json.Str("group_by"), "site");
  ASSERT_EQ(json.Size("snapshots"), 13u);
  for (int i = 0; i <= kIterations; ++i) {
    EXPECT_EQ(json.Str(absl::StrCat("snapshots.", i, ".label")), absl::StrFormat("iter-%02d", i));
    EXPECT_EQ(json.Number(absl::StrCat("requests.", i)), i + 1);
  }
  EXPECT_FALSE(json.Bool("requests_from_tags"));
  for (const std::string series : {"rss", "anon_swap", "tracked"}) {
    for (const std::string field :
         {"verdict", "bytes_per_request", "fit", "level", "flat_from_request", "growth"}) {
      EXPECT_TRUE(json.Has(series + "." + field)) << series << "." << field;
    }
    EXPECT_EQ(json.Size(series + ".live_bytes"), 13u) << series;
  }
  // All tracked bytes: the three owners' growth on top of what was live.
  EXPECT_EQ(json.Int("tracked.live_bytes.12") - json.Int("tracked.live_bytes.0"),
            kIterations * kLeakStep + kCacheBytes + kWarmUpBytes);
  EXPECT_EQ(json.Str("tracked.verdict"), "linear");
  EXPECT_EQ(json.Size("warnings"), 0u);
  // Resident bytes by default, the allocated series beside; the server
  // writes all it keeps, so the two agree on its growth.
  EXPECT_EQ(json.Str("measure"), "resident");
  EXPECT_EQ(json.Str("measure_requested"), "resident");
  EXPECT_TRUE(json.Bool("residency_measured"));
  EXPECT_EQ(json.Type("measure_fallback"), "null");
  EXPECT_EQ(json.Size("tracked.allocated_bytes"), 13u);
  EXPECT_EQ(json.Int("tracked.allocated_bytes.12") - json.Int("tracked.allocated_bytes.0"),
            kIterations * kLeakStep + kCacheBytes + kWarmUpBytes);
  EXPECT_EQ(json.Type("rss.allocated_bytes"), "null");
  for (const std::string field :
       {"pid", "exe", "sequence", "label", "trigger", "time_unix_ns", "sample_interval_bytes"}) {
    EXPECT_TRUE(json.Has("snapshots.0." + field)) << field;
  }
  for (size_t i = 0; i < json.Size("rows"); ++i) {
    const std::string owner = absl::StrCat("rows.", i, ".owner.");
    EXPECT_EQ(json.Type(owner + "key"), "str");
    EXPECT_EQ(json.Type(owner + "display"), "str");
    EXPECT_THAT(json.Type(owner + "category"), ::testing::AnyOf("str", "null"));
    EXPECT_EQ(json.Type(owner + "bounded"), "bool");
    EXPECT_EQ(json.Type(owner + "chain"), "array");
    EXPECT_EQ(json.Type(owner + "frames"), "array");
    for (const std::string field :
         {"verdict", "bytes_per_request", "fit", "level", "flat_from_request", "growth"}) {
      EXPECT_TRUE(json.Has(absl::StrCat("rows.", i, ".", field))) << field;
    }
    EXPECT_EQ(json.Size(absl::StrCat("rows.", i, ".live_bytes")), 13u);
  }

  const int leak = json.FindRow("rows", "owner.key", Site(kLeak));
  ASSERT_EQ(leak, 0) << "the leak grows most";
  const std::string l = "rows.0.";
  EXPECT_EQ(json.Str(l + "owner.display"), Site(kLeak));
  EXPECT_EQ(json.Str(l + "verdict"), "linear");
  EXPECT_EQ(json.Type(l + "bytes_per_request"), "int") << "exactly 262144, printed as such";
  EXPECT_EQ(json.Integral(l + "bytes_per_request"), 262144);
  EXPECT_NEAR(json.Number(l + "fit"), 1.0, 1e-9);
  EXPECT_EQ(json.Integral(l + "growth"), 12 * kLeakStep);
  for (int i = 0; i <= kIterations; ++i) {
    EXPECT_EQ(json.Int(absl::StrCat(l, "live_bytes.", i)), i * kLeakStep) << i;
  }

  const int cache = json.FindRow("rows", "owner.key", Site(kCache));
  ASSERT_GE(cache, 0);
  const std::string c = absl::StrCat("rows.", cache, ".");
  EXPECT_EQ(json.Str(c + "verdict"), "plateau");
  EXPECT_EQ(json.Integral(c + "level"), 262144);
  EXPECT_EQ(json.Integral(c + "flat_from_request"), 5);
  EXPECT_EQ(json.Integral(c + "growth"), 262144);
  for (int i = 0; i <= kIterations; ++i) {
    EXPECT_EQ(json.Int(absl::StrCat(c, "live_bytes.", i)), std::min(i, 4) * 64 * kKiB) << i;
  }

  const int warm_up = json.FindRow("rows", "owner.key", Site(kWarmUp));
  ASSERT_GE(warm_up, 0);
  const std::string w = absl::StrCat("rows.", warm_up, ".");
  EXPECT_EQ(json.Str(w + "verdict"), "warm-up");
  EXPECT_EQ(json.Integral(w + "level"), 1048576);
  EXPECT_EQ(json.Integral(w + "flat_from_request"), 2);
  EXPECT_EQ(json.Integral(w + "growth"), 1048576);
  for (int i = 0; i <= kIterations; ++i) {
    EXPECT_EQ(json.Int(absl::StrCat(w, "live_bytes.", i)), i == 0 ? 0 : kWarmUpBytes) << i;
  }

  // Whatever else is live (stdio's buffer, allocated before iter-00) does
  // not move: flat, no growth.
  const size_t rows = json.Size("rows");
  EXPECT_EQ(json.Int("owner_count"), static_cast<int64_t>(rows));
  for (size_t i = 0; i < rows; ++i) {
    if (static_cast<int>(i) == leak || static_cast<int>(i) == cache ||
        static_cast<int>(i) == warm_up) {
      continue;
    }
    const std::string r = absl::StrCat("rows.", i, ".");
    EXPECT_EQ(json.Str(r + "verdict"), "flat") << json.Str(r + "owner.key");
    EXPECT_EQ(json.Number(r + "growth"), 0) << json.Str(r + "owner.key");
  }
}

// Proves: the order of the files on the command line does not matter (the
// series is sorted by sequence), and --by function keys the owners by name
// without lines.
TEST_F(DiffTrendTest, ReversedFilesAndByFunction) {
  const Json json = TrendJson({"--by", "function"}, /*reversed=*/true);
  ASSERT_TRUE(json.ok);
  EXPECT_EQ(json.Str("group_by"), "function");
  EXPECT_EQ(json.Str("snapshots.0.label"), "iter-00");
  EXPECT_EQ(json.Str("snapshots.12.label"), "iter-12");
  EXPECT_EQ(json.Str("rows.0.owner.key"), kLeak);
  EXPECT_EQ(json.Str("rows.0.verdict"), "linear");
  EXPECT_EQ(json.Integral("rows.0.bytes_per_request"), 262144);
  const int cache = json.FindRow("rows", "owner.key", kCache);
  ASSERT_GE(cache, 0);
  EXPECT_EQ(json.Str(absl::StrCat("rows.", cache, ".verdict")), "plateau");
  const int warm_up = json.FindRow("rows", "owner.key", kWarmUp);
  ASSERT_GE(warm_up, 0);
  EXPECT_EQ(json.Str(absl::StrCat("rows.", warm_up, ".verdict")), "warm-up");
}

// Proves: --trend --fail-over SIZE/request exits 1 when a linear owner grows
// faster (256 KiB/request > 100 KiB/request) with exactly one stderr line
// naming it and its slope, still printing the table; 0 and a silent stderr
// under 1 MiB/request. The bounded cache and the warm-up are never named.
// (Without request tags a request is a snapshot interval: the unit the
// line ends with is not checked here.)
TEST_F(DiffTrendTest, FailOverPerRequestNamesTheLeak) {
  const RunResult over = Trend({"--fail-over", "100KiB/request"});
  EXPECT_EQ(over.exit_code, 1) << Describe(over);
  const std::vector<std::string> lines = Lines(over.stderr_data);
  ASSERT_EQ(lines.size(), 1u) << Describe(over);
  EXPECT_THAT(lines[0], StartsWith(absl::StrCat("retain-diff: over --fail-over: ", Site(kLeak),
                                                " grows +256.0 KiB/")))
      << Describe(over);
  EXPECT_THAT(over.stdout_data, HasSubstr("+256.0 KiB/snapshot (fit 1.00)")) << Describe(over);

  const RunResult under = Trend({"--fail-over", "1MiB/request"});
  EXPECT_EQ(under.exit_code, 0) << Describe(under);
  EXPECT_EQ(under.stderr_data, "") << Describe(under);
}

// Proves: --trend --fail-over SIZE (no /request) compares each owner's
// growth over the series and names each owner over it with that growth:
// 200 KiB is exceeded by the leak (3 MiB), the warm-up (1 MiB) and the cache
// (256 KiB); 2 MiB only by the leak.
TEST_F(DiffTrendTest, FailOverGrowthNamesEachOwnerWithItsGrowth) {
  RunResult over = Trend({"--fail-over", "2MiB"});
  EXPECT_EQ(over.exit_code, 1) << Describe(over);
  std::vector<std::string> lines = Lines(over.stderr_data);
  ASSERT_EQ(lines.size(), 1u) << Describe(over);
  EXPECT_THAT(lines[0], StartsWith("retain-diff: over --fail-over: " + Site(kLeak)));

  over = Trend({"--fail-over", "200KiB"});
  EXPECT_EQ(over.exit_code, 1) << Describe(over);
  lines = Lines(over.stderr_data);
  ASSERT_EQ(lines.size(), 3u) << Describe(over);
  EXPECT_THAT(lines[0], StartsWith("retain-diff: over --fail-over: " + Site(kLeak)));
  // The warm-up and the cache stopped growing: the line must give their
  // growth (1.0 MiB, 256.0 KiB), not a per-request slope they do not have.
  EXPECT_THAT(lines[1], StartsWith("retain-diff: over --fail-over: " + Site(kWarmUp)));
  EXPECT_THAT(lines[1], HasSubstr("+1.0 MiB")) << Describe(over);
  EXPECT_THAT(lines[2], StartsWith("retain-diff: over --fail-over: " + Site(kCache)));
  EXPECT_THAT(lines[2], HasSubstr("+256.0 KiB")) << Describe(over);

  const RunResult under = Trend({"--fail-over", "4MiB"});
  EXPECT_EQ(under.exit_code, 0) << Describe(under);
  EXPECT_EQ(under.stderr_data, "") << Describe(under);
}

}  // namespace
}  // namespace retain::test
