// capture: the first step of a snapshot (snapshot/writer.h): taking the
// tables as of one instant. CaptureTables copies every live table and the
// program's mappings, with their per-kind counters, while holding all their
// locks at once (the mappings lock, then each live table's shard locks: the
// walk of record/live_tables.h); TagCapture copies the retained request tags
// under the tag table's lock. Encoding (snapshot/encoding.h) and the file
// (snapshot/writer.cc) work on these copies, outside every lock.
//
// Thread and signal contract: called by the snapshot writer only, with its
// mutex held and the thread busy (BusyScope); takes the tables' locks, so
// never from a signal handler or a hook. Copies go to scratch pages
// (base/arena.h), never the host heap; nothing here logs.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_CAPTURE_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_CAPTURE_H_

#include <string.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/arena.h"
#include "record/kinds.h"
#include "record/live_table.h"
#include "record/mmap_table.h"
#include "record/tag_table.h"
#include "snapshot/residency.h"

namespace retain::shim {

class Output;  // snapshot/file_output.h

// Rows of at least this many bytes are measured for residency while the
// tables are held: a block that large is its own mapping (glibc's mmap
// threshold starts at 128 KiB) or a mapping, which the program may unmap
// between the capture and the encoding; measured afterwards it would read
// 0. Smaller blocks share pages that stay mapped. The program's
// allocating threads wait for these mincore calls: one per row, over the
// row's pages only (a few microseconds per MiB).
inline constexpr uint64_t kMeasuredUnderLockBytes = 128 * 1024;
// At most this many rows are measured so (32 B each, 128 KiB of scratch);
// the rest are measured when encoded, as smaller rows are.
inline constexpr size_t kMeasuredUnderLockRows = 4096;

// A row's residency as of the capture.
struct MeasuredRow {
  uintptr_t start;
  uint64_t size;
  Residency residency;
};

// Both tables and their counters as of one instant: the mappings lock and
// every heap shard lock are held together while they are copied (the
// program's allocating threads wait for the copy, a few milliseconds per
// hundred thousand records; they never wait for the encoding or the disk).
struct TableCapture {
  LiveRecord* heap = nullptr;
  size_t heap_count = 0;
  size_t heap_capacity = 0;
  MapRecord* maps = nullptr;
  size_t map_count = 0;
  size_t map_capacity = 0;
  KindCounters counters[kKindCount] = {};
  uint64_t next_birth_sequence = 0;
  uint64_t missed_frees = 0;
  // Requests opened and closed (record/tag_table.h) as of the copy.
  uint64_t requests_opened = 0;
  uint64_t requests_closed = 0;
  uint64_t requests_aborted = 0;
  // The rows of kMeasuredUnderLockBytes or more, measured while the tables
  // were held (when CaptureTables was given a meter); sorted by start once
  // the tables are let go (SortMeasured).
  MeasuredRow* measured = nullptr;
  size_t measured_count = 0;

  ~TableCapture() {
    Release();
    UnmapScratchPages(measured, sizeof(MeasuredRow) * kMeasuredUnderLockRows);
  }
  void Release() {
    UnmapScratchPages(heap, sizeof(LiveRecord) * heap_capacity);
    UnmapScratchPages(maps, sizeof(MapRecord) * map_capacity);
    heap = nullptr;
    maps = nullptr;
  }
  // The residency measured at the capture for the row [start, start + size),
  // or nullptr when it was not measured then.
  const Residency* MeasuredAt(uintptr_t start, uint64_t size) const;
};

// The tags a snapshot shows: each retained tag that is open, referenced by
// one of its rows, or ended and not shown by an earlier snapshot. Copied
// under the tag table's lock (an entry may be reused once released), with
// each tag's bytes still live in this snapshot.
struct TagRow {
  uint32_t id;
  TagSource source;
  bool ended;
  bool reported;
  bool aborted;
  uint32_t thread_id;
  uint64_t start_us;
  uint64_t end_us;
  uint64_t bytes_allocated;
  uint64_t live_bytes;
  uint64_t live_count;
  char request_id[sizeof(TagEntry::request_id)];
  char method[sizeof(TagEntry::method)];
  char path[sizeof(TagEntry::path)];
};

class TagCapture {
 public:
  ~TagCapture() { UnmapScratchPages(rows_, sizeof(TagRow) * capacity_); }

  // Copies the retained tags. False for lack of scratch memory.
  bool Capture() {
    // Tags opened between the count and the copy are left out (they are
    // newer than every row of the table capture).
    capacity_ = GetTagTableStats().retained + 64;
    rows_ = static_cast<TagRow*>(MapScratchPages(sizeof(TagRow) * capacity_));
    if (rows_ == nullptr) return false;
    ForEachRetainedTag(
        [](TagEntry* entry, void* argument) { static_cast<TagCapture*>(argument)->Add(*entry); },
        this);
    return true;
  }

  // Counts each row's bytes into its tag; a row whose tag was released
  // meanwhile (its request ended long ago) is shown with no tag.
  void CountLive(uint32_t* tag_id, uint64_t bytes) {
    if (*tag_id == 0) return;
    TagRow* row = Find(*tag_id);
    if (row == nullptr) {
      *tag_id = 0;
      return;
    }
    row->live_bytes += bytes;
    row->live_count += 1;
  }

  // Writes the tags a snapshot shows as Snapshot.tags (snapshot/encoding.cc).
  bool Encode(Output& output) const;

  // After the snapshot is complete: its ended tags have been shown.
  void MarkReported() const {
    for (size_t i = 0; i < count_; ++i) {
      if (!rows_[i].ended || rows_[i].reported) continue;
      if (TagEntry* entry = FindTag(rows_[i].id)) {
        entry->reported.store(true, std::memory_order_relaxed);
      }
    }
  }

 private:
  void Add(const TagEntry& entry) {
    if (count_ == capacity_) return;
    TagRow& row = rows_[count_++];
    row.id = entry.id;
    row.source = entry.source;
    row.end_us = entry.end_us.load(std::memory_order_acquire);
    row.ended = row.end_us != 0;
    row.aborted = entry.aborted.load(std::memory_order_acquire);
    row.reported = entry.reported.load(std::memory_order_relaxed);
    row.thread_id = entry.thread_id;
    row.start_us = entry.start_us;
    row.bytes_allocated = entry.bytes_allocated.load(std::memory_order_relaxed);
    memcpy(row.request_id, entry.request_id, sizeof(row.request_id));
    memcpy(row.method, entry.method, sizeof(row.method));
    memcpy(row.path, entry.path, sizeof(row.path));
  }

  // Rows are in id order.
  TagRow* Find(uint32_t id) {
    size_t low = 0;
    size_t high = count_;
    while (low < high) {
      size_t middle = low + (high - low) / 2;
      if (rows_[middle].id < id) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    return low < count_ && rows_[low].id == id ? &rows_[low] : nullptr;
  }

  TagRow* rows_ = nullptr;
  size_t count_ = 0;
  size_t capacity_ = 0;
};

// Copies every table (see TableCapture). With a meter (begun), also
// measures the large rows' residency while the tables are held, then sorts
// them by start. False when scratch memory runs out or the tables keep
// outgrowing the copy.
bool CaptureTables(TableCapture& capture, ResidencyMeter* meter);

// Counts each captured row's bytes into its tag (TagCapture::CountLive).
void CountTagBytes(TableCapture& capture, TagCapture& tags);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_CAPTURE_H_
