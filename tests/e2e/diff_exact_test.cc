// End-to-end tests of the two-snapshot diff of one process (exact mode):
// fixture diff_server runs 12 requests under libretain.so and snapshots
// before the first ("iter-00") and after each; retain-diff compares iter-00
// with iter-12 and must find exactly what the three sites kept, by owner,
// in every grouping and every output format (table, JSON read back by
// python3's json module, folded stacks, and pprof read by Go's pprof).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kLeakBytes = kIterations * 256 * kKiB;  // LEAK_KB=256, 12 requests
constexpr int64_t kTotalBytes = kLeakBytes + kCacheBytes + kWarmUpBytes;

class DiffExactTest : public ::testing::Test {
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

  // retain-diff [args] iter-00 iter-12, which must exit 0 with no stderr.
  static std::string Diff(std::vector<std::string> args) {
    args.push_back(server_->Snapshot(0));
    args.push_back(server_->Snapshot(kIterations));
    const RunResult result = RunDiff(args);
    EXPECT_EQ(result.exit_code, 0) << Describe(result);
    EXPECT_EQ(result.stderr_data, "") << Describe(result);
    return result.stdout_data;
  }
  static Json DiffJson(std::vector<std::string> args) {
    args.push_back("--json");
    Json json = ParseJson(Diff(args));
    EXPECT_TRUE(json.ok) << json.error;
    return json;
  }
  static std::string Site(const std::string& function) { return server_->Site(function); }

  static ServerRun* server_;
};
ServerRun* DiffExactTest::server_ = nullptr;

// Proves: the default table (--by site) says exact mode and why, and names
// exactly three owners by function and line with their exact bytes and
// counts (12 leaks of 256 KiB, the 4 cache entries still live, the one
// vocabulary), nothing released, and the total.
TEST_F(DiffExactTest, TableNamesEachSiteWithItsExactBytes) {
  const std::string out = Diff({});
  const Table table = ParseDiffTable(out);
  const v1::Snapshot before = LoadSnapshot(server_->Snapshot(0));
  EXPECT_THAT(table.mode_line,
              StartsWith(absl::StrCat("exact: same process (pid ", before.header().pid(), ",")))
      << out;
  EXPECT_THAT(table.mode_line, HasSubstr("same start time and build")) << out;
  EXPECT_THAT(out, HasSubstr("\"iter-00\"")) << out;
  EXPECT_THAT(out, HasSubstr("\"iter-12\"")) << out;
  ASSERT_EQ(table.rows.size(), 3u) << out;
  EXPECT_EQ(table.rows[0].owner, Site(kLeak)) << out;
  EXPECT_EQ(table.rows[0].retained, "3.0 MiB") << out;
  EXPECT_EQ(table.rows[0].count, 12) << out;
  EXPECT_EQ(table.rows[0].share, "70.6%") << out;
  EXPECT_EQ(table.rows[1].owner, Site(kWarmUp)) << out;
  EXPECT_EQ(table.rows[1].retained, "1.0 MiB") << out;
  EXPECT_EQ(table.rows[1].count, 1) << out;
  EXPECT_EQ(table.rows[2].owner, Site(kCache)) << out;
  EXPECT_EQ(table.rows[2].retained, "256.0 KiB") << out;
  EXPECT_EQ(table.rows[2].count, 4) << out;
  for (const TableRow& row : table.rows) EXPECT_EQ(row.released, "0 B") << out;
  EXPECT_THAT(table.total_line, ::testing::MatchesRegex(" *4\\.2 MiB +4\\.2 MiB +17 +0 B  total"))
      << out;
  // Everything the server keeps was written: resident equals allocated.
  for (const TableRow& row : table.rows) EXPECT_EQ(row.allocated, row.retained) << out;
  EXPECT_EQ(table.more_line, "") << out;
}

// Proves: --json parses with a real JSON parser, carries every field the
// schema (docs/retain-diff.md) documents with its type, and the bytes per
// owner, the totals and the RSS explanation's tracked heap growth are exact.
TEST_F(DiffExactTest, JsonHasEveryDocumentedFieldAndExactBytes) {
  const Json json = DiffJson({});
  ASSERT_TRUE(json.ok);
  const v1::Snapshot before = LoadSnapshot(server_->Snapshot(0));
  EXPECT_EQ(json.Str("schema"), "retain-diff/1");
  EXPECT_EQ(json.Str("mode"), "exact");
  EXPECT_THAT(json.Str("mode_reason"),
              StartsWith(absl::StrCat("same process (pid ", before.header().pid(), ",")));
  EXPECT_EQ(json.Str("group_by"), "site");
  for (const std::string ref : {"before", "after"}) {
    EXPECT_EQ(json.Int(ref + ".pid"), before.header().pid());
    EXPECT_EQ(json.Str(ref + ".exe"), before.header().exe_path());
    EXPECT_EQ(json.Type(ref + ".sequence"), "int");
    EXPECT_EQ(json.Str(ref + ".trigger"), "api");
    EXPECT_EQ(json.Type(ref + ".time_unix_ns"), "int");
    EXPECT_EQ(json.Int(ref + ".sample_interval_bytes"), 0);
  }
  EXPECT_EQ(json.Str("before.label"), "iter-00");
  EXPECT_EQ(json.Str("after.label"), "iter-12");
  EXPECT_EQ(json.Int("after.sequence") - json.Int("before.sequence"), kIterations);
  EXPECT_GE(json.Number("seconds_between"), 0);
  EXPECT_EQ(json.Type("requests_between"), "null") << "the fixture opens no request tags";
  EXPECT_FALSE(json.Bool("estimated"));

  for (const std::string field : {"vm_rss_growth", "anon_swap_growth", "tracked_anon_growth",
                                  "allocator_retained_growth", "untracked_growth"}) {
    EXPECT_EQ(json.Type("rss." + field), "int") << field;
  }
  ASSERT_EQ(json.Size("rss.tracked"), 1u) << "only heap memory changed";
  EXPECT_EQ(json.Str("rss.tracked.0.kind"), "heap");
  EXPECT_EQ(json.Int("rss.tracked.0.live_bytes"), kTotalBytes);
  EXPECT_EQ(json.Int("rss.tracked.0.live_count"), 17);
  EXPECT_EQ(json.Int("rss.tracked_anon_growth"), kTotalBytes);
  EXPECT_EQ(json.Int("rss.untracked_growth"), json.Int("rss.anon_swap_growth") - kTotalBytes -
                                                  json.Int("rss.allocator_retained_growth"));
  ASSERT_THAT(json.Type("rss.explained_share"), ::testing::AnyOf("int", "float", "null"));
  for (const std::string level : {"after_level", "before_level"}) {
    EXPECT_EQ(json.Int("rss." + level + ".allocator_free_trimmed"), 0) << "no trim ran";
  }

  // What malloc holds (tools/lib/allocator_report.h). diff_server is a quiet
  // program: its arenas are listed, and nothing is advised.
  EXPECT_TRUE(json.Bool("allocator.has_mallinfo"));
  for (const std::string field :
       {"free_held", "top_releasable", "mmapped", "arena_count", "arena_free", "thread_arena_free",
        "trimmable_bytes", "large_heap_bytes", "resident_bound", "trims", "trim_returned_bytes",
        "trims_between", "trim_returned_between"}) {
    EXPECT_EQ(json.Type("allocator." + field), "int") << field;
  }
  EXPECT_FALSE(json.Bool("allocator.arenas_truncated"));
  ASSERT_GE(json.Int("allocator.arena_count"), 1);
  EXPECT_EQ(json.Size("allocator.arenas"), static_cast<size_t>(json.Int("allocator.arena_count")));
  EXPECT_EQ(json.Int("allocator.arenas.0.number"), 0);
  for (const std::string field :
       {"free_bytes", "free_chunks", "fast_bytes", "system_bytes", "system_max_bytes",
        "aspace_bytes", "aspace_mprotect_bytes", "subheaps", "trimmable_bytes"}) {
    EXPECT_EQ(json.Type("allocator.arenas.0." + field), "int") << field;
  }
  EXPECT_EQ(json.Int("allocator.trims"), 0);
  EXPECT_EQ(json.Int("allocator.trims_between"), 0);
  EXPECT_EQ(json.Type("allocator.last_trim_unix_ns"), "null");
  EXPECT_EQ(json.Size("allocator.advice"), 0u) << "never without the numbers";

  EXPECT_EQ(json.Int("total.retained_bytes"), kTotalBytes);
  EXPECT_EQ(json.Int("total.retained_count"), 17);
  EXPECT_EQ(json.Int("total.released_bytes"), 0);
  EXPECT_EQ(json.Int("total.released_count"), 0);
  EXPECT_EQ(json.Int("owner_count"), 3);
  ASSERT_EQ(json.Size("rows"), 3u);
  EXPECT_EQ(json.Size("warnings"), 0u);

  const struct {
    const char* function;
    int64_t bytes;
    int64_t count;
  } kExpected[] = {{kLeak, kLeakBytes, 12}, {kWarmUp, kWarmUpBytes, 1}, {kCache, kCacheBytes, 4}};
  for (int i = 0; i < 3; ++i) {
    const std::string row = absl::StrCat("rows.", i);
    SCOPED_TRACE(kExpected[i].function);
    EXPECT_EQ(json.Str(row + ".owner.key"), Site(kExpected[i].function));
    EXPECT_EQ(json.Str(row + ".owner.display"), Site(kExpected[i].function));
    EXPECT_EQ(json.Type(row + ".owner.category"), "null");
    EXPECT_FALSE(json.Bool(row + ".owner.bounded"));
    ASSERT_EQ(json.Size(row + ".owner.chain"), 4u) << "--depth defaults to 4";
    EXPECT_THAT(json.Str(row + ".owner.chain.0"), StartsWith("ServeRequest (diff_server.c:"));
    EXPECT_THAT(json.Str(row + ".owner.chain.1"), StartsWith("main (diff_server.c:"));
    // frames: the whole stack, leaf first: the site, then its chain.
    ASSERT_GE(json.Size(row + ".owner.frames"), 3u);
    EXPECT_EQ(json.Str(row + ".owner.frames.0"), Site(kExpected[i].function));
    EXPECT_EQ(json.Str(row + ".owner.frames.1"), json.Str(row + ".owner.chain.0"));
    EXPECT_EQ(json.Str(row + ".owner.frames.2"), json.Str(row + ".owner.chain.1"));
    EXPECT_EQ(json.Int(row + ".retained_bytes"), kExpected[i].bytes);
    EXPECT_EQ(json.Int(row + ".retained_count"), kExpected[i].count);
    EXPECT_EQ(json.Int(row + ".released_bytes"), 0);
    EXPECT_EQ(json.Int(row + ".released_count"), 0);
    EXPECT_EQ(json.Int(row + ".net_bytes"), kExpected[i].bytes);
  }
}

// Proves: --by function keys rows by the bare function name; --by module
// puts all three sites in the executable's module; --by kind puts them all
// in heap. Bytes exact in each.
TEST_F(DiffExactTest, ByFunctionModuleAndKind) {
  Json json = DiffJson({"--by", "function"});
  EXPECT_EQ(json.Str("group_by"), "function");
  ASSERT_EQ(json.Size("rows"), 3u);
  EXPECT_EQ(json.Str("rows.0.owner.key"), kLeak);
  EXPECT_EQ(json.Int("rows.0.retained_bytes"), kLeakBytes);
  EXPECT_EQ(json.Str("rows.1.owner.key"), kWarmUp);
  EXPECT_EQ(json.Int("rows.1.retained_bytes"), kWarmUpBytes);
  EXPECT_EQ(json.Str("rows.2.owner.key"), kCache);
  EXPECT_EQ(json.Int("rows.2.retained_bytes"), kCacheBytes);
  EXPECT_EQ(json.Size("rows.0.owner.chain"), 0u) << "callers are shown for --by site only";
  const Table function_table = ParseDiffTable(Diff({"--by", "function"}));
  ASSERT_EQ(function_table.rows.size(), 3u);
  EXPECT_EQ(function_table.rows[0].owner, kLeak);
  EXPECT_EQ(function_table.rows[0].retained, "3.0 MiB");

  json = DiffJson({"--by", "module"});
  EXPECT_EQ(json.Str("group_by"), "module");
  ASSERT_EQ(json.Size("rows"), 1u);
  EXPECT_EQ(json.Str("rows.0.owner.key"), "diff_server");
  EXPECT_EQ(json.Int("rows.0.retained_bytes"), kTotalBytes);
  EXPECT_EQ(json.Int("rows.0.retained_count"), 17);

  json = DiffJson({"--by", "kind"});
  EXPECT_EQ(json.Str("group_by"), "kind");
  ASSERT_EQ(json.Size("rows"), 1u);
  EXPECT_EQ(json.Str("rows.0.owner.key"), "heap");
  EXPECT_EQ(json.Int("rows.0.retained_bytes"), kTotalBytes);
  const Table kind_table = ParseDiffTable(Diff({"--by", "kind"}));
  ASSERT_EQ(kind_table.rows.size(), 1u);
  EXPECT_EQ(kind_table.rows[0].owner, "heap");
  EXPECT_EQ(kind_table.rows[0].retained, "4.2 MiB");
  EXPECT_EQ(kind_table.rows[0].share, "100.0%");
}

// A rules file naming the three owners; the cache is bounded by design.
std::string WriteRules(const TempDir& dir) {
  const std::string path = dir.path() + "/rules.textproto";
  std::ofstream out(path);
  out << "# retain-diff rules for tests/fixtures/diff_server.c\n"
         "category { name: \"trie\" description: \"orphaned trie nodes\" "
         "frame: \"^LeakyTrieInsert$\" }\n"
         "category { name: \"prompt-cache\" frame: \"PromptCacheStore\" bounded: true }\n"
         "category { name: \"vocabulary\" frame: \"^LoadVocabulary\" }\n";
  return path;
}

// Proves: --by category with a rules file groups by the category names with
// exact bytes and marks the bounded one; with the default grouping the
// rules label each site, in JSON and in the table.
TEST_F(DiffExactTest, ByCategoryWithRules) {
  TempDir dir;
  const std::string rules = WriteRules(dir);
  Json json = DiffJson({"--by", "category", "--rules", rules});
  EXPECT_EQ(json.Str("group_by"), "category");
  ASSERT_EQ(json.Size("rows"), 3u);
  EXPECT_EQ(json.Str("rows.0.owner.key"), "trie");
  EXPECT_EQ(json.Int("rows.0.retained_bytes"), kLeakBytes);
  EXPECT_FALSE(json.Bool("rows.0.owner.bounded"));
  EXPECT_EQ(json.Str("rows.1.owner.key"), "vocabulary");
  EXPECT_EQ(json.Int("rows.1.retained_bytes"), kWarmUpBytes);
  EXPECT_EQ(json.Str("rows.2.owner.key"), "prompt-cache");
  EXPECT_EQ(json.Int("rows.2.retained_bytes"), kCacheBytes);
  EXPECT_TRUE(json.Bool("rows.2.owner.bounded"));
  EXPECT_EQ(json.Str("rows.2.owner.category"), "prompt-cache");

  json = DiffJson({"--rules", rules});
  ASSERT_EQ(json.Size("rows"), 3u);
  EXPECT_EQ(json.Str("rows.0.owner.key"), Site(kLeak));
  EXPECT_EQ(json.Str("rows.0.owner.category"), "trie");
  EXPECT_EQ(json.Str("rows.1.owner.category"), "vocabulary");
  EXPECT_EQ(json.Str("rows.2.owner.category"), "prompt-cache");
  EXPECT_TRUE(json.Bool("rows.2.owner.bounded"));

  const Table table = ParseDiffTable(Diff({"--rules", rules}));
  ASSERT_EQ(table.rows.size(), 3u);
  EXPECT_EQ(table.rows[0].owner, Site(kLeak) + "  [trie]");
  EXPECT_EQ(table.rows[1].owner, Site(kWarmUp) + "  [vocabulary]");
  EXPECT_EQ(table.rows[2].owner, Site(kCache) + "  [prompt-cache, bounded]");
}

// Proves: a row that groups allocations of several categories (--by module
// holds the leak, the cache and the vocabulary) does not claim the category
// of one of them: a 3 MiB leak must not be shown as a bounded cache.
TEST_F(DiffExactTest, RowSpanningCategoriesClaimsNone) {
  TempDir dir;
  const std::string rules = WriteRules(dir);
  for (const std::string by : {"module", "kind"}) {
    SCOPED_TRACE(by);
    const Json json = DiffJson({"--by", by, "--rules", rules});
    ASSERT_EQ(json.Size("rows"), 1u);
    EXPECT_EQ(json.Type("rows.0.owner.category"), "null");
    EXPECT_FALSE(json.Bool("rows.0.owner.bounded"));
    const std::string out = Diff({"--by", by, "--rules", rules});
    EXPECT_THAT(out, ::testing::Not(HasSubstr("bounded"))) << out;
  }
}

// Proves: --top N keeps the N largest owners (in the table with a line
// saying how many more there are, in JSON with owner_count still counting
// all), totals unchanged; --top 0 shows all.
TEST_F(DiffExactTest, TopLimitsTheRowsNotTheTotals) {
  Json json = DiffJson({"--top", "1"});
  ASSERT_EQ(json.Size("rows"), 1u);
  EXPECT_EQ(json.Str("rows.0.owner.key"), Site(kLeak));
  EXPECT_EQ(json.Int("owner_count"), 3);
  EXPECT_EQ(json.Int("total.retained_bytes"), kTotalBytes);

  Table table = ParseDiffTable(Diff({"--top", "2"}));
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[0].owner, Site(kLeak));
  EXPECT_EQ(table.rows[1].owner, Site(kWarmUp));
  EXPECT_EQ(table.more_line, "  ... 1 more owners (--top)");
  EXPECT_THAT(table.total_line, HasSubstr("4.2 MiB"));

  json = DiffJson({"--top", "0"});
  EXPECT_EQ(json.Size("rows"), 3u);
}

// Proves: --depth N shows exactly N callers under each site, innermost
// first (ServeRequest, then main), in the table and in JSON; frames keep
// the whole stack whatever the depth.
TEST_F(DiffExactTest, DepthLimitsTheCallers) {
  Json json = DiffJson({"--depth", "0"});
  ASSERT_EQ(json.Size("rows"), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(json.Size(absl::StrCat("rows.", i, ".owner.chain")), 0u);
    EXPECT_GE(json.Size(absl::StrCat("rows.", i, ".owner.frames")), 3u);
  }
  Table table = ParseDiffTable(Diff({"--depth", "0"}));
  ASSERT_EQ(table.rows.size(), 3u);
  for (const TableRow& row : table.rows) EXPECT_TRUE(row.chain.empty()) << row.owner;

  json = DiffJson({"--depth", "1"});
  ASSERT_EQ(json.Size("rows"), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(json.Size(absl::StrCat("rows.", i, ".owner.chain")), 1u);
    EXPECT_THAT(json.Str(absl::StrCat("rows.", i, ".owner.chain.0")),
                StartsWith("ServeRequest (diff_server.c:"));
  }

  table = ParseDiffTable(Diff({"--depth", "2"}));
  ASSERT_EQ(table.rows.size(), 3u);
  for (const TableRow& row : table.rows) {
    ASSERT_EQ(row.chain.size(), 2u) << row.owner;
    EXPECT_THAT(row.chain[0], StartsWith("ServeRequest (diff_server.c:"));
    EXPECT_THAT(row.chain[1], StartsWith("main (diff_server.c:"));
  }
}

// Proves: --folded prints one "frames bytes" line per retained stack, frames
// root first (main before ServeRequest before the site) and ending with the
// site function; the lines sum to the JSON's total retained bytes, and each
// site's lines to its exact bytes.
TEST_F(DiffExactTest, FoldedLinesSumToTheTotalAndEndAtTheSite) {
  const std::string out = Diff({"--folded"});
  const std::vector<FoldedLine> folded = ParseFolded(out);
  ASSERT_EQ(folded.size(), 3u) << out;
  std::map<std::string, int64_t> by_site;
  int64_t sum = 0;
  for (const FoldedLine& line : folded) {
    sum += line.bytes;
    ASSERT_GE(line.frames.size(), 3u) << out;
    const std::string& leaf = line.frames.back();
    const std::string function = leaf.substr(0, leaf.find("_("));
    by_site[function] += line.bytes;
    EXPECT_EQ(leaf, absl::StrCat(function, "_(diff_server.c:", server_->site_lines[function], ")"))
        << out;
    EXPECT_THAT(line.frames[line.frames.size() - 2], StartsWith("ServeRequest_(diff_server.c:"))
        << out;
    EXPECT_THAT(line.frames[line.frames.size() - 3], StartsWith("main_(diff_server.c:")) << out;
  }
  EXPECT_EQ(sum, kTotalBytes) << out;
  EXPECT_EQ(sum, DiffJson({}).Int("total.retained_bytes"));
  EXPECT_EQ(by_site[kLeak], kLeakBytes) << out;
  EXPECT_EQ(by_site[kCache], kCacheBytes) << out;
  EXPECT_EQ(by_site[kWarmUp], kWarmUpBytes) << out;
}

// Go's `go` command: from PATH, else where Debian's golang-go puts it.
std::string FindGo() {
  const char* path = std::getenv("PATH");
  std::vector<std::string> dirs = absl::StrSplit(path ? path : "", ':', absl::SkipEmpty());
  dirs.push_back("/usr/lib/go/bin");
  for (const std::string& dir : dirs) {
    const std::string candidate = dir + "/go";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Proves (with an independent reader, Go's pprof, offline as in
// tests/unit/tools/pprof_writer_test.cc): --pprof FILE writes a profile whose
// sample types are retained_space/retained_objects, whose samples sum to the
// total retained bytes and count, and whose leaf functions carry each site's
// exact bytes, the leak function among them. The table still goes to stdout.
TEST_F(DiffExactTest, PprofFileIsReadByGoPprof) {
  const std::string go = FindGo();
  ASSERT_FALSE(go.empty()) << "Go's pprof, the independent reader of this test, is not "
                              "installed: `apt-get install -y golang-go`";
  TempDir home;
  const std::string profile = home.path() + "/retained.pb.gz";
  const Table table = ParseDiffTable(Diff({"--pprof", profile}));
  EXPECT_EQ(table.rows.size(), 3u) << "--pprof also prints the table";

  RunOptions options;
  options.argv = {go, "tool", "pprof", "-raw", "-symbolize=none", profile};
  options.env = {{"HOME", home.path()},
                 {"GOCACHE", home.path() + "/gocache"},
                 {"GOPATH", home.path() + "/gopath"},
                 {"GOFLAGS", "-mod=mod"},
                 {"GOPROXY", "off"},
                 {"GOTOOLCHAIN", "local"},
                 {"PPROF_TMPDIR", home.path()},
                 {"PPROF_BINARY_PATH", home.path() + "/no-binaries"}};
  options.timeout_seconds = 60;
  const RunResult raw = ::retain::test::Run(options);
  ASSERT_EQ(raw.exit_code, 0) << Describe(raw);
  const std::string& text = raw.stdout_data;

  // Samples: "  BYTES  COUNT  RESIDENT: LOC LOC ..." (the resident measure adds
  // its sample type); locations: "  ID: 0xADDR M=N FUNCTION FILE:LINE s=0".
  static const std::regex kSample(R"(^\s*([0-9]+)\s+([0-9]+)\s+([0-9]+):\s*([0-9 ]*)$)");
  static const std::regex kLocation(R"(^\s*([0-9]+): 0x[0-9a-f]+ M=[0-9]+ (\S+).*$)");
  enum { kHeader, kTypes, kSamples, kLocations, kOther } section = kHeader;
  std::string types;
  std::vector<std::pair<std::vector<int64_t>, std::string>> samples;  // values, leaf location
  std::map<std::string, std::string> functions;                       // location id -> function
  std::smatch m;
  for (const std::string& line : Lines(text)) {
    if (line == "Samples:") {
      section = kTypes;
    } else if (line == "Locations") {
      section = kLocations;
    } else if (line == "Mappings") {
      section = kOther;
    } else if (section == kTypes) {
      types = line;
      section = kSamples;
    } else if (section == kSamples && std::regex_match(line, m, kSample)) {
      std::vector<std::string> ids = absl::StrSplit(m[4].str(), ' ', absl::SkipEmpty());
      samples.push_back({{std::stoll(m[1].str()), std::stoll(m[2].str()), std::stoll(m[3].str())},
                         ids.empty() ? "" : ids.front()});
    } else if (section == kLocations && std::regex_match(line, m, kLocation)) {
      functions[m[1].str()] = m[2].str();
    }
  }
  // The default measure is resident: its sample type is the default one.
  EXPECT_EQ(types,
            "retained_space/bytes retained_objects/count retained_resident_space/bytes[dflt]")
      << text;
  ASSERT_EQ(samples.size(), 3u) << text;
  int64_t bytes = 0, count = 0;
  std::map<std::string, int64_t> by_leaf;
  for (const auto& [values, leaf] : samples) {
    bytes += values[0];
    count += values[1];
    by_leaf[functions[leaf]] += values[0];
    EXPECT_EQ(values[2], values[0]) << "the server writes all it keeps: resident = allocated\n"
                                    << text;
  }
  EXPECT_EQ(bytes, kTotalBytes) << text;
  EXPECT_EQ(count, 17) << text;
  EXPECT_EQ(by_leaf[kLeak], kLeakBytes) << text;
  EXPECT_EQ(by_leaf[kCache], kCacheBytes) << text;
  EXPECT_EQ(by_leaf[kWarmUp], kWarmUpBytes) << text;
  EXPECT_THAT(text, HasSubstr("kind:[heap]")) << text;
}

// Proves: --fail-over SIZE exits 1 when the retained bytes exceed SIZE
// (4.25 MiB > 1 MiB), still printing the report, with one stderr line
// saying so; and 0, with nothing on stderr, under a limit it does not reach.
TEST_F(DiffExactTest, FailOverExitCodes) {
  RunResult over =
      RunDiff({"--fail-over", "1MiB", server_->Snapshot(0), server_->Snapshot(kIterations)});
  EXPECT_EQ(over.exit_code, 1) << Describe(over);
  EXPECT_EQ(ParseDiffTable(over.stdout_data).rows.size(), 3u) << Describe(over);
  const std::vector<std::string> lines = Lines(over.stderr_data);
  ASSERT_EQ(lines.size(), 1u) << Describe(over);
  EXPECT_THAT(lines[0], StartsWith("retain-diff: over --fail-over")) << Describe(over);

  over = RunDiff({"--fail-over=4MiB", server_->Snapshot(0), server_->Snapshot(kIterations)});
  EXPECT_EQ(over.exit_code, 1) << Describe(over);

  const RunResult under =
      RunDiff({"--fail-over", "100MiB", server_->Snapshot(0), server_->Snapshot(kIterations)});
  EXPECT_EQ(under.exit_code, 0) << Describe(under);
  EXPECT_EQ(under.stderr_data, "") << Describe(under);
}

// Proves: the --fail-over line names the owner that holds the bytes
// (docs/retain-diff.md: "Each owner over the limit is named on stderr").
TEST_F(DiffExactTest, FailOverNamesTheOwner) {
  const RunResult over =
      RunDiff({"--fail-over", "1MiB", server_->Snapshot(0), server_->Snapshot(kIterations)});
  EXPECT_EQ(over.exit_code, 1) << Describe(over);
  EXPECT_THAT(over.stderr_data, HasSubstr(kLeak)) << Describe(over);
}

}  // namespace
}  // namespace retain::test
