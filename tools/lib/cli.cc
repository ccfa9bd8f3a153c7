// cli: see cli.h.
#include "tools/lib/cli.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tools/lib/input_file.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {

bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "-h" || arg == "--help" || arg == "-help") return true;
  }
  return false;
}

// absl::ParseCommandLine exits with status 1 on a bad flag, but every retain
// tool promises 2 for usage errors. So look at the flags first, with the
// registry absl itself uses, and let absl parse only what will succeed.
absl::Status CheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // positional, or "-"
    arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
    absl::string_view name = arg;
    absl::string_view value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && !has_value) continue;
    }
    if (flag == nullptr) {
      // Shown as documented: with dashes (NormalizeDashedFlags made them _).
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", absl::StrReplaceAll(name, {{"_", "-"}})));
    }
    if (!has_value && !flag->IsOfType<bool>()) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
      has_value = true;
    }
    std::string error;
    if (has_value && !flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", error));
    }
  }
  return absl::OkStatus();
}

std::string FlagsHelp(absl::string_view defined_in) {
  // absl's Filename() drops leading slashes (its default normalize_filename).
  while (!defined_in.empty() && (defined_in.front() == '/' || defined_in.front() == '\\')) {
    defined_in.remove_prefix(1);
  }
  std::vector<std::pair<std::string, std::string>> lines;  // "--name=default", help
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->Filename() != defined_in) continue;
    std::string left = absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}));
    if (!flag->IsOfType<bool>()) {
      const std::string value = flag->DefaultValue();
      absl::StrAppend(&left, "=", value.empty() ? "..." : value);
    }
    lines.emplace_back(std::move(left), flag->Help());
  }
  std::sort(lines.begin(), lines.end());
  size_t width = 0;
  for (const auto& [left, help] : lines) width = std::max(width, left.size());
  constexpr size_t kColumns = 100;
  const size_t indent = 2 + width + 2;
  std::string out;
  for (const auto& [left, help] : lines) {
    std::string line = absl::StrCat("  ", left, std::string(width - left.size(), ' '), " ");
    for (absl::string_view word : absl::StrSplit(help, ' ', absl::SkipEmpty())) {
      if (line.size() + 1 + word.size() > kColumns && line.size() > indent) {
        absl::StrAppend(&out, line, "\n");
        line = std::string(indent - 1, ' ');
      }
      absl::StrAppend(&line, " ", word);
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

void NormalizeDashedFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (arg[0] != '-' || arg[1] == '\0') continue;
    if (arg[1] == '-' && arg[2] == '\0') break;  // "--": the rest is positional
    char* name = arg + (arg[1] == '-' ? 2 : 1);
    for (char* p = name; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

std::vector<char*> JoinDashValues(int argc, char** argv, std::vector<std::string>* storage) {
  // Pointers into `storage` must outlive its growth: room for every
  // argument up front.
  storage->clear();
  storage->reserve(static_cast<size_t>(argc));
  std::vector<char*> joined;
  bool positional = false;  // after "--"
  for (int i = 0; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") positional = true;
    if (!positional && i > 0 && i + 1 < argc && absl::string_view(argv[i + 1]) == "-" &&
        absl::StartsWith(arg, "-") && arg.size() > 1 && arg.find('=') == absl::string_view::npos) {
      absl::string_view name = arg.substr(absl::StartsWith(arg, "--") ? 2 : 1);
      absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag != nullptr && !flag->IsOfType<bool>()) {
        storage->push_back(absl::StrCat(arg, "=-"));
        joined.push_back(storage->back().data());
        ++i;
        continue;
      }
    }
    joined.push_back(argv[i]);
  }
  joined.push_back(nullptr);  // argv[argc]
  return joined;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < rest.size() && (absl::ascii_isdigit(rest[digits]) || rest[digits] == '.')) {
    ++digits;
  }
  double number = 0;
  if (digits == 0 || !absl::SimpleAtod(rest.substr(0, digits), &number) || number < 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a size (e.g. 10MiB)"));
  }
  std::string unit = absl::AsciiStrToLower(rest.substr(digits));
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  if (scale == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' has an unknown unit (B, KiB, MiB, GiB, TiB)"));
  }
  double bytes = std::round(number * scale);
  if (bytes > 1.8e19) return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too large"));
  return static_cast<uint64_t>(bytes);
}

absl::StatusOr<uint64_t> ParseMaxSnapshotSize(absl::string_view text) {
  absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-snapshot-size: ", bytes.status().message()));
  }
  if (*bytes == 0 || *bytes > kMaxParsableSnapshotBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-snapshot-size: '", text, "' is not between 1 B and 2 GiB - 1 B (",
                     kMaxParsableSnapshotBytes, "), the most libprotobuf parses"));
  }
  return *bytes;
}

absl::Status CheckStdinOnce(const std::vector<std::string>& paths) {
  int stdin_count = 0;
  for (const std::string& path : paths) stdin_count += path == kStdinPath ? 1 : 0;
  if (stdin_count > 1) {
    return absl::InvalidArgumentError(
        "standard input (-) can be read once; give the other inputs as files");
  }
  return absl::OkStatus();
}

}  // namespace retain::tool
