// dwarf_module: see dwarf_module.h.
#include "tools/lib/dwarf_module.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/debug_file_search.h"

namespace retain::tool::symbolizer_internal {
namespace {

constexpr uint32_t kNoNode = ~uint32_t{0};

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

// ---------------------------------------------------------------------------
// DWARF index of one compilation unit.

struct ScopeNode {
  Dwarf_Die die;  // DW_TAG_subprogram or DW_TAG_inlined_subroutine
  int tag = 0;
  std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>> ranges;  // [low, high), DWARF addresses
  std::vector<uint32_t> children;
  // Lines to take off DW_AT_call_line (an inlined call in a file cgo
  // rewrote, compiled by Go before 1.21: see CuIndex::FixGoCallLines).
  int call_line_fix = 0;

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
    if (NeedsGoCallLineFix()) FixGoCallLines();
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

  // Go before 1.21 writes an inlined call's DW_AT_call_line as the line in
  // the file the compiler read, not the line a //line directive says
  // (golang/go#58648; DW_AT_call_file and the line table do follow the
  // directives). cgo rewrites every file that imports "C" into one that
  // starts with three lines of its own ("// Code generated by cmd/cgo...",
  // "", "//line FILE:1:1") followed by the file, so inlined calls there
  // (C.malloc's wrapper is one) read 3 lines too far down. Only units of
  // packages that use cgo (their line table names _cgo_gotypes.go) built by
  // such a Go are looked at.
  bool NeedsGoCallLineFix() {
    Dwarf_Attribute attr;
    Dwarf_Word language = 0;
    if (dwarf_formudata(dwarf_attr(&cu_die_, DW_AT_language, &attr), &language) != 0 ||
        language != DW_LANG_Go) {
      return false;
    }
    const char* producer = dwarf_formstring(dwarf_attr(&cu_die_, DW_AT_producer, &attr));
    const char* version = producer == nullptr ? nullptr : std::strstr(producer, " go1.");
    if (version == nullptr) return false;
    const int minor = std::atoi(version + 5);
    if (minor <= 0 || minor >= 21) return false;
    Dwarf_Files* files = nullptr;
    size_t count = 0;
    if (dwarf_getsrcfiles(&cu_die_, &files, &count) != 0) return false;
    for (size_t i = 0; i < count; ++i) {
      const char* name = dwarf_filesrc(files, i, nullptr, nullptr);
      if (name != nullptr && absl::EndsWith(name, "_cgo_gotypes.go")) return true;
    }
    return false;
  }

  // Which files of the unit cgo rewrote is not written anywhere, so the
  // line table tells: an inlined call's line appears among the lines of the
  // code around it (the call's own instructions, in the caller). Per file,
  // the call sites whose line is there only after taking cgo's 3 lines off
  // outvote those whose line is there as written: then every inlined call
  // in that file is 3 lines lower.
  void FixGoCallLines() {
    constexpr int kCgoHeaderLines = 3;
    Dwarf_Lines* lines = nullptr;
    size_t line_count = 0;
    if (dwarf_getsrclines(&cu_die_, &lines, &line_count) != 0) return;
    struct Row {
      Dwarf_Addr address;
      const char* file;
      int line;
    };
    std::vector<Row> rows;
    rows.reserve(line_count);
    for (size_t i = 0; i < line_count; ++i) {
      Dwarf_Line* line = dwarf_onesrcline(lines, i);
      Row row{};
      if (line == nullptr || dwarf_lineaddr(line, &row.address) != 0 ||
          dwarf_lineno(line, &row.line) != 0) {
        continue;
      }
      row.file = dwarf_linesrc(line, nullptr, nullptr);
      if (row.file != nullptr) rows.push_back(row);
    }
    std::sort(rows.begin(), rows.end(),
              [](const Row& a, const Row& b) { return a.address < b.address; });
    Dwarf_Files* files = nullptr;
    size_t file_count = 0;
    if (dwarf_getsrcfiles(&cu_die_, &files, &file_count) != 0) return;

    // The (file, line) pairs of a scope's own code: its rows outside the
    // calls inlined into it.
    auto own_lines = [&](const ScopeNode& scope) {
      std::vector<std::pair<std::string, int>> own;
      for (const auto& [low, high] : scope.ranges) {
        auto row = std::lower_bound(rows.begin(), rows.end(), low,
                                    [](const Row& r, Dwarf_Addr a) { return r.address < a; });
        for (; row != rows.end() && row->address < high; ++row) {
          bool inlined = false;
          for (uint32_t child : scope.children) {
            if (nodes_[child].tag == DW_TAG_inlined_subroutine &&
                nodes_[child].Contains(row->address)) {
              inlined = true;
              break;
            }
          }
          if (!inlined) own.emplace_back(row->file, row->line);
        }
      }
      std::sort(own.begin(), own.end());
      return own;
    };
    absl::flat_hash_map<std::string, std::pair<int, int>> votes;  // file -> (as written, fixed)
    for (ScopeNode& scope : nodes_) {
      std::vector<std::pair<std::string, int>> own;
      bool own_known = false;
      for (uint32_t child : scope.children) {
        const ScopeNode& call = nodes_[child];
        if (call.tag != DW_TAG_inlined_subroutine) continue;
        Dwarf_Die die = call.die;
        Dwarf_Attribute attr;
        Dwarf_Word file_index = 0;
        Dwarf_Word line = 0;
        if (dwarf_formudata(dwarf_attr(&die, DW_AT_call_file, &attr), &file_index) != 0 ||
            dwarf_formudata(dwarf_attr(&die, DW_AT_call_line, &attr), &line) != 0 ||
            file_index >= file_count || line <= static_cast<Dwarf_Word>(kCgoHeaderLines)) {
          continue;
        }
        const char* file = dwarf_filesrc(files, file_index, nullptr, nullptr);
        if (file == nullptr) continue;
        if (!own_known) {
          own = own_lines(scope);
          own_known = true;
        }
        const bool as_written = std::binary_search(
            own.begin(), own.end(), std::make_pair(std::string(file), static_cast<int>(line)));
        const bool fixed = std::binary_search(
            own.begin(), own.end(),
            std::make_pair(std::string(file), static_cast<int>(line) - kCgoHeaderLines));
        if (as_written == fixed) continue;  // neither, or both: no evidence
        auto& [written_votes, fixed_votes] = votes[file];
        ++(as_written ? written_votes : fixed_votes);
      }
    }
    for (ScopeNode& call : nodes_) {
      if (call.tag != DW_TAG_inlined_subroutine) continue;
      Dwarf_Attribute attr;
      Dwarf_Word file_index = 0;
      if (dwarf_formudata(dwarf_attr(&call.die, DW_AT_call_file, &attr), &file_index) != 0 ||
          file_index >= file_count) {
        continue;
      }
      const char* file = dwarf_filesrc(files, file_index, nullptr, nullptr);
      auto it = file == nullptr ? votes.end() : votes.find(file);
      if (it != votes.end() && it->second.second > it->second.first) {
        call.call_line_fix = kCgoHeaderLines;
      }
    }
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

class DebugModule final : public DwarfModule {
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
    module->dwfl_ = dwfl_begin(&kDebugFileCallbacks);
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

  ~DebugModule() override {
    if (dwfl_ != nullptr) dwfl_end(dwfl_);
  }

  // The GNU build-id of the file libdwfl opened; empty if none.
  std::string BuildId() const override {
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    int size = dwfl_module_build_id(mod_, &bits, &vaddr);
    if (size <= 0 || bits == nullptr) return "";
    return std::string(reinterpret_cast<const char*>(bits), static_cast<size_t>(size));
  }

  // Source frames for a module address (a return address minus one);
  // empty when nothing is known.
  std::vector<SourceFrame> Lookup(uint64_t pc) override {
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
            FillFromCallSite(&cu, cu.node(chain[i - 1]), &frame);
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
    if (cu_die != nullptr && CuCovers(cu_die, pc - *bias)) return cu_die;
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

  // Whether the unit libdwfl chose really holds `dwarf_pc`. libdwfl
  // (0.188, libdwfl/cu.c addrarange) takes the arange that starts last at
  // or before the address without checking where it ends, as if the aranges
  // covered the text without gaps. In a cgo program only the C units have
  // aranges (Go's linker writes none for Go code), so every Go address got
  // the C unit before it (runtime/cgo's gcc_mmap.c) and that unit's last
  // line ("gcc_mmap.c:37"). Asked of the unit's own ranges, else of the
  // aranges with their lengths (a unit that names no ranges of its own).
  bool CuCovers(Dwarf_Die* cu_die, Dwarf_Addr dwarf_pc) {
    if (dwarf_haspc(cu_die, dwarf_pc) > 0) return true;
    Dwarf_Aranges* aranges = nullptr;
    size_t count = 0;
    Dwarf* dwarf = cu_die->cu != nullptr ? dwarf_cu_getdwarf(cu_die->cu) : nullptr;
    if (dwarf == nullptr || dwarf_getaranges(dwarf, &aranges, &count) != 0) return false;
    Dwarf_Arange* arange = dwarf_getarange_addr(aranges, dwarf_pc);
    Dwarf_Off offset = 0;
    return arange != nullptr && dwarf_getarangeinfo(arange, nullptr, nullptr, &offset) == 0 &&
           offset == dwarf_dieoffset(cu_die);
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
  static void FillFromCallSite(CuIndex* cu, const ScopeNode& node, SourceFrame* frame) {
    Dwarf_Die callee = node.die;
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
      frame->line = static_cast<int>(value) - node.call_line_fix;
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

}  // namespace

std::unique_ptr<DwarfModule> OpenDwarfModule(const std::string& module_path,
                                             const std::string& file_path, int fd,
                                             const std::string& sysroot,
                                             const std::vector<std::string>* dirs) {
  return DebugModule::Open(module_path, file_path, fd, sysroot, dirs);
}

}  // namespace retain::tool::symbolizer_internal
