// rules: retain-diff's category rules (--rules FILE): protobuf text format,
// proto/rules.proto. Read bounded (input_file.h) and checked once, here, so
// that the owner resolver compiles only regexes known to be sound.
//
// Thread-compatible: no shared state. Every failure is an absl::Status whose
// message names the file and says what is wrong in one line.
#ifndef RETAIN_TOOLS_LIB_RULES_H_
#define RETAIN_TOOLS_LIB_RULES_H_

#include <cstdint>
#include <regex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rules.pb.h"

namespace retain::tool {

// The largest rules file read: 1 MiB (the shipped llama-server rules are
// under 4 KiB; a file larger than this is not a rules file).
inline constexpr uint64_t kMaxRulesFileBytes = uint64_t{1} << 20;
// The longest frame regex (the shipped ones are under 50 characters), and
// the deepest nesting of groups in one. The standard library compiles (and
// matches) regexes recursively: a pattern of 50,000 nested groups
// overflows the stack instead of failing.
inline constexpr size_t kMaxRuleRegexLength = 1024;
inline constexpr int kMaxRuleRegexNesting = 32;
// The longest repetition count ({n,m}) or back-reference (\n): the library
// parses them into a long without checking for overflow.
inline constexpr size_t kMaxRuleRegexNumberDigits = 6;

// How rule and --skip regexes are compiled: ECMAScript, searched anywhere in
// a frame's name.
inline constexpr std::regex::flag_type kRuleRegexFlags =
    std::regex::ECMAScript | std::regex::optimize;

// Checks one frame regex (a rule's or a --skip one): at most
// kMaxRuleRegexLength characters, groups nested at most kMaxRuleRegexNesting
// deep, numbers of at most kMaxRuleRegexNumberDigits digits, and it compiles. Errors
// (InvalidArgument): "a frame regex of N characters (at most 1024)", "bad regex '...': why"
// (control characters escaped, so the message is one line).
absl::Status CheckFrameRegex(const std::string& pattern);

// Parses rules text; `name` is used in messages. Errors (InvalidArgument):
// a syntax error ("NAME: line L:C: message"), a category without a name or
// without a frame regex, a regex that is too long, too deeply nested or does
// not compile ("NAME: category X: bad regex '...': why").
absl::StatusOr<v1::Rules> ParseRules(absl::string_view text, absl::string_view name);

// Reads --rules FILE (at most kMaxRulesFileBytes, a regular file) and parses
// it. Errors: ReadBoundedFile's (NotFound for a missing file), ParseRules'.
absl::StatusOr<v1::Rules> LoadRules(const std::string& path);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_RULES_H_
