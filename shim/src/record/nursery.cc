// nursery: see record/nursery.h.
#include "record/nursery.h"

#include <pthread.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/arena.h"
#include "base/thread_state.h"

namespace retain::shim {
namespace {

constexpr int kSlots = Nursery::kSlots;
constexpr uint32_t kNoKey = ~uint32_t{0};

// The slot holding `address`, or -1, for another thread's free (the
// ring's lock not held): each 8-byte slot is read whole, with acquire (a
// slot seen emptied by a move means its record is in the table).
int FindSlot(const Nursery& ring, uintptr_t address) {
  for (int i = 0; i < kSlots; ++i) {
    if (__atomic_load_n(&ring.address[i], __ATOMIC_ACQUIRE) == address) return i;
  }
  return -1;
}

uint32_t KeyOf(uintptr_t address) { return static_cast<uint32_t>(address >> 4); }

// For the ring's owner: bit i set when slot i holds `address`. The 4-byte
// keys of all 16 slots are compared at once (one cache line), and a slot
// whose key matches is checked by its address. Without the ring's lock, a
// bit is a slot to check again under it, and none means the address is
// not there: only the owner adds to its ring (others only empty slots).
uint32_t Matches(const Nursery& ring, uintptr_t address) {
  const uint32_t key = KeyOf(address);
  uint32_t candidates = 0;
#if defined(__SSE2__)
  // Four compares of four keys, narrowed to one byte per slot (the packs
  // keep a compare's all-ones and zeros as they are), one mask of 16 bits:
  // straight-line code (the loop of four masks shifted into place was not
  // unrolled, 25 instructions more per free).
  static_assert(kSlots == 16);
  const __m128i wanted = _mm_set1_epi32(static_cast<int>(key));
  const auto* keys = reinterpret_cast<const __m128i*>(ring.key);
  const __m128i low = _mm_packs_epi32(_mm_cmpeq_epi32(_mm_load_si128(keys), wanted),
                                      _mm_cmpeq_epi32(_mm_load_si128(keys + 1), wanted));
  const __m128i high = _mm_packs_epi32(_mm_cmpeq_epi32(_mm_load_si128(keys + 2), wanted),
                                       _mm_cmpeq_epi32(_mm_load_si128(keys + 3), wanted));
  candidates = static_cast<uint32_t>(_mm_movemask_epi8(_mm_packs_epi16(low, high)));
#else
  for (int i = 0; i < kSlots; ++i) candidates |= uint32_t{ring.key[i] == key} << i;
#endif
  uint32_t matches = 0;
  for (; candidates != 0; candidates &= candidates - 1) {
    const int i = __builtin_ctz(candidates);
    if (__atomic_load_n(&ring.address[i], __ATOMIC_RELAXED) == address) matches |= 1u << i;
  }
  return matches;
}

void SetAddress(Nursery& ring, int slot, uintptr_t address) {
  __atomic_store_n(&ring.address[slot], address, __ATOMIC_RELEASE);
}

// Empties `slot` (its record moved or freed: the caller counts which).
void EmptySlot(Nursery& ring, int slot) {
  SetAddress(ring, slot, 0);
  --ring.count;
}

// Empties `slot`, its record counted as freed here.
void FreeSlot(Nursery& ring, int slot) {
  ring.freed_bytes += ring.record[slot].size;
  ring.freed_count += 1;
  EmptySlot(ring, slot);
}

}  // namespace

void Nurseries::Attach(LiveTable* table, BirthSequence* births) {
  births_ = births;
  table->UseNurseries(this, *births);
  pthread_key_t key;
  key_plus_one_ = pthread_key_create(&key, ReleaseAtThreadExit) == 0 && key + 1 != kNoKey
                      ? static_cast<uint32_t>(key) + 1
                      : kNoKey;
  __atomic_store_n(&table_, table, __ATOMIC_RELEASE);
}

Nursery* Nurseries::Mine() {
  const uintptr_t mine = g_thread.nursery;
  // (A ring of another registry: tests make more than one.)
  if (__builtin_expect(mine > kNoNursery, 1)) return MineIfAny();
  if (mine == kNoNursery || !attached()) return nullptr;
  Nursery* ring = Claim();
  g_thread.nursery = ring != nullptr ? reinterpret_cast<uintptr_t>(ring) : kNoNursery;
  return ring;
}

Nursery* Nurseries::Claim() {
  if (key_plus_one_ == 0 || key_plus_one_ == kNoKey) return nullptr;
  Nursery* ring = nullptr;
  {
    SpinLockHolder hold(registry_lock_);
    const uint32_t made = ring_count_;
    for (uint32_t i = 0; i < made && ring == nullptr; ++i) {
      if (__atomic_load_n(&rings_[i]->claimed, __ATOMIC_ACQUIRE) == 0) ring = rings_[i];
    }
    if (ring == nullptr && made < kMaxRings) {
      // Zeroed (empty), and on lines of its own: two threads' rings sharing
      // a cache line would each slow the other on every allocation.
      static_assert(alignof(Nursery) == kCacheLine);
      ring = static_cast<Nursery*>(ArenaAllocateLines(sizeof(Nursery)));
      if (ring == nullptr) return nullptr;
      ring->owner = this;
      rings_[made] = ring;
      __atomic_store_n(&ring_count_, made + 1, __ATOMIC_RELEASE);
    }
    if (ring == nullptr) return nullptr;
    __atomic_store_n(&ring->claimed, 1, __ATOMIC_RELEASE);
  }
  // At thread exit the key's destructor gives the ring back. (A key above
  // glibc's first 32 may calloc: this thread is inside a hook, so that
  // call passes through.)
  if (pthread_setspecific(static_cast<pthread_key_t>(key_plus_one_ - 1), ring) != 0) {
    __atomic_store_n(&ring->claimed, 0, __ATOMIC_RELEASE);
    return nullptr;
  }
  return ring;
}

bool Nurseries::Insert(Nursery& ring, const LiveRecord& record, uintptr_t* dropped_address) {
  *dropped_address = 0;
  bool kept = true;
  SpinLockHolder hold(ring.lock);
  const int slot = static_cast<int>(ring.next & (kSlots - 1));
  if (const uintptr_t older = ring.address[slot]; older != 0) {
    // The slot's record has outlived kSlots allocations: to the table.
    if (!MoveToTable(ring, slot)) {
      kept = false;
      *dropped_address = older;
    }
  }
  ring.key[slot] = KeyOf(record.address);
  LiveRecord& young = ring.record[slot];
  young = record;
  young.birth_sequence =
      births_->Take(record.thread_id, record.birth_time_us, &ring.time_offset[slot]);
  ring.allocated_bytes += record.size;
  ring.allocated_count += 1;
  ++ring.count;
  SetAddress(ring, slot, record.address);
  __atomic_store_n(&ring.next, ring.next + 1, __ATOMIC_RELAXED);
  return kept;
}

bool Nurseries::MoveToTable(Nursery& ring, int slot) {
  const LiveRecord& record = ring.record[slot];
  const bool added = table_->Adopt(record, ring.time_offset[slot]);
  ring.moved_bytes += record.size;
  ring.moved_count += 1;
  EmptySlot(ring, slot);
  return added;
}

bool Nurseries::RemoveFrom(Nursery& ring, uintptr_t address, LiveRecord* out) {
  const uint32_t matches = Matches(ring, address);
  if (matches == 0) return false;
  int slot = __builtin_ctz(matches);
  if (__builtin_expect((matches & (matches - 1)) != 0, 0)) slot = DropStale(ring, matches);
  if (out == nullptr) {
    FreeSlot(ring, slot);
    return true;
  }
  // Taken: it leaves for the table's detached state (LiveTable::Take).
  Describe(ring, slot, out);
  ring.moved_bytes += out->size;
  ring.moved_count += 1;
  table_->AdoptDetached(*out);
  EmptySlot(ring, slot);
  return true;
}

int Nurseries::DropStale(Nursery& ring, uint32_t matches) {
  // The newest record at the address is the block's; the older ones are
  // blocks whose frees the shim did not see.
  const uint32_t newest = ring.next - 1;
  int keep = -1;
  for (uint32_t age = 0; age < kSlots && keep < 0; ++age) {
    const int i = static_cast<int>((newest - age) & (kSlots - 1));
    if ((matches >> i) & 1) keep = i;
  }
  for (int i = 0; i < kSlots; ++i) {
    if (i == keep || ((matches >> i) & 1) == 0) continue;
    FreeSlot(ring, i);
    table_->CountMissedFree();
  }
  return keep;
}

bool Nurseries::RemoveFromOthers(Nursery* mine, uintptr_t address, LiveRecord* out) {
  const uint32_t made = __atomic_load_n(&ring_count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < made; ++i) {
    Nursery& ring = *rings_[i];
    // Without the lock first: a ring's slots hold only blocks it owns, and
    // this block is the caller's to free, so a slot that does not hold it
    // now will not before the caller's real free.
    if (&ring == mine || FindSlot(ring, address) < 0) continue;
    SpinLockHolder hold(ring.lock);
    if (RemoveFrom(ring, address, out)) return true;
  }
  return false;
}

bool Nurseries::Remove(Nursery* mine, uintptr_t address) {
  // This thread's ring first, and its lock only when the block is there
  // (a block that outlived the ring, in the table, costs one look).
  if (const uint32_t seen = mine != nullptr ? Matches(*mine, address) : 0; seen != 0) {
    SpinLockHolder hold(mine->lock);
    // Inline, the usual case: one record at the address, still there (only
    // this free could have taken it out).
    const int slot = __builtin_ctz(seen);
    if (__builtin_expect((seen & (seen - 1)) == 0 && mine->address[slot] == address, 1)) {
      FreeSlot(*mine, slot);
      return true;
    }
    if (RemoveFrom(*mine, address, nullptr)) return true;
  }
  if (table_->Remove(address)) return true;
  if (RemoveFromOthers(mine, address, nullptr)) return true;
  // It may have moved from another thread's ring to the table meanwhile.
  return table_->Remove(address);
}

bool Nurseries::Take(Nursery* mine, uintptr_t address, LiveRecord* out) {
  if (mine != nullptr && Matches(*mine, address) != 0) {
    SpinLockHolder hold(mine->lock);
    if (RemoveFrom(*mine, address, out)) return true;
  }
  if (table_->Take(address, out)) return true;
  if (RemoveFromOthers(mine, address, out)) return true;
  return table_->Take(address, out);
}

void Nurseries::Release(Nursery& ring) {
  {
    SpinLockHolder hold(ring.lock);
    for (int slot = 0; slot < kSlots; ++slot) {
      if (ring.address[slot] != 0) MoveToTable(ring, slot);
    }
  }
  __atomic_store_n(&ring.claimed, 0, __ATOMIC_RELEASE);
}

void Nurseries::ReleaseAtThreadExit(void* ring) {
  BusyScope busy;                 // what the table does here is the shim's, not the host's
  g_thread.nursery = kNoNursery;  // later destructors' allocations: the table
  auto* nursery = static_cast<Nursery*>(ring);
  nursery->owner->Release(*nursery);
}

void Nurseries::LockRings() {
  registry_lock_.Lock();
  for (uint32_t i = 0; i < ring_count_; ++i) rings_[i]->lock.Lock();
}

void Nurseries::UnlockRings() {
  for (uint32_t i = ring_count_; i > 0; --i) rings_[i - 1]->lock.Unlock();
  registry_lock_.Unlock();
}

void Nurseries::ResetLocksInChild() {
  registry_lock_.ResetInChild();
  for (uint32_t i = 0; i < ring_count_; ++i) rings_[i]->lock.ResetInChild();
}

void Nurseries::ReleaseOthersInChild() {
  const uintptr_t mine = g_thread.nursery;
  for (uint32_t i = 0; i < ring_count_; ++i) {
    Nursery* ring = rings_[i];
    if (reinterpret_cast<uintptr_t>(ring) != mine && ring->claimed != 0) Release(*ring);
  }
}

size_t Nurseries::CountLocked() const {
  size_t count = 0;
  for (uint32_t i = 0; i < ring_count_; ++i) count += rings_[i]->count;
  return count;
}

void Nurseries::Describe(const Nursery& ring, int slot, LiveRecord* out) const {
  *out = ring.record[slot];
  // As the table gives its records' thread and time: through the birth
  // block (the time to its unit), so a record reads the same in a ring or
  // in the table.
  births_->Describe(out->birth_sequence, ring.time_offset[slot], &out->thread_id,
                    &out->birth_time_us);
}

size_t Nurseries::CopyLocked(LiveRecord* out) const {
  size_t copied = 0;
  for (uint32_t i = 0; i < ring_count_; ++i) {
    const Nursery& ring = *rings_[i];
    for (int slot = 0; slot < kSlots; ++slot) {
      if (ring.address[slot] != 0) Describe(ring, slot, &out[copied++]);
    }
  }
  return copied;
}

namespace {
void AddRing(const Nursery& ring, KindCounters* heap) {
  KindCounters add;
  add.allocated_bytes = ring.allocated_bytes - ring.moved_bytes;  // the rest, the table's
  add.allocated_count = ring.allocated_count - ring.moved_count;
  add.freed_bytes = ring.freed_bytes;
  add.freed_count = ring.freed_count;
  add.live_bytes = add.allocated_bytes - ring.freed_bytes;
  add.live_count = add.allocated_count - ring.freed_count;
  heap->Add(add);
}
}  // namespace

void Nurseries::SumCountersLocked(KindCounters* heap) const {
  for (uint32_t i = 0; i < ring_count_; ++i) AddRing(*rings_[i], heap);
}

void Nurseries::SumCounters(KindCounters* heap) {
  const uint32_t made = __atomic_load_n(&ring_count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < made; ++i) {
    SpinLockHolder hold(rings_[i]->lock);
    AddRing(*rings_[i], heap);
  }
}

size_t Nurseries::VisitTags(void (*visit)(uint32_t tag_id, uint64_t argument), uint64_t argument) {
  size_t seen = 0;
  const uint32_t made = __atomic_load_n(&ring_count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < made; ++i) {
    Nursery& ring = *rings_[i];
    SpinLockHolder hold(ring.lock);
    for (int slot = 0; slot < kSlots; ++slot) {
      if (ring.address[slot] == 0) continue;
      ++seen;
      if (ring.record[slot].tag_id != 0) visit(ring.record[slot].tag_id, argument);
    }
  }
  return seen;
}

size_t Nurseries::Count() {
  size_t count = 0;
  const uint32_t made = __atomic_load_n(&ring_count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < made; ++i) {
    SpinLockHolder hold(rings_[i]->lock);
    count += rings_[i]->count;
  }
  return count;
}

size_t Nurseries::MemoryBytes() const {
  return size_t{__atomic_load_n(&ring_count_, __ATOMIC_ACQUIRE)} *
         (sizeof(Nursery) + alignof(Nursery));
}

}  // namespace retain::shim
