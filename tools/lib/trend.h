// trend: growth per request, per owner, over a series of snapshots of one
// process, with a verdict a user can act on.
//
// For every owner, live bytes are taken at each snapshot against the number
// of requests served so far (from request tags when the snapshots carry
// them, else the snapshot's number in the series, 1 for the first), and
// the series gets a verdict (trend_fit.h: the decision procedure): linear
// (memory kept per request), plateau (bounded: a cache that filled up),
// warm-up (one step), flat, noise, or too-few (not enough request counts
// to tell). Owners' tracked bytes use a noise step of 512 B, the RSS lines
// one of 256 KiB. Bytes are those of a measure (measure.h): resident (+
// swapped) by default, as the RSS lines count them, or allocated; the
// allocated series is kept beside the resident one so both can be shown. In sampled snapshots
// (Header.sample_interval_bytes) heap bytes are estimates: each point carries its standard error
// (SampledVariance), every verdict allows for it, and the rows say so.
#ifndef RETAIN_TOOLS_LIB_TREND_H_
#define RETAIN_TOOLS_LIB_TREND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "retain.pb.h"
#include "tools/lib/measure.h"
#include "tools/lib/owner.h"
#include "tools/lib/request_tags.h"
#include "tools/lib/trend_fit.h"

namespace retain::tool {

struct TrendRow {
  Owner owner;
  std::vector<int64_t> live_bytes;  // one per snapshot, in the measure used
  // With the resident measure, the allocated bytes of each snapshot beside
  // (the sizes asked for, pages never touched included); else empty.
  std::vector<int64_t> allocated_bytes;
  // Sampled heap bytes in it: the standard error of each live_bytes (at
  // least one sampling interval: an estimate of 0 means "below about one
  // interval"); empty when every figure is exact.
  std::vector<double> error_bytes;
  bool estimated() const { return !error_bytes.empty(); }
  TrendFit fit;
};

struct TrendResult {
  // The measure of every row's bytes (and of the tracked line); a fallback
  // to allocated says why in measure.fallback_warning.
  MeasureChoice measure;
  // x of each snapshot: requests served (from tags), or its index.
  std::vector<double> requests;
  bool requests_from_tags = false;
  // Some snapshot was sampled (RETAIN_SAMPLE): heap figures are estimates;
  // the largest sampling interval of the series.
  uint64_t sample_interval_bytes = 0;
  // Sorted by sequence. From TrendBuilder: what the trend keeps of each
  // (header, memory, totals, health; no allocations, stacks, modules or
  // tags), owned by `kept`.
  std::vector<const v1::Snapshot*> snapshots;
  std::vector<std::shared_ptr<const v1::Snapshot>> kept;
  TrendRow rss;      // VmRSS
  TrendRow anon;     // RssAnon + VmSwap
  TrendRow tracked;  // all live tracked host bytes, in the measure
  // glibc's free-but-held bytes (mallinfo2 fordblks, ProcessMemory.
  // malloc_free_held) at each snapshot, fitted like the RSS lines.
  TrendRow allocator_free;
  // All live device memory per device domain ("tracked device:cuda:0
  // (NVIDIA H200)"), in DomainLess order; apart from `tracked` (domain.h).
  std::vector<TrendRow> devices;
  std::vector<TrendRow> rows;  // by growth, descending
  // The requests the snapshots report, in end order (request_tags.h).
  RequestTags request_tags;
};

// Builds a trend one snapshot at a time, so a caller can read a snapshot,
// Add it and let it go: what stays is a summary of each (its header,
// memory, totals and health), per owner one value per snapshot, and one
// entry per request the tags report (request_tags.h, bounded), so memory
// grows with owners x snapshots, not with the snapshots' size.
// Each distinct stack (by its frames and the module table they belong to)
// is resolved to its owner once for the whole series, not once per
// snapshot: symbolizing and --rules regexes cost per distinct stack.
// What a trend keeps of a snapshot once its rows are counted: the header,
// process memory, health, per-kind totals and devices (no rows, stacks or
// tags).
std::shared_ptr<const v1::Snapshot> Summary(const v1::Snapshot& snapshot);

// The device whose domain is `domain` ("device:cuda:1") in the last of
// `snapshots` that lists it, or nullptr.
const v1::Device* DeviceInSeries(const std::vector<const v1::Snapshot*>& snapshots,
                                 const std::string& domain);

class TrendBuilder {
 public:
  // `requested`: the measure to count in; resident falls back to allocated
  // at Finish when a snapshot has no residency (ChooseMeasure).
  explicit TrendBuilder(OwnerResolver& owners, Measure requested = Measure::kResident);
  // A sliding window (retain-exporter): `collect_request_tags` false keeps
  // no request tags (TrendResult.request_tags stays empty), as DropOldest
  // requires.
  TrendBuilder(OwnerResolver& owners, Measure requested, bool collect_request_tags);
  // Any order (sorted by sequence at Finish). `name` names the snapshot in
  // the measure's fallback warning. Error: a snapshot of another process
  // than the first one added.
  absl::Status Add(const v1::Snapshot& snapshot, absl::string_view name = "");
  // Error: fewer than 3 snapshots. Const: more snapshots may be added and
  // Finish called again (a window that slides).
  absl::StatusOr<TrendResult> Finish() const;

  // Forgets the first snapshot added (the oldest of a window fed in
  // sequence order): what is kept is the newest ones. Owners stay known
  // (their rows read 0 where they had nothing). Only on a builder that
  // collects no request tags. Returns false when there is none.
  bool DropOldest();
  // Forgets the last snapshot added (a window that keeps one snapshot per
  // request count: a newer one at the same count replaces it). Same
  // condition as DropOldest.
  bool DropNewest();
  // The header of the last snapshot added; null when none.
  const v1::Header* LastHeader() const {
    return columns_.empty() ? nullptr : &columns_.back().summary->header();
  }
  size_t size() const { return columns_.size(); }

 private:
  // One figure of a row or of the tracked line per measure: both are
  // counted while the rows are read, the measure is chosen at Finish.
  struct Measured {
    int64_t allocated = 0;
    int64_t resident = 0;  // + swapped
    // Variance of the sampled estimate in each measure (0: exact).
    double allocated_variance = 0;
    double resident_variance = 0;
  };
  struct Column {  // what one snapshot contributed
    std::shared_ptr<const v1::Snapshot> summary;
    std::string name;
    uint64_t highest_request = 0;  // requests opened, or the largest tag id
    uint64_t requests_at_trigger = 0;
    uint64_t requests_closed = 0;
    bool has_requests = false;
    Measured tracked;                         // host kinds
    std::map<std::string, Measured> devices;  // per device domain
  };
  OwnerResolver& owners_;
  const Measure requested_;
  const bool collect_request_tags_ = true;
  std::vector<Column> columns_;  // in the order added
  std::vector<Owner> owners_of_rows_;
  // Per row, one per column (may be short: 0).
  std::vector<std::vector<Measured>> series_;
  std::vector<bool> row_estimated_;  // some figure of the row is a sampled estimate
  bool tracked_estimated_ = false;
  absl::flat_hash_map<std::string, size_t> row_of_key_;       // owner key -> row
  absl::flat_hash_map<std::string, size_t> row_of_stack_;     // stack content -> row
  absl::flat_hash_map<std::string, uint32_t> module_tables_;  // module table -> id
  RequestTagCollector request_tags_;
};

// `snapshots`: at least 3, of one process (SameProcess), any order (sorted
// by sequence). Errors: fewer than 3, or snapshots of different processes.
// The result's `snapshots` are summaries (TrendBuilder).
// `names`, when given, names snapshots[i] in the measure's fallback warning.
absl::StatusOr<TrendResult> ComputeTrend(std::vector<const v1::Snapshot*> snapshots,
                                         OwnerResolver& owners,
                                         Measure requested = Measure::kResident,
                                         const std::vector<std::string>& names = {});

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_TREND_H_
