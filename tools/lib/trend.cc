// trend: see trend.h.
#include "tools/lib/trend.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/diff.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

constexpr double kTailShareOfRange = 0.02;

void LeastSquares(const std::vector<double>& x, const std::vector<double>& y, double* slope,
                  double* r_squared) {
  const size_t n = x.size();
  double mean_x = 0, mean_y = 0;
  for (size_t i = 0; i < n; ++i) {
    mean_x += x[i];
    mean_y += y[i];
  }
  mean_x /= static_cast<double>(n);
  mean_y /= static_cast<double>(n);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mean_x) * (x[i] - mean_x);
    sxy += (x[i] - mean_x) * (y[i] - mean_y);
    syy += (y[i] - mean_y) * (y[i] - mean_y);
  }
  *slope = sxx > 0 ? sxy / sxx : 0;
  *r_squared = (sxx > 0 && syy > 0) ? (sxy * sxy) / (sxx * syy) : (syy == 0 ? 1 : 0);
}

// Request count per snapshot: tags seen so far when there are tags.
std::vector<double> RequestAxis(const std::vector<const v1::Snapshot*>& snapshots,
                                bool* from_tags) {
  std::vector<double> x;
  *from_tags = false;
  for (const v1::Snapshot* s : snapshots) {
    *from_tags |= !s->tags().empty() || s->header().requests_opened() != 0;
  }
  for (size_t i = 0; i < snapshots.size(); ++i) {
    if (*from_tags) {
      // Tags are numbered from 1 in the order requests arrived. The header
      // counts them; a snapshot of an older shim (which kept every tag) has
      // its largest id instead.
      uint64_t highest = snapshots[i]->header().requests_opened();
      for (const v1::Tag& tag : snapshots[i]->tags()) {
        highest = std::max<uint64_t>(highest, tag.id());
      }
      x.push_back(static_cast<double>(highest));
    } else {
      x.push_back(static_cast<double>(i + 1));  // snapshot number, 1 = first
    }
  }
  return x;
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
  }
  return "flat";
}

TrendFit FitTrend(const std::vector<double>& x, const std::vector<double>& y, double min_step) {
  TrendFit fit;
  const size_t n = x.size();
  if (n < 2 || n != y.size()) return fit;
  LeastSquares(x, y, &fit.slope, &fit.r_squared);
  fit.growth = y.back() - y.front();
  fit.level = y.back();
  const double low = *std::min_element(y.begin(), y.end());
  const double high = *std::max_element(y.begin(), y.end());
  if (high - low < min_step) return fit;  // kFlat: nothing moved more than noise

  // The tail (the last third, at least 3 points) decides whether growth
  // goes on. Flat: it moves less than the noise step (or 2% of the range, so
  // a big owner's rounding is not a trend). Growing: it rises steadily.
  const size_t tail_size = std::min(n, std::max<size_t>(3, n / 3));
  const std::vector<double> tail_x(x.end() - tail_size, x.end());
  const std::vector<double> tail_y(y.end() - tail_size, y.end());
  const double tail_range = *std::max_element(tail_y.begin(), tail_y.end()) -
                            *std::min_element(tail_y.begin(), tail_y.end());
  const double flat_threshold = std::max(min_step, kTailShareOfRange * (high - low));
  double tail_slope = 0, tail_fit = 0;
  LeastSquares(tail_x, tail_y, &tail_slope, &tail_fit);
  const double tail_rise = tail_slope * (tail_x.back() - tail_x.front());

  if (tail_range >= flat_threshold) {
    if (tail_rise >= flat_threshold && tail_fit >= 0.5) {
      // Still growing: report the current rate, which is what keeps costing
      // memory (early growth of a cache that filled up is not part of it).
      fit.verdict = Verdict::kLinear;
      if (tail_size < n) {
        fit.slope = tail_slope;
        fit.r_squared = tail_fit;
      }
      return fit;
    }
    fit.verdict = Verdict::kNoise;
    return fit;
  }

  // Growth stopped: where, and in how many steps?
  int up = 0, down = 0;
  size_t last_up = 0;
  for (size_t i = 1; i < n; ++i) {
    const double d = y[i] - y[i - 1];
    if (d >= min_step) {
      ++up;
      last_up = i;
    } else if (d <= -min_step) {
      ++down;
    }
  }
  if (fit.growth < flat_threshold || down * 2 >= up) {
    // Ended where it started, or went down as often as up.
    fit.verdict = up == 0 && down == 0 ? Verdict::kFlat : Verdict::kNoise;
    return fit;
  }
  fit.flat_from = x[last_up];
  fit.verdict = up == 1 ? Verdict::kWarmUp : Verdict::kPlateau;
  return fit;
}

absl::StatusOr<TrendResult> ComputeTrend(std::vector<const v1::Snapshot*> snapshots,
                                         OwnerResolver& owners) {
  if (snapshots.size() < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trend needs at least 3 snapshots of one process; got ", snapshots.size()));
  }
  std::sort(snapshots.begin(), snapshots.end(), [](const v1::Snapshot* a, const v1::Snapshot* b) {
    return a->header().sequence() < b->header().sequence();
  });
  for (size_t i = 1; i < snapshots.size(); ++i) {
    std::string reason;
    if (!SameProcess(*snapshots[0], *snapshots[i], &reason)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--trend needs snapshots of one process: ", reason));
    }
  }
  owners.SetKeysWithoutLines(false);
  TrendResult result;
  result.snapshots = snapshots;
  result.requests = RequestAxis(snapshots, &result.requests_from_tags);
  const size_t n = snapshots.size();

  absl::flat_hash_map<std::string, size_t> index;
  for (size_t s = 0; s < n; ++s) {
    for (const Allocation& a : FlattenAllocations(*snapshots[s])) {
      const Owner& owner = owners.Resolve(*snapshots[s], a.stack_id, a.kind, a.tag_id);
      auto [it, inserted] = index.emplace(owner.key, result.rows.size());
      if (inserted) {
        result.rows.emplace_back();
        result.rows.back().owner = owner;
        result.rows.back().live_bytes.assign(n, 0);
      } else if (result.rows[it->second].owner.category != owner.category) {
        result.rows[it->second].owner.category.clear();  // spans categories: none
        result.rows[it->second].owner.bounded = false;
      }
      result.rows[it->second].live_bytes[s] += static_cast<int64_t>(a.size);
    }
  }
  auto fit_row = [&](TrendRow& row, double min_step = kOwnerMinStep) {
    std::vector<double> y(row.live_bytes.begin(), row.live_bytes.end());
    row.fit = FitTrend(result.requests, y, min_step);
  };
  for (TrendRow& row : result.rows) fit_row(row);

  result.rss.owner.display = "VmRSS";
  result.anon.owner.display = "RssAnon+VmSwap";
  result.tracked.owner.display = "tracked (all kinds)";
  for (const v1::Snapshot* s : snapshots) {
    result.rss.live_bytes.push_back(static_cast<int64_t>(s->memory().vm_rss()));
    result.anon.live_bytes.push_back(
        static_cast<int64_t>(s->memory().rss_anon() + s->memory().vm_swap()));
    int64_t tracked = 0;
    for (const v1::KindTotals& totals : s->totals()) {
      tracked += static_cast<int64_t>(totals.live_bytes());
    }
    result.tracked.live_bytes.push_back(tracked);
  }
  fit_row(result.rss, kRssMinStep);
  fit_row(result.anon, kRssMinStep);
  fit_row(result.tracked);

  std::stable_sort(result.rows.begin(), result.rows.end(),
                   [](const TrendRow& a, const TrendRow& b) {
                     if (a.fit.growth != b.fit.growth) return a.fit.growth > b.fit.growth;
                     return a.owner.key < b.owner.key;
                   });
  return result;
}

}  // namespace retain::tool
