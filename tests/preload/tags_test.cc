// The marker API: a program tags its requests, hands a request to another
// thread, and the snapshot attributes every allocation to the right request
// by the right rule; the same program runs unchanged without the shim.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test {
namespace {

RunResult RunFixture(const TempDir& dir, bool preload,
                     std::map<std::string, std::string> env = {}) {
  RunOptions options;
  options.argv = {FixturePath("tags_marker_api")};
  options.env = std::move(env);
  options.env["RETAIN_DIR"] = dir.path();
  options.preload = preload;
  return retain::test::Run(options);
}

TEST(TagsMarkerApiTest, RunsUnchangedWithoutTheShim) {
  TempDir dir;
  RunResult plain = RunFixture(dir, false);
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  // Without the shim every handle is 0 and nothing is written.
  EXPECT_NE(plain.stdout_data.find("request req-1 handle 0\n"), std::string::npos);
  EXPECT_NE(plain.stdout_data.find("kept 10\n"), std::string::npos);
  EXPECT_TRUE(ListSnapshots(dir.path()).empty());
}

TEST(TagsMarkerApiTest, AttributesEachAllocationToItsRequestAndRule) {
  TempDir dir;
  RunResult run = RunFixture(dir, true);
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  EXPECT_NE(run.stdout_data.find("request req-1 handle 1\n"), std::string::npos);
  EXPECT_NE(run.stdout_data.find("request req-4 handle 4\n"), std::string::npos);
  v1::Snapshot snapshot;
  for (const std::string& file : ListSnapshots(dir.path())) {
    v1::Snapshot s = LoadSnapshot(file);
    if (s.header().label() == "tags") snapshot = s;
  }
  ASSERT_EQ(snapshot.header().label(), "tags");

  ASSERT_EQ(snapshot.tags_size(), 4);
  std::map<uint32_t, uint64_t> row_bytes_by_tag;
  for (const tool::Allocation& row : tool::FlattenAllocations(snapshot)) {
    row_bytes_by_tag[row.tag_id] += row.size;
  }
  for (int i = 0; i < 4; ++i) {
    const v1::Tag& tag = snapshot.tags(i);
    EXPECT_EQ(tag.id(), static_cast<uint32_t>(i + 1));
    EXPECT_EQ(tag.request_id(), "req-" + std::to_string(i + 1));
    EXPECT_EQ(tag.source(), v1::TAG_SOURCE_API);
    EXPECT_GT(tag.end_time_us(), 0u) << "closed";
    EXPECT_GE(tag.end_time_us(), tag.start_time_us());
    // 111 (http) + 3000 (worker), plus 700 (loop) for the last, plus what
    // pthread_create allocated for the threads while the request was open
    // (their thread control blocks stay cached: correctly the request's).
    const uint64_t known = 111 + 3000 + (i == 3 ? 700 : 0);
    EXPECT_EQ(tag.live_bytes(), row_bytes_by_tag[tag.id()]) << tag.request_id();
    EXPECT_GE(tag.live_bytes(), known) << tag.request_id();
    EXPECT_LT(tag.live_bytes(), known + 4096) << tag.request_id();
    EXPECT_GE(tag.bytes_allocated(), tag.live_bytes()) << tag.request_id();
  }

  // Every kept block, by size: its tag and rule.
  std::map<uint64_t, std::vector<tool::Allocation>> by_size;
  for (const tool::Allocation& row : tool::FlattenAllocations(snapshot)) {
    if (row.kind == v1::KIND_HEAP) by_size[row.size].push_back(row);
  }
  ASSERT_EQ(by_size[111].size(), 4u);
  ASSERT_EQ(by_size[3000].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(by_size[111][i].attribution, v1::ATTRIBUTION_EXPLICIT);
    EXPECT_EQ(by_size[3000][i].attribution, v1::ATTRIBUTION_EXPLICIT);
  }
  std::set<uint32_t> worker_tags;
  for (const auto& row : by_size[3000]) worker_tags.insert(row.tag_id);
  EXPECT_EQ(worker_tags, (std::set<uint32_t>{1, 2, 3, 4}));
  ASSERT_EQ(by_size[700].size(), 1u);
  EXPECT_EQ(by_size[700][0].tag_id, 4u);
  EXPECT_EQ(by_size[700][0].attribution, v1::ATTRIBUTION_PROCESS_LATEST);
  ASSERT_EQ(by_size[55].size(), 1u);
  EXPECT_EQ(by_size[55][0].tag_id, 0u);
  EXPECT_EQ(by_size[55][0].attribution, v1::ATTRIBUTION_NONE);
}

TEST(TagsMarkerApiTest, SnapshotEveryNthRequest) {
  TempDir dir;
  RunResult run = RunFixture(dir, true, {{"RETAIN_SNAPSHOT_EVERY", "2"}});
  ASSERT_EQ(run.exit_code, 0) << run.stderr_data;
  std::map<std::string, v1::Snapshot> by_label;
  for (const std::string& file : ListSnapshots(dir.path())) {
    v1::Snapshot s = LoadSnapshot(file);
    by_label[s.header().label()] = s;
  }
  ASSERT_TRUE(by_label.count("requests-2"));
  ASSERT_TRUE(by_label.count("requests-4"));
  EXPECT_FALSE(by_label.count("requests-1"));
  EXPECT_FALSE(by_label.count("requests-3"));
  EXPECT_EQ(by_label["requests-2"].header().trigger(), v1::TRIGGER_EVERY_N_REQUESTS);
  // Written when request 2 ended, before request 3 began.
  EXPECT_EQ(by_label["requests-2"].tags_size(), 2);
  EXPECT_EQ(by_label["requests-4"].tags_size(), 4);
}

}  // namespace
}  // namespace retain::test
