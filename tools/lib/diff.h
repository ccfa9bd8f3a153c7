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
#ifndef RETAIN_TOOLS_LIB_DIFF_H_
#define RETAIN_TOOLS_LIB_DIFF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "retain.pb.h"
#include "tools/lib/owner.h"

namespace retain::tool {

enum class DiffMode { kLive, kExact, kAggregate };
const char* DiffModeName(DiffMode mode);

struct DiffRow {
  Owner owner;
  int64_t retained_bytes = 0;  // exact: born after `before`, live in `after`;
  int64_t retained_count = 0;  // aggregate: positive growth; live: live
  int64_t released_bytes = 0;  // exact: live in `before`, gone from `after`
  int64_t released_count = 0;  // aggregate: negative growth (as a positive number)
  // retained - released.
  int64_t net_bytes() const { return retained_bytes - released_bytes; }
  // The stack (of `after`) holding the most retained bytes of this owner.
  uint32_t example_stack_id = 0;
  uint64_t example_stack_bytes = 0;
  v1::Kind example_kind = v1::KIND_UNSPECIFIED;
};

// Retained bytes of one stack (of one kind and tag) of `after`: what the
// folded and pprof outputs are made of. In aggregate mode, one per owner
// that grew: its example stack carrying the owner's growth.
struct StackShare {
  uint32_t stack_id = 0;
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  uint32_t tag_id = 0;
  int64_t bytes = 0;
  int64_t count = 0;
};

// Per-kind growth of the KindTotals live bytes (after - before).
struct KindGrowth {
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  int64_t live_bytes_growth = 0;
  int64_t live_count_growth = 0;
};

// Why RSS grew, as far as the snapshots can tell.
struct RssExplanation {
  int64_t vm_rss_growth = 0;
  int64_t anon_swap_growth = 0;  // (RssAnon + VmSwap) after - before
  std::vector<KindGrowth> tracked;
  int64_t tracked_anon_growth = 0;  // heap + mmap-anon + host GPU kinds
  int64_t allocator_retained_growth = 0;  // glibc free-but-held (mallinfo2 fordblks)
  int64_t untracked_growth = 0;  // anon_swap_growth - tracked_anon - allocator_retained
  // tracked_anon_growth / anon_swap_growth, in [0, 1]; -1 when RSS did not
  // grow, or when a snapshot is degraded (the share would be too low by the
  // dropped records' bytes, and look like a finding).
  double explained_share = -1;
  // A snapshot's shim dropped records (ShimHealth.degraded): tracked growth
  // misses them and untracked growth counts them.
  bool degraded = false;
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
  std::vector<DiffRow> rows;  // sorted: retained bytes, descending
  std::vector<StackShare> retained_stacks;
  int64_t total_retained_bytes = 0;
  int64_t total_retained_count = 0;
  int64_t total_released_bytes = 0;
  int64_t total_released_count = 0;
  // Sampling rates differ from 0: byte figures are estimates.
  bool estimated = false;
};

struct DiffOptions {
  // Diff snapshots of two unrelated programs (different executables).
  bool force = false;
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

// True when the two snapshots come from one process and build: pid, start
// time and executable build-id equal. `reason` says why not.
bool SameProcess(const v1::Snapshot& a, const v1::Snapshot& b, std::string* reason);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_DIFF_H_
