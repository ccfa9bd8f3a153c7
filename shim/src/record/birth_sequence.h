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
//
// Blocks also carry what would otherwise cost every record 8 bytes: the
// thread that took the block and the time it was taken. A live record keeps
// only its number and a 16-bit time offset from its block's start (units of
// kTimeUnitUs); a thread takes a new block when the offset would overflow
// (every ~4.5 minutes of allocating) or when another thread's block would be
// used (after fork).
#ifndef RETAIN_SHIM_SRC_RECORD_BIRTH_SEQUENCE_H_
#define RETAIN_SHIM_SRC_RECORD_BIRTH_SEQUENCE_H_

#include <cstdint>

#include "base/thread_state.h"

namespace retain::shim {

class BirthSequence {
 public:
  static constexpr int kBlockBits = 16;
  static constexpr uint64_t kBlock = uint64_t{1} << kBlockBits;
  // Birth times are kept to 4.096 ms (the coarse clock ticks every 4 ms).
  static constexpr int kTimeUnitBits = 12;
  static constexpr uint64_t kTimeUnitUs = uint64_t{1} << kTimeUnitBits;
  // Numbers fit 48 bits (packed records keep 48).
  static constexpr uint64_t kMaxSequence = (uint64_t{1} << 48) - 1;

  // The next number for this thread, born at `time_us` (MicrosSinceStart)
  // on thread `thread_id`; *time_offset receives the record's offset from
  // its block's start. The caller holds a lock of a table that snapshots
  // lock (a LiveTable shard, the mappings lock).
  uint64_t Take(uint32_t thread_id, uint64_t time_us, uint16_t* time_offset) {
    ThreadState& thread = g_thread;
    const uint32_t generation = __atomic_load_n(&generation_, __ATOMIC_RELAXED);
    const uint64_t units = time_us >> kTimeUnitBits;
    if (__builtin_expect(thread.birth_next < thread.birth_end &&
                             thread.birth_generation == generation && thread.birth_owner == this &&
                             thread.birth_thread == thread_id &&
                             units - thread.birth_base_units < 0x10000,
                         1)) {
      *time_offset = static_cast<uint16_t>(units - thread.birth_base_units);
      return thread.birth_next++;
    }
    return TakeBlock(thread_id, units, generation, time_offset);
  }

  // The thread and birth time of number `sequence` born `time_offset`
  // after its block's start (what Take was given, time to kTimeUnitUs).
  void Describe(uint64_t sequence, uint16_t time_offset, uint32_t* thread_id,
                uint64_t* time_us) const;

  // For a snapshot, with every table lock held: the first number no record
  // in the tables has, and no later record will be below.
  uint64_t StartGeneration() {
    __atomic_fetch_add(&generation_, 1, __ATOMIC_RELAXED);
    return __atomic_load_n(&next_, __ATOMIC_RELAXED);
  }

  // Numbers given out so far (an upper bound on every record's number).
  uint64_t Peek() const { return __atomic_load_n(&next_, __ATOMIC_RELAXED); }

  // Bytes held by the block directory's pages.
  uint64_t BlockTableBytes() const { return __atomic_load_n(&table_bytes_, __ATOMIC_RELAXED); }

 private:
  struct BlockInfo {
    uint32_t thread_id;
    uint32_t base_units;  // kTimeUnitUs units since the shim started
  };
  static constexpr int kPageBits = 13;  // BlockInfo per directory page (64 KiB)
  static constexpr uint64_t kPageEntries = uint64_t{1} << kPageBits;
  static constexpr uint64_t kDirectorySize = (uint64_t{1} << (48 - kBlockBits)) / kPageEntries;

  uint64_t TakeBlock(uint32_t thread_id, uint64_t units, uint32_t generation,
                     uint16_t* time_offset);

  // Zero-filled storage is a valid state (numbering starts at 0).
  uint64_t next_;
  uint32_t generation_;
  uint64_t table_bytes_;
  // Directory of pages of BlockInfo, by block number; pages mapped on first
  // use (the directory itself is untouched zero pages until then).
  BlockInfo* pages_[kDirectorySize];
};

// The process's one sequence (defined in record/recorder.cc).
BirthSequence& Births();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_BIRTH_SEQUENCE_H_
