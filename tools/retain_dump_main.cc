// retain-dump: prints one snapshot as a human-readable summary (or, with
// --json, as one JSON object): header, process memory, totals per kind, shim
// health and the stacks that hold the most live bytes.
//
// Exit codes: 0 printed; 2 usage error or unreadable/invalid snapshot, with
// one line "retain-dump: <message>" on stderr.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/dump_format.h"
#include "tools/lib/snapshot_reader.h"

ABSL_FLAG(int, top, 10, "number of stacks to list, largest live bytes first (0: none)");
ABSL_FLAG(bool, json, false, "print one JSON object instead of the text summary");

namespace {

constexpr char kUsage[] = "usage: retain-dump [--top N] [--json] SNAPSHOT.pb";
constexpr char kHelp[] =
    "Prints a retain snapshot: header, process memory, totals per kind, shim\n"
    "health and the stacks holding the most live bytes.\n"
    "  --top N   stacks to list, largest live bytes first (default 10; 0: none)\n"
    "  --json    print one JSON object instead of the text summary\n"
    "Exit status: 0 printed, 2 usage error or unreadable snapshot.\n";

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
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
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

int Fail(absl::string_view message) {
  std::cerr << "retain-dump: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  if (WantsHelp(argc, argv)) {
    std::cout << kUsage << "\n" << kHelp;
    return 0;
  }
  if (absl::Status flags = CheckFlags(argc, argv); !flags.ok()) {
    return Fail(absl::StrCat(flags.message(), " (", kUsage, ")"));
  }
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return Fail(absl::StrCat(args.size() < 2 ? "no snapshot given" : "one snapshot at a time", " (",
                             kUsage, ")"));
  }
  retain::tool::DumpOptions options;
  options.source = args[1];
  options.top = absl::GetFlag(FLAGS_top);
  if (options.top < 0) return Fail(absl::StrCat("--top must be 0 or more, not ", options.top));

  absl::StatusOr<retain::v1::Snapshot> snapshot = retain::tool::ReadSnapshotFile(options.source);
  if (!snapshot.ok()) return Fail(snapshot.status().message());

  const std::string text = absl::GetFlag(FLAGS_json)
                               ? retain::tool::FormatDumpJson(*snapshot, options)
                               : retain::tool::FormatDumpText(*snapshot, options);
  std::cout << text << std::flush;
  // A full disk behind a redirect must not look like success.
  if (!std::cout.good()) return Fail("cannot write the output");
  return 0;
}
