// symbolizer: see symbolizer.h. Offline only: every module is opened from
// its file (under the sysroot) with libdwfl, one Dwfl session per module
// file, never by attaching to a process.
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
//  - DebugModule: an opened ELF file and its DWARF, shared by every slot
//    with the same build-id (or the same file, when it has none). DWARF is
//    indexed per compilation unit on first use: the function and inlined
//    instance ranges of the unit, as a tree, so a lookup is a binary search
//    and a short descent instead of a walk over the unit's DIEs.
//
// Thread-compatible (libdw handles are not shared between Symbolizers).
#include "tools/lib/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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
#include "tools/lib/input_file.h"

namespace retain::tool {
namespace {

constexpr uint32_t kNoNode = ~uint32_t{0};
// How many snapshots' indexes are kept before the oldest are dropped.
constexpr size_t kMaxSnapshotIndexes = 32;

// ---------------------------------------------------------------------------
// Small helpers.

std::string Demangle(const char* name) {
  if (name == nullptr) return "";
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) return name;
  std::string result(demangled);
  std::free(demangled);
  return result;
}

// A symbol's demangled name without its version ("@@GLIBC_2.2.5": not part
// of the name, and it would split owners across libc builds) and without
// the " [clone .cold]", " [clone .isra.0]"... suffixes of compiler-made
// copies: one function, one name.
std::string DemangleSymbol(const char* name) {
  std::string unversioned = name;
  if (size_t at = unversioned.find('@'); at != std::string::npos && at > 0) {
    unversioned.resize(at);
  }
  std::string text = Demangle(unversioned.c_str());
  for (size_t at;
       absl::EndsWith(text, "]") && (at = text.rfind(" [clone ")) != std::string::npos;) {
    text.resize(at);
  }
  return text;
}

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

absl::string_view Dirname(absl::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return "";
  return path.substr(0, slash);
}

// The kernel's virtual DSO has no file to read.
bool IsVdso(absl::string_view path) {
  absl::string_view base = Basename(path);
  return absl::StartsWith(base, "linux-vdso") || absl::StartsWith(base, "linux-gate") ||
         path == "[vdso]";
}

// Closes a descriptor unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Ends a libelf handle.
struct ElfDeleter {
  void operator()(Elf* elf) const { elf_end(elf); }
};
using ElfPtr = std::unique_ptr<Elf, ElfDeleter>;

ElfPtr OpenElf(int fd) {
  elf_version(EV_CURRENT);
  ElfPtr elf(elf_begin(fd, ELF_C_READ_MMAP, nullptr));
  if (elf != nullptr && elf_kind(elf.get()) != ELF_K_ELF) elf.reset();
  return elf;
}

// The GNU build-id note's bytes; empty when the file has none.
std::string ElfBuildId(Elf* elf) {
  const void* bits = nullptr;
  ssize_t size = dwelf_elf_gnu_build_id(elf, &bits);
  if (size <= 0 || bits == nullptr) return "";
  return std::string(static_cast<const char*>(bits), static_cast<size_t>(size));
}

// True when the file carries DWARF (a .debug_info section with contents).
bool HasDebugInfo(Elf* elf) {
  size_t strndx = 0;
  if (elf_getshdrstrndx(elf, &strndx) != 0) return false;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS) continue;
    const char* name = elf_strptr(elf, strndx, shdr.sh_name);
    if (name != nullptr &&
        (std::strcmp(name, ".debug_info") == 0 || std::strcmp(name, ".zdebug_info") == 0)) {
      return true;
    }
  }
  return false;
}

std::string JoinPath(absl::string_view dir, absl::string_view path) {
  while (!dir.empty() && dir.back() == '/') dir.remove_suffix(1);
  if (!path.empty() && path.front() == '/') return absl::StrCat(dir, path);
  return absl::StrCat(dir, "/", path);
}

// ---------------------------------------------------------------------------
// DWARF index of one compilation unit.

struct ScopeNode {
  Dwarf_Die die;  // DW_TAG_subprogram or DW_TAG_inlined_subroutine
  int tag = 0;
  std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>> ranges;  // [low, high), DWARF addresses
  std::vector<uint32_t> children;

  bool Contains(Dwarf_Addr pc) const {
    for (const auto& [low, high] : ranges) {
      if (pc >= low && pc < high) return true;
    }
    return false;
  }
};

struct TopRange {
  Dwarf_Addr low;
  Dwarf_Addr high;
  uint32_t node;
};

class CuIndex {
 public:
  explicit CuIndex(Dwarf_Die cu_die) : cu_die_(cu_die), scope_die_(cu_die) {
    // Split DWARF (-gsplit-dwarf): the unit here is a skeleton; its DIEs
    // live in the .dwo unit libdw finds for it.
    uint8_t unit_type = 0;
    Dwarf_Die split;
    if (cu_die_.cu != nullptr &&
        dwarf_cu_info(cu_die_.cu, nullptr, &unit_type, nullptr, &split, nullptr, nullptr,
                      nullptr) == 0 &&
        unit_type == DW_UT_skeleton && split.addr != nullptr) {
      scope_die_ = split;
    }
    Walk(&scope_die_, kNoNode, false);
    std::sort(tops_.begin(), tops_.end(),
              [](const TopRange& a, const TopRange& b) { return a.low < b.low; });
    for (const TopRange& top : tops_) {
      max_top_length_ = std::max(max_top_length_, top.high - top.low);
    }
  }

  // The unit as the address lookup found it (its line table).
  Dwarf_Die* cu_die() { return &cu_die_; }
  // The unit whose DIEs describe the functions (the split unit, if any; its
  // file table is the one DW_AT_call_file indexes).
  Dwarf_Die* scope_die() { return &scope_die_; }
  const ScopeNode& node(uint32_t index) const { return nodes_[index]; }

  // The chain of scopes containing `pc`, innermost first, ending with the
  // innermost subprogram (an inlined subroutine's containing function).
  std::vector<uint32_t> Chain(Dwarf_Addr pc) const {
    std::vector<uint32_t> chain;
    auto it =
        std::upper_bound(tops_.begin(), tops_.end(), pc,
                         [](Dwarf_Addr value, const TopRange& top) { return value < top.low; });
    uint32_t current = kNoNode;
    while (it != tops_.begin()) {
      --it;
      if (pc - it->low > max_top_length_) break;
      if (pc < it->high) {
        current = it->node;
        break;
      }
    }
    if (current == kNoNode) return chain;
    std::vector<uint32_t> path{current};
    for (bool descended = true; descended;) {
      descended = false;
      for (uint32_t child : nodes_[current].children) {
        if (nodes_[child].Contains(pc)) {
          current = child;
          path.push_back(child);
          descended = true;
          break;
        }
      }
    }
    // Innermost first, up to and including the innermost subprogram.
    for (auto node = path.rbegin(); node != path.rend(); ++node) {
      chain.push_back(*node);
      if (nodes_[*node].tag == DW_TAG_subprogram) break;
    }
    return chain;
  }

 private:
  // Visits the children of `die`. Functions with code become roots, inlined
  // instances nodes under `parent`; blocks and namespaces are looked through.
  // Types are skipped (compilers put concrete functions outside them),
  // except classes local to a function.
  void Walk(Dwarf_Die* die, uint32_t parent, bool in_function) {
    Dwarf_Die child;
    if (dwarf_child(die, &child) != 0) return;
    do {
      int tag = dwarf_tag(&child);
      switch (tag) {
        case DW_TAG_subprogram:
        case DW_TAG_inlined_subroutine: {
          ScopeNode node;
          node.die = child;
          node.tag = tag;
          Dwarf_Addr base = 0, low = 0, high = 0;
          ptrdiff_t offset = 0;
          while ((offset = dwarf_ranges(&child, offset, &base, &low, &high)) > 0) {
            if (high > low) node.ranges.emplace_back(low, high);
          }
          if (node.ranges.empty()) {
            // A declaration or an abstract instance: no code of its own, but
            // a lambda's concrete operator() can sit in a local class in it.
            Walk(&child, parent, true);
            break;
          }
          uint32_t index = static_cast<uint32_t>(nodes_.size());
          nodes_.push_back(std::move(node));
          // A function is a root even when its DIE sits inside another
          // function's (a lambda's operator(), a nested function): its code
          // is elsewhere. Inlined instances hang under their container.
          if (parent == kNoNode || tag == DW_TAG_subprogram) {
            for (const auto& [range_low, range_high] : nodes_[index].ranges) {
              tops_.push_back({range_low, range_high, index});
            }
          } else {
            nodes_[parent].children.push_back(index);
          }
          Walk(&child, index, true);
          break;
        }
        case DW_TAG_lexical_block:
        case DW_TAG_try_block:
        case DW_TAG_catch_block:
        case DW_TAG_namespace:
        case DW_TAG_module:
          Walk(&child, parent, in_function);
          break;
        case DW_TAG_class_type:
        case DW_TAG_structure_type:
        case DW_TAG_union_type:
          if (in_function) Walk(&child, parent, in_function);
          break;
        default:
          break;
      }
    } while (dwarf_siblingof(&child, &child) == 0);
  }

  Dwarf_Die cu_die_;
  Dwarf_Die scope_die_;
  std::vector<ScopeNode> nodes_;
  std::vector<TopRange> tops_;
  Dwarf_Addr max_top_length_ = 0;
};

// ---------------------------------------------------------------------------
// One opened module file.

struct ElfSymbol {
  uint64_t start;
  uint64_t size;
  const char* name;
  int rank;  // lower is preferred among symbols at one address
};

// What the find_debuginfo callback needs to know about a module.
struct DebugSearch {
  std::string module_path;  // as the snapshot recorded it
  std::string file_path;    // the file opened (sysroot applied)
  std::string sysroot;      // empty: none
  const std::vector<std::string>* dirs = nullptr;
};

// Opens `path` if it is an ELF file whose build-id is `want` (any build-id
// when `want` is empty) and which carries DWARF; -1 otherwise. `main` is the
// module's own file, never accepted as its own debug file.
int OpenDebugCandidate(const std::string& path, absl::string_view want, const struct stat& main) {
  // A FIFO, a device or a huge file where a debug file is looked for is
  // skipped like a missing one (OpenRegularFile never blocks on a FIFO).
  absl::StatusOr<int> opened = OpenRegularFile(path, kMaxModuleFileBytes, "debug file");
  if (!opened.ok()) return -1;
  const int fd = *opened;
  Fd holder(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return -1;
  if (st.st_dev == main.st_dev && st.st_ino == main.st_ino) return -1;
  ElfPtr elf = OpenElf(fd);
  if (elf == nullptr) return -1;
  if (!want.empty()) {
    std::string id = ElfBuildId(elf.get());
    // A debug file without a build-id (an old debuglink) is taken on trust.
    if (!id.empty() && id != want) return -1;
  }
  if (!HasDebugInfo(elf.get())) return -1;
  return holder.release();
}

// libdwfl calls find_debuginfo a second way, for a dwz supplementary file
// (.gnu_debugaltlink), passing the alt link's path where the module's
// debuglink goes. It is that call when the name is not the main file's own
// debuglink.
bool IsAltLinkRequest(Dwfl_Module* mod, const char* debuglink_file) {
  if (debuglink_file == nullptr) return false;
  GElf_Addr bias = 0;
  Elf* main = dwfl_module_getelf(mod, &bias);
  GElf_Word crc = 0;
  const char* own = main == nullptr ? nullptr : dwelf_elf_gnu_debuglink(main, &crc);
  return own == nullptr || std::strcmp(own, debuglink_file) != 0;
}

// The dwz supplementary file: by its build-id in the debug directories,
// else at the path the link names (under the sysroot first when absolute,
// else relative to the file that links to it). Never exercised by the tests
// (no dwz here); Debian's -dbgsym packages use it.
int FindAltFile(Dwfl_Module* mod, const DebugSearch& search, const char* file_name,
                const char* alt_path, char** found_name) {
  std::string want;
  Dwarf_Addr bias = 0;
  // The DWARF is set up before libdwfl looks for its alt file.
  if (Dwarf* dwarf = dwfl_module_getdwarf(mod, &bias); dwarf != nullptr) {
    const char* name = nullptr;
    const void* id = nullptr;
    ssize_t size = dwelf_dwarf_gnu_debugaltlink(dwarf, &name, &id);
    if (size > 0) want.assign(static_cast<const char*>(id), static_cast<size_t>(size));
  }
  std::vector<std::string> candidates;
  if (want.size() >= 2) {
    std::string hex = absl::BytesToHexString(want);
    for (const std::string& dir : *search.dirs) {
      candidates.push_back(absl::StrCat(JoinPath(dir, ".build-id"), "/", hex.substr(0, 2), "/",
                                        hex.substr(2), ".debug"));
    }
  }
  if (alt_path[0] == '/') {
    if (!search.sysroot.empty()) candidates.push_back(search.sysroot + alt_path);
    candidates.push_back(alt_path);
  } else if (file_name != nullptr) {
    candidates.push_back(JoinPath(Dirname(file_name), alt_path));
  }
  struct stat none {};
  for (const std::string& candidate : candidates) {
    int fd = OpenDebugCandidate(candidate, want, none);
    if (fd >= 0) {
      *found_name = strdup(candidate.c_str());
      return fd;
    }
  }
  return -1;
}

// libdwfl's find_debuginfo callback: looks for the module's separate debug
// file like gdb does, by build-id first, then by debuglink and path, in the
// configured directories. Called only when the file itself has no DWARF (or
// no symbol table).
int FindDebugInfo(Dwfl_Module* mod, void** userdata, const char* /*modname*/, Dwarf_Addr /*base*/,
                  const char* file_name, const char* debuglink_file, GElf_Word /*debuglink_crc*/,
                  char** debuginfo_file_name) {
  auto* search = static_cast<DebugSearch*>(*userdata);
  if (search == nullptr) return -1;
  struct stat main_stat {};
  if (stat(search->file_path.c_str(), &main_stat) != 0) return -1;

  if (IsAltLinkRequest(mod, debuglink_file)) {
    return FindAltFile(mod, *search, file_name, debuglink_file, debuginfo_file_name);
  }

  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  int id_size = dwfl_module_build_id(mod, &bits, &vaddr);
  std::string build_id =
      id_size > 0 ? std::string(reinterpret_cast<const char*>(bits), id_size) : "";

  std::vector<std::string> candidates;
  if (build_id.size() >= 2) {
    std::string hex = absl::BytesToHexString(build_id);
    for (const std::string& dir : *search->dirs) {
      candidates.push_back(absl::StrCat(JoinPath(dir, ".build-id"), "/", hex.substr(0, 2), "/",
                                        hex.substr(2), ".debug"));
    }
  }
  absl::string_view module_dir = Dirname(search->module_path);
  if (debuglink_file != nullptr && *debuglink_file != '\0') {
    absl::string_view file_dir = Dirname(search->file_path);
    candidates.push_back(absl::StrCat(file_dir, "/", debuglink_file));
    candidates.push_back(absl::StrCat(file_dir, "/.debug/", debuglink_file));
    for (const std::string& dir : *search->dirs) {
      candidates.push_back(absl::StrCat(JoinPath(dir, module_dir), "/", debuglink_file));
    }
  }
  for (const std::string& dir : *search->dirs) {
    candidates.push_back(absl::StrCat(JoinPath(dir, search->module_path), ".debug"));
    candidates.push_back(JoinPath(dir, search->module_path));
  }
  for (const std::string& candidate : candidates) {
    int fd = OpenDebugCandidate(candidate, build_id, main_stat);
    if (fd >= 0) {
      *debuginfo_file_name = strdup(candidate.c_str());
      return fd;
    }
  }
  return -1;
}

const Dwfl_Callbacks kCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = FindDebugInfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

class DebugModule {
 public:
  // Reads the module from `fd`, an open regular file (`file_path` names it
  // in messages and debuglink searches); libdwfl owns `fd` on success, the
  // caller keeps it otherwise. Never opens `file_path` again, so the file
  // checked is the file read. nullptr if it cannot (dwfl_errmsg says why).
  static std::unique_ptr<DebugModule> Open(const std::string& module_path,
                                           const std::string& file_path, int fd,
                                           const std::string& sysroot,
                                           const std::vector<std::string>* dirs) {
    auto module = std::unique_ptr<DebugModule>(new DebugModule);
    module->search_.module_path = module_path;
    module->search_.file_path = file_path;
    module->search_.sysroot = sysroot;
    module->search_.dirs = dirs;
    module->dwfl_ = dwfl_begin(&kCallbacks);
    if (module->dwfl_ == nullptr) return nullptr;
    dwfl_report_begin(module->dwfl_);
    // Base 0 with p_vaddr added: module addresses are the ELF's own
    // virtual addresses, i.e. the snapshot's module offsets.
    module->mod_ = dwfl_report_elf(module->dwfl_, module_path.c_str(), file_path.c_str(), fd, 0,
                                   /*add_p_vaddr=*/true);
    dwfl_report_end(module->dwfl_, nullptr, nullptr);
    if (module->mod_ == nullptr) return nullptr;
    void** userdata = nullptr;
    dwfl_module_info(module->mod_, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    if (userdata != nullptr) *userdata = &module->search_;
    return module;
  }

  ~DebugModule() {
    if (dwfl_ != nullptr) dwfl_end(dwfl_);
  }

  // The GNU build-id of the file libdwfl opened; empty if none.
  std::string BuildId() const {
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    int size = dwfl_module_build_id(mod_, &bits, &vaddr);
    if (size <= 0 || bits == nullptr) return "";
    return std::string(reinterpret_cast<const char*>(bits), static_cast<size_t>(size));
  }

  // Source frames for a module address (a return address minus one);
  // empty when nothing is known.
  std::vector<SourceFrame> Lookup(uint64_t pc) {
    std::vector<SourceFrame> frames;
    Dwarf_Line* line = nullptr;
    if (HasDwarf()) {
      Dwarf_Addr bias = 0;
      Dwarf_Die* cu_die = FindCu(pc, &bias);
      if (cu_die != nullptr) {
        CuIndex& cu = Cu(*cu_die);
        Dwarf_Addr dwarf_pc = pc - bias;
        line = dwarf_getsrc_die(cu.cu_die(), dwarf_pc);
        std::vector<uint32_t> chain = cu.Chain(dwarf_pc);
        for (size_t i = 0; i < chain.size(); ++i) {
          const ScopeNode& node = cu.node(chain[i]);
          SourceFrame frame;
          frame.inlined = i + 1 < chain.size();
          const DieName& name = FunctionName(node.die);
          frame.function = name.text;
          if (!frame.inlined && !name.from_linkage_name) {
            // No linkage name (C; C++ with internal linkage; lambdas): the
            // symbol of this very function is the fuller name (qualified,
            // with parameters).
            const ElfSymbol* symbol = SymbolAt(pc);
            if (symbol != nullptr && symbol->start >= bias && node.Contains(symbol->start - bias)) {
              frame.function = DemangleSymbol(symbol->name);
            }
          }
          if (i == 0) {
            FillFromLine(line, &frame);
          } else {
            FillFromCallSite(&cu, cu.node(chain[i - 1]).die, &frame);
          }
          frames.push_back(std::move(frame));
        }
        // A function DWARF left without a name: its symbol's.
        if (!frames.empty() && frames.back().function.empty()) {
          frames.back().function = SymbolName(pc);
        }
      }
    }
    // No DWARF function here (no debug information; assembly): the symbol,
    // and the line if the line table has one.
    if (frames.empty()) {
      std::string name = SymbolName(pc);
      if (!name.empty() || line != nullptr) {
        SourceFrame frame;
        frame.function = std::move(name);
        FillFromLine(line, &frame);
        frames.push_back(std::move(frame));
      }
    }
    return frames;
  }

 private:
  DebugModule() = default;

  bool HasDwarf() {
    if (!dwarf_checked_) {
      dwarf_checked_ = true;
      Dwarf_Addr bias = 0;
      dwarf_ = dwfl_module_getdwarf(mod_, &bias);
    }
    return dwarf_ != nullptr;
  }

  // The compilation unit containing `pc`, from .debug_aranges; else from
  // the units' own ranges (clang emits no .debug_aranges by default, and
  // libdw 0.188 does not fall back by itself).
  Dwarf_Die* FindCu(uint64_t pc, Dwarf_Addr* bias) {
    Dwarf_Die* cu_die = dwfl_module_addrdie(mod_, pc, bias);
    if (cu_die != nullptr) return cu_die;
    if (!cu_ranges_loaded_) LoadCuRanges();
    *bias = cu_bias_;
    const Dwarf_Addr dwarf_pc = pc - cu_bias_;
    auto it = std::upper_bound(cu_ranges_.begin(), cu_ranges_.end(), dwarf_pc,
                               [](Dwarf_Addr value, const CuRange& r) { return value < r.low; });
    for (int steps = 0; it != cu_ranges_.begin() && steps < 64; ++steps) {
      --it;
      if (dwarf_pc < it->high) return &it->die;
    }
    return nullptr;
  }

  void LoadCuRanges() {
    cu_ranges_loaded_ = true;
    Dwarf_Addr bias = 0;
    for (Dwarf_Die* cu = dwfl_module_nextcu(mod_, nullptr, &bias); cu != nullptr;
         cu = dwfl_module_nextcu(mod_, cu, &bias)) {
      cu_bias_ = bias;
      Dwarf_Addr base = 0, low = 0, high = 0;
      ptrdiff_t offset = 0;
      while ((offset = dwarf_ranges(cu, offset, &base, &low, &high)) > 0) {
        if (high > low) cu_ranges_.push_back({low, high, *cu});
      }
    }
    std::sort(cu_ranges_.begin(), cu_ranges_.end(),
              [](const CuRange& a, const CuRange& b) { return a.low < b.low; });
  }

  CuIndex& Cu(Dwarf_Die cu_die) {
    Dwarf_Off offset = dwarf_dieoffset(&cu_die);
    auto it = cus_.find(offset);
    if (it == cus_.end()) it = cus_.emplace(offset, std::make_unique<CuIndex>(cu_die)).first;
    return *it->second;
  }

  struct DieName {
    std::string text;
    bool from_linkage_name = false;
  };

  // The function's name: demangled from its linkage name (following
  // abstract origins and specifications), complete with scopes and
  // parameters. Without one (C, main, C++ with internal linkage, lambdas),
  // its DW_AT_name qualified by the scopes that enclose its declaration
  // ("ns::(anonymous namespace)::Class::Method").
  const DieName& FunctionName(Dwarf_Die die) {
    // Offsets are per file (a split unit's .dwo starts at 0): key by unit too.
    const std::pair<Dwarf_CU*, Dwarf_Off> key(die.cu, dwarf_dieoffset(&die));
    auto it = names_.find(key);
    if (it != names_.end()) return it->second;
    DieName name;
    Dwarf_Attribute attr;
    const char* linkage = dwarf_formstring(dwarf_attr_integrate(&die, DW_AT_linkage_name, &attr));
    if (linkage == nullptr) {
      linkage = dwarf_formstring(dwarf_attr_integrate(&die, DW_AT_MIPS_linkage_name, &attr));
    }
    if (linkage != nullptr) {
      name.text = Demangle(linkage);
      name.from_linkage_name = true;
    } else {
      name.text = ScopedName(die);
    }
    return names_.insert_or_assign(key, std::move(name)).first->second;
  }

  // DW_AT_name of the declaration of `die` with its enclosing namespaces,
  // classes and function prefixed.
  std::string ScopedName(Dwarf_Die die) {
    Dwarf_Die decl = die;
    for (int hops = 0; hops < 16 && !dwarf_hasattr(&decl, DW_AT_name); ++hops) {
      Dwarf_Attribute attr;
      Dwarf_Attribute* ref = dwarf_attr(&decl, DW_AT_abstract_origin, &attr);
      if (ref == nullptr) ref = dwarf_attr(&decl, DW_AT_specification, &attr);
      Dwarf_Die next;
      if (ref == nullptr || dwarf_formref_die(ref, &next) == nullptr) break;
      decl = next;
    }
    const char* own = dwarf_diename(&decl);
    if (own == nullptr) return "";
    std::string name = own;
    const Parents& parents = ParentsOf(decl);
    Dwarf* dwarf = decl.cu == nullptr ? nullptr : dwarf_cu_getdwarf(decl.cu);
    Dwarf_Off child = dwarf_dieoffset(&decl);
    for (int depth = 0; dwarf != nullptr && depth < 64; ++depth) {
      auto parent = parents.find(child);
      if (parent == parents.end()) break;
      Dwarf_Die scope;
      if (dwarf_offdie(dwarf, parent->second, &scope) == nullptr) break;
      const char* scope_name = dwarf_diename(&scope);
      switch (dwarf_tag(&scope)) {
        case DW_TAG_namespace:
          name = absl::StrCat(scope_name != nullptr ? scope_name : "(anonymous namespace)",
                              "::", name);
          break;
        case DW_TAG_class_type:
        case DW_TAG_structure_type:
        case DW_TAG_union_type: {
          // An unnamed class local to a function is a lambda's closure.
          auto grandparent = parents.find(parent->second);
          Dwarf_Die outer;
          bool in_function =
              grandparent != parents.end() &&
              dwarf_offdie(dwarf, grandparent->second, &outer) != nullptr &&
              (dwarf_tag(&outer) == DW_TAG_subprogram || dwarf_tag(&outer) == DW_TAG_lexical_block);
          name = absl::StrCat(scope_name != nullptr ? scope_name
                              : in_function         ? "{lambda}"
                                                    : "{anonymous}",
                              "::", name);
          break;
        }
        case DW_TAG_subprogram: {
          const std::string& function = FunctionName(scope).text;
          if (!function.empty()) name = absl::StrCat(function, "::", name);
          return name;  // already qualified
        }
        default:  // lexical blocks
          break;
      }
      child = parent->second;
    }
    return name;
  }

  // DIE offset -> offset of the enclosing scope DIE, for the namespaces,
  // classes, functions and blocks of one unit (libdw keeps no parent links).
  using Parents = absl::flat_hash_map<Dwarf_Off, Dwarf_Off>;

  const Parents& ParentsOf(Dwarf_Die die) {
    auto [it, inserted] = parents_.try_emplace(die.cu);
    if (inserted) {
      Dwarf_Die unit;
      if (dwarf_diecu(&die, &unit, nullptr, nullptr) != nullptr) AddParents(&unit, &it->second);
    }
    return it->second;
  }

  static void AddParents(Dwarf_Die* die, Parents* parents) {
    Dwarf_Die child;
    if (dwarf_child(die, &child) != 0) return;
    const Dwarf_Off offset = dwarf_dieoffset(die);
    do {
      switch (dwarf_tag(&child)) {
        case DW_TAG_namespace:
        case DW_TAG_class_type:
        case DW_TAG_structure_type:
        case DW_TAG_union_type:
        case DW_TAG_subprogram:
        case DW_TAG_lexical_block:
          parents->emplace(dwarf_dieoffset(&child), offset);
          AddParents(&child, parents);
          break;
        default:
          break;
      }
    } while (dwarf_siblingof(&child, &child) == 0);
  }

  static void FillFromLine(Dwarf_Line* line, SourceFrame* frame) {
    if (line == nullptr) return;
    const char* file = dwarf_linesrc(line, nullptr, nullptr);
    if (file != nullptr) frame->file = file;
    int number = 0;
    if (dwarf_lineno(line, &number) == 0) frame->line = number;
    int column = 0;
    if (dwarf_linecol(line, &column) == 0) frame->column = column;
  }

  // The call site of inlined instance `callee`, in the frame that contains it.
  static void FillFromCallSite(CuIndex* cu, Dwarf_Die callee, SourceFrame* frame) {
    Dwarf_Attribute attr;
    Dwarf_Word value = 0;
    if (dwarf_formudata(dwarf_attr(&callee, DW_AT_call_file, &attr), &value) == 0) {
      Dwarf_Files* files = nullptr;
      size_t count = 0;
      if (dwarf_getsrcfiles(cu->scope_die(), &files, &count) == 0 && value < count) {
        const char* file = dwarf_filesrc(files, value, nullptr, nullptr);
        if (file != nullptr) frame->file = file;
      }
    }
    if (dwarf_formudata(dwarf_attr(&callee, DW_AT_call_line, &attr), &value) == 0) {
      frame->line = static_cast<int>(value);
    }
    if (dwarf_formudata(dwarf_attr(&callee, DW_AT_call_column, &attr), &value) == 0) {
      frame->column = static_cast<int>(value);
    }
  }

  // The ELF symbol (.symtab, else .dynsym) covering `pc`; nullptr if none.
  const ElfSymbol* SymbolAt(uint64_t pc) {
    if (!symbols_loaded_) LoadSymbols();
    auto it = std::upper_bound(symbols_.begin(), symbols_.end(), pc,
                               [](uint64_t value, const ElfSymbol& s) { return value < s.start; });
    // Symbols may nest (an alias spanning several); look back a little.
    for (int steps = 0; it != symbols_.begin() && steps < 16; ++steps) {
      --it;
      if (pc - it->start < std::max<uint64_t>(it->size, 1)) return &*it;
    }
    return nullptr;
  }

  // Its demangled name; empty when there is none.
  std::string SymbolName(uint64_t pc) {
    const ElfSymbol* symbol = SymbolAt(pc);
    if (symbol == nullptr) return "";
    return DemangleSymbol(symbol->name);
  }

  void LoadSymbols() {
    symbols_loaded_ = true;
    int count = dwfl_module_getsymtab(mod_);
    for (int i = 1; i < count; ++i) {
      GElf_Sym sym;
      GElf_Addr address = 0;
      GElf_Word shndx = 0;
      const char* name = dwfl_module_getsym_info(mod_, i, &sym, &address, &shndx, nullptr, nullptr);
      if (name == nullptr || *name == '\0' || shndx == SHN_UNDEF) continue;
      int type = GELF_ST_TYPE(sym.st_info);
      if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
      int bind = GELF_ST_BIND(sym.st_info);
      // Prefer global names, then weak, then local; then fewer leading
      // underscores (malloc over __libc_malloc).
      int rank = (bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2) * 64;
      for (const char* p = name; *p == '_' && rank % 64 < 63; ++p) ++rank;
      symbols_.push_back({address, sym.st_size, name, rank});
    }
    // By address; at one address the preferred name last, so that the
    // backward search in SymbolName meets it first.
    std::sort(symbols_.begin(), symbols_.end(), [](const ElfSymbol& a, const ElfSymbol& b) {
      if (a.start != b.start) return a.start < b.start;
      return a.rank > b.rank;
    });
  }

  Dwfl* dwfl_ = nullptr;
  Dwfl_Module* mod_ = nullptr;
  DebugSearch search_;
  bool dwarf_checked_ = false;
  Dwarf* dwarf_ = nullptr;
  absl::flat_hash_map<Dwarf_Off, std::unique_ptr<CuIndex>> cus_;
  struct CuRange {
    Dwarf_Addr low;
    Dwarf_Addr high;
    Dwarf_Die die;
  };
  bool cu_ranges_loaded_ = false;
  std::vector<CuRange> cu_ranges_;  // sorted by low; only without .debug_aranges
  Dwarf_Addr cu_bias_ = 0;
  // Node maps: references into them survive the recursion that fills them.
  absl::node_hash_map<std::pair<Dwarf_CU*, Dwarf_Off>, DieName> names_;
  absl::node_hash_map<Dwarf_CU*, Parents> parents_;
  bool symbols_loaded_ = false;
  std::vector<ElfSymbol> symbols_;
};

// ---------------------------------------------------------------------------
// Modules as snapshots record them, and per-snapshot indexes.

struct ModuleSlot {
  std::string path;      // as recorded
  std::string build_id;  // raw bytes, as recorded
  bool resolved = false;
  DebugModule* debug = nullptr;                               // null: module+offset only
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
    SnapshotIndex& index = IndexFor(snapshot);
    const uint64_t key = address;
    auto found = index.results.find(key);
    if (found != index.results.end()) return *found->second;
    const SymbolizedAddress& result = Resolve(index, address);
    index.results.emplace(key, &result);
    return result;
  }

  std::vector<std::string> TakeWarnings() { return std::exchange(warnings_, {}); }

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
      std::unique_ptr<DebugModule> module =
          DebugModule::Open(slot->path, file, *opened, options_.sysroot, &debug_dirs_);
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
  absl::flat_hash_map<std::string, std::unique_ptr<DebugModule>> debug_modules_;
  absl::flat_hash_map<std::string, std::unique_ptr<ModuleSlot>> slots_;
  absl::flat_hash_map<std::string, std::unique_ptr<SnapshotIndex>> indexes_;
  absl::node_hash_map<uint64_t, SymbolizedAddress> unmapped_;
  // Every module's results (see the top of the file).
  std::deque<SymbolizedAddress> storage_;
  Fingerprint last_fingerprint_;
  SnapshotIndex* last_index_ = nullptr;
};

Symbolizer::Symbolizer(SymbolizerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

Symbolizer::~Symbolizer() = default;

const SymbolizedAddress& Symbolizer::Symbolize(const v1::Snapshot& snapshot, uint64_t address,
                                               int frame_index) {
  return impl_->Symbolize(snapshot, address, frame_index);
}

std::vector<std::string> Symbolizer::TakeWarnings() { return impl_->TakeWarnings(); }

std::string ModuleOffsetString(const SymbolizedAddress& address, uint64_t raw_address) {
  if (address.module.empty()) return absl::StrCat("0x", absl::Hex(raw_address));
  return absl::StrCat(Basename(address.module), "+0x", absl::Hex(address.module_offset));
}

}  // namespace retain::tool
