// The warning retain-diff gives for degraded snapshots (tools/lib/diff.h,
// DegradedWarning) and how the table and JSON carry it, on snapshots built
// with the generated classes: every combination of degraded or not, with and
// without a cap. tests/e2e/diff_degraded_test.cc checks real ones.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tools/lib/diff.h"
#include "tools/lib/diff_format.h"

namespace retain::tool {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Snapshot Snapshot(bool degraded, uint64_t dropped, uint64_t dropped_bytes, uint64_t cap) {
  v1::Snapshot snapshot;
  snapshot.mutable_header()->set_format_version(1);
  snapshot.mutable_header()->set_exe_path("/srv/server");
  snapshot.mutable_memory()->set_rss_anon(64 << 20);
  v1::ShimHealth* health = snapshot.mutable_health();
  health->set_degraded(degraded);
  health->set_dropped_records(dropped);
  health->set_dropped_bytes(dropped_bytes);
  health->set_arena_cap_bytes(cap);
  return snapshot;
}

// These snapshots have no dropped block still live (dropped_live_* unset).
constexpr char kMeaning[] =
    "): rows by owner miss those allocations; the heap totals still count them, 0 still live "
    "(0 B usable). Rerun with a larger RETAIN_MAX_MEMORY";

TEST(DegradedWarningTest, SaysNothingForHealthySnapshots) {
  const v1::Snapshot a = Snapshot(false, 0, 0, 2u << 30);
  EXPECT_FALSE(IsDegraded(a));
  EXPECT_EQ(DegradedWarning({&a, &a}, {"a.pb", "b.pb"}), "");
}

TEST(DegradedWarningTest, NamesTheSnapshotTheCapAndWhatWasDropped) {
  const v1::Snapshot ok = Snapshot(false, 0, 0, 4u << 20);
  const v1::Snapshot bad = Snapshot(true, 188866, 6043712, 4u << 20);
  EXPECT_TRUE(IsDegraded(bad));
  EXPECT_EQ(DegradedWarning({&ok, &bad}, {"before.pb", "after.pb"}),
            std::string("after.pb is degraded: its shim reached its memory cap (RETAIN_MAX_MEMORY "
                        "4.0 MiB) and dropped 188866 allocation records (5.8 MiB") +
                kMeaning);
}

// Dropped records count even where the flag is not set; no cap, no cap named.
TEST(DegradedWarningTest, DroppedRecordsWithoutTheFlagOrACap) {
  const v1::Snapshot dropped = Snapshot(false, 3, 96, 0);
  EXPECT_TRUE(IsDegraded(dropped));
  EXPECT_EQ(DegradedWarning({&dropped}, {"x.pb"}),
            std::string("x.pb is degraded: its shim reached its memory cap and dropped 3 "
                        "allocation records (96 B") +
                kMeaning);
}

TEST(DegradedWarningTest, SeveralDegradedSnapshotsAreCountedAndTheLastOneSpeaks) {
  const v1::Snapshot ok = Snapshot(false, 0, 0, 4u << 20);
  const v1::Snapshot first = Snapshot(true, 10, 320, 4u << 20);
  const v1::Snapshot last = Snapshot(true, 1000, 32000, 4u << 20);
  EXPECT_EQ(DegradedWarning({&ok, &first, &ok, &last}, {"s1.pb", "s2.pb", "s3.pb", "s4.pb"}),
            std::string("2 of 4 snapshots are degraded (first s2.pb, last s4.pb): by the last, "
                        "the shim reached its memory cap (RETAIN_MAX_MEMORY 4.0 MiB) and dropped "
                        "1000 allocation records (31.2 KiB") +
                kMeaning);
}

// The table: the warning right after the title, no share of RSS explained
// (it would be low by the dropped bytes and read as a finding).
TEST(DegradedFormatTest, TableAndJsonShowTheWarningInsteadOfAShare) {
  const v1::Snapshot after = Snapshot(true, 5, 160, 4u << 20);
  DiffResult diff;
  diff.after = &after;
  diff.rss.anon_swap_growth = 64 << 20;
  diff.rss.degraded = true;
  diff.rss.explained_share = -1;
  FormatOptions options;
  options.degraded_warning = DegradedWarning({&after}, {"after.pb"});
  const std::string text = FormatDiffText(diff, options);
  EXPECT_THAT(text, HasSubstr("(pid 0)\n  WARNING     after.pb is degraded: its shim reached"));
  EXPECT_THAT(text, HasSubstr("\n  explained   not computed: the shim dropped records (see WARNING "
                              "above)\n"));
  EXPECT_THAT(text, Not(HasSubstr("0.0%")));
  const std::string json = FormatDiffJson(diff, options);
  EXPECT_THAT(json, HasSubstr(",\"degraded\":true,"));
  EXPECT_THAT(json, HasSubstr("\"explained_share\":null"));
  EXPECT_THAT(json, HasSubstr("\"warnings\":[\"after.pb is degraded: "));
  EXPECT_THAT(json,
              HasSubstr("\"dropped_records\":5,\"dropped_bytes\":160,\"foreign_malloc\":null}"));

  // Without the warning: no WARNING line, "degraded": false.
  const v1::Snapshot healthy = Snapshot(false, 0, 0, 4u << 20);
  diff.after = &healthy;
  diff.rss.degraded = false;
  diff.rss.explained_share = 0.5;
  options.degraded_warning.clear();
  EXPECT_THAT(FormatDiffText(diff, options), Not(HasSubstr("WARNING")));
  EXPECT_THAT(FormatDiffText(diff, options), HasSubstr("  explained   50.0% of the RssAnon"));
  EXPECT_THAT(FormatDiffJson(diff, options), HasSubstr(",\"degraded\":false,"));
}

}  // namespace
}  // namespace retain::tool
