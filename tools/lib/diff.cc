// diff: see diff.h.
#include "tools/lib/diff.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/byte_size.h"
#include "tools/lib/domain.h"
#include "tools/lib/owned_allocations.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

using RowTable = OwnerRows<DiffRow>;

// Retained bytes per (owner, stack, kind, tag, device): each owner's
// example stack, and the stack shares of the folded and pprof outputs.
class StackBytes {
 public:
  explicit StackBytes(Measure measure) : measure_(measure) {}
  // `count`: 1 for an allocation, 0 for the growth of one already live.
  void Add(const std::string& key, const Allocation& a, const ByteMeasures& bytes,
           int64_t count = 1) {
    Entry& entry =
        entries_[std::make_tuple(key, a.stack_id, static_cast<int>(a.kind), a.tag_id, a.device)];
    entry.by += bytes;
    // Only allocations and growth are added: never below zero.
    entry.bytes = static_cast<uint64_t>(entry.by.In(measure_));
    entry.count += count;
  }
  void FillExamples(std::vector<DiffRow>& rows) const {
    absl::flat_hash_map<std::string, DiffRow*> by_key;
    for (DiffRow& row : rows) by_key[row.owner.key] = &row;
    for (const auto& [k, entry] : entries_) {
      DiffRow* row = by_key[std::get<0>(k)];
      if (row != nullptr && entry.bytes > row->example_stack_bytes) {
        row->example_stack_bytes = entry.bytes;
        row->example_stack_id = std::get<1>(k);
        row->example_kind = static_cast<v1::Kind>(std::get<2>(k));
        row->example_device = std::get<4>(k);
      }
    }
  }
  std::vector<StackShare> Shares() const {
    absl::flat_hash_map<std::tuple<uint32_t, int, uint32_t, uint32_t>, StackShare> merged;
    for (const auto& [k, entry] : entries_) {
      StackShare& share =
          merged[std::make_tuple(std::get<1>(k), std::get<2>(k), std::get<3>(k), std::get<4>(k))];
      share.stack_id = std::get<1>(k);
      share.kind = static_cast<v1::Kind>(std::get<2>(k));
      share.tag_id = std::get<3>(k);
      share.device = std::get<4>(k);
      share.bytes += static_cast<int64_t>(entry.bytes);
      share.count += entry.count;
      share.by += entry.by;
    }
    std::vector<StackShare> shares;
    for (auto& [k, share] : merged) shares.push_back(share);
    std::sort(shares.begin(), shares.end(), [](const StackShare& a, const StackShare& b) {
      return std::tie(b.bytes, a.stack_id, a.kind, a.tag_id, a.device) <
             std::tie(a.bytes, b.stack_id, b.kind, b.tag_id, b.device);
    });
    return shares;
  }

 private:
  struct Entry {
    uint64_t bytes = 0;  // in the measure
    int64_t count = 0;
    ByteMeasures by;
  };
  Measure measure_;
  absl::flat_hash_map<std::tuple<std::string, uint32_t, int, uint32_t, uint32_t>, Entry> entries_;
};

uint64_t AnonPlusSwap(const v1::ProcessMemory& memory) {
  return memory.rss_anon() + memory.vm_swap();
}

// Kinds that live in the process's anonymous memory. GPU device memory is
// not RSS (where a driver backs it with host memory, as lavapipe does, that
// memory is the gpu-driver-host kind); mapped files are RssFile.
bool IsAnonKind(v1::Kind kind) {
  return kind == v1::KIND_HEAP || kind == v1::KIND_MMAP_ANON || kind == v1::KIND_GPU_DRIVER_HOST;
}

// (kind, domain): a device kind's totals are per device.
using KindDomain = std::pair<int, std::string>;

// One snapshot's live totals per kind and domain (KindTotals, split by
// CountedTotalsByDomain), with a sampled snapshot's heap corrected from its
// rows: its totals count only the sampled records, the estimate comes from
// the rows, scaled.
absl::flat_hash_map<KindDomain, KindGrowth> LiveByKind(const v1::Snapshot& s) {
  absl::flat_hash_map<KindDomain, KindGrowth> live;
  for (const DomainKindTotals& split : CountedTotalsByDomain(s)) {
    const v1::KindTotals& totals = split.totals;
    KindGrowth& g = live[KindDomain(totals.kind(), split.domain)];
    g.kind = totals.kind();
    g.domain = split.domain;
    g.live_bytes_growth += static_cast<int64_t>(totals.live_bytes());
    g.live_count_growth += static_cast<int64_t>(totals.live_count());
    g.resident_bytes_growth += static_cast<int64_t>(totals.resident_bytes());
    g.swapped_bytes_growth += static_cast<int64_t>(totals.swapped_bytes());
  }
  if (s.header().sample_interval_bytes() != 0) {
    ByteMeasures recorded;
    ByteMeasures estimated;
    for (const v1::AllocationBlock& block : s.allocations()) {
      for (int i = 0; i < block.kind_size(); ++i) {
        if (block.kind(i) != v1::KIND_HEAP) continue;
        recorded.allocated += static_cast<int64_t>(block.size(i));
        if (block.resident_bytes_size() > 0) {
          recorded.resident += static_cast<int64_t>(block.resident_bytes(i));
        }
        if (block.swapped_bytes_size() > 0) {
          recorded.swapped += static_cast<int64_t>(block.swapped_bytes(i));
        }
      }
    }
    for (const Allocation& a : CountedAllocations(s)) {
      if (a.kind == v1::KIND_HEAP) estimated.Add(a);
    }
    KindGrowth& g = live[KindDomain(v1::KIND_HEAP, "host")];
    g.kind = v1::KIND_HEAP;
    g.live_bytes_growth += estimated.allocated - recorded.allocated;
    g.resident_bytes_growth += estimated.resident - recorded.resident;
    g.swapped_bytes_growth += estimated.swapped - recorded.swapped;
  }
  return live;
}

int64_t InMeasure(const KindGrowth& g, Measure measure) {
  return measure == Measure::kResident ? g.resident_bytes_growth + g.swapped_bytes_growth
                                       : g.live_bytes_growth;
}

RssLevel LevelOf(const v1::Snapshot& s, const absl::flat_hash_map<KindDomain, KindGrowth>& live,
                 Measure measure) {
  RssLevel level;
  level.anon_swap = static_cast<int64_t>(AnonPlusSwap(s.memory()));
  for (const auto& [kind, g] : live) {
    if (IsAnonKind(g.kind)) level.tracked_anon += InMeasure(g, measure);
  }
  const int64_t free_held = static_cast<int64_t>(s.memory().malloc_free_held());
  if (measure == Measure::kResident && s.memory().trims() > 0) {
    const int64_t excess = level.tracked_anon + free_held - level.anon_swap;
    const int64_t returned = static_cast<int64_t>(s.memory().trim_returned_bytes());
    level.allocator_free_trimmed = std::clamp<int64_t>(excess, 0, std::min(returned, free_held));
  }
  level.allocator_free_held = free_held - level.allocator_free_trimmed;
  level.shim_own = static_cast<int64_t>(s.health().arena_bytes());
  level.untracked = level.anon_swap - level.tracked_anon - level.allocator_free_held;
  level.estimated = s.header().sample_interval_bytes() != 0;
  return level;
}

std::string AddsUpProblem(const RssLevel& level, const std::string& name) {
  if (level.untracked >= 0) return "";
  // Exact resident bytes are memory: more of them than the process has is a
  // bug. An estimate from samples may overshoot by its sampling error.
  const char* const cause =
      level.estimated ? "the heap's resident bytes are estimated from samples (RETAIN_SAMPLE): "
                        "within their sampling error, not a bug"
                      : "a bug in the snapshot or in retain-diff: resident bytes are memory";
  return absl::StrCat(
      "the RSS explanation of ", name, " does not add up: tracked resident ",
      level.estimated ? "(estimated) " : "",
      HumanBytes(static_cast<uint64_t>(std::max<int64_t>(level.tracked_anon, 0))),
      " + allocator-held free ", HumanBytes(static_cast<uint64_t>(level.allocator_free_held)),
      " exceed RssAnon+VmSwap ", HumanBytes(static_cast<uint64_t>(level.anon_swap)), " by ",
      HumanBytes(static_cast<uint64_t>(-level.untracked)), " (", cause, ")");
}

RssExplanation ExplainRss(const v1::Snapshot* before, const v1::Snapshot& after, Measure measure,
                          const DiffOptions& options) {
  static const v1::Snapshot* const kEmpty = new v1::Snapshot();
  const v1::Snapshot& b = before != nullptr ? *before : *kEmpty;
  RssExplanation rss;
  rss.measure = measure;
  rss.vm_rss_growth =
      static_cast<int64_t>(after.memory().vm_rss()) - static_cast<int64_t>(b.memory().vm_rss());
  rss.anon_swap_growth = static_cast<int64_t>(AnonPlusSwap(after.memory())) -
                         static_cast<int64_t>(AnonPlusSwap(b.memory()));
  const absl::flat_hash_map<KindDomain, KindGrowth> after_live = LiveByKind(after);
  const absl::flat_hash_map<KindDomain, KindGrowth> before_live = LiveByKind(b);
  absl::flat_hash_map<KindDomain, KindGrowth> growth = after_live;
  for (const auto& [kind, x] : before_live) {
    KindGrowth& g = growth[kind];
    g.kind = x.kind;
    g.domain = x.domain;
    g.live_bytes_growth -= x.live_bytes_growth;
    g.live_count_growth -= x.live_count_growth;
    g.resident_bytes_growth -= x.resident_bytes_growth;
    g.swapped_bytes_growth -= x.swapped_bytes_growth;
  }
  for (auto& [kind, g] : growth) {
    g.measured_growth = InMeasure(g, measure);
    rss.tracked.push_back(g);
  }
  std::sort(rss.tracked.begin(), rss.tracked.end(), [](const KindGrowth& x, const KindGrowth& y) {
    return std::tie(x.kind, x.domain) < std::tie(y.kind, y.domain);
  });
  rss.after_level = LevelOf(after, after_live, measure);
  rss.before_level = LevelOf(b, before_live, measure);
  rss.has_before = before != nullptr;
  // Growth is the difference of the levels, so it adds up the same way:
  // tracked + allocator-retained + untracked growth == anon_swap_growth.
  rss.tracked_anon_growth = rss.after_level.tracked_anon - rss.before_level.tracked_anon;
  rss.allocator_retained_growth =
      rss.after_level.allocator_free_held - rss.before_level.allocator_free_held;
  rss.shim_own_growth = rss.after_level.shim_own - rss.before_level.shim_own;
  rss.untracked_growth =
      rss.anon_swap_growth - rss.tracked_anon_growth - rss.allocator_retained_growth;
  if (measure == Measure::kResident) {
    // Memory is never negative: a negative rest is reported, never clamped.
    std::vector<std::string> problems;
    if (rss.has_before) problems.push_back(AddsUpProblem(rss.before_level, options.before_name));
    problems.push_back(AddsUpProblem(rss.after_level, options.after_name));
    for (const std::string& problem : problems) {
      if (problem.empty()) continue;
      if (!rss.adds_up_warning.empty()) absl::StrAppend(&rss.adds_up_warning, "; ");
      absl::StrAppend(&rss.adds_up_warning, problem);
    }
  }
  rss.degraded = IsDegraded(after) || (before != nullptr && IsDegraded(*before));
  if (rss.anon_swap_growth > 0 && !rss.degraded) {
    double share =
        static_cast<double>(rss.tracked_anon_growth) / static_cast<double>(rss.anon_swap_growth);
    rss.explained_share = std::clamp(share, 0.0, 1.0);
  }
  return rss;
}

void SortRows(std::vector<DiffRow>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const DiffRow& a, const DiffRow& b) {
    // Host first, then each device's domain (DomainLess).
    if (a.owner.domain != b.owner.domain) return DomainLess(a.owner.domain, b.owner.domain);
    if (a.retained_bytes != b.retained_bytes) return a.retained_bytes > b.retained_bytes;
    if (a.net_bytes() != b.net_bytes()) return a.net_bytes() > b.net_bytes();
    return a.owner.key < b.owner.key;
  });
}

void Live(const v1::Snapshot& after, OwnerResolver& owners, RowTable& table, StackBytes& examples) {
  ForEachOwnedAllocation(after, owners, [&](const Allocation& a, const Owner& owner) {
    DiffRow& row = table.Get(owner);
    row.retained.Add(a);
    row.retained_count += 1;
    ByteMeasures bytes;
    bytes.Add(a);
    examples.Add(owner.key, a, bytes);
  });
}

void Exact(const v1::Snapshot& before, const v1::Snapshot& after, Measure measure,
           OwnerResolver& owners, RowTable& table, StackBytes& examples) {
  const uint64_t born_after = before.header().next_birth_sequence();
  const std::vector<Allocation> after_rows = CountedAllocations(after);
  const std::vector<Allocation> before_rows = CountedAllocations(before);
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> still_live;
  still_live.reserve(after_rows.size());
  for (const Allocation& a : after_rows) still_live.insert({a.address, a.birth_sequence});
  // Resident measure: an allocation live in both counts the change of its
  // pages (touched, swapped, dropped) between the snapshots.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, const Allocation*> in_before;
  if (measure == Measure::kResident) {
    in_before.reserve(before_rows.size());
    for (const Allocation& a : before_rows) in_before[{a.address, a.birth_sequence}] = &a;
  }
  auto change = [&](const Allocation& a) {
    ByteMeasures d;
    auto it = in_before.find({a.address, a.birth_sequence});
    if (it == in_before.end()) return d;
    d.resident =
        static_cast<int64_t>(a.resident_bytes) - static_cast<int64_t>(it->second->resident_bytes);
    d.swapped =
        static_cast<int64_t>(a.swapped_bytes) - static_cast<int64_t>(it->second->swapped_bytes);
    return d;
  };
  ForEachOwnedAllocationIf(
      after, after_rows, owners,
      [&](const Allocation& a) {
        return a.birth_sequence >= born_after ||
               (measure == Measure::kResident && change(a).In(measure) != 0);
      },
      [&](const Allocation& a, const Owner& owner) {
        DiffRow& row = table.Get(owner);
        if (a.birth_sequence >= born_after) {
          row.retained.Add(a);
          row.retained_count += 1;
          ByteMeasures bytes;
          bytes.Add(a);
          examples.Add(owner.key, a, bytes);
          return;
        }
        ByteMeasures d = change(a);
        if (d.In(measure) > 0) {
          row.retained += d;
          examples.Add(owner.key, a, d, 0);
        } else {
          d.resident = -d.resident;
          d.swapped = -d.swapped;
          row.released += d;
        }
      });
  ForEachOwnedAllocationIf(
      before, before_rows, owners,
      [&](const Allocation& a) {
        return !still_live.contains({a.address, a.birth_sequence});
      },
      [&](const Allocation& a, const Owner& owner) {
        DiffRow& row = table.Get(owner);
        row.released.Add(a);
        row.released_count += 1;
      });
}

void Aggregate(const v1::Snapshot& before, const v1::Snapshot& after, Measure measure,
               OwnerResolver& owners, RowTable& table, StackBytes& examples) {
  struct Live {
    ByteMeasures bytes;
    int64_t count = 0;
  };
  absl::flat_hash_map<std::string, Live> before_live;
  absl::flat_hash_map<std::string, Owner> before_owner;
  ForEachOwnedAllocation(before, owners, [&](const Allocation& a, const Owner& owner) {
    Live& live = before_live[owner.key];
    live.bytes.Add(a);
    live.count += 1;
    before_owner.emplace(owner.key, owner);
  });
  absl::flat_hash_map<std::string, Live> after_live;
  ForEachOwnedAllocation(after, owners, [&](const Allocation& a, const Owner& owner) {
    Live& live = after_live[owner.key];
    live.bytes.Add(a);
    live.count += 1;
    table.Get(owner);
    ByteMeasures bytes;
    bytes.Add(a);
    examples.Add(owner.key, a, bytes);
  });
  for (const auto& [key, owner] : before_owner) table.Get(owner);
  std::vector<DiffRow> rows = table.Take();
  for (DiffRow& row : rows) {
    const Live b = before_live[row.owner.key];
    const Live a = after_live[row.owner.key];
    ByteMeasures d = a.bytes;
    d.allocated -= b.bytes.allocated;
    d.resident -= b.bytes.resident;
    d.swapped -= b.bytes.swapped;
    if (d.In(measure) >= 0) {
      row.retained = d;
      row.retained_count = std::max<int64_t>(a.count - b.count, 0);
    } else {
      row.released = {-d.allocated, -d.resident, -d.swapped};
      row.released_count = std::max<int64_t>(b.count - a.count, 0);
    }
  }
  RowTable refilled;
  for (DiffRow& row : rows) refilled.Get(row.owner) = row;
  table = std::move(refilled);
}

int64_t RequestsBetween(const v1::Snapshot& before, const v1::Snapshot& after) {
  // Shims that count requests in the header show only the tags still
  // needed; older ones kept every tag, so new ids were new requests.
  if (after.header().requests_opened() != 0) {
    const int64_t delta = static_cast<int64_t>(after.header().requests_opened()) -
                          static_cast<int64_t>(before.header().requests_opened());
    return delta >= 0 ? delta : -1;  // two processes: not comparable
  }
  if (after.tags().empty() && before.tags().empty()) return -1;
  absl::flat_hash_set<uint32_t> seen;
  for (const v1::Tag& tag : before.tags()) seen.insert(tag.id());
  int64_t count = 0;
  for (const v1::Tag& tag : after.tags()) count += seen.contains(tag.id()) ? 0 : 1;
  return count;
}

}  // namespace

const char* DiffModeName(DiffMode mode) {
  switch (mode) {
    case DiffMode::kLive:
      return "live";
    case DiffMode::kExact:
      return "exact";
    case DiffMode::kAggregate:
      return "aggregate";
  }
  return "live";
}

std::string HeapUnrecordedWarning(const std::vector<const v1::Snapshot*>& snapshots,
                                  const std::vector<std::string>& names) {
  std::vector<size_t> unrecorded;
  for (size_t i = 0; i < snapshots.size(); ++i) {
    if (!snapshots[i]->header().foreign_malloc_path().empty()) unrecorded.push_back(i);
  }
  if (unrecorded.empty()) return "";
  const size_t first = unrecorded.front();
  const std::string which = unrecorded.size() == 1
                                ? names[first]
                                : absl::StrCat(unrecorded.size(), " of ", snapshots.size(),
                                               " snapshots (first ", names[first], ")");
  return absl::StrCat(
      "heap not recorded in ", which, ": the process's malloc was ",
      snapshots[first]->header().foreign_malloc_path(),
      "'s, which the dynamic linker searched before libretain.so, so the shim's malloc hooks "
      "never ran (mappings and GPU memory are recorded). Put libretain.so first in LD_PRELOAD "
      "(retain-run does)");
}

bool IsDegraded(const v1::Snapshot& snapshot) {
  return snapshot.health().degraded() || snapshot.health().dropped_records() > 0;
}

std::string DegradedWarning(const std::vector<const v1::Snapshot*>& snapshots,
                            const std::vector<std::string>& names) {
  std::vector<size_t> degraded;
  for (size_t i = 0; i < snapshots.size(); ++i) {
    if (IsDegraded(*snapshots[i])) degraded.push_back(i);
  }
  if (degraded.empty()) return "";
  // The counters are cumulative in a process: the last degraded snapshot
  // holds the most.
  const size_t last = degraded.back();
  const v1::ShimHealth& health = snapshots[last]->health();
  const std::string cap =
      health.arena_cap_bytes() == 0
          ? ""
          : absl::StrCat(" (RETAIN_MAX_MEMORY ", HumanBytes(health.arena_cap_bytes()), ")");
  std::string which;
  if (degraded.size() == 1) {
    which = absl::StrCat(names[last], " is degraded: its shim");
  } else {
    which =
        absl::StrCat(degraded.size(), " of ", snapshots.size(), " snapshots are degraded (first ",
                     names[degraded.front()], ", last ", names[last], "): by the last, the shim");
  }
  return absl::StrCat(
      which, " reached its memory cap", cap, " and dropped ", health.dropped_records(),
      " allocation records (", HumanBytes(health.dropped_bytes()),
      "): rows by owner miss those allocations; the heap totals still count them, ",
      health.dropped_live_count(), " still live (", HumanBytes(health.dropped_live_bytes()),
      " usable). Rerun with a larger RETAIN_MAX_MEMORY");
}

bool SameProcess(const v1::Snapshot& a, const v1::Snapshot& b, std::string* reason) {
  const v1::Header& x = a.header();
  const v1::Header& y = b.header();
  if (x.pid() != y.pid()) {
    *reason = absl::StrCat("different processes (pid ", x.pid(), " and ", y.pid(), ")");
    return false;
  }
  if (x.process_start_ticks() != y.process_start_ticks()) {
    *reason = absl::StrCat("pid ", x.pid(), " was reused by another process (start times differ)");
    return false;
  }
  if (x.exe_build_id() != y.exe_build_id()) {
    *reason = absl::StrCat("different builds (build-id ", absl::BytesToHexString(x.exe_build_id()),
                           " and ", absl::BytesToHexString(y.exe_build_id()), ")");
    return false;
  }
  *reason = absl::StrCat("same process (pid ", x.pid(), ", same start time and build)");
  return true;
}

absl::StatusOr<DiffResult> ComputeDiff(const v1::Snapshot* before, const v1::Snapshot& after,
                                       OwnerResolver& owners, const DiffOptions& options) {
  DiffResult result;
  result.before = before;
  result.after = &after;
  result.estimated = after.header().sample_interval_bytes() != 0 ||
                     (before != nullptr && before->header().sample_interval_bytes() != 0);
  std::vector<const v1::Snapshot*> read = {&after};
  std::vector<std::string> names = {options.after_name};
  if (before != nullptr) {
    read.insert(read.begin(), before);
    names.insert(names.begin(), options.before_name);
  }
  result.measure = ChooseMeasure(options.measure, read, names);
  const Measure measure = result.measure.used;
  RowTable table;
  StackBytes examples(measure);
  if (before == nullptr) {
    result.mode = DiffMode::kLive;
    result.mode_reason = "one snapshot: everything live, by owner";
    owners.SetKeysWithoutLines(false);
    Live(after, owners, table, examples);
  } else {
    const std::string before_exe = BaseName(before->header().exe_path());
    const std::string after_exe = BaseName(after.header().exe_path());
    if (before_exe != after_exe && !options.force) {
      return absl::InvalidArgumentError(
          absl::StrCat("the snapshots are of two different programs (", before_exe, " and ",
                       after_exe, "); pass --force to diff them anyway"));
    }
    std::string reason;
    if (SameProcess(*before, after, &reason)) {
      if (before->header().next_birth_sequence() > after.header().next_birth_sequence()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the 'before' snapshot (sequence ", before->header().sequence(),
                         ") was taken after the 'after' one (sequence ", after.header().sequence(),
                         "); swap them"));
      }
      result.mode = DiffMode::kExact;
      result.mode_reason = reason + ": exact, by birth sequence";
      owners.SetKeysWithoutLines(false);
      Exact(*before, after, measure, owners, table, examples);
    } else {
      result.mode = DiffMode::kAggregate;
      result.mode_reason = reason + ": live bytes per owner compared by function";
      owners.SetKeysWithoutLines(true);
      Aggregate(*before, after, measure, owners, table, examples);
    }
    result.seconds_between = (static_cast<double>(after.header().time_unix_ns()) -
                              static_cast<double>(before->header().time_unix_ns())) /
                             1e9;
    result.requests_between = RequestsBetween(*before, after);
  }
  result.rss = ExplainRss(before, after, measure, options);
  result.rows = table.Take();
  for (DiffRow& row : result.rows) {
    row.retained_bytes = row.retained.In(measure);
    row.released_bytes = row.released.In(measure);
  }
  examples.FillExamples(result.rows);
  SortRows(result.rows);
  if (result.mode == DiffMode::kAggregate) {
    for (const DiffRow& row : result.rows) {
      if (row.retained_bytes <= 0) continue;
      result.retained_stacks.push_back({row.example_stack_id, row.example_kind, 0,
                                        row.retained_bytes, row.retained_count, row.retained,
                                        row.example_device});
    }
  } else {
    result.retained_stacks = examples.Shares();
  }
  DomainTotal host;
  for (const DiffRow& row : result.rows) {
    DomainTotal* total = &host;
    if (row.owner.domain != "host") {
      auto it = std::find_if(result.devices.begin(), result.devices.end(),
                             [&](const DomainTotal& d) { return d.domain == row.owner.domain; });
      if (it == result.devices.end()) {
        result.devices.emplace_back().domain = row.owner.domain;
        it = result.devices.end() - 1;
      }
      total = &*it;
    }
    total->retained_bytes += row.retained_bytes;
    total->retained_count += row.retained_count;
    total->released_bytes += row.released_bytes;
    total->released_count += row.released_count;
    total->retained += row.retained;
    total->released += row.released;
  }
  std::sort(
      result.devices.begin(), result.devices.end(),
      [](const DomainTotal& a, const DomainTotal& b) { return DomainLess(a.domain, b.domain); });
  for (DomainTotal& device : result.devices) {
    const v1::Device* named = DeviceOfDomain(after, device.domain);
    if (named == nullptr && before != nullptr) named = DeviceOfDomain(*before, device.domain);
    if (named == nullptr) continue;
    device.name = named->name();
    device.uuid = FormatUuid(named->uuid(), named->api());
  }
  result.total_retained_bytes = host.retained_bytes;
  result.total_retained_count = host.retained_count;
  result.total_released_bytes = host.released_bytes;
  result.total_released_count = host.released_count;
  result.total_retained = host.retained;
  result.total_released = host.released;
  return result;
}

}  // namespace retain::tool
