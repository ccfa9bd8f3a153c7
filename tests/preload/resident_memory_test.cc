// Residency on real memory (fixture residency, tests/fixtures/residency.c):
// AllocationBlock.resident_bytes / swapped_bytes and KindTotals, read
// straight from the snapshot's columns: a 400 MiB malloc touched in part,
// a 1 GiB PROT_NONE reservation with 8 MiB committed, a file mapping read
// in part, small blocks sharing pages (each page counted once), swap where
// the machine has it, and per-kind totals that are the sum of the rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "retain.pb.h"
#include "tests/preload/acct_util.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using acct::Describe;
using acct::FixtureOutput;
using acct::ParseNumber;
using acct::RunFixture;
using acct::SnapshotLabeled;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// One row with the columns this test reads.
struct Row {
  uint64_t address = 0;
  uint64_t size = 0;
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  uint64_t resident = 0;
  uint64_t swapped = 0;
};

// Every row, by address, decoded from the columns (address deltas restart
// in each block; the residency columns are empty when all 0).
std::map<uint64_t, Row> RowsOf(const v1::Snapshot& snapshot) {
  std::map<uint64_t, Row> rows;
  for (const v1::AllocationBlock& block : snapshot.allocations()) {
    const int count = block.address_delta_size();
    EXPECT_TRUE(block.resident_bytes_size() == 0 || block.resident_bytes_size() == count);
    EXPECT_TRUE(block.swapped_bytes_size() == 0 || block.swapped_bytes_size() == count);
    uint64_t address = 0;
    for (int i = 0; i < count; ++i) {
      address = i == 0 ? block.address_delta(0) : address + block.address_delta(i);
      Row row;
      row.address = address;
      row.size = block.size(i);
      row.kind = static_cast<v1::Kind>(block.kind(i));
      if (block.resident_bytes_size() == count) row.resident = block.resident_bytes(i);
      if (block.swapped_bytes_size() == count) row.swapped = block.swapped_bytes(i);
      rows[address] = row;
    }
  }
  return rows;
}

// A fixture line "KEY ADDR SIZE AMOUNT" as numbers.
struct Line {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t amount = 0;
};
Line LineOf(const FixtureOutput& out, const std::string& key) {
  const auto all = out.All(key);
  if (all.size() != 1 || all[0].size() < 2) {
    ADD_FAILURE() << "no line '" << key << " ADDR SIZE ...'";
    return {};
  }
  Line line{ParseNumber(all[0][0]), ParseNumber(all[0][1]), 0};
  if (all[0].size() > 2) line.amount = ParseNumber(all[0][2]);
  return line;
}

bool MachineHasSwap() {
  std::ifstream swaps("/proc/swaps");
  std::string line;
  int lines = 0;
  while (std::getline(swaps, line)) ++lines;
  return lines > 1;  // a header, then one line per swap area
}

// One run of the fixture, shared by the tests (it maps 1.5 GiB).
class ResidencyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    std::vector<std::string> args = {dir_->path() + "/scratch"};
    if (MachineHasSwap()) args.push_back("swap");
    run_ = new RunResult(RunFixture("residency", args, dir_->path()));
    out_ = new FixtureOutput(run_->stdout_data);
    if (run_->exit_code == 0) {
      snapshot_ = new v1::Snapshot(SnapshotLabeled(dir_->path(), "residency"));
      rows_ = new std::map<uint64_t, Row>(RowsOf(*snapshot_));
    }
  }
  static void TearDownTestSuite() {
    delete rows_;
    delete snapshot_;
    delete out_;
    delete run_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_EQ(run_->exit_code, 0) << Describe(*run_);
    ASSERT_NE(snapshot_, nullptr);
    ASSERT_TRUE(snapshot_->header().residency_measured());
    page_ = out_->Number("page");
  }
  // The row at `address`; fails the test when there is none.
  static const Row* RowAt(uint64_t address) {
    const auto it = rows_->find(address);
    if (it == rows_->end()) {
      ADD_FAILURE() << "no row at " << std::hex << address;
      return nullptr;
    }
    return &it->second;
  }

  static TempDir* dir_;
  static RunResult* run_;
  static FixtureOutput* out_;
  static v1::Snapshot* snapshot_;
  static std::map<uint64_t, Row>* rows_;
  uint64_t page_ = 4096;
};

TempDir* ResidencyTest::dir_;
RunResult* ResidencyTest::run_;
FixtureOutput* ResidencyTest::out_;
v1::Snapshot* ResidencyTest::snapshot_;
std::map<uint64_t, Row>* ResidencyTest::rows_;

TEST_F(ResidencyTest, A400MiBMallocTouchedATenthIsFortyMiBResident) {
  const Line big = LineOf(*out_, "big");
  const Row* row = RowAt(big.address);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->kind, v1::KIND_HEAP);
  EXPECT_EQ(row->size, 400 * kMiB);
  // Ten regions touched; glibc's chunk header shares the first page.
  EXPECT_GE(row->resident, big.amount);
  EXPECT_LE(row->resident, big.amount + 2 * page_) << "touched " << big.amount;
  EXPECT_EQ(row->swapped, 0u);
  RecordProperty("big_resident_bytes", std::to_string(row->resident));
}

TEST_F(ResidencyTest, AProtNoneReservationCountsOnlyWhatWasCommittedAndTouched) {
  const Line reserve = LineOf(*out_, "reserve");
  const Row* row = RowAt(reserve.address);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->kind, v1::KIND_MMAP_ANON);
  EXPECT_EQ(row->size, 1024 * kMiB);
  EXPECT_EQ(row->resident, 8 * kMiB);
  EXPECT_EQ(row->swapped, 0u);
  RecordProperty("reserve_resident_bytes", std::to_string(row->resident));
}

// mincore reports the page cache for a file mapping: the fixture drops the
// fresh file from the cache first and reads without readahead, so what is
// resident is what it read (plus at most a few pages the kernel brings in
// around a fault).
TEST_F(ResidencyTest, AFileMappingReadInPartIsResidentForTheReadPart) {
  const Line file = LineOf(*out_, "file");
  const Row* row = RowAt(file.address);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->kind, v1::KIND_MMAP_FILE);
  EXPECT_EQ(row->size, 64 * kMiB);
  if (out_->Number("cached") != 0) {
    GTEST_SKIP() << "the file system kept the fresh file in the page cache after "
                    "POSIX_FADV_DONTNEED (mincore then counts all of it)";
  }
  EXPECT_GE(row->resident, file.amount);
  EXPECT_LE(row->resident, file.amount + 1 * kMiB) << "read " << file.amount;
  RecordProperty("file_resident_bytes", std::to_string(row->resident));
}

// Small blocks share pages: each row counts its bytes on resident pages,
// so no page is counted more than once, and a written block is resident
// whole.
TEST_F(ResidencyTest, SmallBlocksOnSharedPagesCountEachPageOnce) {
  const auto small = out_->All("small");
  ASSERT_EQ(small.size(), 1u);
  const uint64_t size = ParseNumber(small[0][1]);
  std::map<uint64_t, uint64_t> per_page;  // page -> resident bytes of rows on it
  uint64_t rows = 0;
  uint64_t sum_resident = 0;
  for (const auto& [address, row] : *rows_) {
    if (row.kind != v1::KIND_HEAP || row.size != size) continue;
    ++rows;
    EXPECT_EQ(row.resident, row.size) << "a written block is resident";
    sum_resident += row.resident;
    for (uint64_t at = address; at < address + row.size;) {
      const uint64_t page = at / page_;
      const uint64_t page_end = (page + 1) * page_;
      const uint64_t stop = std::min(page_end, address + row.size);
      per_page[page] += stop - at;
      at = stop;
    }
  }
  EXPECT_GE(rows, 20000u);
  for (const auto& [page, bytes] : per_page) EXPECT_LE(bytes, page_) << "page " << page;
  EXPECT_LE(sum_resident, per_page.size() * page_);
  EXPECT_GT(rows, per_page.size()) << "several blocks to a page";
  RecordProperty("small_rows", std::to_string(rows));
  RecordProperty("small_resident_bytes", std::to_string(sum_resident));
  RecordProperty("small_pages", std::to_string(per_page.size()));
}

TEST_F(ResidencyTest, PerKindTotalsAreTheSumsOfTheRows) {
  std::map<int, std::pair<uint64_t, uint64_t>> sums;
  for (const auto& [address, row] : *rows_) {
    EXPECT_LE(row.resident + row.swapped, row.size + page_) << std::hex << address;
    sums[row.kind].first += row.resident;
    sums[row.kind].second += row.swapped;
  }
  for (const v1::KindTotals& totals : snapshot_->totals()) {
    EXPECT_EQ(totals.resident_bytes(), sums[totals.kind()].first) << totals.kind();
    EXPECT_EQ(totals.swapped_bytes(), sums[totals.kind()].second) << totals.kind();
  }
  EXPECT_GE(TotalsFor(*snapshot_, v1::KIND_HEAP).resident_bytes(), 40 * kMiB);
  EXPECT_GE(TotalsFor(*snapshot_, v1::KIND_MMAP_ANON).resident_bytes(), 8 * kMiB);
}

TEST_F(ResidencyTest, PagedOutMemoryIsSwappedNotResident) {
  if (!MachineHasSwap()) GTEST_SKIP() << "this machine has no swap (/proc/swaps lists none)";
  const v1::Snapshot swap = SnapshotLabeled(dir_->path(), "swap");
  const auto rows = RowsOf(swap);
  const Line block = LineOf(*out_, "swapped");
  const auto it = rows.find(block.address);
  ASSERT_NE(it, rows.end());
  const Row& row = it->second;
  EXPECT_GT(row.swapped, 0u);
  EXPECT_LE(row.resident + row.swapped, row.size);
  EXPECT_EQ(TotalsFor(swap, v1::KIND_MMAP_ANON).swapped_bytes() >= row.swapped, true);
}

// Large blocks freed while the snapshot is written (fixture
// residency_churn): each one live at the capture counts as resident as it
// was then, never 0 because it was unmapped before the encoder reached it.
TEST(ResidencyChurnTest, BlocksFreedWhileTheSnapshotIsWrittenKeepTheirResidency) {
  TempDir dir;
  const RunResult run = RunFixture("residency_churn", {}, dir.path());
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  const FixtureOutput out(run.stdout_data);
  const auto ring_line = out.All("ring");
  ASSERT_EQ(ring_line.size(), 1u) << run.stdout_data;
  ASSERT_EQ(ring_line[0].size(), 2u) << run.stdout_data;
  const uint64_t count = ParseNumber(ring_line[0][0]), block = ParseNumber(ring_line[0][1]);
  ASSERT_EQ(block, kMiB);
  // The race this test is about happened: the ring was freed mid-write.
  ASSERT_EQ(out.Number("freed_while_writing"), 1u) << run.stdout_data;
  const v1::Snapshot snapshot = SnapshotLabeled(dir.path(), "churn");
  ASSERT_TRUE(snapshot.header().residency_measured());
  uint64_t ring = 0, resident = 0;
  for (const auto& [address, row] : RowsOf(snapshot)) {
    if (row.kind != v1::KIND_HEAP || row.size != block) continue;
    ++ring;
    resident += row.resident;
  }
  EXPECT_EQ(ring, count);
  EXPECT_EQ(resident, count * block);
}

}  // namespace
}  // namespace retain::test
