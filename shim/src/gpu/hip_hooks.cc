// hip_hooks: the HIP runtime's allocation calls (libamdhip64), recorded
// in the GPU live set (record/gpu_recorder.h) with kinds hip-device, hip-host and
// hip-managed.
//
// Each hook finds the real function on its first call (gpu/runtime_lookup.h:
// RTLD_NEXT, then a runtime loaded RTLD_LOCAL by a backend library; a failed
// lookup is retried on the next call), runs it inside a GpuCall — host
// memory the runtime takes meanwhile is gpu-driver-host, and calls the
// runtime makes to its own exports (hipHostAlloc → hipHostMalloc,
// hipMallocPitch → hipMalloc) reach these hooks nested and do not record —
// and records only a successful outermost call. A failed call records
// nothing; what the runtime returned, wrote to the out-parameters and left
// in errno reaches the caller unchanged.
//
// Records are keyed by device pointer (host pointer for hip-host), or by
// the allocation handle for hipMemCreate: hipMemMap maps such a handle into
// a reserved range and is not counted again; hipMemRelease removes it.
// Pitched allocations are recorded with the size they occupy (pitch *
// height [* depth]); hipMallocAsync/hipFreeAsync count at call time. Each
// record's device is asked once the call succeeded (gpu/hip_device.h).
//
// When no HIP runtime is loaded at all (the program found these hooks with
// dlsym(RTLD_DEFAULT, ...) while probing for HIP), every hook returns
// hipErrorInvalidDevice without touching its arguments: what libamdhip64
// itself returns from every call when it cannot initialise, so the program
// takes the path it already has for "HIP present but unusable".
//
// Thread-safe; never allocates from the host heap itself.
#include <errno.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gpu/gpu_hook.h"
#include "gpu/hip_api.h"
#include "gpu/hip_device.h"
#include "gpu/runtime_lookup.h"
#include "record/gpu_recorder.h"
#include "record/hook_shape.h"

namespace retain::shim::hip {
namespace {

// libamdhip64.so.5 (ROCm 5), .so.6 (ROCm 6), or the unversioned name.
constexpr const char* kRuntimePrefixes[] = {"libamdhip64.so", nullptr};

constexpr hipError_t kNoRuntime = hipErrorInvalidDevice;

// The runtime's definition of every hooked function; null until found.
struct RealHip {
#define RETAIN_DECLARE_SLOT(name, params) std::atomic<name##_fn> name;
  RETAIN_FOR_EACH_HIP_HOOK(RETAIN_DECLARE_SLOT)
#undef RETAIN_DECLARE_SLOT
};
constinit RealHip g_real_hip;

template <typename Fn>
__attribute__((noinline, cold)) Fn ResolveSlow(std::atomic<Fn>& slot, const char* name) {
  int saved = errno;  // the loader may set it
  Fn fn = ResolveRuntimeFunction(slot, kRuntimePrefixes, name);
  errno = saved;
  return fn;
}

// The runtime generation g_real_hip was filled in (gpu/runtime_lookup.h).
std::atomic<uint32_t> g_hip_generation;

__attribute__((noinline, cold)) void ForgetHipFunctions(uint32_t generation) {
#define RETAIN_FORGET_SLOT(name, params) g_real_hip.name.store(nullptr, std::memory_order_release);
  RETAIN_FOR_EACH_HIP_HOOK(RETAIN_FORGET_SLOT)
#undef RETAIN_FORGET_SLOT
  g_hip_generation.store(generation, std::memory_order_release);
}

// The real function behind `slot`, or nullptr when no runtime has it.
template <typename Fn>
inline Fn Real(std::atomic<Fn>& slot, const char* name) {
  const uint32_t generation = RuntimeGeneration();
  if (RETAIN_UNLIKELY(generation != g_hip_generation.load(std::memory_order_acquire))) {
    ForgetHipFunctions(generation);
  }
  Fn fn = slot.load(std::memory_order_acquire);
  if (RETAIN_LIKELY(fn != nullptr)) return fn;
  return ResolveSlow(slot, name);
}

// What a successful allocation call produced.
struct Allocated {
  uintptr_t handle;  // device pointer, host pointer or allocation handle; 0: none
  uint64_t size;
  Kind kind;
  uint16_t flags;  // proto/retain.proto: host kinds keep the call's flags
};

// An allocation call: runs `real` inside a GpuCall and, when it succeeded
// and is the thread's outermost GPU call, records what `result` reads back
// from its out-parameters (only then: they are the runtime's to fill), on
// the device the memory is on (gpu/hip_device.h): the current device, or
// for hipMemCreate the location in its properties `prop`.
template <typename RealCall, typename Result>
hipError_t Allocate(RealCall real, Result result, const hipMemAllocationProp* prop = nullptr) {
  GpuCall call;
  hipError_t error = real();
  if (error == hipSuccess && call.records() && HookReady()) {
    const Allocated a = result();
    if (a.handle != 0) {
      const uint8_t device = prop != nullptr ? HipPropDevice(prop) : HipCurrentDevice();
      RecordGpuAlloc(GpuApi::kHip, a.handle, a.size, a.kind, a.flags, device);
    }
  }
  return error;
}

// A release: see ReleaseGpu.
template <typename RealCall>
hipError_t Release(uintptr_t handle, RealCall real) {
  return ReleaseGpu(GpuApi::kHip, handle, real);
}

uintptr_t Address(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }
uintptr_t Out(void* const* out) { return out != nullptr ? Address(*out) : 0; }

// a * b * c, saturated (sizes come from the runtime; never wrap).
uint64_t Product(uint64_t a, uint64_t b, uint64_t c = 1) {
  uint64_t ab = 0;
  uint64_t abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) return UINT64_MAX;
  return abc;
}

uint16_t Flags(unsigned int flags) { return static_cast<uint16_t>(flags & 0xffff); }

}  // namespace
}  // namespace retain::shim::hip

using namespace retain::shim;
using namespace retain::shim::hip;

// Device memory.

RETAIN_EXPORT hipError_t hipMalloc(void** ptr, size_t size) {
  auto real = Real(g_real_hip.hipMalloc, "hipMalloc");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(ptr, size); },
                  [&] {
                    return Allocated{Out(ptr), size, Kind::kHipDevice, 0};
                  });
}

RETAIN_EXPORT hipError_t hipExtMallocWithFlags(void** ptr, size_t sizeBytes, unsigned int flags) {
  auto real = Real(g_real_hip.hipExtMallocWithFlags, "hipExtMallocWithFlags");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(ptr, sizeBytes, flags); },
                  [&] {
                    return Allocated{Out(ptr), sizeBytes, Kind::kHipDevice, 0};
                  });
}

RETAIN_EXPORT hipError_t hipMallocManaged(void** dev_ptr, size_t size, unsigned int flags) {
  auto real = Real(g_real_hip.hipMallocManaged, "hipMallocManaged");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(dev_ptr, size, flags); },
                  [&] {
                    return Allocated{Out(dev_ptr), size, Kind::kHipManaged, 0};
                  });
}

RETAIN_EXPORT hipError_t hipMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  auto real = Real(g_real_hip.hipMallocPitch, "hipMallocPitch");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(ptr, pitch, width, height); },
                  [&] {
                    const uint64_t bytes = pitch != nullptr ? Product(*pitch, height) : 0;
                    return Allocated{Out(ptr), bytes, Kind::kHipDevice, 0};
                  });
}

RETAIN_EXPORT hipError_t hipMemAllocPitch(hipDeviceptr_t* dptr, size_t* pitch, size_t widthInBytes,
                                          size_t height, unsigned int elementSizeBytes) {
  auto real = Real(g_real_hip.hipMemAllocPitch, "hipMemAllocPitch");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(dptr, pitch, widthInBytes, height, elementSizeBytes); },
                  [&] {
                    const uint64_t bytes = pitch != nullptr ? Product(*pitch, height) : 0;
                    return Allocated{Out(dptr), bytes, Kind::kHipDevice, 0};
                  });
}

RETAIN_EXPORT hipError_t hipMalloc3D(hipPitchedPtr* pitchedDevPtr, hipExtent extent) {
  auto real = Real(g_real_hip.hipMalloc3D, "hipMalloc3D");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(pitchedDevPtr, extent); },
                  [&] {
                    if (pitchedDevPtr == nullptr) return Allocated{0, 0, Kind::kHipDevice, 0};
                    return Allocated{Address(pitchedDevPtr->ptr),
                                     Product(pitchedDevPtr->pitch, extent.height, extent.depth),
                                     Kind::kHipDevice, 0};
                  });
}

RETAIN_EXPORT hipError_t hipMallocAsync(void** dev_ptr, size_t size, hipStream_t stream) {
  auto real = Real(g_real_hip.hipMallocAsync, "hipMallocAsync");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(dev_ptr, size, stream); },
                  [&] {
                    return Allocated{Out(dev_ptr), size, Kind::kHipDevice, 0};
                  });
}

RETAIN_EXPORT hipError_t hipMallocFromPoolAsync(void** dev_ptr, size_t size, hipMemPool_t mem_pool,
                                                hipStream_t stream) {
  auto real = Real(g_real_hip.hipMallocFromPoolAsync, "hipMallocFromPoolAsync");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(dev_ptr, size, mem_pool, stream); },
                  [&] {
                    return Allocated{Out(dev_ptr), size, Kind::kHipDevice, 0};
                  });
}

RETAIN_EXPORT hipError_t hipFree(void* ptr) {
  auto real = Real(g_real_hip.hipFree, "hipFree");
  if (real == nullptr) return kNoRuntime;
  return Release(Address(ptr), [&] { return real(ptr); });
}

RETAIN_EXPORT hipError_t hipFreeAsync(void* dev_ptr, hipStream_t stream) {
  auto real = Real(g_real_hip.hipFreeAsync, "hipFreeAsync");
  if (real == nullptr) return kNoRuntime;
  return Release(Address(dev_ptr), [&] { return real(dev_ptr, stream); });
}

// Pinned host memory.

RETAIN_EXPORT hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags) {
  auto real = Real(g_real_hip.hipHostMalloc, "hipHostMalloc");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(ptr, size, flags); },
                  [&] {
                    return Allocated{Out(ptr), size, Kind::kHipHost, Flags(flags)};
                  });
}

RETAIN_EXPORT hipError_t hipHostAlloc(void** ptr, size_t size, unsigned int flags) {
  auto real = Real(g_real_hip.hipHostAlloc, "hipHostAlloc");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(ptr, size, flags); },
                  [&] {
                    return Allocated{Out(ptr), size, Kind::kHipHost, Flags(flags)};
                  });
}

RETAIN_EXPORT hipError_t hipMallocHost(void** ptr, size_t size) {
  auto real = Real(g_real_hip.hipMallocHost, "hipMallocHost");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(ptr, size); },
                  [&] {
                    return Allocated{Out(ptr), size, Kind::kHipHost, 0};
                  });
}

RETAIN_EXPORT hipError_t hipMemAllocHost(void** ptr, size_t size) {
  auto real = Real(g_real_hip.hipMemAllocHost, "hipMemAllocHost");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(ptr, size); },
                  [&] {
                    return Allocated{Out(ptr), size, Kind::kHipHost, 0};
                  });
}

RETAIN_EXPORT hipError_t hipHostFree(void* ptr) {
  auto real = Real(g_real_hip.hipHostFree, "hipHostFree");
  if (real == nullptr) return kNoRuntime;
  return Release(Address(ptr), [&] { return real(ptr); });
}

RETAIN_EXPORT hipError_t hipFreeHost(void* ptr) {
  auto real = Real(g_real_hip.hipFreeHost, "hipFreeHost");
  if (real == nullptr) return kNoRuntime;
  return Release(Address(ptr), [&] { return real(ptr); });
}

// Virtual memory management: the physical allocation is the handle.

RETAIN_EXPORT hipError_t hipMemCreate(hipMemGenericAllocationHandle_t* handle, size_t size,
                                      const hipMemAllocationProp* prop, unsigned long long flags) {
  auto real = Real(g_real_hip.hipMemCreate, "hipMemCreate");
  if (real == nullptr) return kNoRuntime;
  return Allocate([&] { return real(handle, size, prop, flags); },
                  [&] {
                    const uintptr_t key = handle != nullptr ? Address(*handle) : 0;
                    return Allocated{key, size, Kind::kHipDevice, 0};
                  },
                  prop);
}

RETAIN_EXPORT hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle) {
  auto real = Real(g_real_hip.hipMemRelease, "hipMemRelease");
  if (real == nullptr) return kNoRuntime;
  return Release(Address(handle), [&] { return real(handle); });
}

// Reserving address space, mapping a handle into it and undoing both
// allocate and release no memory: they are hooked only so the host memory
// (and mappings) the runtime takes inside count as gpu-driver-host, and so
// that, called from inside the runtime, they nest like the rest.
RETAIN_EXPORT hipError_t hipMemAddressReserve(void** ptr, size_t size, size_t alignment, void* addr,
                                              unsigned long long flags) {
  auto real = Real(g_real_hip.hipMemAddressReserve, "hipMemAddressReserve");
  if (real == nullptr) return kNoRuntime;
  GpuCall call;
  return real(ptr, size, alignment, addr, flags);
}

RETAIN_EXPORT hipError_t hipMemAddressFree(void* devPtr, size_t size) {
  auto real = Real(g_real_hip.hipMemAddressFree, "hipMemAddressFree");
  if (real == nullptr) return kNoRuntime;
  GpuCall call;
  return real(devPtr, size);
}

RETAIN_EXPORT hipError_t hipMemMap(void* ptr, size_t size, size_t offset,
                                   hipMemGenericAllocationHandle_t handle,
                                   unsigned long long flags) {
  auto real = Real(g_real_hip.hipMemMap, "hipMemMap");
  if (real == nullptr) return kNoRuntime;
  GpuCall call;
  return real(ptr, size, offset, handle, flags);
}

RETAIN_EXPORT hipError_t hipMemUnmap(void* ptr, size_t size) {
  auto real = Real(g_real_hip.hipMemUnmap, "hipMemUnmap");
  if (real == nullptr) return kNoRuntime;
  GpuCall call;
  return real(ptr, size);
}

// Every hook has the type its row in RETAIN_FOR_EACH_HIP_HOOK gives (which
// tests/unit/shim/gpu/hip_api_test.cc checks against the real header).
#define RETAIN_CHECK_HIP_HOOK(name, params)                        \
  static_assert(std::is_same_v<decltype(&::name), hip::name##_fn>, \
                #name " does not match its row in gpu/hip_api.h");
RETAIN_FOR_EACH_HIP_HOOK(RETAIN_CHECK_HIP_HOOK)
#undef RETAIN_CHECK_HIP_HOOK
