// measure: which bytes retain-diff counts. Operators watch resident memory
// (RSS, RssAnon + VmSwap), so the default measure is resident: the bytes of
// an allocation in RAM plus those swapped out (as RssAnon + VmSwap counts
// them). Allocated bytes, the sizes asked for, include address space never
// touched (a 400 MiB buffer of which 40 MiB was written is 40 MiB resident).
// Snapshots of shims before residency (Header.residency_measured false) know
// only allocated bytes: the resident measure then falls back to allocated,
// and says so once (ChooseMeasure).
//
// The engines (diff, and trend through the functions below) count every
// row with MeasuredBytes and every per-kind total with MeasuredLiveBytes, so
// one switch changes rows, shares, totals, folded and pprof alike.
#ifndef RETAIN_TOOLS_LIB_MEASURE_H_
#define RETAIN_TOOLS_LIB_MEASURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "retain.pb.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {

enum class Measure { kResident, kAllocated };

// "resident", "allocated".
const char* MeasureName(Measure measure);
// Parses a --measure value; false for anything but the names above.
bool ParseMeasure(absl::string_view text, Measure* measure);

// The bytes of one allocation row in `measure`: resident + swapped, or its
// size (both already scaled for sampled rows by FlattenAllocations).
inline uint64_t MeasuredBytes(const Allocation& a, Measure measure) {
  return measure == Measure::kResident ? a.resident_bytes + a.swapped_bytes : a.size;
}

// A kind's live bytes in `measure` (KindTotals.resident_bytes +
// swapped_bytes, or live_bytes). Sampled snapshots count only recorded rows
// in their totals; ExplainRss corrects the heap's from the rows.
inline uint64_t MeasuredLiveBytes(const v1::KindTotals& totals, Measure measure) {
  return measure == Measure::kResident ? totals.resident_bytes() + totals.swapped_bytes()
                                       : totals.live_bytes();
}

// All live tracked host bytes of a snapshot in `measure`, every host kind
// (CountedTotals: device memory is a domain of its own, domain.h).
int64_t TrackedLiveBytes(const v1::Snapshot& snapshot, Measure measure);

// Allocated, resident and swapped bytes of something (a row, a total),
// side by side whatever the measure. `resident` excludes `swapped`, as in
// the snapshot; the resident measure is resident + swapped.
struct ByteMeasures {
  int64_t allocated = 0;
  int64_t resident = 0;
  int64_t swapped = 0;

  int64_t In(Measure measure) const {
    return measure == Measure::kResident ? resident + swapped : allocated;
  }
  void Add(const Allocation& a, int64_t sign = 1) {
    allocated += sign * static_cast<int64_t>(a.size);
    resident += sign * static_cast<int64_t>(a.resident_bytes);
    swapped += sign * static_cast<int64_t>(a.swapped_bytes);
  }
  ByteMeasures& operator+=(const ByteMeasures& other) {
    allocated += other.allocated;
    resident += other.resident;
    swapped += other.swapped;
    return *this;
  }
};

// The measure a set of snapshots is read in, and why.
// Default: allocated bytes of snapshots without residency, as asked.
struct MeasureChoice {
  Measure requested = Measure::kAllocated;
  Measure used = Measure::kAllocated;
  // Every snapshot has residency (HasResidency): resident and allocated can
  // be shown side by side.
  bool residency = false;
  // Set when `used` differs from `requested`: one line, e.g. "resident bytes
  // were not measured in after.pb (a shim before residency): counting
  // allocated bytes, which include pages never touched".
  std::string fallback_warning;
};

// `requested`, unless it is resident and a snapshot lacks residency: then
// allocated, with the warning naming the first such snapshot (names[i]
// names snapshots[i]) and how many there are.
MeasureChoice ChooseMeasure(Measure requested, const std::vector<const v1::Snapshot*>& snapshots,
                            const std::vector<std::string>& names);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_MEASURE_H_
