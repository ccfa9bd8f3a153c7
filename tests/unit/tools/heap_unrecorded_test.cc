// The warning retain-diff gives for snapshots of a process whose malloc was
// not the shim's (Header.foreign_malloc_path; tools/lib/diff.h,
// HeapUnrecordedWarning), and how the table and JSON carry it, on snapshots
// built with the generated classes. tests/preload/proc_allocators_test.cc
// makes real ones (jemalloc preloaded before the shim).
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

constexpr char kJemalloc[] = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";

v1::Snapshot Snapshot(const std::string& foreign_malloc) {
  v1::Snapshot snapshot;
  snapshot.mutable_header()->set_format_version(1);
  snapshot.mutable_header()->set_exe_path("/srv/server");
  snapshot.mutable_header()->set_foreign_malloc_path(foreign_malloc);
  snapshot.mutable_memory()->set_rss_anon(64 << 20);
  return snapshot;
}

constexpr char kMeaning[] =
    "'s, which the dynamic linker searched before libretain.so, so the shim's malloc hooks never "
    "ran (mappings and GPU memory are recorded). Put libretain.so first in LD_PRELOAD (retain-run "
    "does)";

TEST(HeapUnrecordedWarningTest, SaysNothingWhenTheShimRecordedTheHeap) {
  const v1::Snapshot a = Snapshot("");
  EXPECT_EQ(HeapUnrecordedWarning({&a, &a}, {"a.pb", "b.pb"}), "");
}

TEST(HeapUnrecordedWarningTest, NamesTheSnapshotAndTheMalloc) {
  const v1::Snapshot a = Snapshot(kJemalloc);
  EXPECT_EQ(HeapUnrecordedWarning({&a}, {"live.pb"}),
            std::string("heap not recorded in live.pb: the process's malloc was ") + kJemalloc +
                kMeaning);
}

TEST(HeapUnrecordedWarningTest, SeveralAreCountedAndTheFirstSpeaks) {
  const v1::Snapshot ok = Snapshot("");
  const v1::Snapshot bad = Snapshot(kJemalloc);
  EXPECT_EQ(HeapUnrecordedWarning({&ok, &bad, &bad}, {"s1.pb", "s2.pb", "s3.pb"}),
            std::string("heap not recorded in 2 of 3 snapshots (first s2.pb): the process's "
                        "malloc was ") +
                kJemalloc + kMeaning);
}

// Above every figure in the table; in JSON among the warnings, and each
// snapshot's reference names the malloc.
TEST(HeapUnrecordedFormatTest, TableAndJsonShowIt) {
  const v1::Snapshot after = Snapshot(kJemalloc);
  DiffResult diff;
  diff.after = &after;
  diff.rss.anon_swap_growth = 64 << 20;
  FormatOptions options;
  options.heap_warning = HeapUnrecordedWarning({&after}, {"after.pb"});
  const std::string text = FormatDiffText(diff, options);
  EXPECT_THAT(text, HasSubstr("(pid 0)\n  WARNING     heap not recorded in after.pb: the "
                              "process's malloc was /usr/lib/x86_64-linux-gnu/libjemalloc.so.2's"));
  const std::string json = FormatDiffJson(diff, options);
  EXPECT_THAT(json, HasSubstr("\"warnings\":[\"heap not recorded in after.pb: "));
  EXPECT_THAT(json, HasSubstr(std::string("\"foreign_malloc\":\"") + kJemalloc + "\"}"));

  const v1::Snapshot recorded = Snapshot("");
  diff.after = &recorded;
  options.heap_warning.clear();
  EXPECT_THAT(FormatDiffText(diff, options), Not(HasSubstr("WARNING")));
  EXPECT_THAT(FormatDiffJson(diff, options), HasSubstr("\"foreign_malloc\":null}"));
}

}  // namespace
}  // namespace retain::tool
