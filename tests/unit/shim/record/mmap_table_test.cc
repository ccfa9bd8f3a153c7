// MmapTable: ranges are trimmed, split and replaced exactly as the kernel's
// address space changes under munmap, MAP_FIXED and mremap.
#include "record/mmap_table.h"

#include <gtest/gtest.h>

#include <vector>

namespace retain::shim {
namespace {

constexpr uintptr_t kPage = 4096;

MapRecord MakeMap(uintptr_t start, uintptr_t pages, Kind kind = Kind::kMmapAnon,
                  uint32_t stack_id = 1) {
  MapRecord record{};
  record.start = start;
  record.end = start + pages * kPage;
  record.kind = kind;
  record.stack_id = stack_id;
  return record;
}

std::vector<MapRecord> Records(MmapTable& table) {
  std::vector<MapRecord> out(table.size());
  out.resize(table.Copy(out.data(), out.size()));
  return out;
}

// Each test gets a fresh table (the class is zero-initialisable).
class MmapTableTest : public ::testing::Test {
 protected:
  MmapTable& table() { return *table_; }
  const KindCounters& anon() { return table_->counters(KindIndex(Kind::kMmapAnon)); }

 private:
  MmapTable* table_ = new MmapTable();  // leaked: its pages come from the arena
};

TEST_F(MmapTableTest, InsertAndRemoveWhole) {
  table().Insert(MakeMap(0x10000, 4));
  EXPECT_EQ(anon().live_bytes, 4 * kPage);
  EXPECT_TRUE(table().RemoveRange(0x10000, 0x10000 + 4 * kPage));
  EXPECT_EQ(table().size(), 0u);
  EXPECT_EQ(anon().live_bytes, 0u);
  EXPECT_EQ(anon().freed_bytes, 4 * kPage);
  EXPECT_EQ(anon().freed_count, 1u);
  EXPECT_FALSE(table().RemoveRange(0x10000, 0x11000));
}

TEST_F(MmapTableTest, TrimFrontAndBack) {
  table().Insert(MakeMap(0x10000, 8));
  table().RemoveRange(0x10000, 0x10000 + 2 * kPage);              // front
  table().RemoveRange(0x10000 + 7 * kPage, 0x10000 + 8 * kPage);  // back
  std::vector<MapRecord> records = Records(table());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].start, 0x10000 + 2 * kPage);
  EXPECT_EQ(records[0].end, 0x10000 + 7 * kPage);
  EXPECT_EQ(anon().live_bytes, 5 * kPage);
  EXPECT_EQ(anon().live_count, 1u);
}

TEST_F(MmapTableTest, UnmapInTheMiddleSplitsInTwoKeepingTheBirth) {
  MapRecord record = MakeMap(0x10000, 10, Kind::kMmapAnon, 77);
  record.birth_sequence = 1234;
  table().Insert(record);
  table().RemoveRange(0x10000 + 3 * kPage, 0x10000 + 5 * kPage);
  std::vector<MapRecord> records = Records(table());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].start, 0x10000u);
  EXPECT_EQ(records[0].end, 0x10000 + 3 * kPage);
  EXPECT_EQ(records[1].start, 0x10000 + 5 * kPage);
  EXPECT_EQ(records[1].end, 0x10000 + 10 * kPage);
  for (const MapRecord& r : records) {
    EXPECT_EQ(r.stack_id, 77u);
    EXPECT_EQ(r.birth_sequence, 1234u);
  }
  EXPECT_EQ(anon().live_bytes, 8 * kPage);
  EXPECT_EQ(anon().live_count, 2u);
}

TEST_F(MmapTableTest, UnmapSpanningSeveralRecords) {
  table().Insert(MakeMap(0x10000, 2));
  table().Insert(MakeMap(0x20000, 2));
  table().Insert(MakeMap(0x30000, 2));
  table().RemoveRange(0x10000 + kPage, 0x30000 + kPage);
  std::vector<MapRecord> records = Records(table());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].end, 0x10000 + kPage);
  EXPECT_EQ(records[1].start, 0x30000 + kPage);
  EXPECT_EQ(anon().live_bytes, 2 * kPage);
}

TEST_F(MmapTableTest, FixedMappingReplacesWhatItCovers) {
  table().Insert(MakeMap(0x10000, 10, Kind::kMmapAnon, 1));
  // MAP_FIXED file mapping over pages 2..4 of the anonymous one.
  table().Insert(MakeMap(0x10000 + 2 * kPage, 3, Kind::kMmapFile, 2));
  std::vector<MapRecord> records = Records(table());
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].kind, Kind::kMmapAnon);
  EXPECT_EQ(records[1].kind, Kind::kMmapFile);
  EXPECT_EQ(records[1].start, 0x10000 + 2 * kPage);
  EXPECT_EQ(records[2].kind, Kind::kMmapAnon);
  EXPECT_EQ(anon().live_bytes, 7 * kPage);
  EXPECT_EQ(table().counters(KindIndex(Kind::kMmapFile)).live_bytes, 3 * kPage);
}

TEST_F(MmapTableTest, LookupFindsTheContainingRecord) {
  table().Insert(MakeMap(0x10000, 2, Kind::kMmapFile, 9));
  MapRecord found;
  ASSERT_TRUE(table().Lookup(0x10000 + 100, &found));
  EXPECT_EQ(found.stack_id, 9u);
  EXPECT_FALSE(table().Lookup(0x10000 + 2 * kPage, &found));
  EXPECT_FALSE(table().Lookup(0x1000, &found));
}

TEST_F(MmapTableTest, ManyRecordsStaySortedAndCounted) {
  for (uintptr_t i = 0; i < 5000; ++i)
    table().Insert(MakeMap(0x100000 + (4999 - i) * 2 * kPage, 1));
  std::vector<MapRecord> records = Records(table());
  ASSERT_EQ(records.size(), 5000u);
  for (size_t i = 1; i < records.size(); ++i) EXPECT_LT(records[i - 1].end, records[i].start + 1);
  EXPECT_EQ(anon().live_bytes, 5000 * kPage);
}

}  // namespace
}  // namespace retain::shim
