// live_table: every live allocation the shim recorded, keyed by address.
//
// Sharded by the address's 64 MiB region (a group of 4 shards per region,
// record/region_groups.h) and a hash of the address within the group, each
// shard under its own SpinLock: no lock is global, and a thread allocating
// from its own arena keeps to its own shards, whose locks and lines stay in
// its core's cache. A shard's freed records are reused by blocks of its own
// group only: a live set that moves from one region to another keeps the
// first one's record memory (the table follows the sum of the groups'
// peaks, not the overall peak). A shard keeps its records densely, 32 bytes each (PackedRecord:
// the thread and the birth time's high part live in the birth sequence's
// block, see record/birth_sequence.h), in 8 KiB chunks with a free list, and finds
// them through an open-addressing index of 4-byte slots (linear probing,
// backward-shift deletion, no tombstones) holding the record's number, 4
// bits of the address's hash and the slot's distance from its key's home
// slot (0-14, or "15 or more"), so a probe touches a record only for a slot
// of the same home and hash bits, and a removal shifts the run back without
// reading records (except for slots 15 or more from home). The index grows by half when 3/4 full:
// about 32 + 4/load (load 1/2..3/4) = 37..40 bytes per live record. Everything lives in arena pages
// (MapPages), never the host heap. When the arena refuses, the insert is dropped and counted (the
// table degrades, it never fails the host).
//
// Thread-safe. Never allocates from the host heap, never calls out while
// holding a shard lock, never clobbers errno. Not async-signal-safe.
#ifndef RETAIN_SHIM_SRC_RECORD_LIVE_TABLE_H_
#define RETAIN_SHIM_SRC_RECORD_LIVE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/spin_lock.h"
#include "record/birth_sequence.h"
#include "record/kinds.h"
#include "record/region_groups.h"

namespace retain::shim {

class Nurseries;

// A record as the recorder builds it and the snapshot writer reads it.
struct LiveRecord {
  uintptr_t address;  // never 0
  uint64_t size;      // up to 2^40 - 1 (larger sizes are kept as that)
  uint64_t birth_sequence;
  uint64_t birth_time_us;  // to BirthSequence::kTimeUnitUs
  uint32_t stack_id;
  uint32_t thread_id;
  uint32_t tag_id;
  Kind kind;
  uint8_t attribution : 2;  // retain.v1.Attribution of tag_id
  // GPU records: the device's id (record/gpu_devices.h), 0 for none. Six
  // bits beside the attribution's two keep the record 48 bytes (snapshots
  // copy every record).
  uint8_t device : 6;
  uint16_t flags;  // kind-specific (AllocationBlock.flags in retain.proto)
};
static_assert(sizeof(LiveRecord) == 48, "LiveRecord grew: every snapshot copies each one");

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
  // record/birth_sequence.h for why that makes snapshots exact); its thread_id and
  // birth_time_us are kept through that sequence's block. An existing
  // record at the same address (a free the shim never saw) is replaced and
  // counted as freed. Returns false when the record was dropped for lack of
  // memory (still counted as allocated).
  bool Insert(const LiveRecord& record, BirthSequence& births);

  // Where an address's record lives: its shard and hash, computed once for
  // a caller that both prefetches and inserts (the region lookup and the
  // hash are ~25 instructions).
  struct Spot;  // {shard, hash}: defined below, after the private Shard it points to
  Spot Locate(uintptr_t address);
  // Insert, for a `spot` that Locate gave for record.address.
  bool Insert(const LiveRecord& record, BirthSequence& births, const Spot& spot);

  // Removes the record at `address` and counts it as freed. Returns false
  // (and counts nothing) when there is none.
  bool Remove(uintptr_t address);

  // The heap's table: young records live in per-thread rings first
  // (record/nursery.h), which the whole-table operations below (LockAll,
  // CopyLocked, the counters, VisitTags...) include. Call once, before
  // use; `births` numbers the rings' records.
  void UseNurseries(Nurseries* nurseries, BirthSequence& births);
  // A record born in a ring moves here with its birth number and its time
  // offset in that number's block, counted as allocated here (the ring
  // counts it as moved). Another record at the address (a free the shim
  // did not see) is a missed free: the one born later stays. Returns false
  // when it was dropped for lack of memory (counted as Insert counts it).
  bool Adopt(const LiveRecord& record, uint16_t time_offset);
  // A record a ring handed to realloc (Nurseries::Take): counted as
  // allocated and detached here, so that Restore or CountFreed completes it.
  void AdoptDetached(const LiveRecord& record);
  void CountMissedFree() { __atomic_fetch_add(&missed_frees_, 1, __ATOMIC_RELAXED); }

  // Asks the CPU to fetch the index line an Insert at `spot` will probe
  // first, without the lock: the recorder calls it before the stack walk,
  // so the line arrives while the walk runs. Reads the shard's index
  // pointer and size racily (a prefetch of a stale address is harmless: it
  // never faults); writes nothing.
  void Prefetch(const Spot& spot);

  // Removes the record at `address` without counting it, copying it to
  // `*out`: for realloc, which must free the old record before the real call
  // and may have to put it back (Restore) when that call fails.
  bool Take(uintptr_t address, LiveRecord* out);
  // Undoes Take. The record keeps its birth number: if a snapshot was taken
  // between Take and Restore (a realloc or GPU release that failed), that
  // snapshot missed the record and a later exact diff counts it as older
  // than the snapshot. A failed release racing a snapshot is that rare.
  void Restore(const LiveRecord& record);
  void CountFreed(const LiveRecord& record);  // completes Take

  // Whether a record was ever inserted (or the table was given nurseries):
  // whether any shard is in use.
  // A table never in use has nothing to remove, count or copy, and the
  // whole-table operations below leave its shards untouched: a process
  // that never allocates GPU memory faults none of its GPU tables' pages in
  // at a snapshot or a fork (four tables of 48 KiB, every page written by
  // LockAll, and written again by both sides after a fork). The same holds
  // for each shard of a table in use: a small process's heap records are
  // in a few of its 64 shards (one region group's), and LockAll and the
  // fork handlers touch those only.
  bool in_use() const { return nurseries_ != nullptr || ShardsInUse() != 0; }

  // Every shard's lock, in order: the table cannot change until UnlockAll().
  // The snapshot writer holds them while it copies, so a snapshot is one
  // point in time. Also used around fork(). A table or shard not in use
  // stays so until UnlockAll (its first insert waits): a snapshot's birth
  // generation then covers it too.
  void LockAll();
  void UnlockAll();
  void ResetLocksInChild();
  // In a fork child, after ResetLocksInChild: forgets every record and
  // counter (GPU memory is not inherited by a child), giving the memory
  // back, and is no longer in use. No other thread may use the table
  // meanwhile.
  void DiscardInChild();

  // With LockAll() held: the number of records, a copy of them into `out`
  // (capacity at least CountLocked()), and the counters.
  size_t CountLocked() const;
  size_t CopyLocked(LiveRecord* out) const;
  void SumCountersLocked(KindCounters* counters) const;

  // Calls visit(tag_id, argument) for each record with a request tag, one
  // shard at a time under that shard's lock (visit must not touch this
  // table). Returns the number of records seen.
  size_t VisitTags(void (*visit)(uint32_t tag_id, uint64_t argument), uint64_t argument);

  // Number of records now (each shard's count read under its lock).
  size_t Count();

  // Sums the per-kind counters of all shards into counters[kKindCount].
  void SumCounters(KindCounters* counters);

  // Bytes of arena memory the table holds now (records, free slots, index).
  size_t MemoryBytes();

  // Records replaced by an allocation at the same address: a free the shim
  // did not see (glibc freeing internally, or a free from a signal handler
  // interrupting the shim).
  uint64_t missed_frees() const { return __atomic_load_n(&missed_frees_, __ATOMIC_RELAXED); }

  // Allocations not recorded for lack of memory, and their bytes.
  uint64_t dropped() const { return __atomic_load_n(&dropped_, __ATOMIC_RELAXED); }
  uint64_t dropped_bytes() const { return __atomic_load_n(&dropped_bytes_, __ATOMIC_RELAXED); }

 private:
  // 32 bytes. A free record has address 0 and the next free record's
  // number + 1 in size_word.
  struct PackedRecord {
    uint64_t address;
    uint64_t size_word;      // size:40 | flags:16 | kind:6 | attribution:2
    uint64_t sequence_word;  // birth_sequence:48 | time offset in its block:16
    uint32_t stack_id;
    uint32_t tag_id;
  };
  static constexpr int kChunkBits = 8;  // records per chunk: 256 (8 KiB)
  // Per shard: an index slot keeps the record's number + 1 in 24 bits.
  static constexpr uint32_t kMaxRecords = (1u << 24) - 1;

  // A shard's counters of one kind: KindCounters with live derived, so
  // that an insert and a free each update two counters, not four:
  // live = allocated - freed - detached, where `detached` is what was
  // allocated and is neither live nor freed (inserts dropped, records taken
  // by Take until Restore or CountFreed). Every operation moves the derived
  // live by what it moved live by before: the sums are those of KindCounters
  // kept directly.
  struct ShardCounters {
    uint64_t allocated_bytes;
    uint64_t allocated_count;
    uint64_t freed_bytes;
    uint64_t freed_count;
    uint64_t detached_bytes;
    uint64_t detached_count;
  };
  static void AddTo(const ShardCounters& shard_counters, KindCounters* counters);

  struct alignas(64) Shard {
    SpinLock lock;
    uint32_t count;           // live records
    uint32_t index_capacity;  // 0 before the first insert
    // 3/4 of index_capacity: an insert at this count grows the index first
    // (0 before the first insert, so that one makes the index).
    uint32_t grow_at;
    uint32_t* index;     // 0 = empty, else (record number + 1) | distance << 24 | hash bits << 28
    uint32_t used;       // records ever handed out (live or on the free list)
    uint32_t free_head;  // first free record's number + 1; 0 = none
    uint32_t chunk_capacity;  // entries of `chunks`
    PackedRecord** chunks;
    uint8_t* devices;          // record number -> device id; null until one has a device
    uint32_t device_capacity;  // entries of `devices`
    ShardCounters counters[kKindCount];
  };

  static uint64_t Hash(uintptr_t address);

 public:
  // Declared with Locate above; here because it needs Shard.
  struct Spot {
    Shard* shard;
    uint64_t hash;
  };

 private:
  // The group of `address`'s 64 MiB region (record/region_groups.h), and
  // in it one of kShardsPerGroup shards by the hash's top bits.
  static constexpr int kShardsPerGroup = kShardCount / RegionGroups::kGroups;
  static_assert(kShardsPerGroup * RegionGroups::kGroups == kShardCount &&
                    (kShardsPerGroup & (kShardsPerGroup - 1)) == 0,
                "a whole, power-of-two number of shards per region group");
  int ShardIndexFor(uintptr_t address, uint64_t hash) {
    return static_cast<int>(groups_.GroupOf(address) * kShardsPerGroup +
                            (hash >> (64 - __builtin_ctz(kShardsPerGroup))));
  }
  Shard& ShardFor(uintptr_t address, uint64_t hash) {
    return shards_[ShardIndexFor(address, hash)];
  }
  static PackedRecord& RecordAt(const Shard& shard, uint32_t number) {
    return shard.chunks[number >> kChunkBits][number & ((1u << kChunkBits) - 1)];
  }
  // Index slot holding `address` (its record's number in *number), or
  // nullptr.
  static uint32_t* Find(const Shard& shard, uint64_t hash, uintptr_t address, uint32_t* number);
  // Find's probe (the index must exist). ProbeFrom goes on from slot `i` at
  // `distance` (past the index's end or 15 from home).
  // Both give the record's number in *number when found.
  static uint32_t* Probe(const Shard& shard, uint64_t hash, uintptr_t address, uint32_t* number);
  static uint32_t* ProbeFrom(const Shard& shard, uint64_t hash, uintptr_t address, uint32_t i,
                             uint32_t distance, uint32_t* number);
  static bool GrowIndex(Shard& shard);
  // Prefetch's work, for a shard and hash already known (racy, like it).
  static void PrefetchIndex(const Shard& shard, uint64_t hash);
  // Insert's rare cases, out of line: the index must grow first (or does
  // not exist yet), or a record is at the address already.
  bool InsertSlow(Shard& shard, uint64_t hash, const PackedRecord& packed, uint8_t device);
  // The fast path of both inserts: the empty index slot ending the run of
  // `hash`'s home, and its distance from home, when the index need not grow
  // and no record is at `address`; else nullptr (take the slow path).
  static uint32_t* EndOfRun(Shard& shard, uint64_t hash, uintptr_t address, uint32_t* distance);
  // Adds `packed` at that slot; false when the arena refuses a record.
  static bool PlaceAt(Shard& shard, uint32_t* slot, uint32_t distance, uint64_t hash,
                      const PackedRecord& packed, uint8_t device);
  // Adopt's record had no room: counted as Insert counts it. Returns false.
  bool DropAdopted(ShardCounters& counters, uint64_t size);
  // A record for a new entry: the free list's head inline, else
  // NewRecordAtEnd (a chunk's next record, mapping chunks as needed); false
  // when the arena refuses.
  static bool NewRecord(Shard& shard, uint32_t* number);
  static bool NewRecordAtEnd(Shard& shard, uint32_t* number);
  // Frees record `number` and empties its index slot `slot`.
  static void EraseSlot(Shard& shard, uint32_t* slot, uint32_t number);
  // Counts record `number` (at index slot `slot`) as freed, then erases it.
  static void FreeRecord(Shard& shard, uint32_t* slot, uint32_t number);
  // Adds a record with `device` (0: none), making room first; false when
  // the arena refuses.
  static bool Place(Shard& shard, uint64_t hash, const PackedRecord& packed, uint8_t device);
  // The device column (see above): keeps `device` for record `number`
  // (when the column cannot grow, the record keeps none), and reads it.
  // Inline for the usual case (no device beyond the column: nothing to do);
  // GrowDevices out of line.
  static void SetDevice(Shard& shard, uint32_t number, uint8_t device);
  static void GrowDevices(Shard& shard, uint32_t number, uint8_t device);
  static uint8_t DeviceAt(const Shard& shard, uint32_t number) {
    return number < shard.device_capacity ? shard.devices[number] : 0;
  }
  static void Unpack(const PackedRecord& packed, LiveRecord* out);
  // `size` at most kMaxSize, `sequence` the record's birth number.
  static PackedRecord Pack(const LiveRecord& record, uint64_t size, uint64_t sequence,
                           uint16_t time_offset);
  // The time offset `record` has within its sequence's block.
  uint16_t TimeOffset(const LiveRecord& record) const;

  // The shards that ever held a record (or were asked to), bit i for
  // shards_[i]; read once for a walk over them.
  static_assert(kShardCount <= 64, "one bit per shard in a word");
  uint64_t ShardsInUse() const { return __atomic_load_n(&shards_in_use_, __ATOMIC_ACQUIRE); }
  static int TakeShard(uint64_t& mask) {
    const int i = __builtin_ctzll(mask);
    mask &= mask - 1;
    return i;
  }
  bool ShardInUse(int index) const { return (ShardsInUse() >> index & 1) != 0; }
  // Before a record goes into shards_[index]: marks it in use, under
  // in_use_lock_ the first time.
  void EnsureInUse(int index) {
    if (__builtin_expect(!ShardInUse(index), 0)) StartShard(index);
  }
  __attribute__((noinline)) void StartShard(int index);

  // On a line of their own before the shards: read by every insert and
  // remove, written only by LockAll, UnlockAll and the first insert into a
  // shard. Lock order: a nursery ring (Adopt runs under it), in_use_lock_,
  // the shards.
  SpinLock in_use_lock_;
  uint64_t shards_in_use_;  // atomic builtins
  Shard shards_[kShardCount];
  RegionGroups groups_;
  Nurseries* nurseries_;   // the heap's: see UseNurseries
  BirthSequence* births_;  // the sequence records were numbered by
  uint64_t dropped_;       // atomic builtins, see SpinLock::locked_
  uint64_t dropped_bytes_;
  uint64_t missed_frees_;
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_LIVE_TABLE_H_
