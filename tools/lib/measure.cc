// measure: see measure.h.
#include "tools/lib/measure.h"

#include "absl/strings/str_cat.h"
#include "tools/lib/domain.h"

namespace retain::tool {

const char* MeasureName(Measure measure) {
  return measure == Measure::kResident ? "resident" : "allocated";
}

bool ParseMeasure(absl::string_view text, Measure* measure) {
  if (text == "resident") {
    *measure = Measure::kResident;
    return true;
  }
  if (text == "allocated") {
    *measure = Measure::kAllocated;
    return true;
  }
  return false;
}

int64_t TrackedLiveBytes(const v1::Snapshot& snapshot, Measure measure) {
  int64_t tracked = 0;
  for (const v1::KindTotals& totals : CountedTotals(snapshot)) {
    if (IsDeviceKind(totals.kind())) continue;
    tracked += static_cast<int64_t>(MeasuredLiveBytes(totals, measure));
  }
  return tracked;
}

MeasureChoice ChooseMeasure(Measure requested, const std::vector<const v1::Snapshot*>& snapshots,
                            const std::vector<std::string>& names) {
  MeasureChoice choice;
  choice.requested = requested;
  choice.used = requested;
  std::vector<size_t> without;
  for (size_t i = 0; i < snapshots.size(); ++i) {
    if (!HasResidency(*snapshots[i])) without.push_back(i);
  }
  choice.residency = without.empty() && !snapshots.empty();
  if (choice.residency || requested == Measure::kAllocated) return choice;
  choice.used = Measure::kAllocated;
  const std::string& first = names[without.front()];
  const std::string which = without.size() == 1
                                ? first
                                : absl::StrCat(without.size(), " of ", snapshots.size(),
                                               " snapshots (first ", first, ")");
  choice.fallback_warning = absl::StrCat(
      "resident bytes were not measured in ", which,
      " (a shim before residency): counting allocated bytes, which include pages never touched");
  return choice;
}

}  // namespace retain::tool
