// nursery: each thread's youngest heap records, kept beside the shared live
// table so that a block freed soon after it was born never touches it.
//
// Most blocks die young and on the thread that made them (72 % of the bench
// workloads' frees are of a block their own thread allocated within its last
// 16 allocations). A thread's nursery is a ring of its last kSlots records
// under a lock of its own, which no other thread takes in the common case:
// an allocation writes its record into the ring's next slot, and the record
// that held the slot (still live: older than 16 allocations) moves to the
// shared table, born as it was (LiveTable::Adopt); a free finds its record
// in its own thread's ring first. The shared table's hashing, probing and
// shard lock are paid only by the blocks that outlive 16 allocations.
//
// Exact as the table is: a record is always in exactly one place, a ring or
// the table, and moves only from a ring to the table (under the ring's lock,
// then the shard's). A free or realloc that finds its block in neither its
// own ring nor the table looks through the other threads' rings (a block
// handed to another thread young), without their locks unless a slot holds
// the address, and then in the table once more: a record that moved to the
// table meanwhile is found there. That search reads every ring's 16
// addresses (two cache lines per thread): the price of a free of a block
// another thread made within its last 16 allocations, or of one the shim
// never recorded. Snapshots lock every ring with the table
// (LiveTable::LockAll), so birth numbers taken under a ring's lock keep the
// table's guarantee (record/birth_sequence.h).
//
// A free the shim did not see (one a signal handler makes while its thread
// is inside a hook, which passes through unrecorded) leaves its record
// live until a newer block at the address shows it: a free that finds two
// records for its address in one ring, or a move to the table that finds
// one there (LiveTable::Adopt), keeps the newer and counts a missed free.
// It waits longer than it did without rings (where the next insert at the
// address found it) while the newer blocks at the address are born and
// freed young in a ring other than the one holding the old record, or
// while the old record is in the table.
//
// Threads claim a ring on their first recorded allocation and give it back
// when they exit (a pthread key's destructor moves its records to the
// table), so a server that starts and ends threads keeps as many rings as it
// has threads at once. At most kMaxRings: a thread beyond them uses the
// table directly. Ring memory is arena memory, never the host heap.
#ifndef RETAIN_SHIM_SRC_RECORD_NURSERY_H_
#define RETAIN_SHIM_SRC_RECORD_NURSERY_H_

#include <cstddef>
#include <cstdint>

#include "base/spin_lock.h"
#include "base/thread_state.h"
#include "record/birth_sequence.h"
#include "record/kinds.h"
#include "record/live_table.h"

namespace retain::shim {

class Nurseries;

// One thread's ring. Only heap records (Kind::kHeap) live here.
struct alignas(64) Nursery {
  static constexpr int kSlots = 16;

  SpinLock lock;
  Nurseries* owner;  // the registry it belongs to (for the thread-exit destructor)
  uint32_t claimed;  // 1 while a live thread owns it (atomic builtins)
  uint32_t next;     // allocations made here: the next slot is next % kSlots
  uint32_t count;    // records here
  // What was allocated here, what was freed here and what moved to the
  // table (counted allocated there): live here = allocated - freed - moved.
  uint64_t allocated_bytes;
  uint64_t allocated_count;
  uint64_t freed_bytes;
  uint64_t freed_count;
  uint64_t moved_bytes;
  uint64_t moved_count;
  // address[i] != 0: record[i] is live, born time_offset[i] after its
  // birth block's start. Written under the lock (release), read by other
  // threads' frees without it (acquire).
  alignas(64) uintptr_t address[kSlots];
  // Bits 4-35 of address[i] (stale when the slot is empty), for the
  // owner's lookups: all 16 compared at once.
  alignas(64) uint32_t key[kSlots];
  LiveRecord record[kSlots];
  uint16_t time_offset[kSlots];
};

// Every thread's ring, for one table (the heap's). Zero-filled storage is a
// valid, empty registry; create instances with static storage only.
class Nurseries {
 public:
  static constexpr int kMaxRings = 512;

  // The table records move to (and whose LockAll locks these rings: the
  // table calls LockRings and the others below). Call once, before use.
  void Attach(LiveTable* table, BirthSequence* births);
  bool attached() const { return __atomic_load_n(&table_, __ATOMIC_ACQUIRE) != nullptr; }

  // The calling thread's ring, claimed on first use; nullptr when none can
  // be had (all taken, no memory, the thread is exiting).
  Nursery* Mine();
  // The same without claiming one (for frees): nullptr when it has none.
  Nursery* MineIfAny() const {
    const uintptr_t mine = g_thread.nursery;
    if (mine <= kNoNursery) return nullptr;
    auto* ring = reinterpret_cast<Nursery*>(mine);
    return ring->owner == this ? ring : nullptr;
  }

  // A new heap record (address != 0, kind kHeap) into `ring` (Mine()). Its
  // birth number is taken here. Returns false when the record that gave up
  // its slot could not be added to the table (no memory): then
  // *dropped_address is that record's address (its block is live, not
  // recorded: the recorder counts it by usable size) -- else 0.
  bool Insert(Nursery& ring, const LiveRecord& record, uintptr_t* dropped_address);
  // The address of the record `ring`'s next Insert will move to the table
  // (0: none), for a prefetch of its table line before the stack walk. Read
  // without the lock (its owner's call; a slot another thread empties
  // meanwhile only makes the prefetch useless).
  static uintptr_t NextToMove(const Nursery& ring) {
    return __atomic_load_n(&ring.address[ring.next & (Nursery::kSlots - 1)], __ATOMIC_RELAXED);
  }

  // Removes the record at `address` wherever it is (the caller's ring
  // `mine`, may be null; the table; other threads' rings) and counts it as
  // freed. False when there is none.
  bool Remove(Nursery* mine, uintptr_t address);
  // Take (for realloc, see LiveTable::Take): the record leaves for the
  // table's detached state, so Restore and CountFreed work as for any.
  bool Take(Nursery* mine, uintptr_t address, LiveRecord* out);

  // For the table's whole-table operations (record/live_table.h).
  void LockRings();    // before the table's shards
  void UnlockRings();  // after them
  void ResetLocksInChild();
  // In a fork child, after ResetLocksInChild: the rings of threads that do
  // not exist there move to the table and are given back.
  void ReleaseOthersInChild();
  size_t CountLocked() const;
  size_t CopyLocked(LiveRecord* out) const;
  void SumCountersLocked(KindCounters* heap) const;
  size_t VisitTags(void (*visit)(uint32_t tag_id, uint64_t argument), uint64_t argument);
  size_t Count();
  void SumCounters(KindCounters* heap);
  size_t MemoryBytes() const;

  // The pthread key's destructor: `ring` (the exiting thread's) moves to the
  // table and is given back.
  static void ReleaseAtThreadExit(void* ring);

 private:
  // Moves record `slot` of `ring` to the table (ring lock held).
  bool MoveToTable(Nursery& ring, int slot);
  void Release(Nursery& ring);
  // Removes `address` from `ring` (lock held) if there, counting it freed
  // (or, with `out`, taken): true when it was.
  bool RemoveFrom(Nursery& ring, uintptr_t address, LiveRecord* out);
  // More than one slot (bits of `matches`) holds one address: the older
  // records' frees were not seen. Counts and empties them; returns the
  // newest one's slot.
  int DropStale(Nursery& ring, uint32_t matches);
  // Other threads' rings: the one whose slot holds `address`, removed.
  bool RemoveFromOthers(Nursery* mine, uintptr_t address, LiveRecord* out);
  Nursery* Claim();
  void Describe(const Nursery& ring, int slot, LiveRecord* out) const;

  LiveTable* table_;
  BirthSequence* births_;
  SpinLock registry_lock_;  // claims, and the ring count, against LockRings
  uint32_t ring_count_;     // rings made (atomic builtins)
  Nursery* rings_[kMaxRings];
  // The pthread key (its value a thread's ring) + 1; 0 until made, and
  // ~0 when it could not be made (then no thread gets a ring).
  uint32_t key_plus_one_;
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_NURSERY_H_
