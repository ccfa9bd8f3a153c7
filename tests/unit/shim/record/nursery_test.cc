// Nurseries: per-thread rings of young heap records in front of a LiveTable.
// Each test runs its rings' users on threads of its own (a thread keeps one
// ring, of the first registry it allocates through) and checks where the
// records are, their birth numbers, and the counters, exactly.
#include "record/nursery.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace retain::shim {
namespace {

LiveRecord MakeRecord(uintptr_t address, uint64_t size, uint32_t tag_id = 0) {
  LiveRecord record{};
  record.address = address;
  record.size = size;
  record.kind = Kind::kHeap;
  record.stack_id = static_cast<uint32_t>(address >> 4);
  record.tag_id = tag_id;
  record.thread_id = 4242;
  record.birth_time_us = 3 * BirthSequence::kTimeUnitUs;  // a whole unit: kept exactly
  return record;
}

// A table with rings, as the shim's heap has. Static storage: the classes
// are zero-initialised by design.
struct Heap {
  LiveTable table;
  BirthSequence births;
  Nurseries rings;

  void Start() { rings.Attach(&table, &births); }
  // As the recorder allocates: into this thread's ring.
  void Allocate(uintptr_t address, uint64_t size, uint32_t tag_id = 0) {
    Nursery* ring = rings.Mine();
    ASSERT_NE(ring, nullptr);
    uintptr_t dropped = 1;
    EXPECT_TRUE(rings.Insert(*ring, MakeRecord(address, size, tag_id), &dropped));
    EXPECT_EQ(dropped, 0u);
  }
  bool Free(uintptr_t address) { return rings.Remove(rings.MineIfAny(), address); }
  KindCounters Counters() {
    KindCounters counters[kKindCount] = {};
    table.SumCounters(counters);
    return counters[KindIndex(Kind::kHeap)];
  }
  std::vector<LiveRecord> Copy() {
    table.LockAll();
    std::vector<LiveRecord> records(table.CountLocked());
    records.resize(table.CopyLocked(records.data()));
    table.UnlockAll();
    std::sort(records.begin(), records.end(),
              [](const LiveRecord& a, const LiveRecord& b) { return a.address < b.address; });
    return records;
  }
};

template <typename Body>
void OnNewThread(Body body) {
  std::thread thread(body);
  thread.join();
}

TEST(NurseryTest, YoungBlocksFreedOnTheirThreadStayInTheRing) {
  static Heap heap;
  heap.Start();
  std::thread thread([] {
    for (uintptr_t i = 1; i <= 10; ++i) heap.Allocate(0x1000 * i, i);
    for (uintptr_t i = 1; i <= 10; i += 2) EXPECT_TRUE(heap.Free(0x1000 * i));
    EXPECT_FALSE(heap.Free(0x1000));  // freed already
    EXPECT_EQ(heap.rings.Count(), 5u);
    EXPECT_EQ(heap.table.Count(), 5u);  // all of them in the ring
    const KindCounters c = heap.Counters();
    EXPECT_EQ(c.allocated_count, 10u);
    EXPECT_EQ(c.allocated_bytes, 55u);
    EXPECT_EQ(c.freed_count, 5u);
    EXPECT_EQ(c.freed_bytes, 1u + 3 + 5 + 7 + 9);
    EXPECT_EQ(c.live_count, 5u);
    EXPECT_EQ(c.live_bytes, 2u + 4 + 6 + 8 + 10);
    const std::vector<LiveRecord> records = heap.Copy();
    ASSERT_EQ(records.size(), 5u);
    for (size_t k = 0; k < records.size(); ++k) {
      EXPECT_EQ(records[k].address, 0x1000 * (2 * k + 2));
      EXPECT_EQ(records[k].size, 2 * k + 2);
      EXPECT_EQ(records[k].stack_id, records[k].address >> 4);
      // Through the birth block, as the table's records.
      EXPECT_EQ(records[k].thread_id, 4242u);
      EXPECT_EQ(records[k].birth_time_us, 3 * BirthSequence::kTimeUnitUs);
    }
  });
  thread.join();
}

// A record that outlives 16 allocations moves to the table, with the birth
// number it was given in the ring: numbers stay in allocation order.
TEST(NurseryTest, AnOldRecordMovesToTheTableKeepingItsBirth) {
  static Heap heap;
  heap.Start();
  OnNewThread([] {
    const uint64_t first = heap.births.Peek();
    for (uintptr_t i = 0; i < 40; ++i) heap.Allocate(0x100000 + 0x40 * i, 8);
    EXPECT_EQ(heap.rings.Count(), static_cast<size_t>(Nursery::kSlots));
    EXPECT_EQ(heap.table.Count(), 40u);
    const std::vector<LiveRecord> records = heap.Copy();
    ASSERT_EQ(records.size(), 40u);
    for (uintptr_t i = 0; i < 40; ++i) {
      EXPECT_EQ(records[i].address, 0x100000 + 0x40 * i);
      EXPECT_EQ(records[i].birth_sequence, first + i) << i;
    }
    // Freed from the table and from the ring alike.
    EXPECT_TRUE(heap.Free(0x100000));
    EXPECT_TRUE(heap.Free(0x100000 + 0x40 * 39));
    const KindCounters c = heap.Counters();
    EXPECT_EQ(c.allocated_count, 40u);
    EXPECT_EQ(c.allocated_bytes, 320u);
    EXPECT_EQ(c.freed_count, 2u);
    EXPECT_EQ(c.live_count, 38u);
    EXPECT_EQ(c.live_bytes, 304u);
  });
}

TEST(NurseryTest, AnotherThreadFreesAYoungBlock) {
  static Heap heap;
  heap.Start();
  OnNewThread([] { heap.Allocate(0x7000, 70); });  // its ring goes back at exit...
  EXPECT_EQ(heap.rings.Count(), 0u);               // ...its record to the table
  std::atomic<int> step{0};
  std::thread owner([&] {
    heap.Allocate(0x8000, 80);
    step = 1;
    while (step != 2) std::this_thread::yield();  // keeps its ring while the other frees
  });
  while (step != 1) std::this_thread::yield();
  EXPECT_EQ(heap.rings.Count(), 1u);
  OnNewThread([] {
    EXPECT_TRUE(heap.Free(0x8000));  // in the other thread's ring
    EXPECT_TRUE(heap.Free(0x7000));  // in the table
    EXPECT_FALSE(heap.Free(0x9000));
  });
  step = 2;
  owner.join();
  const KindCounters c = heap.Counters();
  EXPECT_EQ(c.live_count, 0u);
  EXPECT_EQ(c.freed_bytes, 150u);
  EXPECT_EQ(heap.table.Count(), 0u);
}

TEST(NurseryTest, AnExitingThreadsRingIsGivenBackAndReused) {
  static Heap heap;
  heap.Start();
  OnNewThread([] {
    for (uintptr_t i = 1; i <= 5; ++i) heap.Allocate(0x2000 * i, 4);
  });
  EXPECT_EQ(heap.rings.Count(), 0u);
  EXPECT_EQ(heap.table.Count(), 5u);
  const size_t memory = heap.table.MemoryBytes();
  OnNewThread([] { heap.Allocate(0x20000, 4); });
  OnNewThread([] { heap.Allocate(0x30000, 4); });
  EXPECT_EQ(heap.table.MemoryBytes(), memory);  // the one ring, reused
  EXPECT_EQ(heap.table.Count(), 7u);
  EXPECT_EQ(heap.Counters().live_bytes, 28u);
}

TEST(NurseryTest, TakeFromARingThenRestoreOrCountFreed) {
  static Heap heap;
  heap.Start();
  OnNewThread([] {
    heap.Allocate(0x5000, 64);
    LiveRecord taken;
    ASSERT_TRUE(heap.rings.Take(heap.rings.MineIfAny(), 0x5000, &taken));
    EXPECT_EQ(taken.size, 64u);
    EXPECT_EQ(taken.thread_id, 4242u);
    EXPECT_EQ(taken.birth_time_us, 3 * BirthSequence::kTimeUnitUs);
    EXPECT_EQ(heap.Counters().live_bytes, 0u);
    EXPECT_EQ(heap.Counters().freed_bytes, 0u);  // not yet: realloc may fail
    heap.table.Restore(taken);                   // back, into the table
    EXPECT_EQ(heap.Counters().live_bytes, 64u);
    EXPECT_EQ(heap.rings.Count(), 0u);
    ASSERT_TRUE(heap.rings.Take(heap.rings.MineIfAny(), 0x5000, &taken));
    heap.table.CountFreed(taken);
    const KindCounters c = heap.Counters();
    EXPECT_EQ(c.live_bytes, 0u);
    EXPECT_EQ(c.allocated_bytes, 64u);
    EXPECT_EQ(c.freed_bytes, 64u);
    EXPECT_EQ(c.freed_count, 1u);
  });
}

// A free the shim did not see leaves two records for one address: the
// next free there (both in a ring) or the newer one's move to the table
// (the older there) drops the older as a missed free.
TEST(NurseryTest, TwoRecordsForOneAddressKeepTheNewer) {
  static Heap heap;
  heap.Start();
  OnNewThread([] {
    heap.Allocate(0x9000, 10);
    heap.Allocate(0x9000, 20);  // the free of the first was missed
    EXPECT_EQ(heap.Counters().live_count, 2u);
    EXPECT_TRUE(heap.Free(0x9000));
    EXPECT_EQ(heap.table.missed_frees(), 1u);
    KindCounters c = heap.Counters();
    EXPECT_EQ(c.live_count, 0u);
    EXPECT_EQ(c.freed_bytes, 30u);
    // The older in the table, the newer moving there: the newer stays.
    heap.Allocate(0xa000, 1);
    for (uintptr_t i = 0; i < 16; ++i) heap.Allocate(0x200000 + 0x40 * i, 1);
    heap.Allocate(0xa000, 2);
    for (uintptr_t i = 16; i < 32; ++i) heap.Allocate(0x200000 + 0x40 * i, 1);
    EXPECT_EQ(heap.table.missed_frees(), 2u);
    const std::vector<LiveRecord> records = heap.Copy();
    ASSERT_EQ(records.size(), 33u);  // 0xa000 once, and the 32 others
    EXPECT_EQ(records[0].address, 0xa000u);
    EXPECT_EQ(records[0].size, 2u);
    c = heap.Counters();
    EXPECT_EQ(c.live_count, 33u);
    EXPECT_EQ(c.live_bytes, 34u);
  });
}

TEST(NurseryTest, TagsInRingsAreVisited) {
  static Heap heap;
  heap.Start();
  OnNewThread([] {
    heap.Allocate(0x1000, 1, 7);
    heap.Allocate(0x2000, 1, 0);
    heap.Allocate(0x3000, 1, 9);
    static uint64_t sum;
    sum = 0;
    const size_t seen = heap.table.VisitTags([](uint32_t tag, uint64_t) { sum += tag; }, 0);
    EXPECT_EQ(seen, 3u);
    EXPECT_EQ(sum, 16u);
  });
}

// What makes exact diffs exact holds with rings: a snapshot (every lock,
// then a new generation) copies every record numbered below its boundary,
// and each later one is numbered at or above it.
TEST(NurseryTest, RecordsAfterASnapshotAreNumberedAfterIt) {
  static Heap heap;
  heap.Start();
  std::atomic<bool> stop{false};
  std::thread other([&] {
    for (uintptr_t i = 1; !stop.load(); ++i) {
      heap.Allocate((uintptr_t{1} << 40) + (i % 64) * 16 + (i / 64 % 2) * 4096, 8);
      if (i % 3 != 0) heap.Free((uintptr_t{1} << 40) + (i % 64) * 16 + (i / 64 % 2) * 4096);
    }
  });
  OnNewThread([] {
    for (int round = 0; round < 200; ++round) {
      heap.Allocate(0x1000 + round * 16, 8);
      heap.table.LockAll();
      const uint64_t boundary = heap.births.StartGeneration();
      std::vector<LiveRecord> before(heap.table.CountLocked());
      before.resize(heap.table.CopyLocked(before.data()));
      heap.table.UnlockAll();
      bool found = false;
      for (const LiveRecord& r : before) {
        EXPECT_LT(r.birth_sequence, boundary);
        found |= r.address == 0x1000u + round * 16;
      }
      EXPECT_TRUE(found) << round;
      heap.Allocate(0x100000 + round * 16, 8);
      for (const LiveRecord& r : heap.Copy()) {
        if (r.address == 0x100000u + round * 16) {
          EXPECT_GE(r.birth_sequence, boundary);
        }
      }
    }
  });
  stop.store(true);
  other.join();
}

// A ring's record moving to the table runs under the ring's lock, and may
// be the first record of its shard, which then comes into use under the
// table's in-use lock; a snapshot takes the rings before that lock, never
// the other way round. Each round's records are in regions of their own, so
// that 64 shards come into use while snapshots are taken: with the two
// locks taken in the other order this test hangs.
TEST(NurseryTest, RecordsMovingIntoNewShardsDoNotDeadlockWithSnapshots) {
  for (int round = 0; round < 20; ++round) {
    auto* heap = new Heap();  // zeroed, as static storage would be
    heap->Start();
    std::atomic<bool> done{false};
    std::thread allocator([&] {
      for (uintptr_t i = 1; i <= 2000; ++i) heap->Allocate(i << RegionGroups::kRegionShift, 8);
      done.store(true);
    });
    size_t snapshots = 0;
    while (!done.load()) {
      heap->table.LockAll();
      snapshots += heap->table.CountLocked() > 0 ? 1 : 0;
      heap->table.UnlockAll();
    }
    allocator.join();
    EXPECT_EQ(heap->Copy().size(), 2000u) << round;
    EXPECT_EQ(heap->Counters().live_count, 2000u);
  }
}

// Producers hand young blocks to consumers, which free them while the
// producers' rings keep moving older records to the table: every free finds
// its record exactly once, wherever it is at that moment.
TEST(NurseryTest, BlocksHandedToOtherThreadsAreFreedExactlyOnce) {
  static Heap heap;
  heap.Start();
  constexpr int kProducers = 2;
  constexpr int kConsumers = 2;
  constexpr uintptr_t kPerProducer = 100000;
  std::mutex mutex;
  std::deque<uintptr_t> queue;
  std::atomic<int> producing{kProducers};
  std::atomic<uint64_t> unknown{0};
  std::atomic<uint64_t> kept{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (uintptr_t i = 0; i < kPerProducer; ++i) {
        const uintptr_t address = (static_cast<uintptr_t>(p + 1) << 36) + i * 16;
        heap.Allocate(address, 3);
        if (i % 3 == 0) {  // freed here, young or not
          if (!heap.Free(address)) unknown++;
        } else if (i % 3 == 1) {
          std::lock_guard<std::mutex> hold(mutex);
          queue.push_back(address);
        } else {
          kept++;
        }
      }
      producing--;
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      for (;;) {
        uintptr_t address = 0;
        {
          std::lock_guard<std::mutex> hold(mutex);
          if (!queue.empty()) {
            address = queue.front();
            queue.pop_front();
          }
        }
        if (address == 0) {
          if (producing == 0) {
            std::lock_guard<std::mutex> hold(mutex);
            if (queue.empty()) return;
          }
          std::this_thread::yield();
          continue;
        }
        if (!heap.Free(address)) unknown++;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(unknown.load(), 0u);
  const KindCounters c = heap.Counters();
  EXPECT_EQ(c.allocated_count, kProducers * kPerProducer);
  EXPECT_EQ(c.live_count, kept.load());
  EXPECT_EQ(c.live_bytes, kept.load() * 3);
  EXPECT_EQ(heap.table.Count(), kept.load());
  EXPECT_EQ(heap.rings.Count(), 0u);  // every thread gave its ring back
}

// In a fork child only the forking thread exists: the other threads' rings
// move to the table there, and their records stay live.
TEST(NurseryTest, AForkChildTakesOtherThreadsRingsIntoTheTable) {
  static Heap heap;
  heap.Start();
  std::atomic<int> step{0};
  std::thread owner([&] {
    for (uintptr_t i = 1; i <= 3; ++i) heap.Allocate(0x4000 * i, 5);
    step = 1;
    while (step != 2) std::this_thread::yield();
  });
  while (step != 1) std::this_thread::yield();
  heap.table.LockAll();  // as the shim's fork handler does
  const pid_t child = fork();
  if (child == 0) {
    heap.table.ResetLocksInChild();
    heap.rings.ReleaseOthersInChild();
    const bool ok = heap.rings.Count() == 0 && heap.table.Count() == 3 &&
                    heap.Counters().live_bytes == 15 && heap.Free(0x4000);
    _exit(ok ? 0 : 1);
  }
  heap.table.UnlockAll();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(heap.rings.Count(), 3u);  // the parent's thread still has its ring
  step = 2;
  owner.join();
}

}  // namespace
}  // namespace retain::shim
