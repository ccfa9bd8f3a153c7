// birth_sequence: the number every record gets when it is born, so that two
// snapshots of one process tell exactly which allocations came after the
// first (retain-diff's exact mode: born at or after its next_birth_sequence).
//
// A single counter bumped by every allocation would be a cache line that all
// allocating threads fight over. Instead each thread takes numbers in blocks
// of kBlock and hands them out privately. A snapshot, holding every table
// lock, starts a new generation and reads the counter: a thread that next
// takes a table lock sees the new generation and takes a fresh block, so
// every record inserted after the snapshot is numbered at or above what the
// snapshot read, and every record in the snapshot below it. Numbers are
// unique but not in time order across threads (within a thread they are).
#ifndef RETAIN_SHIM_SRC_BIRTH_SEQUENCE_H_
#define RETAIN_SHIM_SRC_BIRTH_SEQUENCE_H_

#include <cstdint>

#include "thread_state.h"

namespace retain::shim {

class BirthSequence {
 public:
  static constexpr uint64_t kBlock = 1024;

  // The next number for this thread. The caller holds a lock of a table
  // that snapshots lock (a LiveTable shard, the mappings lock).
  uint64_t Take() {
    ThreadState& thread = g_thread;
    const uint32_t generation = __atomic_load_n(&generation_, __ATOMIC_RELAXED);
    if (__builtin_expect(thread.birth_next < thread.birth_end &&
                             thread.birth_generation == generation && thread.birth_owner == this,
                         1)) {
      return thread.birth_next++;
    }
    const uint64_t block = __atomic_fetch_add(&next_, kBlock, __ATOMIC_RELAXED);
    thread.birth_next = block + 1;
    thread.birth_end = block + kBlock;
    thread.birth_generation = generation;
    thread.birth_owner = this;
    return block;
  }

  // For a snapshot, with every table lock held: the first number no record
  // in the tables has, and no later record will be below.
  uint64_t StartGeneration() {
    __atomic_fetch_add(&generation_, 1, __ATOMIC_RELAXED);
    return __atomic_load_n(&next_, __ATOMIC_RELAXED);
  }

  // Numbers given out so far (an upper bound on every record's number).
  uint64_t Peek() const { return __atomic_load_n(&next_, __ATOMIC_RELAXED); }

 private:
  // Zero-filled storage is a valid state: numbering starts at 0 + the first
  // block (1 is kept for "unknown" by nobody; 0 is a valid number).
  uint64_t next_;
  uint32_t generation_;
};

// The process's one sequence (defined in recorder.cc).
BirthSequence& Births();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BIRTH_SEQUENCE_H_
