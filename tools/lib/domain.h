// domain: where a row's bytes live, so host and device memory, and two
// devices' memory, are never added into one figure.
//
// The host domain is the process's RAM, what RSS counts: the heap, mappings,
// a GPU driver's host memory, pinned host allocations (hip-host, cuda-host)
// and Metal buffers (unified memory on Apple silicon). Each GPU's device
// memory (hip-device, vulkan-device, cuda-device, and managed memory, which
// lives on the device while the device uses it) is a domain of its own,
// named by the API and the device's number (Snapshot.devices, Device.index):
// "device:cuda:0", "device:cuda:1", "device:vulkan:0". Device memory is
// committed when it is allocated, so its resident bytes are its allocated
// bytes. A row that names no device (a snapshot of a shim before devices
// were recorded, or a device the API did not tell) is in its API's domain,
// "device:cuda", "device:hip", "device:vulkan": some device of that API.
//
// A GPU allocation the driver made of host memory inside the call (lavapipe,
// integrated GPUs: Snapshot.gpu_backings) is host memory: the reader turns
// it into one gpu-driver-host row under the program's stack
// (FlattenAllocations), so it is in the host domain and counted once.
#ifndef RETAIN_TOOLS_LIB_DOMAIN_H_
#define RETAIN_TOOLS_LIB_DOMAIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "retain.pb.h"

namespace retain::tool {

// True for the kinds of device memory (see above).
bool IsDeviceKind(v1::Kind kind);

// "host", or the API's domain of a device kind ("device:vulkan"): where a
// row that names no device is.
std::string DomainName(v1::Kind kind);

// The domain of a row of `snapshot` of `kind` on device `device` (a
// Device.id; 0: none): "host" for host kinds; for device kinds the device's
// domain ("device:cuda:1") when the snapshot lists the device, else the
// API's ("device:cuda").
std::string DomainName(const v1::Snapshot& snapshot, v1::Kind kind, uint32_t device);

// The order domains are shown in: the host first, then by API, an API's
// own domain before its devices, devices by number ("device:cuda:2" before
// "device:cuda:10").
bool DomainLess(const std::string& a, const std::string& b);

// The device of `snapshot` with id `id`, or nullptr.
const v1::Device* FindDevice(const v1::Snapshot& snapshot, uint32_t id);

// The device of `snapshot` whose domain is `domain` ("device:cuda:1"), or
// nullptr (the host, an API's domain, a device it does not list).
const v1::Device* DeviceOfDomain(const v1::Snapshot& snapshot, const std::string& domain);

// What the device is, for a domain's heading: its name and UUID,
// "NVIDIA H200, GPU-5f0d3c1e-...", "llvmpipe (LLVM 15.0.6, 256 bits)";
// empty when the device said neither.
std::string DeviceDescription(const v1::Device& device);

// A UUID as 8-4-4-4-12 lowercase hex digits, with nvidia-smi's "GPU-"
// before a CUDA device's; empty for anything but 16 bytes.
std::string FormatUuid(const std::string& uuid, v1::DeviceApi api);

// One snapshot's live totals of one kind in one domain.
struct DomainKindTotals {
  std::string domain;
  // live_bytes, live_count, resident_bytes and swapped_bytes are the
  // domain's; the cumulative allocated_* and freed_* are per kind, not per
  // device: a device kind's stay on its API's domain's entry.
  v1::KindTotals totals;
};

// CountedTotals split by domain: a host kind's totals are the host's; a
// device kind's are split by the devices its rows (CountedAllocations) are
// on, each device's live bytes and count summed from them (device memory
// is never sampled), and what the rows do not account for (records the
// shim dropped) stays in the API's domain, when there is any. Without
// devices in the snapshot, each device kind's totals are its API's
// domain's, as before (0 B included).
std::vector<DomainKindTotals> CountedTotalsByDomain(const v1::Snapshot& snapshot);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_DOMAIN_H_
