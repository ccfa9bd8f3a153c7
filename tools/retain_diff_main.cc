// retain-diff: who keeps memory. One snapshot: what is live, by owner. Two:
// what was retained between them, and the RSS explanation. --trend over a
// series: growth per request per owner, with a verdict.
//
// Exit codes: 0 done; 1 --fail-over exceeded; 2 usage or input error, with
// one line "retain-diff: <message>" on stderr.
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/cli.h"
#include "tools/lib/diff.h"
#include "tools/lib/diff_format.h"
#include "tools/lib/dump_format.h"
#include "tools/lib/input_file.h"
#include "tools/lib/owner.h"
#include "tools/lib/pprof_writer.h"
#include "tools/lib/snapshot_reader.h"
#include "tools/lib/symbolizer.h"
#include "tools/lib/trend.h"

ABSL_FLAG(std::string, by, "site", "group by site|stack|function|module|kind|tag|category");
ABSL_FLAG(int, top, 20, "owners to show (0: all)");
ABSL_FLAG(int, depth, 4, "callers shown under each site (--by site)");
ABSL_FLAG(std::vector<std::string>, skip, {}, "more frames to skip when finding the site (regexes)");
ABSL_FLAG(std::string, rules, "", "category rules file (protobuf text format, proto/rules.proto)");
ABSL_FLAG(bool, trend, false, "growth per request over 3 or more snapshots of one process");
ABSL_FLAG(bool, json, false, "print JSON (schema: docs/retain-diff.md)");
ABSL_FLAG(bool, folded, false, "print folded stacks (flamegraph.pl, speedscope, inferno)");
ABSL_FLAG(std::string, pprof, "", "also write a gzip'd pprof profile to this file");
ABSL_FLAG(std::string, fail_over, "",
          "exit 1 when retained bytes exceed SIZE (e.g. 10MiB), or with --trend when an "
          "owner grows linearly by more than SIZE/request");
ABSL_FLAG(bool, force, false, "diff snapshots of two different programs");
ABSL_FLAG(std::vector<std::string>, debug_dir, {}, "directories with separate debug files");
ABSL_FLAG(std::string, sysroot, "", "prefix for the module paths in the snapshots");
ABSL_FLAG(std::string, max_snapshot_size, "1GiB",
          "refuse snapshot files larger than SIZE before reading them (at most 2GiB-1)");

namespace {

using namespace retain::tool;

constexpr char kUsage[] =
    "usage: retain-diff [flags] AFTER.pb | BEFORE.pb AFTER.pb | --trend S1.pb S2.pb S3.pb...";
constexpr char kHelp[] =
    "  retain-diff after.pb                    what is live now, by owner\n"
    "  retain-diff before.pb after.pb          what was retained between the two\n"
    "  retain-diff --trend /tmp/r/server.*.pb  per owner: bytes per request, plateau or leak\n"
    "Flags:\n"
    "  --by site|stack|function|module|kind|tag|category   grouping (default site)\n"
    "  --top N --depth N --skip REGEX,... --rules FILE\n"
    "  --json | --folded    output format (default: a table)\n"
    "  --pprof FILE         also write a pprof profile\n"
    "  --fail-over SIZE     exit 1 above SIZE retained (SIZE/request with --trend)\n"
    "  --force              diff snapshots of two different programs\n"
    "  --debug-dir DIR,...  --sysroot DIR   where to find module files and debug info\n"
    "  --max-snapshot-size SIZE   largest snapshot read (default 1GiB)\n"
    "A snapshot named - is read from standard input (a file or a pipe).\n"
    "Exit status: 0 done, 1 over --fail-over, 2 usage or input error.\n";

std::string HumanBytesOf(uint64_t bytes) { return HumanBytes(bytes); }

int Fail(absl::string_view message) {
  std::cerr << "retain-diff: " << message << "\n";
  return 2;
}

struct Threshold {
  bool set = false;
  bool per_request = false;
  uint64_t bytes = 0;
};

absl::StatusOr<Threshold> ParseThreshold(const std::string& text) {
  Threshold threshold;
  if (text.empty()) return threshold;
  std::string size = text;
  if (absl::EndsWith(size, "/request")) {
    threshold.per_request = true;
    size.resize(size.size() - 8);
  }
  absl::StatusOr<uint64_t> bytes = ParseByteSize(size);
  if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat("--fail-over: ", bytes.status().message()));
  threshold.set = true;
  threshold.bytes = *bytes;
  return threshold;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  NormalizeDashedFlags(argc, argv);
  if (WantsHelp(argc, argv)) {
    std::cout << kUsage << "\n" << kHelp;
    return 0;
  }
  if (absl::Status flags = CheckFlags(argc, argv); !flags.ok()) {
    return Fail(absl::StrCat(flags.message(), " (", kUsage, ")"));
  }
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> paths(args.begin() + 1, args.end());

  OwnerOptions owner_options;
  if (!ParseGroupBy(absl::GetFlag(FLAGS_by), &owner_options.by)) {
    return Fail(absl::StrCat("--by: '", absl::GetFlag(FLAGS_by),
                             "' is not site, stack, function, module, kind, tag or category"));
  }
  const bool trend = absl::GetFlag(FLAGS_trend);
  if (trend ? paths.size() < 3 : (paths.empty() || paths.size() > 2)) {
    return Fail(absl::StrCat(trend ? "--trend needs 3 or more snapshots" : "give one or two snapshots",
                             " (", kUsage, ")"));
  }
  if (absl::GetFlag(FLAGS_json) && absl::GetFlag(FLAGS_folded)) {
    return Fail("--json and --folded are alternatives; pick one");
  }
  if (trend && (absl::GetFlag(FLAGS_folded) || !absl::GetFlag(FLAGS_pprof).empty())) {
    return Fail("--folded and --pprof describe one diff, not a --trend");
  }
  if (absl::GetFlag(FLAGS_top) < 0 || absl::GetFlag(FLAGS_depth) < 0) {
    return Fail("--top and --depth must be 0 or more");
  }
  absl::StatusOr<Threshold> threshold = ParseThreshold(absl::GetFlag(FLAGS_fail_over));
  if (!threshold.ok()) return Fail(threshold.status().message());
  if (threshold->per_request && !trend) return Fail("--fail-over SIZE/request needs --trend");

  // Before anything reads: --rules - reads standard input too.
  std::vector<std::string> inputs = paths;
  inputs.push_back(absl::GetFlag(FLAGS_rules));
  if (absl::Status once = CheckStdinOnce(inputs); !once.ok()) return Fail(once.message());

  retain::v1::Rules rules;
  if (!absl::GetFlag(FLAGS_rules).empty()) {
    absl::StatusOr<retain::v1::Rules> loaded = LoadRules(absl::GetFlag(FLAGS_rules));
    if (!loaded.ok()) return Fail(loaded.status().message());
    rules = *std::move(loaded);
    owner_options.rules = &rules;
  }
  owner_options.extra_skip = absl::GetFlag(FLAGS_skip);
  owner_options.chain_depth = absl::GetFlag(FLAGS_depth);

  ReadOptions read_options;
  absl::StatusOr<uint64_t> max_size = ParseMaxSnapshotSize(absl::GetFlag(FLAGS_max_snapshot_size));
  if (!max_size.ok()) return Fail(max_size.status().message());
  read_options.max_bytes = *max_size;

  std::vector<std::unique_ptr<retain::v1::Snapshot>> snapshots;
  for (const std::string& path : paths) {
    absl::StatusOr<retain::v1::Snapshot> snapshot = ReadSnapshotFile(path, read_options);
    if (!snapshot.ok()) return Fail(snapshot.status().message());
    snapshots.push_back(std::make_unique<retain::v1::Snapshot>(*std::move(snapshot)));
  }

  // Said before anything else: every figure below is incomplete.
  std::vector<const retain::v1::Snapshot*> read;
  for (const auto& snapshot : snapshots) read.push_back(snapshot.get());
  std::vector<std::string> names;
  for (const std::string& path : paths) names.push_back(path == kStdinPath ? "stdin" : path);
  const std::string degraded = DegradedWarning(read, names);
  // The table shows it on top; JSON and folded output are for programs, so
  // the person running them hears it on stderr.
  const bool text_output = !absl::GetFlag(FLAGS_json) && !absl::GetFlag(FLAGS_folded);
  if (!degraded.empty() && !text_output) std::cerr << "retain-diff: warning: " << degraded << "\n";

  SymbolizerOptions symbolizer_options;
  symbolizer_options.debug_dirs = absl::GetFlag(FLAGS_debug_dir);
  symbolizer_options.sysroot = absl::GetFlag(FLAGS_sysroot);
  Symbolizer symbolizer(symbolizer_options);
  absl::StatusOr<std::unique_ptr<OwnerResolver>> owners =
      OwnerResolver::Create(symbolizer, owner_options);
  if (!owners.ok()) return Fail(owners.status().message());

  FormatOptions format;
  format.top = absl::GetFlag(FLAGS_top);
  format.by = owner_options.by;
  format.degraded_warning = degraded;
  int exit_code = 0;
  std::string output;
  if (trend) {
    std::vector<const retain::v1::Snapshot*> series;
    for (const auto& snapshot : snapshots) series.push_back(snapshot.get());
    for (size_t i = 0; i < series.size(); ++i) {
      for (size_t j = i + 1; j < series.size(); ++j) {
        if (series[i]->header().pid() == series[j]->header().pid() &&
            series[i]->header().sequence() == series[j]->header().sequence()) {
          return Fail(absl::StrCat("--trend got the same snapshot twice (", paths[i], " and ",
                                   paths[j], ")"));
        }
      }
    }
    absl::StatusOr<TrendResult> result = ComputeTrend(series, **owners);
    if (!result.ok()) return Fail(result.status().message());
    format.warnings = symbolizer.TakeWarnings();
    output = absl::GetFlag(FLAGS_json) ? FormatTrendJson(*result, format)
                                       : FormatTrendText(*result, format);
    if (threshold->set) {
      const std::string unit = result->requests_from_tags ? "request" : "snapshot";
      for (const TrendRow& row : result->rows) {
        const bool linear_over = row.fit.verdict == Verdict::kLinear &&
                                 row.fit.slope > static_cast<double>(threshold->bytes);
        const bool growth_over = row.fit.growth > static_cast<double>(threshold->bytes);
        if (threshold->per_request ? linear_over : growth_over) {
          std::cerr << "retain-diff: over --fail-over: " << row.owner.display << " grows "
                    << (threshold->per_request
                            ? SignedBytes(static_cast<int64_t>(row.fit.slope)) + "/" + unit
                            : SignedBytes(static_cast<int64_t>(row.fit.growth)) + " in all")
                    << "\n";
          exit_code = 1;
        }
      }
    }
  } else {
    const retain::v1::Snapshot* before = snapshots.size() == 2 ? snapshots[0].get() : nullptr;
    DiffOptions diff_options;
    diff_options.force = absl::GetFlag(FLAGS_force);
    absl::StatusOr<DiffResult> result =
        ComputeDiff(before, *snapshots.back(), **owners, diff_options);
    if (!result.ok()) return Fail(result.status().message());
    if (absl::GetFlag(FLAGS_folded)) {
      output = FormatDiffFolded(*result, **owners);
    }
    if (!absl::GetFlag(FLAGS_pprof).empty()) {
      absl::Status written =
          WritePprofFile(DiffProfile(*result), symbolizer, absl::GetFlag(FLAGS_pprof));
      if (!written.ok()) return Fail(written.message());
    }
    format.warnings = symbolizer.TakeWarnings();
    if (!absl::GetFlag(FLAGS_folded)) {
      output = absl::GetFlag(FLAGS_json) ? FormatDiffJson(*result, format)
                                         : FormatDiffText(*result, format);
    }
    if (threshold->set && result->total_retained_bytes > static_cast<int64_t>(threshold->bytes)) {
      std::cerr << "retain-diff: over --fail-over " << HumanBytesOf(threshold->bytes) << ": "
                << SignedBytes(result->total_retained_bytes) << " retained";
      // Name the owners holding most of it.
      const char* separator = ", most by ";
      for (size_t i = 0; i < result->rows.size() && i < 3; ++i) {
        if (result->rows[i].retained_bytes <= 0) break;
        std::cerr << separator << result->rows[i].owner.display << " ("
                  << SignedBytes(result->rows[i].retained_bytes) << ")";
        separator = ", ";
      }
      std::cerr << "\n";
      exit_code = 1;
    }
  }
  std::cout << output << std::flush;
  if (!std::cout.good()) return Fail("cannot write the output");
  return exit_code;
}
