// libFuzzer target for the category rules parser (tools/lib/rules.h): the
// bytes are a rules file's contents (protobuf text format,
// proto/rules.proto), given to ParseRules, the function LoadRules hands
// every file to (after the bounded read).
//
// Beyond not crashing (the standard library's regex compiler recurses: a
// deeply nested pattern must be refused, not overflow the stack), hanging or
// allocating without bound: a refusal is one line naming the input; accepted
// rules have a name and at least one frame regex per category, and every
// regex compiles (the owner resolver compiles them again and relies on it).
//
// Seeds: share/rules (the shipped rules) and tests/fuzz/corpus-rules.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tools/lib/rules.h"

namespace {

constexpr absl::string_view kName = "fuzz.textproto";

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<retain::v1::Rules> rules = retain::tool::ParseRules(text, kName);
  if (!rules.ok()) {
    const absl::string_view message = rules.status().message();
    Check(absl::StartsWith(message, absl::StrCat(kName, ": ")), "message names the input");
    Check(!absl::StrContains(message, "\n"), "message is one line");
    return 0;
  }
  for (const retain::v1::Category& category : rules->category()) {
    Check(!category.name().empty(), "every category has a name");
    Check(!category.frame().empty(), "every category has a frame regex");
    for (const std::string& frame : category.frame()) {
      // Matching is left out: std::regex backtracks, and a pattern such as
      // (a*)*b is exponential on some names. That is the rules author's
      // choice to make, not a parsing problem.
      try {
        std::regex compiled(frame, retain::tool::kRuleRegexFlags);
      } catch (const std::regex_error&) {
        Check(false, "an accepted regex compiles");
      }
    }
  }
  return 0;
}
