// domain: see domain.h.
#include "tools/lib/domain.h"

#include <map>
#include <tuple>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

// The API part of a device kind's domain; nullptr for host kinds.
const char* ApiOf(v1::Kind kind) {
  switch (kind) {
    case v1::KIND_HIP_DEVICE:
    case v1::KIND_HIP_MANAGED:
      return "hip";
    case v1::KIND_VULKAN_DEVICE:
      return "vulkan";
    case v1::KIND_CUDA_DEVICE:
    case v1::KIND_CUDA_MANAGED:
      return "cuda";
    default:
      return nullptr;
  }
}

const char* ApiName(v1::DeviceApi api) {
  switch (api) {
    case v1::DEVICE_API_HIP:
      return "hip";
    case v1::DEVICE_API_CUDA:
      return "cuda";
    case v1::DEVICE_API_VULKAN:
      return "vulkan";
    case v1::DEVICE_API_METAL:
      return "metal";
    default:
      return "unknown";
  }
}

uint64_t Minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace

bool IsDeviceKind(v1::Kind kind) { return ApiOf(kind) != nullptr; }

std::string DomainName(v1::Kind kind) {
  const char* api = ApiOf(kind);
  return api == nullptr ? "host" : absl::StrCat("device:", api);
}

bool DomainLess(const std::string& a, const std::string& b) {
  if (a == b) return false;
  if (a == "host" || b == "host") return a == "host";
  // "device:API" or "device:API:N": by API, then N (none first).
  auto split = [](const std::string& domain) {
    const size_t colon = domain.rfind(':');
    const std::string number = colon > 6 ? domain.substr(colon + 1) : "";
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) {
      return std::make_tuple(domain, -1LL, domain);
    }
    return std::make_tuple(domain.substr(0, colon), std::stoll(number.substr(0, 18)), domain);
  };
  return split(a) < split(b);
}

const v1::Device* FindDevice(const v1::Snapshot& snapshot, uint32_t id) {
  if (id == 0) return nullptr;
  for (const v1::Device& device : snapshot.devices()) {
    if (device.id() == id) return &device;
  }
  return nullptr;
}

std::string DomainName(const v1::Snapshot& snapshot, v1::Kind kind, uint32_t device) {
  const char* api = ApiOf(kind);
  if (api == nullptr) return "host";
  const v1::Device* found = FindDevice(snapshot, device);
  if (found == nullptr) return absl::StrCat("device:", api);
  return absl::StrCat("device:", api, ":", found->index());
}

const v1::Device* DeviceOfDomain(const v1::Snapshot& snapshot, const std::string& domain) {
  for (const v1::Device& device : snapshot.devices()) {
    if (domain == absl::StrCat("device:", ApiName(device.api()), ":", device.index())) {
      return &device;
    }
  }
  return nullptr;
}

std::string FormatUuid(const std::string& uuid, v1::DeviceApi api) {
  if (uuid.size() != 16) return "";
  const std::string hex = absl::BytesToHexString(uuid);
  return absl::StrCat(api == v1::DEVICE_API_CUDA ? "GPU-" : "", hex.substr(0, 8), "-",
                      hex.substr(8, 4), "-", hex.substr(12, 4), "-", hex.substr(16, 4), "-",
                      hex.substr(20));
}

std::string DeviceDescription(const v1::Device& device) {
  const std::string uuid = FormatUuid(device.uuid(), device.api());
  if (device.name().empty()) return uuid;
  return uuid.empty() ? device.name() : absl::StrCat(device.name(), ", ", uuid);
}

std::vector<DomainKindTotals> CountedTotalsByDomain(const v1::Snapshot& snapshot) {
  std::vector<DomainKindTotals> out;
  const std::vector<v1::KindTotals> totals = CountedTotals(snapshot);
  // (kind, device domain) -> the rows' sums, for rows that name a device.
  std::map<std::pair<int, std::string>, v1::KindTotals> by_device;
  if (snapshot.devices_size() > 0) {
    for (const Allocation& row : CountedAllocations(snapshot)) {
      if (!IsDeviceKind(row.kind)) continue;
      std::string domain = DomainName(snapshot, row.kind, row.device);
      if (domain == DomainName(row.kind)) continue;  // names no listed device
      v1::KindTotals& sums = by_device[{static_cast<int>(row.kind), std::move(domain)}];
      sums.set_kind(row.kind);
      sums.set_live_bytes(sums.live_bytes() + row.size);
      sums.set_live_count(sums.live_count() + 1);
      sums.set_resident_bytes(sums.resident_bytes() + row.resident_bytes);
      sums.set_swapped_bytes(sums.swapped_bytes() + row.swapped_bytes);
    }
  }
  for (const v1::KindTotals& t : totals) {
    if (!IsDeviceKind(t.kind())) {
      out.push_back({"host", t});
      continue;
    }
    v1::KindTotals rest = t;
    bool split = false;
    for (auto it = by_device.lower_bound({static_cast<int>(t.kind()), ""});
         it != by_device.end() && it->first.first == static_cast<int>(t.kind()); ++it) {
      const v1::KindTotals& device = it->second;
      out.push_back({it->first.second, device});
      rest.set_live_bytes(Minus(rest.live_bytes(), device.live_bytes()));
      rest.set_live_count(Minus(rest.live_count(), device.live_count()));
      rest.set_resident_bytes(Minus(rest.resident_bytes(), device.resident_bytes()));
      rest.set_swapped_bytes(Minus(rest.swapped_bytes(), device.swapped_bytes()));
      split = true;
    }
    // What the rows do not account for stays with the API. Nothing live
    // there is no domain of its own once the snapshot names devices (the
    // kind's memory, if any, is on them, or is host memory: a backing).
    const bool empty = rest.live_bytes() == 0 && rest.live_count() == 0;
    if (!empty || (!split && snapshot.devices_size() == 0)) {
      out.push_back({DomainName(t.kind()), rest});
    }
  }
  return out;
}

}  // namespace retain::tool
