// tag_table: see record/tag_table.h.
#include "record/tag_table.h"

#include <string.h>

#include "base/arena.h"
#include "base/large_static.h"
#include "base/process_info.h"
#include "base/spin_lock.h"
#include "base/thread_state.h"

namespace retain::shim {
namespace {

// id = top (10 bits) | mid (12 bits) | leaf (10 bits).
constexpr uint32_t kLeafBits = 10;
constexpr uint32_t kMidBits = 12;
constexpr uint32_t kLeafEntries = 1u << kLeafBits;
constexpr uint32_t kMidEntries = 1u << kMidBits;
constexpr uint32_t kTopEntries = 1u << (32 - kLeafBits - kMidBits);
// How far back the process-latest rule looks for a request still open
// after the latest one closed.
constexpr uint32_t kLatestSearch = 256;
// Fewest ended tags between two compactions, and the share of the live
// records a compaction may cost per ended request (it scans them all).
constexpr uint64_t kMinCompactionBatch = 256;
constexpr uint64_t kLiveRecordsPerEndedTag = 64;

// A freed leaf page links the spare list through its first slot, tagged
// with the low bit so that a stale lookup never takes it for an entry.
constexpr uintptr_t kSpareLink = 1;

struct LeafPage {
  std::atomic<TagEntry*> entries[kLeafEntries];
};

struct MidPage {
  std::atomic<LeafPage*> leaves[kMidEntries];
  uint16_t retained[kMidEntries];  // entries not released, per leaf
  uint32_t leaf_count;
  MidPage* next_spare;
};

SpinLock g_lock;  // every change to the directory and the free lists
std::atomic<uint32_t> g_next_id{1};
std::atomic<uint64_t> g_closed;
std::atomic<uint64_t> g_aborted;
// The most recently opened tag that may still be open (0: none).
std::atomic<uint32_t> g_latest_open;
RETAIN_LARGE_STATIC std::atomic<MidPage*> g_top[kTopEntries];

std::atomic<uint64_t> g_generation;
std::atomic<uint64_t> g_ended_since_compaction;
std::atomic<uint64_t> g_compaction_batch{kMinCompactionBatch};

// Under g_lock. Reusable now, and released by the last compaction (reusable
// after the next one).
TagEntry* g_free_entries;
TagEntry* g_quarantined_entries;
LeafPage* g_spare_leaves;
LeafPage* g_quarantined_leaves;
MidPage* g_spare_mids;
MidPage* g_quarantined_mids;

uint64_t g_retained;
uint64_t g_released;
uint64_t g_released_unreported;
uint64_t g_entry_bytes;
uint64_t g_page_bytes;
uint64_t g_compactions;

uint32_t TopIndex(uint32_t id) { return id >> (kLeafBits + kMidBits); }
uint32_t MidIndex(uint32_t id) { return (id >> kLeafBits) & (kMidEntries - 1); }
uint32_t LeafIndex(uint32_t id) { return id & (kLeafEntries - 1); }

void CopyField(char* out, size_t size, const char* text) {
  if (text == nullptr) {
    out[0] = '\0';
    return;
  }
  size_t length = strnlen(text, size - 1);
  memcpy(out, text, length);
  out[length] = '\0';
}

LeafPage* PopLeafLocked() {
  LeafPage* leaf = g_spare_leaves;
  if (leaf != nullptr) {
    g_spare_leaves = reinterpret_cast<LeafPage*>(
        reinterpret_cast<uintptr_t>(leaf->entries[0].load(std::memory_order_relaxed)) &
        ~kSpareLink);
    leaf->entries[0].store(nullptr, std::memory_order_relaxed);
    return leaf;
  }
  leaf = static_cast<LeafPage*>(MapPages(sizeof(LeafPage)));
  if (leaf != nullptr) g_page_bytes += sizeof(LeafPage);
  return leaf;
}

void PushLeafLocked(LeafPage** list, LeafPage* leaf) {
  leaf->entries[0].store(
      reinterpret_cast<TagEntry*>(reinterpret_cast<uintptr_t>(*list) | kSpareLink),
      std::memory_order_release);
  *list = leaf;
}

MidPage* PopMidLocked() {
  MidPage* mid = g_spare_mids;
  if (mid != nullptr) {
    g_spare_mids = mid->next_spare;
    mid->next_spare = nullptr;
    return mid;
  }
  mid = static_cast<MidPage*>(MapPages(sizeof(MidPage)));
  if (mid != nullptr) g_page_bytes += sizeof(MidPage);
  return mid;
}

// The leaf slot for `id`, creating its pages. nullptr for lack of memory.
std::atomic<TagEntry*>* SlotForLocked(uint32_t id, MidPage** mid_out) {
  std::atomic<MidPage*>& top = g_top[TopIndex(id)];
  MidPage* mid = top.load(std::memory_order_relaxed);
  if (mid == nullptr) {
    mid = PopMidLocked();
    if (mid == nullptr) return nullptr;
    top.store(mid, std::memory_order_release);
  }
  std::atomic<LeafPage*>& leaf_slot = mid->leaves[MidIndex(id)];
  LeafPage* leaf = leaf_slot.load(std::memory_order_relaxed);
  if (leaf == nullptr) {
    leaf = PopLeafLocked();
    if (leaf == nullptr) return nullptr;
    leaf_slot.store(leaf, std::memory_order_release);
    ++mid->leaf_count;
  }
  *mid_out = mid;
  return &leaf->entries[LeafIndex(id)];
}

TagEntry* NewEntryLocked() {
  TagEntry* entry = g_free_entries;
  if (entry != nullptr) {
    g_free_entries = entry->next_free;
    return entry;
  }
  entry = static_cast<TagEntry*>(ArenaAllocate(sizeof(TagEntry)));
  if (entry != nullptr) g_entry_bytes += sizeof(TagEntry);
  return entry;
}

bool IsOpen(const TagEntry* entry) {
  return entry != nullptr && entry->end_us.load(std::memory_order_acquire) == 0;
}

// The first id not yet handed out: pages below it receive no new entries.
bool RangeEnded(uint32_t last_id_of_range) {
  return last_id_of_range < g_next_id.load(std::memory_order_relaxed);
}

void ReleaseLocked(TagEntry* entry) {
  const uint32_t id = entry->id;
  if (!entry->reported.load(std::memory_order_relaxed)) ++g_released_unreported;
  entry->state.store(TagState::kReleased, std::memory_order_release);
  MidPage* mid = g_top[TopIndex(id)].load(std::memory_order_relaxed);
  LeafPage* leaf = mid->leaves[MidIndex(id)].load(std::memory_order_relaxed);
  leaf->entries[LeafIndex(id)].store(nullptr, std::memory_order_release);
  entry->next_free = g_quarantined_entries;
  g_quarantined_entries = entry;
  --g_retained;
  ++g_released;
  if (--mid->retained[MidIndex(id)] == 0 && RangeEnded(id | (kLeafEntries - 1))) {
    mid->leaves[MidIndex(id)].store(nullptr, std::memory_order_release);
    PushLeafLocked(&g_quarantined_leaves, leaf);
    if (--mid->leaf_count == 0 && RangeEnded(id | ((1u << (kLeafBits + kMidBits)) - 1))) {
      g_top[TopIndex(id)].store(nullptr, std::memory_order_release);
      mid->next_spare = g_quarantined_mids;
      g_quarantined_mids = mid;
    }
  }
}

// Everything the previous compaction released is now safe to reuse.
void RecycleQuarantineLocked() {
  while (TagEntry* entry = g_quarantined_entries) {
    g_quarantined_entries = entry->next_free;
    entry->next_free = g_free_entries;
    g_free_entries = entry;
  }
  while (LeafPage* leaf = g_quarantined_leaves) {
    g_quarantined_leaves = reinterpret_cast<LeafPage*>(
        reinterpret_cast<uintptr_t>(leaf->entries[0].load(std::memory_order_relaxed)) &
        ~kSpareLink);
    PushLeafLocked(&g_spare_leaves, leaf);
  }
  while (MidPage* mid = g_quarantined_mids) {
    g_quarantined_mids = mid->next_spare;
    mid->next_spare = g_spare_mids;
    g_spare_mids = mid;
  }
}

// Visits every retained entry in id order, under g_lock. Up to the last id
// handed out (0 once all 2^32 - 1 were): a process with few requests reads
// one word of the directory's 8 KiB, not two pages it never wrote.
template <typename Visit>
void ForEachLocked(Visit visit) {
  const uint32_t next_id = g_next_id.load(std::memory_order_relaxed);
  const uint32_t top_end = next_id == 0 ? kTopEntries : TopIndex(next_id - 1) + 1;
  for (uint32_t t = 0; t < top_end; ++t) {
    MidPage* mid = g_top[t].load(std::memory_order_relaxed);
    if (mid == nullptr) continue;
    for (uint32_t m = 0; m < kMidEntries && mid == g_top[t].load(std::memory_order_relaxed); ++m) {
      LeafPage* leaf = mid->leaves[m].load(std::memory_order_relaxed);
      if (leaf == nullptr) continue;
      for (uint32_t l = 0; l < kLeafEntries; ++l) {
        TagEntry* entry = leaf->entries[l].load(std::memory_order_relaxed);
        if (entry == nullptr || (reinterpret_cast<uintptr_t>(entry) & kSpareLink) != 0) continue;
        visit(entry);
        // visit may release the entry and with it the leaf (and the mid).
        if (mid->leaves[m].load(std::memory_order_relaxed) != leaf) break;
      }
    }
  }
}

}  // namespace

uint32_t OpenTag(TagSource source, const char* request_id, const char* method, const char* path) {
  uint32_t id;
  {
    SpinLockHolder hold(g_lock);
    TagEntry* entry = NewEntryLocked();
    if (entry == nullptr) return 0;
    id = g_next_id.load(std::memory_order_relaxed);
    MidPage* mid = nullptr;
    std::atomic<TagEntry*>* slot = id == 0 ? nullptr : SlotForLocked(id, &mid);
    if (slot == nullptr) {  // no memory for the directory, or 2^32 requests
      entry->next_free = g_free_entries;
      g_free_entries = entry;
      return 0;
    }
    g_next_id.store(id + 1, std::memory_order_relaxed);
    entry->id = id;
    entry->source = source;
    entry->thread_id = CurrentThreadId();
    entry->state.store(TagState::kOpen, std::memory_order_relaxed);
    entry->reported.store(false, std::memory_order_relaxed);
    CopyField(entry->request_id, sizeof(entry->request_id), request_id);
    CopyField(entry->method, sizeof(entry->method), method);
    CopyField(entry->path, sizeof(entry->path), path);
    entry->start_us = MicrosSinceStart();
    entry->end_us.store(0, std::memory_order_relaxed);
    entry->aborted.store(false, std::memory_order_relaxed);
    entry->bytes_allocated.store(0, std::memory_order_relaxed);
    entry->closed_generation = 0;
    entry->referenced_generation.store(0, std::memory_order_relaxed);
    entry->next_free = nullptr;
    slot->store(entry, std::memory_order_release);
    ++mid->retained[MidIndex(id)];
    ++g_retained;
  }
  // The newest request is the one a taskless thread works for.
  uint32_t latest = g_latest_open.load(std::memory_order_relaxed);
  while (latest < id &&
         !g_latest_open.compare_exchange_weak(latest, id, std::memory_order_acq_rel)) {
  }
  return id;
}

uint64_t CloseTag(uint32_t id, bool aborted) {
  TagEntry* entry = FindTag(id);
  if (entry == nullptr) return 0;
  uint64_t end = MicrosSinceStart();
  if (end == 0) end = 1;  // 0 means open
  uint64_t expected = 0;
  if (!entry->end_us.compare_exchange_strong(expected, end, std::memory_order_acq_rel)) {
    return 0;
  }
  if (aborted) {
    entry->aborted.store(true, std::memory_order_release);
    g_aborted.fetch_add(1, std::memory_order_relaxed);
  }
  entry->closed_generation = g_generation.load(std::memory_order_acquire);
  entry->state.store(TagState::kEnded, std::memory_order_release);
  const uint64_t ordinal = g_closed.fetch_add(1, std::memory_order_relaxed) + 1;
  g_ended_since_compaction.fetch_add(1, std::memory_order_relaxed);
  // If this was the latest open request, the latest becomes the newest one
  // still open (looked for once here, not on every allocation).
  uint32_t replacement = 0;
  for (uint32_t candidate = id - 1; candidate != 0 && id - candidate <= kLatestSearch;
       --candidate) {
    if (IsOpen(FindTag(candidate))) {
      replacement = candidate;
      break;
    }
  }
  uint32_t current = id;
  g_latest_open.compare_exchange_strong(current, replacement, std::memory_order_acq_rel);
  return ordinal;
}

TagEntry* FindTag(uint32_t id) {
  if (id == 0) return nullptr;
  MidPage* mid = g_top[TopIndex(id)].load(std::memory_order_acquire);
  if (mid == nullptr) return nullptr;
  LeafPage* leaf = mid->leaves[MidIndex(id)].load(std::memory_order_acquire);
  if (leaf == nullptr) return nullptr;
  TagEntry* entry = leaf->entries[LeafIndex(id)].load(std::memory_order_acquire);
  if (entry == nullptr || (reinterpret_cast<uintptr_t>(entry) & kSpareLink) != 0) return nullptr;
  // A page or entry reused since this thread loaded its pointer holds
  // another id: a miss, not another request's entry.
  return entry->id == id ? entry : nullptr;
}

uint32_t TagCount() { return g_next_id.load(std::memory_order_relaxed) - 1; }
uint64_t ClosedTagCount() { return g_closed.load(std::memory_order_relaxed); }
uint64_t AbortedTagCount() { return g_aborted.load(std::memory_order_relaxed); }

void SetThreadTag(uint32_t id, Attribution rule) {
  g_thread.tag_id = id;
  g_thread.tag_rule = id == 0 ? 0 : static_cast<uint32_t>(rule);
}

uint32_t AttributeAllocation(uint64_t bytes, Attribution* rule) {
  uint32_t id = g_thread.tag_id;
  TagEntry* entry = nullptr;
  if (id != 0) {
    entry = FindTag(id);
    if (entry != nullptr && entry->state.load(std::memory_order_acquire) <= TagState::kEnded) {
      *rule = static_cast<Attribution>(g_thread.tag_rule);
    } else {
      // Its request ended long ago and is being released.
      SetThreadTag(0, Attribution::kNone);
      id = 0;
      entry = nullptr;
    }
  }
  if (id == 0) {
    // The most recent request still open (CloseTag keeps it current).
    uint32_t latest = g_latest_open.load(std::memory_order_acquire);
    if (latest != 0) {
      entry = FindTag(latest);
      if (IsOpen(entry)) {
        id = latest;
      } else {
        entry = nullptr;
      }
    }
    *rule = id == 0 ? Attribution::kNone : Attribution::kProcessLatest;
  }
  if (entry != nullptr) entry->bytes_allocated.fetch_add(bytes, std::memory_order_relaxed);
  return id;
}

bool TagCompactionDue() {
  return g_ended_since_compaction.load(std::memory_order_relaxed) >=
         g_compaction_batch.load(std::memory_order_relaxed);
}

uint64_t BeginTagScan() {
  SpinLockHolder hold(g_lock);
  g_ended_since_compaction.store(0, std::memory_order_relaxed);
  return g_generation.fetch_add(1, std::memory_order_acq_rel) + 1;
}

void MarkTagReferenced(uint32_t id, uint64_t generation) {
  if (TagEntry* entry = FindTag(id)) {
    entry->referenced_generation.store(generation, std::memory_order_relaxed);
  }
}

void FinishTagScan(uint64_t generation, size_t live_records) {
  SpinLockHolder hold(g_lock);
  RecycleQuarantineLocked();
  // Ended before the scan began, and referenced by no record it saw.
  auto unreferenced = [generation](const TagEntry* entry) {
    TagState state = entry->state.load(std::memory_order_relaxed);
    return (state == TagState::kEnded || state == TagState::kRetiring) &&
           entry->closed_generation < generation &&
           entry->referenced_generation.load(std::memory_order_relaxed) != generation;
  };
  uint64_t unreported = 0;
  ForEachLocked([&](TagEntry* entry) {
    if (unreferenced(entry) && !entry->reported.load(std::memory_order_relaxed)) ++unreported;
  });
  // The oldest unreported ones beyond kUnreportedKept go as if reported.
  uint64_t unreported_to_drop = unreported > kUnreportedKept ? unreported - kUnreportedKept : 0;
  ForEachLocked([&](TagEntry* entry) {
    TagState state = entry->state.load(std::memory_order_relaxed);
    if (state != TagState::kEnded && state != TagState::kRetiring) return;
    if (!unreferenced(entry)) {
      // A record still (or again) refers to it: keep it.
      if (state == TagState::kRetiring && entry->closed_generation < generation) {
        entry->state.store(TagState::kEnded, std::memory_order_release);
      }
      return;
    }
    if (!entry->reported.load(std::memory_order_relaxed)) {
      if (unreported_to_drop == 0) return;
      --unreported_to_drop;
    }
    if (state == TagState::kEnded) {
      entry->state.store(TagState::kRetiring, std::memory_order_release);
    } else {
      ReleaseLocked(entry);
    }
  });
  uint64_t batch = live_records / kLiveRecordsPerEndedTag;
  g_compaction_batch.store(batch > kMinCompactionBatch ? batch : kMinCompactionBatch,
                           std::memory_order_relaxed);
  ++g_compactions;
}

void ForEachRetainedTag(void (*visit)(TagEntry* entry, void* argument), void* argument) {
  SpinLockHolder hold(g_lock);
  ForEachLocked([&](TagEntry* entry) { visit(entry, argument); });
}

TagTableStats GetTagTableStats() {
  SpinLockHolder hold(g_lock);
  return TagTableStats{g_retained, g_released, g_released_unreported, g_entry_bytes + g_page_bytes,
                       g_compactions};
}

void TagTableLockForFork() { g_lock.Lock(); }
void TagTableUnlockForFork() { g_lock.Unlock(); }
void TagTableResetInChild() { g_lock.ResetInChild(); }

}  // namespace retain::shim
