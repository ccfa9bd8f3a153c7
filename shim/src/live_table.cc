// live_table: see live_table.h.
#include "live_table.h"

#include "arena.h"

namespace retain::shim {
namespace {

constexpr uint32_t kInitialCapacity = 256;

}  // namespace

uint64_t LiveTable::Hash(uintptr_t address) {
  // Allocations are at least 16-byte aligned; mix the rest (Fibonacci hash).
  return (static_cast<uint64_t>(address) >> 4) * 0x9E3779B97F4A7C15ull;
}

LiveRecord* LiveTable::Find(Shard& shard, uint64_t hash, uintptr_t address) {
  if (shard.capacity == 0) return nullptr;
  uint32_t mask = shard.capacity - 1;
  for (uint32_t i = static_cast<uint32_t>(hash) & mask;; i = (i + 1) & mask) {
    LiveRecord* slot = &shard.slots[i];
    if (slot->address == address) return slot;
    if (slot->address == 0) return nullptr;
  }
}

void LiveTable::PlaceNew(Shard& shard, uint64_t hash, const LiveRecord& record) {
  uint32_t mask = shard.capacity - 1;
  uint32_t i = static_cast<uint32_t>(hash) & mask;
  while (shard.slots[i].address != 0) i = (i + 1) & mask;
  shard.slots[i] = record;
  ++shard.count;
}

bool LiveTable::Grow(Shard& shard) {
  uint32_t capacity = shard.capacity == 0 ? kInitialCapacity : shard.capacity * 2;
  auto* slots = static_cast<LiveRecord*>(MapPages(sizeof(LiveRecord) * capacity));
  if (slots == nullptr) return false;
  LiveRecord* old_slots = shard.slots;
  uint32_t old_capacity = shard.capacity;
  shard.slots = slots;
  shard.capacity = capacity;
  shard.count = 0;
  for (uint32_t i = 0; i < old_capacity; ++i) {
    if (old_slots[i].address != 0) PlaceNew(shard, Hash(old_slots[i].address), old_slots[i]);
  }
  UnmapPages(old_slots, sizeof(LiveRecord) * old_capacity);
  return true;
}

void LiveTable::EraseSlot(Shard& shard, LiveRecord* slot) {
  // Backward-shift deletion: pull later members of the probe run into the
  // hole so lookups never need tombstones.
  uint32_t mask = shard.capacity - 1;
  uint32_t hole = static_cast<uint32_t>(slot - shard.slots);
  for (uint32_t i = (hole + 1) & mask; shard.slots[i].address != 0; i = (i + 1) & mask) {
    uint32_t home = static_cast<uint32_t>(Hash(shard.slots[i].address)) & mask;
    // Move slot i into the hole if its home is not in (hole, i] cyclically.
    bool home_in_between = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!home_in_between) {
      shard.slots[hole] = shard.slots[i];
      hole = i;
    }
  }
  shard.slots[hole].address = 0;
  --shard.count;
}

bool LiveTable::Insert(LiveRecord record, BirthSequence& births) {
  uint64_t hash = Hash(record.address);
  Shard& shard = ShardFor(hash);
  SpinLockHolder hold(shard.lock);
  record.birth_sequence = births.Take();
  KindCounters& counters = shard.counters[KindIndex(record.kind)];
  counters.allocated_bytes += record.size;
  counters.allocated_count += 1;
  if (LiveRecord* stale = Find(shard, hash, record.address)) {
    __atomic_fetch_add(&missed_frees_, 1, __ATOMIC_RELAXED);
    KindCounters& stale_counters = shard.counters[KindIndex(stale->kind)];
    stale_counters.freed_bytes += stale->size;
    stale_counters.freed_count += 1;
    stale_counters.live_bytes -= stale->size;
    stale_counters.live_count -= 1;
    EraseSlot(shard, stale);
  }
  // Keep the load factor at or under 3/4.
  if ((uint64_t{shard.count} + 1) * 4 > uint64_t{shard.capacity} * 3 && !Grow(shard) &&
      shard.count + 1 >= shard.capacity) {
    __atomic_fetch_add(&dropped_, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&dropped_bytes_, record.size, __ATOMIC_RELAXED);
    return false;
  }
  PlaceNew(shard, hash, record);
  counters.live_bytes += record.size;
  counters.live_count += 1;
  return true;
}

bool LiveTable::Remove(uintptr_t address) {
  uint64_t hash = Hash(address);
  Shard& shard = ShardFor(hash);
  SpinLockHolder hold(shard.lock);
  LiveRecord* slot = Find(shard, hash, address);
  if (slot == nullptr) return false;
  KindCounters& counters = shard.counters[KindIndex(slot->kind)];
  counters.live_bytes -= slot->size;
  counters.live_count -= 1;
  counters.freed_bytes += slot->size;
  counters.freed_count += 1;
  EraseSlot(shard, slot);
  return true;
}

bool LiveTable::Take(uintptr_t address, LiveRecord* out) {
  uint64_t hash = Hash(address);
  Shard& shard = ShardFor(hash);
  SpinLockHolder hold(shard.lock);
  LiveRecord* slot = Find(shard, hash, address);
  if (slot == nullptr) return false;
  *out = *slot;
  KindCounters& counters = shard.counters[KindIndex(slot->kind)];
  counters.live_bytes -= slot->size;
  counters.live_count -= 1;
  EraseSlot(shard, slot);
  return true;
}

void LiveTable::Restore(const LiveRecord& record) {
  uint64_t hash = Hash(record.address);
  Shard& shard = ShardFor(hash);
  SpinLockHolder hold(shard.lock);
  if ((uint64_t{shard.count} + 1) * 4 > uint64_t{shard.capacity} * 3 && !Grow(shard) &&
      shard.count + 1 >= shard.capacity) {
    // Cannot put it back: account for it as freed rather than lose the bytes.
    KindCounters& counters = shard.counters[KindIndex(record.kind)];
    counters.freed_bytes += record.size;
    counters.freed_count += 1;
    __atomic_fetch_add(&dropped_, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&dropped_bytes_, record.size, __ATOMIC_RELAXED);
    return;
  }
  PlaceNew(shard, hash, record);
  KindCounters& counters = shard.counters[KindIndex(record.kind)];
  counters.live_bytes += record.size;
  counters.live_count += 1;
}

void LiveTable::CountFreed(const LiveRecord& record) {
  Shard& shard = ShardFor(Hash(record.address));
  SpinLockHolder hold(shard.lock);
  KindCounters& counters = shard.counters[KindIndex(record.kind)];
  counters.freed_bytes += record.size;
  counters.freed_count += 1;
}

size_t LiveTable::Count() {
  size_t result = 0;
  for (Shard& shard : shards_) {
    SpinLockHolder hold(shard.lock);
    result += shard.count;
  }
  return result;
}

size_t LiveTable::CountLocked() const {
  size_t result = 0;
  for (const Shard& shard : shards_) result += shard.count;
  return result;
}

size_t LiveTable::CopyLocked(LiveRecord* out) const {
  size_t copied = 0;
  for (const Shard& shard : shards_) {
    for (uint32_t i = 0; i < shard.capacity; ++i) {
      if (shard.slots[i].address != 0) out[copied++] = shard.slots[i];
    }
  }
  return copied;
}

void LiveTable::SumCountersLocked(KindCounters* counters) const {
  for (const Shard& shard : shards_) {
    for (int k = 0; k < kKindCount; ++k) counters[k].Add(shard.counters[k]);
  }
}

void LiveTable::SumCounters(KindCounters* counters) {
  for (Shard& shard : shards_) {
    SpinLockHolder hold(shard.lock);
    for (int k = 0; k < kKindCount; ++k) counters[k].Add(shard.counters[k]);
  }
}

void LiveTable::LockAll() {
  for (Shard& shard : shards_) shard.lock.Lock();
}

void LiveTable::UnlockAll() {
  for (Shard& shard : shards_) shard.lock.Unlock();
}

void LiveTable::ResetLocksInChild() {
  for (Shard& shard : shards_) shard.lock.ResetInChild();
}

}  // namespace retain::shim
