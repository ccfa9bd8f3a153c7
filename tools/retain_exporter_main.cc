// retain-exporter: serves the snapshots the shim writes in continuous mode
// (RETAIN_SNAPSHOT_INTERVAL) to Prometheus: per process and per owner,
// live bytes, bytes per request over a window and the verdict
// (tools/lib/exporter.h, exporter_metrics.h), on a loopback port.
//
//   retain-exporter [--port 9464] [--interval 5s] [--window 30] [--top 10]
//                   [--rules FILE [--by category]] DIR...
//
// Runs until SIGINT or SIGTERM (exit 0). Exit 2 on a usage error or a port
// that cannot be bound, with one line "retain-exporter: <message>".
#include <signal.h>

#include <atomic>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "tools/lib/cli.h"
#include "tools/lib/exporter.h"
#include "tools/lib/exporter_http.h"
#include "tools/lib/exporter_metrics.h"

ABSL_FLAG(int, port, 9464, "serve /metrics on 127.0.0.1:PORT (0: a free port, printed)");
ABSL_FLAG(std::string, interval, "5s", "how often the directories are scanned for new snapshots");
ABSL_FLAG(int, window, 30, "newest snapshots per process the verdicts are computed over (>= 3)");
ABSL_FLAG(int, top, 10, "owners per process with their own series; the rest are owner=\"other\"");
ABSL_FLAG(std::string, by, "site",
          "owners: site|function|module|kind|category (category: --rules)");
ABSL_FLAG(std::string, measure, "resident", "resident (RAM + swap) or allocated");
ABSL_FLAG(std::string, rules, "", "category rules (share/rules/*.textproto), comma-separated");
ABSL_FLAG(std::vector<std::string>, skip, {}, "more frame regexes that are plumbing, not owners");
ABSL_FLAG(std::string, stale, "2m",
          "drop a process that restarted (a newer pid of its executable writes to the directory) "
          "after this long without a snapshot");
ABSL_FLAG(std::vector<std::string>, debug_dir, {}, "directories with separate debug files");
ABSL_FLAG(std::string, sysroot, "", "prefix for the module paths in the snapshots");
ABSL_FLAG(std::string, max_snapshot_size, "1GiB", "skip snapshot files larger than SIZE");

namespace {

constexpr char kUsage[] = "usage: retain-exporter [flags] DIR...";
constexpr char kHelpStart[] =
    "Watches snapshot directories (continuous mode: RETAIN_SNAPSHOT_INTERVAL) and serves\n"
    "Prometheus metrics on 127.0.0.1: per owner live bytes, bytes per request and the verdict\n"
    "over a window of each process's newest snapshots; per process RSS, tracked, allocator-held\n"
    "and device memory; the shim's health. Metrics and labels: README, \"retain-exporter\".\n"
    "Flags:\n";
constexpr char kHelpEnd[] = "Exit status: 0 after SIGINT/SIGTERM, 2 usage error.\n";

std::atomic<bool> g_stop{false};
void OnStop(int) { g_stop.store(true); }

int Fail(absl::string_view message) {
  std::cerr << "retain-exporter: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace retain::tool;  // NOLINT: a main of one tool
  absl::SetProgramUsageMessage(kUsage);
  NormalizeDashedFlags(argc, argv);
  if (WantsHelp(argc, argv)) {
    std::cout << kUsage << "\n" << kHelpStart << FlagsHelp(__FILE__) << kHelpEnd;
    return 0;
  }
  if (absl::Status flags = CheckFlags(argc, argv); !flags.ok()) {
    return Fail(absl::StrCat(flags.message(), " (", kUsage, ")"));
  }
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  ExporterOptions options;
  for (size_t i = 1; i < args.size(); ++i) options.dirs.emplace_back(args[i]);
  if (options.dirs.empty()) return Fail(absl::StrCat("no directory given (", kUsage, ")"));

  absl::Duration interval, stale;
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_interval), &interval) ||
      interval < absl::Milliseconds(100)) {
    return Fail("--interval must be a duration of at least 100ms (e.g. 5s)");
  }
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_stale), &stale) || stale < absl::ZeroDuration()) {
    return Fail("--stale must be a duration (e.g. 2m)");
  }
  options.stale = stale;
  const int port = absl::GetFlag(FLAGS_port), window = absl::GetFlag(FLAGS_window),
            top = absl::GetFlag(FLAGS_top);
  if (port < 0 || port > 65535) return Fail("--port must be 0..65535");
  if (window < 3) return Fail("--window must be at least 3");
  if (top < 1) return Fail("--top must be at least 1");
  options.window = static_cast<size_t>(window);
  if (!ParseGroupBy(absl::GetFlag(FLAGS_by), &options.owners.by) ||
      options.owners.by == GroupBy::kStack || options.owners.by == GroupBy::kTag) {
    return Fail("--by must be site, function, module, kind or category");
  }
  if (!ParseMeasure(absl::GetFlag(FLAGS_measure), &options.measure)) {
    return Fail("--measure must be resident or allocated");
  }
  options.owners.extra_skip = absl::GetFlag(FLAGS_skip);
  const std::string rules_flag = absl::GetFlag(FLAGS_rules);
  for (absl::string_view path : absl::StrSplit(rules_flag, ',', absl::SkipEmpty())) {
    absl::StatusOr<retain::v1::Rules> loaded = LoadRules(std::string(path));
    if (!loaded.ok()) return Fail(loaded.status().message());
    if (!options.rules) options.rules.emplace();
    options.rules->MergeFrom(*loaded);
  }
  if (options.owners.by == GroupBy::kCategory && !options.rules) {
    return Fail("--by category needs --rules");
  }
  options.symbolizer.debug_dirs = absl::GetFlag(FLAGS_debug_dir);
  options.symbolizer.sysroot = absl::GetFlag(FLAGS_sysroot);
  absl::StatusOr<uint64_t> max_size = ParseMaxSnapshotSize(absl::GetFlag(FLAGS_max_snapshot_size));
  if (!max_size.ok()) return Fail(max_size.status().message());
  options.read.max_bytes = *max_size;

  MetricsOptions metrics_options;
  metrics_options.top = static_cast<size_t>(top);
  metrics_options.categories = options.rules.has_value();
  absl::StatusOr<std::unique_ptr<Exporter>> exporter = Exporter::Create(std::move(options));
  if (!exporter.ok()) return Fail(exporter.status().message());
  absl::StatusOr<MetricsServer> server = MetricsServer::Listen(static_cast<uint16_t>(port));
  if (!server.ok()) return Fail(server.status().message());

  struct sigaction action = {};
  action.sa_handler = OnStop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::cout << "listening on 127.0.0.1:" << server->port() << std::endl;

  auto render = [&] {
    return FormatMetrics((*exporter)->Processes(), (*exporter)->Directories(), metrics_options);
  };
  auto stop = [] { return g_stop.load(); };
  while (!g_stop.load()) {
    (*exporter)->Scan(absl::Now());
    server->Serve(absl::Now() + interval, render, stop);
  }
  return 0;
}
