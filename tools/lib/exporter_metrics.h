// exporter_metrics: retain-exporter's state (exporter.h) in the Prometheus
// text exposition format (version 0.0.4), one metric family at a time with
// its # HELP and # TYPE lines.
//
// Labels: every series of a process has dir (the directory as given), exe
// and pid. Owners add owner (its name as retain-diff shows it: the site,
// or the category with --rules --by category), domain (host, or the
// device: device:cuda:0), verdict (over the window: linear, plateau,
// warm-up, flat, noise, too-few; "none" for "other"), and with --rules
// category and bounded ("true" for a cache by design).
//
// Cardinality is bounded: per process at most `top` owners have their own
// series, ranked linear first, then by their newest bytes; the rest are
// summed into one owner "other". A process's series are at most
// top + 1 owners x 4 metrics + 11 + its devices; a verdict that changes
// starts a new series (the old one goes stale in Prometheus).
//
// Pure functions; thread-compatible.
#ifndef RETAIN_TOOLS_LIB_EXPORTER_METRICS_H_
#define RETAIN_TOOLS_LIB_EXPORTER_METRICS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tools/lib/exporter.h"

namespace retain::tool {

struct MetricsOptions {
  size_t top = 10;
  bool categories = false;  // --rules given: category and bounded labels
};

std::string FormatMetrics(const std::vector<ProcessView>& processes,
                          const std::vector<DirectoryView>& directories,
                          const MetricsOptions& options);

// A label value escaped as the format requires (\\, \", \n).
std::string EscapeLabelValue(absl::string_view value);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_EXPORTER_METRICS_H_
