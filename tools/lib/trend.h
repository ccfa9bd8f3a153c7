// trend: growth per request, per owner, over a series of snapshots of one
// process, with a verdict a user can act on.
//
// For every owner, live bytes are taken at each snapshot against the number
// of requests served so far (from request tags when the snapshots carry
// them, else the snapshot's number in the series, 1 for the first). The
// last third of the series (at least 3 points) decides whether growth goes
// on:
//   linear    the tail still rises steadily: memory kept per request (a
//             missing eviction, a leak). slope = the tail's bytes per
//             request, fit = its R^2.
//   plateau   the tail is flat after growth in several steps: bounded (a
//             cache that filled up). level = where it stopped, at request
//             `flat_from`.
//   warm-up   the tail is flat after a single step: a one-time allocation.
//   flat      nothing moved more than the noise step.
//   noise     moved, but neither steadily up nor up then flat.
// The noise step is `min_step`: tracked bytes are exact, so an owner's is
// small (512 bytes); RSS moves by pages and for unrelated reasons, so its is
// 256 KiB. A tail counts as flat below max(min_step, 2% of the range).
#ifndef RETAIN_TOOLS_LIB_TREND_H_
#define RETAIN_TOOLS_LIB_TREND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "retain.pb.h"
#include "tools/lib/owner.h"

namespace retain::tool {

enum class Verdict { kFlat, kLinear, kPlateau, kWarmUp, kNoise };
const char* VerdictName(Verdict verdict);

struct TrendFit {
  Verdict verdict = Verdict::kFlat;
  double slope = 0;       // bytes per request (least squares; linear: over the tail)
  double r_squared = 0;   // fit of that line, 0..1
  double level = 0;       // plateau / warm-up: the value it settled at
  double flat_from = 0;   // plateau / warm-up: the request count where it stopped growing
  double growth = 0;      // last - first
};

inline constexpr double kOwnerMinStep = 512;
inline constexpr double kRssMinStep = 256 * 1024;

// Classifies one series (x ascending). Exposed for tests.
TrendFit FitTrend(const std::vector<double>& x, const std::vector<double>& y,
                  double min_step = kOwnerMinStep);

struct TrendRow {
  Owner owner;
  std::vector<int64_t> live_bytes;  // one per snapshot
  TrendFit fit;
};

struct TrendResult {
  // x of each snapshot: requests served (from tags), or its index.
  std::vector<double> requests;
  bool requests_from_tags = false;
  std::vector<const v1::Snapshot*> snapshots;  // sorted by sequence
  TrendRow rss;      // VmRSS
  TrendRow anon;     // RssAnon + VmSwap
  TrendRow tracked;  // all live tracked bytes
  std::vector<TrendRow> rows;  // by growth, descending
};

// `snapshots`: at least 3, of one process (SameProcess), any order (sorted
// by sequence). Errors: fewer than 3, or snapshots of different processes.
absl::StatusOr<TrendResult> ComputeTrend(std::vector<const v1::Snapshot*> snapshots,
                                         OwnerResolver& owners);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_TREND_H_
