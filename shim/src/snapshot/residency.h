// residency: how many of a row's bytes are in RAM and how many are swapped
// out when a snapshot is taken (AllocationBlock.resident_bytes and
// swapped_bytes in proto/retain.proto). A page is resident or swapped as a
// whole; a row counts the bytes of each such page that it covers, so a page
// shared by small blocks is apportioned among them by overlap and never
// counted twice (rows never overlap), and the rest of it (allocator
// headers, free chunks) belongs to no row.
//
// Residency comes from mincore(2), asked once per window of up to
// kWindowPages pages rather than once per row: rows arrive in address order
// (the heap rows sorted, then the mapping rows), so one window serves every
// row on its pages. mincore fails with ENOMEM at a hole (an unmapped range:
// past the end of a mapping, or a block freed since the capture); Linux
// fills the vector up to the hole, which a sentinel byte detects, and the
// window then ends there. A row whose pages are no longer mapped counts 0;
// rows of kMeasuredUnderLockBytes or more are measured by the capture while
// it holds the tables (snapshot/capture.h), so a large block freed between
// the capture and the encoding still counts as it was at the capture.
// For mmap-file rows mincore reports the page cache (a file page read by
// another process, or written shortly before, counts as resident although
// this process never touched it).
//
// Swap comes from /proc/self/pagemap (8 bytes per page, bit 62 "swapped"),
// read only for the pages mincore calls not resident, and only when the
// process has swap entries at all (VmSwap in /proc/self/status): a process
// without swap costs no pagemap read.
//
// Under a seccomp filter (base/syscall_filter.h: systemd's @system-service
// set leaves mincore out, and its default action kills), residency comes
// from the pagemap alone: bit 63 "present" (the page is mapped in this
// process, what RSS counts; a file page in the page cache that this
// process never touched counts 0, unlike mincore's answer), one window of
// entries per read. An unmapped page reads as not present there, so a hole
// in a row does not end its measure: the row's mapped pages past it count.
//
// Which kinds are measured: heap, mmap-anon, mmap-file and gpu-driver-host
// (host memory); GPU kinds are 0 (device memory is not the host's RSS).
//
// Thread and signal contract: the snapshot writer's thread only (busy, its
// mutex held); outside every table lock, except for the large rows the
// capture measures (rows_only: mincore over those rows' pages alone). Buffers are scratch pages
// (base/arena.h), never the host heap; the pagemap is read through the shim's own descriptors
// (base/own_fds.h). Nothing here logs; errno is preserved.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_RESIDENCY_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_RESIDENCY_H_

#include <cstddef>
#include <cstdint>

#include "record/kinds.h"

namespace retain::shim {

struct Residency {
  uint64_t resident = 0;
  uint64_t swapped = 0;
};

// Per-kind sums of the rows' residency (KindTotals.resident_bytes and
// swapped_bytes), indexed by KindIndex.
struct ResidencyTotals {
  uint64_t resident[kKindCount] = {};
  uint64_t swapped[kKindCount] = {};
  void Add(Kind kind, const Residency& r) {
    resident[KindIndex(kind)] += r.resident;
    swapped[KindIndex(kind)] += r.swapped;
  }
};

// True for the kinds whose rows are measured (host memory).
constexpr bool MeasuresResidency(Kind kind) {
  return kind == Kind::kHeap || kind == Kind::kMmapAnon || kind == Kind::kMmapFile ||
         kind == Kind::kGpuDriverHost;
}

class ResidencyMeter {
 public:
  // Pages per mincore call: 64 Ki pages (256 MiB of 4 KiB pages) need a
  // 64 KiB vector.
  static constexpr size_t kWindowPages = size_t{1} << 16;

  ResidencyMeter() = default;
  ~ResidencyMeter();
  ResidencyMeter(const ResidencyMeter&) = delete;
  ResidencyMeter& operator=(const ResidencyMeter&) = delete;

  // From the pagemap alone, as under a seccomp filter (call before Begin;
  // tests measure both ways).
  void UsePagemapOnly() { pagemap_only_ = true; }

  // Maps the vector (and, when the process has swap entries, opens the
  // pagemap). False when there is no scratch memory: the snapshot then says
  // residency was not measured, and Measure returns 0.
  bool Begin();

  // The residency of [start, start + size). Cheapest when calls come in
  // address order; any order is correct.
  Residency Measure(uintptr_t start, uint64_t size);

  // While true, each mincore call covers the row being measured and no
  // more (the capture measures large rows under the tables' locks, where
  // the program's allocating threads wait: no page beyond them is asked
  // for). Changing it drops the window.
  void set_rows_only(bool rows_only) {
    rows_only_ = rows_only;
    window_pages_ = 0;
  }

  // System calls made so far (mincore and pagemap reads), for the bench.
  uint64_t calls() const { return calls_; }

 private:
  // Makes `page` part of the window; false when it is not mapped.
  bool Load(uintptr_t page, uintptr_t last_page);
  // The same from the pagemap alone (under a seccomp filter).
  bool LoadFromPagemap(uintptr_t page, uintptr_t last_page);
  // Reads the window's pagemap entries; false when none could be read.
  bool ReadPagemapWindow();
  // Whether window page `index` (not resident) is swapped out.
  bool Swapped(size_t index);

  bool ready_ = false;
  bool rows_only_ = false;
  bool pagemap_only_ = false;  // no mincore (base/syscall_filter.h)
  size_t page_shift_ = 12;
  uint8_t* vector_ = nullptr;    // kWindowPages bytes
  uint64_t* pagemap_ = nullptr;  // kWindowPages entries, when swap exists
  int pagemap_handle_ = -1;      // base/own_fds.h handle
  bool pagemap_loaded_ = false;  // pagemap_ holds the window's entries
  uintptr_t window_first_ = 0;   // first page of the window
  size_t window_pages_ = 0;      // valid pages in vector_
  uint64_t calls_ = 0;
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_RESIDENCY_H_
