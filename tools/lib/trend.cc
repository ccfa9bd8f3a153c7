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

  // Heap rows of a sampled snapshot are estimates (SampledEstimate); each
  // adds SampledVariance to its owner's point there.
  std::vector<std::vector<double>> variance;  // per row, per snapshot; empty: exact so far
  std::vector<double> tracked_variance(n, 0.0);
  bool tracked_estimated = false;
  absl::flat_hash_map<std::string, size_t> index;
  for (size_t s = 0; s < n; ++s) {
    const uint64_t interval = snapshots[s]->header().sample_interval_bytes();
    result.sample_interval_bytes = std::max(result.sample_interval_bytes, interval);
    int64_t sampled_heap = 0;  // estimated heap bytes, for the tracked line
    for (const Allocation& a : FlattenAllocations(*snapshots[s])) {
      const Owner& owner = owners.Resolve(*snapshots[s], a.stack_id, a.kind, a.tag_id);
      auto [it, inserted] = index.emplace(owner.key, result.rows.size());
      if (inserted) {
        result.rows.emplace_back();
        result.rows.back().owner = owner;
        result.rows.back().live_bytes.assign(n, 0);
        variance.emplace_back();
      } else if (result.rows[it->second].owner.category != owner.category) {
        result.rows[it->second].owner.category.clear();  // spans categories: none
        result.rows[it->second].owner.bounded = false;
      }
      result.rows[it->second].live_bytes[s] += static_cast<int64_t>(a.size);
      if (interval != 0 && a.kind == v1::KIND_HEAP) {
        sampled_heap += static_cast<int64_t>(a.size);
        if (a.recorded_size < interval) {
          std::vector<double>& v = variance[it->second];
          if (v.empty()) v.assign(n, 0.0);
          v[s] += SampledVariance(a.recorded_size, a.size);
          tracked_variance[s] += SampledVariance(a.recorded_size, a.size);
          tracked_estimated = true;
        }
      }
    }
    // The tracked line: the shim's totals, but a sampled snapshot's heap
    // totals count the recorded bytes only: the estimate replaces them.
    int64_t tracked = 0;
    for (const v1::KindTotals& totals : snapshots[s]->totals()) {
      if (interval != 0 && totals.kind() == v1::KIND_HEAP) continue;
      tracked += static_cast<int64_t>(totals.live_bytes());
    }
    result.tracked.live_bytes.push_back(tracked + sampled_heap);
  }
  // Standard errors of the estimated rows, at least one sampling interval
  // where the snapshot was sampled (an owner read as 0 may hold up to about
  // one interval of small allocations that no sampling point fell into).
  auto errors = [&](const std::vector<double>& v) {
    std::vector<double> se(n, 0.0);
    for (size_t s = 0; s < n; ++s) {
      const double interval = static_cast<double>(snapshots[s]->header().sample_interval_bytes());
      se[s] = std::sqrt(std::max(v[s], interval * interval));
    }
    return se;
  };
  for (size_t r = 0; r < result.rows.size(); ++r) {
    if (!variance[r].empty()) result.rows[r].error_bytes = errors(variance[r]);
  }
  if (tracked_estimated) result.tracked.error_bytes = errors(tracked_variance);

  auto fit_row = [&](TrendRow& row, double min_step = kOwnerMinStep) {
    std::vector<double> y(row.live_bytes.begin(), row.live_bytes.end());
    row.fit = FitTrend(result.requests, y, row.error_bytes, min_step);
  };
  for (TrendRow& row : result.rows) fit_row(row);

  result.rss.owner.display = "VmRSS";
  result.anon.owner.display = "RssAnon+VmSwap";
  result.tracked.owner.display = "tracked (all kinds)";
  for (const v1::Snapshot* s : snapshots) {
    result.rss.live_bytes.push_back(static_cast<int64_t>(s->memory().vm_rss()));
    result.anon.live_bytes.push_back(
        static_cast<int64_t>(s->memory().rss_anon() + s->memory().vm_swap()));
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
