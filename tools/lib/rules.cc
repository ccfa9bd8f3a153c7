// rules: see rules.h.
#include "tools/lib/rules.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "tools/lib/input_file.h"

namespace retain::tool {
namespace {

// What the standard library's regex compiler would recurse or count on, in
// an ECMAScript pattern: the deepest nesting of groups ('(' outside bracket
// expressions, not escaped) and the longest number it parses, the digits of
// a back-reference (\12) or of a repetition ({2,30}). It accumulates those
// in a long without checking: 20 digits overflow it (undefined behaviour;
// found by rules_fuzz).
struct PatternShape {
  int nesting = 0;
  size_t longest_number = 0;
};

PatternShape Shape(absl::string_view pattern) {
  PatternShape shape;
  int depth = 0;
  bool in_brackets = false;
  bool in_braces = false;
  const auto digits_at = [&](size_t i) {
    size_t end = i;
    while (end < pattern.size() && pattern[end] >= '0' && pattern[end] <= '9') ++end;
    return end - i;
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      shape.longest_number = std::max(shape.longest_number, digits_at(i + 1));
      ++i;  // the escaped character is a literal
    } else if (in_brackets) {
      if (c == ']') in_brackets = false;
    } else if (in_braces) {
      if (c == '}') in_braces = false;
      shape.longest_number = std::max(shape.longest_number, digits_at(i));
    } else if (c == '[') {
      in_brackets = true;
    } else if (c == '{') {
      in_braces = true;
    } else if (c == '(') {
      shape.nesting = std::max(shape.nesting, ++depth);
    } else if (c == ')' && depth > 0) {
      --depth;
    }
  }
  return shape;
}

// Names and regexes from the file, for messages: a string in the text
// format may hold a newline (written \n) or other control characters, and a
// message is one line. Those are shown escaped; everything else as written.
std::string Quoted(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out;
}

absl::Status CheckRegex(absl::string_view name, const v1::Category& category,
                        const std::string& frame) {
  absl::Status checked = CheckFrameRegex(frame);
  if (checked.ok()) return checked;
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": category ", Quoted(category.name()), ": ", checked.message()));
}

}  // namespace

absl::Status CheckFrameRegex(const std::string& pattern) {
  if (pattern.size() > kMaxRuleRegexLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a frame regex of ", pattern.size(), " characters (at most ", kMaxRuleRegexLength, ")"));
  }
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad regex '", Quoted(pattern), "': ", why));
  };
  const PatternShape shape = Shape(pattern);
  if (shape.nesting > kMaxRuleRegexNesting) {
    return bad(absl::StrCat("groups nested more than ", kMaxRuleRegexNesting, " deep"));
  }
  if (shape.longest_number > kMaxRuleRegexNumberDigits) {
    return bad(absl::StrCat("a repetition count or back-reference of more than ",
                            kMaxRuleRegexNumberDigits, " digits"));
  }
  try {
    std::regex compiled(pattern, kRuleRegexFlags);
  } catch (const std::regex_error& e) {
    return bad(e.what());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Rules> ParseRules(absl::string_view text, absl::string_view name) {
  v1::Rules rules;
  class Collector : public google::protobuf::io::ErrorCollector {
   public:
    void AddError(int line, int column, const std::string& message) override {
      if (first.empty()) {
        first = absl::StrCat("line ", line + 1, ":", column + 1, ": ", Quoted(message));
      }
    }
    std::string first;
  } errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &rules)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", errors.first));
  }
  for (const v1::Category& category : rules.category()) {
    if (category.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": a category has no name"));
    }
    if (category.frame().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": category ", Quoted(category.name()), " has no frame regex"));
    }
    for (const std::string& frame : category.frame()) {
      if (absl::Status s = CheckRegex(name, category, frame); !s.ok()) return s;
    }
  }
  return rules;
}

absl::StatusOr<v1::Rules> LoadRules(const std::string& path) {
  absl::StatusOr<std::string> text = ReadBoundedFile(path, kMaxRulesFileBytes, "rules file");
  if (!text.ok()) return text.status();
  return ParseRules(*text, path);
}

}  // namespace retain::tool
