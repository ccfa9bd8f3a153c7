// TrendBuilder: a long series, added one snapshot at a time and freed right
// after, gives the same trend as ComputeTrend over the whole series in
// memory, in any order; 1,000 snapshots with --rules stay well inside the
// issue's budget (30 s) because each distinct stack is resolved once.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "retain.pb.h"
#include "rules.pb.h"
#include "tools/lib/diff_format.h"
#include "tools/lib/owner.h"
#include "tools/lib/symbolizer.h"
#include "tools/lib/trend.h"

namespace retain::tool {
namespace {

constexpr int kStacksPerOwner = 10;
constexpr uint64_t kLeakBytes = 4096;       // per request, per leak stack
constexpr uint64_t kEntryBytes = 64 << 10;  // one cache entry
constexpr int kCacheEntries = 20;

// Stacks at 0xc0... (the cache), 0xd0... (the leak), 0xe0... (the rest);
// no modules, so their frames read "0xc0010" and the rules match on that.
uint64_t Frame(int owner, int k) {
  return 0xc0000 + 0x10000 * static_cast<uint64_t>(owner) + 16 * k;
}

// The process after `request` requests: the leak keeps kLeakBytes per
// request on each of its stacks, the cache holds up to kCacheEntries
// entries, the rest is constant.
std::unique_ptr<v1::Snapshot> Make(int request) {
  auto s = std::make_unique<v1::Snapshot>();
  v1::Header* h = s->mutable_header();
  h->set_pid(42);
  h->set_sequence(static_cast<uint64_t>(request) + 1);
  h->set_requests_opened(static_cast<uint64_t>(request));
  h->set_requests_closed(static_cast<uint64_t>(request));
  s->mutable_health();
  uint32_t id = 1;
  for (int owner = 0; owner < 3; ++owner) {
    for (int k = 0; k < kStacksPerOwner; ++k) {
      v1::Stack* stack = s->add_stacks();
      stack->set_id(id++);
      stack->add_frames(Frame(owner, k));
      stack->add_frames(0x400000 + static_cast<uint64_t>(k));
    }
  }
  v1::AllocationBlock* block = s->add_allocations();
  uint64_t address = 0x10000000, previous = 0;
  auto add = [&](uint32_t stack, uint64_t size) {
    block->add_address_delta(block->address_delta_size() == 0 ? address : address - previous);
    previous = address;
    address += size + 64;
    block->add_size(size);
    block->add_kind(v1::KIND_HEAP);
    block->add_stack_id(stack);
    block->add_birth_sequence(1);
    block->add_birth_time_us(1);
    block->add_thread_id(1);
  };
  const int entries = std::min(request, kCacheEntries);
  for (int k = 0; k < kStacksPerOwner; ++k) {
    for (int e = 0; e < entries; ++e) add(1 + k, kEntryBytes);                   // cache
    for (int r = 0; r < request; ++r) add(1 + kStacksPerOwner + k, kLeakBytes);  // leak
    add(1 + 2 * kStacksPerOwner + k, 1000);                                      // the rest
  }
  v1::KindTotals* totals = s->add_totals();
  totals->set_kind(v1::KIND_HEAP);
  return s;
}

v1::Rules Rules() {
  v1::Rules rules;
  v1::Category* cache = rules.add_category();
  cache->set_name("cache");
  cache->add_frame("^0xc0");
  cache->set_bounded(true);
  v1::Category* leak = rules.add_category();
  leak->set_name("leak");
  leak->add_frame("^0xd0");
  return rules;
}

struct Resolver {
  explicit Resolver(const v1::Rules* rules) {
    OwnerOptions options;
    options.by = GroupBy::kCategory;
    options.rules = rules;
    owners = *OwnerResolver::Create(symbolizer, options);
  }
  Symbolizer symbolizer;
  std::unique_ptr<OwnerResolver> owners;
};

const TrendRow* Row(const TrendResult& trend, const std::string& key) {
  for (const TrendRow& row : trend.rows) {
    if (row.owner.key == key) return &row;
  }
  return nullptr;
}

TEST(TrendBuilderTest, OneAtATimeInAnyOrderEqualsTheWholeSeries) {
  const v1::Rules rules = Rules();
  const int requests = 40;
  std::vector<std::unique_ptr<v1::Snapshot>> all;
  std::vector<const v1::Snapshot*> series;
  for (int r = 0; r <= requests; ++r) {
    all.push_back(Make(r));
    series.push_back(all.back().get());
  }
  Resolver whole(&rules);
  absl::StatusOr<TrendResult> expected = ComputeTrend(series, *whole.owners);
  ASSERT_TRUE(expected.ok()) << expected.status();

  Resolver streamed(&rules);
  TrendBuilder builder(*streamed.owners);
  for (int r = requests; r >= 0; --r) {  // newest first, each freed once added
    std::unique_ptr<v1::Snapshot> snapshot = Make(r);
    ASSERT_TRUE(builder.Add(*snapshot).ok());
  }
  absl::StatusOr<TrendResult> got = builder.Finish();
  ASSERT_TRUE(got.ok()) << got.status();

  ASSERT_EQ(got->requests, expected->requests);
  EXPECT_TRUE(got->requests_from_tags);
  ASSERT_EQ(got->rows.size(), expected->rows.size());
  for (size_t i = 0; i < got->rows.size(); ++i) {
    EXPECT_EQ(got->rows[i].owner.key, expected->rows[i].owner.key);
    EXPECT_EQ(got->rows[i].live_bytes, expected->rows[i].live_bytes);
    EXPECT_EQ(got->rows[i].fit.verdict, expected->rows[i].fit.verdict);
  }
  EXPECT_EQ(got->tracked.live_bytes, expected->tracked.live_bytes);
  for (size_t k = 0; k + 1 < got->snapshots.size(); ++k) {
    EXPECT_LT(got->snapshots[k]->header().sequence(), got->snapshots[k + 1]->header().sequence());
    EXPECT_EQ(got->snapshots[k]->allocations_size(), 0) << "a summary, not the snapshot";
  }

  const TrendRow* leak = Row(*got, "leak");
  ASSERT_NE(leak, nullptr);
  EXPECT_EQ(leak->fit.verdict, Verdict::kLinear);
  EXPECT_DOUBLE_EQ(leak->fit.slope, kStacksPerOwner * kLeakBytes);
  const TrendRow* cache = Row(*got, "cache");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->fit.verdict, Verdict::kPlateau);
  EXPECT_DOUBLE_EQ(cache->fit.level, kStacksPerOwner * kCacheEntries * kEntryBytes);
  EXPECT_DOUBLE_EQ(cache->fit.flat_from, kCacheEntries);
  EXPECT_TRUE(cache->owner.bounded);
  const TrendRow* rest = Row(*got, "(uncategorized)");
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->fit.verdict, Verdict::kFlat);
}

TEST(TrendBuilderTest, AnotherProcessIsRefused) {
  Resolver resolver(nullptr);
  TrendBuilder builder(*resolver.owners);
  ASSERT_TRUE(builder.Add(*Make(0)).ok());
  std::unique_ptr<v1::Snapshot> other = Make(1);
  other->mutable_header()->set_pid(43);
  const absl::Status status = builder.Add(*other);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("one process"), std::string::npos) << status;
  ASSERT_TRUE(builder.Add(*Make(1)).ok());
  EXPECT_FALSE(builder.Finish().ok()) << "2 snapshots are too few";
}

TEST(TrendBuilderTest, AThousandSnapshotsWithRulesAreCheap) {
  // Each snapshot is made, added and freed: the builder keeps a summary.
  // 1,000 snapshots of 30 stacks and up to ~10,000 allocations each.
  const v1::Rules rules = Rules();
  Resolver resolver(&rules);
  TrendBuilder builder(*resolver.owners);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 1000; ++r) {
    std::unique_ptr<v1::Snapshot> snapshot = Make(r);
    ASSERT_TRUE(builder.Add(*snapshot).ok());
  }
  absl::StatusOr<TrendResult> trend = builder.Finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(trend.ok()) << trend.status();
  std::cout << "1000 snapshots with rules: " << seconds << " s (making them included)\n";
  EXPECT_LT(seconds, 30);
  const TrendRow* leak = Row(*trend, "leak");
  ASSERT_NE(leak, nullptr);
  EXPECT_EQ(leak->fit.verdict, Verdict::kLinear);
  EXPECT_DOUBLE_EQ(leak->fit.slope, kStacksPerOwner * kLeakBytes);
  const TrendRow* cache = Row(*trend, "cache");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->fit.verdict, Verdict::kPlateau);
}

// Sampled snapshots: every figure of a heap owner is an estimate, and the
// table and the JSON say so, with the standard error.
TEST(TrendBuilderTest, SampledFiguresAreMarkedAsEstimatesWithTheirError) {
  const v1::Rules rules = Rules();
  Resolver resolver(&rules);
  std::vector<std::unique_ptr<v1::Snapshot>> all;
  std::vector<const v1::Snapshot*> series;
  for (int r = 0; r <= 12; ++r) {
    all.push_back(Make(r));
    all.back()->mutable_header()->set_sample_interval_bytes(512 << 10);
    series.push_back(all.back().get());
  }
  absl::StatusOr<TrendResult> trend = ComputeTrend(series, *resolver.owners);
  ASSERT_TRUE(trend.ok()) << trend.status();
  EXPECT_EQ(trend->sample_interval_bytes, 512u << 10);
  const TrendRow* leak = Row(*trend, "leak");
  ASSERT_NE(leak, nullptr);
  ASSERT_TRUE(leak->estimated());
  EXPECT_TRUE(leak->fit.estimated);
  EXPECT_GT(leak->error_bytes.back(), 0);
  // The cache's entries (64 KiB < 512 KiB) are estimates too; RSS never is.
  EXPECT_FALSE(trend->rss.estimated());
  EXPECT_TRUE(trend->tracked.estimated());

  FormatOptions options;
  options.by = GroupBy::kCategory;
  const std::string text = FormatTrendText(*trend, options);
  EXPECT_NE(text.find("note        sampled snapshots (one heap sample per 512.0 KiB)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("~"), std::string::npos) << text;
  EXPECT_NE(text.find("\u00b1"), std::string::npos) << text;
  const std::string json = FormatTrendJson(*trend, options);
  EXPECT_NE(json.find("\"estimated\":true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"live_bytes_error\":[5"), std::string::npos) << json;  // >= 512 KiB
  EXPECT_NE(json.find("\"min_request_counts\":4"), std::string::npos) << json;
}

}  // namespace
}  // namespace retain::tool
