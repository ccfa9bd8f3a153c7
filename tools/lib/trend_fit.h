// trend_fit: the statistics behind a trend verdict: one series of (x, y)
// points, x = requests served at a snapshot, y = an owner's live bytes
// there, optionally with the standard error of each y (sampled snapshots),
// gets a verdict, a slope and, for a bounded owner, its level.
//
// The decision procedure (FitTrend), in order; every fit is least squares
// over the points themselves, so a request count that repeats (two
// snapshots between the same two request ends) or skips (four requests
// ended at once) weighs each snapshot once and nothing is computed from
// consecutive snapshots or from their positions in the series:
//
//   0. Noise per point. `min_step` is what bytes move by for no reason
//      (512 B for tracked bytes, which are exact; 256 KiB for RSS, which
//      moves by pages). A sampled point also has a standard error `se`
//      (SampledVariance below); an owner's estimate is never trusted to
//      better than one sampling interval.
//   1. flat: the highest and lowest points differ by less than
//      min_step + 3 x their combined standard error: nothing moved that the
//      measurement can tell from nothing.
//   2. too-few: fewer than kMinRequestCounts (4) distinct request counts.
//      A line through 2 or 3 request counts always fits; telling a rise
//      that goes on from one that stopped needs a rise and then 3 counts
//      of holding.
//   3. Two models: one line through all the points, and a split: a line
//      over the request counts before x_b and another from x_b on (B, at
//      least 3 request counts, and spanning more requests than a point's x
//      may be off: x_uncertainty), x_b the earliest where the two leave the
//      least squared residual. The split is preferred when it explains the
//      points much better than one line: an F test,
//      ((SSE_line - SSE_split) / 2) / (SSE_split / (n - 4)) >= 20, with
//      n (min_step / 2)^2 added to each SSE so exact data is not split for
//      rounding's sake.
//   4. A segment rises when its fitted rise (slope x its span of requests)
//        - exceeds min_step + 4 x the combined standard error of its first
//          and last points (sampled: growth within the sampling error is
//          not growth),
//        - is more than half of the segment's range of bytes, with R^2 at
//          least 0.5 (the trend dominates the scatter: an owner that
//          alternates between two values does not rise),
//        - and the slope is at least 4 of its standard errors.
//      linear: B rises (slope and fit are B's: the rate now, not the fill
//      rate of a cache that filled up before it, when B's rate differs from
//      A's by more than 25 % and by more than an error of x_uncertainty
//      requests at B's ends could make it: 2 x_uncertainty / B's span), or
//      there is no split and the whole series rises.
//   5. plateau: B holds (its fitted rise is at most half of its range, or
//      a tenth of the rise before it: entries evicted and admitted move it
//      within a band, not upward), and the rise before it, from the first
//      request count's bytes to B's median, exceeds both B's range and
//      min_step + 3 x the combined error. level = B's median, band = B's
//      lowest .. highest, flat_from = x_b; slope and fit stay those of the
//      line through all the points.
//      warm-up: a plateau whose rise is one step (80% of it between two
//      consecutive request counts); flat_from = the count after that step.
//      When the best split's B does not hold (a fill that runs ahead of the
//      request count unevenly slows before it stops: the least squares
//      split where it slows, and B still rises), the split is tried again
//      where the held tail starts: the earliest request count from which
//      all points differ by less than step 1's noise, at least 3 counts and
//      more than x_uncertainty requests wide; it must pass the same F test
//      and the same holding tests. When neither holds (a snapshot caught an
//      entry being replaced: one evicted, the next not yet saved, and the
//      dip at B's head reads as a rise over B, or cuts the held tail
//      short), the next 4 splits by residual are read in that order: the
//      first that passes the F test, holds, and has no point above its
//      level by more than its noise (a replacement dips, it never adds) is
//      the plateau.
//      A split that is neither: what the single line says (linear or not).
//   6. noise: anything else (moved, but neither steadily up nor up then
//      holding; or going down).
//
// Everything is O(n) per series (prefix sums over the points for the
// breakpoint; at most 6 splits read), so thousands of snapshots cost
// nothing here.
#ifndef RETAIN_TOOLS_LIB_TREND_FIT_H_
#define RETAIN_TOOLS_LIB_TREND_FIT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace retain::tool {

enum class Verdict { kFlat, kLinear, kPlateau, kWarmUp, kNoise, kTooFew };
// "flat", "linear", "plateau", "warm-up", "noise", "too-few".
const char* VerdictName(Verdict verdict);

struct TrendFit {
  Verdict verdict = Verdict::kFlat;
  double slope = 0;        // bytes per request (least squares over all; linear: the rate now)
  double slope_error = 0;  // its standard error (sampled: at least the endpoints' error / span)
  double r_squared = 0;    // fit of that line, 0..1
  double level = 0;        // plateau / warm-up: the median it settled at; else the last value
  double band_low = 0;     // plateau / warm-up: the lowest and highest bytes while holding
  double band_high = 0;
  double flat_from = 0;       // plateau / warm-up: the request count where it stopped growing
  double growth = 0;          // last - first
  size_t request_counts = 0;  // distinct x values
  bool estimated = false;     // the y values were sampled estimates (se given)
  double error = 0;           // estimated: the standard error of the last value
};

inline constexpr double kOwnerMinStep = 512;
inline constexpr double kRssMinStep = 256 * 1024;
// A verdict other than flat needs this many distinct request counts.
inline constexpr size_t kMinRequestCounts = 4;
// The holding segment of a plateau spans at least this many.
inline constexpr size_t kMinBandRequestCounts = 3;

// Classifies one series. x need not be sorted nor distinct. `se`: the
// standard error of each y (empty: exact values). `x_uncertainty`: by how
// many requests a point's x may be off (requests in flight when snapshots
// were taken, trend.h): a plateau's holding segment must span more than
// that, so that the last snapshots of a burst, which all hold the final
// state while the last requests in flight end, never read as a band.
TrendFit FitTrend(const std::vector<double>& x, const std::vector<double>& y,
                  const std::vector<double>& se, double min_step = kOwnerMinStep,
                  double x_uncertainty = 0);
inline TrendFit FitTrend(const std::vector<double>& x, const std::vector<double>& y,
                         double min_step = kOwnerMinStep) {
  return FitTrend(x, y, {}, min_step);
}

// The variance one recorded heap allocation adds to a sampled estimate.
//
// The shim samples by bytes (shim/src/record/sampler.h): sampling points
// fall on the stream of allocated bytes with exponential gaps of mean R
// (`interval`), i.e. a Poisson process, so an allocation of s < R bytes is
// recorded with probability p = 1 - exp(-s/R), independently of every other
// allocation (disjoint stretches of a Poisson process are independent); one
// of s >= R bytes always is (p = 1). The tools count a recorded one as
// e = s/p bytes (Horvitz-Thompson), so an owner's estimate Y' = sum of e
// over its recorded allocations is unbiased for its true bytes Y, with
//   Var(Y') = sum over all its allocations of s^2 (1 - p) / p,
// estimated without bias from the recorded ones alone by
//   sum over recorded of s^2 (1 - p) / p^2 = sum of e (e - s)      (this).
// For s << R, p ~ s/R and e ~ R, so each recorded allocation adds ~R^2 and
// there are ~Y/R of them: Var ~ R Y, a relative standard error of
// ~sqrt(R / Y) (8 MiB at R = 512 KiB: 25 %, 2 MiB). Allocations of at least
// R add nothing: a series of large entries (a prompt cache's states) stays
// exact under sampling.
double SampledVariance(uint64_t recorded_size, uint64_t estimate);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_TREND_FIT_H_
