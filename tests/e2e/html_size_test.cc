// The size budget of retain-diff --html (docs/retain-diff.md): a page of a
// live view of 1M allocations (and of the exact diff beside it) and of a
// trend of 1,000 snapshots stays under 8 MiB, and its data is still the
// JSON of --json --top 0, byte for byte. Real runs: bench/diff_workload.cc
// (1,000,000 live allocations, then 50,000 more) and the llama-server
// look-alike answering 1,000 requests with a snapshot after each, as
// bench/trend_bench.sh runs it. The sizes are printed (RecordProperty:
// they land in the test's XML output) for the docs.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/e2e/diff_test_util.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"
#include "tools/lib/html_report.h"

namespace retain::test {
namespace {

constexpr size_t kBudget = 8 << 20;

std::string DataOf(const std::string& page) {
  const std::string start = tool::kDataElementStart;
  const size_t from = page.find(start);
  if (from == std::string::npos) return "";
  const size_t end = page.find("</script>", from + start.size());
  return page.substr(from + start.size(), end - from - start.size());
}

// Runs retain-diff with `args` (which write --json --top 0 to stdout and
// the page to `page_path`) and checks the page against the budget and its
// data against stdout. Returns the page's size.
size_t CheckPage(const std::vector<std::string>& args, const std::string& page_path,
                 const std::string& what) {
  RunResult run = RunDiff(args);
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
  const std::string page = ReadFileOrFail(page_path);
  EXPECT_LT(page.size(), kBudget) << what;
  EXPECT_EQ(DataOf(page), tool::EscapeJsonForHtml(run.stdout_data)) << what;
  std::cout << what << ": page " << page.size() << " bytes (JSON " << run.stdout_data.size()
            << " bytes)\n";
  ::testing::Test::RecordProperty(what, static_cast<int>(page.size()));
  return page.size();
}

TEST(HtmlSizeTest, LiveViewAndDiffOfAMillionAllocations) {
  TempDir dir;
  RunOptions options;
  options.argv = {RETAIN_BENCH_DIFF_WORKLOAD_PATH, "1000000"};
  options.env["RETAIN_DIR"] = dir.path();
  options.env["RETAIN_SIGNAL"] = "none";
  options.preload = true;
  options.timeout_seconds = 300;
  RunResult run = retain::test::Run(options);
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  std::string before, after;
  for (const std::string& file : ListSnapshots(dir.path())) {
    const std::string label = LoadSnapshot(file).header().label();
    if (label == "before") before = file;
    if (label == "after") after = file;
  }
  ASSERT_FALSE(before.empty() || after.empty()) << Describe(run);

  const std::string live_page = dir.path() + "/live.html";
  CheckPage({"--json", "--top", "0", "--html", live_page, after}, live_page,
            "live view of 1,050,000 allocations");
  Json live = ParseJson(DataOf(ReadFileOrFail(live_page)));
  ASSERT_TRUE(live.ok) << live.error;
  EXPECT_GE(live.Int("total.retained_count"), 1050000);
  EXPECT_EQ(live.Int("stacks.nodes.0.count"), live.Int("total.retained_count"));
  EXPECT_EQ(live.Int("stacks.nodes.0.allocated_bytes"), live.Int("total.retained_allocated_bytes"));
  EXPECT_LE(live.Size("stacks.nodes"), 5000u);

  const std::string diff_page = dir.path() + "/diff.html";
  CheckPage({"--json", "--top", "0", "--by", "stack", "--html", diff_page, before, after},
            diff_page, "exact diff by stack, 50,000 allocations retained");
  Json diff = ParseJson(DataOf(ReadFileOrFail(diff_page)));
  ASSERT_TRUE(diff.ok) << diff.error;
  EXPECT_EQ(diff.Str("mode"), "exact");
  EXPECT_GE(diff.Int("total.retained_count"), 50000);
  EXPECT_EQ(diff.Int("stacks.nodes.0.count"), diff.Int("total.retained_count"));
}

TEST(HtmlSizeTest, TrendOfAThousandSnapshots) {
  constexpr int kRequests = 1000;
  TempDir dir;
  RunOptions options;
  options.argv = {RETAIN_SIM_PATH,   "--port", "0",           "--leak-trie",
                  "--trie-node-kib", "4",      "--state-mib", "1",
                  "--cache-mib",     "8"};
  options.env["RETAIN_DIR"] = dir.path();
  options.env["RETAIN_SNAPSHOT_EVERY"] = "1";
  options.preload = true;
  proc::Child server(options);
  ASSERT_TRUE(server.WaitForStdout("listening on 127.0.0.1:", 30000)) << server.Stderr();
  const std::string out = server.Stdout();
  const int port = std::stoi(out.substr(out.find("127.0.0.1:") + 10));
  RunOptions client;
  client.argv = {"python3",     SourceRoot() + "/examples/llm-server-sim/send_requests.py",
                 "--port",      std::to_string(port),
                 "--count",     std::to_string(kRequests),
                 "--id-prefix", "req"};
  client.timeout_seconds = 400;
  RunResult sent = retain::test::Run(client);
  ASSERT_EQ(sent.exit_code, 0) << sent.stdout_data << sent.stderr_data;
  const std::string last = "requests-" + std::to_string(kRequests);
  bool written = false;
  for (int i = 0; i < 200 && !written; ++i) {
    // The last one is written last: look at the newest files first.
    std::vector<std::string> files = ListSnapshots(dir.path());
    for (auto it = files.rbegin(); it != files.rend() && !written; ++it) {
      written = LoadSnapshot(*it).header().label() == last;
    }
    if (!written) usleep(50 * 1000);
  }
  ASSERT_TRUE(written) << last;
  ASSERT_TRUE(server.Signal(SIGTERM));
  ASSERT_EQ(server.Wait(60).exit_code, 0);

  const std::vector<std::string> files = ListSnapshots(dir.path());
  ASSERT_EQ(files.size(), static_cast<size_t>(kRequests + 1)) << "one per request, one at exit";
  const std::string page_path = dir.path() + "/trend.html";
  std::vector<std::string> args = {"--trend", "--json", "--top", "0", "--html", page_path};
  args.insert(args.end(), files.begin(), files.end());
  CheckPage(args, page_path, "trend of 1,001 snapshots");
  Json json = ParseJson(DataOf(ReadFileOrFail(page_path)));
  ASSERT_TRUE(json.ok) << json.error;
  EXPECT_EQ(json.Size("snapshots"), static_cast<size_t>(kRequests + 1));
  EXPECT_EQ(json.Size("request_tags"), static_cast<size_t>(kRequests));
  EXPECT_EQ(json.Int("request_tags.999.end_ordinal"), kRequests);
  EXPECT_EQ(json.Str("request_tags.999.request_id"), "req-1000");
  EXPECT_EQ(json.Size("rows"), static_cast<size_t>(json.Int("owner_count")));
}

}  // namespace
}  // namespace retain::test
