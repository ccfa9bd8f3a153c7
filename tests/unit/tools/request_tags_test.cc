// The requests of a trend ("request_tags", tools/lib/request_tags.h): each
// request once, in end order, at the ordinal it ended at (read from the
// first snapshot showing it ended and that snapshot's requests_closed), with
// the figures of the last snapshot showing it; open ones last; the bound.
// Snapshots built here, with tags as the shim writes them (the real runs
// are in tests/e2e/html_report_test.cc).
#include "tools/lib/request_tags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "retain.pb.h"

namespace retain::tool {
namespace {

struct TagSpec {
  uint32_t id;
  uint64_t end_us;  // 0: open
  uint64_t allocated;
  uint64_t live;
  bool aborted = false;
};

v1::Snapshot WithTags(uint64_t sequence, uint64_t requests_closed,
                      const std::vector<TagSpec>& tags) {
  v1::Snapshot snapshot;
  snapshot.mutable_header()->set_sequence(sequence);
  snapshot.mutable_header()->set_requests_closed(requests_closed);
  for (const TagSpec& spec : tags) {
    v1::Tag* tag = snapshot.add_tags();
    tag->set_id(spec.id);
    tag->set_request_id(absl::StrCat("req-", spec.id));
    tag->set_method("POST");
    tag->set_path("/completion");
    tag->set_start_time_us(spec.end_us == 0 ? 1 : spec.end_us - 1);
    tag->set_end_time_us(spec.end_us);
    tag->set_bytes_allocated(spec.allocated);
    tag->set_live_bytes(spec.live);
    tag->set_aborted(spec.aborted);
  }
  return snapshot;
}

std::vector<uint32_t> Ids(const RequestTags& tags) {
  std::vector<uint32_t> ids;
  for (const RequestTag& tag : tags.tags) ids.push_back(tag.tag_id);
  return ids;
}

// Three snapshots. #1: requests 1 and 2 ended, 3 open (2 closed). #2: 3, 4
// and 5 ended (5 closed; 4 ended after 5, 5 was aborted), 1 still holds
// memory, 2 is gone (released once shown), 6 open. #3: 6 ended (6
// closed), 1 still holds less.
const std::vector<v1::Snapshot> kSeries = {
    WithTags(1, 2, {{1, 10, 1000, 900}, {2, 20, 500, 0}, {3, 0, 100, 100}}),
    WithTags(2, 5,
             {{1, 10, 1000, 400},
              {3, 30, 800, 0},
              {4, 45, 300, 300},
              {5, 40, 200, 0, true},
              {6, 0, 50, 50}}),
    WithTags(3, 6, {{1, 10, 1000, 100}, {6, 50, 700, 0}}),
};

TEST(RequestTagsTest, EachRequestOnceInEndOrderAtItsOrdinal) {
  // Added out of order (as a shell's glob gives them: 3 before 1 and 2).
  RequestTagCollector collector;
  collector.Add(kSeries[2], 0);
  collector.Add(kSeries[0], 1);
  collector.Add(kSeries[1], 2);
  // By sequence: column 1, then 2, then 0.
  const RequestTags tags = collector.Finish({1, 2, 0}, {6, 2, 5});
  EXPECT_FALSE(tags.truncated);
  EXPECT_EQ(Ids(tags), (std::vector<uint32_t>{1, 2, 3, 5, 4, 6}));
  std::vector<int64_t> ordinals;
  for (const RequestTag& tag : tags.tags) ordinals.push_back(tag.end_ordinal);
  EXPECT_EQ(ordinals, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));

  const RequestTag& first = tags.tags[0];
  EXPECT_EQ(first.request_id, "req-1");
  EXPECT_EQ(first.method, "POST");
  EXPECT_EQ(first.path, "/completion");
  EXPECT_EQ(first.allocated_bytes, 1000u);
  EXPECT_EQ(first.live_bytes, 100u) << "as the last snapshot showing it says";
  EXPECT_EQ(first.snapshot, 2u) << "the third snapshot by sequence";
  EXPECT_EQ(tags.tags[1].live_bytes, 0u);
  EXPECT_EQ(tags.tags[1].snapshot, 0u);
  EXPECT_EQ(tags.tags[2].allocated_bytes, 800u) << "request 3's figures once it ended";
  EXPECT_EQ(tags.tags[2].snapshot, 1u);
  EXPECT_TRUE(tags.tags[3].aborted);
  EXPECT_EQ(tags.tags[3].tag_id, 5u);
  EXPECT_FALSE(tags.tags[4].aborted);
  EXPECT_EQ(tags.tags[5].allocated_bytes, 700u);
}

TEST(RequestTagsTest, OpenRequestsComeLastWithoutAnOrdinal) {
  RequestTagCollector collector;
  collector.Add(kSeries[0], 0);
  collector.Add(kSeries[1], 1);
  const RequestTags tags = collector.Finish({0, 1}, {2, 5});
  EXPECT_EQ(Ids(tags), (std::vector<uint32_t>{1, 2, 3, 5, 4, 6}));
  EXPECT_EQ(tags.tags.back().end_ordinal, -1);
  EXPECT_EQ(tags.tags.back().live_bytes, 50u);
  const std::string json = RequestTagsJson(tags);
  EXPECT_NE(json.find("{\"tag_id\":6,\"request_id\":\"req-6\",\"method\":\"POST\",\"path\":"
                      "\"/completion\",\"end_ordinal\":null,\"aborted\":false,"
                      "\"allocated_bytes\":50,\"live_bytes\":50,\"snapshot\":1}],"
                      "\"request_tags_truncated\":false"),
            std::string::npos)
      << json;
}

TEST(RequestTagsTest, RequestsEndedBeforeTheSeriesStartKeepTheirOrdinals) {
  // The series starts at request 40: the first snapshot counts 41 closed.
  RequestTagCollector collector;
  collector.Add(WithTags(7, 41, {{40, 5, 10, 0}, {41, 6, 10, 0}}), 0);
  collector.Add(WithTags(8, 42, {{42, 7, 10, 0}}), 1);
  const RequestTags tags = collector.Finish({0, 1}, {41, 42});
  ASSERT_EQ(tags.tags.size(), 3u);
  EXPECT_EQ(tags.tags[0].end_ordinal, 40);
  EXPECT_EQ(tags.tags[1].end_ordinal, 41);
  EXPECT_EQ(tags.tags[2].end_ordinal, 42);
}

TEST(RequestTagsTest, WithoutRequestCountersOrdinalsAreRanks) {
  // Snapshots of shims that did not count requests (requests_closed 0).
  RequestTagCollector collector;
  for (size_t i = 0; i < kSeries.size(); ++i) {
    v1::Snapshot old = kSeries[i];
    old.mutable_header()->clear_requests_closed();
    collector.Add(old, i);
  }
  const RequestTags tags = collector.Finish({0, 1, 2}, {0, 0, 0});
  EXPECT_EQ(Ids(tags), (std::vector<uint32_t>{1, 2, 3, 5, 4, 6}));
  EXPECT_EQ(tags.tags[4].end_ordinal, 5);
}

TEST(RequestTagsTest, TheNewestAreKeptWithinTheBound) {
  RequestTagCollector collector(3);
  for (size_t i = 0; i < kSeries.size(); ++i) collector.Add(kSeries[i], i);
  const RequestTags tags = collector.Finish({0, 1, 2}, {2, 5, 6});
  EXPECT_TRUE(tags.truncated);
  EXPECT_EQ(Ids(tags), (std::vector<uint32_t>{5, 4, 6}));
  EXPECT_EQ(tags.tags[0].end_ordinal, 4);

  // Memory stays bounded while reading: past 4x the bound the oldest ids go.
  RequestTagCollector small(2);
  std::vector<TagSpec> many;
  for (uint32_t id = 1; id <= 20; ++id) many.push_back({id, 100 + id, 1, 0});
  small.Add(WithTags(1, 20, many), 0);
  const RequestTags kept = small.Finish({0}, {20});
  EXPECT_TRUE(kept.truncated);
  EXPECT_EQ(Ids(kept), (std::vector<uint32_t>{19, 20}));
  EXPECT_EQ(kept.tags[1].end_ordinal, 20);
}

}  // namespace
}  // namespace retain::tool
