// LiveTable: exact bookkeeping under random operations (checked against a
// std::unordered_map), counters, Take/Restore, and threads.
#include "record/live_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/arena.h"

namespace retain::shim {
namespace {

LiveRecord MakeRecord(uintptr_t address, uint64_t size, Kind kind = Kind::kHeap) {
  LiveRecord record{};
  record.address = address;
  record.size = size;
  record.kind = kind;
  record.stack_id = static_cast<uint32_t>(address >> 4);
  return record;
}

std::vector<LiveRecord> CopyAll(LiveTable& table) {
  table.LockAll();
  std::vector<LiveRecord> records(table.CountLocked());
  records.resize(table.CopyLocked(records.data()));
  table.UnlockAll();
  return records;
}

KindCounters HeapCounters(LiveTable& table) {
  KindCounters counters[kKindCount] = {};
  table.SumCounters(counters);
  return counters[KindIndex(Kind::kHeap)];
}

TEST(LiveTableTest, InsertThenRemoveCountsBytes) {
  static LiveTable table;
  static BirthSequence sequence;
  const uint64_t first_sequence = sequence.Peek();
  EXPECT_TRUE(table.Insert(MakeRecord(0x1000, 100), sequence));
  EXPECT_TRUE(table.Insert(MakeRecord(0x2000, 50), sequence));
  KindCounters c = HeapCounters(table);
  EXPECT_EQ(c.live_bytes, 150u);
  EXPECT_EQ(c.live_count, 2u);
  EXPECT_EQ(c.allocated_bytes, 150u);
  EXPECT_TRUE(table.Remove(0x1000));
  EXPECT_FALSE(table.Remove(0x1000));
  EXPECT_FALSE(table.Remove(0x3000));
  c = HeapCounters(table);
  EXPECT_EQ(c.live_bytes, 50u);
  EXPECT_EQ(c.live_count, 1u);
  EXPECT_EQ(c.freed_bytes, 100u);
  EXPECT_EQ(c.freed_count, 1u);
  std::vector<LiveRecord> records = CopyAll(table);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].address, 0x2000u);
  // Numbered in order within a thread.
  EXPECT_EQ(records[0].birth_sequence, first_sequence + 1);
}

TEST(LiveTableTest, ReinsertAtSameAddressReplacesAndCountsTheMissedFree) {
  static LiveTable table;
  static BirthSequence sequence;
  table.Insert(MakeRecord(0x1000, 100), sequence);
  table.Insert(MakeRecord(0x1000, 30), sequence);
  KindCounters c = HeapCounters(table);
  EXPECT_EQ(c.live_bytes, 30u);
  EXPECT_EQ(c.live_count, 1u);
  EXPECT_EQ(c.freed_bytes, 100u);
  EXPECT_EQ(table.missed_frees(), 1u);
}

TEST(LiveTableTest, TakeRestoreAndCountFreed) {
  static LiveTable table;
  static BirthSequence sequence;
  table.Insert(MakeRecord(0x5000, 64), sequence);
  LiveRecord taken;
  ASSERT_TRUE(table.Take(0x5000, &taken));
  EXPECT_EQ(taken.size, 64u);
  EXPECT_EQ(HeapCounters(table).live_bytes, 0u);
  EXPECT_EQ(HeapCounters(table).freed_bytes, 0u);  // not yet: realloc may fail
  table.Restore(taken);
  EXPECT_EQ(HeapCounters(table).live_bytes, 64u);
  ASSERT_TRUE(table.Take(0x5000, &taken));
  table.CountFreed(taken);
  KindCounters c = HeapCounters(table);
  EXPECT_EQ(c.live_bytes, 0u);
  EXPECT_EQ(c.freed_bytes, 64u);
  EXPECT_EQ(c.freed_count, 1u);
}

TEST(LiveTableTest, RandomOperationsMatchAReferenceMap) {
  static LiveTable table;
  static BirthSequence sequence;
  std::unordered_map<uintptr_t, uint64_t> reference;
  std::mt19937_64 random(42);
  uint64_t live_bytes = 0;
  for (int i = 0; i < 400000; ++i) {
    // A narrow address range makes collisions and long probe runs common.
    uintptr_t address = (random() % 50000 + 1) * 16;
    if (random() % 3 != 0) {
      uint64_t size = random() % 5000 + 1;
      auto it = reference.find(address);
      if (it != reference.end()) live_bytes -= it->second;
      reference[address] = size;
      live_bytes += size;
      ASSERT_TRUE(table.Insert(MakeRecord(address, size), sequence));
    } else {
      auto it = reference.find(address);
      bool present = it != reference.end();
      if (present) {
        live_bytes -= it->second;
        reference.erase(it);
      }
      ASSERT_EQ(table.Remove(address), present) << "at operation " << i;
    }
  }
  KindCounters c = HeapCounters(table);
  EXPECT_EQ(c.live_bytes, live_bytes);
  EXPECT_EQ(c.live_count, reference.size());
  EXPECT_EQ(c.allocated_bytes - c.freed_bytes, live_bytes);
  std::vector<LiveRecord> records = CopyAll(table);
  ASSERT_EQ(records.size(), reference.size());
  for (const LiveRecord& record : records) {
    auto it = reference.find(record.address);
    ASSERT_NE(it, reference.end());
    EXPECT_EQ(record.size, it->second);
    EXPECT_EQ(record.stack_id, record.address >> 4);
  }
}

// Addresses that differ only in their low 4 bits share a home slot (the
// hash keeps them apart only in its lowest bits): runs of up to 16 keys of
// one home, so removals shift slots by their stored distances and lookups
// pass many slots of other homes. Checked against a reference map after
// every operation that can move slots.
TEST(LiveTableTest, KeysSharingAHomeShiftBackCorrectly) {
  static LiveTable table;
  static BirthSequence sequence;
  std::unordered_map<uintptr_t, uint64_t> reference;
  std::mt19937_64 random(7);
  for (int i = 0; i < 200000; ++i) {
    const uintptr_t address = 0x10000 + (random() % 3000) * 16 + random() % 16;
    auto it = reference.find(address);
    if (random() % 2 == 0) {
      const uint64_t size = random() % 100 + 1;
      reference[address] = size;
      ASSERT_TRUE(table.Insert(MakeRecord(address, size), sequence));
    } else {
      const bool present = it != reference.end();
      if (present) reference.erase(it);
      ASSERT_EQ(table.Remove(address), present) << "at operation " << i;
    }
    if (i % 1000 == 0) {
      // Every key still found where it is (Take then Restore finds it).
      for (const auto& [key, size] : reference) {
        LiveRecord out;
        ASSERT_TRUE(table.Take(key, &out)) << "at operation " << i;
        ASSERT_EQ(out.size, size);
        table.Restore(out);
      }
    }
  }
  EXPECT_EQ(table.Count(), reference.size());
  EXPECT_EQ(HeapCounters(table).live_count, reference.size());
}

TEST(LiveTableTest, ThreadsAllocatingAndFreeingEachOthersRecords) {
  static LiveTable table;
  static BirthSequence sequence;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kPerThread; ++i) {
        uintptr_t address = (uintptr_t{1} << 32) * (t + 1) + uintptr_t(i) * 16;
        table.Insert(MakeRecord(address, 8), sequence);
      }
      // Free the records another thread inserted, all but every tenth.
      int other = (t + 1) % kThreads;
      for (int i = 0; i < kPerThread; ++i) {
        if (i % 10 == 0) continue;
        uintptr_t address = (uintptr_t{1} << 32) * (other + 1) + uintptr_t(i) * 16;
        while (!table.Remove(address)) std::this_thread::yield();  // not inserted yet
      }
    });
  }
  for (auto& thread : threads) thread.join();
  KindCounters c = HeapCounters(table);
  EXPECT_EQ(c.live_count, uint64_t{kThreads} * kPerThread / 10);
  EXPECT_EQ(c.live_bytes, uint64_t{kThreads} * kPerThread / 10 * 8);
  EXPECT_EQ(table.Count(), uint64_t{kThreads} * kPerThread / 10);
  // Every record has its own number.
  std::vector<LiveRecord> records = CopyAll(table);
  std::vector<uint64_t> numbers;
  for (const LiveRecord& r : records) numbers.push_back(r.birth_sequence);
  std::sort(numbers.begin(), numbers.end());
  EXPECT_EQ(std::adjacent_find(numbers.begin(), numbers.end()), numbers.end());
}

// What makes exact diffs exact: a snapshot starts a new generation while it
// holds the table locks; every record inserted after it is numbered at or
// above the number it read, even by a thread that still had numbers left
// in its block, and every record before it below.
TEST(LiveTableTest, RecordsAfterASnapshotAreNumberedAfterIt) {
  static LiveTable table;
  static BirthSequence sequence;
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::thread other([&] {
    for (uintptr_t i = 1; !stop.load(); ++i) {
      table.Insert(MakeRecord((uintptr_t{1} << 40) + i * 16, 8), sequence);
      table.Remove((uintptr_t{1} << 40) + i * 16);
    }
  });
  for (int round = 0; round < 200; ++round) {
    table.Insert(MakeRecord(0x1000 + round * 16, 8), sequence);
    table.LockAll();
    const uint64_t boundary = sequence.StartGeneration();
    std::vector<LiveRecord> before(table.CountLocked());
    before.resize(table.CopyLocked(before.data()));
    table.UnlockAll();
    for (const LiveRecord& r : before) EXPECT_LT(r.birth_sequence, boundary);
    table.Insert(MakeRecord(0x100000 + round * 16, 8), sequence);
    for (const LiveRecord& r : CopyAll(table)) {
      if (r.address == 0x100000u + round * 16) {
        EXPECT_GE(r.birth_sequence, boundary);
      }
    }
    rounds.fetch_add(1);
  }
  stop.store(true);
  other.join();
  EXPECT_EQ(rounds.load(), 200);
}

// A table nothing was inserted into (a GPU API the program never calls) is
// not in use: removes find nothing, snapshots copy nothing. Its first
// insert, made while a snapshot holds every table, waits until that
// snapshot lets go, so it is numbered after the snapshot's generation, as
// every record of a table in use is (the other test above).
TEST(LiveTableTest, ATableComesIntoUseOnlyBetweenSnapshots) {
  static LiveTable table;
  static BirthSequence sequence;
  EXPECT_FALSE(table.in_use());
  EXPECT_FALSE(table.Remove(0x1000));
  LiveRecord taken;
  EXPECT_FALSE(table.Take(0x1000, &taken));
  EXPECT_EQ(table.Count(), 0u);
  EXPECT_EQ(table.MemoryBytes(), 0u);

  table.LockAll();
  const uint64_t boundary = sequence.StartGeneration();
  EXPECT_EQ(table.CountLocked(), 0u);
  std::atomic<bool> inserted{false};
  std::thread first([&] {
    table.Insert(MakeRecord(0x2000, 64, Kind::kVulkanDevice), sequence);
    inserted.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(inserted.load());  // waits for the snapshot
  EXPECT_FALSE(table.in_use());
  table.UnlockAll();
  first.join();
  EXPECT_TRUE(table.in_use());
  const std::vector<LiveRecord> records = CopyAll(table);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_GE(records[0].birth_sequence, boundary);
  EXPECT_TRUE(table.Remove(0x2000));
  EXPECT_EQ(table.Count(), 0u);
}

// The same for each shard of a table in use: a small process's records are
// in few of the 64 shards, and snapshots and forks lock only those. A
// record for a shard that had none, inserted while a snapshot holds the
// table, waits for it and is numbered after it.
TEST(LiveTableTest, AShardComesIntoUseOnlyBetweenSnapshots) {
  static LiveTable table;
  static BirthSequence sequence;
  ASSERT_TRUE(table.Insert(MakeRecord(0x1000, 8), sequence));  // region 0: the first group
  table.LockAll();
  const uint64_t boundary = sequence.StartGeneration();
  std::atomic<bool> inserted{false};
  // Another 64 MiB region: the next region group, whose shards hold nothing.
  const uintptr_t elsewhere = uintptr_t{1} << 32;
  std::thread other([&] {
    table.Insert(MakeRecord(elsewhere, 16), sequence);
    inserted.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(inserted.load());  // waits for the snapshot
  EXPECT_EQ(table.CountLocked(), 1u);
  table.UnlockAll();
  other.join();
  const std::vector<LiveRecord> records = CopyAll(table);
  ASSERT_EQ(records.size(), 2u);
  for (const LiveRecord& record : records) {
    if (record.address == elsewhere) {
      EXPECT_GE(record.birth_sequence, boundary);
    } else {
      EXPECT_LT(record.birth_sequence, boundary);
    }
  }
  EXPECT_TRUE(table.Remove(elsewhere));
  EXPECT_FALSE(table.Remove(elsewhere + (uintptr_t{1} << 30)));  // a third region: no shard
  KindCounters counters = HeapCounters(table);
  EXPECT_EQ(counters.live_count, 1u);
  EXPECT_EQ(counters.live_bytes, 8u);
}

// A fork child forgets a GPU table's records (DiscardInChild) and the
// table is as it was before its first insert, until its next one.
TEST(LiveTableTest, ADiscardedTableIsNotInUseUntilItsNextInsert) {
  static LiveTable table;
  static BirthSequence sequence;
  ASSERT_TRUE(table.Insert(MakeRecord(0x3000, 32, Kind::kVulkanDevice), sequence));
  table.LockAll();
  table.ResetLocksInChild();
  table.DiscardInChild();
  EXPECT_FALSE(table.in_use());
  EXPECT_FALSE(table.Remove(0x3000));
  EXPECT_TRUE(CopyAll(table).empty());
  ASSERT_TRUE(table.Insert(MakeRecord(0x4000, 16, Kind::kVulkanDevice), sequence));
  EXPECT_TRUE(table.in_use());
  const std::vector<LiveRecord> records = CopyAll(table);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].address, 0x4000u);
}

}  // namespace
}  // namespace retain::shim

namespace retain::shim {
namespace {

// The budget the overhead issue sets: at most 40 bytes of shim memory per
// live allocation (records, their index, free slots), at a million.
TEST(LiveTableTest, AMillionRecordsCostAtMostFortyBytesEach) {
  static LiveTable table;
  static BirthSequence sequence;
  constexpr uintptr_t kCount = 1000000;
  for (uintptr_t i = 1; i <= kCount; ++i) {
    ASSERT_TRUE(table.Insert(MakeRecord(0x10000000 + i * 32, 24), sequence));
  }
  ASSERT_EQ(table.Count(), kCount);
  const double per_record = static_cast<double>(table.MemoryBytes()) / kCount;
  EXPECT_LE(per_record, 40.0);
  EXPECT_GE(per_record, 32.0);  // the packed record itself
  // Freed records' slots are reused, not added to, by new blocks of the
  // same 64 MiB region (its shards'; record/region_groups.h): here 288-304
  // MiB, beside the first million's 256-288.
  const size_t before = table.MemoryBytes();
  for (uintptr_t i = 1; i <= kCount / 2; ++i) ASSERT_TRUE(table.Remove(0x10000000 + i * 32));
  for (uintptr_t i = 1; i <= kCount / 2; ++i) {
    ASSERT_TRUE(table.Insert(MakeRecord(0x12000000 + i * 32, 24), sequence));
  }
  EXPECT_EQ(table.MemoryBytes(), before);
}

// The arena's cap reached: an insert that needs memory is dropped and
// counted, never an error for the host, and every counter stays exact: a
// recorded block is live, a dropped one allocated but not live (its free
// finds nothing), and a record that cannot be put back after Take (a failed
// realloc whose slot was taken meanwhile) is counted freed and dropped.
TEST(LiveTableTest, WhenTheArenaRefusesRecordsAreDroppedAndCountedExactly) {
  static LiveTable table;
  static BirthSequence sequence;
  std::unordered_map<uintptr_t, uint64_t> recorded;
  uint64_t allocated = 0;
  uint64_t dropped = 0;
  uint64_t dropped_bytes = 0;
  auto insert = [&](uintptr_t address, uint64_t size) {
    allocated += size;
    if (table.Insert(MakeRecord(address, size), sequence)) {
      recorded[address] = size;
      return true;
    }
    ++dropped;
    dropped_bytes += size;
    return false;
  };
  ASSERT_TRUE(insert(0x10, 8));  // the sequence's first block page mapped
  // Room for every shard's first index and chunk, not for all the records.
  SetArenaCap(ArenaBytes() + (2 << 20));
  uintptr_t refused = 0;
  for (uintptr_t i = 1; i <= 200000; ++i) {
    const uintptr_t address = 0x100000 + i * 16;
    if (!insert(address, i % 100 + 1) && refused == 0) refused = address;
  }
  ASSERT_NE(refused, 0u);
  ASSERT_GT(recorded.size(), 10000u);
  EXPECT_EQ(table.dropped(), dropped);
  EXPECT_EQ(table.dropped_bytes(), dropped_bytes);
  uint64_t live_bytes = 0;
  for (const auto& [address, size] : recorded) live_bytes += size;
  KindCounters c = HeapCounters(table);
  EXPECT_EQ(c.allocated_bytes, allocated);
  EXPECT_EQ(c.allocated_count, recorded.size() + dropped);
  EXPECT_EQ(c.live_bytes, live_bytes);
  EXPECT_EQ(c.live_count, recorded.size());
  EXPECT_EQ(c.freed_count, 0u);
  EXPECT_EQ(table.Count(), recorded.size());
  EXPECT_FALSE(table.Remove(refused));  // never recorded
  EXPECT_EQ(HeapCounters(table).freed_count, 0u);

  // Take records until the refused address fits in the slot one left (the
  // same shard); the taken record then cannot come back.
  uint64_t freed_bytes = 0;
  bool restore_failed = false;
  std::vector<uintptr_t> candidates;
  for (const auto& [address, size] : recorded) candidates.push_back(address);
  for (size_t i = 0; i < candidates.size() && !restore_failed; ++i) {
    LiveRecord taken;
    ASSERT_TRUE(table.Take(candidates[i], &taken));
    const uint64_t size = recorded[candidates[i]];
    recorded.erase(candidates[i]);
    const bool fits = insert(refused, 7);
    const uint64_t dropped_before = table.dropped();
    table.Restore(taken);
    if (table.dropped() == dropped_before) {
      recorded[taken.address] = size;  // put back
      ASSERT_FALSE(fits);
      continue;
    }
    ASSERT_TRUE(fits);
    restore_failed = true;
    ++dropped;
    dropped_bytes += size;
    freed_bytes += size;
  }
  SetArenaCap(0);
  ASSERT_TRUE(restore_failed);
  EXPECT_EQ(table.dropped(), dropped);
  EXPECT_EQ(table.dropped_bytes(), dropped_bytes);
  live_bytes = 0;
  for (const auto& [address, size] : recorded) live_bytes += size;
  c = HeapCounters(table);
  EXPECT_EQ(c.allocated_bytes, allocated);
  EXPECT_EQ(c.live_bytes, live_bytes);
  EXPECT_EQ(c.live_count, recorded.size());
  EXPECT_EQ(c.freed_bytes, freed_bytes);
  EXPECT_EQ(c.freed_count, 1u);
  std::vector<LiveRecord> records = CopyAll(table);
  ASSERT_EQ(records.size(), recorded.size());
  for (const LiveRecord& record : records) {
    auto it = recorded.find(record.address);
    ASSERT_NE(it, recorded.end());
    EXPECT_EQ(record.size, it->second);
  }
}

// Thread and birth time are kept through the birth sequence's block, to its
// time unit, and survive Take/Restore (realloc that fails).
TEST(LiveTableTest, ThreadAndTimeComeBackThroughTheBlock) {
  static LiveTable table;
  static BirthSequence sequence;
  LiveRecord record = MakeRecord(0x4000, 64);
  record.thread_id = 4242;
  record.birth_time_us = 123456789;
  record.flags = 0x0203;
  record.kind = Kind::kVulkanDevice;
  record.attribution = 3;
  record.tag_id = 77;
  ASSERT_TRUE(table.Insert(record, sequence));
  LiveRecord later = MakeRecord(0x5000, 8);
  later.thread_id = 4242;
  later.birth_time_us = 123456789 + 10 * 1000 * 1000;  // 10 s later, same block
  ASSERT_TRUE(table.Insert(later, sequence));
  const uint64_t unit = BirthSequence::kTimeUnitUs;
  for (const LiveRecord& r : CopyAll(table)) {
    EXPECT_EQ(r.thread_id, 4242u);
    const uint64_t want = r.address == 0x4000 ? record.birth_time_us : later.birth_time_us;
    EXPECT_LE(r.birth_time_us, want);
    EXPECT_GT(r.birth_time_us + unit, want);
  }
  LiveRecord taken;
  ASSERT_TRUE(table.Take(0x4000, &taken));
  EXPECT_EQ(taken.thread_id, 4242u);
  EXPECT_EQ(taken.flags, 0x0203);
  EXPECT_EQ(taken.kind, Kind::kVulkanDevice);
  EXPECT_EQ(taken.attribution, 3);
  EXPECT_EQ(taken.tag_id, 77u);
  EXPECT_EQ(taken.size, 64u);
  table.Restore(taken);
  bool found = false;
  for (const LiveRecord& r : CopyAll(table)) {
    if (r.address != 0x4000) continue;
    found = true;
    EXPECT_EQ(r.birth_sequence, taken.birth_sequence);
    EXPECT_EQ(r.birth_time_us, taken.birth_time_us);
    EXPECT_EQ(r.thread_id, 4242u);
  }
  EXPECT_TRUE(found);
  // A record from another thread, or past the block's time window, starts
  // a new block with its own thread and time.
  LiveRecord other = MakeRecord(0x6000, 8);
  other.thread_id = 99;
  other.birth_time_us = 200000000000;  // hours later
  ASSERT_TRUE(table.Insert(other, sequence));
  for (const LiveRecord& r : CopyAll(table)) {
    if (r.address != 0x6000) continue;
    EXPECT_EQ(r.thread_id, 99u);
    EXPECT_LE(r.birth_time_us, other.birth_time_us);
    EXPECT_GT(r.birth_time_us + unit, other.birth_time_us);
  }
}

// The device column (GPU records): a record keeps its device through
// Insert, Take, Restore and the snapshot copy; a record placed later in the
// slot of a freed one has none of its device; a table whose records have no
// device (the heap's) never maps the column.
TEST(LiveTableDeviceTest, RecordsKeepTheirDeviceAndSlotsForgetIt) {
  static LiveTable heap;
  static LiveTable gpu;
  static BirthSequence sequence;
  for (uintptr_t i = 1; i <= 1000; ++i) ASSERT_TRUE(heap.Insert(MakeRecord(i << 4, 16), sequence));
  const size_t heap_bytes = heap.MemoryBytes();
  for (const LiveRecord& record : CopyAll(heap)) EXPECT_EQ(record.device, 0u);

  LiveRecord on_two = MakeRecord(0x7000, 4096, Kind::kCudaDevice);
  on_two.device = 2;
  LiveRecord on_none = MakeRecord(0x8000, 4096, Kind::kCudaDevice);
  LiveRecord on_63 = MakeRecord(0x9000, 4096, Kind::kHipDevice);
  on_63.device = 63;
  ASSERT_TRUE(gpu.Insert(on_two, sequence));
  ASSERT_TRUE(gpu.Insert(on_none, sequence));
  ASSERT_TRUE(gpu.Insert(on_63, sequence));
  std::unordered_map<uintptr_t, uint8_t> device_of;
  for (const LiveRecord& record : CopyAll(gpu)) device_of[record.address] = record.device;
  EXPECT_EQ(device_of[0x7000], 2u);
  EXPECT_EQ(device_of[0x8000], 0u);
  EXPECT_EQ(device_of[0x9000], 63u);
  EXPECT_GT(gpu.MemoryBytes(), 0u);

  LiveRecord taken;
  ASSERT_TRUE(gpu.Take(0x7000, &taken));
  EXPECT_EQ(taken.device, 2u);
  gpu.Restore(taken);  // a failed release: it comes back with its device
  ASSERT_TRUE(gpu.Take(0x7000, &taken));
  EXPECT_EQ(taken.device, 2u);
  gpu.CountFreed(taken);
  ASSERT_TRUE(gpu.Remove(0x9000));
  // New records reuse the freed slots: they must not inherit a device.
  ASSERT_TRUE(gpu.Insert(MakeRecord(0x7000, 4096, Kind::kCudaDevice), sequence));
  ASSERT_TRUE(gpu.Insert(MakeRecord(0x9000, 4096, Kind::kHipDevice), sequence));
  for (const LiveRecord& record : CopyAll(gpu)) {
    EXPECT_EQ(record.device, 0u) << std::hex << record.address;
  }
  // The heap's table kept its size: no column for records without a device.
  EXPECT_EQ(heap.MemoryBytes(), heap_bytes);
}

// Many records with devices, in every shard: the column grows with the
// records it holds and every record reads back its own device.
TEST(LiveTableDeviceTest, TheColumnGrowsWithTheRecords) {
  static LiveTable gpu;
  static BirthSequence sequence;
  constexpr uintptr_t kCount = 50000;
  for (uintptr_t i = 1; i <= kCount; ++i) {
    LiveRecord record = MakeRecord(i << 12, 64, Kind::kVulkanDevice);
    record.device = static_cast<uint8_t>(i % 63 + 1);
    ASSERT_TRUE(gpu.Insert(record, sequence));
  }
  size_t seen = 0;
  for (const LiveRecord& record : CopyAll(gpu)) {
    EXPECT_EQ(record.device, (record.address >> 12) % 63 + 1);
    ++seen;
  }
  EXPECT_EQ(seen, kCount);
}

}  // namespace
}  // namespace retain::shim
