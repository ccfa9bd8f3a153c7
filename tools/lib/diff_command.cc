// diff_command: see diff_command.h.
#include "tools/lib/diff_command.h"

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tools/lib/byte_size.h"
#include "tools/lib/cli.h"
#include "tools/lib/diff_format.h"
#include "tools/lib/html_report.h"
#include "tools/lib/input_file.h"
#include "tools/lib/measure.h"
#include "tools/lib/pprof_writer.h"
#include "tools/lib/report_assets.h"
#include "tools/lib/rules.h"
#include "tools/lib/snapshot_reader.h"
#include "tools/lib/stack_tree.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool {

std::string DiffHelp(absl::string_view flags_help) {
  return absl::StrCat(
      kDiffUsage, "\n",
      "  retain-diff after.pb                    what is live now, by owner\n"
      "  retain-diff before.pb after.pb          what was retained between the two\n"
      "  retain-diff --trend /tmp/r/server.*.pb  per owner: bytes per request, plateau or leak\n"
      "  retain-diff --html report.html ...      also one offline HTML page, in any mode\n"
      "Flags:\n",
      flags_help,
      "A snapshot named - is read from standard input (a file or a pipe).\n"
      "Exit status: 0 done, 1 over --fail-over, 2 usage or input error.\n");
}

absl::StatusOr<FailOver> ParseFailOver(absl::string_view text) {
  FailOver fail_over;
  if (text.empty()) return fail_over;
  absl::string_view size = text;
  if (absl::ConsumeSuffix(&size, "/request")) fail_over.per_request = true;
  absl::StatusOr<uint64_t> bytes = ParseByteSize(size);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--fail-over: ", bytes.status().message()));
  }
  fail_over.set = true;
  fail_over.bytes = *bytes;
  return fail_over;
}

absl::StatusOr<DiffPlan> PlanDiffCommand(const DiffCommand& command) {
  DiffPlan plan;
  if (!ParseGroupBy(command.by, &plan.by)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--by: '", command.by, "' is not site, stack, function, module, kind, tag or category"));
  }
  if (!ParseMeasure(command.measure, &plan.measure)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--measure: '", command.measure, "' is not resident or allocated"));
  }
  const size_t count = command.paths.size();
  if (command.trend ? count < 3 : (count == 0 || count > 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        command.trend ? "--trend needs 3 or more snapshots" : "give one or two snapshots", " (",
        kDiffUsage, ")"));
  }
  if (command.json && command.folded) {
    return absl::InvalidArgumentError("--json and --folded are alternatives; pick one");
  }
  if (command.trend && (command.folded || !command.pprof.empty())) {
    return absl::InvalidArgumentError("--folded and --pprof describe one diff, not a --trend");
  }
  if (command.html == kStdinPath) {
    return absl::InvalidArgumentError(
        "--html -: standard output carries the table, --json or --folded; give a file");
  }
  if (absl::EndsWith(command.html, ".pb")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--html ", command.html, ": a snapshot's name; the page would replace it (give a .html)"));
  }
  if (command.top < 0 || command.depth < 0) {
    return absl::InvalidArgumentError("--top and --depth must be 0 or more");
  }
  absl::StatusOr<FailOver> fail_over = ParseFailOver(command.fail_over);
  if (!fail_over.ok()) return fail_over.status();
  if (fail_over->per_request && !command.trend) {
    return absl::InvalidArgumentError("--fail-over SIZE/request needs --trend");
  }
  plan.fail_over = *fail_over;
  plan.output = command.json     ? DiffOutput::kJson
                : command.folded ? DiffOutput::kFolded
                                 : DiffOutput::kTable;
  // Before anything reads: --rules - reads standard input too.
  std::vector<std::string> inputs = command.paths;
  for (absl::string_view rules : absl::StrSplit(command.rules, ',', absl::SkipEmpty())) {
    inputs.emplace_back(rules);
  }
  if (absl::Status once = CheckStdinOnce(inputs); !once.ok()) return once;
  return plan;
}

absl::Status CheckDistinctSnapshots(const std::vector<const v1::Snapshot*>& series,
                                    const std::vector<std::string>& names) {
  for (size_t i = 0; i < series.size(); ++i) {
    for (size_t j = i + 1; j < series.size(); ++j) {
      if (series[i]->header().pid() == series[j]->header().pid() &&
          series[i]->header().sequence() == series[j]->header().sequence()) {
        return absl::InvalidArgumentError(absl::StrCat("--trend got the same snapshot twice (",
                                                       names[i], " and ", names[j], ")"));
      }
    }
  }
  return absl::OkStatus();
}

std::string DiffOverFailOver(const DiffResult& diff, const FailOver& fail_over) {
  if (!fail_over.set || diff.total_retained_bytes <= static_cast<int64_t>(fail_over.bytes)) {
    return "";
  }
  std::string line = absl::StrCat("over --fail-over ", HumanBytes(fail_over.bytes), ": ",
                                  SignedBytes(diff.total_retained_bytes), " retained");
  // Name the owners holding most of it.
  const char* separator = ", most by ";
  for (size_t i = 0; i < diff.rows.size() && i < 3; ++i) {
    if (diff.rows[i].retained_bytes <= 0) break;
    absl::StrAppend(&line, separator, diff.rows[i].owner.display, " (",
                    SignedBytes(diff.rows[i].retained_bytes), ")");
    separator = ", ";
  }
  return line;
}

std::vector<std::string> TrendOverFailOver(const TrendResult& trend, const FailOver& fail_over) {
  std::vector<std::string> lines;
  if (!fail_over.set) return lines;
  const std::string unit = trend.requests_from_tags ? "request" : "snapshot";
  const double limit = static_cast<double>(fail_over.bytes);
  for (const TrendRow& row : trend.rows) {
    const bool linear_over = row.fit.verdict == Verdict::kLinear && row.fit.slope > limit;
    const bool growth_over = row.fit.growth > limit;
    if (!(fail_over.per_request ? linear_over : growth_over)) continue;
    lines.push_back(absl::StrCat(
        "over --fail-over: ", row.owner.display, " grows ",
        fail_over.per_request ? SignedBytes(static_cast<int64_t>(row.fit.slope)) + "/" + unit
                              : SignedBytes(static_cast<int64_t>(row.fit.growth)) + " in all"));
  }
  return lines;
}

namespace {

// The host rows of the same diff grouped by category (symbols come from the
// symbolizer's cache: the second grouping costs no second symbolization).
absl::StatusOr<std::vector<DiffRow>> HostRowsByCategory(const v1::Snapshot* before,
                                                        const v1::Snapshot& after,
                                                        Symbolizer& symbolizer,
                                                        OwnerOptions owner_options,
                                                        const DiffOptions& diff_options) {
  owner_options.by = GroupBy::kCategory;
  absl::StatusOr<std::unique_ptr<OwnerResolver>> owners =
      OwnerResolver::Create(symbolizer, owner_options);
  if (!owners.ok()) return owners.status();
  absl::StatusOr<DiffResult> by_category = ComputeDiff(before, after, **owners, diff_options);
  if (!by_category.ok()) return by_category.status();
  std::vector<DiffRow> rows;
  for (DiffRow& row : by_category->rows) {
    if (row.owner.domain == "host") rows.push_back(std::move(row));
  }
  return rows;
}

// Writes the --html page of `json` (the JSON of --json --top 0). A build
// without the real page says so: the file then holds the data only.
absl::Status WriteHtml(const std::string& path, const std::string& json,
                       std::vector<std::string>* notices) {
  const ReportAssets assets = EmbeddedReportAssets();
  if (assets.placeholder) {
    notices->push_back(absl::StrCat(
        "warning: this retain-diff was built without its report page (tools/report/ was "
        "missing): ",
        path, " holds the data and a placeholder page"));
  }
  absl::StatusOr<std::string> page = RenderHtmlReport(json, assets);
  if (!page.ok()) return page.status();
  return WriteHtmlReport(path, *page);
}

}  // namespace

absl::StatusOr<DiffOutcome> RunDiffCommand(const DiffCommand& command,
                                           std::vector<std::string>* notices) {
  absl::StatusOr<DiffPlan> plan = PlanDiffCommand(command);
  if (!plan.ok()) return plan.status();

  OwnerOptions owner_options;
  owner_options.by = plan->by;
  v1::Rules rules;
  // Several files (comma-separated) are one list, in the order given: the
  // first category that matches wins, across files as within one.
  for (absl::string_view path : absl::StrSplit(command.rules, ',', absl::SkipEmpty())) {
    absl::StatusOr<v1::Rules> loaded = LoadRules(std::string(path));
    if (!loaded.ok()) return loaded.status();
    rules.MergeFrom(*loaded);
    owner_options.rules = &rules;
  }
  owner_options.extra_skip = command.skip;
  owner_options.chain_depth = command.depth;

  ReadOptions read_options;
  absl::StatusOr<uint64_t> max_size = ParseMaxSnapshotSize(command.max_snapshot_size);
  if (!max_size.ok()) return max_size.status();
  read_options.max_bytes = *max_size;

  SymbolizerOptions symbolizer_options;
  symbolizer_options.debug_dirs = command.debug_dirs;
  symbolizer_options.sysroot = command.sysroot;
  Symbolizer symbolizer(symbolizer_options);
  absl::StatusOr<std::unique_ptr<OwnerResolver>> owners =
      OwnerResolver::Create(symbolizer, owner_options);
  if (!owners.ok()) return owners.status();

  // A diff keeps its one or two snapshots whole. A trend reads each snapshot
  // once, adds its rows to the builder and keeps only its summary, so memory
  // does not grow with the length of the series; the first error of the
  // builder (a snapshot of another process) waits until every file was read
  // and the checks below have spoken, as when the series was read whole.
  std::vector<std::unique_ptr<v1::Snapshot>> snapshots;
  std::vector<std::shared_ptr<const v1::Snapshot>> summaries;
  std::unique_ptr<TrendBuilder> builder;
  absl::Status add_status;
  if (command.trend) builder = std::make_unique<TrendBuilder>(**owners, plan->measure);
  for (const std::string& path : command.paths) {
    absl::StatusOr<v1::Snapshot> snapshot = ReadSnapshotFile(path, read_options);
    if (!snapshot.ok()) return snapshot.status();
    if (builder == nullptr) {
      snapshots.push_back(std::make_unique<v1::Snapshot>(*std::move(snapshot)));
      continue;
    }
    summaries.push_back(Summary(*snapshot));
    if (add_status.ok()) add_status = builder->Add(*snapshot, path == kStdinPath ? "stdin" : path);
  }
  std::vector<const v1::Snapshot*> read;
  for (const auto& snapshot : snapshots) read.push_back(snapshot.get());
  for (const auto& summary : summaries) read.push_back(summary.get());
  std::vector<std::string> names;
  for (const std::string& path : command.paths) {
    names.push_back(path == kStdinPath ? "stdin" : path);
  }

  // Said before anything else: every figure below is incomplete. The table
  // shows it on top; JSON and folded output are for programs, so the person
  // running them hears it on stderr.
  const std::string degraded = DegradedWarning(read, names);
  const std::string heap = HeapUnrecordedWarning(read, names);
  if (plan->output != DiffOutput::kTable) {
    for (const std::string* warning : {&degraded, &heap}) {
      if (!warning->empty()) notices->push_back(absl::StrCat("warning: ", *warning));
    }
  }

  FormatOptions format;
  format.top = command.top;
  format.by = plan->by;
  format.degraded_warning = degraded;
  format.heap_warning = heap;
  DiffOutcome outcome;
  std::vector<std::string> over;
  if (command.trend) {
    // Names as given: "-" cannot be in a series twice (CheckStdinOnce).
    if (absl::Status distinct = CheckDistinctSnapshots(read, command.paths); !distinct.ok()) {
      return distinct;
    }
    if (!add_status.ok()) return add_status;
    absl::StatusOr<TrendResult> result = builder->Finish();
    if (!result.ok()) return result.status();
    format.warnings = symbolizer.TakeWarnings();
    outcome.output = plan->output == DiffOutput::kJson ? FormatTrendJson(*result, format)
                                                       : FormatTrendText(*result, format);
    if (!command.html.empty()) {
      FormatOptions every_owner = format;
      every_owner.top = 0;
      absl::Status written =
          WriteHtml(command.html, FormatTrendJson(*result, every_owner), notices);
      if (!written.ok()) return written;
    }
    over = TrendOverFailOver(*result, plan->fail_over);
  } else {
    const v1::Snapshot* before = snapshots.size() == 2 ? snapshots[0].get() : nullptr;
    DiffOptions diff_options;
    diff_options.force = command.force;
    diff_options.measure = plan->measure;
    if (before != nullptr) diff_options.before_name = names[0];
    diff_options.after_name = names.back();
    absl::StatusOr<DiffResult> result =
        ComputeDiff(before, *snapshots.back(), **owners, diff_options);
    if (!result.ok()) return result.status();
    if (owner_options.rules != nullptr) {
      absl::StatusOr<std::vector<DiffRow>> categories =
          HostRowsByCategory(before, *snapshots.back(), symbolizer, owner_options, diff_options);
      if (!categories.ok()) return categories.status();
      result->categories = *std::move(categories);
    }
    if (!result->rss.adds_up_warning.empty() && plan->output != DiffOutput::kTable) {
      notices->push_back(absl::StrCat("warning: ", result->rss.adds_up_warning));
    }
    if (plan->output == DiffOutput::kFolded) outcome.output = FormatDiffFolded(*result, **owners);
    if (!command.pprof.empty()) {
      absl::Status written = WritePprofFile(DiffProfile(*result), symbolizer, command.pprof);
      if (!written.ok()) return written;
    }
    // The stack tree is for JSON readers (and the page's icicle): built
    // only when one is written, before the symbolizer's warnings are taken.
    StackTree stacks;
    if (plan->output == DiffOutput::kJson || !command.html.empty()) {
      stacks = DiffStackTree(*result, **owners);
      format.stacks = &stacks;
    }
    format.warnings = symbolizer.TakeWarnings();
    if (plan->output == DiffOutput::kJson) outcome.output = FormatDiffJson(*result, format);
    if (plan->output == DiffOutput::kTable) outcome.output = FormatDiffText(*result, format);
    if (!command.html.empty()) {
      FormatOptions every_owner = format;
      every_owner.top = 0;
      absl::Status written = WriteHtml(command.html, FormatDiffJson(*result, every_owner), notices);
      if (!written.ok()) return written;
    }
    if (std::string line = DiffOverFailOver(*result, plan->fail_over); !line.empty()) {
      over.push_back(std::move(line));
    }
  }
  outcome.over_fail_over = !over.empty();
  for (std::string& line : over) notices->push_back(std::move(line));
  return outcome;
}

}  // namespace retain::tool
