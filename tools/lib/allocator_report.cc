// allocator_report: see allocator_report.h.
#include "tools/lib/allocator_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/lib/byte_size.h"
#include "tools/lib/dump_format.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

// Thread arenas shown by name in the arenas line; the rest are summed.
constexpr size_t kArenasShown = 3;

std::string Share(uint64_t part, uint64_t whole) {
  return absl::StrFormat("%.0f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// Both floors: `bytes` at least `floor` and `share` of A.
bool Reaches(uint64_t bytes, uint64_t floor, double share, uint64_t anon_swap) {
  return bytes >= floor && static_cast<double>(bytes) >= share * static_cast<double>(anon_swap);
}

const char* Plural(uint64_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// Live heap rows of kLargeBlockBytes or more, in allocated bytes (sampled
// rows scaled as everywhere else). Read from the columns: flattening every
// row of a large snapshot for this sum would cost its size again.
uint64_t LargeHeapBytes(const v1::Snapshot& snapshot) {
  const uint64_t interval = snapshot.header().sample_interval_bytes();
  uint64_t bytes = 0;
  for (const v1::AllocationBlock& block : snapshot.allocations()) {
    const int rows = std::min(block.kind_size(), block.size_size());
    for (int i = 0; i < rows; ++i) {
      if (block.kind(i) != v1::KIND_HEAP || block.size(i) < kLargeBlockBytes) continue;
      bytes += interval == 0 ? block.size(i) : SampledEstimate(block.size(i), interval);
    }
  }
  return bytes;
}

void Advise(AllocatorReport& r) {
  if (!r.has_mallinfo || r.degraded) return;
  const uint64_t a = r.anon_swap;
  const uint64_t bound = r.resident_bound;
  if (!r.arenas.empty()) {
    // MALLOC_ARENA_MAX: spread over several thread arenas.
    uint64_t largest = 0;
    uint64_t holding = 0;  // thread arenas with any free memory
    for (const v1::MallocArena& arena : r.arenas) {
      if (arena.number() == 0) continue;
      largest = std::max<uint64_t>(largest, arena.free_bytes());
      if (arena.free_bytes() > 0) ++holding;
    }
    const uint64_t thread_free = std::min(r.thread_arena_free, bound);
    if (r.arenas.size() >= static_cast<size_t>(kArenaAdviceMinArenas) &&
        Reaches(thread_free, kArenaAdviceMinFree, kArenaAdviceMinShare, a) &&
        r.thread_arena_free - largest >= kArenaAdviceMinSpread) {
      r.advice.push_back(
          {"MALLOC_ARENA_MAX", "MALLOC_ARENA_MAX=2",
           absl::StrCat(holding, " thread arenas hold ", HumanBytes(thread_free), " free (",
                        Share(thread_free, a),
                        " of RssAnon+VmSwap), which only their own threads can reuse; fewer "
                        "arenas (glibc allows 8 per core) would share it"),
           thread_free});
    }
  }
  // M_TRIM_THRESHOLD: the main heap's top.
  const uint64_t top = std::min(r.top_releasable, bound);
  if (Reaches(top, kAllocatorAdviceMinBytes, kAllocatorAdviceMinShare, a)) {
    r.advice.push_back(
        {"M_TRIM_THRESHOLD", "MALLOC_TRIM_THRESHOLD_=4194304",
         absl::StrCat("the top of the main heap holds ", HumanBytes(top), " free (", Share(top, a),
                      " of RssAnon+VmSwap) that free() keeps below the trim threshold, which "
                      "glibc raises (up to 64 MiB) when large blocks are freed; a fixed "
                      "threshold gives it back"),
         top});
  }
  // M_MMAP_THRESHOLD: large live blocks inside the heaps, and free memory.
  const uint64_t in_heaps = r.large_heap_bytes > r.mmapped ? r.large_heap_bytes - r.mmapped : 0;
  const uint64_t free_held = std::min(r.free_held, bound);
  if (in_heaps >= kAllocatorAdviceMinBytes &&
      Reaches(free_held, kAllocatorAdviceMinBytes, kAllocatorAdviceMinShare, a)) {
    r.advice.push_back(
        {"M_MMAP_THRESHOLD", "MALLOC_MMAP_THRESHOLD_=131072",
         absl::StrCat(HumanBytes(in_heaps),
                      " of live blocks of 128 KiB or more lie in malloc's heaps, besides the ",
                      HumanBytes(r.mmapped), " in mapped chunks (glibc raises its mmap threshold ",
                      "when such a block is freed), and ", HumanBytes(free_held),
                      " is free around them (", Share(free_held, a),
                      " of RssAnon+VmSwap); a fixed threshold maps each such block and unmaps it "
                      "when freed"),
         free_held});
  }
  // malloc_trim: whole free pages between live blocks.
  const uint64_t trimmable = std::min(r.trimmable, bound);
  if (!r.arenas.empty() &&
      Reaches(trimmable, kAllocatorAdviceMinBytes, kAllocatorAdviceMinShare, a)) {
    r.advice.push_back(
        {"malloc_trim", "malloc_trim(0)",
         absl::StrCat("at least ", HumanBytes(trimmable),
                      " of free whole pages lie between live blocks (", Share(trimmable, a),
                      " of RssAnon+VmSwap), where free() never gives memory back and no "
                      "threshold would; a trim returns them (POST /trim on the control endpoint)"),
         trimmable});
  }
  std::stable_sort(
      r.advice.begin(), r.advice.end(),
      [](const AllocatorAdvice& x, const AllocatorAdvice& y) { return x.bytes > y.bytes; });
}

std::string Seconds(double seconds) { return absl::StrFormat("%.1f s", seconds); }

}  // namespace

AllocatorReport ReportAllocator(const AllocatorInput& input) {
  AllocatorReport r;
  const v1::Snapshot& after = *input.after;
  const v1::ProcessMemory& m = after.memory();
  r.has_mallinfo = m.has_mallinfo();
  r.free_held = m.malloc_free_held();
  r.top_releasable = m.malloc_top_releasable();
  r.mmapped = m.malloc_mmapped();
  r.arenas.assign(m.malloc_arenas().begin(), m.malloc_arenas().end());
  r.arenas_truncated = m.malloc_arenas_truncated();
  for (const v1::MallocArena& arena : r.arenas) {
    r.arena_free += arena.free_bytes();
    if (arena.number() != 0) r.thread_arena_free += arena.free_bytes();
    r.trimmable += arena.trimmable_bytes();
  }
  r.large_heap_bytes = LargeHeapBytes(after);
  r.anon_swap = m.rss_anon() + m.vm_swap();
  const int64_t rest = static_cast<int64_t>(r.anon_swap) - std::max<int64_t>(input.tracked_anon, 0);
  r.resident_bound = rest > 0 ? static_cast<uint64_t>(rest) : 0;
  r.degraded = IsDegraded(after);
  r.trims = m.trims();
  r.trim_returned_bytes = m.trim_returned_bytes();
  r.last_trim_unix_ns = m.last_trim_unix_ns();
  if (r.trims > 0 && r.last_trim_unix_ns != 0 &&
      r.last_trim_unix_ns <= after.header().time_unix_ns()) {
    r.seconds_since_last_trim =
        static_cast<double>(after.header().time_unix_ns() - r.last_trim_unix_ns) / 1e9;
  }
  if (input.before != nullptr && input.same_process) {
    const v1::ProcessMemory& b = input.before->memory();
    r.has_between = true;
    r.trims_between = r.trims > b.trims() ? r.trims - b.trims() : 0;
    r.trim_returned_between = r.trim_returned_bytes > b.trim_returned_bytes()
                                  ? r.trim_returned_bytes - b.trim_returned_bytes()
                                  : 0;
  }
  Advise(r);
  return r;
}

AllocatorReport ReportAllocator(const DiffResult& diff) {
  AllocatorInput input;
  input.before = diff.before;
  input.after = diff.after;
  input.same_process = diff.mode == DiffMode::kExact;
  input.tracked_anon = diff.rss.after_level.tracked_anon;
  return ReportAllocator(input);
}

std::string AllocatorArenasText(const AllocatorReport& r) {
  std::string out;
  if (r.has_mallinfo && !r.arenas.empty()) {
    // Main first, then the thread arenas holding most, then the rest summed.
    std::vector<const v1::MallocArena*> threads;
    uint64_t main_free = 0;
    for (const v1::MallocArena& arena : r.arenas) {
      if (arena.number() == 0) {
        main_free = arena.free_bytes();
      } else {
        threads.push_back(&arena);
      }
    }
    std::stable_sort(threads.begin(), threads.end(),
                     [](const v1::MallocArena* x, const v1::MallocArena* y) {
                       return x->free_bytes() > y->free_bytes();
                     });
    std::vector<std::string> parts = {absl::StrCat("main ", HumanBytes(main_free))};
    uint64_t rest = 0;
    for (size_t i = 0; i < threads.size(); ++i) {
      if (i < kArenasShown) {
        parts.push_back(
            absl::StrCat("#", threads[i]->number(), " ", HumanBytes(threads[i]->free_bytes())));
      } else {
        rest += threads[i]->free_bytes();
      }
    }
    if (threads.size() > kArenasShown) {
      parts.push_back(absl::StrCat(threads.size() - kArenasShown, " more ", HumanBytes(rest)));
    }
    absl::StrAppend(&out, "  arenas      ", HumanBytes(r.arena_free), " free held by malloc in ",
                    r.arenas.size(), Plural(r.arenas.size(), " arena", " arenas"), " (",
                    absl::StrJoin(parts, ", "), ")");
    const bool trimmed = r.trims > 0 && r.resident_bound < r.arena_free;
    if (r.trimmable > 0 && !trimmed) {
      absl::StrAppend(&out, "; at least ", HumanBytes(r.trimmable),
                      " of it whole pages between live blocks");
    }
    if (trimmed) {
      absl::StrAppend(&out, "; at most ", HumanBytes(r.resident_bound),
                      " of it resident (trims gave the rest's pages back)");
    }
    if (r.arenas_truncated) {
      absl::StrAppend(&out, "; the shim's list is incomplete (sums are low)");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string AllocatorTrimAndAdviceText(const AllocatorReport& r) {
  std::string out;
  if (!r.has_mallinfo) return out;
  if (r.has_between && r.trims_between > 0) {
    absl::StrAppend(
        &out, "  trim        ",
        r.trims_between == 1 ? std::string("a trim") : absl::StrCat(r.trims_between, " trims"),
        " ran between the two snapshots and returned ", HumanBytes(r.trim_returned_between),
        r.trim_returned_between > 0
            ? ": part of the drop is malloc returning free memory, not frees"
            : " (malloc held no free whole pages, or reused them)",
        "\n");
  } else if (r.trims > 0) {
    absl::StrAppend(&out, "  trim        ", r.trims, Plural(r.trims, " trim", " trims"),
                    " returned ", HumanBytes(r.trim_returned_bytes));
    if (r.has_between) absl::StrAppend(&out, " before both snapshots");
    if (r.seconds_since_last_trim >= 0) {
      absl::StrAppend(&out, " (", r.trims == 1 ? "" : "the last ",
                      Seconds(r.seconds_since_last_trim), " before ",
                      r.has_between ? "the after snapshot" : "this snapshot", ")");
    }
    absl::StrAppend(&out, "\n");
  }
  for (const AllocatorAdvice& advice : r.advice) {
    absl::StrAppend(&out, "  advice      ", advice.setting, ": ", advice.reason, "\n");
  }
  return out;
}

std::string AllocatorReportJson(const AllocatorReport& r) {
  std::vector<std::string> arenas;
  for (const v1::MallocArena& a : r.arenas) {
    arenas.push_back(absl::StrCat(
        "{\"number\":", a.number(), ",\"free_bytes\":", a.free_bytes(), ",\"free_chunks\":",
        a.free_chunks(), ",\"fast_bytes\":", a.fast_bytes(), ",\"system_bytes\":", a.system_bytes(),
        ",\"system_max_bytes\":", a.system_max_bytes(), ",\"aspace_bytes\":", a.aspace_bytes(),
        ",\"aspace_mprotect_bytes\":", a.aspace_mprotect_bytes(), ",\"subheaps\":", a.subheaps(),
        ",\"trimmable_bytes\":", a.trimmable_bytes(), "}"));
  }
  std::vector<std::string> advice;
  for (const AllocatorAdvice& a : r.advice) {
    advice.push_back(
        absl::StrCat("{\"knob\":", JsonString(a.knob), ",\"setting\":", JsonString(a.setting),
                     ",\"reason\":", JsonString(a.reason), ",\"bytes\":", a.bytes, "}"));
  }
  auto between = [&](uint64_t value) {
    return r.has_between ? absl::StrCat(value) : std::string("null");
  };
  return absl::StrCat(
      "{\"has_mallinfo\":", r.has_mallinfo ? "true" : "false", ",\"free_held\":", r.free_held,
      ",\"top_releasable\":", r.top_releasable, ",\"mmapped\":", r.mmapped,
      ",\"arena_count\":", r.arenas.size(),
      ",\"arenas_truncated\":", r.arenas_truncated ? "true" : "false", ",\"arenas\":[",
      absl::StrJoin(arenas, ","), "],\"arena_free\":", r.arena_free,
      ",\"thread_arena_free\":", r.thread_arena_free, ",\"trimmable_bytes\":", r.trimmable,
      ",\"large_heap_bytes\":", r.large_heap_bytes, ",\"resident_bound\":", r.resident_bound,
      ",\"trims\":", r.trims, ",\"trim_returned_bytes\":", r.trim_returned_bytes,
      ",\"last_trim_unix_ns\":", r.trims > 0 ? absl::StrCat(r.last_trim_unix_ns) : "null",
      ",\"trims_between\":", between(r.trims_between),
      ",\"trim_returned_between\":", between(r.trim_returned_between), ",\"advice\":[",
      absl::StrJoin(advice, ","), "]}");
}

SeriesTrims TrimsDuring(const std::vector<const v1::Snapshot*>& snapshots) {
  SeriesTrims trims;
  for (size_t i = 1; i < snapshots.size(); ++i) {
    const v1::ProcessMemory& previous = snapshots[i - 1]->memory();
    const v1::ProcessMemory& m = snapshots[i]->memory();
    if (m.trims() <= previous.trims()) continue;
    trims.trims += m.trims() - previous.trims();
    if (m.trim_returned_bytes() > previous.trim_returned_bytes()) {
      trims.returned_bytes += m.trim_returned_bytes() - previous.trim_returned_bytes();
    }
    trims.after_trim.push_back(i);
  }
  return trims;
}

std::string SeriesTrimsText(const SeriesTrims& trims) {
  if (trims.trims == 0) return "";
  std::vector<std::string> where;
  for (size_t i : trims.after_trim) where.push_back(absl::StrCat(i, " and ", i + 1));
  return absl::StrCat("  trim        ", trims.trims, Plural(trims.trims, " trim", " trims"),
                      " during the series returned ", HumanBytes(trims.returned_bytes),
                      " (between snapshots ", absl::StrJoin(where, ", "),
                      "): a fall in RSS there is malloc returning free memory, not frees\n");
}

std::string SeriesTrimsJson(const SeriesTrims& trims) {
  return absl::StrCat("{\"count\":", trims.trims, ",\"returned_bytes\":", trims.returned_bytes,
                      ",\"after_trim\":[", absl::StrJoin(trims.after_trim, ","), "]}");
}

}  // namespace retain::tool
