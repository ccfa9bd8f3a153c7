// arena: see base/arena.h.
#include "base/arena.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "base/spin_lock.h"

namespace retain::shim {
namespace {

constexpr size_t kPageSize = 4096;
constexpr size_t kChunkSize = size_t{1} << 20;

std::atomic<uint64_t> g_cap;
std::atomic<uint64_t> g_mapped;
std::atomic<bool> g_exhausted;

SpinLock g_bump_lock;
char* g_bump_next;  // guarded by g_bump_lock
char* g_bump_end;   // guarded by g_bump_lock

size_t RoundToPages(size_t bytes) { return (bytes + kPageSize - 1) & ~(kPageSize - 1); }

// The interposed mmap must not see the shim's own pages: go to the kernel.
void* RawMap(size_t bytes) {
  int saved = errno;
  long result =
      syscall(SYS_mmap, nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  errno = saved;
  if (result < 0 && result > -4096) return nullptr;
  return reinterpret_cast<void*>(result);
}

void RawUnmap(void* pages, size_t bytes) {
  int saved = errno;
  syscall(SYS_munmap, pages, bytes);
  errno = saved;
}

}  // namespace

void SetArenaCap(uint64_t bytes) { g_cap.store(bytes, std::memory_order_relaxed); }
uint64_t ArenaCap() { return g_cap.load(std::memory_order_relaxed); }
uint64_t ArenaBytes() { return g_mapped.load(std::memory_order_relaxed); }
bool ArenaExhausted() { return g_exhausted.load(std::memory_order_relaxed); }

void* MapPages(size_t bytes) {
  bytes = RoundToPages(bytes);
  uint64_t cap = g_cap.load(std::memory_order_relaxed);
  uint64_t before = g_mapped.fetch_add(bytes, std::memory_order_relaxed);
  if (cap != 0 && before + bytes > cap) {
    g_mapped.fetch_sub(bytes, std::memory_order_relaxed);
    g_exhausted.store(true, std::memory_order_relaxed);
    return nullptr;
  }
  void* pages = RawMap(bytes);
  if (pages == nullptr) {
    g_mapped.fetch_sub(bytes, std::memory_order_relaxed);
    g_exhausted.store(true, std::memory_order_relaxed);
  }
  return pages;
}

void* MapScratchPages(size_t bytes) { return RawMap(RoundToPages(bytes)); }

void UnmapScratchPages(void* pages, size_t bytes) {
  if (pages != nullptr) RawUnmap(pages, RoundToPages(bytes));
}

void UnmapPages(void* pages, size_t bytes) {
  if (pages == nullptr) return;
  bytes = RoundToPages(bytes);
  RawUnmap(pages, bytes);
  g_mapped.fetch_sub(bytes, std::memory_order_relaxed);
}

namespace {

// `bytes` from the current chunk at a multiple of `alignment` (a power of
// two up to a page: chunks are page-aligned), whole multiples of it.
void* Bump(size_t bytes, size_t alignment) {
  bytes = (bytes + alignment - 1) & ~(alignment - 1);
  if (bytes > kChunkSize / 4) return MapPages(bytes);  // big: its own pages
  SpinLockHolder hold(g_bump_lock);
  char* at =
      g_bump_next == nullptr
          ? nullptr
          : reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(g_bump_next) + alignment - 1) &
                                    ~(alignment - 1));
  if (at == nullptr || at > g_bump_end || static_cast<size_t>(g_bump_end - at) < bytes) {
    char* chunk = static_cast<char*>(MapPages(kChunkSize));
    if (chunk == nullptr) return nullptr;  // the rest of the old chunk is abandoned
    at = chunk;
    g_bump_end = chunk + kChunkSize;
  }
  g_bump_next = at + bytes;
  return at;
}

}  // namespace

void* ArenaAllocate(size_t bytes) { return Bump(bytes, 16); }

void* ArenaAllocateLines(size_t bytes) { return Bump(bytes, kCacheLine); }

void ArenaLockForFork() { g_bump_lock.Lock(); }
void ArenaUnlockForFork() { g_bump_lock.Unlock(); }
void ArenaResetInChild() { g_bump_lock.ResetInChild(); }

}  // namespace retain::shim
