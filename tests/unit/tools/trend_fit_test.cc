// FitTrend on generated series: families of what servers do under real
// traffic (requests one by one, four at a time, concurrent clients whose
// snapshots repeat or skip request counts; caches that fill and then evict;
// leaks through churn; sampled estimates with the shim's error model), 200
// seeds each, every verdict and slope checked. The false-linear count over
// all the sampled families must be zero.
#include "tools/lib/trend_fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/lib/snapshot_reader.h"  // SampledEstimate

namespace retain::tool {
namespace {

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kSeeds = 200;

using Rng = std::mt19937_64;

double Uniform(Rng& rng, double low, double high) {
  return std::uniform_real_distribution<double>(low, high)(rng);
}
int Int(Rng& rng, int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng); }

// --- request axes -----------------------------------------------------------

enum class Axis { kSequential, kStepsOf4, kConcurrent };
const char* AxisName(Axis axis) {
  switch (axis) {
    case Axis::kSequential:
      return "sequential";
    case Axis::kStepsOf4:
      return "steps of 4";
    case Axis::kConcurrent:
      return "concurrent";
  }
  return "";
}
constexpr Axis kAxes[] = {Axis::kSequential, Axis::kStepsOf4, Axis::kConcurrent};

// Requests served at each snapshot, 0 to `requests`: one snapshot per
// request; one per 4 (four requests end together); or concurrent clients,
// whose snapshots repeat a count or skip up to 4 (4,4,6,6,8,8,9,10,10,10).
std::vector<double> RequestAxis(Axis axis, int requests, Rng& rng) {
  std::vector<double> x = {0};
  int at = 0;
  while (at < requests) {
    switch (axis) {
      case Axis::kSequential:
        at += 1;
        break;
      case Axis::kStepsOf4:
        at += 4;
        break;
      case Axis::kConcurrent: {
        static constexpr int kSteps[] = {0, 0, 1, 1, 2, 2, 3, 4};
        at += kSteps[Int(rng, 0, 7)];
        break;
      }
    }
    x.push_back(std::min(at, requests));
  }
  return x;
}

std::string Show(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<std::string> points;
  for (size_t i = 0; i < x.size(); ++i) {
    points.push_back(absl::StrCat("(", x[i], ",", std::llround(y[i]), ")"));
  }
  return absl::StrJoin(points, " ");
}

std::string Show(const TrendFit& fit) {
  return absl::StrCat(VerdictName(fit.verdict), " slope ", fit.slope, " r2 ", fit.r_squared,
                      " level ", fit.level, " from ", fit.flat_from);
}

// --- a cache that evicts ------------------------------------------------------

// Each request saves one entry (a size drawn from `sizes`); the oldest are
// evicted while the total is over `capacity`. Returns the bytes after each
// request count 0..requests, and the first request that evicted.
std::vector<double> CappedCache(const std::vector<double>& sizes, double capacity, int requests,
                                Rng& rng, int* first_eviction) {
  std::vector<double> after = {0};
  std::vector<double> entries;
  double total = 0;
  *first_eviction = -1;
  for (int r = 1; r <= requests; ++r) {
    const double size = sizes[static_cast<size_t>(Int(rng, 0, static_cast<int>(sizes.size()) - 1))];
    entries.push_back(size);
    total += size;
    while (total > capacity) {
      total -= entries.front();
      entries.erase(entries.begin());
      if (*first_eviction < 0) *first_eviction = r;
    }
    after.push_back(total);
  }
  return after;
}

// --- the shim's sampler ---------------------------------------------------------

// An owner's live allocations under Poisson-by-bytes sampling of mean
// `interval` (shim/src/record/sampler.h): each allocation is recorded at
// birth with probability 1 - exp(-s / interval), independently; recorded
// ones count SampledEstimate bytes.
class SampledOwner {
 public:
  SampledOwner(uint64_t interval, Rng& rng) : interval_(interval), rng_(rng) {}

  void Allocate(uint64_t size) {
    const double p = size >= interval_
                         ? 1.0
                         : -std::expm1(-static_cast<double>(size) / static_cast<double>(interval_));
    live_.push_back({size, Uniform(rng_, 0, 1) < p});
  }
  // Frees the allocation at `i` (any order) and returns its size.
  uint64_t Free(size_t i) {
    const uint64_t size = live_[i].size;
    live_[i] = live_.back();
    live_.pop_back();
    return size;
  }
  size_t Count() const { return live_.size(); }
  double Estimate() const {
    double bytes = 0;
    for (const Live& a : live_) {
      if (a.sampled) bytes += static_cast<double>(SampledEstimate(a.size, interval_));
    }
    return bytes;
  }
  // As trend.cc computes it: sqrt(sum of SampledVariance), at least one interval.
  double Error() const {
    double variance = 0;
    for (const Live& a : live_) {
      if (a.sampled) variance += SampledVariance(a.size, SampledEstimate(a.size, interval_));
    }
    const double interval = static_cast<double>(interval_);
    return std::sqrt(std::max(variance, interval * interval));
  }

 private:
  struct Live {
    uint64_t size;
    bool sampled;
  };
  uint64_t interval_;
  Rng& rng_;
  std::vector<Live> live_;
};

uint64_t SmallSize(Rng& rng) {  // log-uniform, 64 B .. 256 KiB
  return static_cast<uint64_t>(std::exp(Uniform(rng, std::log(64.0), std::log(256 * kKiB))));
}

constexpr uint64_t kIntervals[] = {64 * 1024, 512 * 1024, 4 * 1024 * 1024};

// ---------------------------------------------------------------------------
// The issue's own series.

TEST(FitTrendIssueTest, ConcurrentRequestCountsThatRepeatAndSkipStillReadLinear) {
  // Two clients, --parallel 2: the prompt cache keeps 9.6 MiB per request.
  const std::vector<double> x = {4, 4, 6, 6, 8, 8, 9, 10, 10, 10};
  std::vector<double> y;
  for (double r : x) y.push_back(r * 9.6 * kMiB);
  const TrendFit fit = FitTrend(x, y);
  EXPECT_EQ(fit.verdict, Verdict::kLinear) << Show(fit);
  EXPECT_NEAR(fit.slope, 9.6 * kMiB, 1e-6 * kMiB);
  EXPECT_EQ(fit.request_counts, 5u);
}

TEST(FitTrendIssueTest, TheLastSnapshotsOfABurstAreNotAPlateau) {
  // Four clients through a queue, 256 KiB kept per request: the last three
  // snapshots are taken as the last requests in flight end (x 38, 39, 40),
  // and all hold the final state, 40 requests' nodes. Counted exactly they
  // would look like a band; a point's x is off by up to the 3 requests in
  // flight, so a band must span more than that.
  std::vector<double> x, y;
  for (int r = 1; r <= 37; ++r) {
    x.push_back(r);
    y.push_back((r + 2) * 256.0 * 1024);
  }
  for (int r = 38; r <= 40; ++r) {
    x.push_back(r);
    y.push_back(40 * 256.0 * 1024);
  }
  EXPECT_EQ(FitTrend(x, y, {}, kOwnerMinStep).verdict, Verdict::kPlateau) << "the hazard";
  const TrendFit fit = FitTrend(x, y, {}, kOwnerMinStep, /*x_uncertainty=*/3);
  EXPECT_EQ(fit.verdict, Verdict::kLinear) << Show(fit);
  EXPECT_NEAR(fit.slope, 256 * 1024, 0.05 * 256 * 1024) << Show(fit);
  // A cache full from request 5 still reads plateau at the same uncertainty.
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::min(x[i], 4.0) * 4 * kMiB;
  const TrendFit cache = FitTrend(x, y, {}, kOwnerMinStep, 3);
  EXPECT_EQ(cache.verdict, Verdict::kPlateau) << Show(cache);
  EXPECT_EQ(cache.flat_from, 4) << Show(cache);
  EXPECT_EQ(cache.level, 16 * kMiB) << Show(cache);
}

TEST(FitTrendIssueTest, KeepAliveSnapshotsAfterTheSameRequestDoNotSteepenTheSlope) {
  // Eight requests, the last counted by two snapshots: 26.5 MiB per request.
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 8};
  std::vector<double> y;
  for (double r : x) y.push_back(r * 26.5 * kMiB);
  const TrendFit fit = FitTrend(x, y);
  EXPECT_EQ(fit.verdict, Verdict::kLinear) << Show(fit);
  EXPECT_NEAR(fit.slope, 26.5 * kMiB, 1e-6 * kMiB);  // not 39.7
}

// A CI run of SimTrafficTest.OneRequestPerConnectionIsTheBaseline: one
// request in flight at a capture (x_uncertainty 1) had already added its
// trie node, so the snapshot at x = 21 holds 22 nodes. The last three
// request counts then fit a line of 0.64 nodes per request, which is the
// x error over a 3-request span, not a change of rate: the slope stays the
// series' (1,050,896 bytes per request, within 5 %).
TEST(FitTrendIssueTest, ARequestCountOffByOneNearTheEndDoesNotChangeTheRate) {
  constexpr double kNode = 1050896;
  const std::vector<double> x = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                 12, 13, 15, 15, 16, 17, 18, 19, 21, 23, 24};
  const std::vector<double> nodes = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                     12, 13, 15, 15, 16, 17, 18, 19, 22, 23, 24};
  std::vector<double> y;
  for (double k : nodes) y.push_back(k * kNode);
  const TrendFit fit = FitTrend(x, y, {}, kOwnerMinStep, /*x_uncertainty=*/1);
  EXPECT_EQ(fit.verdict, Verdict::kLinear) << Show(fit);
  EXPECT_NEAR(fit.slope, kNode, 0.05 * kNode) << Show(fit);
  // Without the uncertainty the last three counts are taken at their word.
  EXPECT_NEAR(FitTrend(x, y).slope, 0.643 * kNode, 0.01 * kNode);
}

// A CI run of GoRunnerTest.FourConcurrentClientsThroughTheFrontDoorGiveTheSameVerdicts:
// a cache of 16 entries of 1 MiB filled by four clients. A snapshot counts
// the requests that ended; the entries are saved by requests still in
// flight, so the fill runs ahead of x unevenly (9 MiB at 10 requests, 13
// at 11) and then holds exactly from request 18. The least-squares split
// falls at 11, where the fill slows, and its B still rises 3 MiB: the
// verdict was linear. The last ten snapshots hold to the byte.
TEST(FitTrendIssueTest, AFillThatSlowsBeforeHoldingIsAPlateau) {
  const std::vector<double> x = {2,  5,  7,  7,  8,  9,  10, 11, 15, 16,
                                 18, 19, 22, 25, 33, 34, 35, 36, 40, 40};
  const std::vector<double> mib = {1,  3,  5,  6,  7,  8,  9,  13, 14, 15,
                                   16, 16, 16, 16, 16, 16, 16, 16, 16, 16};
  std::vector<double> y;
  for (double m : mib) y.push_back(m * kMiB);
  for (double uncertainty : {0.0, 3.0, 8.0}) {
    const TrendFit fit = FitTrend(x, y, {}, kOwnerMinStep, uncertainty);
    EXPECT_EQ(fit.verdict, Verdict::kPlateau) << uncertainty << ": " << Show(fit);
    EXPECT_EQ(fit.level, 16 * kMiB);
    EXPECT_EQ(fit.flat_from, 18);
    EXPECT_EQ(fit.band_low, 16 * kMiB);
    EXPECT_EQ(fit.band_high, 16 * kMiB);
  }
  // Still one entry a request at the end (17 and 18 MiB at 36 and 40): linear.
  std::vector<double> rising = y;
  rising[17] = 17 * kMiB;
  rising[18] = rising[19] = 18 * kMiB;
  EXPECT_NE(FitTrend(x, rising, {}, kOwnerMinStep, 3).verdict, Verdict::kPlateau);
}

// A later CI run of the same test, on a loaded machine: the snapshots lag
// their triggers (the one asked for at request 20 was taken at 33) and up
// to 8 requests were in flight at a capture, so a plateau's band must span
// more than 8 requests. The snapshot at 20 caught a state being replaced
// (one evicted, the next not yet saved): 15 MiB. The least-squares split
// among those allowed falls at 20, where B (15, 16, 16, 16) reads that dip
// as a rise of one state: not significant, too steady to wander, more than
// half of B's range. The verdict was linear; the split at 17 holds.
TEST(FitTrendIssueTest, AStateBeingReplacedAtTheBandsFirstSnapshotIsStillAPlateau) {
  const std::vector<double> x = {2, 5, 5, 8, 13, 17, 20, 33, 35, 40};
  const std::vector<double> mib = {1, 4, 6, 7, 12, 16, 15, 16, 16, 16};
  std::vector<double> y;
  for (double m : mib) y.push_back(m * kMiB);
  for (double uncertainty : {0.0, 3.0, 7.0, 8.0}) {
    const TrendFit fit = FitTrend(x, y, {}, kOwnerMinStep, uncertainty);
    EXPECT_EQ(fit.verdict, Verdict::kPlateau) << uncertainty << ": " << Show(fit);
    EXPECT_EQ(fit.level, 16 * kMiB) << uncertainty;
    EXPECT_EQ(fit.band_high, 16 * kMiB) << uncertainty;
  }
  const TrendFit wide = FitTrend(x, y, {}, kOwnerMinStep, 8);
  EXPECT_EQ(wide.flat_from, 17);
  EXPECT_EQ(wide.band_low, 15 * kMiB);
  // The same dip on an owner that goes on rising (17, 18 MiB at 35, 40).
  std::vector<double> rising = y;
  rising[8] = 17 * kMiB;
  rising[9] = 18 * kMiB;
  EXPECT_EQ(FitTrend(x, rising, {}, kOwnerMinStep, 8).verdict, Verdict::kLinear);
}

TEST(FitTrendIssueTest, SampledEstimateAlternatingBetweenTwoValuesIsNeverLinear) {
  // RETAIN_SAMPLE=512KiB: 8,609,792 and 9,134,100 bytes, in every order.
  const double interval = 512 * kKiB;
  for (int pattern = 0; pattern < 64; ++pattern) {
    std::vector<double> x, y, se;
    for (int i = 0; i < 12; ++i) {
      x.push_back(i + 1);
      const bool flip = ((pattern >> (i % 6)) & 1) != 0;
      const bool high = (i % 2 == 1) != flip;
      y.push_back(high ? 9134100 : 8609792);
      se.push_back(std::sqrt(interval * y.back()));
    }
    const TrendFit fit = FitTrend(x, y, se);
    EXPECT_NE(fit.verdict, Verdict::kLinear) << pattern << ": " << Show(x, y) << " " << Show(fit);
    EXPECT_TRUE(fit.estimated);
  }
}

TEST(FitTrendIssueTest, CappedCacheWithChurnIsAPlateauAtItsLevel) {
  // 12.8 MiB per request up to 256 MiB at request 20, then between 237 and
  // 256 MiB while entries are evicted, over 60 requests.
  Rng rng(13);
  std::vector<double> x, y;
  for (int r = 0; r <= 60; ++r) {
    x.push_back(r);
    y.push_back(r <= 20 ? r * 12.8 * kMiB : Uniform(rng, 237, 256) * kMiB);
  }
  const TrendFit fit = FitTrend(x, y);
  ASSERT_EQ(fit.verdict, Verdict::kPlateau) << Show(fit);
  EXPECT_GE(fit.level, 237 * kMiB);
  EXPECT_LE(fit.level, 256 * kMiB);
  EXPECT_GE(fit.band_low, 237 * kMiB);
  EXPECT_LE(fit.band_high, 256 * kMiB);
  EXPECT_NEAR(fit.flat_from, 20, 1);
}

TEST(FitTrendIssueTest, RisingThroughTheSameChurnIsLinear) {
  Rng rng(13);
  std::vector<double> x, y;
  for (int r = 0; r <= 60; ++r) {
    x.push_back(r);
    y.push_back(r * 12.8 * kMiB - (r == 0 ? 0 : Uniform(rng, 0, 19) * kMiB));
  }
  const TrendFit fit = FitTrend(x, y);
  ASSERT_EQ(fit.verdict, Verdict::kLinear) << Show(fit);
  EXPECT_NEAR(fit.slope, 12.8 * kMiB, 0.05 * 12.8 * kMiB);
}

TEST(FitTrendIssueTest, TooFewRequestCountsSaysSo) {
  // Four snapshots but three request counts: no verdict yet.
  TrendFit fit = FitTrend({4, 4, 6, 8}, {4 * kMiB, 4 * kMiB, 6 * kMiB, 8 * kMiB});
  EXPECT_EQ(fit.verdict, Verdict::kTooFew);
  EXPECT_EQ(fit.request_counts, 3u);
  EXPECT_STREQ(VerdictName(fit.verdict), "too-few");
  // Nothing moving is a verdict with any number.
  EXPECT_EQ(FitTrend({1, 2, 3}, {kMiB, kMiB, kMiB}).verdict, Verdict::kFlat);
  EXPECT_EQ(FitTrend({1, 2, 3, 4}, {kMiB, 2 * kMiB, 3 * kMiB, 4 * kMiB}).verdict, Verdict::kLinear);
}

TEST(SampledVarianceTest, MatchesTheHorvitzThompsonVarianceAndItsSmallSizeLimit) {
  const uint64_t interval = 512 * 1024;
  EXPECT_EQ(SampledVariance(interval, interval), 0);  // always recorded
  EXPECT_EQ(SampledVariance(4 * interval, 4 * interval), 0);
  const uint64_t s = 100;
  const double p = -std::expm1(-100.0 / interval);
  const double e = static_cast<double>(SampledEstimate(s, interval));
  EXPECT_NEAR(SampledVariance(s, SampledEstimate(s, interval)), s * s * (1 - p) / (p * p),
              1e-3 * e * e);
  // ~interval^2 per record for small sizes: Var ~ interval x bytes.
  EXPECT_NEAR(SampledVariance(s, SampledEstimate(s, interval)), 1.0 * interval * interval,
              0.01 * interval * interval);
}

TEST(SampledVarianceTest, PredictsTheSpreadOfTheEstimateOverSeeds) {
  // 8 MiB of 4 KiB allocations sampled at 512 KiB: the estimates' standard
  // deviation over seeds matches sqrt(interval x bytes) and the mean of the
  // per-snapshot errors within 15 %.
  const uint64_t interval = 512 * 1024;
  double sum = 0, sum_sq = 0, error_sum = 0;
  const int runs = 400;
  for (int seed = 0; seed < runs; ++seed) {
    Rng rng(seed);
    SampledOwner owner(interval, rng);
    for (int i = 0; i < 2048; ++i) owner.Allocate(4096);
    const double e = owner.Estimate();
    sum += e;
    sum_sq += e * e;
    error_sum += owner.Error();
  }
  const double mean = sum / runs;
  const double sd = std::sqrt(sum_sq / runs - mean * mean);
  EXPECT_NEAR(mean, 8 * kMiB, 0.05 * 8 * kMiB);
  EXPECT_NEAR(sd, std::sqrt(interval * 8 * kMiB), 0.15 * sd);
  EXPECT_NEAR(error_sum / runs, sd, 0.15 * sd);
}

// ---------------------------------------------------------------------------
// Property tests: kSeeds seeds per family and axis.

struct SlopeStats {
  double worst = 0, sum = 0;
  int n = 0;
  void Add(double relative) {
    worst = std::max(worst, std::abs(relative));
    sum += std::abs(relative);
    ++n;
  }
  std::string Text() const {
    return absl::StrCat("mean |error| ", 100 * sum / std::max(n, 1), " %, worst ", 100 * worst,
                        " %");
  }
};

TEST(FitTrendPropertyTest, FixedBytesPerRequestIsLinearWithTheSameSlopeOnEveryAxis) {
  for (Axis axis : kAxes) {
    SlopeStats stats;
    for (int seed = 0; seed < kSeeds; ++seed) {
      Rng rng(seed);
      const double per_request = std::exp(Uniform(rng, std::log(4 * kKiB), std::log(200 * kMiB)));
      const double base = Uniform(rng, 0, 500) * kMiB;
      // Concurrent snapshots scatter (the requests in flight): a slope
      // within 5 % needs a longer series.
      const int requests = axis == Axis::kConcurrent ? Int(rng, 40, 60) : Int(rng, 12, 60);
      const std::vector<double> x = RequestAxis(axis, requests, rng);
      std::vector<double> y;
      for (double r : x) {
        // Concurrent clients: the requests still running hold part of
        // their bytes when the snapshot is taken (0 to 2 requests' worth).
        const double in_flight = axis == Axis::kConcurrent ? Uniform(rng, 0, 2) : 0;
        y.push_back(std::round(base + (r + in_flight) * per_request));
      }
      const TrendFit fit = FitTrend(x, y);
      if (fit.request_counts < kMinRequestCounts) {
        EXPECT_EQ(fit.verdict, Verdict::kTooFew);
        continue;
      }
      ASSERT_EQ(fit.verdict, Verdict::kLinear)
          << AxisName(axis) << " seed " << seed << ": " << Show(x, y) << " " << Show(fit);
      const double relative = fit.slope / per_request - 1;
      stats.Add(relative);
      EXPECT_LT(std::abs(relative), axis == Axis::kConcurrent ? 0.05 : 1e-4)  // bytes are rounded
          << AxisName(axis) << " seed " << seed << ": " << Show(x, y) << " " << Show(fit);
    }
    std::cout << "linear, " << AxisName(axis) << ": slope " << stats.Text() << "\n";
  }
}

TEST(FitTrendPropertyTest, LeakThroughChurnIsLinearWithinFivePercent) {
  // Entries saved each request and some evicted again (up to 1.5 entries'
  // worth at any snapshot), or noise of a request's worth: still growing.
  for (Axis axis : kAxes) {
    SlopeStats stats;
    for (int seed = 0; seed < kSeeds; ++seed) {
      Rng rng(1000 + seed);
      const double per_request = Uniform(rng, 0.1, 20) * kMiB;
      const bool gaussian = seed % 2 == 0;
      std::normal_distribution<double> noise(0, per_request);
      const std::vector<double> x = RequestAxis(axis, 60, rng);
      std::vector<double> y;
      for (double r : x) {
        const double churn = gaussian ? noise(rng) : -Uniform(rng, 0, 1.5) * per_request;
        y.push_back(std::max(0.0, 10 * kMiB + r * per_request + churn));
      }
      const TrendFit fit = FitTrend(x, y);
      ASSERT_EQ(fit.verdict, Verdict::kLinear)
          << AxisName(axis) << " seed " << seed << ": " << Show(x, y) << " " << Show(fit);
      const double relative = fit.slope / per_request - 1;
      stats.Add(relative);
      EXPECT_LT(std::abs(relative), 0.05)
          << AxisName(axis) << " seed " << seed << ": " << Show(x, y) << " " << Show(fit);
    }
    std::cout << "linear through churn, " << AxisName(axis) << ": slope " << stats.Text() << "\n";
  }
}

TEST(FitTrendPropertyTest, CappedCachesOfOneOrAFewEntrySizesPlateauAtTheirLevel) {
  for (Axis axis : kAxes) {
    int plateaus = 0, warm_ups = 0;
    double worst_flat_from = 0;
    for (int seed = 0; seed < kSeeds; ++seed) {
      Rng rng(2000 + seed);
      const double entry = Uniform(rng, 1, 40) * kMiB;
      std::vector<double> sizes = {entry};
      const int kinds = Int(rng, 1, 3);
      for (int k = 1; k < kinds; ++k) sizes.push_back(entry * Uniform(rng, 0.5, 1.5));
      const int entries_held = Int(rng, 6, 20);
      const double capacity = entries_held * entry + Uniform(rng, 0, 0.5) * entry;
      int first_eviction = 0;
      const int requests = 60;
      const std::vector<double> after =
          CappedCache(sizes, capacity, requests, rng, &first_eviction);
      const std::vector<double> x = RequestAxis(axis, requests, rng);
      std::vector<double> y;
      for (double r : x) y.push_back(after[static_cast<size_t>(r)]);
      const TrendFit fit = FitTrend(x, y);
      const std::string where = absl::StrCat(AxisName(axis), " seed ", seed, " sizes ",
                                             sizes.size(), ": ", Show(x, y), " ", Show(fit));
      ASSERT_TRUE(fit.verdict == Verdict::kPlateau || fit.verdict == Verdict::kWarmUp) << where;
      (fit.verdict == Verdict::kPlateau ? plateaus : warm_ups)++;
      const double largest = *std::max_element(sizes.begin(), sizes.end());
      EXPECT_GE(fit.level, capacity - largest) << where;
      EXPECT_LE(fit.level, capacity) << where;
      EXPECT_LE(fit.band_high, capacity) << where;
      // It flattened where the cache first evicted (the last request that
      // only added), give or take a step of the axis or an entry.
      const double slack = axis == Axis::kSequential ? 2 : 5;
      worst_flat_from = std::max(worst_flat_from, std::abs(fit.flat_from - (first_eviction - 1)));
      EXPECT_NEAR(fit.flat_from, first_eviction - 1, slack) << where;
    }
    EXPECT_GT(plateaus, warm_ups) << AxisName(axis);
    std::cout << "capped cache, " << AxisName(axis) << ": " << plateaus << " plateau, " << warm_ups
              << " warm-up, flat_from off by at most " << worst_flat_from << " requests\n";
  }
}

TEST(FitTrendPropertyTest, AnOwnerThatAlternatesIsNeverLinear) {
  for (Axis axis : kAxes) {
    int linear = 0;
    for (int seed = 0; seed < kSeeds; ++seed) {
      Rng rng(3000 + seed);
      const double low = Uniform(rng, 0, 100) * kMiB;
      const double high = low + std::exp(Uniform(rng, std::log(1 * kKiB), std::log(100 * kMiB)));
      const std::vector<double> x = RequestAxis(axis, Int(rng, 12, 60), rng);
      std::vector<double> y;
      // Strictly alternating, or holding each value for 1 to 3 snapshots.
      const bool strict = seed % 2 == 0;
      bool up = Int(rng, 0, 1) == 1;
      int hold = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (strict || hold-- <= 0) {
          up = !up;
          hold = strict ? 0 : Int(rng, 0, 2);
        }
        y.push_back(up ? high : low);
      }
      const TrendFit fit = FitTrend(x, y);
      if (fit.verdict == Verdict::kLinear) {
        ++linear;
        ADD_FAILURE() << AxisName(axis) << " seed " << seed << ": " << Show(x, y) << " "
                      << Show(fit);
      }
    }
    EXPECT_EQ(linear, 0);
  }
}

// Sampled owners whose true bytes do not grow: a constant population
// churned at any rate, or one alternating between two sets (8.6 and 9.1 MB
// in the issue). Zero false linear over every seed, axis and interval.
TEST(FitTrendPropertyTest, SampledOwnersThatDoNotGrowAreNeverLinear) {
  int series = 0, linear = 0, flat = 0, noise = 0, other = 0;
  for (uint64_t interval : kIntervals) {
    for (Axis axis : kAxes) {
      for (int seed = 0; seed < kSeeds; ++seed) {
        Rng rng(4000 + seed);
        SampledOwner owner(interval, rng);
        SampledOwner extra(interval, rng);  // the alternating set
        const double target = std::exp(Uniform(rng, std::log(256 * kKiB), std::log(64 * kMiB)));
        double total = 0;
        while (total < target) {
          const uint64_t size = SmallSize(rng);
          owner.Allocate(size);
          total += static_cast<double>(size);
        }
        const double churn = Uniform(rng, 0, 1);  // share replaced per request
        const bool alternating = seed % 3 == 0;
        std::vector<uint64_t> extra_sizes;
        if (alternating) {
          double extra_total = 0;
          while (extra_total < 0.06 * target) {
            extra_sizes.push_back(SmallSize(rng));
            extra_total += static_cast<double>(extra_sizes.back());
          }
        }
        const std::vector<double> x = RequestAxis(axis, Int(rng, 12, 60), rng);
        std::vector<double> y, se;
        double last_x = -1;
        for (double r : x) {
          for (double request = last_x + 1; request <= r; ++request) {
            // Each request frees a share of the allocations and makes the
            // same sizes again (each newly drawn by the sampler).
            const size_t replaced = static_cast<size_t>(churn * static_cast<double>(owner.Count()));
            std::vector<uint64_t> sizes;
            for (size_t k = 0; k < replaced; ++k) {
              sizes.push_back(owner.Free(
                  static_cast<size_t>(Int(rng, 0, static_cast<int>(owner.Count()) - 1))));
            }
            for (uint64_t size : sizes) owner.Allocate(size);
            if (alternating) {
              if (static_cast<int>(request) % 2 == 1) {
                for (uint64_t size : extra_sizes) extra.Allocate(size);
              } else {
                while (extra.Count() > 0) extra.Free(extra.Count() - 1);
              }
            }
          }
          last_x = r;
          y.push_back(owner.Estimate() + extra.Estimate());
          se.push_back(std::hypot(owner.Error(), extra.Count() > 0 ? extra.Error() : 0.0));
        }
        const TrendFit fit = FitTrend(x, y, se);
        ++series;
        switch (fit.verdict) {
          case Verdict::kLinear:
            ++linear;
            ADD_FAILURE() << "interval " << interval << " " << AxisName(axis) << " seed " << seed
                          << " churn " << churn << (alternating ? " alternating" : "") << ": "
                          << Show(x, y) << " " << Show(fit);
            break;
          case Verdict::kFlat:
            ++flat;
            break;
          case Verdict::kNoise:
            ++noise;
            break;
          default:
            ++other;
        }
      }
    }
  }
  std::cout << "sampled, not growing: " << series << " series: " << linear << " linear, " << flat
            << " flat, " << noise << " noise, " << other << " other\n";
  EXPECT_EQ(linear, 0);
}

// Sampled owners that do grow, by small allocations, by well over their
// sampling error: linear, with the slope within what the error allows.
// Owners that grow by entries of at least the interval are exact.
TEST(FitTrendPropertyTest, SampledGrowthBeyondTheErrorIsLinear) {
  for (uint64_t interval : {uint64_t{64 * 1024}, uint64_t{512 * 1024}}) {
    for (Axis axis : kAxes) {
      SlopeStats stats;
      for (int seed = 0; seed < kSeeds; ++seed) {
        Rng rng(5000 + seed);
        SampledOwner owner(interval, rng);
        for (int i = 0; i < 1000; ++i) owner.Allocate(SmallSize(rng));  // ~37 MiB
        // Per request: 2 MiB of allocations of 64 B .. 256 KiB, or an entry.
        const bool entries = seed % 4 == 0;
        const double per_request = entries ? 4.0 * static_cast<double>(interval) : 2 * kMiB;
        const std::vector<double> x = RequestAxis(axis, 30, rng);
        std::vector<double> y, se;
        double last_x = 0;
        for (double r : x) {
          for (double request = last_x + 1; request <= r; ++request) {
            if (entries) {
              owner.Allocate(4 * interval);
            } else {
              double added = 0;
              while (added < per_request) {
                const uint64_t size = SmallSize(rng);
                owner.Allocate(size);
                added += static_cast<double>(size);
              }
            }
          }
          last_x = r;
          y.push_back(owner.Estimate());
          se.push_back(owner.Error());
        }
        const TrendFit fit = FitTrend(x, y, se);
        ASSERT_EQ(fit.verdict, Verdict::kLinear)
            << "interval " << interval << " " << AxisName(axis) << " seed " << seed << ": "
            << Show(x, y) << " " << Show(fit);
        const double relative = fit.slope / per_request - 1;
        stats.Add(relative);
        // Sampling errors of the allocations added accumulate (a random
        // walk): the slope of small allocations is off by up to ~4 x
        // sqrt(interval / growth), 45 % at 512 KiB and 60 MiB.
        EXPECT_LT(std::abs(relative), interval > 64 * 1024 ? 0.5 : 0.15)
            << "interval " << interval << " seed " << seed << ": " << Show(x, y) << " "
            << Show(fit);
        // The slope's error covers the miss (within 4 of them).
        EXPECT_LT(std::abs(fit.slope - per_request), 4 * fit.slope_error + 0.01 * per_request)
            << "interval " << interval << " seed " << seed << " " << Show(fit);
      }
      std::cout << "sampled growth, interval " << interval << ", " << AxisName(axis) << ": slope "
                << stats.Text() << "\n";
    }
  }
}

TEST(FitTrendPropertyTest, ALeakUnderAFilledCacheIsLinearAtTheLeakRate) {
  for (Axis axis : kAxes) {
    for (int seed = 0; seed < kSeeds; ++seed) {
      Rng rng(6000 + seed);
      const double entry = Uniform(rng, 1, 20) * kMiB;
      const double leak = entry * Uniform(rng, 0.1, 1);
      int first_eviction = 0;
      const std::vector<double> cache =
          CappedCache({entry}, entry * Int(rng, 4, 10), 60, rng, &first_eviction);
      const std::vector<double> x = RequestAxis(axis, 60, rng);
      std::vector<double> y;
      for (double r : x) y.push_back(cache[static_cast<size_t>(r)] + r * leak);
      const TrendFit fit = FitTrend(x, y);
      ASSERT_EQ(fit.verdict, Verdict::kLinear)
          << AxisName(axis) << " seed " << seed << ": " << Show(x, y) << " " << Show(fit);
      EXPECT_NEAR(fit.slope, leak, 0.05 * leak) << AxisName(axis) << " seed " << seed;
    }
  }
}

// Concurrent clients: a request saves its entry before it ends, so a
// snapshot at x requests ended holds x + 0..3 entries until the cache is
// full, and exactly `held` entries after.
std::vector<double> EntriesFilledAhead(const std::vector<double>& x, int held, Rng& rng) {
  std::vector<double> entries;
  for (double r : x) entries.push_back(std::min(static_cast<double>(held), r + Int(rng, 0, 3)));
  return entries;
}

TEST(FitTrendPropertyTest, CachesFilledAheadOfTheRequestCountPlateauWhereTheyHold) {
  int plateaus = 0, warm_ups = 0;
  for (int seed = 0; seed < kSeeds; ++seed) {
    Rng rng(7000 + seed);
    const double entry = Uniform(rng, 0.25, 40) * kMiB;
    const int held = Int(rng, 6, 24);
    const int requests = Int(rng, held + 12, 60);
    const std::vector<double> x = RequestAxis(Axis::kConcurrent, requests, rng);
    std::vector<double> y;
    for (double e : EntriesFilledAhead(x, held, rng)) y.push_back(e * entry);
    const TrendFit fit = FitTrend(x, y, {}, kOwnerMinStep, /*x_uncertainty=*/3);
    const std::string where = absl::StrCat("seed ", seed, ": ", Show(x, y), " ", Show(fit));
    if (fit.request_counts < kMinRequestCounts) continue;
    ASSERT_TRUE(fit.verdict == Verdict::kPlateau || fit.verdict == Verdict::kWarmUp) << where;
    (fit.verdict == Verdict::kPlateau ? plateaus : warm_ups)++;
    EXPECT_EQ(fit.level, held * entry) << where;
    EXPECT_LE(fit.band_high, held * entry) << where;
    // Full by the time `held` requests ended, and perhaps 3 before.
    EXPECT_GE(fit.flat_from, held - 3 - 4) << where;
    EXPECT_LE(fit.flat_from, held + 4) << where;
  }
  EXPECT_GT(plateaus, warm_ups);
  std::cout << "filled ahead of x: " << plateaus << " plateau, " << warm_ups << " warm-up\n";
}

// Series whose snapshots each catch, with probability 1/8, an entry being
// replaced: one entry short of what the requests served imply. (The Go
// runner with four clients on a loaded machine: 2 of 150 snapshots after
// the fill in 8 runs, and 1 of 5 in the CI run above.)
std::vector<double> WithReplacementDips(const std::vector<double>& entries, double entry,
                                        Rng& rng) {
  std::vector<double> y;
  for (double e : entries) y.push_back((Int(rng, 0, 7) == 0 && e >= 1 ? e - 1 : e) * entry);
  return y;
}

TEST(FitTrendPropertyTest, CachesCaughtMidReplacementPlateauUnderLaggingSnapshots) {
  // Concurrent clients on a loaded machine: 3 to 8 requests in flight at a
  // capture, the cache filled ahead of x as above, and any snapshot may
  // catch an entry being replaced.
  int plateaus = 0, warm_ups = 0;
  for (int seed = 0; seed < kSeeds; ++seed) {
    Rng rng(9000 + seed);
    const double entry = Uniform(rng, 0.25, 40) * kMiB;
    const int held = Int(rng, 12, 24);
    const int requests = Int(rng, held + 16, 60);
    const double uncertainty = Int(rng, 3, 8);
    // Snapshots coalesce once the cache is full (each takes longer): a
    // quarter of them are not taken. (With half not taken, 4 of 200 read
    // linear: the fill scatters by 3 entries and too few points follow it
    // for any split to pass the F test or for the band to span more than
    // the uncertainty.)
    std::vector<double> x;
    for (double r : RequestAxis(Axis::kConcurrent, requests, rng)) {
      if (r < held || r == requests || Int(rng, 0, 3) != 0) x.push_back(r);
    }
    const std::vector<double> y = WithReplacementDips(EntriesFilledAhead(x, held, rng), entry, rng);
    const TrendFit fit = FitTrend(x, y, {}, kOwnerMinStep, uncertainty);
    const std::string where =
        absl::StrCat("seed ", seed, " uncertainty ", uncertainty, ": ", Show(x, y), " ", Show(fit));
    if (fit.request_counts < kMinRequestCounts) continue;
    ASSERT_TRUE(fit.verdict == Verdict::kPlateau || fit.verdict == Verdict::kWarmUp) << where;
    (fit.verdict == Verdict::kPlateau ? plateaus : warm_ups)++;
    EXPECT_GE(fit.level, (held - 1) * entry) << where;
    EXPECT_LE(fit.level, held * entry) << where;
    EXPECT_LE(fit.band_high, held * entry) << where;
  }
  EXPECT_GT(plateaus, warm_ups);
  std::cout << "caught mid-replacement: " << plateaus << " plateau, " << warm_ups << " warm-up\n";
}

TEST(FitTrendPropertyTest, ALeakCaughtMidReplacementIsLinear) {
  // The same dips and lag on an owner that keeps one entry per request.
  for (int seed = 0; seed < kSeeds; ++seed) {
    Rng rng(9500 + seed);
    const double entry = Uniform(rng, 0.25, 40) * kMiB;
    const double uncertainty = Int(rng, 3, 8);
    const std::vector<double> x = RequestAxis(Axis::kConcurrent, Int(rng, 30, 60), rng);
    std::vector<double> entries;
    for (double r : x) entries.push_back(r + Int(rng, 0, 3));
    const std::vector<double> y = WithReplacementDips(entries, entry, rng);
    const TrendFit fit = FitTrend(x, y, {}, kOwnerMinStep, uncertainty);
    if (fit.request_counts < kMinRequestCounts) continue;
    EXPECT_EQ(fit.verdict, Verdict::kLinear) << "seed " << seed << " uncertainty " << uncertainty
                                             << ": " << Show(x, y) << " " << Show(fit);
  }
}

TEST(FitTrendPropertyTest, ALeakOnEveryKthRequestIsLinear) {
  // Held for a few request counts between leaks, growing over the series.
  for (Axis axis : kAxes) {
    for (int seed = 0; seed < kSeeds; ++seed) {
      Rng rng(8000 + seed);
      const double leak = Uniform(rng, 0.25, 40) * kMiB;
      const int every = Int(rng, 2, 5);
      const int requests = Int(rng, 30, 60);
      const std::vector<double> x = RequestAxis(axis, requests, rng);
      std::vector<double> y;
      for (double r : x) y.push_back(std::floor(r / every) * leak);
      const TrendFit fit = FitTrend(x, y, {}, kOwnerMinStep, axis == Axis::kConcurrent ? 3 : 0);
      if (fit.request_counts < kMinRequestCounts) continue;
      EXPECT_EQ(fit.verdict, Verdict::kLinear) << AxisName(axis) << " seed " << seed << " every "
                                               << every << ": " << Show(x, y) << " " << Show(fit);
    }
  }
}

}  // namespace
}  // namespace retain::tool
