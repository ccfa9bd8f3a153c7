// Tests for tools/lib/owned_allocations: the "each allocation, its owner,
// the owner's row" loop, on a snapshot built here (grouped by kind and by
// tag, so no symbolization is involved).
#include "tools/lib/owned_allocations.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tools/lib/owner.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

struct Row {
  Owner owner;
  uint64_t bytes = 0;
};

// One block: (address, size, kind, birth sequence, tag) per allocation.
struct Made {
  uint64_t address;
  uint64_t size;
  v1::Kind kind;
  uint64_t birth;
  uint32_t tag;
};

v1::Snapshot SnapshotOf(const std::vector<Made>& made) {
  v1::Snapshot snapshot;
  v1::AllocationBlock* block = snapshot.add_allocations();
  uint64_t previous = 0;
  for (const Made& m : made) {
    block->add_address_delta(block->address_delta_size() == 0 ? m.address : m.address - previous);
    previous = m.address;
    block->add_size(m.size);
    block->add_kind(m.kind);
    block->add_stack_id(0);
    block->add_birth_sequence(m.birth);
    block->add_birth_time_us(0);
    block->add_thread_id(1);
    block->add_tag_id(m.tag);
  }
  for (uint32_t id : {1u, 2u}) {
    v1::Tag* tag = snapshot.add_tags();
    tag->set_id(id);
    tag->set_request_id(id == 1 ? "first" : "second");
  }
  return snapshot;
}

std::unique_ptr<OwnerResolver> Resolver(Symbolizer& symbolizer, GroupBy by) {
  OwnerOptions options;
  options.by = by;
  absl::StatusOr<std::unique_ptr<OwnerResolver>> owners =
      OwnerResolver::Create(symbolizer, std::move(options));
  EXPECT_TRUE(owners.ok()) << owners.status();
  return *std::move(owners);
}

const std::vector<Made> kMade = {
    {0x1000, 10, v1::KIND_HEAP, 1, 1},
    {0x2000, 20, v1::KIND_MMAP_ANON, 2, 2},
    {0x3000, 30, v1::KIND_HEAP, 3, 2},
};

TEST(ForEachOwnedAllocationTest, VisitsEveryAllocationInOrderWithItsOwner) {
  const v1::Snapshot snapshot = SnapshotOf(kMade);
  Symbolizer symbolizer;
  std::unique_ptr<OwnerResolver> owners = Resolver(symbolizer, GroupBy::kKind);
  std::vector<std::pair<uint64_t, std::string>> seen;
  ForEachOwnedAllocation(snapshot, *owners, [&](const Allocation& a, const Owner& owner) {
    seen.emplace_back(a.size, owner.key);
  });
  EXPECT_THAT(seen,
              ElementsAre(Pair(10, KindName(v1::KIND_HEAP)), Pair(20, KindName(v1::KIND_MMAP_ANON)),
                          Pair(30, KindName(v1::KIND_HEAP))));
}

TEST(ForEachOwnedAllocationTest, VisitsOnlyWhatIsKept) {
  const v1::Snapshot snapshot = SnapshotOf(kMade);
  Symbolizer symbolizer;
  std::unique_ptr<OwnerResolver> owners = Resolver(symbolizer, GroupBy::kTag);
  std::vector<std::pair<uint64_t, std::string>> seen;
  ForEachOwnedAllocationIf(
      snapshot, FlattenAllocations(snapshot), *owners,
      [](const Allocation& a) { return a.birth_sequence >= 2; },
      [&](const Allocation& a, const Owner& owner) { seen.emplace_back(a.size, owner.display); });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, 20u);
  EXPECT_EQ(seen[1].first, 30u);
  EXPECT_EQ(seen[0].second, seen[1].second);  // both carry tag 2
}

TEST(ForEachOwnedAllocationTest, TakesAnythingThatNamesStackKindTagAndDevice) {
  const v1::Snapshot snapshot = SnapshotOf(kMade);
  Symbolizer symbolizer;
  std::unique_ptr<OwnerResolver> owners = Resolver(symbolizer, GroupBy::kKind);
  struct Share {
    uint32_t stack_id;
    v1::Kind kind;
    uint32_t tag_id;
    uint32_t device;
  };
  const std::vector<Share> shares = {{0, v1::KIND_MMAP_ANON, 0, 0}, {0, v1::KIND_HEAP, 0, 0}};
  std::vector<std::string> keys;
  ForEachOwnedAllocationIf(
      snapshot, shares, *owners, [](const Share&) { return true; },
      [&](const Share&, const Owner& owner) { keys.push_back(owner.key); });
  EXPECT_THAT(keys, ElementsAre(KindName(v1::KIND_MMAP_ANON), KindName(v1::KIND_HEAP)));
}

TEST(OwnerRowsTest, OneRowPerKeyInFirstSeenOrder) {
  const v1::Snapshot snapshot = SnapshotOf(kMade);
  Symbolizer symbolizer;
  std::unique_ptr<OwnerResolver> owners = Resolver(symbolizer, GroupBy::kKind);
  OwnerRows<Row> rows;
  std::vector<bool> created;
  ForEachOwnedAllocation(snapshot, *owners, [&](const Allocation& a, const Owner& owner) {
    bool made = false;
    rows.Get(owner, &made).bytes += a.size;
    created.push_back(made);
  });
  EXPECT_THAT(created, ElementsAre(true, true, false));
  EXPECT_EQ(rows.size(), 2u);
  std::vector<Row> taken = rows.Take();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].owner.key, KindName(v1::KIND_HEAP));
  EXPECT_EQ(taken[0].bytes, 40u);
  EXPECT_EQ(taken[1].owner.key, KindName(v1::KIND_MMAP_ANON));
  EXPECT_EQ(taken[1].bytes, 20u);
}

TEST(OwnerRowsTest, ARowSpanningCategoriesBelongsToNone) {
  OwnerRows<Row> rows;
  Owner cache;
  cache.key = "module.so";
  cache.category = "prompt cache";
  cache.bounded = true;
  Owner other = cache;
  other.category = "kv";
  other.bounded = false;
  rows.Get(cache);
  EXPECT_EQ(rows.Get(cache).owner.category, "prompt cache");
  const Row& merged = rows.Get(other);
  EXPECT_EQ(merged.owner.category, "");
  EXPECT_FALSE(merged.owner.bounded);
}

}  // namespace
}  // namespace retain::tool
