// hip_device: see gpu/hip_device.h.
#include "gpu/hip_device.h"

#include <errno.h>
#include <string.h>

#include <atomic>

#include "base/thread_state.h"
#include "gpu/hip_api.h"
#include "gpu/runtime_lookup.h"
#include "record/gpu_devices.h"

namespace retain::shim {
namespace {

using namespace hip;  // NOLINT: the HIP type names

constexpr const char* kRuntimePrefixes[] = {"libamdhip64.so", nullptr};

// The query functions, found on first use (gpu/runtime_lookup.h: never
// cached as missing), and the runtime's version (0: not read yet); all
// forgotten when a library was unloaded.
struct Queries {
  std::atomic<hipGetDevice_fn> get_device;
  std::atomic<hipDeviceGet_fn> device_get;
  std::atomic<hipDeviceGetName_fn> get_name;
  std::atomic<hipDeviceGetUuid_fn> get_uuid;
  std::atomic<hipRuntimeGetVersion_fn> get_version;
  std::atomic<int> version;
};
constinit Queries g_queries;
std::atomic<uint32_t> g_generation;

template <typename Fn>
Fn Find(std::atomic<Fn>& slot, const char* name) {
  const uint32_t generation = RuntimeGeneration();
  if (__builtin_expect(generation != g_generation.load(std::memory_order_acquire), 0)) {
    g_queries.get_device.store(nullptr, std::memory_order_release);
    g_queries.device_get.store(nullptr, std::memory_order_release);
    g_queries.get_name.store(nullptr, std::memory_order_release);
    g_queries.get_uuid.store(nullptr, std::memory_order_release);
    g_queries.get_version.store(nullptr, std::memory_order_release);
    g_queries.version.store(0, std::memory_order_release);
    g_generation.store(generation, std::memory_order_release);
  }
  return ResolveRuntimeFunction(slot, kRuntimePrefixes, name);
}

// GpuDeviceId's describe: the runtime's name and UUID of ordinal `ordinal`.
void Describe(int32_t ordinal, GpuDeviceInfo* info, void*) {
  hipDevice_t device = ordinal;
  if (auto get = Find(g_queries.device_get, "hipDeviceGet")) {
    hipDevice_t found;
    if (get(&found, ordinal) == hipSuccess) device = found;
  }
  if (auto get_name = Find(g_queries.get_name, "hipDeviceGetName")) {
    if (get_name(info->name, static_cast<int>(sizeof(info->name)), device) != hipSuccess) {
      info->name[0] = '\0';
    }
    info->name[sizeof(info->name) - 1] = '\0';
  }
  if (auto get_uuid = Find(g_queries.get_uuid, "hipDeviceGetUuid")) {
    hipUUID uuid;
    if (get_uuid(&uuid, device) == hipSuccess) {
      memcpy(info->uuid, uuid.bytes, sizeof(uuid.bytes));
      info->has_uuid = true;
    }
  }
}

// The runtime's HIP_VERSION, or 0 when it does not say.
int RuntimeVersion() {
  int version = g_queries.version.load(std::memory_order_acquire);
  if (version != 0) return version;
  auto get = Find(g_queries.get_version, "hipRuntimeGetVersion");
  if (get == nullptr || get(&version) != hipSuccess || version <= 0) return 0;
  g_queries.version.store(version, std::memory_order_release);
  return version;
}

// The device ordinal in hipMemCreate's properties, or -1 when they name
// none (a location that is not a device, a layout the shim does not know).
int PropOrdinal(const void* prop, int version) {
  hipMemLocation location{};
  if (version >= kHipVersion0600) {
    hipMemAllocationPropR0600Head head;
    memcpy(&head, prop, sizeof(head));
    location = head.location;
  } else if (version > 0 && version < kHipVersion0503) {
    hipMemAllocationPropR0502Head head;
    memcpy(&head, prop, sizeof(head));
    location = head.location;
  } else {
    return -1;
  }
  return location.type == hipMemLocationTypeDevice ? location.id : -1;
}

}  // namespace

uint8_t HipCurrentDevice() {
  const int saved = errno;
  uint8_t id = 0;
  {
    BusyScope busy;
    auto get = Find(g_queries.get_device, "hipGetDevice");
    int ordinal;
    if (get != nullptr && get(&ordinal) == hipSuccess) {
      id = GpuDeviceId(GpuApi::kHip, ordinal, &Describe, nullptr);
    }
  }
  errno = saved;
  return id;
}

uint8_t HipPropDevice(const void* prop) {
  if (prop == nullptr) return HipCurrentDevice();
  const int saved = errno;
  int ordinal;
  {
    BusyScope busy;
    ordinal = PropOrdinal(prop, RuntimeVersion());
  }
  errno = saved;
  if (ordinal < 0) return HipCurrentDevice();
  const uint8_t id = GpuDeviceId(GpuApi::kHip, ordinal, &Describe, nullptr);
  errno = saved;
  return id;
}

}  // namespace retain::shim
