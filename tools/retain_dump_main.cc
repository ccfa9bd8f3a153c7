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
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/cli.h"
#include "tools/lib/dump_format.h"
#include "tools/lib/input_file.h"
#include "tools/lib/snapshot_reader.h"

ABSL_FLAG(int, top, 10, "number of stacks to list, largest live bytes first (0: none)");
ABSL_FLAG(bool, json, false, "print one JSON object instead of the text summary");
ABSL_FLAG(std::string, max_snapshot_size, "1GiB",
          "refuse snapshot files larger than SIZE before reading them (at most 2GiB-1)");

namespace {

constexpr char kUsage[] = "usage: retain-dump [--top N] [--json] SNAPSHOT.pb | -";
// --help: this, the flags (their help strings, FlagsHelp), then kHelpEnd.
constexpr char kHelpStart[] =
    "Prints a retain snapshot: header, process memory, totals per kind, shim\n"
    "health and the stacks holding the most live bytes.\n"
    "Flags:\n";
constexpr char kHelpEnd[] =
    "SNAPSHOT.pb - reads the snapshot from standard input (a file or a pipe).\n"
    "Exit status: 0 printed, 2 usage error or unreadable snapshot.\n";

int Fail(absl::string_view message) {
  std::cerr << "retain-dump: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  retain::tool::NormalizeDashedFlags(argc, argv);
  if (retain::tool::WantsHelp(argc, argv)) {
    std::cout << kUsage << "\n" << kHelpStart << retain::tool::FlagsHelp(__FILE__) << kHelpEnd;
    return 0;
  }
  if (absl::Status flags = retain::tool::CheckFlags(argc, argv); !flags.ok()) {
    return Fail(absl::StrCat(flags.message(), " (", kUsage, ")"));
  }
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return Fail(absl::StrCat(args.size() < 2 ? "no snapshot given" : "one snapshot at a time", " (",
                             kUsage, ")"));
  }
  retain::tool::DumpOptions options;
  options.source = args[1] == retain::tool::kStdinPath ? "stdin" : args[1];
  options.top = absl::GetFlag(FLAGS_top);
  if (options.top < 0) return Fail(absl::StrCat("--top must be 0 or more, not ", options.top));

  absl::StatusOr<uint64_t> max_size =
      retain::tool::ParseMaxSnapshotSize(absl::GetFlag(FLAGS_max_snapshot_size));
  if (!max_size.ok()) return Fail(max_size.status().message());
  retain::tool::ReadOptions read_options;
  read_options.max_bytes = *max_size;
  absl::StatusOr<retain::v1::Snapshot> snapshot =
      retain::tool::ReadSnapshotFile(args[1], read_options);
  if (!snapshot.ok()) return Fail(snapshot.status().message());

  const std::string text = absl::GetFlag(FLAGS_json)
                               ? retain::tool::FormatDumpJson(*snapshot, options)
                               : retain::tool::FormatDumpText(*snapshot, options);
  std::cout << text << std::flush;
  // A full disk behind a redirect must not look like success.
  if (!std::cout.good()) return Fail("cannot write the output");
  return 0;
}
