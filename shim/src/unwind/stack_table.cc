// stack_table: see unwind/stack_table.h.
#include "unwind/stack_table.h"

#include <string.h>

#include "base/arena.h"
#include "base/large_static.h"
#include "base/spin_lock.h"
#include "base/thread_state.h"
#include "unwind/stack_hash.h"

namespace retain::shim {
namespace {

constexpr int kBucketBits = 17;  // 1 MiB; the hash -> id cache takes most lookups
constexpr size_t kBucketCount = size_t{1} << kBucketBits;
constexpr int kLockCount = 64;
// Id directory: kDirectorySize pages of kPageEntries entry pointers each.
constexpr uint32_t kPageEntries = 4096;
constexpr uint32_t kDirectorySize = 4096;

std::atomic<std::atomic<StackEntry*>*> g_buckets;
SpinLock g_bucket_setup_lock;
SpinLock g_locks[kLockCount];
std::atomic<uint32_t> g_next_id{1};
// The hash -> id cache (unwind/stack_table.h): sets of kCacheWays words, 0 = empty.
constexpr int kCacheBits = 14;  // 16,384 words in sets of a cache line
constexpr int kCacheWays = 8;
std::atomic<std::atomic<uint64_t>*> g_cache;
constexpr uint64_t kCacheIdBits = 24;
std::atomic<uint64_t> g_table_bytes;
RETAIN_LARGE_STATIC std::atomic<std::atomic<StackEntry*>*> g_directory[kDirectorySize];

// Set when the arena refused the bucket array or the cache: from then on
// interning fails fast (id 0) instead of taking the setup lock every time.
std::atomic<bool> g_setup_failed;

// The array behind `slot`, mapped on first use (`count` elements of T;
// untouched pages cost no memory, they fill in as stacks arrive).
template <typename T>
T* MapOnce(std::atomic<T*>& slot, size_t count) {
  T* array = slot.load(std::memory_order_acquire);
  if (array != nullptr || g_setup_failed.load(std::memory_order_relaxed)) return array;
  SpinLockHolder hold(g_bucket_setup_lock);
  array = slot.load(std::memory_order_acquire);
  if (array == nullptr) {
    array = static_cast<T*>(MapPages(sizeof(T) * count));
    if (array != nullptr) {
      g_table_bytes.fetch_add(sizeof(T) * count, std::memory_order_relaxed);
    } else {
      g_setup_failed.store(true, std::memory_order_relaxed);
    }
    slot.store(array, std::memory_order_release);
  }
  return array;
}

std::atomic<StackEntry*>* Buckets() { return MapOnce(g_buckets, kBucketCount); }

bool SameStack(const StackEntry* entry, uint64_t hash, const uintptr_t* frames, int depth,
               bool truncated) {
  return entry->hash == hash && entry->depth == depth && entry->truncated == truncated &&
         memcmp(entry->frames, frames, sizeof(uintptr_t) * depth) == 0;
}

StackEntry* FindInChain(StackEntry* entry, uint64_t hash, const uintptr_t* frames, int depth,
                        bool truncated) {
  for (; entry != nullptr; entry = entry->next.load(std::memory_order_acquire)) {
    if (SameStack(entry, hash, frames, depth, truncated)) return entry;
  }
  return nullptr;
}

bool PublishId(StackEntry* entry) {
  uint32_t page_index = entry->id / kPageEntries;
  if (page_index >= kDirectorySize) return false;
  std::atomic<StackEntry*>* page = g_directory[page_index].load(std::memory_order_acquire);
  if (page == nullptr) {
    page = static_cast<std::atomic<StackEntry*>*>(
        MapPages(sizeof(std::atomic<StackEntry*>) * kPageEntries));
    if (page == nullptr) return false;
    std::atomic<StackEntry*>* expected = nullptr;
    if (!g_directory[page_index].compare_exchange_strong(expected, page)) {
      UnmapPages(page, sizeof(std::atomic<StackEntry*>) * kPageEntries);
      page = expected;
    } else {
      g_table_bytes.fetch_add(sizeof(std::atomic<StackEntry*>) * kPageEntries,
                              std::memory_order_relaxed);
    }
  }
  page[entry->id % kPageEntries].store(entry, std::memory_order_release);
  return true;
}

std::atomic<uint64_t>* Cache() { return MapOnce(g_cache, size_t{1} << kCacheBits); }

uint32_t InternShared(const uintptr_t* frames, int depth, bool truncated, uint64_t hash);
// InternStackHashed for a stack the thread's last and the hash -> id cache
// do not hold: the table, then the cache is filled.
uint32_t InternAndCache(const uintptr_t* frames, int depth, bool truncated, uint64_t hash);

constexpr uint64_t kCacheIdMask = (uint64_t{1} << kCacheIdBits) - 1;

// The hash -> id cache's set for `hash` (nullptr without a cache).
std::atomic<uint64_t>* CacheSet(uint64_t hash) {
  std::atomic<uint64_t>* cache = Cache();
  // The set: one cache line of kCacheWays words, chosen by the hash's top
  // bits; a word holds the hash's low 40 bits over the id.
  return cache != nullptr ? &cache[(hash >> (64 - kCacheBits + 3)) * kCacheWays] : nullptr;
}

// The id `set` holds for `hash`, or 0.
uint32_t FindInSet(const std::atomic<uint64_t>* set, uint64_t hash) {
  if (set == nullptr) return 0;
  const uint64_t tag = hash << kCacheIdBits;
  for (int way = 0; way < kCacheWays; ++way) {
    const uint64_t word = set[way].load(std::memory_order_relaxed);
    if (word == 0) break;  // ways fill in order: the rest are empty
    if ((word & ~kCacheIdMask) == tag) return static_cast<uint32_t>(word & kCacheIdMask);
  }
  return 0;
}

}  // namespace

uint32_t InternStack(const uintptr_t* frames, int depth, bool truncated) {
  return InternStackHashed(frames, depth, truncated, StackHash(frames, depth, truncated));
}

uint32_t InternStackHashed(const uintptr_t* frames, int depth, bool truncated, uint64_t hash) {
  if (const uint32_t id = FindStackIdByHash(hash); id != 0) return id;
  const uint32_t id = InternAndCache(frames, depth, truncated, hash);
  g_thread.last_stack_hash = hash;
  g_thread.last_stack_id = id;
  return id;
}

uint32_t FindCachedStackId(uint64_t hash) {
  const uint32_t id = FindInSet(CacheSet(hash), hash);
  if (id != 0) {
    g_thread.last_stack_hash = hash;
    g_thread.last_stack_id = id;
  }
  return id;
}

uint32_t FindStackIdByKey(uint64_t key) {
  return key == g_thread.last_stack_hash ? g_thread.last_stack_id : 0;
}

void NoteStackKey(uint64_t key) { g_thread.last_stack_hash = key; }

uint32_t InternStackKeyed(const uintptr_t* frames, int depth, bool truncated, uint64_t key) {
  // The thread's last stack by its key; anything else by its hash. (The
  // hash -> id cache takes hashes only: a stack may have many keys, which
  // would crowd it. Measured on the deep workload: +36 ns per call with the
  // keys there, despite ~140 fewer instructions.)
  if (const uint32_t id = FindStackIdByKey(key); id != 0) return id;
  const uint32_t id =
      InternStackHashed(frames, depth, truncated, StackHash(frames, depth, truncated));
  NoteStackKey(key);  // the id InternStackHashed left, under the key
  return id;
}

namespace {

uint32_t InternAndCache(const uintptr_t* frames, int depth, bool truncated, uint64_t hash) {
  std::atomic<uint64_t>* set = CacheSet(hash);
  const uint32_t id = InternShared(frames, depth, truncated, hash);
  if (set != nullptr && id != 0 && id < (1u << kCacheIdBits)) {
    int way = 0;
    while (way < kCacheWays && set[way].load(std::memory_order_relaxed) != 0) ++way;
    if (way == kCacheWays) way = static_cast<int>(hash >> 24) & (kCacheWays - 1);
    set[way].store((hash << kCacheIdBits) | id, std::memory_order_relaxed);
  }
  return id;
}

uint32_t InternShared(const uintptr_t* frames, int depth, bool truncated, uint64_t hash) {
  std::atomic<StackEntry*>* buckets = Buckets();
  if (buckets == nullptr) return 0;
  std::atomic<StackEntry*>& bucket = buckets[hash >> (64 - kBucketBits)];
  if (StackEntry* found =
          FindInChain(bucket.load(std::memory_order_acquire), hash, frames, depth, truncated)) {
    return found->id;
  }
  SpinLockHolder hold(g_locks[hash % kLockCount]);
  StackEntry* head = bucket.load(std::memory_order_acquire);
  if (StackEntry* found = FindInChain(head, hash, frames, depth, truncated)) return found->id;
  const size_t entry_bytes = sizeof(StackEntry) + sizeof(uintptr_t) * depth;
  auto* entry = static_cast<StackEntry*>(ArenaAllocate(entry_bytes));
  if (entry == nullptr) return 0;
  g_table_bytes.fetch_add(entry_bytes, std::memory_order_relaxed);
  entry->hash = hash;
  entry->depth = static_cast<uint16_t>(depth);
  entry->truncated = truncated ? 1 : 0;
  memcpy(entry->frames, frames, sizeof(uintptr_t) * depth);
  entry->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  if (!PublishId(entry)) return 0;
  entry->next.store(head, std::memory_order_relaxed);
  bucket.store(entry, std::memory_order_release);
  return entry->id;
}

}  // namespace

const StackEntry* FindStackById(uint32_t id) {
  if (id == 0 || id / kPageEntries >= kDirectorySize) return nullptr;
  std::atomic<StackEntry*>* page = g_directory[id / kPageEntries].load(std::memory_order_acquire);
  if (page == nullptr) return nullptr;
  return page[id % kPageEntries].load(std::memory_order_acquire);
}

uint64_t StackTableBytes() { return g_table_bytes.load(std::memory_order_relaxed); }

uint32_t StackCount() { return g_next_id.load(std::memory_order_relaxed) - 1; }

void StackTableLockForFork() {
  g_bucket_setup_lock.Lock();
  for (SpinLock& lock : g_locks) lock.Lock();
}

void StackTableUnlockForFork() {
  for (SpinLock& lock : g_locks) lock.Unlock();
  g_bucket_setup_lock.Unlock();
}

void StackTableResetInChild() {
  for (SpinLock& lock : g_locks) lock.ResetInChild();
  g_bucket_setup_lock.ResetInChild();
}

}  // namespace retain::shim
