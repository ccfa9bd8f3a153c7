// retain-diff --html FILE on real runs: the diff_server fixture under the
// shim (a live view, an exact diff, a trend; two builds of it: an aggregate
// diff) and the llama-server
// look-alike tagged by HTTP sniffing (a trend with request tags, one of them
// aborted). The page is the embedded template with the JSON of
// `--json --top 0` put in byte for byte ('<' written \u003c), whatever else
// is printed (the table, --json with its --top, --folded), which stays as it
// is without --html; a frame or category name holding "</script>" cannot
// end the data's element; "-" and paths that cannot be written are refused
// with one line and exit 2.
#include "tools/lib/html_report.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"
#include "tools/lib/report_assets.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test {
namespace {

using tool::EmbeddedReportAssets;
using tool::EscapeJsonForHtml;
using tool::kDataElementStart;
using tool::RenderHtmlReport;

// The placeholder page's warning, said when the build has no real page.
std::string PlaceholderWarning(const std::string& path) {
  if (!EmbeddedReportAssets().placeholder) return "";
  return absl::StrCat(
      "retain-diff: warning: this retain-diff was built without its report page (tools/report/ "
      "was missing): ",
      path, " holds the data and a placeholder page\n");
}

// The text of the page's data element, as the browser reads it: from the
// element's start tag to the first "</script>" after it.
std::string DataOf(const std::string& page) {
  const size_t start = page.find(kDataElementStart);
  if (start == std::string::npos) {
    ADD_FAILURE() << "no data element in the page";
    return "";
  }
  const size_t from = start + std::string(kDataElementStart).size();
  const size_t end = page.find("</script>", from);
  if (end == std::string::npos) {
    ADD_FAILURE() << "the data element does not end";
    return "";
  }
  return page.substr(from, end - from);
}

class HtmlReportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerRun(RunServer("diff_server"));
    out_ = new TempDir();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete out_;
  }
  void SetUp() override { ASSERT_TRUE(RunComplete(*server_)) << server_->Describe(); }

  static std::vector<std::string> With(std::vector<std::string> flags,
                                       const std::vector<std::string>& snapshots) {
    flags.insert(flags.end(), snapshots.begin(), snapshots.end());
    return flags;
  }

  // Runs retain-diff with `flags` and --html on `snapshots`; checks that
  // the page is the template around `--json --top 0`'s output (run apart,
  // with the same flags less the output's and --top), that stdout is what
  // the same run without --html prints, and returns the page.
  std::string CheckPage(const std::vector<std::string>& flags,
                        const std::vector<std::string>& snapshots, const std::string& name) {
    const std::string page_path = out_->path() + "/" + name;
    RunResult with_page = RunDiff(With(Concat(flags, {"--html", page_path}), snapshots));
    EXPECT_EQ(with_page.exit_code, 0) << Describe(with_page);
    RunResult without = RunDiff(With(flags, snapshots));
    EXPECT_EQ(without.exit_code, 0) << Describe(without);
    EXPECT_EQ(with_page.stdout_data, without.stdout_data) << "--html leaves the output alone";
    EXPECT_EQ(with_page.stderr_data, without.stderr_data + PlaceholderWarning(page_path));

    std::vector<std::string> json_flags;
    for (size_t i = 0; i < flags.size(); ++i) {
      if (flags[i] == "--json" || flags[i] == "--folded") continue;
      if (flags[i] == "--top") {
        ++i;
        continue;
      }
      json_flags.push_back(flags[i]);
    }
    RunResult json = RunDiff(With(Concat(json_flags, {"--json", "--top", "0"}), snapshots));
    EXPECT_EQ(json.exit_code, 0) << Describe(json);
    const std::string page = ReadFileOrFail(page_path);
    EXPECT_EQ(access((page_path + ".tmp").c_str(), F_OK), -1) << "no temporary file is left";
    // Byte for byte: the data is the JSON with '<' escaped, and nothing
    // else of the page differs from the template.
    EXPECT_EQ(DataOf(page), EscapeJsonForHtml(json.stdout_data));
    absl::StatusOr<std::string> expected =
        RenderHtmlReport(json.stdout_data, EmbeddedReportAssets());
    EXPECT_TRUE(expected.ok()) << expected.status();
    EXPECT_TRUE(expected.ok() && page == *expected) << "the page is the template around the data";
    EXPECT_EQ(page.find("<!--RETAIN_"), std::string::npos) << "every marker replaced";
    return page;
  }

  static std::vector<std::string> Concat(std::vector<std::string> a,
                                         const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  static ServerRun* server_;
  static TempDir* out_;
};

ServerRun* HtmlReportTest::server_ = nullptr;
TempDir* HtmlReportTest::out_ = nullptr;

TEST_F(HtmlReportTest, LiveViewPageHoldsTheJsonOfEveryOwner) {
  // The table shows 2 owners; the page has all of them, and the stack tree.
  const std::string page = CheckPage({"--top", "2"}, {server_->Snapshot(12)}, "live.html");
  Json data = ParseJson(DataOf(page));
  ASSERT_TRUE(data.ok) << data.error;
  EXPECT_EQ(data.Str("schema"), "retain-diff/1");
  EXPECT_EQ(data.Str("mode"), "live");
  EXPECT_EQ(data.Size("rows"), static_cast<size_t>(data.Int("owner_count")));
  EXPECT_GT(data.Size("rows"), 2u);
  EXPECT_EQ(data.Str("stacks.nodes.0.name"), "all");
  EXPECT_EQ(data.Int("stacks.nodes.0.bytes"), data.Int("total.retained_bytes"));
  EXPECT_EQ(data.Int("stacks.nodes.0.allocated_bytes"), data.Int("total.retained_allocated_bytes"));
  EXPECT_EQ(data.Str("stacks.nodes.1.name"), "host");
  EXPECT_EQ(data.Int("stacks.node_limit"), 5000);
  EXPECT_EQ(data.Int("stacks.pruned_bytes"), 0);
  // The leak's frame is in the tree, with the leak's bytes: 12 x 256 KiB.
  bool leak = false;
  for (size_t i = 0; i < data.Size("stacks.nodes"); ++i) {
    const std::string node = "stacks.nodes." + std::to_string(i);
    if (absl::StartsWith(data.Str(node + ".name"), std::string(kLeak) + " (")) {
      leak = true;
      EXPECT_EQ(data.Int(node + ".allocated_bytes"), 12 * 256 * kKiB);
      EXPECT_EQ(data.Int(node + ".count"), 12);
    }
  }
  EXPECT_TRUE(leak) << DataOf(page);
}

TEST_F(HtmlReportTest, ExactDiffPageBesideJsonAndFolded) {
  const std::vector<std::string> pair = {server_->Snapshot(0), server_->Snapshot(12)};
  // Beside --json --top 1: stdout keeps its one row, the page has all.
  const std::string page = CheckPage({"--json", "--top", "1"}, pair, "exact.html");
  Json data = ParseJson(DataOf(page));
  ASSERT_TRUE(data.ok) << data.error;
  EXPECT_EQ(data.Str("mode"), "exact");
  EXPECT_EQ(data.Int("stacks.nodes.0.bytes"), data.Int("total.retained_bytes"));
  EXPECT_EQ(data.Int("stacks.nodes.0.count"), data.Int("total.retained_count"));
  // Beside --folded, by function.
  CheckPage({"--folded", "--by", "function"}, pair, "exact-folded.html");
}

TEST_F(HtmlReportTest, AggregateDiffPageOfTwoBuilds) {
  // Two builds of one program: owners compared by function, each owner's
  // growth under its example stack.
  ServerRun a = RunServer("diff_build_a/diff_server");
  ServerRun b = RunServer("diff_build_b/diff_server");
  ASSERT_TRUE(RunComplete(a) && RunComplete(b)) << a.Describe() << b.Describe();
  const std::string page = CheckPage({}, {a.Snapshot(12), b.Snapshot(12)}, "aggregate.html");
  Json data = ParseJson(DataOf(page));
  ASSERT_TRUE(data.ok) << data.error;
  EXPECT_EQ(data.Str("mode"), "aggregate");
  EXPECT_EQ(data.Int("stacks.nodes.0.bytes"), data.Int("total.retained_bytes"));
  EXPECT_EQ(data.Int("stacks.nodes.0.allocated_bytes"), data.Int("total.retained_allocated_bytes"));
}

TEST_F(HtmlReportTest, TrendPageHoldsTheTrendJson) {
  const std::string page = CheckPage({"--trend"}, server_->Series(), "trend.html");
  Json data = ParseJson(DataOf(page));
  ASSERT_TRUE(data.ok) << data.error;
  EXPECT_EQ(data.Str("schema"), "retain-trend/1");
  EXPECT_EQ(data.Size("allocator_free.live_bytes"), static_cast<size_t>(kIterations + 1));
  EXPECT_EQ(data.Size("request_tags"), 0u) << "diff_server tags no request";
  EXPECT_FALSE(data.Bool("request_tags_truncated"));
  // allocator_free is each snapshot's mallinfo2 fordblks.
  const std::vector<std::string> series = server_->Series();
  for (size_t k = 0; k < series.size(); ++k) {
    EXPECT_EQ(data.Int("allocator_free.live_bytes." + std::to_string(k)),
              static_cast<int64_t>(LoadSnapshot(series[k]).memory().malloc_free_held()));
  }
}

// Rules whose category names would end the page's script, or start a
// comment, if they were written as they are.
constexpr char kHostileRules[] = R"(
category { name: "</script><script>window.hostile = 1</script>" frame: "LeakyTrieInsert" }
category { name: "<!-- cache </SCRIPT > -->" frame: "PromptCacheStore" }
)";

TEST_F(HtmlReportTest, NoCategoryOrFrameNameEndsTheDataElement) {
  const std::string rules = out_->path() + "/hostile.textproto";
  ASSERT_TRUE(WriteFile(rules, kHostileRules));
  const std::string page = CheckPage({"--by", "category", "--rules", rules},
                                     {server_->Snapshot(0), server_->Snapshot(12)}, "hostile.html");
  const std::string data = DataOf(page);
  EXPECT_EQ(data.find('<'), std::string::npos) << "no '<' inside the element";
  // The page has exactly the template's script elements: the data's
  // "</script>" strings were not read as tags.
  const std::string plain = *RenderHtmlReport("{}", EmbeddedReportAssets());
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(page, "</script>"), count(plain, "</script>"));
  // And JSON.parse (here python's json) reads the names back as they are.
  Json json = ParseJson(data);
  ASSERT_TRUE(json.ok) << json.error;
  std::vector<std::string> names;
  for (size_t i = 0; i < json.Size("rows"); ++i) {
    names.push_back(json.Str("rows." + std::to_string(i) + ".owner.key"));
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "</script><script>window.hostile = 1</script>"),
            names.end())
      << absl::StrJoin(names, " | ");
  EXPECT_NE(std::find(names.begin(), names.end(), "<!-- cache </SCRIPT > -->"), names.end())
      << absl::StrJoin(names, " | ");
}

TEST_F(HtmlReportTest, StandardOutputAndUnwritablePathsAreRefused) {
  const std::string after = server_->Snapshot(12);
  const std::string missing = out_->path() + "/no/such/dir/report.html";
  const std::string directory = out_->path() + "/a-directory";
  ASSERT_EQ(mkdir(directory.c_str(), 0755), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-",
       "retain-diff: --html -: standard output carries the table, --json or --folded; give "
       "a file\n"},
      {missing,
       "retain-diff: --html: cannot write " + missing + ".tmp: No such file or directory\n"},
      {directory, "retain-diff: --html: cannot rename " + directory + ".tmp to " + directory +
                      ": Is a directory\n"},
      {after, "retain-diff: --html " + after +
                  ": a snapshot's name; the page would replace it (give a .html)\n"},
  };
  for (const auto& [path, message] : cases) {
    for (const std::vector<std::string>& flags :
         {std::vector<std::string>{}, std::vector<std::string>{"--json"},
          std::vector<std::string>{"--trend"}}) {
      std::vector<std::string> args = Concat(flags, {"--html", path});
      if (flags.empty() || flags[0] != "--trend") {
        args.push_back(after);
      } else {
        args = Concat(args, server_->Series());
      }
      RunResult run = RunDiff(args);
      SCOPED_TRACE(absl::StrJoin(args, " "));
      EXPECT_EQ(run.exit_code, 2) << Describe(run);
      EXPECT_EQ(run.stdout_data, "") << "nothing is printed when the page cannot be written";
      // The placeholder's warning may come first: it is said before the
      // page is written.
      EXPECT_TRUE(absl::EndsWith(run.stderr_data, message)) << run.stderr_data;
      EXPECT_LE(std::count(run.stderr_data.begin(), run.stderr_data.end(), '\n'),
                EmbeddedReportAssets().placeholder && path != "-" && path != after ? 2 : 1);
    }
  }
  EXPECT_EQ(access((directory + ".tmp").c_str(), F_OK), -1) << "the temporary file is removed";
  EXPECT_TRUE(LoadSnapshot(after).has_header()) << "the snapshot is untouched";
}

// --- The look-alike server: request tags ---

// Opens a streamed completion as "leaver", reads its first event and
// leaves: the server ends the request aborted.
void LeaveMidStream(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const std::string body = R"({"stream": true, "messages": [{"content": "leave early"}]})";
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: leaver\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string seen;
  char buffer[4096];
  while (seen.find("data: ") == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    ASSERT_GT(n, 0) << seen;
    seen.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
}

TEST(HtmlReportSimTest, TrendPageNamesEachRequestAtItsOrdinalWithItsBytes) {
  constexpr int kRequests = 6;
  TempDir dir;
  RunOptions options;
  options.argv = {std::string(RETAIN_SIM_PATH),
                  "--port",
                  "0",
                  "--leak-trie",
                  "--state-mib",
                  "1",
                  "--cache-mib",
                  "2",
                  "--stream-chunks",
                  "50",
                  "--stream-delay-ms",
                  "40"};
  options.env["RETAIN_DIR"] = dir.path();
  options.env["RETAIN_SNAPSHOT_EVERY"] = "1";
  options.preload = true;
  proc::Child server(options);
  ASSERT_TRUE(server.WaitForStdout("listening on 127.0.0.1:", 30000)) << server.Stderr();
  const std::string out = server.Stdout();
  const int port = std::stoi(out.substr(out.find("127.0.0.1:") + 10));
  LeaveMidStream(port);
  // The server notices at its next write; its snapshot follows.
  for (int i = 0; i < 100 && ListSnapshots(dir.path()).empty(); ++i) usleep(50 * 1000);
  ASSERT_FALSE(ListSnapshots(dir.path()).empty()) << "the leaver's request never ended";
  RunOptions client;
  client.argv = {"python3",     SourceRoot() + "/examples/llm-server-sim/send_requests.py",
                 "--port",      std::to_string(port),
                 "--count",     std::to_string(kRequests),
                 "--id-prefix", "req"};
  RunResult sent = retain::test::Run(client);
  ASSERT_EQ(sent.exit_code, 0) << sent.stdout_data << sent.stderr_data;
  const std::string last_label = "requests-" + std::to_string(kRequests + 1);
  bool written = false;
  for (int i = 0; i < 100 && !written; ++i) {
    for (const std::string& file : ListSnapshots(dir.path())) {
      written |= LoadSnapshot(file).header().label() == last_label;
    }
    if (!written) usleep(50 * 1000);
  }
  ASSERT_TRUE(written) << last_label;
  ASSERT_TRUE(server.Signal(SIGTERM));
  ASSERT_EQ(server.Wait(60).exit_code, 0);

  // In name order, as a shell's glob gives them: sequence 10 before 2.
  const std::vector<std::string> files = ListSnapshots(dir.path());
  ASSERT_GE(files.size(), static_cast<size_t>(kRequests + 1));
  const std::string page_path = dir.path() + "/trend.html";
  std::vector<std::string> args = {"--trend", "--json", "--top", "0", "--html", page_path};
  args.insert(args.end(), files.begin(), files.end());
  RunResult trend = RunDiff(args);
  ASSERT_EQ(trend.exit_code, 0) << Describe(trend);
  const std::string data = DataOf(ReadFileOrFail(page_path));
  EXPECT_EQ(data, EscapeJsonForHtml(trend.stdout_data));
  Json json = ParseJson(data);
  ASSERT_TRUE(json.ok) << json.error;

  // The snapshots as the JSON lists them (by sequence), read back.
  std::map<uint64_t, v1::Snapshot> by_sequence;
  for (const std::string& file : files) {
    v1::Snapshot snapshot = LoadSnapshot(file);
    by_sequence[snapshot.header().sequence()] = snapshot;
  }
  std::vector<const v1::Snapshot*> series;
  for (const auto& [sequence, snapshot] : by_sequence) series.push_back(&snapshot);
  ASSERT_EQ(json.Size("snapshots"), series.size());

  ASSERT_EQ(json.Size("request_tags"), static_cast<size_t>(kRequests + 1)) << data;
  EXPECT_FALSE(json.Bool("request_tags_truncated"));
  for (int i = 0; i <= kRequests; ++i) {
    SCOPED_TRACE(i);
    const std::string tag = "request_tags." + std::to_string(i) + ".";
    const std::string id = i == 0 ? "leaver" : "req-" + std::to_string(i);
    EXPECT_EQ(json.Str(tag + "request_id"), id);
    EXPECT_EQ(json.Int(tag + "end_ordinal"), i + 1) << "the requests ended one after the other";
    EXPECT_EQ(json.Bool(tag + "aborted"), i == 0);
    EXPECT_EQ(json.Str(tag + "method"), "POST");
    EXPECT_EQ(json.Str(tag + "path"), i == 0 ? "/v1/chat/completions" : "/completion");
    // The figures of the last snapshot that shows the request.
    const int64_t shown = json.Int(tag + "snapshot");
    ASSERT_GE(shown, 0);
    ASSERT_LT(shown, static_cast<int64_t>(series.size()));
    const v1::Tag* found = nullptr;
    for (const v1::Tag& t : series[shown]->tags()) {
      if (t.request_id() == id) found = &t;
    }
    ASSERT_NE(found, nullptr) << "snapshot " << shown << " shows " << id;
    EXPECT_EQ(json.Int(tag + "tag_id"), found->id());
    EXPECT_EQ(json.Int(tag + "allocated_bytes"), static_cast<int64_t>(found->bytes_allocated()));
    EXPECT_EQ(json.Int(tag + "live_bytes"), static_cast<int64_t>(found->live_bytes()));
    for (size_t k = shown + 1; k < series.size(); ++k) {
      for (const v1::Tag& t : series[k]->tags()) {
        EXPECT_NE(t.request_id(), id) << "a later snapshot " << k << " shows it too";
      }
    }
    if (i > 0) {
      // Each request saves its state (1 MiB) and leaks trie nodes: both
      // allocated while it was open.
      EXPECT_GT(json.Int(tag + "allocated_bytes"), 1 << 20);
    }
  }
  for (size_t k = 0; k < series.size(); ++k) {
    EXPECT_EQ(json.Int("allocator_free.live_bytes." + std::to_string(k)),
              static_cast<int64_t>(series[k]->memory().malloc_free_held()));
  }
}

}  // namespace
}  // namespace retain::test
