// stack_table: interns call stacks, so every allocation stores a 4-byte id
// and each distinct stack is kept once.
//
// A fixed array of hash buckets with chained entries that are only ever
// added: lookups walk chains without a lock (entries are published with a
// release store), inserts take one of 64 striped locks and re-check. Ids are
// dense from 1, so the snapshot writer can address them through a two-level
// directory. Entries live in the arena and are never freed.
//
// In front of it, each thread remembers the hash and id of the stack it
// interned last (ThreadState): the same 64-bit hash again takes that id
// without touching shared memory. Behind that, a lock-free cache of 2^14
// words (128 KiB) maps a stack's hash to its id: sets of 8 words, one cache
// line each, chosen by 11 bits of the hash; a word holds 24 bits of id and
// 40 other bits of the hash. A hit
// costs one cache line and no frame comparison; that trusts 51 bits of a
// 64-bit hash, a deliberate trade: two different stacks are confused with
// probability about 2^-51 per pair (for a process with 10,000 distinct
// stacks, about one chance in 45 million; with a million, one in 4,500 over
// its life). A miss takes the exact path (chains, full comparison) and fills
// an empty word of the set, else one the hash chooses. Small on purpose: a
// set per line keeps the few thousand stacks a server repeats within 128 KiB
// of cache lines, where one word per line over 512 KiB missed the CPU's
// cache on nearly every capture.
//
// The thread's last stack also takes keys (InternStackKeyed): values that
// identify a stack as a hash does but are not its hash (a stack cut at the
// depth limit is hashed from the cut, where no walker's fold starts; the
// walker's key folds the frames past the cut too). The cache and the table
// take hashes only, so each stack is still kept once, under one id.
//
// Thread-safe. Never allocates from the host heap. Not async-signal-safe.
#ifndef RETAIN_SHIM_SRC_UNWIND_STACK_TABLE_H_
#define RETAIN_SHIM_SRC_UNWIND_STACK_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/thread_state.h"

namespace retain::shim {

struct StackEntry {
  std::atomic<StackEntry*> next;  // bucket chain
  uint64_t hash;
  uint32_t id;
  uint16_t depth;
  uint8_t truncated;
  uintptr_t frames[];  // `depth` return addresses, innermost first
};

// Interns `frames[0..depth)`. Returns its id (>= 1), or 0 when the arena is
// full (the stack is then not kept; callers record id 0).
uint32_t InternStack(const uintptr_t* frames, int depth, bool truncated);

// The same, for a caller that already has StackHash(frames, depth,
// truncated) (unwind/stack_hash.h: the CFI walker folds it while walking).
// `hash` must be exactly that value: a hit in the hash -> id cache is
// trusted without comparing frames.
uint32_t InternStackHashed(const uintptr_t* frames, int depth, bool truncated, uint64_t hash);

// The same, for a caller that has a key of the stack rather than its hash:
// a 64-bit value that the same stack may have several of but that two
// stacks share only as two hashes collide (the CFI walker's key of a stack
// cut at the depth limit, CfiStackHash::cut_key). A key equal to the
// thread's last one gives that stack's id without hashing the frames;
// anything else hashes them and goes on as InternStackHashed.
uint32_t InternStackKeyed(const uintptr_t* frames, int depth, bool truncated, uint64_t key);

// The id InternStackHashed(…, hash) would give, where it can be had
// without the frames: the thread's last stack, or a hit in the hash -> id
// cache (which then becomes the thread's last). 0 otherwise: the caller
// then interns the frames. For a caller that has the hash before it has
// the frames in hand (the CFI walker leaves a reused stack in its memo).
// FindStackIdByHash past the thread's last stack: the cache.
uint32_t FindCachedStackId(uint64_t hash);
inline uint32_t FindStackIdByHash(uint64_t hash) {
  // The thread's previous stack again (a loop, a container growing): its id
  // without the cache's line, which the program's own data has often pushed
  // out of the CPU's caches by then. The whole 64-bit hash must match, more
  // than the cache trusts. Measured: 120 alternating runs of the low-work
  // workload, -7 ns per call.
  if (hash == g_thread.last_stack_hash && g_thread.last_stack_id != 0) {
    return g_thread.last_stack_id;
  }
  return FindCachedStackId(hash);
}
// The same for a key (InternStackKeyed): the thread's last stack only.
uint32_t FindStackIdByKey(uint64_t key);
// After FindStackIdByHash found a stack that has `key`: the thread's last
// stack is kept under the key, as InternStackKeyed keeps it.
void NoteStackKey(uint64_t key);

// The entry with id `id`, or nullptr. Ids from 1 to StackCount().
const StackEntry* FindStackById(uint32_t id);
uint32_t StackCount();

// Arena bytes the table holds: entries, hash buckets, id directory pages.
uint64_t StackTableBytes();

// fork(): see base/arena.h.
void StackTableLockForFork();
void StackTableUnlockForFork();
void StackTableResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_STACK_TABLE_H_
