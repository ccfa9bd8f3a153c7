// The llama-server look-alike (examples/llm-server-sim), unmodified, under
// the shim on loopback: HTTP sniffing tags each request, RETAIN_SNAPSHOT_EVERY=1
// writes a snapshot after each, and `retain-diff --trend` tells the bounded
// prompt cache (plateau at entries x state size) from the leaking trie
// (linear, its exact bytes per request).
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <string>
#include <vector>

#include "tests/e2e/diff_test_util.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test {
namespace {

constexpr int kRequests = 16;
constexpr int64_t kStateBytes = 4 << 20;   // --state-mib 4
constexpr int64_t kCacheBytes = 16 << 20;  // --cache-mib 16: 4 entries
constexpr int64_t kTrieNodeBytes = 256 << 10;
constexpr int64_t kTrieBytesPerRequest = 16 * kTrieNodeBytes;  // 256-char prompts, 16 chars a node

struct SimRun {
  std::vector<std::string> snapshots;  // requests-1 .. requests-N, in order
  std::vector<v1::Snapshot> loaded;
};

SimRun RunSim(const TempDir& dir, const std::vector<std::string>& flags, int requests,
              std::map<std::string, std::string> env = {}) {
  SimRun run;
  RunOptions options;
  options.argv = {std::string(RETAIN_SIM_PATH), "--port", "0"};
  for (const std::string& flag : flags) options.argv.push_back(flag);
  options.env = std::move(env);
  options.env["RETAIN_DIR"] = dir.path();
  if (!options.env.count("RETAIN_SNAPSHOT_EVERY")) options.env["RETAIN_SNAPSHOT_EVERY"] = "1";
  options.preload = true;
  proc::Child server(options);
  EXPECT_GT(server.pid(), 0);
  if (!server.WaitForStdout("listening on 127.0.0.1:", 30000)) {
    ADD_FAILURE() << "the server did not start: " << server.Stderr();
    return run;
  }
  const std::string out = server.Stdout();
  const std::string port = out.substr(out.find("127.0.0.1:") + 10, 5);
  RunOptions client;
  client.argv = {"python3",     SourceRoot() + "/examples/llm-server-sim/send_requests.py",
                 "--port",      std::to_string(std::stoi(port)),
                 "--count",     std::to_string(requests),
                 "--id-prefix", "req"};
  RunResult sent = retain::test::Run(client);
  EXPECT_EQ(sent.exit_code, 0) << sent.stdout_data << sent.stderr_data;
  EXPECT_TRUE(server.Signal(SIGTERM));
  RunResult stopped = server.Wait(60);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.stderr_data;
  std::map<int, std::string> by_request;
  for (const std::string& file : ListSnapshots(dir.path())) {
    if (file.find("llm-server-sim.") == std::string::npos) continue;
    v1::Snapshot snapshot = LoadSnapshot(file);
    const std::string& label = snapshot.header().label();
    if (label.rfind("requests-", 0) == 0) by_request[std::stoi(label.substr(9))] = file;
  }
  for (const auto& [n, file] : by_request) {
    run.snapshots.push_back(file);
    run.loaded.push_back(LoadSnapshot(file));
  }
  return run;
}

TEST(SimServerTest, PromptCachePlateausAndTheTrieLeaksPerRequest) {
  TempDir dir;
  SimRun run = RunSim(dir, {"--leak-trie", "--state-mib", "4", "--cache-mib", "16"}, kRequests);
  ASSERT_EQ(run.snapshots.size(), static_cast<size_t>(kRequests));

  // Every request was seen on the wire: one HTTP tag each, in order.
  const v1::Snapshot& last = run.loaded.back();
  ASSERT_EQ(last.tags_size(), kRequests);
  for (int i = 0; i < kRequests; ++i) {
    const v1::Tag& tag = last.tags(i);
    EXPECT_EQ(tag.request_id(), "req-" + std::to_string(i + 1));
    EXPECT_EQ(tag.method(), "POST");
    EXPECT_EQ(tag.path(), "/completion");
    EXPECT_EQ(tag.source(), v1::TAG_SOURCE_HTTP);
    EXPECT_GT(tag.end_time_us(), 0u) << "the response ended it";
  }

  std::vector<std::string> args = {"--trend", "--json", "--top", "0"};
  args.insert(args.end(), run.snapshots.begin(), run.snapshots.end());
  RunResult trend = RunDiff(args);
  ASSERT_EQ(trend.exit_code, 0) << Describe(trend);
  Json json = ParseJson(trend.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  EXPECT_TRUE(json.Bool("requests_from_tags"));

  int cache = -1, trie = -1;
  for (size_t i = 0; i < json.Size("rows"); ++i) {
    const std::string prefix = "rows." + std::to_string(i) + ".";
    const std::string key = json.Str(prefix + "owner.key");
    const int64_t last_bytes =
        json.Integral(prefix + "live_bytes." + std::to_string(kRequests - 1));
    if (key.find("PromptCache::Save") != std::string::npos && last_bytes >= kStateBytes) {
      cache = static_cast<int>(i);
    }
    if (key.find("PrefixTrie::Insert") != std::string::npos && last_bytes >= kTrieBytesPerRequest) {
      trie = static_cast<int>(i);
    }
  }
  ASSERT_GE(cache, 0) << trend.stdout_data;
  ASSERT_GE(trie, 0) << trend.stdout_data;
  const std::string c = "rows." + std::to_string(cache) + ".";
  EXPECT_EQ(json.Str(c + "verdict"), "plateau");
  // At the budget: 4 entries of 4 MiB (the cache keeps whole entries).
  EXPECT_EQ(json.Integral(c + "level"), kCacheBytes);
  // Request n saves request n-1's state: full after request 5.
  EXPECT_EQ(json.Integral(c + "flat_from_request"), 5);
  const std::string t = "rows." + std::to_string(trie) + ".";
  EXPECT_EQ(json.Str(t + "verdict"), "linear");
  EXPECT_EQ(json.Integral(t + "bytes_per_request"), kTrieBytesPerRequest);
  EXPECT_EQ(json.Integral("trims.count"), 0) << "nobody asked for a trim";

  // A leak and a bounded cache, but nothing malloc keeps that a glibc
  // setting would return: no advice (tools/lib/allocator_report.h).
  RunResult diff = RunDiff({"--json", run.snapshots.front(), run.snapshots.back()});
  ASSERT_EQ(diff.exit_code, 0) << Describe(diff);
  Json diff_json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(diff_json.ok) << diff_json.error;
  EXPECT_TRUE(diff_json.Bool("allocator.has_mallinfo"));
  EXPECT_GE(diff_json.Integral("allocator.arena_count"), 1);
  EXPECT_EQ(diff_json.Size("allocator.advice"), 0u) << diff.stdout_data;

  // Each retained trie node carries the request that created it, found by
  // the process-latest rule (the inference thread has no tag of its own).
  std::map<uint32_t, int> nodes_by_tag;
  for (const tool::Allocation& row : tool::FlattenAllocations(last)) {
    if (row.size != static_cast<uint64_t>(kTrieNodeBytes)) continue;
    ++nodes_by_tag[row.tag_id];
    EXPECT_EQ(row.attribution, v1::ATTRIBUTION_PROCESS_LATEST);
  }
  ASSERT_EQ(nodes_by_tag.size(), static_cast<size_t>(kRequests));
  for (uint32_t id = 1; id <= kRequests; ++id) EXPECT_EQ(nodes_by_tag[id], 16) << "request " << id;
}

TEST(SimServerTest, WithoutACacheThereIsNoPromptCacheOwner) {
  TempDir dir;
  SimRun run = RunSim(dir, {"--cache-mib", "0", "--state-mib", "4"}, 4);
  ASSERT_EQ(run.snapshots.size(), 4u);
  RunResult live = RunDiff({"--by", "function", "--top", "0", run.snapshots.back()});
  ASSERT_EQ(live.exit_code, 0) << Describe(live);
  EXPECT_EQ(live.stdout_data.find("PromptCache"), std::string::npos) << live.stdout_data;
  EXPECT_EQ(live.stdout_data.find("PrefixTrie"), std::string::npos) << live.stdout_data;
}

// RETAIN_HTTP_PATHS: only listed paths open tags (and so count as requests).
TEST(SimServerTest, OnlyListedPathsOpenTags) {
  TempDir dir;
  SimRun run = RunSim(dir, {"--cache-mib", "0"}, 3, {{"RETAIN_HTTP_PATHS", "/health,/metrics"}});
  EXPECT_TRUE(run.snapshots.empty()) << "no /completion request may count";
  std::vector<std::string> files = ListSnapshots(dir.path());
  ASSERT_FALSE(files.empty());
  v1::Snapshot exit_snapshot = LoadSnapshot(files.back());
  EXPECT_EQ(exit_snapshot.tags_size(), 0);
}

// RETAIN_HTTP=off: the shim leaves sockets alone: no tags, no per-request
// snapshots, and the server answers as usual.
TEST(SimServerTest, HttpOffTagsNothing) {
  TempDir dir;
  SimRun run = RunSim(dir, {"--cache-mib", "0"}, 3, {{"RETAIN_HTTP", "off"}});
  EXPECT_TRUE(run.snapshots.empty());
  std::vector<std::string> files = ListSnapshots(dir.path());
  ASSERT_FALSE(files.empty());
  v1::Snapshot exit_snapshot = LoadSnapshot(files.back());
  EXPECT_EQ(exit_snapshot.tags_size(), 0);
  for (const tool::Allocation& row : tool::FlattenAllocations(exit_snapshot)) {
    EXPECT_EQ(row.attribution, v1::ATTRIBUTION_NONE);
  }
}

}  // namespace
}  // namespace retain::test
