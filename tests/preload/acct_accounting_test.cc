// Exact accounting under the shim: known allocations from known call sites
// (fixture acct_sites) and a concurrent randomized workload that knows what it
// holds (fixture acct_workload). Every number asserted here is computed from
// what the fixture did, never read back from the shim alone.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>

#include "tests/preload/acct_util.h"

namespace retain::test::acct {
namespace {

// What acct_sites leaves live at its "acct" snapshot, per site function.
struct SiteExpectation {
  uint64_t size;       // every row of the site has this size
  uint64_t alignment;  // and an address aligned to this
  uint64_t allocated;  // allocations the site made
  uint64_t live;       // of which still live at "acct"
};
const std::map<std::string, SiteExpectation>& SiteExpectations() {
  static const auto* const kSites = new std::map<std::string, SiteExpectation>{
      {"site_a", {1000, 1, 10, 7}},   // malloc(1000) x10, 3 freed
      {"site_b", {999, 1, 7, 5}},     // calloc(3, 333) x7, 2 freed
      {"site_c", {4096, 64, 5, 4}},   // posix_memalign(64, 4096) x5, 1 freed
      {"site_d", {48, 1, 100, 100}},  // malloc(48) x100, none freed
  };
  return *kSites;
}

// The site whose function contains `address`, or "" for none.
std::string SiteContaining(const std::map<std::string, Range>& ranges, uint64_t address) {
  for (const auto& [name, range] : ranges) {
    if (SiteExpectations().count(name) != 0 && range.Contains(address)) return name;
  }
  return "";
}

// Proves: the heap rows born between the "baseline" and "acct" snapshots are
// exactly the site allocations that were not freed (bytes and count per
// site; no row from anywhere else), each attributed to its site by
// frames[0], and no row born before the baseline claims a site.
TEST(AcctAccounting, SitesHaveExactBytesCountsAndStacks) {
  TempDir dir;
  const RunResult run = RunFixture("acct_sites", {}, dir.path());
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const FixtureOutput out(run.stdout_data);
  const std::map<std::string, Range> ranges = FunctionRanges(out);
  const v1::Snapshot baseline = SnapshotLabeled(dir.path(), "baseline");
  const v1::Snapshot acct = SnapshotLabeled(dir.path(), "acct");
  ASSERT_TRUE(acct.has_header() && baseline.has_header());

  // The fixture's own idea of what is live agrees with this test's.
  for (const auto& [site, want] : SiteExpectations()) {
    const std::vector<std::string> expect = out.Named("expect", site);
    ASSERT_EQ(expect.size(), 2u) << site;
    EXPECT_EQ(ParseNumber(expect[0]), want.size * want.live) << site;
    EXPECT_EQ(ParseNumber(expect[1]), want.live) << site;
  }

  std::map<std::string, Sum> by_site;
  for (const Allocation& row : RowsBornAfter(acct, baseline, v1::KIND_HEAP)) {
    const std::vector<uint64_t> frames = FramesOf(acct, row.stack_id);
    ASSERT_FALSE(frames.empty()) << "row at 0x" << std::hex << row.address << " has no stack";
    const std::string site = SiteContaining(ranges, frames[0]);
    ASSERT_NE(site, "") << "row born after the baseline whose frames[0] 0x" << std::hex << frames[0]
                        << " is in no site (size " << std::dec << row.size << ")";
    const SiteExpectation& want = SiteExpectations().at(site);
    EXPECT_EQ(row.size, want.size) << site;
    EXPECT_EQ(row.address % want.alignment, 0u) << site;
    EXPECT_TRUE(StackContainsRange(acct, row.stack_id, ranges.at(site).begin, ranges.at(site).end));
    by_site[site].bytes += row.size;
    by_site[site].count += 1;
  }
  for (const auto& [site, want] : SiteExpectations()) {
    EXPECT_EQ(by_site[site].bytes, want.size * want.live) << site;
    EXPECT_EQ(by_site[site].count, want.live) << site;
  }

  // Rows born before the baseline (the process's start-up) never claim a site.
  for (const Allocation& row : Rows(acct, v1::KIND_HEAP)) {
    if (row.birth_sequence >= baseline.header().next_birth_sequence()) continue;
    for (const auto& [site, want] : SiteExpectations()) {
      EXPECT_FALSE(
          StackContainsRange(acct, row.stack_id, ranges.at(site).begin, ranges.at(site).end))
          << site << " claimed by a row born before the baseline";
    }
  }
}

// Proves: KindTotals' heap live bytes/count equal the sum of the heap rows in
// both snapshots, and the cumulative counters moved between them by exactly
// what the sites allocated and freed (the snapshot itself allocates nothing
// the shim records).
TEST(AcctAccounting, HeapTotalsAgreeWithRowsAndSites) {
  TempDir dir;
  const RunResult run = RunFixture("acct_sites", {}, dir.path());
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const v1::Snapshot baseline = SnapshotLabeled(dir.path(), "baseline");
  const v1::Snapshot acct = SnapshotLabeled(dir.path(), "acct");

  for (const v1::Snapshot* s : {&baseline, &acct}) {
    const v1::KindTotals totals = TotalsFor(*s, v1::KIND_HEAP);
    EXPECT_EQ(totals.live_bytes(), LiveBytes(*s, v1::KIND_HEAP)) << s->header().label();
    EXPECT_EQ(totals.live_count(), LiveCount(*s, v1::KIND_HEAP)) << s->header().label();
    EXPECT_EQ(totals.live_bytes(), totals.allocated_bytes() - totals.freed_bytes());
    EXPECT_EQ(totals.live_count(), totals.allocated_count() - totals.freed_count());
    EXPECT_FALSE(s->health().degraded());
  }

  uint64_t allocated_bytes = 0, allocated_count = 0, freed_bytes = 0, freed_count = 0;
  for (const auto& [site, want] : SiteExpectations()) {
    allocated_bytes += want.size * want.allocated;
    allocated_count += want.allocated;
    freed_bytes += want.size * (want.allocated - want.live);
    freed_count += want.allocated - want.live;
  }
  const v1::KindTotals before = TotalsFor(baseline, v1::KIND_HEAP);
  const v1::KindTotals after = TotalsFor(acct, v1::KIND_HEAP);
  EXPECT_EQ(after.allocated_bytes() - before.allocated_bytes(), allocated_bytes);  // 42273
  EXPECT_EQ(after.allocated_count() - before.allocated_count(), allocated_count);  // 122
  EXPECT_EQ(after.freed_bytes() - before.freed_bytes(), freed_bytes);              // 9094
  EXPECT_EQ(after.freed_count() - before.freed_count(), freed_count);              // 6
}

// Proves: under 4 threads doing 1,000,000 random allocations, frees and
// reallocs through every entry point (most frees on a thread other than the
// allocating one), the heap rows born after the baseline and live at the end
// are exactly the blocks the workload still holds: same bytes, same count.
TEST(AcctAccounting, WorkloadEndsWithExactLiveBytes) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  const RunResult run = RunFixture("acct_workload", {}, dir.path());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("workload_seconds", std::to_string(seconds));
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const FixtureOutput out(run.stdout_data);
  EXPECT_EQ(out.Number("ops"), 1'000'000u);
  EXPECT_GT(out.Number("cross_thread_frees"), 0u);
  const uint64_t held_bytes = out.Number("held_bytes");
  const uint64_t held_count = out.Number("held_count");
  ASSERT_GT(held_count, 0u);

  const v1::Snapshot baseline = SnapshotLabeled(dir.path(), "baseline");
  const v1::Snapshot final_snapshot = SnapshotLabeled(dir.path(), "final");
  const std::vector<Allocation> born = RowsBornAfter(final_snapshot, baseline, v1::KIND_HEAP);
  const Sum sum = SumOf(born);
  EXPECT_EQ(sum.bytes, held_bytes);
  EXPECT_EQ(sum.count, held_count);

  // Only the workers allocated in the window; main just waited.
  std::set<uint32_t> threads;
  for (const Allocation& row : born) threads.insert(row.thread_id);
  EXPECT_EQ(threads.count(final_snapshot.header().pid()), 0u);

  // Totals agree with the rows and with themselves (every realloc counted
  // as one free and one allocation).
  const v1::KindTotals totals = TotalsFor(final_snapshot, v1::KIND_HEAP);
  EXPECT_EQ(totals.live_bytes(), LiveBytes(final_snapshot, v1::KIND_HEAP));
  EXPECT_EQ(totals.live_count(), LiveCount(final_snapshot, v1::KIND_HEAP));
  EXPECT_EQ(totals.live_bytes(), totals.allocated_bytes() - totals.freed_bytes());
  EXPECT_EQ(totals.live_count(), totals.allocated_count() - totals.freed_count());
  EXPECT_FALSE(final_snapshot.health().degraded());
  EXPECT_LT(seconds, 60.0) << "the workload should take well under 30 s under the shim";
}

}  // namespace
}  // namespace retain::test::acct
