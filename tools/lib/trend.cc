// trend: see trend.h.
#include "tools/lib/trend.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/diff.h"
#include "tools/lib/domain.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
std::shared_ptr<const v1::Snapshot> Summary(const v1::Snapshot& snapshot) {
  auto summary = std::make_shared<v1::Snapshot>();
  *summary->mutable_header() = snapshot.header();
  *summary->mutable_memory() = snapshot.memory();
  *summary->mutable_health() = snapshot.health();
  *summary->mutable_totals() = snapshot.totals();
  *summary->mutable_devices() = snapshot.devices();
  return summary;
}

const v1::Device* DeviceInSeries(const std::vector<const v1::Snapshot*>& snapshots,
                                 const std::string& domain) {
  for (auto it = snapshots.rbegin(); it != snapshots.rend(); ++it) {
    if (const v1::Device* device = DeviceOfDomain(**it, domain)) return device;
  }
  return nullptr;
}

namespace {

void AppendRaw(std::string* out, uint64_t value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

}  // namespace

TrendBuilder::TrendBuilder(OwnerResolver& owners, Measure requested)
    : TrendBuilder(owners, requested, true) {}

TrendBuilder::TrendBuilder(OwnerResolver& owners, Measure requested, bool collect_request_tags)
    : owners_(owners), requested_(requested), collect_request_tags_(collect_request_tags) {
  owners_.SetKeysWithoutLines(false);
}

bool TrendBuilder::DropNewest() {
  if (columns_.empty() || collect_request_tags_) return false;
  columns_.pop_back();
  for (std::vector<Measured>& series : series_) {
    if (series.size() > columns_.size()) series.resize(columns_.size());
  }
  return true;
}

bool TrendBuilder::DropOldest() {
  if (columns_.empty() || collect_request_tags_) return false;
  columns_.erase(columns_.begin());
  for (std::vector<Measured>& series : series_) {
    if (!series.empty()) series.erase(series.begin());
  }
  return true;
}

absl::Status TrendBuilder::Add(const v1::Snapshot& snapshot, absl::string_view name) {
  if (!columns_.empty()) {
    std::string reason;
    if (!SameProcess(*columns_.front().summary, snapshot, &reason)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--trend needs snapshots of one process: ", reason));
    }
  }
  const size_t s = columns_.size();
  Column column;
  column.summary = Summary(snapshot);
  column.name = std::string(name);
  // Requests served (the x, chosen in Finish): the header counts them at the
  // trigger and at the capture; a snapshot of an older shim (which kept
  // every tag, numbered from 1 in arrival order) has its largest tag id.
  column.has_requests = !snapshot.tags().empty() || snapshot.header().requests_opened() != 0;
  column.requests_at_trigger = snapshot.header().requests_at_trigger();
  column.requests_closed = snapshot.header().requests_closed();
  column.highest_request = snapshot.header().requests_opened();
  for (const v1::Tag& tag : snapshot.tags()) {
    column.highest_request = std::max<uint64_t>(column.highest_request, tag.id());
  }

  // The module table the stacks' addresses belong to: stacks with the same
  // frames under the same table have the same owner in every snapshot.
  std::string table;
  for (const v1::Module& module : snapshot.modules()) table += module.SerializeAsString();
  const uint32_t table_id =
      module_tables_.emplace(table, static_cast<uint32_t>(module_tables_.size())).first->second;
  absl::flat_hash_map<uint32_t, const v1::Stack*> stacks;
  stacks.reserve(static_cast<size_t>(snapshot.stacks_size()));
  for (const v1::Stack& stack : snapshot.stacks()) stacks.emplace(stack.id(), &stack);
  const bool by_tag = owners_.options().by == GroupBy::kTag;

  // Heap rows of a sampled snapshot are estimates (SampledEstimate); each
  // adds SampledVariance to its owner's point here, in both measures (the
  // resident estimate is the allocated one scaled by the resident fraction).
  const uint64_t interval = snapshot.header().sample_interval_bytes();
  Measured sampled_heap;  // estimated heap bytes, for the tracked line
  // (stack id, kind, tag, device) -> row, for this snapshot.
  absl::flat_hash_map<std::tuple<uint32_t, int, uint32_t, uint32_t>, size_t> local;
  std::string key;
  for (const Allocation& a : CountedAllocations(snapshot)) {
    const uint32_t tag = by_tag ? a.tag_id : 0;
    auto [slot, fresh] =
        local.emplace(std::make_tuple(a.stack_id, static_cast<int>(a.kind), tag, a.device), 0);
    if (fresh) {
      key.clear();
      AppendRaw(&key, table_id);
      AppendRaw(&key, static_cast<uint64_t>(a.kind));
      AppendRaw(&key, tag);       // --by tag: tag ids are per process, stable across snapshots
      AppendRaw(&key, a.device);  // device ids too (record/gpu_devices.h in the shim)
      auto stack = stacks.find(a.stack_id);
      if (stack != stacks.end()) {
        for (uint64_t frame : stack->second->frames()) AppendRaw(&key, frame);
      }
      auto known = row_of_stack_.find(key);
      if (known != row_of_stack_.end()) {
        slot->second = known->second;
      } else {
        const Owner& owner = owners_.Resolve(snapshot, a.stack_id, a.kind, a.tag_id, a.device);
        auto [it, inserted] = row_of_key_.emplace(owner.key, owners_of_rows_.size());
        if (inserted) {
          owners_of_rows_.push_back(owner);
          series_.emplace_back();
          row_estimated_.push_back(false);
        } else if (owners_of_rows_[it->second].category != owner.category) {
          owners_of_rows_[it->second].category.clear();  // spans categories: none
          owners_of_rows_[it->second].bounded = false;
        }
        row_of_stack_.emplace(key, it->second);
        slot->second = it->second;
      }
    }
    std::vector<Measured>& series = series_[slot->second];
    if (series.size() <= s) series.resize(s + 1);
    Measured& point = series[s];
    const int64_t resident = static_cast<int64_t>(MeasuredBytes(a, Measure::kResident));
    point.allocated += static_cast<int64_t>(a.size);
    point.resident += resident;
    if (interval != 0 && a.kind == v1::KIND_HEAP) {
      sampled_heap.allocated += static_cast<int64_t>(a.size);
      sampled_heap.resident += resident;
      if (a.recorded_size < interval) {
        const double variance = SampledVariance(a.recorded_size, a.size);
        const double fraction =
            a.size == 0 ? 0.0 : static_cast<double>(resident) / static_cast<double>(a.size);
        point.allocated_variance += variance;
        point.resident_variance += variance * fraction * fraction;
        column.tracked.allocated_variance += variance;
        column.tracked.resident_variance += variance * fraction * fraction;
        row_estimated_[slot->second] = true;
        tracked_estimated_ = true;
      }
    }
  }
  // The tracked line: the shim's totals, but a sampled snapshot's heap
  // totals count the recorded bytes only: the estimate replaces them.
  // Device memory is a line per device of its own (domain.h), never added
  // to the host's.
  for (const DomainKindTotals& split : CountedTotalsByDomain(snapshot)) {
    const v1::KindTotals& totals = split.totals;
    if (interval != 0 && totals.kind() == v1::KIND_HEAP) continue;
    Measured& line = split.domain != "host" ? column.devices[split.domain] : column.tracked;
    line.allocated += static_cast<int64_t>(totals.live_bytes());
    line.resident += static_cast<int64_t>(MeasuredLiveBytes(totals, Measure::kResident));
  }
  column.tracked.allocated += sampled_heap.allocated;
  column.tracked.resident += sampled_heap.resident;
  if (collect_request_tags_) request_tags_.Add(snapshot, s);
  columns_.push_back(std::move(column));
  // The caller may free the snapshot now; its stacks are known by content.
  owners_.ForgetSnapshots();
  return absl::OkStatus();
}

absl::StatusOr<TrendResult> TrendBuilder::Finish() const {
  const size_t n = columns_.size();
  if (n < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trend needs at least 3 snapshots of one process; got ", n));
  }
  // Sorted by sequence: order[k] = the column of the k-th snapshot.
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return columns_[a].summary->header().sequence() < columns_[b].summary->header().sequence();
  });
  TrendResult result;
  // The x: the requests served at the instant the snapshot's rows were
  // read (the capture holds every table's lock while it reads the rows and
  // Header.requests_opened and requests_closed). A request in flight then
  // has done part of its work, so it counts half: x = closed + (opened -
  // closed) / 2, rounded down. With concurrent clients the rows hold
  // memory of requests that have begun but not ended; counted at closed
  // alone, the last snapshots of a burst (taken as the last requests
  // ended, all holding the final state) would form a flat tail that reads
  // a leak as a plateau, and counted at opened alone, a queue of requests
  // not yet started would lead the bytes. A snapshot asked for at request N
  // and taken later counts what it holds, not when it was asked for.
  // Snapshots of older shims: the requests ended when the snapshot was
  // asked for, older still the requests opened. Without requests: the
  // snapshot's number.
  bool at_trigger = false, closed = false;
  double x_uncertainty = 0;  // the most requests in flight at a capture
  for (const Column& column : columns_) {
    result.requests_from_tags |= column.has_requests;
    at_trigger |= column.requests_at_trigger != 0;
    closed |= column.requests_closed != 0;
  }
  std::vector<std::string> names;
  for (size_t k = 0; k < n; ++k) {
    const Column& column = columns_[order[k]];
    result.kept.push_back(column.summary);
    result.snapshots.push_back(column.summary.get());
    names.push_back(column.name.empty() ? absl::StrCat("snapshot #", k + 1) : column.name);
    const uint64_t in_flight = column.highest_request > column.requests_closed
                                   ? column.highest_request - column.requests_closed
                                   : 0;
    const uint64_t x = closed       ? column.requests_closed + in_flight / 2
                       : at_trigger ? column.requests_at_trigger
                                    : column.highest_request;
    if (closed) x_uncertainty = std::max(x_uncertainty, static_cast<double>(in_flight));
    result.requests.push_back(result.requests_from_tags
                                  ? static_cast<double>(x)
                                  : static_cast<double>(k + 1));  // snapshot number, 1 = first
    result.sample_interval_bytes =
        std::max(result.sample_interval_bytes, column.summary->header().sample_interval_bytes());
  }
  result.measure = ChooseMeasure(requested_, result.snapshots, names);
  const bool resident = result.measure.used == Measure::kResident;
  auto in_measure = [&](const Measured& m) { return resident ? m.resident : m.allocated; };
  auto variance_in_measure = [&](const Measured& m) {
    return resident ? m.resident_variance : m.allocated_variance;
  };

  // Standard errors of the estimated rows, at least one sampling interval
  // where the snapshot was sampled (an owner read as 0 may hold up to about
  // one interval of small allocations that no sampling point fell into).
  auto errors = [&](auto variance_at) {
    std::vector<double> se(n, 0.0);
    for (size_t k = 0; k < n; ++k) {
      const double interval =
          static_cast<double>(result.snapshots[k]->header().sample_interval_bytes());
      se[k] = std::sqrt(std::max(variance_at(order[k]), interval * interval));
    }
    return se;
  };
  auto fit_row = [&](TrendRow& row, double min_step = kOwnerMinStep) {
    std::vector<double> y(row.live_bytes.begin(), row.live_bytes.end());
    row.fit = FitTrend(result.requests, y, row.error_bytes, min_step,
                       result.requests_from_tags ? x_uncertainty : 0);
  };
  // A row's figures in snapshot order, in the measure (and allocated beside).
  auto fill = [&](TrendRow& row, auto point_at) {
    for (size_t k = 0; k < n; ++k) {
      const Measured& m = point_at(order[k]);
      row.live_bytes.push_back(in_measure(m));
      if (resident) row.allocated_bytes.push_back(m.allocated);
    }
  };
  const Measured none;
  result.rows.resize(owners_of_rows_.size());
  for (size_t r = 0; r < result.rows.size(); ++r) {
    TrendRow& row = result.rows[r];
    row.owner = owners_of_rows_[r];
    const std::vector<Measured>& series = series_[r];
    auto point_at = [&](size_t c) -> const Measured& {
      return c < series.size() ? series[c] : none;
    };
    fill(row, point_at);
    if (row_estimated_[r]) {
      row.error_bytes = errors([&](size_t c) { return variance_in_measure(point_at(c)); });
    }
    fit_row(row);
  }

  result.rss.owner.display = "VmRSS";
  result.anon.owner.display = "RssAnon+VmSwap";
  result.tracked.owner.display = "tracked (host)";
  for (size_t k = 0; k < n; ++k) {
    const v1::Snapshot& s = *result.snapshots[k];
    result.rss.live_bytes.push_back(static_cast<int64_t>(s.memory().vm_rss()));
    result.anon.live_bytes.push_back(
        static_cast<int64_t>(s.memory().rss_anon() + s.memory().vm_swap()));
  }
  fill(result.tracked, [&](size_t c) -> const Measured& { return columns_[c].tracked; });
  if (tracked_estimated_) {
    result.tracked.error_bytes =
        errors([&](size_t c) { return variance_in_measure(columns_[c].tracked); });
  }
  result.allocator_free.owner.display = "allocator free (held by malloc)";
  for (size_t k = 0; k < n; ++k) {
    result.allocator_free.live_bytes.push_back(
        static_cast<int64_t>(result.snapshots[k]->memory().malloc_free_held()));
  }
  fit_row(result.rss, kRssMinStep);
  fit_row(result.anon, kRssMinStep);
  fit_row(result.allocator_free, kRssMinStep);
  fit_row(result.tracked);
  std::set<std::string, decltype(&DomainLess)> domains(&DomainLess);
  for (const Column& column : columns_) {
    for (const auto& [domain, line] : column.devices) domains.insert(domain);
  }
  for (const std::string& domain : domains) {
    TrendRow& line = result.devices.emplace_back();
    const v1::Device* device = DeviceInSeries(result.snapshots, domain);
    line.owner.display = absl::StrCat("tracked ", domain,
                                      device != nullptr && !device->name().empty()
                                          ? absl::StrCat(" (", device->name(), ")")
                                          : "");
    line.owner.domain = domain;
    fill(line, [&](size_t c) -> const Measured& {
      auto it = columns_[c].devices.find(domain);
      return it == columns_[c].devices.end() ? none : it->second;
    });
    fit_row(line);
  }

  std::vector<uint64_t> requests_closed;
  for (const Column& column : columns_) requests_closed.push_back(column.requests_closed);
  if (collect_request_tags_) result.request_tags = request_tags_.Finish(order, requests_closed);

  std::stable_sort(result.rows.begin(), result.rows.end(),
                   [](const TrendRow& a, const TrendRow& b) {
                     if (a.fit.growth != b.fit.growth) return a.fit.growth > b.fit.growth;
                     return a.owner.key < b.owner.key;
                   });
  return result;
}

absl::StatusOr<TrendResult> ComputeTrend(std::vector<const v1::Snapshot*> snapshots,
                                         OwnerResolver& owners, Measure requested,
                                         const std::vector<std::string>& names) {
  if (snapshots.size() < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trend needs at least 3 snapshots of one process; got ", snapshots.size()));
  }
  // The first by sequence is the reference for SameProcess, as before.
  std::vector<size_t> order(snapshots.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return snapshots[a]->header().sequence() < snapshots[b]->header().sequence();
  });
  TrendBuilder builder(owners, requested);
  for (size_t i : order) {
    const absl::string_view name = i < names.size() ? absl::string_view(names[i]) : "";
    if (absl::Status added = builder.Add(*snapshots[i], name); !added.ok()) return added;
  }
  return builder.Finish();
}

}  // namespace retain::tool
