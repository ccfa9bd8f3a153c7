// diff_format: see diff_format.h.
#include "tools/lib/diff_format.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "tools/lib/allocator_report.h"
#include "tools/lib/byte_size.h"
#include "tools/lib/domain.h"
#include "tools/lib/dump_format.h"
#include "tools/lib/owned_allocations.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

std::string Describe(const v1::Snapshot& snapshot) {
  const v1::Header& h = snapshot.header();
  std::string text = absl::StrCat("#", h.sequence());
  if (!h.label().empty()) absl::StrAppend(&text, " \"", h.label(), "\"");
  absl::StrAppend(&text, " (", TriggerName(h.trigger()), ", ",
                  absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixNanos(h.time_unix_ns()),
                                   absl::LocalTimeZone()),
                  ")");
  return text;
}

std::string Percent(double share) { return absl::StrFormat("%.1f%%", share * 100); }

size_t RowLimit(size_t rows, int top) {
  return top <= 0 ? rows : std::min(rows, static_cast<size_t>(top));
}

std::string Pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string PadLeft(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

std::string JsonOwner(const Owner& owner) {
  std::vector<std::string> chain;
  for (const std::string& frame : owner.chain) chain.push_back(JsonString(frame));
  std::vector<std::string> frames;
  for (const std::string& frame : owner.frames) frames.push_back(JsonString(frame));
  return absl::StrCat(
      "{\"key\":", JsonString(owner.key), ",\"display\":", JsonString(owner.display),
      ",\"domain\":", JsonString(owner.domain),
      ",\"category\":", owner.category.empty() ? "null" : JsonString(owner.category),
      ",\"bounded\":", owner.bounded ? "true" : "false", ",\"chain\":[", absl::StrJoin(chain, ","),
      "],\"frames\":[", absl::StrJoin(frames, ","), "]}");
}

std::string JsonStringOrNull(const std::string& text) {
  return text.empty() ? "null" : JsonString(text);
}

// " (NAME, UUID)" after a device domain's name; "" when neither is known.
std::string DeviceHeading(const std::string& name, const std::string& uuid) {
  if (name.empty() && uuid.empty()) return "";
  if (name.empty() || uuid.empty()) return absl::StrCat(" (", name, uuid, ")");
  return absl::StrCat(" (", name, ", ", uuid, ")");
}

std::string JsonSnapshotRef(const v1::Snapshot& snapshot) {
  const v1::Header& h = snapshot.header();
  return absl::StrCat("{\"pid\":", h.pid(), ",\"exe\":", JsonString(h.exe_path()),
                      ",\"sequence\":", h.sequence(), ",\"label\":", JsonString(h.label()),
                      ",\"trigger\":", JsonString(TriggerName(h.trigger())),
                      ",\"time_unix_ns\":", h.time_unix_ns(),
                      ",\"sample_interval_bytes\":", h.sample_interval_bytes(),
                      ",\"degraded\":", IsDegraded(snapshot) ? "true" : "false",
                      ",\"dropped_records\":", snapshot.health().dropped_records(),
                      ",\"dropped_bytes\":", snapshot.health().dropped_bytes(),
                      ",\"foreign_malloc\":", JsonStringOrNull(h.foreign_malloc_path()), "}");
}

// The "warnings" array: the degraded warning first, then `more` (an RSS
// explanation that does not add up), then the symbolizer's.
std::string JsonWarnings(const FormatOptions& options, const std::string& more = "") {
  std::vector<std::string> warnings;
  if (!options.degraded_warning.empty()) warnings.push_back(JsonString(options.degraded_warning));
  if (!options.heap_warning.empty()) warnings.push_back(JsonString(options.heap_warning));
  if (!more.empty()) warnings.push_back(JsonString(more));
  for (const std::string& warning : options.warnings) warnings.push_back(JsonString(warning));
  return absl::StrCat("[", absl::StrJoin(warnings, ","), "]");
}

// The warnings every figure below is subject to, first in the table.
void AppendTopWarnings(const FormatOptions& options, std::string* out) {
  for (const std::string* warning : {&options.degraded_warning, &options.heap_warning}) {
    if (!warning->empty()) absl::StrAppend(out, "  WARNING     ", *warning, "\n");
  }
}

std::string JsonDouble(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.17g", value);  // round-trips: byte counts stay exact
}

std::string Bytes(double bytes) {
  return HumanBytes(static_cast<uint64_t>(std::max(std::llround(bytes), 0LL)));
}

// " ±1.2 MiB" for an estimate: one standard error; "" when exact.
std::string PlusMinus(double error, bool estimated) {
  return estimated ? absl::StrCat(" \u00b1", Bytes(error)) : "";
}

// `unit`: "request" when the x axis counts requests, else "snapshot".
std::string VerdictDetail(const TrendFit& fit, absl::string_view unit) {
  switch (fit.verdict) {
    case Verdict::kLinear:
      return absl::StrCat(SignedBytes(static_cast<int64_t>(std::llround(fit.slope))), "/", unit,
                          PlusMinus(fit.slope_error, fit.estimated), " (fit ",
                          absl::StrFormat("%.2f", fit.r_squared), ")");
    case Verdict::kPlateau: {
      std::string band;
      if (fit.band_high > fit.band_low) {
        band = absl::StrCat(" (", Bytes(fit.band_low), "..", Bytes(fit.band_high), ")");
      }
      return absl::StrCat("at ", Bytes(fit.level), PlusMinus(fit.error, fit.estimated), band,
                          " from ", unit, " ", absl::StrFormat("%g", fit.flat_from));
    }
    case Verdict::kWarmUp:
      return absl::StrCat("one step to ", Bytes(fit.level), PlusMinus(fit.error, fit.estimated),
                          " at ", unit, " ", absl::StrFormat("%g", fit.flat_from));
    case Verdict::kTooFew:
      return absl::StrCat(fit.request_counts, " ", unit, " counts; a verdict needs ",
                          kMinRequestCounts);
    case Verdict::kFlat:
    case Verdict::kNoise:
      return absl::StrCat(SignedBytes(static_cast<int64_t>(std::llround(fit.growth))), " overall",
                          PlusMinus(fit.error, fit.estimated));
  }
  return "";
}

// Signed bytes without a '+': "-1.0 MiB" below zero (a byte figure that
// should not be negative shows as it is, never clamped).
std::string Bytes(int64_t bytes) {
  return bytes < 0 ? "-" + HumanBytes(static_cast<uint64_t>(-bytes))
                   : HumanBytes(static_cast<uint64_t>(bytes));
}

// The measure the table is not sorted by, shown beside it (only when the
// snapshots have residency: without it there is one measure).
Measure OtherMeasure(Measure measure) {
  return measure == Measure::kResident ? Measure::kAllocated : Measure::kResident;
}

// The header's measure line: which bytes, and how to get the other ones. A
// fallback is a warning: the resident measure was asked for and cannot be
// had.
void AppendMeasureLine(const MeasureChoice& measure, std::string* out) {
  if (!measure.fallback_warning.empty()) {
    absl::StrAppend(out, "  warning     ", measure.fallback_warning, "\n");
  } else if (!measure.residency) {
    absl::StrAppend(out, "  measure     allocated bytes (the snapshots have no residency)\n");
  } else if (measure.used == Measure::kResident) {
    absl::StrAppend(out,
                    "  measure     resident bytes (in RAM + swapped, as RssAnon+VmSwap counts); "
                    "allocated beside\n");
  } else {
    absl::StrAppend(out,
                    "  measure     allocated bytes (asked for, pages never touched included); "
                    "resident beside\n");
  }
}

// A kind's growth on the "tracked" line (a device kind's on the "device"
// line, after its domain): in the measure, and with residency the other
// measure (and swapped bytes, when any) beside it.
std::string KindGrowthText(const KindGrowth& kind, const MeasureChoice& measure) {
  std::string text = absl::StrCat(kind.domain == "host" ? "" : kind.domain + " ",
                                  KindName(kind.kind), " ", SignedBytes(kind.measured_growth));
  if (!measure.residency) return text;
  const int64_t other = measure.used == Measure::kResident
                            ? kind.live_bytes_growth
                            : kind.resident_bytes_growth + kind.swapped_bytes_growth;
  absl::StrAppend(&text, " (", MeasureName(OtherMeasure(measure.used)), " ", SignedBytes(other));
  if (kind.swapped_bytes_growth != 0) {
    absl::StrAppend(&text, ", swapped ", SignedBytes(kind.swapped_bytes_growth));
  }
  absl::StrAppend(&text, ")");
  return text;
}

// The host's memory by category (--rules), in the measure, the other
// measure beside: "go-heap 720.0 KiB (allocated 693.1 MiB), (uncategorized)
// 18.0 MiB". Live: what each holds; two snapshots: what each retained.
std::string CategoriesText(const DiffResult& diff) {
  std::vector<std::string> parts;
  for (const DiffRow& row : diff.categories) {
    const bool live = diff.before == nullptr;
    std::string text = absl::StrCat(
        row.owner.display, " ",
        live ? HumanBytes(static_cast<uint64_t>(std::max<int64_t>(row.retained_bytes, 0)))
             : SignedBytes(row.net_bytes()));
    if (diff.measure.residency) {
      const Measure other = OtherMeasure(diff.measure.used);
      const int64_t retained = row.retained.In(other);
      const int64_t bytes = live ? retained : retained - row.released.In(other);
      absl::StrAppend(&text, " (", MeasureName(other), " ",
                      live ? HumanBytes(static_cast<uint64_t>(std::max<int64_t>(bytes, 0)))
                           : SignedBytes(bytes),
                      ")");
    }
    parts.push_back(std::move(text));
  }
  return absl::StrJoin(parts, ", ");
}

std::string JsonBytes(const char* prefix, const ByteMeasures& bytes) {
  return absl::StrCat(",\"", prefix, "_allocated_bytes\":", bytes.allocated, ",\"", prefix,
                      "_resident_bytes\":", bytes.resident, ",\"", prefix,
                      "_swapped_bytes\":", bytes.swapped);
}

std::string JsonLevel(const RssLevel& level) {
  return absl::StrCat("{\"anon_swap\":", level.anon_swap, ",\"tracked_anon\":", level.tracked_anon,
                      ",\"allocator_free_held\":", level.allocator_free_held,
                      ",\"untracked\":", level.untracked, ",\"shim_own\":", level.shim_own,
                      ",\"allocator_free_trimmed\":", level.allocator_free_trimmed, "}");
}

}  // namespace

std::string FormatDiffText(const DiffResult& diff, const FormatOptions& options) {
  const v1::Snapshot& after = *diff.after;
  std::string out;
  absl::StrAppend(&out, "retain-diff: ", diff.before == nullptr ? "live memory" : "retained memory",
                  " of ", after.header().exe_path(), " (pid ", after.header().pid(), ")\n");
  AppendTopWarnings(options, &out);
  absl::StrAppend(&out, "  mode        ", DiffModeName(diff.mode), ": ", diff.mode_reason, "\n");
  if (diff.before != nullptr) {
    absl::StrAppend(&out, "  before      ", Describe(*diff.before), " pid ",
                    diff.before->header().pid(), "\n");
    absl::StrAppend(&out, "  after       ", Describe(after), ", ",
                    absl::StrFormat("%.1f s later", diff.seconds_between));
    if (diff.requests_between >= 0) {
      absl::StrAppend(&out, ", ", diff.requests_between, " requests between");
    }
    absl::StrAppend(&out, "\n");
  } else {
    absl::StrAppend(&out, "  snapshot    ", Describe(after), "\n");
  }
  if (diff.estimated) {
    absl::StrAppend(&out, "  note        sampled snapshots: byte figures are estimates\n");
  }
  AppendMeasureLine(diff.measure, &out);
  const RssExplanation& rss = diff.rss;
  const char* growth = diff.before == nullptr ? "" : " growth";
  absl::StrAppend(&out, "  RSS         VmRSS ", SignedBytes(rss.vm_rss_growth), ", RssAnon+VmSwap ",
                  SignedBytes(rss.anon_swap_growth), "\n");
  // Host kinds on the tracked line; device kinds on their own (domain.h),
  // each after its device's domain, in the domains' order.
  std::vector<std::string> kinds, devices;
  std::vector<KindGrowth> device_kinds;
  for (const KindGrowth& kind : rss.tracked) {
    if (IsDeviceKind(kind.kind)) {
      device_kinds.push_back(kind);
    } else {
      kinds.push_back(KindGrowthText(kind, diff.measure));
    }
  }
  std::stable_sort(device_kinds.begin(), device_kinds.end(),
                   [](const KindGrowth& a, const KindGrowth& b) {
                     if (a.domain != b.domain) return DomainLess(a.domain, b.domain);
                     return a.kind < b.kind;
                   });
  for (const KindGrowth& kind : device_kinds) devices.push_back(KindGrowthText(kind, diff.measure));
  absl::StrAppend(&out, "  tracked     ", kinds.empty() ? "nothing" : absl::StrJoin(kinds, ", "),
                  "\n");
  if (!devices.empty()) {
    absl::StrAppend(&out, "  device      ", absl::StrJoin(devices, ", "),
                    " (device memory, not in RSS)\n");
  }
  if (!diff.categories.empty()) {
    absl::StrAppend(&out, "  categories  ", CategoriesText(diff), "\n");
  }
  absl::StrAppend(&out, "  allocator   ", SignedBytes(rss.allocator_retained_growth),
                  " freed but held by malloc\n");
  const AllocatorReport allocator = ReportAllocator(diff);
  absl::StrAppend(&out, AllocatorArenasText(allocator));
  // The shim's arena is anonymous memory too; what of it was touched is
  // not measured, so it is said as a bound, never subtracted.
  const int64_t own = diff.before == nullptr ? rss.after_level.shim_own : rss.shim_own_growth;
  absl::StrAppend(&out, "  untracked   ", SignedBytes(rss.untracked_growth),
                  " of anonymous memory no allocation explains",
                  rss.degraded ? " (the dropped records' share included)" : "",
                  own > 0 ? absl::StrCat("; up to ", HumanBytes(static_cast<uint64_t>(own)),
                                         " of it is retain's own arena")
                          : "",
                  "\n");
  if (diff.measure.residency && diff.measure.used == Measure::kResident) {
    // The level at `after`, every term memory: it adds up exactly.
    const RssLevel& level = rss.after_level;
    absl::StrAppend(
        &out, "  adds up     ", diff.before == nullptr ? "" : "at after: ", "tracked resident ",
        Bytes(level.tracked_anon), " + allocator-held free ", Bytes(level.allocator_free_held),
        " + untracked ", Bytes(level.untracked), " = RssAnon+VmSwap ", Bytes(level.anon_swap),
        level.allocator_free_trimmed > 0
            ? absl::StrCat(" (malloc counts ", Bytes(level.allocator_free_trimmed),
                           " more free whose pages trims gave back)")
            : "",
        "\n");
  }
  if (!rss.adds_up_warning.empty()) {
    absl::StrAppend(&out, "  warning     ", rss.adds_up_warning, "\n");
  }
  if (rss.degraded) {
    absl::StrAppend(&out,
                    "  explained   not computed: the shim dropped records (see WARNING above)\n");
  } else if (rss.explained_share >= 0) {
    absl::StrAppend(&out, "  explained   ", Percent(rss.explained_share), " of the RssAnon+VmSwap",
                    growth, " is tracked allocations\n");
  }
  absl::StrAppend(&out, AllocatorTrimAndAdviceText(allocator));
  for (const std::string& warning : options.warnings) {
    absl::StrAppend(&out, "  warning     ", warning, "\n");
  }
  absl::StrAppend(&out, "\n");

  const bool live = diff.before == nullptr;
  // Columns: the measure's bytes (retained or live), with residency the
  // other measure's beside them (and swapped bytes when any), count, share
  // (of the measure), released (in the measure).
  const MeasureChoice& measure = diff.measure;
  const bool both = measure.residency;
  const Measure other = OtherMeasure(measure.used);
  const bool swapped = both && diff.total_retained.swapped != 0;
  auto byte_columns = [&](int64_t bytes, const ByteMeasures& by) {
    std::string text = PadLeft(Bytes(bytes), 11);
    if (both) absl::StrAppend(&text, PadLeft(Bytes(by.In(other)), 11));
    if (swapped) absl::StrAppend(&text, PadLeft(Bytes(by.swapped), 11));
    return text;
  };
  std::string header = PadLeft(both ? MeasureName(measure.used) : (live ? "live" : "retained"), 11);
  if (both) absl::StrAppend(&header, PadLeft(MeasureName(other), 11));
  if (swapped) absl::StrAppend(&header, PadLeft("swapped", 11));
  absl::StrAppend(&out, header, PadLeft("count", 9), PadLeft("share", 8));
  if (!live) absl::StrAppend(&out, PadLeft("released", 11));
  absl::StrAppend(&out, "  owner (", GroupByName(options.by), ")\n");
  const size_t indent = header.size() + 9 + 8 + (live ? 0 : 11) + 2;
  // One section per domain: the host's rows and total, then each device
  // domain's below its own heading, shares of its own total (domain.h:
  // device memory is not RSS, and never added to it). --top is per domain.
  auto section = [&](const std::string& domain, const DomainTotal& total) {
    size_t in_domain = 0, shown = 0;
    const size_t limit = options.top > 0 ? static_cast<size_t>(options.top) : SIZE_MAX;
    for (const DiffRow& row : diff.rows) {
      if (row.owner.domain != domain) continue;
      ++in_domain;
      if (shown == limit) continue;
      ++shown;
      double share = total.retained_bytes > 0 ? static_cast<double>(row.retained_bytes) /
                                                    static_cast<double>(total.retained_bytes)
                                              : 0;
      absl::StrAppend(&out, byte_columns(row.retained_bytes, row.retained),
                      PadLeft(absl::StrCat(row.retained_count), 9), PadLeft(Percent(share), 8));
      if (!live) {
        absl::StrAppend(&out, PadLeft(Bytes(row.released_bytes), 11));
      }
      absl::StrAppend(&out, "  ", row.owner.display);
      if (!row.owner.category.empty() && options.by != GroupBy::kCategory) {
        absl::StrAppend(&out, "  [", row.owner.category, row.owner.bounded ? ", bounded" : "", "]");
      }
      absl::StrAppend(&out, "\n");
      for (const std::string& caller : row.owner.chain) {
        absl::StrAppend(&out, std::string(indent, ' '), "<- ", caller, "\n");
      }
    }
    if (shown < in_domain) {
      absl::StrAppend(&out, "  ... ", in_domain - shown, " more owners (--top)\n");
    }
    absl::StrAppend(&out, byte_columns(total.retained_bytes, total.retained),
                    PadLeft(absl::StrCat(total.retained_count), 9), PadLeft("", 8));
    if (!live) {
      absl::StrAppend(&out, PadLeft(Bytes(total.released_bytes), 11));
    }
    absl::StrAppend(&out, domain == "host" ? "  total\n" : "  total " + domain + "\n");
  };
  DomainTotal host;
  host.retained_bytes = diff.total_retained_bytes;
  host.retained_count = diff.total_retained_count;
  host.released_bytes = diff.total_released_bytes;
  host.retained = diff.total_retained;
  host.released = diff.total_released;
  section("host", host);
  for (const DomainTotal& device : diff.devices) {
    absl::StrAppend(&out, "\n  ", device.domain, DeviceHeading(device.name, device.uuid),
                    ": device memory (committed when allocated: resident = allocated; not RSS)\n");
    section(device.domain, device);
  }
  return out;
}

std::string FormatDiffJson(const DiffResult& diff, const FormatOptions& options) {
  const RssExplanation& rss = diff.rss;
  std::vector<std::string> kinds;
  for (const KindGrowth& kind : rss.tracked) {
    kinds.push_back(absl::StrCat(
        "{\"kind\":", JsonString(KindName(kind.kind)), ",\"domain\":", JsonString(kind.domain),
        ",\"live_bytes\":", kind.live_bytes_growth, ",\"live_count\":", kind.live_count_growth,
        ",\"resident_bytes\":", kind.resident_bytes_growth, ",\"swapped_bytes\":",
        kind.swapped_bytes_growth, ",\"measured_bytes\":", kind.measured_growth, "}"));
  }
  // Device domains' totals, each apart from the host's "total".
  std::vector<std::string> devices;
  for (const DomainTotal& device : diff.devices) {
    devices.push_back(absl::StrCat(
        "{\"domain\":", JsonString(device.domain), ",\"name\":", JsonStringOrNull(device.name),
        ",\"uuid\":", JsonStringOrNull(device.uuid), ",\"retained_bytes\":", device.retained_bytes,
        ",\"retained_count\":", device.retained_count, ",\"released_bytes\":",
        device.released_bytes, ",\"released_count\":", device.released_count, "}"));
  }
  std::vector<std::string> categories;
  for (const DiffRow& row : diff.categories) {
    categories.push_back(absl::StrCat(
        "{\"category\":", JsonString(row.owner.key), ",\"retained_bytes\":", row.retained_bytes,
        ",\"released_bytes\":", row.released_bytes, JsonBytes("retained", row.retained),
        JsonBytes("released", row.released), "}"));
  }
  std::vector<std::string> rows;
  const size_t shown = RowLimit(diff.rows.size(), options.top);
  for (size_t i = 0; i < shown; ++i) {
    const DiffRow& row = diff.rows[i];
    rows.push_back(absl::StrCat(
        "{\"owner\":", JsonOwner(row.owner), ",\"retained_bytes\":", row.retained_bytes,
        ",\"retained_count\":", row.retained_count, ",\"released_bytes\":", row.released_bytes,
        ",\"released_count\":", row.released_count, ",\"net_bytes\":", row.net_bytes(),
        JsonBytes("retained", row.retained), JsonBytes("released", row.released), "}"));
  }
  return absl::StrCat(
      "{\"schema\":\"retain-diff/1\",\"mode\":", JsonString(DiffModeName(diff.mode)),
      ",\"mode_reason\":", JsonString(diff.mode_reason),
      ",\"group_by\":", JsonString(GroupByName(options.by)),
      ",\"before\":", diff.before == nullptr ? "null" : JsonSnapshotRef(*diff.before),
      ",\"after\":", JsonSnapshotRef(*diff.after),
      ",\"seconds_between\":", JsonDouble(diff.seconds_between), ",\"requests_between\":",
      diff.requests_between < 0 ? "null" : absl::StrCat(diff.requests_between),
      ",\"estimated\":", diff.estimated ? "true" : "false",
      ",\"degraded\":", options.degraded_warning.empty() ? "false" : "true",
      ",\"measure\":", JsonString(MeasureName(diff.measure.used)),
      ",\"measure_requested\":", JsonString(MeasureName(diff.measure.requested)),
      ",\"residency_measured\":", diff.measure.residency ? "true" : "false",
      ",\"measure_fallback\":",
      diff.measure.fallback_warning.empty() ? "null" : JsonString(diff.measure.fallback_warning),
      ",\"rss\":{\"vm_rss_growth\":", rss.vm_rss_growth,
      ",\"anon_swap_growth\":", rss.anon_swap_growth, ",\"tracked\":[", absl::StrJoin(kinds, ","),
      "]", ",\"tracked_anon_growth\":", rss.tracked_anon_growth,
      ",\"allocator_retained_growth\":", rss.allocator_retained_growth,
      ",\"shim_own_growth\":", rss.shim_own_growth, ",\"untracked_growth\":", rss.untracked_growth,
      ",\"explained_share\":", rss.explained_share < 0 ? "null" : JsonDouble(rss.explained_share),
      ",\"after_level\":", JsonLevel(rss.after_level),
      ",\"before_level\":", rss.has_before ? JsonLevel(rss.before_level) : "null",
      ",\"adds_up\":", rss.adds_up_warning.empty() ? "true" : "false",
      "},\"allocator\":", AllocatorReportJson(ReportAllocator(diff)),
      ",\"total\":{\"retained_bytes\":", diff.total_retained_bytes,
      ",\"retained_count\":", diff.total_retained_count,
      ",\"released_bytes\":", diff.total_released_bytes,
      ",\"released_count\":", diff.total_released_count, JsonBytes("retained", diff.total_retained),
      JsonBytes("released", diff.total_released), "},\"devices\":[", absl::StrJoin(devices, ","),
      "],\"categories\":",
      diff.categories.empty() ? "null" : absl::StrCat("[", absl::StrJoin(categories, ","), "]"),
      ",\"owner_count\":", diff.rows.size(), ",\"rows\":[", absl::StrJoin(rows, ","),
      "],\"stacks\":", options.stacks == nullptr ? "null" : StackTreeJson(*options.stacks),
      ",\"warnings\":", JsonWarnings(options, rss.adds_up_warning), "}\n");
}

std::string FormatTrendText(const TrendResult& trend, const FormatOptions& options) {
  const v1::Snapshot& first = *trend.snapshots.front();
  const v1::Snapshot& last = *trend.snapshots.back();
  std::string out;
  absl::StrAppend(&out, "retain-diff --trend: ", first.header().exe_path(), " (pid ",
                  first.header().pid(), "), ", trend.snapshots.size(), " snapshots, ",
                  Describe(first), " to ", Describe(last), "\n");
  AppendTopWarnings(options, &out);
  AppendMeasureLine(trend.measure, &out);
  const absl::string_view unit = trend.requests_from_tags ? "request" : "snapshot";
  absl::StrAppend(&out, "  x axis      ",
                  trend.requests_from_tags ? "requests served (from request tags)"
                                           : "snapshot number (no request tags)",
                  ": ", absl::StrFormat("%g", trend.requests.front()), " .. ",
                  absl::StrFormat("%g", trend.requests.back()), "\n");
  if (trend.sample_interval_bytes != 0) {
    absl::StrAppend(
        &out, "  note        sampled snapshots (one heap sample per ",
        HumanBytes(trend.sample_interval_bytes),
        "): ~ marks estimates, \u00b1 one standard error (about sqrt(interval x bytes));"
        " growth within the error is never linear\n");
  }
  absl::StrAppend(&out, SeriesTrimsText(TrimsDuring(trend.snapshots)));
  for (const std::string& warning : options.warnings) {
    absl::StrAppend(&out, "  warning     ", warning, "\n");
  }
  // Columns: the verdict, the first and last figures in the measure (with
  // the resident measure, the last one's allocated bytes beside), and the
  // verdict's numbers.
  const bool allocated_beside = trend.measure.used == Measure::kResident;
  absl::StrAppend(&out, "\n", Pad("verdict", 9), PadLeft("first", 11), PadLeft("last", 11),
                  allocated_beside ? PadLeft("allocated", 11) : "", "  ",
                  Pad(absl::StrCat("per ", unit, " / level"), 34), "  owner (",
                  GroupByName(options.by), ")\n");
  auto line = [&](const TrendRow& row) {
    const std::string approx = row.estimated() ? "~" : "";
    auto figure = [&](int64_t bytes) {
      return PadLeft(approx + HumanBytes(static_cast<uint64_t>(std::max<int64_t>(bytes, 0))), 11);
    };
    absl::StrAppend(&out, Pad(VerdictName(row.fit.verdict), 9), figure(row.live_bytes.front()),
                    figure(row.live_bytes.back()));
    // The RSS lines have one measure: theirs.
    if (allocated_beside) {
      absl::StrAppend(
          &out, row.allocated_bytes.empty() ? PadLeft("", 11) : figure(row.allocated_bytes.back()));
    }
    absl::StrAppend(&out, "  ", Pad(VerdictDetail(row.fit, unit), 34), "  ", row.owner.display);
    if (!row.owner.category.empty() && options.by != GroupBy::kCategory) {
      absl::StrAppend(&out, "  [", row.owner.category, row.owner.bounded ? ", bounded" : "", "]");
    }
    // Device memory is not the host's: say whose it is.
    if (row.owner.domain != "host" && !row.owner.key.empty()) {
      absl::StrAppend(&out, "  (", row.owner.domain, ")");
    }
    absl::StrAppend(&out, "\n");
  };
  line(trend.rss);
  line(trend.anon);
  line(trend.tracked);
  for (const TrendRow& device : trend.devices) line(device);
  absl::StrAppend(&out, "\n");
  const size_t shown = RowLimit(trend.rows.size(), options.top);
  for (size_t i = 0; i < shown; ++i) line(trend.rows[i]);
  if (shown < trend.rows.size()) {
    absl::StrAppend(&out, "  ... ", trend.rows.size() - shown, " more owners (--top)\n");
  }
  return out;
}

std::string FormatTrendJson(const TrendResult& trend, const FormatOptions& options) {
  auto row_json = [](const TrendRow& row, bool with_owner) {
    std::string series = absl::StrJoin(row.live_bytes, ",");
    return absl::StrCat(
        "{", with_owner ? absl::StrCat("\"owner\":", JsonOwner(row.owner), ",") : "",
        "\"verdict\":", JsonString(VerdictName(row.fit.verdict)),
        ",\"bytes_per_request\":", JsonDouble(row.fit.slope),
        ",\"fit\":", JsonDouble(row.fit.r_squared), ",\"level\":", JsonDouble(row.fit.level),
        ",\"flat_from_request\":", JsonDouble(row.fit.flat_from),
        ",\"band_low\":", JsonDouble(row.fit.band_low),
        ",\"band_high\":", JsonDouble(row.fit.band_high),
        ",\"request_counts\":", row.fit.request_counts,
        ",\"bytes_per_request_error\":", JsonDouble(row.fit.slope_error),
        ",\"growth\":", JsonDouble(row.fit.growth), ",\"live_bytes\":[", series, "]",
        ",\"allocated_bytes\":",
        row.allocated_bytes.empty()
            ? "null"
            : absl::StrCat("[", absl::StrJoin(row.allocated_bytes, ","), "]"),
        ",\"estimated\":", row.estimated() ? "true" : "false", ",\"live_bytes_error\":[",
        absl::StrJoin(row.error_bytes, ",",
                      [](std::string* out, double e) { absl::StrAppend(out, std::llround(e)); }),
        "]}");
  };
  std::vector<std::string> snapshots;
  for (const v1::Snapshot* snapshot : trend.snapshots)
    snapshots.push_back(JsonSnapshotRef(*snapshot));
  std::vector<std::string> requests;
  for (double x : trend.requests) requests.push_back(JsonDouble(x));
  std::vector<std::string> rows;
  const size_t shown = RowLimit(trend.rows.size(), options.top);
  for (size_t i = 0; i < shown; ++i) rows.push_back(row_json(trend.rows[i], true));
  std::vector<std::string> devices;
  for (const TrendRow& device : trend.devices) {
    const v1::Device* named = DeviceInSeries(trend.snapshots, device.owner.domain);
    devices.push_back(absl::StrCat(
        "{\"domain\":", JsonString(device.owner.domain),
        ",\"name\":", named == nullptr ? "null" : JsonStringOrNull(named->name()), ",\"uuid\":",
        named == nullptr ? "null" : JsonStringOrNull(FormatUuid(named->uuid(), named->api())),
        ",\"series\":", row_json(device, false), "}"));
  }
  return absl::StrCat(
      "{\"schema\":\"retain-trend/1\",\"group_by\":", JsonString(GroupByName(options.by)),
      ",\"measure\":", JsonString(MeasureName(trend.measure.used)),
      ",\"measure_requested\":", JsonString(MeasureName(trend.measure.requested)),
      ",\"residency_measured\":", trend.measure.residency ? "true" : "false",
      ",\"measure_fallback\":",
      trend.measure.fallback_warning.empty() ? "null" : JsonString(trend.measure.fallback_warning),
      ",\"snapshots\":[", absl::StrJoin(snapshots, ","), "],\"requests\":[",
      absl::StrJoin(requests, ","),
      "],\"requests_from_tags\":", trend.requests_from_tags ? "true" : "false",
      ",\"degraded\":", options.degraded_warning.empty() ? "false" : "true",
      ",\"estimated\":", trend.sample_interval_bytes != 0 ? "true" : "false",
      ",\"min_request_counts\":", kMinRequestCounts,
      ",\"trims\":", SeriesTrimsJson(TrimsDuring(trend.snapshots)),
      ",\"rss\":", row_json(trend.rss, false), ",\"anon_swap\":", row_json(trend.anon, false),
      ",\"tracked\":", row_json(trend.tracked, false),
      ",\"allocator_free\":", row_json(trend.allocator_free, false), ",\"devices\":[",
      absl::StrJoin(devices, ","), "],\"owner_count\":", trend.rows.size(), ",\"rows\":[",
      absl::StrJoin(rows, ","), "],", RequestTagsJson(trend.request_tags),
      ",\"warnings\":", JsonWarnings(options), "}\n");
}

std::string FormatDiffFolded(const DiffResult& diff, OwnerResolver& owners) {
  std::string out;
  ForEachOwnedAllocationIf(
      *diff.after, diff.retained_stacks, owners,
      [](const StackShare& share) { return share.bytes > 0; },
      [&](const StackShare& share, const Owner& owner) {
        std::vector<std::string> frames;
        // Device memory under a root frame of its domain, so a flame graph
        // never stacks it on the host's.
        if (owner.domain != "host") frames.push_back("[" + owner.domain + "]");
        for (auto it = owner.frames.rbegin(); it != owner.frames.rend(); ++it) {
          // ';' separates frames and ' ' ends the stack in the folded format.
          frames.push_back(absl::StrReplaceAll(*it, {{";", ","}, {" ", "_"}}));
        }
        if (owner.frames.empty()) frames.push_back("(no_stack)");
        absl::StrAppend(&out, absl::StrJoin(frames, ";"), " ", share.bytes, "\n");
      });
  return out;
}

ProfileSpec DiffProfile(const DiffResult& diff) {
  ProfileSpec spec;
  const bool live = diff.before == nullptr;
  // Allocated bytes keep the names pprof users know (inuse_space: live
  // bytes); with residency a sample type for resident (+ swapped) bytes
  // follows, and the default is the measure's.
  const char* prefix = live ? "inuse" : "retained";
  spec.sample_types = {{absl::StrCat(prefix, "_space"), "bytes"},
                       {absl::StrCat(prefix, "_objects"), "count"}};
  const bool resident_type = diff.measure.residency;
  if (resident_type) {
    spec.sample_types.push_back({absl::StrCat(prefix, "_resident_space"), "bytes"});
    if (diff.measure.used == Measure::kResident) spec.default_sample_type = 2;
  }
  spec.time_nanos = static_cast<int64_t>(diff.after->header().time_unix_ns());
  if (!live) {
    spec.duration_nanos = static_cast<int64_t>(diff.after->header().time_unix_ns()) -
                          static_cast<int64_t>(diff.before->header().time_unix_ns());
  }
  spec.comments.push_back(
      absl::StrCat("retain-diff ", DiffModeName(diff.mode), ": ", diff.mode_reason));
  spec.comments.push_back(
      diff.measure.fallback_warning.empty()
          ? absl::StrCat("measure: ", MeasureName(diff.measure.used),
                         diff.measure.residency ? "" : " (the snapshots have no residency)")
          : absl::StrCat("measure: allocated (", diff.measure.fallback_warning, ")"));
  spec.drop_frames =
      "^(malloc|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|"
      "operator new.*)$";
  for (const StackShare& share : diff.retained_stacks) {
    // A share counts when it holds bytes in any sample type.
    const int64_t resident = share.by.resident + share.by.swapped;
    if (share.bytes <= 0 && share.by.allocated <= 0 && (!resident_type || resident <= 0)) continue;
    ProfileSample sample;
    sample.snapshot = diff.after;
    if (const v1::Stack* stack = FindStack(*diff.after, share.stack_id)) {
      sample.stack.assign(stack->frames().begin(), stack->frames().end());
    }
    sample.values = {share.by.allocated, share.count};
    if (resident_type) sample.values.push_back(resident);
    sample.labels.push_back({"kind", KindName(share.kind)});
    sample.labels.push_back({"domain", DomainName(*diff.after, share.kind, share.device)});
    if (share.tag_id != 0) {
      for (const v1::Tag& tag : diff.after->tags()) {
        if (tag.id() == share.tag_id) {
          sample.labels.push_back({"request", tag.request_id().empty() ? absl::StrCat("#", tag.id())
                                                                       : tag.request_id()});
        }
      }
    }
    spec.samples.push_back(std::move(sample));
  }
  return spec;
}

}  // namespace retain::tool
