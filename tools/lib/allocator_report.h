// allocator_report: what retain-diff's header says about malloc's own memory,
// for the operator's question "is it a leak, or does malloc just keep it?":
// the free memory glibc holds, arena by arena (ProcessMemory.malloc_arenas),
// the trims that gave some back (POST /trim: ProcessMemory.trims,
// trim_returned_bytes, last_trim_unix_ns), and advice naming the glibc
// setting that would have helped, only where the snapshot's numbers show it.
//
// The advice rules (docs/retain-diff.md, "Allocator"), on the `after`
// snapshot (the only one in live mode), with A = its RssAnon + VmSwap and
// R = A - its tracked anonymous bytes (the RSS explanation's level, in the
// measure), floored at 0: the most of A that malloc's free memory can be.
// Free bytes are first capped at R, so free memory whose pages a trim gave
// back, or that was never touched, supports nothing. None is given without
// mallinfo2 (has_mallinfo: glibc), nor for a degraded snapshot (its tracked
// bytes, hence R, and its rows are short). Each rule's figures must reach
// both an absolute floor and a share of A: a ratio alone fires on small
// programs, a floor alone on huge ones.
//
//   MALLOC_ARENA_MAX   glibc gives threads arenas of their own (up to 8 per
//                      core) and a free chunk serves only its arena's
//                      threads. Given when the snapshot lists at least 3
//                      arenas, the thread arenas (all but #0) hold at least
//                      64 MiB free (a thread arena's whole heap is 64 MiB)
//                      and 25 % of A, and without the one holding most of it
//                      the others still hold 32 MiB: the free memory is
//                      spread, which fewer arenas would share.
//   M_TRIM_THRESHOLD   free() gives the top of the main heap back once it
//                      exceeds the trim threshold, which glibc raises (up to
//                      64 MiB) after large blocks are freed. Given when that
//                      top (mallinfo2 keepcost) holds at least 32 MiB and
//                      10 % of A: a fixed threshold would have returned it.
//   M_MMAP_THRESHOLD   blocks of 128 KiB or more (glibc's default mmap
//                      threshold) are mapped and unmapped on free, until
//                      glibc raises the threshold after such a block is
//                      freed; from then on they live in the heaps and leave
//                      holes there. Given when live heap rows of at least
//                      128 KiB exceed the mmapped bytes (malloc_mmapped) by
//                      32 MiB or more, so that many live inside the heaps,
//                      and malloc holds at least 32 MiB and 10 % of A free.
//   malloc_trim        not a knob: free() never returns free pages between
//                      live blocks, and no threshold makes it; malloc_trim(0)
//                      (POST /trim) does. Given when the arenas' whole free
//                      pages below their tops (MallocArena.trimmable_bytes, a
//                      lower bound) reach 32 MiB and 10 % of A.
//
// Thread-compatible: pure functions of their inputs.
#ifndef RETAIN_TOOLS_LIB_ALLOCATOR_REPORT_H_
#define RETAIN_TOOLS_LIB_ALLOCATOR_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "retain.pb.h"
#include "tools/lib/diff.h"

namespace retain::tool {

inline constexpr uint64_t kAllocatorMiB = uint64_t{1} << 20;
// MALLOC_ARENA_MAX.
inline constexpr int kArenaAdviceMinArenas = 3;
inline constexpr uint64_t kArenaAdviceMinFree = 64 * kAllocatorMiB;
inline constexpr double kArenaAdviceMinShare = 0.25;
inline constexpr uint64_t kArenaAdviceMinSpread = 32 * kAllocatorMiB;
// M_TRIM_THRESHOLD, M_MMAP_THRESHOLD and malloc_trim: bytes and share of A.
inline constexpr uint64_t kAllocatorAdviceMinBytes = 32 * kAllocatorMiB;
inline constexpr double kAllocatorAdviceMinShare = 0.10;
// glibc's default M_MMAP_THRESHOLD.
inline constexpr uint64_t kLargeBlockBytes = 128 * 1024;

struct AllocatorAdvice {
  std::string knob;     // "MALLOC_ARENA_MAX", "M_TRIM_THRESHOLD", "M_MMAP_THRESHOLD", "malloc_trim"
  std::string setting;  // how to apply it, e.g. "MALLOC_ARENA_MAX=2"
  std::string reason;   // one sentence, with the numbers
  uint64_t bytes = 0;   // the free bytes at stake (capped at the resident bound)
};

struct AllocatorReport {
  bool has_mallinfo = false;    // of `after`
  uint64_t free_held = 0;       // mallinfo2 fordblks
  uint64_t top_releasable = 0;  // keepcost: the main heap's top
  uint64_t mmapped = 0;         // hblkhd
  // Per arena (empty: not recorded: an older shim, or not glibc).
  std::vector<v1::MallocArena> arenas;
  bool arenas_truncated = false;
  uint64_t arena_free = 0;         // summed free_bytes
  uint64_t thread_arena_free = 0;  // of it, in arenas other than #0
  uint64_t trimmable = 0;          // summed trimmable_bytes
  // Live heap rows of kLargeBlockBytes or more (allocated; sampled rows
  // estimated).
  uint64_t large_heap_bytes = 0;
  // RssAnon + VmSwap and what of it is not tracked allocations (>= 0).
  uint64_t anon_swap = 0;
  uint64_t resident_bound = 0;
  bool degraded = false;
  // Trims of `after`'s process since its shim started.
  uint64_t trims = 0;
  uint64_t trim_returned_bytes = 0;
  uint64_t last_trim_unix_ns = 0;
  double seconds_since_last_trim = -1;  // before `after`; -1: no trim
  // Two snapshots of one process: the trims between them.
  bool has_between = false;
  uint64_t trims_between = 0;
  uint64_t trim_returned_between = 0;
  std::vector<AllocatorAdvice> advice;  // most bytes first
};

struct AllocatorInput {
  const v1::Snapshot* before = nullptr;  // null: one snapshot
  const v1::Snapshot* after = nullptr;
  // `before` and `after` are one process (an exact diff): its trims between
  // them are counted.
  bool same_process = false;
  // `after`'s tracked anonymous bytes in the measure (RssLevel.tracked_anon).
  int64_t tracked_anon = 0;
};

AllocatorReport ReportAllocator(const AllocatorInput& input);
// From a diff: its snapshots, mode and after level.
AllocatorReport ReportAllocator(const DiffResult& diff);

// The header's lines, each "  label       text\n", empty without mallinfo2:
// "arenas" (when the snapshot lists arenas), beside the RSS explanation's
// allocator line; "trim" (when trims happened) and "advice" (one per rule
// that holds), after the explanation.
std::string AllocatorArenasText(const AllocatorReport& report);
std::string AllocatorTrimAndAdviceText(const AllocatorReport& report);
// The "allocator" object of retain-diff --json (docs/retain-diff.md).
std::string AllocatorReportJson(const AllocatorReport& report);

// Trims during a series (the trend): the snapshots (in order) that are the
// first to see one or more trims their predecessor did not.
struct SeriesTrims {
  uint64_t trims = 0;
  uint64_t returned_bytes = 0;
  std::vector<size_t> after_trim;  // indexes into the series
};
SeriesTrims TrimsDuring(const std::vector<const v1::Snapshot*>& snapshots);
// "  trim        ...\n", or "" when no trim ran during the series.
std::string SeriesTrimsText(const SeriesTrims& trims);
std::string SeriesTrimsJson(const SeriesTrims& trims);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_ALLOCATOR_REPORT_H_
