// exporter_metrics: see exporter_metrics.h.
#include "tools/lib/exporter_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace retain::tool {

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// Prometheus floats: integers as integers, the rest with enough digits.
std::string Number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::fabs(value) < 9e15 && value == std::floor(value)) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrFormat("%.17g", value);
}

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string LabelText(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", labels[i].first, "=\"", EscapeLabelValue(labels[i].second),
                    "\"");
  }
  return out + "}";
}

// The families, in output order, each with its samples.
class Families {
 public:
  void Declare(const std::string& name, const std::string& type, const std::string& help) {
    order_.push_back(name);
    families_[name].header =
        absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Add(const std::string& name, const Labels& labels, double value) {
    absl::StrAppend(&families_[name].samples, name, LabelText(labels), " ", Number(value), "\n");
  }
  std::string Text() const {
    std::string out;
    for (const std::string& name : order_) {
      const Family& family = families_.at(name);
      absl::StrAppend(&out, family.header, family.samples);
    }
    return out;
  }

 private:
  struct Family {
    std::string header;
    std::string samples;
  };
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

int64_t Last(const std::vector<int64_t>& values) { return values.empty() ? 0 : values.back(); }

void AddOwners(const ProcessView& process, const Labels& base, const MetricsOptions& options,
               Families& out) {
  const TrendResult& trend = *process.trend;
  const bool resident = trend.measure.used == Measure::kResident;
  std::vector<const TrendRow*> rows;
  for (const TrendRow& row : trend.rows) {
    const bool any = std::any_of(row.live_bytes.begin(), row.live_bytes.end(),
                                 [](int64_t v) { return v != 0; }) ||
                     std::any_of(row.allocated_bytes.begin(), row.allocated_bytes.end(),
                                 [](int64_t v) { return v != 0; });
    if (any) rows.push_back(&row);
  }
  // Linear first (what alerts are about), then by the newest bytes.
  std::stable_sort(rows.begin(), rows.end(), [](const TrendRow* a, const TrendRow* b) {
    const bool la = a->fit.verdict == Verdict::kLinear, lb = b->fit.verdict == Verdict::kLinear;
    if (la != lb) return la;
    return Last(a->live_bytes) > Last(b->live_bytes);
  });
  auto emit = [&](const Labels& labels, double live, double allocated, double slope, double fit) {
    if (resident) out.Add("retain_owner_resident_bytes", labels, live);
    out.Add("retain_owner_allocated_bytes", labels, resident ? allocated : live);
    out.Add("retain_owner_bytes_per_request", labels, slope);
    out.Add("retain_owner_fit", labels, fit);
  };
  double other_live = 0, other_allocated = 0, other_slope = 0;
  bool others = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    const TrendRow& row = *rows[i];
    if (i >= options.top) {
      others = true;
      other_live += static_cast<double>(Last(row.live_bytes));
      other_allocated += static_cast<double>(Last(row.allocated_bytes));
      other_slope += row.fit.slope;  // least squares is linear: the sum's slope
      continue;
    }
    Labels labels = base;
    labels.emplace_back("owner", row.owner.display);
    labels.emplace_back("domain", row.owner.domain);
    labels.emplace_back("verdict", VerdictName(row.fit.verdict));
    if (options.categories) {
      labels.emplace_back("category", row.owner.category);
      labels.emplace_back("bounded", row.owner.bounded ? "true" : "false");
    }
    emit(labels, static_cast<double>(Last(row.live_bytes)),
         static_cast<double>(Last(row.allocated_bytes)), row.fit.slope, row.fit.r_squared);
  }
  if (others) {
    Labels labels = base;
    labels.emplace_back("owner", "other");
    labels.emplace_back("domain", "");
    labels.emplace_back("verdict", "none");
    if (options.categories) {
      labels.emplace_back("category", "");
      labels.emplace_back("bounded", "false");
    }
    emit(labels, other_live, other_allocated, other_slope, 0);
  }
}

}  // namespace

std::string FormatMetrics(const std::vector<ProcessView>& processes,
                          const std::vector<DirectoryView>& directories,
                          const MetricsOptions& options) {
  Families out;
  out.Declare("retain_owner_resident_bytes", "gauge",
              "Live bytes of an owner in RAM or swap at the newest snapshot (top owners, the "
              "rest as owner=\"other\").");
  out.Declare("retain_owner_allocated_bytes", "gauge",
              "Live bytes of an owner as allocated (sizes asked for) at the newest snapshot.");
  out.Declare("retain_owner_bytes_per_request", "gauge",
              "Growth of an owner per request served, least squares over the window "
              "(linear: the rate now).");
  out.Declare("retain_owner_fit", "gauge", "R^2 of the owner's line over the window, 0..1.");
  out.Declare("retain_process_rss_bytes", "gauge", "VmRSS at the newest snapshot.");
  out.Declare("retain_process_anon_swap_bytes", "gauge",
              "RssAnon + VmSwap at the newest snapshot.");
  out.Declare("retain_process_tracked_bytes", "gauge",
              "All live tracked host bytes (resident, or allocated without residency).");
  out.Declare("retain_process_allocator_held_bytes", "gauge",
              "Bytes freed but held by malloc (mallinfo2 fordblks).");
  out.Declare("retain_process_device_bytes", "gauge", "Live tracked device memory per device.");
  out.Declare("retain_process_requests_closed", "gauge",
              "Requests that had ended at the newest snapshot (the trend's x).");
  out.Declare("retain_process_snapshot_timestamp_seconds", "gauge",
              "When the newest snapshot was taken (Unix time).");
  out.Declare("retain_process_window_snapshots", "gauge",
              "Snapshots in the window the verdicts are computed over.");
  out.Declare("retain_shim_degraded", "gauge",
              "1 when the shim reached its memory cap and counts without recording.");
  out.Declare("retain_shim_dropped_records", "gauge",
              "Allocations the shim counted without a record (degraded).");
  out.Declare("retain_shim_failed_snapshots", "gauge", "Snapshots the shim could not write.");
  out.Declare("retain_exporter_directory_up", "gauge",
              "1 when the snapshot directory could be listed at the last scan.");
  out.Declare("retain_exporter_snapshots_read_total", "counter", "Snapshots read.");
  out.Declare("retain_exporter_read_errors_total", "counter",
              "Snapshots that could not be read (cut, corrupt); retried while they change.");
  out.Declare("retain_exporter_processes", "gauge", "Processes with a series.");

  for (const ProcessView& process : processes) {
    const Labels base = {
        {"dir", process.dir}, {"exe", process.exe}, {"pid", absl::StrCat(process.pid)}};
    const v1::Snapshot& last = *process.last;
    out.Add("retain_process_rss_bytes", base, static_cast<double>(last.memory().vm_rss()));
    out.Add("retain_process_anon_swap_bytes", base,
            static_cast<double>(last.memory().rss_anon() + last.memory().vm_swap()));
    out.Add("retain_process_tracked_bytes", base,
            static_cast<double>(process.trend ? Last(process.trend->tracked.live_bytes)
                                              : TrackedLiveBytes(last, Measure::kResident)));
    out.Add("retain_process_allocator_held_bytes", base,
            static_cast<double>(last.memory().malloc_free_held()));
    out.Add("retain_process_requests_closed", base,
            static_cast<double>(last.header().requests_closed()));
    out.Add("retain_process_snapshot_timestamp_seconds", base,
            static_cast<double>(last.header().time_unix_ns()) / 1e9);
    out.Add("retain_process_window_snapshots", base, static_cast<double>(process.snapshots));
    out.Add("retain_shim_degraded", base, last.health().degraded() ? 1 : 0);
    out.Add("retain_shim_dropped_records", base,
            static_cast<double>(last.health().dropped_records()));
    out.Add("retain_shim_failed_snapshots", base,
            static_cast<double>(last.health().failed_snapshots()));
    if (process.trend) {
      for (const TrendRow& device : process.trend->devices) {
        Labels labels = base;
        labels.emplace_back("device", device.owner.domain);
        out.Add("retain_process_device_bytes", labels,
                static_cast<double>(Last(device.live_bytes)));
      }
      AddOwners(process, base, options, out);
    }
  }
  for (const DirectoryView& directory : directories) {
    const Labels labels = {{"dir", directory.dir}};
    out.Add("retain_exporter_directory_up", labels, directory.up ? 1 : 0);
    out.Add("retain_exporter_snapshots_read_total", labels,
            static_cast<double>(directory.snapshots_read));
    out.Add("retain_exporter_read_errors_total", labels,
            static_cast<double>(directory.read_errors));
  }
  out.Add("retain_exporter_processes", {}, static_cast<double>(processes.size()));
  return out.Text();
}

}  // namespace retain::tool
