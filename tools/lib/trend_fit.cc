// trend_fit: see trend_fit.h for the decision procedure.
#include "tools/lib/trend_fit.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace retain::tool {
namespace {

constexpr double kFlatSigmas = 3;            // step 1
constexpr double kRiseSigmas = 4;            // step 4: fitted rise vs the endpoints' error
constexpr double kMinSlopeT = 4;             // step 4: slope vs its standard error
constexpr double kTrendShareOfRange = 0.5;   // steps 4, 5
constexpr double kSplitF = 20;               // step 3
constexpr double kOneStepShare = 0.8;        // step 5: warm-up
constexpr double kMinRSquared = 0.5;         // step 4
constexpr double kCreepShareOfLevel = 0.02;  // step 5
constexpr double kCreepShareOfRate = 0.1;    // step 5
constexpr double kDropErrors = 2;            // step 5
constexpr double kWanderShareOfLevel = 0.1;  // step 5
constexpr double kRateChange = 0.25;         // step 4
constexpr double kSteadyRSquared = 0.8;      // step 5
constexpr size_t kOtherSplitsTried = 4;      // step 5

// A least-squares line over points [begin, end) of sorted arrays, computed
// in two passes from the values themselves (exact for integral data such as
// bytes in arithmetic progression: a leak of 262144 B per request reads
// exactly 262144).
struct Line {
  double slope = 0;
  double r_squared = 0;
  double sse = 0;  // residual sum of squares
  double sxx = 0;
  size_t n = 0;
};

Line FitLine(const std::vector<double>& x, const std::vector<double>& y, size_t begin, size_t end) {
  Line line;
  line.n = end - begin;
  if (line.n == 0) return line;
  double mean_x = 0, mean_y = 0;
  for (size_t i = begin; i < end; ++i) {
    mean_x += x[i];
    mean_y += y[i];
  }
  mean_x /= static_cast<double>(line.n);
  mean_y /= static_cast<double>(line.n);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = begin; i < end; ++i) {
    sxx += (x[i] - mean_x) * (x[i] - mean_x);
    sxy += (x[i] - mean_x) * (y[i] - mean_y);
    syy += (y[i] - mean_y) * (y[i] - mean_y);
  }
  line.sxx = sxx;
  line.slope = sxx > 0 ? sxy / sxx : 0;
  line.r_squared = (sxx > 0 && syy > 0) ? (sxy * sxy) / (sxx * syy) : (syy == 0 ? 1 : 0);
  line.sse = std::max(0.0, sxx > 0 ? syy - sxy * sxy / sxx : syy);
  return line;
}

// Running sums for the residual of a line over any run of points in O(1).
// Values are normalized to about [0, 1] first so the subtractions keep
// their precision with thousands of points of gigabytes.
struct Sums {
  double n = 0, x = 0, y = 0, xx = 0, xy = 0, yy = 0;
};

double SseOf(const Sums& a, const Sums& b) {  // the points in b but not in a
  const double n = b.n - a.n;
  if (n <= 0) return 0;
  const double sx = b.x - a.x, sy = b.y - a.y;
  const double sxx = (b.xx - a.xx) - sx * sx / n;
  const double syy = (b.yy - a.yy) - sy * sy / n;
  const double sxy = (b.xy - a.xy) - sx * sy / n;
  double sse = syy;
  if (sxx > 1e-12 * n) sse -= sxy * sxy / sxx;
  return std::max(0.0, sse);
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return lower + (upper - lower) / 2;
}

// What one segment of the sorted points says (step 4 and 5).
struct Segment {
  Line line;
  double span = 0;   // of x
  double rise = 0;   // slope x span
  double range = 0;  // highest - lowest y
  double low = 0, high = 0;
  double noise = 0;  // min_step + kRiseSigmas x the endpoints' combined error
  double slope_error = 0;
  bool rises = false;
};

Segment Describe(const std::vector<double>& x, const std::vector<double>& y,
                 const std::vector<double>& se, size_t begin, size_t end, double min_step,
                 double floor_variance) {
  Segment s;
  s.line = FitLine(x, y, begin, end);
  s.span = x[end - 1] - x[begin];
  s.rise = s.line.slope * s.span;
  s.low = *std::min_element(y.begin() + static_cast<std::ptrdiff_t>(begin),
                            y.begin() + static_cast<std::ptrdiff_t>(end));
  s.high = *std::max_element(y.begin() + static_cast<std::ptrdiff_t>(begin),
                             y.begin() + static_cast<std::ptrdiff_t>(end));
  s.range = s.high - s.low;
  // The largest error among the points at the first and at the last
  // request count of the segment.
  double first_error = 0, last_error = 0;
  for (size_t i = begin; i < end; ++i) {
    if (x[i] == x[begin]) first_error = std::max(first_error, se[i]);
    if (x[i] == x[end - 1]) last_error = std::max(last_error, se[i]);
  }
  const double endpoint_error = std::hypot(first_error, last_error);
  s.noise = min_step + kRiseSigmas * endpoint_error;
  const double variance =
      std::max(s.line.n > 2 ? s.line.sse / static_cast<double>(s.line.n - 2) : 0.0, floor_variance);
  const double statistical = s.line.sxx > 0 ? std::sqrt(variance / s.line.sxx) : 0;
  // Sampling errors persist from snapshot to snapshot (an allocation
  // sampled stays sampled while it lives), so the residuals understate
  // them: the slope is never known better than the endpoints' error over
  // the span.
  s.slope_error = std::max(statistical, s.span > 0 ? endpoint_error / s.span : 0.0);
  const bool significant = s.line.sxx > 0 && s.line.slope > kMinSlopeT * statistical;
  s.rises = s.span > 0 && significant && s.rise >= s.noise &&
            s.rise > kTrendShareOfRange * s.range && s.line.r_squared >= kMinRSquared;
  return s;
}

}  // namespace

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kFlat:
      return "flat";
    case Verdict::kLinear:
      return "linear";
    case Verdict::kPlateau:
      return "plateau";
    case Verdict::kWarmUp:
      return "warm-up";
    case Verdict::kNoise:
      return "noise";
    case Verdict::kTooFew:
      return "too-few";
  }
  return "flat";
}

double SampledVariance(uint64_t recorded_size, uint64_t estimate) {
  if (estimate <= recorded_size) return 0;  // recorded with certainty
  const double e = static_cast<double>(estimate);
  return e * (e - static_cast<double>(recorded_size));
}

TrendFit FitTrend(const std::vector<double>& x_in, const std::vector<double>& y_in,
                  const std::vector<double>& se_in, double min_step, double x_uncertainty) {
  TrendFit fit;
  const size_t n = x_in.size();
  if (n < 2 || n != y_in.size() || (!se_in.empty() && se_in.size() != n)) return fit;
  fit.growth = y_in.back() - y_in.front();
  fit.level = y_in.back();
  fit.estimated = !se_in.empty();
  fit.error = fit.estimated ? se_in.back() : 0;

  // Sorted by x; snapshots with the same x keep their order.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return x_in[a] < x_in[b]; });
  std::vector<double> x(n), y(n), se(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    x[i] = x_in[order[i]];
    y[i] = y_in[order[i]];
    if (fit.estimated) se[i] = se_in[order[i]];
  }
  // Where each request count's points start; group_start[groups] = n.
  std::vector<size_t> group_start;
  for (size_t i = 0; i < n; ++i) {
    if (i == 0 || x[i] != x[i - 1]) group_start.push_back(i);
  }
  const size_t groups = group_start.size();
  group_start.push_back(n);
  fit.request_counts = groups;

  const double floor_variance = (min_step / 2) * (min_step / 2);
  const Segment all = Describe(x, y, se, 0, n, min_step, floor_variance);
  fit.slope = all.line.slope;
  fit.r_squared = all.line.r_squared;
  fit.slope_error = all.slope_error;

  // 1. flat.
  const size_t lowest = static_cast<size_t>(std::min_element(y.begin(), y.end()) - y.begin());
  const size_t highest = static_cast<size_t>(std::max_element(y.begin(), y.end()) - y.begin());
  if (y[highest] - y[lowest] < min_step + kFlatSigmas * std::hypot(se[lowest], se[highest])) {
    return fit;  // kFlat
  }
  // 2. too few request counts.
  if (groups < kMinRequestCounts) {
    fit.verdict = Verdict::kTooFew;
    return fit;
  }

  // 3. The best split: segment A = groups [0, b), B = groups [b, groups),
  // B at least kMinBandRequestCounts wide. The earliest of equally good
  // splits: a cache that is full at request 4 flattened at 4, not 5.
  const double x0 = x.front(), x_scale = std::max(x.back() - x.front(), 1.0);
  const double y0 = y[lowest], y_scale = std::max(y[highest] - y[lowest], 1.0);
  std::vector<Sums> prefix(n + 1);
  for (size_t i = 0; i < n; ++i) {
    const double u = (x[i] - x0) / x_scale, v = (y[i] - y0) / y_scale;
    prefix[i + 1] = {prefix[i].n + 1,      prefix[i].x + u,      prefix[i].y + v,
                     prefix[i].xx + u * u, prefix[i].xy + u * v, prefix[i].yy + v * v};
  }
  size_t best = 0;  // 0: no split
  double best_sse = 0;
  const double tie = 1e-9 * static_cast<double>(n);
  std::vector<std::pair<double, size_t>> splits;  // (residual, b) of every allowed split
  for (size_t b = 1; b + kMinBandRequestCounts <= groups; ++b) {
    if (x_uncertainty > 0 && x.back() - x[group_start[b]] <= x_uncertainty) break;
    const double sse =
        SseOf(prefix[0], prefix[group_start[b]]) + SseOf(prefix[group_start[b]], prefix[n]);
    splits.emplace_back(sse, b);
    if (best == 0 || sse < best_sse - tie) {
      best = b;
      best_sse = sse;
    }
  }
  const double floor_sse = static_cast<double>(n) * floor_variance;
  const double sse_line = all.line.sse + floor_sse;
  // Whether splitting before group b explains the points much better than
  // one line (the F test of step 3).
  auto splits_better = [&](size_t b) {
    const double sse_split =
        (SseOf(prefix[0], prefix[group_start[b]]) + SseOf(prefix[group_start[b]], prefix[n])) *
            y_scale * y_scale +
        floor_sse;
    const double dof = std::max(1.0, static_cast<double>(n) - 4);
    return sse_line > sse_split && ((sse_line - sse_split) / 2) / (sse_split / dof) >= kSplitF;
  };
  // What the points from group b on say (steps 4 and 5).
  struct Reading {
    Segment band;
    double level = 0;  // the band's median
    double rise = 0;   // from the first request count to the level
    bool rises_on = false;
    bool holds = false;
  };
  auto read_from = [&](size_t b) {
    Reading r;
    const size_t band_begin = group_start[b];
    r.band = Describe(x, y, se, band_begin, n, min_step, floor_variance);
    const Segment& band = r.band;
    // 5. Holding, before rising: a cache whose mix of entry sizes drifts
    // creeps a little, and that is still a plateau.
    r.level =
        Median(std::vector<double>(y.begin() + static_cast<std::ptrdiff_t>(band_begin), y.end()));
    double start = 0, start_error = 0;
    for (size_t i = 0; i < group_start[1]; ++i) {
      start += y[i];
      start_error = std::max(start_error, se[i]);
    }
    start /= static_cast<double>(group_start[1]);
    double level_error = 0;
    for (size_t i = band_begin; i < n; ++i) level_error = std::max(level_error, se[i]);
    r.rise = r.level - start;
    const double rate_before = r.rise / (x[band_begin] - x[0]);
    const bool scatter = std::abs(band.rise) <= std::max(min_step, kTrendShareOfRange * band.range);
    const bool slower = std::abs(band.line.slope) <= kCreepShareOfRate * rate_before;
    const bool creeps = slower && std::abs(band.rise) <= kCreepShareOfLevel * std::abs(r.level);
    const bool wanders = slower && std::abs(band.rise) <= kWanderShareOfLevel * std::abs(r.level) &&
                         band.line.r_squared < kSteadyRSquared;
    const bool dropped = rate_before - band.line.slope >= kDropErrors * band.slope_error;
    const bool stands_out =
        r.rise >= min_step + kFlatSigmas * std::hypot(start_error, level_error) &&
        r.rise >= band.range;
    r.rises_on = band.rises && !creeps && !wanders;
    r.holds = !r.rises_on && (scatter || creeps || wanders) && dropped && stands_out;
    return r;
  };
  // The earliest group from which every point lies within the noise of
  // every other (step 1's test on the tail), 0 when the last
  // kMinBandRequestCounts do not, or they span no more than x_uncertainty.
  auto held_tail = [&]() -> size_t {
    size_t low = n - 1, high = n - 1, held = 0;
    for (size_t g = groups; g-- > 1;) {
      for (size_t i = group_start[g]; i < group_start[g + 1]; ++i) {
        if (y[i] < y[low]) low = i;
        if (y[i] > y[high]) high = i;
      }
      if (y[high] - y[low] >= min_step + kFlatSigmas * std::hypot(se[low], se[high])) break;
      held = g;
    }
    if (held == 0 || groups - held < kMinBandRequestCounts) return 0;
    if (x_uncertainty > 0 && x.back() - x[group_start[held]] <= x_uncertainty) return 0;
    return held;
  };

  // 4. One line: linear or noise.
  const Verdict one_line = all.rises ? Verdict::kLinear : Verdict::kNoise;
  const bool split = best != 0 && splits_better(best);
  size_t band_group = 0;  // the group the plateau holds from; 0: none
  Reading reading;
  if (split) {
    reading = read_from(best);
    if (reading.holds) band_group = best;
  }
  if (band_group == 0) {
    // The best split of step 3 falls where a fill that slowed down slows
    // (concurrent clients' requests add unevenly), and its B still rises
    // while the last request counts hold exactly: split where they start.
    const size_t tail = held_tail();
    if (tail != 0 && (!split || tail != best) && splits_better(tail)) {
      const Reading tail_reading = read_from(tail);
      if (tail_reading.holds) {
        reading = tail_reading;
        band_group = tail;
      }
    }
  }
  if (band_group == 0 && split) {
    // The best split's B does not hold, typically because a snapshot in it
    // caught the cache one entry short (one evicted, the next not yet
    // saved): B's line reads the dip at its head as a rise of one entry
    // over B, or the dip ends the held tail early. The next best splits are read in the order
    // of their residual; the first that passes the F test, holds, and has
    // no point above its level (a replacement dips below the level, never
    // above it: an owner that holds and then rises again keeps its
    // verdict) is the plateau. A few suffice: a dip moves the best split by
    // a request count or two.
    const size_t tried = std::min(splits.size(), kOtherSplitsTried + 1);
    std::partial_sort(splits.begin(), splits.begin() + static_cast<std::ptrdiff_t>(tried),
                      splits.end());
    for (size_t i = 0; i < tried && band_group == 0; ++i) {
      const size_t b = splits[i].second;
      if (b == best || !splits_better(b)) continue;
      const Reading other = read_from(b);
      if (other.holds && other.band.high <= other.level + other.band.noise) {
        reading = other;
        band_group = b;
      }
    }
  }
  if (band_group == 0) {
    if (!split || !reading.rises_on) {
      // The split explains nothing definite: what one line says.
      fit.verdict = one_line;
      return fit;
    }
    // 4. Still growing after the split: at the rate now when it changed
    // (a cache filled up before it), else at the rate over the series.
    fit.verdict = Verdict::kLinear;
    const size_t band_begin = group_start[best];
    const double before = FitLine(x, y, 0, band_begin).slope;
    // A short segment's slope is only as good as its request counts, each
    // of which may be off by x_uncertainty (requests in flight when it was
    // captured): over a span s that moves the slope by up to 2u/s of itself,
    // and a change within that is no change.
    const double span = x[n - 1] - x[band_begin];
    const double x_slack = x_uncertainty > 0 ? 2 * x_uncertainty / std::max(span, 1.0) : 0;
    const Segment& band = reading.band;
    const double larger = std::max(std::abs(band.line.slope), std::abs(before));
    const double change = std::abs(band.line.slope - before);
    if (change > kRateChange * larger && change > x_slack * larger) {
      fit.slope = band.line.slope;
      fit.r_squared = band.line.r_squared;
      fit.slope_error = band.slope_error;
    }
    return fit;
  }
  const size_t band_begin = group_start[band_group];
  const Segment& band = reading.band;
  const double level = reading.level;
  const double rise = reading.rise;
  // slope and fit stay the whole series' (what a plateau cost on average
  // per request, as before); the level says where it stopped.
  fit.level = level;
  fit.band_low = band.low;
  fit.band_high = band.high;
  fit.flat_from = x[band_begin];
  fit.verdict = Verdict::kPlateau;
  // One step: most of the rise between two consecutive request counts.
  auto group_mean = [&](size_t g) {
    double sum = 0;
    for (size_t i = group_start[g]; i < group_start[g + 1]; ++i) sum += y[i];
    return sum / static_cast<double>(group_start[g + 1] - group_start[g]);
  };
  double largest_step = 0;
  size_t step_to = band_group;
  double previous = group_mean(0);
  for (size_t g = 1; g <= band_group; ++g) {
    const double mean = group_mean(g);
    if (mean - previous > largest_step) {
      largest_step = mean - previous;
      step_to = g;
    }
    previous = mean;
  }
  if (largest_step >= kOneStepShare * rise) {
    fit.verdict = Verdict::kWarmUp;
    fit.flat_from = x[group_start[step_to]];
  }
  return fit;
}

}  // namespace retain::tool
