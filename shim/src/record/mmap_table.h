// mmap_table: live memory mappings the program made with mmap/mremap, as
// address ranges that munmap can trim, split or remove and that MAP_FIXED or
// mremap can replace.
//
// A sorted array of non-overlapping ranges in arena pages under one lock.
// Mapping calls are rare next to malloc, so the hooks hold the lock across
// the real system call: the table then changes in exactly the order the
// kernel's address space does, even when threads race to reuse a range.
//
// Thread-safe. Never allocates from the host heap. Not async-signal-safe.
#ifndef RETAIN_SHIM_SRC_RECORD_MMAP_TABLE_H_
#define RETAIN_SHIM_SRC_RECORD_MMAP_TABLE_H_

#include <cstddef>
#include <cstdint>

#include "record/kinds.h"

namespace retain::shim {

struct MapRecord {
  uintptr_t start;
  uintptr_t end;  // exclusive
  uint64_t birth_sequence;
  uint64_t birth_time_us;
  uint64_t flags;  // prot | (mmap flags << 8)
  uint32_t stack_id;
  uint32_t thread_id;
  uint32_t tag_id;
  Kind kind;
  uint8_t attribution;  // retain.v1.Attribution of tag_id
};

// Trivially constructible, like LiveTable (see there).
class MmapTable {
 public:
  void Lock();
  void Unlock();

  // All below require Lock().

  // Removes whatever overlaps [start, end) (trimming or splitting records
  // that extend past it) and counts those bytes as freed. Returns false when
  // nothing overlapped.
  bool RemoveRange(uintptr_t start, uintptr_t end);
  // An munmap of a range the shim never recorded.
  void CountUnknownUnmap() { ++unknown_unmaps_; }
  // RemoveRange over the record's range, then adds it as allocated.
  // Returns false when dropped for lack of arena memory.
  bool Insert(const MapRecord& record);
  // The record containing `address`, copied to *out; false if none.
  bool Lookup(uintptr_t address, MapRecord* out) const;
  // Copies out up to `capacity` records (in address order); returns the count.
  size_t Copy(MapRecord* out, size_t capacity) const;
  size_t size() const { return count_; }
  // Calls visit(tag_id, argument) for each record with a request tag.
  void VisitTags(void (*visit)(uint32_t tag_id, uint64_t argument), uint64_t argument) const {
    for (size_t i = 0; i < count_; ++i) {
      if (records_[i].tag_id != 0) visit(records_[i].tag_id, argument);
    }
  }
  // Counters per kind (index KindIndex).
  const KindCounters& counters(int index) const { return counters_[index]; }
  uint64_t dropped() const { return dropped_; }
  uint64_t dropped_bytes() const { return dropped_bytes_; }
  uint64_t unknown_unmaps() const { return unknown_unmaps_; }

  void ResetLockInChild();

 private:
  size_t LowerBound(uintptr_t address) const;  // first record with end > address
  bool Reserve(size_t count);
  void InsertAt(size_t index, const MapRecord& record);
  void EraseAt(size_t index);

  MapRecord* records_;
  size_t count_;
  size_t capacity_;
  KindCounters counters_[kKindCount];
  uint64_t dropped_;
  uint64_t dropped_bytes_;
  uint64_t unknown_unmaps_;
};

// The process's table of program mappings.
MmapTable& ProgramMappings();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_MMAP_TABLE_H_
