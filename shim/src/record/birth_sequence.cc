// birth_sequence: see record/birth_sequence.h.
#include "record/birth_sequence.h"

#include "base/arena.h"

namespace retain::shim {

uint64_t BirthSequence::TakeBlock(uint32_t thread_id, uint64_t units, uint32_t generation,
                                  uint16_t* time_offset) {
  ThreadState& thread = g_thread;
  const uint64_t block = __atomic_fetch_add(&next_, kBlock, __ATOMIC_RELAXED);
  thread.birth_next = block + 1;
  thread.birth_end = block + kBlock;
  thread.birth_generation = generation;
  thread.birth_owner = this;
  thread.birth_thread = thread_id;
  thread.birth_base_units = units;
  *time_offset = 0;
  // Publish who took the block and when. Its page may need mapping; two
  // threads racing for a new page keep one.
  const uint64_t index = block >> kBlockBits;
  const uint64_t page_index = index >> kPageBits;
  if (page_index < kDirectorySize) {
    BlockInfo* page = __atomic_load_n(&pages_[page_index], __ATOMIC_ACQUIRE);
    if (page == nullptr) {
      auto* fresh = static_cast<BlockInfo*>(MapPages(sizeof(BlockInfo) * kPageEntries));
      if (fresh != nullptr) {
        BlockInfo* expected = nullptr;
        if (__atomic_compare_exchange_n(&pages_[page_index], &expected, fresh, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
          page = fresh;
          __atomic_fetch_add(&table_bytes_, sizeof(BlockInfo) * kPageEntries, __ATOMIC_RELAXED);
        } else {
          UnmapPages(fresh, sizeof(BlockInfo) * kPageEntries);
          page = expected;
        }
      }
    }
    // Without a page (the arena's cap), the block's records read as thread
    // 0 and time 0: degraded, never wrong about sizes or numbers.
    if (page != nullptr) {
      BlockInfo& info = page[index & (kPageEntries - 1)];
      info.thread_id = thread_id;
      info.base_units = static_cast<uint32_t>(units);
    }
  }
  return block;
}

void BirthSequence::Describe(uint64_t sequence, uint16_t time_offset, uint32_t* thread_id,
                             uint64_t* time_us) const {
  const uint64_t index = sequence >> kBlockBits;
  const uint64_t page_index = index >> kPageBits;
  *thread_id = 0;
  *time_us = 0;
  if (page_index >= kDirectorySize) return;
  const BlockInfo* page = __atomic_load_n(&pages_[page_index], __ATOMIC_ACQUIRE);
  if (page == nullptr) return;
  const BlockInfo& info = page[index & (kPageEntries - 1)];
  *thread_id = info.thread_id;
  *time_us = (uint64_t{info.base_units} + time_offset) << kTimeUnitBits;
}

}  // namespace retain::shim
