// mmap_table: see record/mmap_table.h.
#include "record/mmap_table.h"

#include <string.h>

#include "base/arena.h"
#include "base/spin_lock.h"

namespace retain::shim {
namespace {

constinit SpinLock g_lock;
constinit MmapTable g_table;

}  // namespace

MmapTable& ProgramMappings() { return g_table; }

void MmapTable::Lock() { g_lock.Lock(); }
void MmapTable::Unlock() { g_lock.Unlock(); }
void MmapTable::ResetLockInChild() { g_lock.ResetInChild(); }

size_t MmapTable::LowerBound(uintptr_t address) const {
  size_t low = 0;
  size_t high = count_;
  while (low < high) {
    size_t mid = (low + high) / 2;
    if (records_[mid].end <= address) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

bool MmapTable::Reserve(size_t count) {
  if (count <= capacity_) return true;
  size_t capacity = capacity_ == 0 ? 256 : capacity_ * 2;
  while (capacity < count) capacity *= 2;
  auto* records = static_cast<MapRecord*>(MapPages(sizeof(MapRecord) * capacity));
  if (records == nullptr) return false;
  if (count_ > 0) memcpy(records, records_, sizeof(MapRecord) * count_);
  UnmapPages(records_, sizeof(MapRecord) * capacity_);
  records_ = records;
  capacity_ = capacity;
  return true;
}

void MmapTable::InsertAt(size_t index, const MapRecord& record) {
  memmove(&records_[index + 1], &records_[index], sizeof(MapRecord) * (count_ - index));
  records_[index] = record;
  ++count_;
}

void MmapTable::EraseAt(size_t index) {
  memmove(&records_[index], &records_[index + 1], sizeof(MapRecord) * (count_ - index - 1));
  --count_;
}

bool MmapTable::RemoveRange(uintptr_t start, uintptr_t end) {
  bool touched = false;
  for (size_t i = LowerBound(start); i < count_ && records_[i].start < end;) {
    MapRecord& record = records_[i];
    KindCounters& counters = counters_[KindIndex(record.kind)];
    uintptr_t cut_start = record.start > start ? record.start : start;
    uintptr_t cut_end = record.end < end ? record.end : end;
    uint64_t cut = cut_end - cut_start;
    counters.live_bytes -= cut;
    counters.freed_bytes += cut;
    touched = true;
    if (cut_start == record.start && cut_end == record.end) {  // whole record
      counters.live_count -= 1;
      counters.freed_count += 1;
      EraseAt(i);
    } else if (cut_start == record.start) {  // front
      record.start = cut_end;
      ++i;
    } else if (cut_end == record.end) {  // back
      record.end = cut_start;
      ++i;
    } else {  // middle: split in two
      MapRecord tail = record;
      tail.start = cut_end;
      record.end = cut_start;
      if (Reserve(count_ + 1)) {
        InsertAt(i + 1, tail);
        counters.live_count += 1;
      } else {  // no room for the tail: count it as gone rather than lie
        counters.live_bytes -= tail.end - tail.start;
        counters.freed_bytes += tail.end - tail.start;
        ++dropped_;
        dropped_bytes_ += tail.end - tail.start;
      }
      i += 2;
    }
  }
  return touched;
}

bool MmapTable::Insert(const MapRecord& record) {
  RemoveRange(record.start, record.end);
  KindCounters& counters = counters_[KindIndex(record.kind)];
  uint64_t bytes = record.end - record.start;
  counters.allocated_bytes += bytes;
  counters.allocated_count += 1;
  if (!Reserve(count_ + 1)) {
    ++dropped_;
    dropped_bytes_ += bytes;
    return false;
  }
  InsertAt(LowerBound(record.start), record);
  counters.live_bytes += bytes;
  counters.live_count += 1;
  return true;
}

bool MmapTable::Lookup(uintptr_t address, MapRecord* out) const {
  size_t i = LowerBound(address);
  if (i == count_ || records_[i].start > address) return false;
  *out = records_[i];
  return true;
}

size_t MmapTable::Copy(MapRecord* out, size_t capacity) const {
  size_t n = count_ < capacity ? count_ : capacity;
  if (n > 0) memcpy(out, records_, sizeof(MapRecord) * n);
  return n;
}

}  // namespace retain::shim
