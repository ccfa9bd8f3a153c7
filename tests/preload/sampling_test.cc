// RETAIN_SAMPLE=BYTES: with a fixed seed, the estimated live heap of a
// ~100 MB mixed workload is within 10% of the truth the workload prints; a
// 64 MiB block is always recorded exactly; the snapshot carries the rate and
// retain-diff says its figures are estimates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "acct_util.h"
#include "tests/e2e/diff_test_util.h"

namespace retain::test {
namespace {

using acct::FixtureOutput;
using acct::RunFixture;

struct SampledRun {
  uint64_t truth_small = 0;
  uint64_t big_address = 0;
  uint64_t estimated_heap = 0;  // all heap rows, scaled
  uint64_t recorded_rows = 0;
  bool big_present = false;
  uint64_t interval = 0;
  std::string snapshot;
};

// Runs the workload under the shim with snapshots going to `dir`.
SampledRun RunSampled(const std::string& dir, const std::string& interval,
                      const std::string& seed) {
  SampledRun run;
  RunResult result = RunFixture("sampling_workload", {"100"}, dir, true,
                                {{"RETAIN_SAMPLE", interval}, {"RETAIN_SAMPLE_SEED", seed}});
  EXPECT_EQ(result.exit_code, 0) << acct::Describe(result);
  FixtureOutput out(result.stdout_data);
  run.truth_small = out.Number("live_small");
  run.big_address = out.Number("big");
  std::vector<std::string> files = ListSnapshots(dir);
  EXPECT_EQ(files.size(), 2u);  // "end" and the exit snapshot
  if (files.empty()) return run;
  v1::Snapshot snapshot = LoadSnapshot(files.front());
  run.interval = snapshot.header().sample_interval_bytes();
  for (const tool::Allocation& a : tool::FlattenAllocations(snapshot)) {
    if (a.kind != v1::KIND_HEAP) continue;
    ++run.recorded_rows;
    if (a.address == run.big_address) {
      run.big_present = true;
      EXPECT_EQ(a.size, uint64_t{64} << 20);
      EXPECT_EQ(a.recorded_size, uint64_t{64} << 20);  // always recorded, never scaled
      continue;
    }
    run.estimated_heap += a.size;
  }
  run.snapshot = files.front();
  return run;
}

double RelativeError(const SampledRun& run) {
  return (static_cast<double>(run.estimated_heap) - static_cast<double>(run.truth_small)) /
         static_cast<double>(run.truth_small);
}

// The estimate's relative standard error is about 1/sqrt(samples): ~3.5% at
// a 128 KiB interval on this workload (~800 samples; measured over seeds
// 1..12: -4.7% .. +8.8%), so 10% holds for the fixed seeds below on any
// machine, even though the program's own start-up allocations shift the
// random stream a little from one environment to another.
TEST(SamplingTest, EstimatedLiveBytesWithinTenPercent) {
  for (const char* seed : {"1", "42"}) {
    SCOPED_TRACE(std::string("seed ") + seed);
    TempDir dir;
    SampledRun run = RunSampled(dir.path(), "128KiB", seed);
    EXPECT_EQ(run.interval, 128u * 1024);
    EXPECT_TRUE(run.big_present);
    ASSERT_GT(run.truth_small, 100u << 20);
    // The estimate also covers the program's few other heap blocks (stdio
    // and the like: a few KiB), far below the tolerance.
    EXPECT_LT(std::fabs(RelativeError(run)), 0.10)
        << "estimated " << run.estimated_heap << " truth " << run.truth_small;
    // A few hundred records, not the ~13,000 live blocks.
    EXPECT_LT(run.recorded_rows, 3000u);
    EXPECT_GT(run.recorded_rows, 300u);
  }
}

// At the production rate (512 KiB: ~200 samples, ~7% standard error) the
// 64 MiB block is there, exact, whatever the seed.
TEST(SamplingTest, LargeBlocksAreAlwaysRecorded) {
  for (const char* seed : {"1", "2", "3", "4"}) {
    SCOPED_TRACE(std::string("seed ") + seed);
    TempDir dir;
    SampledRun run = RunSampled(dir.path(), "512KiB", seed);
    EXPECT_EQ(run.interval, 512u * 1024);
    EXPECT_TRUE(run.big_present);
    EXPECT_LT(std::fabs(RelativeError(run)), 0.30);
    EXPECT_LT(run.recorded_rows, 1000u);
  }
}

TEST(SamplingTest, RetainDiffScalesAndSaysItIsAnEstimate) {
  TempDir dir;
  SampledRun run = RunSampled(dir.path(), "512KiB", "7");
  ASSERT_FALSE(run.snapshot.empty());
  // Allocated bytes: the scaled estimate of the small blocks plus the 64 MiB
  // block, exactly.
  RunResult diff =
      RunDiff({run.snapshot, "--json", "--by", "kind", "--top", "0", "--measure", "allocated"});
  ASSERT_EQ(diff.exit_code, 0) << diff.stderr_data;
  Json json = ParseJson(diff.stdout_data);
  ASSERT_TRUE(json.ok) << json.error;
  EXPECT_TRUE(json.Bool("estimated"));
  const int row = json.FindRow("rows", "owner.key", "heap");
  ASSERT_GE(row, 0) << diff.stdout_data;
  const int64_t heap = json.Int("rows." + std::to_string(row) + ".retained_bytes");
  EXPECT_EQ(static_cast<uint64_t>(heap), run.estimated_heap + (uint64_t{64} << 20));
  // Resident bytes (the default) are estimated the same way; the fixture
  // writes only the first 64 bytes of the 64 MiB block, so at most one of
  // its pages counts.
  RunResult resident = RunDiff({run.snapshot, "--json", "--by", "kind", "--top", "0"});
  ASSERT_EQ(resident.exit_code, 0) << resident.stderr_data;
  Json resident_json = ParseJson(resident.stdout_data);
  ASSERT_TRUE(resident_json.ok) << resident_json.error;
  const int resident_row = resident_json.FindRow("rows", "owner.key", "heap");
  ASSERT_GE(resident_row, 0) << resident.stdout_data;
  const int64_t resident_heap =
      resident_json.Int("rows." + std::to_string(resident_row) + ".retained_bytes");
  EXPECT_GT(resident_heap, 0) << resident.stdout_data;
  EXPECT_LE(static_cast<uint64_t>(resident_heap), run.estimated_heap + 4096)
      << resident.stdout_data;
  RunResult text = RunDiff({run.snapshot});
  EXPECT_NE(text.stdout_data.find("estimates"), std::string::npos) << text.stdout_data;
}

TEST(SamplingTest, FullTrackingWhenOffOrMalformed) {
  for (const char* value : {"off", "0", "lots"}) {
    SCOPED_TRACE(value);
    TempDir dir;
    SampledRun run = RunSampled(dir.path(), value, "1");
    EXPECT_EQ(run.interval, 0u);
    EXPECT_TRUE(run.big_present);
    // Every block recorded: the sum is exact (plus the program's few others).
    EXPECT_GE(run.estimated_heap, run.truth_small);
    EXPECT_LT(run.estimated_heap - run.truth_small, 64u * 1024);
  }
}

}  // namespace
}  // namespace retain::test
