// owner: see owner.h.
#include "tools/lib/owner.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/lib/domain.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

// A function name without its parameter list and, for templates, without
// the return type the demangler puts first:
//   "void* std::vector<int>::emplace_back<int>(int&&) const" ->
//   "std::vector<int>::emplace_back<int>"
std::string ShortFunctionName(const std::string& name) {
  std::string result = name;
  // Parameters: the last balanced "(...)" at the end (after an optional
  // " const"), unless it is "operator()" itself.
  size_t end = result.rfind(')');
  if (end != std::string::npos &&
      result.find_first_not_of(" const&", end + 1) == std::string::npos) {
    int depth = 0;
    for (size_t i = end + 1; i-- > 0;) {
      if (result[i] == ')') ++depth;
      if (result[i] == '(' && --depth == 0) {
        bool call_operator = i >= 8 && result.compare(i - 8, 8, "operator") == 0 &&
                             i + 1 < result.size() && result[i + 1] == ')';
        if (!call_operator && i > 0) result.resize(i);
        break;
      }
    }
  }
  // Return type: everything up to the last space outside <> and (), unless
  // that space belongs to "operator new", "operator delete[]" and the like.
  int angle = 0, paren = 0;
  size_t cut = std::string::npos;
  for (size_t i = 0; i < result.size(); ++i) {
    char c = result[i];
    if (c == '<') ++angle;
    if (c == '>' && angle > 0) --angle;
    if (c == '(') ++paren;
    if (c == ')' && paren > 0) --paren;
    if (c == ' ' && angle == 0 && paren == 0) {
      if (i >= 8 && result.compare(i - 8, 8, "operator") == 0) continue;
      cut = i;
    }
  }
  if (cut != std::string::npos) result = result.substr(cut + 1);
  return result;
}

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Code cgo generated, by its file: the C function an exported Go function
// is called through carries the Go function's own name, so only its file
// (_cgo_export.c) tells it apart.
bool IsCgoGenerated(const std::string& location) {
  return absl::StartsWith(location, "_cgo_export.c:") ||
         absl::StartsWith(location, "_cgo_gotypes.go:") ||
         absl::StartsWith(location, "cgo-gcc-prolog:");
}

// One source-level frame of a stack, flattened (inlined frames included).
struct FlatFrame {
  std::string function;  // short name; empty if unknown
  std::string location;  // "file:line" or ""
  std::string module;    // base name of the module
  std::string fallback;  // "module+0x1234" when there is no function
  std::string Display(bool with_line) const {
    if (function.empty()) return fallback;
    if (!with_line || location.empty()) return function;
    return absl::StrCat(function, " (", location, ")");
  }
};

std::vector<FlatFrame> Flatten(Symbolizer& symbolizer, const v1::Snapshot& snapshot,
                               const v1::Stack& stack) {
  std::vector<FlatFrame> flat;
  for (int i = 0; i < stack.frames_size(); ++i) {
    const SymbolizedAddress& symbolized = symbolizer.Symbolize(snapshot, stack.frames(i), i);
    std::string fallback = ModuleOffsetString(symbolized, stack.frames(i));
    std::string module = BaseName(symbolized.module);
    if (symbolized.frames.empty()) {
      flat.push_back({"", "", module, fallback});
      continue;
    }
    for (const SourceFrame& frame : symbolized.frames) {
      std::string location;
      if (!frame.file.empty() && frame.line > 0) {
        location = absl::StrCat(BaseName(frame.file), ":", frame.line);
      }
      flat.push_back({ShortFunctionName(frame.function), location, module, fallback});
    }
  }
  return flat;
}

}  // namespace

bool ParseGroupBy(absl::string_view text, GroupBy* by) {
  static const std::pair<const char*, GroupBy> kNames[] = {
      {"site", GroupBy::kSite},        {"stack", GroupBy::kStack}, {"function", GroupBy::kFunction},
      {"module", GroupBy::kModule},    {"kind", GroupBy::kKind},   {"tag", GroupBy::kTag},
      {"category", GroupBy::kCategory}};
  for (const auto& [name, value] : kNames) {
    if (text == name) {
      *by = value;
      return true;
    }
  }
  return false;
}

const char* GroupByName(GroupBy by) {
  switch (by) {
    case GroupBy::kSite:
      return "site";
    case GroupBy::kStack:
      return "stack";
    case GroupBy::kFunction:
      return "function";
    case GroupBy::kModule:
      return "module";
    case GroupBy::kKind:
      return "kind";
    case GroupBy::kTag:
      return "tag";
    case GroupBy::kCategory:
      return "category";
  }
  return "site";
}

const std::vector<std::string>& DefaultSkipPatterns() {
  static const std::vector<std::string>* const kPatterns = new std::vector<std::string>{
      // The allocation functions themselves and libc's allocating helpers.
      "^(malloc|calloc|realloc|reallocarray|free|posix_memalign|aligned_alloc|memalign|valloc|"
      "pvalloc|mmap|mmap64|mremap|strdup|strndup|__strdup|__strndup|asprintf|vasprintf|"
      "open_memstream|__libc_.*|_dl_.*|__GI_.*)$",
      // stdio buffers belong to whoever did the I/O.
      "^_IO_", "^__vfprintf_internal$", "^outstring_func$",
      // C++ allocation and its exception objects.
      "^operator new", "^operator delete", "^__cxa_allocate_exception",
      // The standard library's allocators, smart pointers and containers
      // (a container growing is the owner's doing, not the container's).
      "^__gnu_cxx::new_allocator", "^std::__new_allocator", "^std::allocator",
      "^std::__allocated_ptr", "^std::__allocate_guarded", "^std::_Vector_base",
      "^std::vector<.*>::", "^std::__cxx11::basic_string", "^std::basic_string", "^std::_Hashtable",
      "^std::__detail::", "^std::_Rb_tree", "^std::_Deque_base", "^std::deque<",
      "^std::__cxx11::list<", "^std::_List_base",
      "^std::(map|set|multimap|multiset|unordered_map|unordered_set)<", "^std::__shared_count",
      "^std::__shared_ptr", "^std::shared_ptr", "^std::_Sp_", "^std::make_shared",
      "^std::allocate_shared", "^std::make_unique", "^std::__uninitialized", "^std::_Construct",
      "^std::construct_at", "^std::pair<", "^std::tuple<", "^std::_Tuple_impl",
      // Aligned-allocation wrappers in native servers (ggml and friends).
      "_aligned_malloc$", "_aligned_alloc$"};
  return *kPatterns;
}

const std::vector<std::string>& CgoPlumbingPatterns() {
  static const std::vector<std::string>* const kPatterns = new std::vector<std::string>{
      // The C wrappers cgo generates (_cgo_<hash>_Cfunc_f), its helpers and
      // the C side of exported Go functions (_cgoexp_<hash>_f).
      "^_cgo_", "^_cgoexp_",
      // The Go wrappers of C functions (pkg._Cfunc_f, pkg._cgo_cmalloc).
      "\\._Cfunc_", "\\._cgo_",
      // The runtime's way into C and back (C calling Go: crosscall2 ->
      // cgocallback), and onto the thread's stack for its own work.
      "^crosscall2$", "^runtime\\.(asmcgocall|cgocall|cgocallback|systemstack|mcall|morestack)",
      // The Go heap's own mappings go through runtime/cgo's mmap.
      "^x_cgo_(mmap|munmap)$", "^runtime\\.callCgo", "^runtime\\.(mmap|munmap)(\\.func[0-9]+)?$"};
  return *kPatterns;
}

absl::StatusOr<std::unique_ptr<OwnerResolver>> OwnerResolver::Create(Symbolizer& symbolizer,
                                                                     OwnerOptions options) {
  std::unique_ptr<OwnerResolver> resolver(new OwnerResolver(symbolizer, std::move(options)));
  std::vector<std::string> patterns = DefaultSkipPatterns();
  for (const std::string& cgo : CgoPlumbingPatterns()) {
    patterns.push_back(cgo);
    resolver->cgo_skip_.emplace_back(cgo, kRuleRegexFlags);
  }
  for (const std::string& extra : resolver->options_.extra_skip) patterns.push_back(extra);
  for (const std::string& pattern : patterns) {
    // Checked first: a pathological pattern overflows std::regex's stack.
    if (absl::Status checked = CheckFrameRegex(pattern); !checked.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--skip: ", checked.message()));
    }
    resolver->skip_.emplace_back(pattern, kRuleRegexFlags);
  }
  if (resolver->options_.rules != nullptr) {
    for (const v1::Category& category : resolver->options_.rules->category()) {
      CompiledCategory compiled{&category, {}};
      for (const std::string& frame : category.frame()) {
        try {
          compiled.frames.emplace_back(frame, kRuleRegexFlags);
        } catch (const std::regex_error& e) {
          return absl::InvalidArgumentError(
              absl::StrCat("category ", category.name(), ": bad regex '", frame, "': ", e.what()));
        }
      }
      resolver->categories_.push_back(std::move(compiled));
    }
  }
  return resolver;
}

bool OwnerResolver::IsPlumbing(const std::string& function) {
  if (function.empty()) return false;
  auto it = plumbing_cache_.find(function);
  if (it != plumbing_cache_.end()) return it->second;
  bool plumbing = false;
  for (const std::regex& pattern : skip_) {
    if (std::regex_search(function, pattern)) {
      plumbing = true;
      break;
    }
  }
  plumbing_cache_.emplace(function, plumbing);
  return plumbing;
}

bool OwnerResolver::IsCgoPlumbing(const std::string& function, const std::string& location) const {
  if (IsCgoGenerated(location)) return true;
  for (const std::regex& pattern : cgo_skip_) {
    if (std::regex_search(function, pattern)) return true;
  }
  return false;
}

const v1::Category* OwnerResolver::CategoryOf(const std::vector<std::string>& names) const {
  for (const CompiledCategory& category : categories_) {
    for (const std::string& name : names) {
      for (const std::regex& pattern : category.frames) {
        if (std::regex_search(name, pattern)) return category.category;
      }
    }
  }
  return nullptr;
}

const Owner& OwnerResolver::Resolve(const v1::Snapshot& snapshot, uint32_t stack_id, v1::Kind kind,
                                    uint32_t tag_id, uint32_t device) {
  std::string key = absl::StrCat(reinterpret_cast<uintptr_t>(&snapshot), ":", stack_id, ":",
                                 static_cast<int>(kind), ":", tag_id, ":", device);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  return cache_.emplace(key, Compute(snapshot, stack_id, kind, tag_id, device)).first->second;
}

Owner OwnerResolver::Compute(const v1::Snapshot& snapshot, uint32_t stack_id, v1::Kind kind,
                             uint32_t tag_id, uint32_t device) {
  Owner owner;
  std::vector<FlatFrame> flat;
  if (const v1::Stack* stack = FindStack(snapshot, stack_id)) {
    flat = Flatten(symbolizer_, snapshot, *stack);
  }
  const bool lines = !options_.keys_without_lines;
  for (const FlatFrame& frame : flat) owner.frames.push_back(frame.Display(true));

  // The site: the first frame that is not plumbing.
  size_t site = 0;
  while (site < flat.size() &&
         (IsPlumbing(flat[site].function) || IsCgoGenerated(flat[site].location))) {
    ++site;
  }
  if (site == flat.size()) site = 0;  // all plumbing (or none): the innermost frame

  std::vector<std::string> names;
  for (const FlatFrame& frame : flat) {
    names.push_back(frame.function.empty() ? frame.fallback : frame.function);
  }
  if (const v1::Category* category = CategoryOf(names)) {
    owner.category = category->name();
    owner.bounded = category->bounded();
  }

  switch (options_.by) {
    case GroupBy::kSite:
      if (flat.empty()) {
        owner.key = owner.display = "(no stack)";
      } else {
        owner.key = flat[site].Display(lines);
        owner.display = flat[site].Display(true);
        for (size_t i = site + 1;
             i < flat.size() &&
             owner.chain.size() < static_cast<size_t>(std::max(options_.chain_depth, 0));
             ++i) {
          // The callers, without cgo's plumbing between C and Go (a call
          // from Go to C takes five frames of it).
          if (IsCgoPlumbing(flat[i].function, flat[i].location)) continue;
          owner.chain.push_back(flat[i].Display(true));
        }
      }
      break;
    case GroupBy::kFunction:
      owner.key = owner.display =
          flat.empty() ? "(no stack)"
                       : (flat[site].function.empty() ? flat[site].fallback : flat[site].function);
      break;
    case GroupBy::kStack: {
      std::vector<std::string> keys;
      for (const FlatFrame& frame : flat) keys.push_back(frame.Display(lines));
      owner.key = keys.empty() ? "(no stack)" : absl::StrJoin(keys, ";");
      owner.display = flat.empty() ? "(no stack)" : flat[site].Display(true);
      owner.chain = owner.frames;
      break;
    }
    case GroupBy::kModule:
      owner.key = owner.display =
          flat.empty() || flat[site].module.empty() ? "(unknown module)" : flat[site].module;
      break;
    case GroupBy::kKind:
      owner.key = owner.display = KindName(kind);
      break;
    case GroupBy::kTag: {
      owner.key = owner.display = "(untagged)";
      for (const v1::Tag& tag : snapshot.tags()) {
        if (tag.id() == tag_id && tag_id != 0) {
          owner.key = tag.request_id().empty() ? absl::StrCat("#", tag.id()) : tag.request_id();
          owner.display = absl::StrCat(owner.key, tag.path().empty() ? "" : " ", tag.method(),
                                       tag.path().empty() ? "" : " ", tag.path());
          break;
        }
      }
      break;
    }
    case GroupBy::kCategory:
      owner.key = owner.display = owner.category.empty() ? "(uncategorized)" : owner.category;
      break;
  }
  if (IsDeviceKind(kind)) {
    owner.domain = DomainName(snapshot, kind, device);
    absl::StrAppend(&owner.key, " @", owner.domain);
  }
  return owner;
}

}  // namespace retain::tool
