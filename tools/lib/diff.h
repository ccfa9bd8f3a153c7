// diff: what was retained between two snapshots, by owner, and how much of
// the process's RSS growth that explains.
//
// Modes (DiffResult::mode says which was used and why):
//   live       one snapshot: everything live, by owner.
//   exact      two snapshots of one process (same pid, start time and
//              build): an allocation born after `before` (birth sequence
//              >= before's next_birth_sequence) and live in `after` is
//              retained; one live in `before` and gone from `after` is
//              released. No heuristics.
//   aggregate  different processes or builds: live bytes per owner in each,
//              subtracted. Owner keys are symbolized and carry no addresses
//              or lines, so build A and build B line up by function.
//
// Bytes are counted in a measure (measure.h): resident (+ swapped) by
// default, allocated on request or when a snapshot has no residency. Rows,
// shares, totals, stack shares and the RSS explanation's tracked bytes are
// in that measure; every row also carries all three figures (ByteMeasures).
// In exact mode under the resident measure an allocation live in both
// snapshots whose pages were touched (or dropped) in between counts too: its
// growth is retained, its shrinking released, with no count (the allocation
// itself is not new). Under the allocated measure such an allocation counts
// nothing, as before.
#ifndef RETAIN_TOOLS_LIB_DIFF_H_
#define RETAIN_TOOLS_LIB_DIFF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "retain.pb.h"
#include "tools/lib/measure.h"
#include "tools/lib/owner.h"

namespace retain::tool {

enum class DiffMode { kLive, kExact, kAggregate };
const char* DiffModeName(DiffMode mode);

struct DiffRow {
  Owner owner;
  // In the measure (DiffResult::measure).
  int64_t retained_bytes = 0;  // exact: born after `before`, live in `after`;
  int64_t retained_count = 0;  // aggregate: positive growth; live: live
  int64_t released_bytes = 0;  // exact: live in `before`, gone from `after`
  int64_t released_count = 0;  // aggregate: negative growth (as a positive number)
  // The same, in every measure: retained.In(measure) == retained_bytes.
  ByteMeasures retained;
  ByteMeasures released;
  // retained - released.
  int64_t net_bytes() const { return retained_bytes - released_bytes; }
  // The stack (of `after`) holding the most retained bytes of this owner.
  uint32_t example_stack_id = 0;
  uint64_t example_stack_bytes = 0;
  v1::Kind example_kind = v1::KIND_UNSPECIFIED;
  uint32_t example_device = 0;  // the example's Device.id (0: none)
};

// Retained bytes of one stack (of one kind, tag and device) of `after`:
// what the folded and pprof outputs are made of. In aggregate mode, one per
// owner that grew: its example stack carrying the owner's growth.
struct StackShare {
  uint32_t stack_id = 0;
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  uint32_t tag_id = 0;
  int64_t bytes = 0;  // in the measure
  int64_t count = 0;
  ByteMeasures by;      // bytes in every measure
  uint32_t device = 0;  // Device.id of `after` (0: none): with the kind, its domain
};

// Per-kind growth of the KindTotals live bytes (after - before), in one
// domain: a device kind's per device (CountedTotalsByDomain).
struct KindGrowth {
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  std::string domain = "host";
  int64_t live_bytes_growth = 0;
  int64_t live_count_growth = 0;
  int64_t resident_bytes_growth = 0;  // KindTotals.resident_bytes
  int64_t swapped_bytes_growth = 0;   // KindTotals.swapped_bytes
  // live_bytes_growth, or resident + swapped: in the measure.
  int64_t measured_growth = 0;
};

// Where one snapshot's anonymous memory is, in the measure:
// tracked_anon + allocator_free_held + untracked == anon_swap, exactly.
// Under the resident measure every term is memory, so none may be negative:
// a negative `untracked` is a bug in the snapshot or in the arithmetic
// (RssExplanation::adds_up_warning). Under the allocated measure tracked
// bytes include address space never touched, and untracked may go negative.
struct RssLevel {
  int64_t anon_swap = 0;            // RssAnon + VmSwap
  int64_t tracked_anon = 0;         // heap + mmap-anon + gpu-driver-host
  int64_t allocator_free_held = 0;  // mallinfo2 fordblks, less allocator_free_trimmed
  int64_t untracked = 0;            // the rest
  // Of untracked: at most this much is the shim's own memory (its arena
  // mapped, ShimHealth.arena_bytes; not all of it touched, so not subtracted).
  int64_t shim_own = 0;
  // Free bytes malloc still counts whose pages a trim (POST /trim) gave back:
  // malloc_trim releases the pages of free chunks but keeps the chunks, so
  // fordblks counts them while RSS does not. Under the resident measure,
  // when the snapshot records trims: what fordblks exceeds the rest of
  // RssAnon+VmSwap by, at most the RSS the trims returned; else 0. So a
  // level after a trim adds up, and one that still does not is a bug.
  int64_t allocator_free_trimmed = 0;
  // The snapshot was sampled (RETAIN_SAMPLE): its tracked heap is an
  // estimate scaled from the samples, which may exceed what is resident
  // without anything being wrong.
  bool estimated = false;
};

// Why RSS grew, as far as the snapshots can tell.
struct RssExplanation {
  int64_t vm_rss_growth = 0;
  int64_t anon_swap_growth = 0;  // (RssAnon + VmSwap) after - before
  std::vector<KindGrowth> tracked;
  Measure measure = Measure::kAllocated;  // of the tracked bytes
  int64_t tracked_anon_growth = 0;        // heap + mmap-anon + host GPU kinds
  int64_t allocator_retained_growth = 0;  // glibc free-but-held (mallinfo2 fordblks)
  int64_t untracked_growth = 0;           // anon_swap_growth - the two above
  int64_t shim_own_growth = 0;            // of untracked: at most the shim's own arena
  // tracked_anon_growth / anon_swap_growth, in [0, 1]; -1 when RSS did not
  // grow, or when a snapshot is degraded (the share would be too low by the
  // dropped records' bytes, and look like a finding).
  double explained_share = -1;
  // A snapshot's shim dropped records (ShimHealth.degraded): tracked growth
  // misses them and untracked growth counts them.
  bool degraded = false;
  // The levels at `after` and (two snapshots) at `before`.
  RssLevel after_level;
  RssLevel before_level;
  bool has_before = false;
  // Non-empty when, under the resident measure, a level's untracked rest is
  // negative: one line naming the snapshot and the terms. Never clamped.
  std::string adds_up_warning;
};

// The totals of one memory domain (domain.h): the host's, or one
// device's. Domains are never added together.
struct DomainTotal {
  std::string domain;  // "host", "device:cuda:0", ...
  // The device's name and UUID (FormatUuid), from `after` (or `before`,
  // where only it lists the device); empty for the host, an API's domain, a
  // device that did not say.
  std::string name;
  std::string uuid;
  int64_t retained_bytes = 0;
  int64_t retained_count = 0;
  int64_t released_bytes = 0;
  int64_t released_count = 0;
  ByteMeasures retained;
  ByteMeasures released;
};

struct DiffResult {
  DiffMode mode = DiffMode::kLive;
  std::string mode_reason;
  const v1::Snapshot* before = nullptr;  // null in live mode
  const v1::Snapshot* after = nullptr;
  double seconds_between = 0;
  // Requests served between the snapshots (tags opened after `before`);
  // -1 when the snapshots carry no tags.
  int64_t requests_between = -1;
  RssExplanation rss;
  // Host rows first, then each device domain's, each sorted by retained
  // bytes, descending (Owner::domain says which).
  std::vector<DiffRow> rows;
  std::vector<StackShare> retained_stacks;
  // The host domain's totals (rows of other domains are in `devices`).
  int64_t total_retained_bytes = 0;
  int64_t total_retained_count = 0;
  int64_t total_released_bytes = 0;
  int64_t total_released_count = 0;
  // Sampling rates differ from 0: byte figures are estimates.
  bool estimated = false;
  // The measure the bytes are in, the one asked for, and the fallback line.
  MeasureChoice measure;
  // Totals in every measure (total_retained_bytes == total_retained.In(...)).
  ByteMeasures total_retained;
  ByteMeasures total_released;
  // Each device domain with rows, by name.
  std::vector<DomainTotal> devices;
  // With --rules, whatever the grouping: the host rows by category, so the
  // RSS explanation says how much of the memory each category holds (the Go
  // heap of a Go program: share/rules/go.textproto). Empty without rules.
  std::vector<DiffRow> categories;
};

struct DiffOptions {
  // Diff snapshots of two unrelated programs (different executables).
  bool force = false;
  // The measure asked for; allocated is used when a snapshot has no
  // residency (DiffResult::measure.fallback_warning says so, naming the
  // snapshots by these names).
  Measure measure = Measure::kResident;
  std::string before_name = "before";
  std::string after_name = "after";
};

// `before` may be null (live mode). Errors: unrelated programs without
// `force` (InvalidArgument, naming both executables); `before` taken after
// `after` in one process.
absl::StatusOr<DiffResult> ComputeDiff(const v1::Snapshot* before, const v1::Snapshot& after,
                                       OwnerResolver& owners, const DiffOptions& options);

// True when the snapshot's shim reached its memory cap (RETAIN_MAX_MEMORY)
// or dropped records (ShimHealth.degraded, dropped_records).
bool IsDegraded(const v1::Snapshot& snapshot);

// One line that says which of `snapshots` are degraded (names[i] names
// snapshots[i]), how many records and bytes their shims dropped, and what it
// means; empty when none is. E.g. "after.pb is degraded: its shim reached
// its memory cap (RETAIN_MAX_MEMORY 4.0 MiB) and dropped 169234 allocation
// records (5.2 MiB): rows by owner miss those allocations and live totals
// undercount them (allocated totals still count them). Rerun with a larger
// RETAIN_MAX_MEMORY". (ExplainRss then leaves the explained share out.)
std::string DegradedWarning(const std::vector<const v1::Snapshot*>& snapshots,
                            const std::vector<std::string>& names);

// One line that says which of `snapshots` (names[i] names snapshots[i]) come
// from a process whose malloc was not the shim's (Header.foreign_malloc_path):
// no heap allocation is in them, whatever their tables show. Empty when
// every one recorded its heap.
std::string HeapUnrecordedWarning(const std::vector<const v1::Snapshot*>& snapshots,
                                  const std::vector<std::string>& names);

// True when the two snapshots come from one process and build: pid, start
// time and executable build-id equal. `reason` says why not.
bool SameProcess(const v1::Snapshot& a, const v1::Snapshot& b, std::string* reason);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_DIFF_H_
