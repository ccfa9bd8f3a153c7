// exporter: retain-exporter's engine. Watches snapshot directories (one per
// server process, or several processes in one), reads each new snapshot
// once, keeps per process a window of its newest snapshots as a trend
// (trend.h: per owner, bytes against requests served, a verdict), and
// renders it all as Prometheus metrics (exporter_metrics.h).
//
// What it survives, and how:
//   - a snapshot that cannot be read (cut, corrupt, still being copied in:
//     the shim itself renames only whole files): skipped and retried at the
//     next scans, while its size or time changes and at most kReadAttempts
//     times otherwise; a newer snapshot of the process read meanwhile moves
//     past it. Each failure is counted (retain_exporter_read_errors_total).
//   - a snapshot deleted before it is read (RETAIN_KEEP): skipped silently.
//   - a process that restarts: a new pid is a new series; the old one is
//     dropped once its files are gone, or once a newer process of the same
//     executable has written to the directory and the old one has written
//     nothing for `stale` (the directory of a server that restarted holds
//     the dead one's last snapshots).
//   - a directory that disappears (or cannot be read): its processes are
//     dropped; retain_exporter_directory_up says 0 until it is back.
//
// The window: the newest `window` snapshots with distinct request counts
// (Header.requests_closed): a snapshot at the same count as the newest one
// replaces it (unless that one was taken with no request open and the new
// one was not: its rows would hold part of the next request), so an idle
// server's interval snapshots do not crowd out the requests a verdict needs. Verdicts are about the
// window: a cache that filled before it reads flat, not plateau.
//
// Memory: per process, the window's summaries and per owner one value per
// snapshot in the window (TrendBuilder with DropOldest), plus the owners
// and distinct stacks seen; one snapshot parsed at a time. Modules are
// symbolized once for all processes (one Symbolizer, owner.h's resolver).
//
// Thread-compatible: one thread scans and renders (retain-exporter's loop).
#ifndef RETAIN_TOOLS_LIB_EXPORTER_H_
#define RETAIN_TOOLS_LIB_EXPORTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "retain.pb.h"
#include "rules.pb.h"
#include "tools/lib/measure.h"
#include "tools/lib/owner.h"
#include "tools/lib/snapshot_reader.h"
#include "tools/lib/symbolizer.h"
#include "tools/lib/trend.h"

namespace retain::tool {

// A snapshot's file name as the shim writes it: <exe>.<pid>.<sequence>.pb.
struct SnapshotName {
  std::string exe;
  uint32_t pid = 0;
  uint64_t sequence = 0;
};
// Nullopt for any other name (the shim's ".<name>.pb.tmp" included).
std::optional<SnapshotName> ParseSnapshotName(absl::string_view file_name);

inline constexpr int kReadAttempts = 3;

struct ExporterOptions {
  std::vector<std::string> dirs;
  size_t window = 30;   // newest snapshots per process in the trend (at least 3)
  size_t top = 10;      // owners per process with their own series; the rest "other"
  OwnerOptions owners;  // grouping (site, or category with rules); its rules pointer is set
  std::optional<v1::Rules> rules;  // --rules: categories (owned here)
  Measure measure = Measure::kResident;
  SymbolizerOptions symbolizer;
  ReadOptions read;
  absl::Duration stale = absl::Minutes(2);
};

// One process's state as the metrics show it.
struct ProcessView {
  std::string dir;
  std::string exe;
  uint32_t pid = 0;
  size_t snapshots = 0;  // in the window
  // The newest snapshot's summary (header, memory, totals, health, devices).
  std::shared_ptr<const v1::Snapshot> last;
  // The window's trend; absent with fewer than 3 snapshots.
  std::optional<TrendResult> trend;
};

struct DirectoryView {
  std::string dir;
  bool up = false;
  uint64_t snapshots_read = 0;
  uint64_t read_errors = 0;
  std::string last_error;  // the newest read error, or ""
};

class Exporter {
 public:
  // Fails when a --skip or rules regex does not compile, or the window is
  // below 3.
  static absl::StatusOr<std::unique_ptr<Exporter>> Create(ExporterOptions options);
  ~Exporter();

  // Reads what is new in every directory; `now` decides staleness. Never
  // fails: problems are counted per directory.
  void Scan(absl::Time now);

  std::vector<ProcessView> Processes() const;
  std::vector<DirectoryView> Directories() const;
  const ExporterOptions& options() const { return options_; }

 private:
  struct Process;
  struct Directory;
  explicit Exporter(ExporterOptions options);
  void ScanDirectory(Directory& directory, absl::Time now);
  void ReadNew(Directory& directory, Process& process,
               const std::map<uint64_t, std::string>& files);

  ExporterOptions options_;
  std::unique_ptr<Symbolizer> symbolizer_;
  std::unique_ptr<OwnerResolver> owners_;
  std::vector<std::unique_ptr<Directory>> directories_;
};

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_EXPORTER_H_
