// diff_command: what retain-diff decides between its command line and the
// engines. The main parses flags into a DiffCommand and turns the Status
// RunDiffCommand returns into an exit code; everything that decides lives
// here: which flags go together, how many snapshots each mode takes, the
// --fail-over threshold and its verdicts, that a --trend series has no
// snapshot twice, which output is printed and where warnings go.
//
// Exit codes (the main's): 0 done; 1 over --fail-over (DiffOutcome::
// over_fail_over); 2 for any error Status, printed as one line
// "retain-diff: <message>".
//
// Thread-compatible: RunDiffCommand reads files and owns its symbolizer;
// the other functions are pure.
#ifndef RETAIN_TOOLS_LIB_DIFF_COMMAND_H_
#define RETAIN_TOOLS_LIB_DIFF_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "retain.pb.h"
#include "tools/lib/diff.h"
#include "tools/lib/owner.h"
#include "tools/lib/trend.h"

namespace retain::tool {

inline constexpr char kDiffUsage[] =
    "usage: retain-diff [flags] AFTER.pb | BEFORE.pb AFTER.pb | --trend S1.pb S2.pb S3.pb...";

// retain-diff --help: the usage, examples, `flags_help` (cli.h's FlagsHelp of
// the main's flags) and what the exit codes mean.
std::string DiffHelp(absl::string_view flags_help);

// A retain-diff command line, flags parsed (the fields are the flags).
struct DiffCommand {
  std::vector<std::string> paths;  // the snapshots, in the order given; "-": stdin
  std::string by = "site";
  int top = 20;
  int depth = 4;
  std::vector<std::string> skip;
  std::string rules;
  bool trend = false;
  bool json = false;
  bool folded = false;
  std::string pprof;
  std::string html;  // --html FILE: the report page, beside the output
  std::string fail_over;
  bool force = false;
  std::vector<std::string> debug_dirs;
  std::string sysroot;
  std::string max_snapshot_size = "1GiB";
  std::string measure = "resident";  // resident | allocated (measure.h)
};

// --fail-over SIZE or SIZE/request (in the measure: --measure).
struct FailOver {
  bool set = false;
  bool per_request = false;  // "SIZE/request": a linear owner's slope, --trend only
  uint64_t bytes = 0;
};

// "" (not set), "10MiB", "64KiB/request". The message names the flag.
absl::StatusOr<FailOver> ParseFailOver(absl::string_view text);

enum class DiffOutput { kTable, kJson, kFolded };

// What a command line asks for, once its flags agree with each other.
struct DiffPlan {
  GroupBy by = GroupBy::kSite;
  DiffOutput output = DiffOutput::kTable;
  FailOver fail_over;
  Measure measure = Measure::kResident;
};

// The checks that need no file: --by is a grouping; --measure is resident
// or allocated; one or two snapshots
// (three or more with --trend); --json or --folded, not both; --folded and
// --pprof not with --trend; --html not "-" (standard output carries the
// other output) nor a name ending in .pb (a snapshot's, taken for the
// page's by mistake: `--html before.pb after.pb`); --top and --depth not
// negative; --fail-over
// parses, SIZE/request only with --trend; standard input named at most once
// (snapshots and --rules). InvalidArgument with the message retain-diff
// prints. (--max-snapshot-size is checked after --rules is read, by
// RunDiffCommand.)
absl::StatusOr<DiffPlan> PlanDiffCommand(const DiffCommand& command);

// A --trend series must not hold one snapshot twice (same pid and
// sequence: a file given twice, or a copy); names[i] names series[i].
absl::Status CheckDistinctSnapshots(const std::vector<const v1::Snapshot*>& series,
                                    const std::vector<std::string>& names);

// The --fail-over verdict on a diff: one line naming the total and the (up
// to three) owners holding most of it, e.g. "over --fail-over 10.0 MiB:
// +12.0 MiB retained, most by f() (+12.0 MiB)"; empty when not over.
std::string DiffOverFailOver(const DiffResult& diff, const FailOver& fail_over);

// On a trend: one line per owner over it, e.g. "over --fail-over: f() grows
// +4.0 KiB/request" (SIZE/request: a linear owner's slope; SIZE: any
// owner's growth in all). Empty when none is.
std::vector<std::string> TrendOverFailOver(const TrendResult& trend, const FailOver& fail_over);

struct DiffOutcome {
  std::string output;           // for standard output
  bool over_fail_over = false;  // exit 1
};

// Runs retain-diff: plans, reads the snapshots (and --rules), computes the
// diff or trend, writes the --pprof file and the --html page (html_report.h:
// the JSON of --json --top 0, whatever --top), formats the output. Lines for
// standard error (each printed as "retain-diff: <line>") are appended to
// `notices` as they arise, so those said before an error stay said: the
// degraded warning when the output is JSON or folded (the table shows it on
// top), an RSS explanation that does not add up (likewise), with --html in a
// build without the real page a warning that the page is a placeholder, then
// the --fail-over verdicts. The resident measure's fallback to allocated bytes
// (snapshots without residency) is said in the output only: one line in the
// table, "measure_fallback" in JSON, a comment in pprof.

absl::StatusOr<DiffOutcome> RunDiffCommand(const DiffCommand& command,
                                           std::vector<std::string>* notices);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_DIFF_COMMAND_H_
