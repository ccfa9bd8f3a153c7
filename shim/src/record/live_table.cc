// live_table: see record/live_table.h.
#include "record/live_table.h"

#include "base/arena.h"
#include "record/nursery.h"

namespace retain::shim {
namespace {

constexpr uint32_t kInitialIndexCapacity = 256;
constexpr uint32_t kInitialChunkCapacity = 16;
// An index slot: the record's number + 1 in bits 0-23; in bits 24-27 its
// distance from its key's home slot, 0-14, or kFar for 15 or more; in bits
// 28-31 four bits of the key's hash (not those that choose the shard or the
// home). A lookup reads a record only for a slot of the same home and the
// same four bits (about 1 in 16 of the other keys of its home); a removal
// shifts the run back by the distances, reading a record only for a slot
// kFar from home (rare at 3/4 load). One record touched per insert or free,
// where 8 hash bits alone (the earlier layout) made a removal read the record
// of every slot it considered moving.
constexpr uint32_t kDistanceShift = 24;
constexpr uint32_t kNumberMask = (1u << kDistanceShift) - 1;
constexpr uint32_t kDistanceMask = 0xfu << kDistanceShift;
constexpr uint32_t kFar = 15;
constexpr uint32_t kTagShift = 28;
constexpr uint64_t kMaxSize = (uint64_t{1} << 40) - 1;

uint32_t SlotTag(uint64_t hash) { return (static_cast<uint32_t>(hash >> 40) & 0xfu) << kTagShift; }
uint32_t StoredDistance(uint32_t distance) {
  return (distance < kFar ? distance : kFar) << kDistanceShift;
}

// KindIndex by a load: the counter index of every Kind value (a byte), where
// KindIndex searches the kinds on each call.
struct CounterIndexTable {
  uint8_t of[256];
};
constexpr CounterIndexTable MakeCounterIndexTable() {
  CounterIndexTable table{};
  for (int value = 0; value < 256; ++value) {
    table.of[value] = static_cast<uint8_t>(KindIndex(static_cast<Kind>(value)));
  }
  return table;
}
constexpr CounterIndexTable kCounterIndex = MakeCounterIndexTable();
static_assert(kKindCount <= 256);
int CounterIndex(Kind kind) { return kCounterIndex.of[static_cast<uint8_t>(kind)]; }

// The index grows by half, not double, so it is between 1/2 and 3/4 full
// (4-byte slots: 5.3 to 8 bytes per record), and any capacity maps a hash
// to a home slot with a multiply (Lemire's reduction) instead of a mask.
uint32_t Home(uint64_t hash, uint32_t capacity) {
  // Fold the high half in: keys differing only in high bits (Vulkan handles
  // of different devices) must not share a home.
  const uint32_t folded = static_cast<uint32_t>(hash ^ (hash >> 32));
  return static_cast<uint32_t>((static_cast<uint64_t>(folded) * capacity) >> 32);
}
uint32_t Next(uint32_t i, uint32_t capacity) { return i + 1 == capacity ? 0 : i + 1; }

}  // namespace

uint64_t LiveTable::Hash(uintptr_t address) {
  // Addresses are mostly 16-byte aligned; mix the rest (Fibonacci hash).
  return (static_cast<uint64_t>(address) >> 4) * 0x9E3779B97F4A7C15ull ^
         static_cast<uint64_t>(address & 15);
}

LiveTable::PackedRecord LiveTable::Pack(const LiveRecord& record, uint64_t size, uint64_t sequence,
                                        uint16_t time_offset) {
  PackedRecord packed;
  packed.address = record.address;
  packed.size_word = size | uint64_t{record.flags} << 40 |
                     uint64_t{static_cast<uint8_t>(record.kind) & 0x3fu} << 56 |
                     uint64_t{record.attribution & 0x3u} << 62;
  packed.sequence_word = (sequence & BirthSequence::kMaxSequence) | uint64_t{time_offset} << 48;
  packed.stack_id = record.stack_id;
  packed.tag_id = record.tag_id;
  return packed;
}

void LiveTable::Unpack(const PackedRecord& packed, LiveRecord* out) {
  out->address = packed.address;
  out->size = packed.size_word & kMaxSize;
  out->flags = static_cast<uint16_t>(packed.size_word >> 40);
  out->kind = static_cast<Kind>((packed.size_word >> 56) & 0x3f);
  out->attribution = static_cast<uint8_t>(packed.size_word >> 62);
  out->device = 0;  // the shard's column (DeviceAt)
  out->birth_sequence = packed.sequence_word & BirthSequence::kMaxSequence;
  out->stack_id = packed.stack_id;
  out->tag_id = packed.tag_id;
  out->thread_id = 0;
  out->birth_time_us = 0;
}

__attribute__((always_inline)) inline uint32_t* LiveTable::Probe(const Shard& shard, uint64_t hash,
                                                                 uintptr_t address,
                                                                 uint32_t* number) {
  const uint32_t capacity = shard.index_capacity;
  uint32_t* const index = shard.index;
  const uint32_t home = Home(hash, capacity);
  // Distances 0-14 before the index's end (nearly every probe): a slot's
  // stored distance is exact there and the next slot is the one after, so
  // a slot of this home and hash bits is one compare with `want`.
  uint32_t* const stop =
      index + (__builtin_expect(capacity - home > kFar, 1) ? home + kFar : capacity);
  uint32_t want = SlotTag(hash);
  uint32_t* p = index + home;
  for (; p != stop; ++p, want += 1u << kDistanceShift) {
    const uint32_t slot = *p;
    if (slot == 0) return nullptr;
    if ((slot & ~kNumberMask) == want &&
        RecordAt(shard, (slot & kNumberMask) - 1).address == address) {
      *number = (slot & kNumberMask) - 1;
      return p;
    }
  }
  const auto i = static_cast<uint32_t>(p - index);
  return ProbeFrom(shard, hash, address, i, i - home, number);
}

__attribute__((noinline)) uint32_t* LiveTable::ProbeFrom(const Shard& shard, uint64_t hash,
                                                         uintptr_t address, uint32_t i,
                                                         uint32_t distance, uint32_t* number) {
  // The index is at most 3/4 full: every run ends at an empty slot.
  const uint32_t capacity = shard.index_capacity;
  const uint32_t tag = SlotTag(hash);
  if (i == capacity) i = 0;
  for (;; ++distance, i = Next(i, capacity)) {
    const uint32_t slot = shard.index[i];
    if (slot == 0) return nullptr;
    if ((slot & ~kNumberMask) == (tag | StoredDistance(distance)) &&
        RecordAt(shard, (slot & kNumberMask) - 1).address == address) {
      *number = (slot & kNumberMask) - 1;
      return &shard.index[i];
    }
  }
}

__attribute__((always_inline)) inline uint32_t* LiveTable::Find(const Shard& shard, uint64_t hash,
                                                                uintptr_t address,
                                                                uint32_t* number) {
  if (shard.index_capacity == 0) return nullptr;
  return Probe(shard, hash, address, number);
}

bool LiveTable::GrowIndex(Shard& shard) {
  const uint32_t capacity = shard.index_capacity == 0
                                ? kInitialIndexCapacity
                                : shard.index_capacity + shard.index_capacity / 2;
  auto* index = static_cast<uint32_t*>(MapPages(sizeof(uint32_t) * capacity));
  if (index == nullptr) return false;
  for (uint32_t i = 0; i < shard.index_capacity; ++i) {
    const uint32_t slot = shard.index[i];
    if (slot == 0) continue;
    const uint64_t hash = Hash(RecordAt(shard, (slot & kNumberMask) - 1).address);
    uint32_t j = Home(hash, capacity);
    uint32_t distance = 0;
    for (; index[j] != 0; j = Next(j, capacity)) ++distance;
    index[j] = (slot & kNumberMask) | StoredDistance(distance) | SlotTag(hash);
  }
  UnmapPages(shard.index, sizeof(uint32_t) * shard.index_capacity);
  shard.index = index;
  shard.index_capacity = capacity;
  // (count + 1) * 4 > capacity * 3, the check before an insert, is
  // count >= floor(capacity * 3 / 4).
  shard.grow_at = static_cast<uint32_t>(uint64_t{capacity} * 3 / 4);
  return true;
}

__attribute__((always_inline)) inline bool LiveTable::NewRecord(Shard& shard, uint32_t* number) {
  // Most inserts after the first frees take the free list's head.
  if (__builtin_expect(shard.free_head != 0, 1)) {
    *number = shard.free_head - 1;
    shard.free_head = static_cast<uint32_t>(RecordAt(shard, *number).size_word);
    return true;
  }
  return NewRecordAtEnd(shard, number);
}

__attribute__((noinline)) bool LiveTable::NewRecordAtEnd(Shard& shard, uint32_t* number) {
  if (shard.used == kMaxRecords) return false;
  const uint32_t chunk = shard.used >> kChunkBits;
  if (chunk == shard.chunk_capacity) {
    const uint32_t capacity =
        shard.chunk_capacity == 0 ? kInitialChunkCapacity : shard.chunk_capacity * 2;
    auto** chunks = static_cast<PackedRecord**>(MapPages(sizeof(PackedRecord*) * capacity));
    if (chunks == nullptr) return false;
    for (uint32_t i = 0; i < shard.chunk_capacity; ++i) chunks[i] = shard.chunks[i];
    UnmapPages(shard.chunks, sizeof(PackedRecord*) * shard.chunk_capacity);
    shard.chunks = chunks;
    shard.chunk_capacity = capacity;
  }
  if ((shard.used & ((1u << kChunkBits) - 1)) == 0) {
    auto* records = static_cast<PackedRecord*>(MapPages(sizeof(PackedRecord) << kChunkBits));
    if (records == nullptr) return false;
    shard.chunks[chunk] = records;
  }
  *number = shard.used++;
  return true;
}

__attribute__((always_inline)) inline void LiveTable::EraseSlot(Shard& shard, uint32_t* slot,
                                                                uint32_t number) {
  // Free the record, then backward-shift deletion in the index: pull later
  // members of the probe run into the hole so lookups never need
  // tombstones.
  PackedRecord& record = RecordAt(shard, number);
  record.address = 0;
  record.size_word = shard.free_head;
  shard.free_head = number + 1;
  uint32_t* const index = shard.index;
  uint32_t* const last = index + shard.index_capacity;
  uint32_t* hole = slot;
  // `gap`: how far slot p is past the hole, kept shifted as a slot keeps
  // its distance (64 bits: a run may be longer than 15). Slot p moves into
  // the hole when its home is not in (hole, p] cyclically, i.e. its
  // distance >= gap; it is then `gap` closer to its home, which for a
  // distance below kFar is a subtraction of the shifted gap.
  uint64_t gap = uint64_t{1} << kDistanceShift;
  uint32_t* p = slot + 1 == last ? index : slot + 1;
  for (uint32_t moving; (moving = *p) != 0; gap += uint64_t{1} << kDistanceShift) {
    const uint32_t distance = moving & kDistanceMask;
    if (__builtin_expect(distance == kDistanceMask, 0)) {  // 15 or more: the record's home says
      const uint32_t capacity = shard.index_capacity;
      const auto i = static_cast<uint32_t>(p - index);
      const uint32_t home =
          Home(Hash(RecordAt(shard, (moving & kNumberMask) - 1).address), capacity);
      const uint32_t far = i >= home ? i - home : i + capacity - home;
      const uint64_t slots = gap >> kDistanceShift;
      if (far >= slots) {
        *hole = (moving & ~kDistanceMask) | StoredDistance(static_cast<uint32_t>(far - slots));
        hole = p;
        gap = 0;
      }
    } else if (__builtin_expect(distance >= gap, 0)) {  // most slots stay (their home is later)
      *hole = moving - static_cast<uint32_t>(gap);
      hole = p;
      gap = 0;
    }
    if (++p == last) p = index;
  }
  *hole = 0;
  --shard.count;
}

__attribute__((always_inline)) inline void LiveTable::SetDevice(Shard& shard, uint32_t number,
                                                                uint8_t device) {
  if (__builtin_expect(number < shard.device_capacity, 0)) {
    shard.devices[number] = device;  // also clears a freed record's old device
    return;
  }
  // Beyond the column (or none yet) a record reads as device 0: the heap's
  // records never need it.
  if (__builtin_expect(device != 0, 0)) GrowDevices(shard, number, device);
}

__attribute__((noinline)) void LiveTable::GrowDevices(Shard& shard, uint32_t number,
                                                      uint8_t device) {
  uint32_t capacity = shard.device_capacity == 0 ? 4096 : shard.device_capacity;
  while (capacity <= number) capacity *= 2;
  auto* devices = static_cast<uint8_t*>(MapPages(capacity));
  if (devices == nullptr) return;  // degraded: the record has no device
  for (uint32_t i = 0; i < shard.device_capacity; ++i) devices[i] = shard.devices[i];
  UnmapPages(shard.devices, shard.device_capacity);
  shard.devices = devices;
  shard.device_capacity = capacity;
  devices[number] = device;
}

bool LiveTable::Place(Shard& shard, uint64_t hash, const PackedRecord& packed, uint8_t device) {
  // Keep the index at most 3/4 full.
  if ((uint64_t{shard.count} + 1) * 4 > uint64_t{shard.index_capacity} * 3 && !GrowIndex(shard)) {
    return false;
  }
  uint32_t number;
  if (!NewRecord(shard, &number)) return false;
  RecordAt(shard, number) = packed;
  SetDevice(shard, number, device);
  uint32_t i = Home(hash, shard.index_capacity);
  uint32_t distance = 0;
  for (; shard.index[i] != 0; i = Next(i, shard.index_capacity)) ++distance;
  shard.index[i] = (number + 1) | StoredDistance(distance) | SlotTag(hash);
  ++shard.count;
  return true;
}

uint16_t LiveTable::TimeOffset(const LiveRecord& record) const {
  const BirthSequence* births = __atomic_load_n(&births_, __ATOMIC_ACQUIRE);
  if (births == nullptr) return 0;
  uint32_t thread_id;
  uint64_t base_us;
  births->Describe(record.birth_sequence, 0, &thread_id, &base_us);
  const uint64_t units = record.birth_time_us >> BirthSequence::kTimeUnitBits;
  const uint64_t base = base_us >> BirthSequence::kTimeUnitBits;
  return units > base ? static_cast<uint16_t>(units - base) : 0;
}

__attribute__((always_inline)) inline void LiveTable::FreeRecord(Shard& shard, uint32_t* slot,
                                                                 uint32_t number) {
  const PackedRecord& record = RecordAt(shard, number);
  const uint64_t size = record.size_word & kMaxSize;
  ShardCounters& counters =
      shard.counters[CounterIndex(static_cast<Kind>((record.size_word >> 56) & 0x3f))];
  counters.freed_bytes += size;
  counters.freed_count += 1;
  EraseSlot(shard, slot, number);
}

__attribute__((always_inline)) inline uint32_t* LiveTable::EndOfRun(Shard& shard, uint64_t hash,
                                                                    uintptr_t address,
                                                                    uint32_t* distance) {
  if (__builtin_expect(shard.count >= shard.grow_at, 0)) return nullptr;
  // One probe of the home's run: a record already at the address (a free
  // the shim missed) is found on the way to the run's end, where the new
  // one goes. Its own loop, not Probe's: measured 7 instructions fewer per
  // insert (Probe's set-up costs more here than its shorter loop saves).
  const uint32_t capacity = shard.index_capacity;
  uint32_t* const index = shard.index;
  const uint32_t tag = SlotTag(hash);
  uint32_t i = Home(hash, capacity);
  for (uint32_t d = 0;; ++d, i = Next(i, capacity)) {
    const uint32_t slot = index[i];
    if (slot == 0) {
      *distance = d;
      return &index[i];
    }
    if ((slot & ~kNumberMask) == (tag | StoredDistance(d)) &&
        RecordAt(shard, (slot & kNumberMask) - 1).address == address) {
      return nullptr;
    }
  }
}

__attribute__((always_inline)) inline bool LiveTable::PlaceAt(Shard& shard, uint32_t* slot,
                                                              uint32_t distance, uint64_t hash,
                                                              const PackedRecord& packed,
                                                              uint8_t device) {
  uint32_t number;
  if (!NewRecord(shard, &number)) return false;
  RecordAt(shard, number) = packed;
  SetDevice(shard, number, device);
  *slot = (number + 1) | StoredDistance(distance) | SlotTag(hash);
  ++shard.count;
  return true;
}

__attribute__((noinline)) bool LiveTable::InsertSlow(Shard& shard, uint64_t hash,
                                                     const PackedRecord& packed, uint8_t device) {
  uint32_t number;
  if (uint32_t* stale = Find(shard, hash, packed.address, &number)) {
    __atomic_fetch_add(&missed_frees_, 1, __ATOMIC_RELAXED);
    FreeRecord(shard, stale, number);
  }
  return Place(shard, hash, packed, device);
}

LiveTable::Spot LiveTable::Locate(uintptr_t address) {
  const uint64_t hash = Hash(address);
  return {&ShardFor(address, hash), hash};
}

bool LiveTable::Insert(const LiveRecord& record, BirthSequence& births) {
  return Insert(record, births, Locate(record.address));
}

bool LiveTable::Insert(const LiveRecord& record, BirthSequence& births, const Spot& spot) {
  // As packed, so counters agree.
  const uint64_t size = record.size < kMaxSize ? record.size : kMaxSize;
  if (__builtin_expect(births_ != &births, 0))
    __atomic_store_n(&births_, &births, __ATOMIC_RELEASE);
  const uint64_t hash = spot.hash;
  Shard& shard = *spot.shard;
  EnsureInUse(static_cast<int>(spot.shard - shards_));
  SpinLockHolder hold(shard.lock);
  uint16_t time_offset;
  const uint64_t sequence = births.Take(record.thread_id, record.birth_time_us, &time_offset);
  ShardCounters& counters = shard.counters[CounterIndex(record.kind)];
  counters.allocated_bytes += size;
  counters.allocated_count += 1;
  bool placed;
  uint32_t* slot;
  uint32_t distance;
  if (__builtin_expect((slot = EndOfRun(shard, hash, record.address, &distance)) != nullptr, 1)) {
    placed = PlaceAt(shard, slot, distance, hash, Pack(record, size, sequence, time_offset),
                     record.device);
  } else {
    placed = InsertSlow(shard, hash, Pack(record, size, sequence, time_offset), record.device);
  }
  if (!placed) {
    counters.detached_bytes += size;
    counters.detached_count += 1;
    __atomic_fetch_add(&dropped_, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&dropped_bytes_, size, __ATOMIC_RELAXED);
    return false;
  }
  return true;
}

__attribute__((always_inline)) inline void LiveTable::PrefetchIndex(const Shard& shard,
                                                                    uint64_t hash) {
  uint32_t* const index = __atomic_load_n(&shard.index, __ATOMIC_RELAXED);
  const uint32_t capacity = __atomic_load_n(&shard.index_capacity, __ATOMIC_RELAXED);
  if (index == nullptr || capacity == 0) return;
  __builtin_prefetch(&index[Home(hash, capacity)], 1);
}

void LiveTable::Prefetch(const Spot& spot) { PrefetchIndex(*spot.shard, spot.hash); }

void LiveTable::StartShard(int index) {
  SpinLockHolder hold(in_use_lock_);
  __atomic_fetch_or(&shards_in_use_, uint64_t{1} << index, __ATOMIC_RELEASE);
}

bool LiveTable::Remove(uintptr_t address) {
  const uint64_t hash = Hash(address);
  const int index = ShardIndexFor(address, hash);
  // Nothing was ever inserted there: nothing to find (and no page to
  // touch). A free of a block the program had from an insert happens after
  // it, so that insert's mark is seen here.
  if (!ShardInUse(index)) return false;
  Shard& shard = shards_[index];
  // Before the lock: its locked exchange would hold the index's load back
  // until it completes, and the index line is often not in the core's cache
  // (the block was allocated long ago).
  PrefetchIndex(shard, hash);
  SpinLockHolder hold(shard.lock);
  uint32_t number;
  uint32_t* slot = Find(shard, hash, address, &number);
  if (slot == nullptr) return false;
  FreeRecord(shard, slot, number);
  return true;
}

bool LiveTable::Take(uintptr_t address, LiveRecord* out) {
  const uint64_t hash = Hash(address);
  const int index = ShardIndexFor(address, hash);
  if (!ShardInUse(index)) return false;  // as Remove
  Shard& shard = shards_[index];
  uint16_t time_offset;
  {
    SpinLockHolder hold(shard.lock);
    uint32_t number;
    uint32_t* slot = Find(shard, hash, address, &number);
    if (slot == nullptr) return false;
    const PackedRecord& record = RecordAt(shard, number);
    Unpack(record, out);
    out->device = DeviceAt(shard, number);
    time_offset = static_cast<uint16_t>(record.sequence_word >> 48);
    ShardCounters& counters = shard.counters[CounterIndex(out->kind)];
    counters.detached_bytes += out->size;
    counters.detached_count += 1;
    EraseSlot(shard, slot, number);
  }
  // The thread and time are the block's (lock-free to read).
  if (const BirthSequence* births = __atomic_load_n(&births_, __ATOMIC_ACQUIRE)) {
    births->Describe(out->birth_sequence, time_offset, &out->thread_id, &out->birth_time_us);
  }
  return true;
}

void LiveTable::Restore(const LiveRecord& original) {
  LiveRecord record = original;
  if (record.size > kMaxSize) record.size = kMaxSize;
  const uint64_t hash = Hash(record.address);
  const int index = ShardIndexFor(record.address, hash);
  Shard& shard = shards_[index];
  const PackedRecord packed = Pack(record, record.size, record.birth_sequence, TimeOffset(record));
  EnsureInUse(index);  // it is, since its Take (or AdoptDetached)
  SpinLockHolder hold(shard.lock);
  ShardCounters& counters = shard.counters[CounterIndex(record.kind)];
  counters.detached_bytes -= record.size;
  counters.detached_count -= 1;
  if (!Place(shard, hash, packed, record.device)) {
    // Cannot put it back: account for it as freed rather than lose the bytes.
    counters.freed_bytes += record.size;
    counters.freed_count += 1;
    __atomic_fetch_add(&dropped_, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&dropped_bytes_, record.size, __ATOMIC_RELAXED);
  }
}

void LiveTable::CountFreed(const LiveRecord& record) {
  const int index = ShardIndexFor(record.address, Hash(record.address));
  Shard& shard = shards_[index];
  EnsureInUse(index);  // it is, since its Take (or AdoptDetached)
  SpinLockHolder hold(shard.lock);
  ShardCounters& counters = shard.counters[CounterIndex(record.kind)];
  counters.freed_bytes += record.size;
  counters.freed_count += 1;
  counters.detached_bytes -= record.size;
  counters.detached_count -= 1;
}

void LiveTable::UseNurseries(Nurseries* nurseries, BirthSequence& births) {
  __atomic_store_n(&births_, &births, __ATOMIC_RELEASE);
  nurseries_ = nurseries;
}

bool LiveTable::Adopt(const LiveRecord& record, uint16_t time_offset) {
  const uint64_t size = record.size < kMaxSize ? record.size : kMaxSize;
  const uint64_t hash = Hash(record.address);
  const int index = ShardIndexFor(record.address, hash);
  Shard& shard = shards_[index];
  const PackedRecord packed = Pack(record, size, record.birth_sequence, time_offset);
  EnsureInUse(index);
  SpinLockHolder hold(shard.lock);
  ShardCounters& counters = shard.counters[CounterIndex(record.kind)];
  counters.allocated_bytes += size;
  counters.allocated_count += 1;
  uint32_t distance;
  if (uint32_t* slot = EndOfRun(shard, hash, record.address, &distance);
      __builtin_expect(slot != nullptr, 1)) {
    if (PlaceAt(shard, slot, distance, hash, packed, record.device)) return true;
    return DropAdopted(counters, size);
  }
  uint32_t number;
  if (uint32_t* stale = Find(shard, hash, record.address, &number); stale != nullptr) {
    __atomic_fetch_add(&missed_frees_, 1, __ATOMIC_RELAXED);
    // The older of the two was freed unseen. Birth numbers are ordered
    // within a thread only; times (to the birth block's unit) order both.
    const PackedRecord& there = RecordAt(shard, number);
    uint32_t thread;
    uint64_t there_us = 0;
    uint64_t adopted_us = 0;
    births_->Describe(there.sequence_word & BirthSequence::kMaxSequence,
                      static_cast<uint16_t>(there.sequence_word >> 48), &thread, &there_us);
    births_->Describe(record.birth_sequence, time_offset, &thread, &adopted_us);
    if (there_us > adopted_us) {
      counters.freed_bytes += size;
      counters.freed_count += 1;
      return true;
    }
    FreeRecord(shard, stale, number);
  }
  return Place(shard, hash, packed, record.device) || DropAdopted(counters, size);
}

bool LiveTable::DropAdopted(ShardCounters& counters, uint64_t size) {
  counters.detached_bytes += size;
  counters.detached_count += 1;
  __atomic_fetch_add(&dropped_, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&dropped_bytes_, size, __ATOMIC_RELAXED);
  return false;
}

void LiveTable::AdoptDetached(const LiveRecord& record) {
  const uint64_t size = record.size < kMaxSize ? record.size : kMaxSize;
  const int index = ShardIndexFor(record.address, Hash(record.address));
  Shard& shard = shards_[index];
  EnsureInUse(index);
  SpinLockHolder hold(shard.lock);
  ShardCounters& counters = shard.counters[CounterIndex(record.kind)];
  counters.allocated_bytes += size;
  counters.allocated_count += 1;
  counters.detached_bytes += size;
  counters.detached_count += 1;
}

size_t LiveTable::Count() {
  size_t result = nurseries_ != nullptr ? nurseries_->Count() : 0;
  for (uint64_t mask = ShardsInUse(); mask != 0;) {
    Shard& shard = shards_[TakeShard(mask)];
    SpinLockHolder hold(shard.lock);
    result += shard.count;
  }
  return result;
}

size_t LiveTable::MemoryBytes() {
  size_t bytes = 0;
  for (uint64_t mask = ShardsInUse(); mask != 0;) {
    Shard& shard = shards_[TakeShard(mask)];
    SpinLockHolder hold(shard.lock);
    const size_t chunks = (shard.used + (1u << kChunkBits) - 1) >> kChunkBits;
    bytes += chunks * (sizeof(PackedRecord) << kChunkBits) +
             sizeof(uint32_t) * shard.index_capacity +
             sizeof(PackedRecord*) * shard.chunk_capacity + shard.device_capacity;
  }
  if (nurseries_ != nullptr) bytes += nurseries_->MemoryBytes();
  return bytes;
}

size_t LiveTable::CountLocked() const {
  size_t result = nurseries_ != nullptr ? nurseries_->CountLocked() : 0;
  for (uint64_t mask = ShardsInUse(); mask != 0;) result += shards_[TakeShard(mask)].count;
  return result;
}

size_t LiveTable::CopyLocked(LiveRecord* out) const {
  const BirthSequence* births = __atomic_load_n(&births_, __ATOMIC_ACQUIRE);
  size_t copied = 0;
  for (uint64_t mask = ShardsInUse(); mask != 0;) {
    const Shard& shard = shards_[TakeShard(mask)];
    for (uint32_t i = 0; i < shard.used; ++i) {
      const PackedRecord& record = RecordAt(shard, i);
      if (record.address == 0) continue;
      LiveRecord& row = out[copied++];
      Unpack(record, &row);
      row.device = DeviceAt(shard, i);
      if (births != nullptr) {
        births->Describe(row.birth_sequence, static_cast<uint16_t>(record.sequence_word >> 48),
                         &row.thread_id, &row.birth_time_us);
      }
    }
  }
  if (nurseries_ != nullptr) copied += nurseries_->CopyLocked(out + copied);
  return copied;
}

size_t LiveTable::VisitTags(void (*visit)(uint32_t tag_id, uint64_t argument), uint64_t argument) {
  size_t seen = nurseries_ != nullptr ? nurseries_->VisitTags(visit, argument) : 0;
  for (uint64_t mask = ShardsInUse(); mask != 0;) {
    Shard& shard = shards_[TakeShard(mask)];
    SpinLockHolder hold(shard.lock);
    for (uint32_t i = 0; i < shard.used; ++i) {
      const PackedRecord& record = RecordAt(shard, i);
      if (record.address == 0) continue;
      ++seen;
      if (record.tag_id != 0) visit(record.tag_id, argument);
    }
  }
  return seen;
}

void LiveTable::AddTo(const ShardCounters& shard_counters, KindCounters* counters) {
  KindCounters add;
  add.allocated_bytes = shard_counters.allocated_bytes;
  add.allocated_count = shard_counters.allocated_count;
  add.freed_bytes = shard_counters.freed_bytes;
  add.freed_count = shard_counters.freed_count;
  add.live_bytes =
      shard_counters.allocated_bytes - shard_counters.freed_bytes - shard_counters.detached_bytes;
  add.live_count =
      shard_counters.allocated_count - shard_counters.freed_count - shard_counters.detached_count;
  counters->Add(add);
}

void LiveTable::SumCountersLocked(KindCounters* counters) const {
  for (uint64_t mask = ShardsInUse(); mask != 0;) {
    const Shard& shard = shards_[TakeShard(mask)];
    for (int k = 0; k < kKindCount; ++k) AddTo(shard.counters[k], &counters[k]);
  }
  if (nurseries_ != nullptr) nurseries_->SumCountersLocked(&counters[KindIndex(Kind::kHeap)]);
}

void LiveTable::SumCounters(KindCounters* counters) {
  // The rings first: a record moving to the table meanwhile is counted
  // twice rather than not at all.
  if (nurseries_ != nullptr) nurseries_->SumCounters(&counters[KindIndex(Kind::kHeap)]);
  for (uint64_t mask = ShardsInUse(); mask != 0;) {
    Shard& shard = shards_[TakeShard(mask)];
    SpinLockHolder hold(shard.lock);
    for (int k = 0; k < kKindCount; ++k) AddTo(shard.counters[k], &counters[k]);
  }
}

void LiveTable::LockAll() {
  // The rings first: a ring's lock is held while its record moves to a
  // shard (Adopt), which may bring that shard into use (in_use_lock_).
  if (nurseries_ != nullptr) nurseries_->LockRings();
  in_use_lock_.Lock();  // then no table or shard comes into use until UnlockAll
  for (uint64_t mask = ShardsInUse(); mask != 0;) shards_[TakeShard(mask)].lock.Lock();
}

void LiveTable::UnlockAll() {
  for (uint64_t mask = ShardsInUse(); mask != 0;) shards_[TakeShard(mask)].lock.Unlock();
  in_use_lock_.Unlock();
  if (nurseries_ != nullptr) nurseries_->UnlockRings();
}

void LiveTable::ResetLocksInChild() {
  for (uint64_t mask = ShardsInUse(); mask != 0;) shards_[TakeShard(mask)].lock.ResetInChild();
  in_use_lock_.ResetInChild();
  if (nurseries_ != nullptr) nurseries_->ResetLocksInChild();
}

void LiveTable::DiscardInChild() {
  // Empty again, as it was before its first insert: the child's snapshots
  // and forks pass it by until it has one.
  const uint64_t in_use_mask = ShardsInUse();
  __atomic_store_n(&shards_in_use_, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&births_, nullptr, __ATOMIC_RELAXED);
  for (uint64_t mask = in_use_mask; mask != 0;) {
    Shard& shard = shards_[TakeShard(mask)];
    const uint32_t chunks = (shard.used + (1u << kChunkBits) - 1) >> kChunkBits;
    for (uint32_t i = 0; i < chunks; ++i) {
      UnmapPages(shard.chunks[i], sizeof(PackedRecord) << kChunkBits);
    }
    UnmapPages(shard.chunks, sizeof(PackedRecord*) * shard.chunk_capacity);
    UnmapPages(shard.index, sizeof(uint32_t) * shard.index_capacity);
    UnmapPages(shard.devices, shard.device_capacity);
    shard.devices = nullptr;
    shard.device_capacity = 0;
    shard.count = 0;
    shard.index_capacity = 0;
    shard.grow_at = 0;
    shard.index = nullptr;
    shard.used = 0;
    shard.free_head = 0;
    shard.chunk_capacity = 0;
    shard.chunks = nullptr;
    for (ShardCounters& counters : shard.counters) counters = {};
  }
}

}  // namespace retain::shim
