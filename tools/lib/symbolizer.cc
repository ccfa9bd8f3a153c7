// symbolizer: see symbolizer.h. Offline only: every module is opened from
// its file (under the sysroot) with libdwfl, one Dwfl session per module
// file, never by attaching to a process.
//
// This file is the symbolizer and its caches; the layers below it have their
// own files: dwarf_module (libdw: function, file:line, inlines),
// debug_file_search (build-id, .gnu_debuglink, debug directories, sysroot)
// and elf_file (ELF reading).
//
// Layers, each cached, from the caller down:
//  - SnapshotIndex: a snapshot's executable segments, sorted, plus a map
//    from address to result, so that symbolizing the frames of a million
//    allocations is one hash lookup each. The index of the last snapshot is
//    found by a cheap fingerprint (its address and header); others by their
//    module table's contents. A snapshot must not be modified while its
//    results are being asked for.
//  - ModuleSlot: one module as snapshots record it (path + build-id): the
//    verdict on its file (usable, replaced, missing: warned once) and the
//    results per module offset. The results themselves live side by side
//    in one deque (it never moves its elements): references returned by
//    Symbolize() stay valid for the Symbolizer's lifetime, and hot lookups
//    touch less memory than scattered map nodes would.
//  - DwarfModule (dwarf_module.h): an opened ELF file and its DWARF, shared
//    by every slot with the same build-id (or the same file, when it has
//    none).
//
// Thread-compatible (libdw handles are not shared between Symbolizers).
#include "tools/lib/symbolizer.h"

#include <elfutils/libdwfl.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tools/lib/dwarf_module.h"
#include "tools/lib/elf_file.h"
#include "tools/lib/input_file.h"

namespace retain::tool {
namespace {

using symbolizer_internal::Basename;
using symbolizer_internal::DwarfModule;
using symbolizer_internal::ElfBuildId;
using symbolizer_internal::ElfPtr;
using symbolizer_internal::Fd;
using symbolizer_internal::OpenElf;

// How many snapshots' indexes are kept before the oldest are dropped.
constexpr size_t kMaxSnapshotIndexes = 32;

// The kernel's virtual DSO has no file to read.
bool IsVdso(absl::string_view path) {
  absl::string_view base = Basename(path);
  return absl::StartsWith(base, "linux-vdso") || absl::StartsWith(base, "linux-gate") ||
         path == "[vdso]";
}

// ---------------------------------------------------------------------------
// Modules as snapshots record them, and per-snapshot indexes.

struct ModuleSlot {
  std::string path;      // as recorded
  std::string build_id;  // raw bytes, as recorded
  bool resolved = false;
  DwarfModule* debug = nullptr;                               // null: module+offset only
  absl::flat_hash_map<uint64_t, SymbolizedAddress*> results;  // by module offset
};

struct SegmentEntry {
  uint64_t start;
  uint64_t end;
  uint64_t load_bias;
  bool unloaded;
  ModuleSlot* slot;
};

struct SnapshotIndex {
  std::vector<SegmentEntry> segments;  // sorted by start
  uint64_t max_segment_length = 0;
  absl::flat_hash_map<uint64_t, const SymbolizedAddress*> results;  // by address

  // The segment containing `address`: a loaded module's before an unloaded
  // one's (a range can be reused after dlclose); nullptr when none.
  const SegmentEntry* Find(uint64_t address) const {
    auto it = std::upper_bound(
        segments.begin(), segments.end(), address,
        [](uint64_t value, const SegmentEntry& segment) { return value < segment.start; });
    const SegmentEntry* unloaded = nullptr;
    while (it != segments.begin()) {
      --it;
      if (address - it->start > max_segment_length) break;
      if (address < it->end) {
        if (!it->unloaded) return &*it;
        if (unloaded == nullptr) unloaded = &*it;
      }
    }
    return unloaded;
  }
};

// What identifies the snapshot seen last, cheaply.
struct Fingerprint {
  const v1::Snapshot* snapshot = nullptr;
  uint32_t pid = 0;
  uint64_t start_ticks = 0;
  uint64_t time_unix_ns = 0;
  uint32_t sequence = 0;
  int module_count = 0;
  const void* first_module = nullptr;

  static Fingerprint Of(const v1::Snapshot& snapshot) {
    Fingerprint f;
    f.snapshot = &snapshot;
    f.pid = snapshot.header().pid();
    f.start_ticks = snapshot.header().process_start_ticks();
    f.time_unix_ns = snapshot.header().time_unix_ns();
    f.sequence = snapshot.header().sequence();
    f.module_count = snapshot.modules_size();
    f.first_module = snapshot.modules_size() > 0 ? &snapshot.modules(0) : nullptr;
    return f;
  }
  bool operator==(const Fingerprint&) const = default;
};

// The module table's contents, as a key for its index.
std::string ModuleTableKey(const v1::Snapshot& snapshot) {
  std::string key;
  for (const v1::Module& module : snapshot.modules()) {
    absl::StrAppend(&key, module.path().size(), ":", module.path(), module.build_id().size(), ":",
                    module.build_id(), ":", module.load_bias(), ":", module.unloaded() ? 1 : 0);
    for (const v1::Segment& segment : module.executable_segments()) {
      absl::StrAppend(&key, ":", segment.start(), "-", segment.end());
    }
    key.push_back(';');
  }
  return key;
}

}  // namespace

// ---------------------------------------------------------------------------

class Symbolizer::Impl {
 public:
  explicit Impl(SymbolizerOptions options) : options_(std::move(options)) {
    // "/" and "" both mean none; "/srv/root/" is "/srv/root".
    while (!options_.sysroot.empty() && options_.sysroot.back() == '/') {
      options_.sysroot.pop_back();
    }
    debug_dirs_ = options_.debug_dirs;
    if (!options_.sysroot.empty()) debug_dirs_.push_back(options_.sysroot + "/usr/lib/debug");
    debug_dirs_.push_back("/usr/lib/debug");
  }

  const SymbolizedAddress& Symbolize(const v1::Snapshot& snapshot, uint64_t address,
                                     int /*frame_index*/) {
    // Every recorded frame is a return address, frames[0] included (see
    // Stack in proto/retain.proto): each is looked up at address - 1, inside
    // its call instruction. frames[0] looked up as is lands on the caller's
    // next statement, or past the end of an inlined callee, whose frame is
    // then lost. So the frame's position does not matter.
    ++stats_.lookups;
    SnapshotIndex& index = IndexFor(snapshot);
    const uint64_t key = address;
    auto found = index.results.find(key);
    if (found != index.results.end()) return *found->second;
    ++stats_.address_misses;
    const SymbolizedAddress& result = Resolve(index, address);
    index.results.emplace(key, &result);
    return result;
  }

  std::vector<std::string> TakeWarnings() { return std::exchange(warnings_, {}); }

  const SymbolizerStats& stats() const { return stats_; }

 private:
  SnapshotIndex& IndexFor(const v1::Snapshot& snapshot) {
    Fingerprint fingerprint = Fingerprint::Of(snapshot);
    if (last_index_ != nullptr && fingerprint == last_fingerprint_) return *last_index_;
    std::string key = ModuleTableKey(snapshot);
    auto it = indexes_.find(key);
    if (it == indexes_.end()) {
      if (indexes_.size() >= kMaxSnapshotIndexes) indexes_.clear();  // results stay in the slots
      it = indexes_.emplace(std::move(key), BuildIndex(snapshot)).first;
    }
    last_fingerprint_ = fingerprint;
    last_index_ = it->second.get();
    return *last_index_;
  }

  std::unique_ptr<SnapshotIndex> BuildIndex(const v1::Snapshot& snapshot) {
    auto index = std::make_unique<SnapshotIndex>();
    for (const v1::Module& module : snapshot.modules()) {
      ModuleSlot* slot = Slot(module.path(), module.build_id());
      for (const v1::Segment& segment : module.executable_segments()) {
        if (segment.end() <= segment.start()) continue;
        index->segments.push_back(
            {segment.start(), segment.end(), module.load_bias(), module.unloaded(), slot});
        index->max_segment_length =
            std::max(index->max_segment_length, segment.end() - segment.start());
      }
    }
    std::stable_sort(
        index->segments.begin(), index->segments.end(),
        [](const SegmentEntry& a, const SegmentEntry& b) { return a.start < b.start; });
    return index;
  }

  ModuleSlot* Slot(const std::string& path, const std::string& build_id) {
    std::string key = absl::StrCat(path.size(), ":", path, build_id);
    auto it = slots_.find(key);
    if (it != slots_.end()) return it->second.get();
    auto slot = std::make_unique<ModuleSlot>();
    slot->path = path;
    slot->build_id = build_id;
    return slots_.emplace(std::move(key), std::move(slot)).first->second.get();
  }

  const SymbolizedAddress& Resolve(const SnapshotIndex& index, uint64_t address) {
    const SegmentEntry* segment = index.Find(address);
    if (segment == nullptr) {
      SymbolizedAddress& result = unmapped_[address];
      result.module_offset = address;
      return result;
    }
    ModuleSlot* slot = segment->slot;
    const uint64_t offset = address - segment->load_bias;
    auto [it, inserted] = slot->results.try_emplace(offset, nullptr);
    if (!inserted) return *it->second;
    SymbolizedAddress& result = storage_.emplace_back();
    it->second = &result;
    result.module = slot->path;
    result.module_offset = offset;
    if (!slot->resolved) ResolveSlot(slot);
    if (slot->debug != nullptr) {
      ++stats_.dwarf_lookups;
      result.frames = slot->debug->Lookup(offset - 1);
    }
    return result;
  }

  // Decides once whether a module's file can be trusted for its addresses.
  void ResolveSlot(ModuleSlot* slot) {
    slot->resolved = true;
    if (IsVdso(slot->path) || slot->path.empty()) return;
    const std::string file = options_.sysroot.empty() ? slot->path : options_.sysroot + slot->path;
    // A path in a snapshot can name anything: a FIFO (opening it would wait
    // for a writer), a device, a huge file. Only regular files of a bounded
    // size are read, through this one descriptor.
    absl::StatusOr<int> opened = OpenRegularFile(file, kMaxModuleFileBytes, "module file");
    if (!opened.ok()) {
      warnings_.push_back(absl::StrCat(opened.status().message(), "; showing module+offset"));
      return;
    }
    ++stats_.module_files_opened;
    Fd holder(*opened);
    std::string file_build_id;
    {
      ElfPtr elf = OpenElf(*opened);
      if (elf == nullptr) {
        warnings_.push_back(absl::StrCat(file, ": not an ELF file; showing module+offset"));
        return;
      }
      file_build_id = ElfBuildId(elf.get());
    }
    if (!slot->build_id.empty() && file_build_id != slot->build_id) {
      warnings_.push_back(
          absl::StrCat(file, ": build-id ",
                       file_build_id.empty() ? "missing" : absl::BytesToHexString(file_build_id),
                       " differs from the snapshot's ", absl::BytesToHexString(slot->build_id),
                       " (the file was replaced); showing module+offset"));
      return;
    }
    std::string key =
        file_build_id.empty() ? absl::StrCat("path:", file) : absl::StrCat("id:", file_build_id);
    auto it = debug_modules_.find(key);
    if (it == debug_modules_.end()) {
      // libdwfl takes the descriptor over only when it succeeds.
      std::unique_ptr<DwarfModule> module = symbolizer_internal::OpenDwarfModule(
          slot->path, file, *opened, options_.sysroot, &debug_dirs_);
      if (module != nullptr) holder.release();
      if (module == nullptr) {
        warnings_.push_back(
            absl::StrCat(file, ": cannot read (", dwfl_errmsg(-1), "); showing module+offset"));
        return;
      }
      if (module->BuildId() != file_build_id) {  // replaced a moment ago
        warnings_.push_back(
            absl::StrCat(file, ": changed while being read; showing module+offset"));
        return;
      }
      it = debug_modules_.emplace(std::move(key), std::move(module)).first;
    }
    slot->debug = it->second.get();
  }

  SymbolizerOptions options_;
  std::vector<std::string> debug_dirs_;
  std::vector<std::string> warnings_;
  absl::flat_hash_map<std::string, std::unique_ptr<DwarfModule>> debug_modules_;
  absl::flat_hash_map<std::string, std::unique_ptr<ModuleSlot>> slots_;
  absl::flat_hash_map<std::string, std::unique_ptr<SnapshotIndex>> indexes_;
  absl::node_hash_map<uint64_t, SymbolizedAddress> unmapped_;
  // Every module's results (see the top of the file).
  std::deque<SymbolizedAddress> storage_;
  Fingerprint last_fingerprint_;
  SnapshotIndex* last_index_ = nullptr;
  SymbolizerStats stats_;
};

Symbolizer::Symbolizer(SymbolizerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

Symbolizer::~Symbolizer() = default;

const SymbolizedAddress& Symbolizer::Symbolize(const v1::Snapshot& snapshot, uint64_t address,
                                               int frame_index) {
  return impl_->Symbolize(snapshot, address, frame_index);
}

std::vector<std::string> Symbolizer::TakeWarnings() { return impl_->TakeWarnings(); }

SymbolizerStats Symbolizer::Stats() const { return impl_->stats(); }

std::string ModuleOffsetString(const SymbolizedAddress& address, uint64_t raw_address) {
  if (address.module.empty()) return absl::StrCat("0x", absl::Hex(raw_address));
  return absl::StrCat(Basename(address.module), "+0x", absl::Hex(address.module_offset));
}

}  // namespace retain::tool
