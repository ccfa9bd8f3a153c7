// live_table: every live allocation the shim recorded, keyed by address.
//
// Sharded by a hash of the address; each shard is an open-addressing table
// (linear probing, backward-shift deletion, no tombstones) under its own
// SpinLock, so threads allocating at different addresses rarely meet and no
// lock is global. Slots live in arena pages (MapPages), never the host heap.
// A shard grows by doubling; when the arena refuses, the insert is dropped
// and counted (the table degrades, it never fails the host).
//
// Thread-safe. Never allocates from the host heap, never calls out while
// holding a shard lock, never clobbers errno. Not async-signal-safe.
#ifndef RETAIN_SHIM_SRC_LIVE_TABLE_H_
#define RETAIN_SHIM_SRC_LIVE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "birth_sequence.h"
#include "kinds.h"
#include "spin_lock.h"

namespace retain::shim {

struct LiveRecord {
  uintptr_t address;  // 0 marks an empty slot
  uint64_t size;
  uint64_t birth_sequence;
  uint64_t birth_time_us;
  uint32_t stack_id;
  uint32_t thread_id;
  uint32_t tag_id;
  Kind kind;
  uint8_t attribution;  // retain.v1.Attribution of tag_id
  uint16_t flags;       // kind-specific (AllocationBlock.flags in retain.proto)
};

// Trivially constructible on purpose: a static instance is zero-filled
// storage with no initialiser to run (hooks may run before this library's
// initialisers do). Create instances only with static storage or `new
// LiveTable()` (zeroed).
class LiveTable {
 public:
  static constexpr int kShardBits = 6;
  static constexpr int kShardCount = 1 << kShardBits;

  // Inserts `record` (address != 0) and counts it as allocated. Its
  // birth_sequence is taken from `births` under the shard lock (see
  // birth_sequence.h for why that makes snapshots exact). An existing record at the same
  // address (a free the shim never saw) is replaced and counted as freed.
  // Returns false when the record was dropped for lack of memory (still
  // counted as allocated).
  bool Insert(LiveRecord record, BirthSequence& births);

  // Removes the record at `address` and counts it as freed. Returns false
  // (and counts nothing) when there is none.
  bool Remove(uintptr_t address);

  // Removes the record at `address` without counting it, copying it to
  // `*out`: for realloc, which must free the old record before the real call
  // and may have to put it back (Restore) when that call fails.
  bool Take(uintptr_t address, LiveRecord* out);
  void Restore(const LiveRecord& record);     // undoes Take
  void CountFreed(const LiveRecord& record);  // completes Take

  // Every shard's lock, in order: the table cannot change until UnlockAll().
  // The snapshot writer holds them while it copies, so a snapshot is one
  // point in time. Also used around fork().
  void LockAll();
  void UnlockAll();
  void ResetLocksInChild();

  // With LockAll() held: the number of records, a copy of them into `out`
  // (capacity at least CountLocked()), and the counters.
  size_t CountLocked() const;
  size_t CopyLocked(LiveRecord* out) const;
  void SumCountersLocked(KindCounters* counters) const;

  // Number of records now (each shard's count read under its lock).
  size_t Count();

  // Sums the per-kind counters of all shards into counters[kKindCount].
  void SumCounters(KindCounters* counters);

  // Records replaced by an allocation at the same address: a free the shim
  // did not see (glibc freeing internally, or a free from a signal handler
  // interrupting the shim).
  uint64_t missed_frees() const { return __atomic_load_n(&missed_frees_, __ATOMIC_RELAXED); }

  // Allocations not recorded for lack of memory, and their bytes.
  uint64_t dropped() const { return __atomic_load_n(&dropped_, __ATOMIC_RELAXED); }
  uint64_t dropped_bytes() const { return __atomic_load_n(&dropped_bytes_, __ATOMIC_RELAXED); }


 private:
  struct alignas(64) Shard {
    SpinLock lock;
    uint32_t capacity;  // power of two, 0 before the first insert
    uint32_t count;
    LiveRecord* slots;
    KindCounters counters[kKindCount];
  };

  static uint64_t Hash(uintptr_t address);
  Shard& ShardFor(uint64_t hash) { return shards_[hash >> (64 - kShardBits)]; }
  static bool Grow(Shard& shard);
  static LiveRecord* Find(Shard& shard, uint64_t hash, uintptr_t address);
  static void EraseSlot(Shard& shard, LiveRecord* slot);
  static void PlaceNew(Shard& shard, uint64_t hash, const LiveRecord& record);

  Shard shards_[kShardCount];
  uint64_t dropped_;  // atomic builtins, see SpinLock::locked_
  uint64_t dropped_bytes_;
  uint64_t missed_frees_;
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_LIVE_TABLE_H_
