// retain-diff: who keeps memory. One snapshot: what is live, by owner. Two:
// what was retained between them, and the RSS explanation. --trend over a
// series: growth per request per owner, with a verdict.
//
// Wiring only: flags into a DiffCommand, tools/lib/diff_command.h decides
// and runs it, its Status becomes the exit code.
//
// Exit codes: 0 done; 1 --fail-over exceeded; 2 usage or input error, with
// one line "retain-diff: <message>" on stderr.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/cli.h"
#include "tools/lib/diff_command.h"

// The help strings are --help's text (FlagsHelp), written only here.
ABSL_FLAG(std::string, by, "site", "group by site|stack|function|module|kind|tag|category");
ABSL_FLAG(std::string, measure, "resident",
          "count resident (+ swapped) or allocated bytes; without residency in the snapshots "
          "(older shims): allocated");
ABSL_FLAG(int, top, 20, "owners to show (0: all)");
ABSL_FLAG(int, depth, 4, "callers shown under each site (--by site)");
ABSL_FLAG(std::vector<std::string>, skip, {},
          "more frames to skip when finding the site (regexes)");
ABSL_FLAG(std::string, rules, "",
          "category rules files, comma-separated, one list in order (protobuf text format, "
          "proto/rules.proto)");
ABSL_FLAG(bool, trend, false, "growth per request over 3 or more snapshots of one process");
ABSL_FLAG(bool, json, false, "print JSON (schema: docs/retain-diff.md)");
ABSL_FLAG(bool, folded, false, "print folded stacks (flamegraph.pl, speedscope, inferno)");
ABSL_FLAG(std::string, pprof, "", "also write a gzip'd pprof profile to this file");
ABSL_FLAG(std::string, html, "",
          "also write an offline HTML report to this file (one self-contained page; its data is "
          "the JSON of --json --top 0)");
ABSL_FLAG(std::string, fail_over, "",
          "exit 1 when retained bytes exceed SIZE (e.g. 10MiB), or with --trend when an "
          "owner grows linearly by more than SIZE/request");
ABSL_FLAG(bool, force, false, "diff snapshots of two different programs");
ABSL_FLAG(std::vector<std::string>, debug_dir, {}, "directories with separate debug files");
ABSL_FLAG(std::string, sysroot, "", "prefix for the module paths in the snapshots");
ABSL_FLAG(std::string, max_snapshot_size, "1GiB",
          "refuse snapshot files larger than SIZE before reading them (at most 2GiB-1)");

namespace {

int Fail(absl::string_view message) {
  std::cerr << "retain-diff: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace retain::tool;
  absl::SetProgramUsageMessage(kDiffUsage);
  NormalizeDashedFlags(argc, argv);
  std::vector<std::string> joined_storage;
  std::vector<char*> joined = JoinDashValues(argc, argv, &joined_storage);
  argc = static_cast<int>(joined.size()) - 1;
  argv = joined.data();
  if (WantsHelp(argc, argv)) {
    std::cout << DiffHelp(FlagsHelp(__FILE__));
    return 0;
  }
  if (absl::Status flags = CheckFlags(argc, argv); !flags.ok()) {
    return Fail(absl::StrCat(flags.message(), " (", kDiffUsage, ")"));
  }
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);

  DiffCommand command;
  command.paths.assign(args.begin() + 1, args.end());
  command.by = absl::GetFlag(FLAGS_by);
  command.top = absl::GetFlag(FLAGS_top);
  command.depth = absl::GetFlag(FLAGS_depth);
  command.skip = absl::GetFlag(FLAGS_skip);
  command.rules = absl::GetFlag(FLAGS_rules);
  command.trend = absl::GetFlag(FLAGS_trend);
  command.json = absl::GetFlag(FLAGS_json);
  command.folded = absl::GetFlag(FLAGS_folded);
  command.pprof = absl::GetFlag(FLAGS_pprof);
  command.html = absl::GetFlag(FLAGS_html);
  command.fail_over = absl::GetFlag(FLAGS_fail_over);
  command.force = absl::GetFlag(FLAGS_force);
  command.debug_dirs = absl::GetFlag(FLAGS_debug_dir);
  command.sysroot = absl::GetFlag(FLAGS_sysroot);
  command.max_snapshot_size = absl::GetFlag(FLAGS_max_snapshot_size);
  command.measure = absl::GetFlag(FLAGS_measure);

  std::vector<std::string> notices;
  absl::StatusOr<DiffOutcome> outcome = RunDiffCommand(command, &notices);
  // Warnings said before an error stay said, in order.
  for (const std::string& notice : notices) std::cerr << "retain-diff: " << notice << "\n";
  if (!outcome.ok()) return Fail(outcome.status().message());
  std::cout << outcome->output << std::flush;
  // A full disk behind a redirect must not look like success.
  if (!std::cout.good()) return Fail("cannot write the output");
  return outcome->over_fail_over ? 1 : 0;
}
