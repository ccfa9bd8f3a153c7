// Every allocation entry point under the shim (fixture acct_entry_points):
// each malloc-family function records the size the contract says, each of
// the 20 C++ operator new/delete forms is seen, malloc_usable_size passes
// through. Rows are looked up by the addresses the fixture printed.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "tests/preload/acct_util.h"

namespace retain::test::acct {
namespace {

// One run of acct_entry_points under the shim and its two snapshots.
struct EntryRun {
  RunResult run;
  v1::Snapshot live;   // everything held
  v1::Snapshot freed;  // after every delete form and every free
};

EntryRun RunEntryPoints(const TempDir& dir) {
  EntryRun r;
  r.run = RunFixture("acct_entry_points", {}, dir.path());
  if (r.run.exit_code != 0) {
    ADD_FAILURE() << Describe(r.run);
    return r;
  }
  r.live = SnapshotLabeled(dir.path(), "live");
  r.freed = SnapshotLabeled(dir.path(), "freed");
  return r;
}

// "<key> NAME ADDRESS SIZE" lines: name -> {address, size}.
std::map<std::string, std::pair<uint64_t, uint64_t>> Expected(const FixtureOutput& out,
                                                              const std::string& key) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> rows;
  for (const auto& f : out.All(key)) {
    if (f.size() != 3) {
      ADD_FAILURE() << "bad '" << key << "' line";
      continue;
    }
    rows[f[0]] = {ParseNumber(f[1]), ParseNumber(f[2])};
  }
  return rows;
}

std::set<std::string> Names(const std::map<std::string, std::pair<uint64_t, uint64_t>>& rows) {
  std::set<std::string> names;
  for (const auto& [name, row] : rows) names.insert(name);
  return names;
}

// Proves: malloc, calloc (n*size), realloc (grow, shrink, NULL), reallocarray,
// posix_memalign, aligned_alloc, memalign, valloc and pvalloc (page-rounded)
// each leave one heap row of exactly the recorded size at the returned
// address; blocks that realloc moved away from, and realloc(p, 0), leave none.
TEST(AcctEntryPoints, MallocFamilyRowsHaveTheRecordedSize) {
  TempDir dir;
  const EntryRun r = RunEntryPoints(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  const FixtureOutput out(r.run.stdout_data);
  const auto live = Expected(out, "live");
  const std::set<std::string> want_names = {"malloc",         "calloc",        "realloc_grow",
                                            "realloc_shrink", "realloc_null",  "reallocarray",
                                            "posix_memalign", "aligned_alloc", "memalign",
                                            "valloc",         "pvalloc"};
  EXPECT_EQ(Names(live), want_names);
  EXPECT_EQ(live.at("calloc").second, 3u * 337u);
  EXPECT_EQ(live.at("reallocarray").second, 9u * 111u);
  EXPECT_EQ(live.at("pvalloc").second % 4096, 0u);

  const std::map<uint64_t, Allocation> rows = RowsByAddress(r.live);
  for (const auto& [name, want] : live) {
    const auto it = rows.find(want.first);
    ASSERT_NE(it, rows.end()) << name << " has no row at 0x" << std::hex << want.first;
    EXPECT_EQ(it->second.kind, v1::KIND_HEAP) << name;
    EXPECT_EQ(it->second.size, want.second) << name;
  }

  // Every address the fixture expects to be free holds no row, unless the
  // allocator has legitimately handed it out again to one of the others.
  std::set<uint64_t> reused;
  for (const auto& [name, want] : live) reused.insert(want.first);
  for (const auto& [name, want] : Expected(out, "new")) reused.insert(want.first);
  const auto gone = out.All("gone");
  bool saw_realloc_zero = false;
  for (const auto& f : gone) {
    ASSERT_EQ(f.size(), 2u);
    saw_realloc_zero = saw_realloc_zero || f[0] == "realloc_zero";
    const uint64_t address = ParseNumber(f[1]);
    if (reused.count(address) == 0) {
      EXPECT_EQ(rows.count(address), 0u) << f[0] << " left a row after realloc freed it";
    }
  }
  EXPECT_TRUE(saw_realloc_zero) << "glibc's realloc(p, 0) frees p and returns NULL";
}

// Proves: each of the 8 operator new forms (plain, [], nothrow, aligned, in
// every combination) reaches the shim as one heap row of the size libstdc++
// asks for (aligned forms: rounded up to the alignment), and each of the 12
// delete forms (plain, [], nothrow, sized, aligned, aligned nothrow, sized
// aligned) removes its row.
TEST(AcctEntryPoints, EveryOperatorNewAndDeleteFormIsSeen) {
  TempDir dir;
  const EntryRun r = RunEntryPoints(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  const FixtureOutput out(r.run.stdout_data);
  const auto news = Expected(out, "new");
  ASSERT_EQ(news.size(), 12u);
  // Aligned sizes the contract predicts: 1700 -> 1728 (64), 1800 -> 1920
  // (128), 1900 -> 2048 (256), 2000 -> 2048 (64), 2100 -> 2112, 2200 -> 2304.
  EXPECT_EQ(news.at("new").second, 1100u);
  EXPECT_EQ(news.at("new[]_aligned").second, 1920u);
  EXPECT_EQ(news.at("new_aligned_nothrow").second, 2048u);
  EXPECT_EQ(news.at("new[]_aligned_sized").second, 2304u);

  const std::map<uint64_t, Allocation> before = RowsByAddress(r.live);
  const std::map<uint64_t, Allocation> after = RowsByAddress(r.freed);
  for (const auto& [name, want] : news) {
    const auto it = before.find(want.first);
    ASSERT_NE(it, before.end()) << name << " has no row at 0x" << std::hex << want.first;
    EXPECT_EQ(it->second.kind, v1::KIND_HEAP) << name;
    EXPECT_EQ(it->second.size, want.second) << name;
    EXPECT_EQ(after.count(want.first), 0u)
        << "the delete form paired with " << name << " did not remove its row";
  }
  for (const auto& [name, want] : Expected(out, "live")) {
    EXPECT_EQ(after.count(want.first), 0u) << "free of " << name << " did not remove its row";
  }
}

// Proves: between the two snapshots the shim recorded exactly the 23
// releases the fixture made (12 deletes + 11 frees) with exactly their bytes,
// and no allocation at all; heap totals agree with the rows and satisfy
// live = allocated - freed.
TEST(AcctEntryPoints, ReleasesBetweenSnapshotsAreCountedExactly) {
  TempDir dir;
  const EntryRun r = RunEntryPoints(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  const FixtureOutput out(r.run.stdout_data);
  uint64_t released_bytes = 0;
  uint64_t released_count = 0;
  for (const std::string key : {"live", "new"}) {
    for (const auto& [name, want] : Expected(out, key)) {
      released_bytes += want.second;
      ++released_count;
    }
  }
  EXPECT_EQ(released_count, 23u);
  const v1::KindTotals before = TotalsFor(r.live, v1::KIND_HEAP);
  const v1::KindTotals after = TotalsFor(r.freed, v1::KIND_HEAP);
  EXPECT_EQ(after.allocated_count(), before.allocated_count());
  EXPECT_EQ(after.allocated_bytes(), before.allocated_bytes());
  EXPECT_EQ(after.freed_count() - before.freed_count(), released_count);
  EXPECT_EQ(after.freed_bytes() - before.freed_bytes(), released_bytes);
  EXPECT_EQ(before.live_bytes() - after.live_bytes(), released_bytes);
  // In both snapshots the totals agree with the rows and with themselves
  // (a realloc counts as one free and one allocation).
  for (const v1::Snapshot* s : {&r.live, &r.freed}) {
    const v1::KindTotals totals = TotalsFor(*s, v1::KIND_HEAP);
    EXPECT_EQ(totals.live_bytes(), LiveBytes(*s, v1::KIND_HEAP)) << s->header().label();
    EXPECT_EQ(totals.live_count(), LiveCount(*s, v1::KIND_HEAP)) << s->header().label();
    EXPECT_EQ(totals.live_bytes(), totals.allocated_bytes() - totals.freed_bytes())
        << s->header().label();
    EXPECT_EQ(totals.live_count(), totals.allocated_count() - totals.freed_count())
        << s->header().label();
  }
}

// Proves: malloc_usable_size answers what glibc answers without the shim
// (the shim adds no header and does not break the pass-through).
TEST(AcctEntryPoints, MallocUsableSizePassesThrough) {
  TempDir dir;
  const RunResult plain = RunFixture("acct_entry_points", {}, dir.path(), /*preload=*/false);
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  const EntryRun r = RunEntryPoints(dir);
  ASSERT_EQ(r.run.exit_code, 0);
  const uint64_t without = FixtureOutput(plain.stdout_data).Number("usable");
  const uint64_t with = FixtureOutput(r.run.stdout_data).Number("usable");
  EXPECT_GE(without, 1001u);
  EXPECT_EQ(with, without);
}

}  // namespace
}  // namespace retain::test::acct
