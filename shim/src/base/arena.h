// arena: memory for the shim's own data, straight from the kernel.
//
// Nothing the shim keeps lives in the host's heap: its bookkeeping never shows
// up as the host's memory and getting it never re-enters the hooks. Pages come
// from raw mmap system calls (not the interposed mmap). Every byte is counted
// against RETAIN_MAX_MEMORY; past the cap a request fails (returns nullptr) and
// the caller degrades: it keeps counting, stops keeping records.
//
// Thread-safe. Never allocates from the host heap, never blocks except on the
// bump lock, never clobbers errno (callers in hooks save it anyway).
#ifndef RETAIN_SHIM_SRC_BASE_ARENA_H_
#define RETAIN_SHIM_SRC_BASE_ARENA_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// Sets the cap (bytes). 0 means no cap.
void SetArenaCap(uint64_t bytes);
uint64_t ArenaCap();
// Bytes the shim keeps mapped (tables, stacks), not counting scratch.
uint64_t ArenaBytes();
// True once any request was refused for the cap.
bool ArenaExhausted();

// Whole pages, zero-filled. `bytes` is rounded up to the page size. Returns
// nullptr when the cap would be exceeded or the kernel refuses. Pass the same
// size to UnmapPages.
void* MapPages(size_t bytes);
void UnmapPages(void* pages, size_t bytes);

// Pages for a short-lived buffer (a snapshot being written), allowed past
// the cap and not counted in ArenaBytes: the cap limits what the shim keeps,
// and a degraded shim must still be able to say so in a snapshot. Free with
// UnmapScratchPages.
void* MapScratchPages(size_t bytes);
void UnmapScratchPages(void* pages, size_t bytes);

// Permanent small objects (interned stacks, module entries), zero-filled,
// aligned to 16 bytes, carved from 1 MiB chunks. Never freed. nullptr past
// the cap.
void* ArenaAllocate(size_t bytes);
// The same on cache lines of its own: aligned to kCacheLine and rounded up to
// whole lines, so data one thread writes never shares a line with another's.
inline constexpr size_t kCacheLine = 64;
void* ArenaAllocateLines(size_t bytes);

// fork(): the prepare handler takes the bump lock so the child never
// inherits it mid-update; the parent releases it, the child resets it.
void ArenaLockForFork();
void ArenaUnlockForFork();
void ArenaResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_ARENA_H_
