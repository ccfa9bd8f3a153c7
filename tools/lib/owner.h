// owner: decides who owns an allocation, for grouping rows in retain-diff.
//
// The owner depends on the grouping (--by):
//   site      the first frame outside allocator and runtime plumbing
//             (operator new, std::allocator, container growth, malloc
//             wrappers: DefaultSkipPatterns() plus --skip), with its line
//   stack     the whole symbolized stack
//   function  the site's function, without the line
//   module    the module the site's code is in
//   kind      heap, mmap-anon, ...
//   tag       the request tag the allocation carries
//   category  the first --rules category whose frame regex matches
// Keys never contain addresses, so snapshots of different builds or
// processes line up by function (the aggregate diff relies on it); lines
// are left out of keys when `address_free_keys_without_lines` is set (lines
// move between builds).
//
// Thread-compatible. Caches per (snapshot, stack id).
#ifndef RETAIN_TOOLS_LIB_OWNER_H_
#define RETAIN_TOOLS_LIB_OWNER_H_

#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "retain.pb.h"
#include "rules.pb.h"
#include "tools/lib/rules.h"  // LoadRules, for the mains
#include "tools/lib/symbolizer.h"

namespace retain::tool {

enum class GroupBy { kSite, kStack, kFunction, kModule, kKind, kTag, kCategory };

// Parses "site", "stack", ...; false for anything else.
bool ParseGroupBy(absl::string_view text, GroupBy* by);
const char* GroupByName(GroupBy by);

// Regexes (ECMAScript, searched anywhere in a function name) of frames that
// are plumbing, not owners.
const std::vector<std::string>& DefaultSkipPatterns();
// The same for Go's cgo plumbing (docs/go.md), skipped too: cgo's C and Go
// wrappers, the runtime's stack switches between Go and C, the Go heap's
// mmap path. Also left out of a site's callers (Owner::chain). Frames of
// cgo's generated files (_cgo_export.c, _cgo_gotypes.go) count as such.
const std::vector<std::string>& CgoPlumbingPatterns();

struct OwnerOptions {
  GroupBy by = GroupBy::kSite;
  std::vector<std::string> extra_skip;  // --skip, added to the defaults
  const v1::Rules* rules = nullptr;     // --rules; also fills Owner::category
  bool keys_without_lines = false;      // aggregate (cross-build) mode
  int chain_depth = 4;                  // frames shown under a site (--depth)
};

struct Owner {
  std::string key;      // what rows are grouped by
  std::string display;  // how the row is shown
  // "host", or the device domain of a device kind's row ("device:cuda:1",
  // or "device:cuda" for a row that names no device; domain.h). Part of the
  // key: host bytes and each device's never share a row.
  std::string domain = "host";
  std::string category;  // matching --rules category, or empty
  bool bounded = false;  // the category says it is a cache by design
  // For --by site: the call chain below the site (callers), outermost last.
  std::vector<std::string> chain;
  // The symbolized stack, leaf first, one string per source frame (for
  // --folded and the JSON output).
  std::vector<std::string> frames;
};

class OwnerResolver {
 public:
  // Fails when a --skip or --rules regex does not compile.
  static absl::StatusOr<std::unique_ptr<OwnerResolver>> Create(Symbolizer& symbolizer,
                                                               OwnerOptions options);

  // The owner of an allocation with stack `stack_id` (0: none) of `snapshot`,
  // on device `device` (a Device.id of the snapshot; 0: none).
  const Owner& Resolve(const v1::Snapshot& snapshot, uint32_t stack_id, v1::Kind kind,
                       uint32_t tag_id, uint32_t device = 0);

  const OwnerOptions& options() const { return options_; }
  // The first --rules category one of whose regexes matches one of `names`
  // (function names, or module+offset where there is none); null if none.
  const v1::Category* CategoryOf(const std::vector<std::string>& names) const;

  // Drops the owners cached per (snapshot address, stack): call before the
  // snapshots resolved so far are freed, since a later one may reuse an
  // address.
  void ForgetSnapshots() { cache_.clear(); }

  // Switches keys to the cross-build form (no lines) or back; clears the cache.
  void SetKeysWithoutLines(bool without_lines) {
    if (options_.keys_without_lines == without_lines) return;
    options_.keys_without_lines = without_lines;
    cache_.clear();
  }

 private:
  struct CompiledCategory {
    const v1::Category* category;
    std::vector<std::regex> frames;
  };
  OwnerResolver(Symbolizer& symbolizer, OwnerOptions options)
      : symbolizer_(symbolizer), options_(std::move(options)) {}
  Owner Compute(const v1::Snapshot& snapshot, uint32_t stack_id, v1::Kind kind, uint32_t tag_id,
                uint32_t device);
  bool IsPlumbing(const std::string& function);
  bool IsCgoPlumbing(const std::string& function, const std::string& location) const;

  Symbolizer& symbolizer_;
  OwnerOptions options_;
  std::vector<std::regex> skip_;
  std::vector<std::regex> cgo_skip_;
  std::vector<CompiledCategory> categories_;
  absl::flat_hash_map<std::string, bool> plumbing_cache_;
  // Keyed by (snapshot address, stack id, kind, tag, device).
  absl::flat_hash_map<std::string, Owner> cache_;
};

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_OWNER_H_
