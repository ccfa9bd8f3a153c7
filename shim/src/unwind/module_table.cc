// module_table: see unwind/module_table.h.
#include "unwind/module_table.h"

#include <elf.h>
#include <link.h>
#include <string.h>

#include <atomic>
#include <cstddef>

#include "base/arena.h"
#include "base/large_static.h"
#include "base/process_info.h"
#include "base/spin_lock.h"
#include "unwind/cfi_unwinder.h"
#include "unwind/go_runtime.h"

namespace retain::shim {
namespace {

constexpr uint32_t kMaxModules = 8192;

struct ExecRange {
  uintptr_t start;
  uintptr_t end;
  CodeKind kind;
};

struct RangeTable {
  uint32_t count;
  ExecRange ranges[];
};

SpinLock g_lock;
RETAIN_LARGE_STATIC ModuleEntry* g_modules[kMaxModules];  // guarded by g_lock
uint32_t g_count;                                         // guarded by g_lock
// Replaced whole on every refresh; old tables are never freed (a reader may
// still be looking at one, and refreshes are rare).
std::atomic<RangeTable*> g_ranges;
std::atomic<uintptr_t> g_shim_begin;
std::atomic<uintptr_t> g_shim_end;
std::atomic<uint64_t> g_last_refresh_us;

// The loader's counts of objects loaded and unloaded (dl_phdr_info's
// dlpi_adds and dlpi_subs) when the last refresh began: equal counts mean
// the same objects, and the refresh has nothing to do. A snapshot refreshes
// first, and a refresh costs ~0.1 ms (its scratch pages, the ranges table
// made again): most snapshots of most programs find nothing new.
struct LoaderCounts {
  bool known;
  unsigned long long adds;
  unsigned long long subs;
  bool operator==(const LoaderCounts&) const = default;
};
LoaderCounts g_refreshed_counts;  // guarded by g_lock; known is false before the first

LoaderCounts ReadLoaderCounts() {
  LoaderCounts counts{};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        // Both exist from glibc 2.4 on; `size` says whether they are there.
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
          *static_cast<LoaderCounts*>(data) = {true, info->dlpi_adds, info->dlpi_subs};
        }
        return 1;  // the first object is enough: the counts are global
      },
      &counts);
  return counts;
}

// Runtimes Debian builds without frame pointers: a frame-pointer walk cannot
// pass through their frames.
bool IsNoFramePointerRuntime(const char* path) {
  const char* base = strrchr(path, '/');
  base = base == nullptr ? path : base + 1;
  static const char* const kPrefixes[] = {"libc.so",   "libstdc++.so",  "libgcc_s.so", "ld-linux",
                                          "libm.so",   "libpthread.so", "libdl.so",    "linux-vdso",
                                          "libc++.so", "libc++abi.so"};
  for (const char* prefix : kPrefixes) {
    if (strncmp(base, prefix, strlen(prefix)) == 0) return true;
  }
  return false;
}

void ReadBuildId(const dl_phdr_info* info, ModuleEntry* entry) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
    if (phdr.p_type != PT_NOTE) continue;
    auto* p = reinterpret_cast<const char*>(info->dlpi_addr + phdr.p_vaddr);
    const char* end = p + phdr.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      size_t name_size = (note->n_namesz + 3) & ~size_t{3};
      size_t desc_size = (note->n_descsz + 3) & ~size_t{3};
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + name_size;
      if (desc + desc_size > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
          note->n_descsz <= sizeof(entry->build_id)) {
        memcpy(entry->build_id, desc, note->n_descsz);
        entry->build_id_size = note->n_descsz;
        return;
      }
      p = desc + desc_size;
    }
  }
}

// A Go module seen for the first time: registered with go_runtime once
// dl_iterate_phdr has returned (reading its file under the loader's lock
// would hold up every dlopen meanwhile).
struct NewGoModule {
  const ModuleEntry* entry;
  bool is_program;  // read through /proc/self/exe: the very file, even if replaced since
  uintptr_t text_begin;
  uintptr_t text_end;
};

struct RefreshState {
  bool seen[kMaxModules];
  ExecRange ranges[kMaxModules];
  uint32_t range_count;
  NewGoModule go_modules[kMaxGoModules];
  int go_module_count;
};

const char* CopyString(const char* text) {
  size_t length = strlen(text);
  auto* copy = static_cast<char*>(ArenaAllocate(length + 1));
  if (copy != nullptr) memcpy(copy, text, length + 1);
  return copy;
}

int VisitObject(dl_phdr_info* info, size_t, void* data) {
  auto* state = static_cast<RefreshState*>(data);
  const char* path = info->dlpi_name;
  if (path == nullptr || *path == '\0') path = ExePath();

  ModuleEntry* entry = nullptr;
  for (uint32_t i = 0; i < g_count; ++i) {
    ModuleEntry* m = g_modules[i];
    if (!m->unloaded && m->load_bias == info->dlpi_addr && strcmp(m->path, path) == 0) {
      entry = m;
      state->seen[i] = true;
      break;
    }
  }
  if (entry == nullptr && g_count < kMaxModules) {
    entry = static_cast<ModuleEntry*>(ArenaAllocate(sizeof(ModuleEntry)));
    const char* copy = entry != nullptr ? CopyString(path) : nullptr;
    if (copy == nullptr) return 0;  // arena full: skip this module
    entry->path = copy;
    entry->id = g_count + 1;
    entry->load_bias = info->dlpi_addr;
    ReadBuildId(info, entry);
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
      if (phdr.p_type != PT_LOAD || (phdr.p_flags & PF_X) == 0) continue;
      if (entry->segment_count == sizeof(entry->segments) / sizeof(entry->segments[0])) break;
      ModuleSegment& segment = entry->segments[entry->segment_count++];
      segment.start = info->dlpi_addr + phdr.p_vaddr;
      segment.end = segment.start + phdr.p_memsz;
      segment.file_offset = phdr.p_offset;
    }
    state->seen[g_count] = true;
    g_modules[g_count++] = entry;
    if (entry->segment_count != 0 && state->go_module_count < kMaxGoModules &&
        HasGoNote(info->dlpi_phdr, info->dlpi_phnum, info->dlpi_addr)) {
      NewGoModule& go = state->go_modules[state->go_module_count++];
      go.entry = entry;
      go.is_program = info->dlpi_name == nullptr || info->dlpi_name[0] == '\0';
      go.text_begin = entry->segments[0].start;
      go.text_end = entry->segments[0].end;
      for (uint32_t i = 1; i < entry->segment_count; ++i) {
        if (entry->segments[i].start < go.text_begin) go.text_begin = entry->segments[i].start;
        if (entry->segments[i].end > go.text_end) go.text_end = entry->segments[i].end;
      }
    }
  }
  if (entry == nullptr) return 0;

  CodeKind kind =
      IsNoFramePointerRuntime(path) ? CodeKind::kNoFramePointers : CodeKind::kFramePointers;
  auto self = reinterpret_cast<uintptr_t>(&RefreshModules);
  for (uint32_t i = 0; i < entry->segment_count; ++i) {
    const ModuleSegment& segment = entry->segments[i];
    if (state->range_count < kMaxModules) {
      state->ranges[state->range_count++] = {segment.start, segment.end, kind};
    }
    if (self >= segment.start && self < segment.end) {
      g_shim_begin.store(segment.start, std::memory_order_relaxed);
      g_shim_end.store(segment.end, std::memory_order_relaxed);
    }
  }
  return 0;
}

void PublishRanges(const RefreshState& state) {
  auto* table = static_cast<RangeTable*>(
      ArenaAllocate(sizeof(RangeTable) + sizeof(ExecRange) * state.range_count));
  if (table == nullptr) return;
  table->count = state.range_count;
  memcpy(table->ranges, state.ranges, sizeof(ExecRange) * state.range_count);
  // Insertion sort by start: tables are small and nearly sorted.
  for (uint32_t i = 1; i < table->count; ++i) {
    ExecRange key = table->ranges[i];
    uint32_t j = i;
    for (; j > 0 && table->ranges[j - 1].start > key.start; --j) {
      table->ranges[j] = table->ranges[j - 1];
    }
    table->ranges[j] = key;
  }
  g_ranges.store(table, std::memory_order_release);
}

// Requires g_lock.
void RefreshLocked() {
  // Read before the objects are: one loaded in between makes the next
  // refresh see a change, never the reverse.
  const LoaderCounts counts = ReadLoaderCounts();
  if (counts.known && counts == g_refreshed_counts) {
    g_last_refresh_us.store(MicrosSinceStart(), std::memory_order_relaxed);
    return;
  }
  // The refresh state is large; it lives in scratch pages, not on the stack.
  auto* state = static_cast<RefreshState*>(MapScratchPages(sizeof(RefreshState)));
  if (state == nullptr) return;
  dl_iterate_phdr(VisitObject, state);
  for (uint32_t i = 0; i < g_count; ++i) {
    if (!state->seen[i]) g_modules[i]->unloaded = true;
  }
  PublishRanges(*state);
  bool registered = false;
  for (int i = 0; i < state->go_module_count; ++i) {
    const NewGoModule& go = state->go_modules[i];
    GoModule module;
    module.text = {go.text_begin, go.text_end};
    if (ReadGoModule(go.is_program ? "/proc/self/exe" : go.entry->path, go.entry->load_bias,
                     &module)) {
      registered |= RegisterGoModule(module);
    }
  }
  // Rules cached for its code before (the fallback) give way to Go's.
  if (registered) CfiForgetRules();
  UnmapScratchPages(state, sizeof(RefreshState));
  // Once the shim's memory ran short a module may have been skipped: every
  // refresh then reads them all again, as before the counts were kept.
  g_refreshed_counts = ArenaExhausted() ? LoaderCounts{} : counts;
  g_last_refresh_us.store(MicrosSinceStart(), std::memory_order_relaxed);
}

}  // namespace

void RefreshModules() {
  SpinLockHolder hold(g_lock);
  RefreshLocked();
}

void TryRefreshModules() {
  uint64_t now = MicrosSinceStart();
  if (now - g_last_refresh_us.load(std::memory_order_relaxed) < 100000) return;
  if (!g_lock.TryLock()) return;
  RefreshLocked();
  g_lock.Unlock();
}

const ModuleEntry* MainModule() {
  SpinLockHolder hold(g_lock);
  for (uint32_t i = 0; i < g_count; ++i) {
    if (strcmp(g_modules[i]->path, ExePath()) == 0) return g_modules[i];
  }
  return nullptr;
}

CodeKind ClassifyAddress(uintptr_t address) {
  const RangeTable* table = g_ranges.load(std::memory_order_acquire);
  if (table == nullptr) return CodeKind::kUnknown;
  uint32_t low = 0;
  uint32_t high = table->count;
  while (low < high) {  // first range with start > address
    uint32_t mid = (low + high) / 2;
    if (table->ranges[mid].start <= address) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  if (low == 0) return CodeKind::kUnknown;
  const ExecRange& range = table->ranges[low - 1];
  return address < range.end ? range.kind : CodeKind::kUnknown;
}

uintptr_t ShimCodeBegin() { return g_shim_begin.load(std::memory_order_relaxed); }
uintptr_t ShimCodeEnd() { return g_shim_end.load(std::memory_order_relaxed); }

void ModuleTableLockForFork() { g_lock.Lock(); }
void ModuleTableUnlockForFork() { g_lock.Unlock(); }
void ModuleTableResetInChild() { g_lock.ResetInChild(); }

namespace module_table_internal {
void Lock() { g_lock.Lock(); }
void Unlock() { g_lock.Unlock(); }
uint32_t Count() { return g_count; }
const ModuleEntry* Get(uint32_t index) { return g_modules[index]; }
}  // namespace module_table_internal

}  // namespace retain::shim
