// cuda_device: see gpu/cuda_device.h.
#include "gpu/cuda_device.h"

#include <errno.h>
#include <string.h>

#include <atomic>

#include "base/thread_state.h"
#include "gpu/cuda_api.h"
#include "gpu/runtime_lookup.h"
#include "record/gpu_devices.h"

namespace retain::shim {
namespace {

using namespace cuda;  // NOLINT: the CUDA type names

constexpr const char* kRuntimeLibraries[] = {"libcudart.so", nullptr};
constexpr const char* kDriverLibraries[] = {"libcuda.so", nullptr};

// The query functions, found on first use (gpu/runtime_lookup.h: never
// cached as missing) and forgotten when a library was unloaded.
struct Queries {
  std::atomic<cudaGetDevice_fn> get_device;
  std::atomic<cuCtxGetDevice_fn> context_device;
  std::atomic<cuDeviceGet_fn> device_get;
  std::atomic<cuDeviceGetName_fn> get_name;
  std::atomic<cuDeviceGetUuid_fn> get_uuid_v2;
  std::atomic<cuDeviceGetUuid_fn> get_uuid;
};
constinit Queries g_queries;
std::atomic<uint32_t> g_generation;

template <typename Fn>
Fn Find(std::atomic<Fn>& slot, const char* const* libraries, const char* name) {
  const uint32_t generation = RuntimeGeneration();
  if (__builtin_expect(generation != g_generation.load(std::memory_order_acquire), 0)) {
    g_queries.get_device.store(nullptr, std::memory_order_release);
    g_queries.context_device.store(nullptr, std::memory_order_release);
    g_queries.device_get.store(nullptr, std::memory_order_release);
    g_queries.get_name.store(nullptr, std::memory_order_release);
    g_queries.get_uuid_v2.store(nullptr, std::memory_order_release);
    g_queries.get_uuid.store(nullptr, std::memory_order_release);
    g_generation.store(generation, std::memory_order_release);
  }
  return ResolveRuntimeFunction(slot, libraries, name);
}

// GpuDeviceId's describe: the driver's name and UUID of ordinal `ordinal`.
void Describe(int32_t ordinal, GpuDeviceInfo* info, void*) {
  CUdevice device = ordinal;
  if (auto get = Find(g_queries.device_get, kDriverLibraries, "cuDeviceGet")) {
    CUdevice found;
    if (get(&found, ordinal) == kCudaSuccess) device = found;
  }
  if (auto get_name = Find(g_queries.get_name, kDriverLibraries, "cuDeviceGetName")) {
    if (get_name(info->name, static_cast<int>(sizeof(info->name)), device) != kCudaSuccess) {
      info->name[0] = '\0';
    }
    info->name[sizeof(info->name) - 1] = '\0';
  }
  auto get_uuid = Find(g_queries.get_uuid_v2, kDriverLibraries, "cuDeviceGetUuid_v2");
  if (get_uuid == nullptr) get_uuid = Find(g_queries.get_uuid, kDriverLibraries, "cuDeviceGetUuid");
  if (get_uuid != nullptr) {
    unsigned char uuid[16];
    if (get_uuid(uuid, device) == kCudaSuccess) {
      memcpy(info->uuid, uuid, sizeof(uuid));
      info->has_uuid = true;
    }
  }
}

CUmemAllocationPropHead PropHead(const void* prop) {
  CUmemAllocationPropHead head{};
  if (prop != nullptr) memcpy(&head, prop, sizeof(head));
  return head;
}

}  // namespace

uint8_t CudaContextDevice() {
  const int saved = errno;
  uint8_t id = 0;
  {
    BusyScope busy;
    auto get = Find(g_queries.context_device, kDriverLibraries, "cuCtxGetDevice");
    CUdevice device;
    if (get != nullptr && get(&device) == kCudaSuccess) {
      id = GpuDeviceId(GpuApi::kCuda, device, &Describe, nullptr);
    }
  }
  errno = saved;
  return id;
}

uint8_t CudaRuntimeDevice() {
  const int saved = errno;
  uint8_t id = 0;
  bool answered = false;
  {
    BusyScope busy;
    auto get = Find(g_queries.get_device, kRuntimeLibraries, "cudaGetDevice");
    int ordinal;
    if (get != nullptr && get(&ordinal) == kCudartSuccess) {
      answered = true;
      id = GpuDeviceId(GpuApi::kCuda, ordinal, &Describe, nullptr);
    }
  }
  errno = saved;
  return answered ? id : CudaContextDevice();
}

uint8_t CudaPropDevice(const void* prop) {
  const CUmemAllocationPropHead head = PropHead(prop);
  if (prop == nullptr || head.location_type != kCuMemLocationTypeDevice) return 0;
  const int saved = errno;
  const uint8_t id = GpuDeviceId(GpuApi::kCuda, head.location_id, &Describe, nullptr);
  errno = saved;
  return id;
}

bool CudaPropIsHost(const void* prop) {
  const int type = PropHead(prop).location_type;
  return prop != nullptr && (type == kCuMemLocationTypeHost || type == kCuMemLocationTypeHostNuma ||
                             type == kCuMemLocationTypeHostNumaNow);
}

}  // namespace retain::shim
