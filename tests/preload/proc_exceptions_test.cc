// C++ exceptions thrown through code that allocates: 10,000 nested throws
// (allocation in constructors and destructors being unwound, two exceptions
// in flight at once) give the same results under the shim, and the shim's
// bookkeeping stays exact: nothing born during the loop is left live, not
// even the exception objects, and the per-kind totals agree with the rows.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

TEST(ProcExceptions, NestedThrowsThroughAllocatingCode) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_exceptions")};
  const RunResult plain = test::Run(options);
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir.path();
  const RunResult traced = test::Run(options);

  ASSERT_EQ(plain.exit_code, 0) << plain.stdout_data << plain.stderr_data;
  EXPECT_EQ(traced.exit_code, 0) << traced.stdout_data << traced.stderr_data;
  EXPECT_EQ(traced.stdout_data, plain.stdout_data);
  EXPECT_NE(plain.stdout_data.find("rounds=10000 caught=10000 nested=10000 inner=10001 "
                                   "live_objects=0 "),
            std::string::npos)
      << plain.stdout_data;
  EXPECT_TRUE(RetainLines(traced.stderr_data).empty()) << traced.stderr_data;

  const std::vector<v1::Snapshot> snapshots = LoadAll(retain_dir.path());
  ASSERT_EQ(snapshots.size(), 3u);  // before, after, exit
  const v1::Snapshot& before = snapshots[0];
  const v1::Snapshot& after = snapshots[1];
  ASSERT_EQ(before.header().label(), "before");
  ASSERT_EQ(after.header().label(), "after");

  // The loop's allocations went through the shim: each round allocates
  // dozens of blocks (objects, strings, vectors, exception objects).
  const v1::KindTotals heap_before = TotalsFor(before, v1::KIND_HEAP);
  const v1::KindTotals heap_after = TotalsFor(after, v1::KIND_HEAP);
  EXPECT_GE(heap_after.allocated_count() - heap_before.allocated_count(), 10000u * 20);
  EXPECT_GE(after.header().next_birth_sequence() - before.header().next_birth_sequence(),
            10000u * 20);

  // Nothing born between the two snapshots is still live.
  const uint64_t window_start = before.header().next_birth_sequence();
  std::string leaked;
  int leaked_rows = 0;
  for (const tool::Allocation& row : tool::FlattenAllocations(after)) {
    if (row.birth_sequence >= window_start) {
      if (++leaked_rows <= 10)
        leaked += " " + std::to_string(row.size) + "@" + tool::KindName(row.kind);
    }
  }
  EXPECT_EQ(leaked_rows, 0) << "rows born during the loop still live:" << leaked;
  // The totals say the same: as many bytes and blocks live as before.
  EXPECT_EQ(heap_after.live_count(), heap_before.live_count());
  EXPECT_EQ(heap_after.live_bytes(), heap_before.live_bytes());
  EXPECT_EQ(heap_after.allocated_count() - heap_before.allocated_count(),
            heap_after.freed_count() - heap_before.freed_count());
  // And the totals agree with the rows (single-threaded, so exactly).
  EXPECT_EQ(heap_after.live_bytes(), LiveBytes(after, v1::KIND_HEAP));
  EXPECT_EQ(heap_after.live_count(), LiveCount(after, v1::KIND_HEAP));
}

}  // namespace
}  // namespace retain::test::proc
