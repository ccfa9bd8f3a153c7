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
#include "tools/lib/owned_allocations.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

using RowTable = OwnerRows<DiffRow>;

// Retained bytes per (owner, stack, kind, tag): each owner's example stack,
// and the stack shares of the folded and pprof outputs.
class StackBytes {
 public:
  void Add(const std::string& key, uint32_t stack_id, v1::Kind kind, uint32_t tag_id,
           uint64_t bytes) {
    Entry& entry = entries_[std::make_tuple(key, stack_id, static_cast<int>(kind), tag_id)];
    entry.bytes += bytes;
    entry.count += 1;
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
      }
    }
  }
  std::vector<StackShare> Shares() const {
    absl::flat_hash_map<std::tuple<uint32_t, int, uint32_t>, StackShare> merged;
    for (const auto& [k, entry] : entries_) {
      StackShare& share = merged[std::make_tuple(std::get<1>(k), std::get<2>(k), std::get<3>(k))];
      share.stack_id = std::get<1>(k);
      share.kind = static_cast<v1::Kind>(std::get<2>(k));
      share.tag_id = std::get<3>(k);
      share.bytes += static_cast<int64_t>(entry.bytes);
      share.count += entry.count;
    }
    std::vector<StackShare> shares;
    for (auto& [k, share] : merged) shares.push_back(share);
    std::sort(shares.begin(), shares.end(), [](const StackShare& a, const StackShare& b) {
      return std::tie(b.bytes, a.stack_id, a.kind, a.tag_id) <
             std::tie(a.bytes, b.stack_id, b.kind, b.tag_id);
    });
    return shares;
  }

 private:
  struct Entry {
    uint64_t bytes = 0;
    int64_t count = 0;
  };
  absl::flat_hash_map<std::tuple<std::string, uint32_t, int, uint32_t>, Entry> entries_;
};

uint64_t AnonPlusSwap(const v1::ProcessMemory& memory) {
  return memory.rss_anon() + memory.vm_swap();
}

RssExplanation ExplainRss(const v1::Snapshot* before, const v1::Snapshot& after) {
  static const v1::Snapshot* const kEmpty = new v1::Snapshot();
  const v1::Snapshot& b = before != nullptr ? *before : *kEmpty;
  RssExplanation rss;
  rss.vm_rss_growth =
      static_cast<int64_t>(after.memory().vm_rss()) - static_cast<int64_t>(b.memory().vm_rss());
  rss.anon_swap_growth = static_cast<int64_t>(AnonPlusSwap(after.memory())) -
                         static_cast<int64_t>(AnonPlusSwap(b.memory()));
  absl::flat_hash_map<int, KindGrowth> growth;
  for (const v1::KindTotals& totals : after.totals()) {
    KindGrowth& g = growth[totals.kind()];
    g.kind = totals.kind();
    g.live_bytes_growth += static_cast<int64_t>(totals.live_bytes());
    g.live_count_growth += static_cast<int64_t>(totals.live_count());
  }
  for (const v1::KindTotals& totals : b.totals()) {
    KindGrowth& g = growth[totals.kind()];
    g.kind = totals.kind();
    g.live_bytes_growth -= static_cast<int64_t>(totals.live_bytes());
    g.live_count_growth -= static_cast<int64_t>(totals.live_count());
  }
  // A sampled snapshot's heap totals count only the sampled records; the
  // estimate comes from the rows, scaled.
  for (const v1::Snapshot* s : {&b, &after}) {
    if (s->header().sample_interval_bytes() == 0) continue;
    const int64_t sign = s == &after ? 1 : -1;
    int64_t recorded = 0;
    int64_t estimated = 0;
    for (const Allocation& a : FlattenAllocations(*s)) {
      if (a.kind != v1::KIND_HEAP) continue;
      recorded += static_cast<int64_t>(a.recorded_size);
      estimated += static_cast<int64_t>(a.size);
    }
    KindGrowth& g = growth[v1::KIND_HEAP];
    g.kind = v1::KIND_HEAP;
    g.live_bytes_growth += sign * (estimated - recorded);
  }
  for (const auto& [kind, g] : growth) rss.tracked.push_back(g);
  std::sort(rss.tracked.begin(), rss.tracked.end(),
            [](const KindGrowth& x, const KindGrowth& y) { return x.kind < y.kind; });
  for (const KindGrowth& g : rss.tracked) {
    // Kinds that live in the process's anonymous memory. GPU device memory
    // is not RSS (where a driver backs it with host memory, as lavapipe
    // does, that memory is the gpu-driver-host kind); mapped files are
    // RssFile.
    if (g.kind == v1::KIND_HEAP || g.kind == v1::KIND_MMAP_ANON ||
        g.kind == v1::KIND_GPU_DRIVER_HOST) {
      rss.tracked_anon_growth += g.live_bytes_growth;
    }
  }
  rss.allocator_retained_growth = static_cast<int64_t>(after.memory().malloc_free_held()) -
                                  static_cast<int64_t>(b.memory().malloc_free_held());
  rss.untracked_growth =
      rss.anon_swap_growth - rss.tracked_anon_growth - rss.allocator_retained_growth;
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
    if (a.retained_bytes != b.retained_bytes) return a.retained_bytes > b.retained_bytes;
    if (a.net_bytes() != b.net_bytes()) return a.net_bytes() > b.net_bytes();
    return a.owner.key < b.owner.key;
  });
}

void Live(const v1::Snapshot& after, OwnerResolver& owners, RowTable& table, StackBytes& examples) {
  ForEachOwnedAllocation(after, owners, [&](const Allocation& a, const Owner& owner) {
    DiffRow& row = table.Get(owner);
    row.retained_bytes += static_cast<int64_t>(a.size);
    row.retained_count += 1;
    examples.Add(owner.key, a.stack_id, a.kind, a.tag_id, a.size);
  });
}

void Exact(const v1::Snapshot& before, const v1::Snapshot& after, OwnerResolver& owners,
           RowTable& table, StackBytes& examples) {
  const uint64_t born_after = before.header().next_birth_sequence();
  const std::vector<Allocation> after_rows = FlattenAllocations(after);
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> still_live;
  still_live.reserve(after_rows.size());
  for (const Allocation& a : after_rows) still_live.insert({a.address, a.birth_sequence});
  ForEachOwnedAllocationIf(
      after, after_rows, owners,
      [&](const Allocation& a) { return a.birth_sequence >= born_after; },
      [&](const Allocation& a, const Owner& owner) {
        DiffRow& row = table.Get(owner);
        row.retained_bytes += static_cast<int64_t>(a.size);
        row.retained_count += 1;
        examples.Add(owner.key, a.stack_id, a.kind, a.tag_id, a.size);
      });
  ForEachOwnedAllocationIf(
      before, FlattenAllocations(before), owners,
      [&](const Allocation& a) { return !still_live.contains({a.address, a.birth_sequence}); },
      [&](const Allocation& a, const Owner& owner) {
        DiffRow& row = table.Get(owner);
        row.released_bytes += static_cast<int64_t>(a.size);
        row.released_count += 1;
      });
}

void Aggregate(const v1::Snapshot& before, const v1::Snapshot& after, OwnerResolver& owners,
               RowTable& table, StackBytes& examples) {
  struct Live {
    int64_t bytes = 0;
    int64_t count = 0;
  };
  absl::flat_hash_map<std::string, Live> before_live;
  absl::flat_hash_map<std::string, Owner> before_owner;
  ForEachOwnedAllocation(before, owners, [&](const Allocation& a, const Owner& owner) {
    Live& live = before_live[owner.key];
    live.bytes += static_cast<int64_t>(a.size);
    live.count += 1;
    before_owner.emplace(owner.key, owner);
  });
  absl::flat_hash_map<std::string, Live> after_live;
  ForEachOwnedAllocation(after, owners, [&](const Allocation& a, const Owner& owner) {
    Live& live = after_live[owner.key];
    live.bytes += static_cast<int64_t>(a.size);
    live.count += 1;
    table.Get(owner);
    examples.Add(owner.key, a.stack_id, a.kind, a.tag_id, a.size);
  });
  for (const auto& [key, owner] : before_owner) table.Get(owner);
  std::vector<DiffRow> rows = table.Take();
  for (DiffRow& row : rows) {
    Live b = before_live[row.owner.key];
    Live a = after_live[row.owner.key];
    if (a.bytes >= b.bytes) {
      row.retained_bytes = a.bytes - b.bytes;
      row.retained_count = std::max<int64_t>(a.count - b.count, 0);
    } else {
      row.released_bytes = b.bytes - a.bytes;
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
  RowTable table;
  StackBytes examples;
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
      Exact(*before, after, owners, table, examples);
    } else {
      result.mode = DiffMode::kAggregate;
      result.mode_reason = reason + ": live bytes per owner compared by function";
      owners.SetKeysWithoutLines(true);
      Aggregate(*before, after, owners, table, examples);
    }
    result.seconds_between = (static_cast<double>(after.header().time_unix_ns()) -
                              static_cast<double>(before->header().time_unix_ns())) /
                             1e9;
    result.requests_between = RequestsBetween(*before, after);
  }
  result.rss = ExplainRss(before, after);
  result.rows = table.Take();
  examples.FillExamples(result.rows);
  SortRows(result.rows);
  if (result.mode == DiffMode::kAggregate) {
    for (const DiffRow& row : result.rows) {
      if (row.retained_bytes <= 0) continue;
      result.retained_stacks.push_back(
          {row.example_stack_id, row.example_kind, 0, row.retained_bytes, row.retained_count});
    }
  } else {
    result.retained_stacks = examples.Shares();
  }
  for (const DiffRow& row : result.rows) {
    result.total_retained_bytes += row.retained_bytes;
    result.total_retained_count += row.retained_count;
    result.total_released_bytes += row.released_bytes;
    result.total_released_count += row.released_count;
  }
  return result;
}

}  // namespace retain::tool
