// hip_api: the few HIP runtime types and prototypes the shim's HIP hooks
// (gpu/hip_hooks.cc) need, written out here rather than taken from
// <hip/hip_runtime_api.h>, which pulls in C++ templates and inline code the
// shim must not carry.
//
// They are the ABI of libamdhip64 (checked against ROCm 5.2.3's header):
// tests/unit/shim/gpu/hip_api_test.cc includes the real header and redeclares
// every prototype listed here (a C function declared twice with different
// types does not compile) and checks each type's size, layout and values.
// The names are HIP's own so the same parameter lists read right in both
// places; they live in retain::shim::hip so they never meet the real ones.
//
// Header only, no state: safe anywhere.
#ifndef RETAIN_SHIM_SRC_GPU_HIP_API_H_
#define RETAIN_SHIM_SRC_GPU_HIP_API_H_

#include <string.h>

#include <cstddef>

namespace retain::shim::hip {

// hipError_t: the result of every HIP call (a C enum: 32 bits).
enum hipError_t : int {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  // What libamdhip64 returns from every entry point when it cannot
  // initialise (no usable device): the answer the hooks give when no HIP
  // runtime can be found at all (see gpu/hip_hooks.cc).
  hipErrorInvalidDevice = 101,
};

// Opaque handles: pointers to runtime-internal structures.
using hipStream_t = struct ihipStream_t*;
using hipMemPool_t = struct ihipMemPoolHandle_t*;
using hipMemGenericAllocationHandle_t = struct ihipMemGenericAllocationHandle*;
using hipDeviceptr_t = void*;
// Only passed through by pointer.
struct hipMemAllocationProp;

// hipMalloc3D's result and request (driver_types.h).
struct hipPitchedPtr {
  void* ptr;
  size_t pitch;
  size_t xsize;
  size_t ysize;
};
struct hipExtent {
  size_t width;  // bytes, for linear memory
  size_t height;
  size_t depth;
};

// The device queries a record's device is read with (gpu/hip_device.cc),
// never interposed. A hipDevice_t is the runtime's handle of a device
// (hipDeviceGet); HIP numbers them as the ordinals.
using hipDevice_t = int;
struct hipUUID {
  char bytes[16];
};
using hipGetDevice_fn = hipError_t (*)(int* deviceId);
using hipDeviceGet_fn = hipError_t (*)(hipDevice_t* device, int ordinal);
using hipDeviceGetName_fn = hipError_t (*)(char* name, int len, hipDevice_t device);
using hipDeviceGetUuid_fn = hipError_t (*)(hipUUID* uuid, hipDevice_t device);
using hipRuntimeGetVersion_fn = hipError_t (*)(int* runtimeVersion);

// hipMemAllocationProp changed layout between ROCm releases: ROCm 5.2's
// (this file's reference, checked against its header) begins with the
// compression type, then the location; ROCm 6's begins like CUDA's
// CUmemAllocationProp (type, handle types, location). Their leading members:
struct hipMemLocation {
  int type;  // hipMemLocationType
  int id;    // the device ordinal for hipMemLocationTypeDevice
};
struct hipMemAllocationPropR0502Head {
  unsigned char compressionType;
  hipMemLocation location;
};
struct hipMemAllocationPropR0600Head {
  int type;
  int requestedHandleTypes;
  hipMemLocation location;
};
inline constexpr int hipMemLocationTypeDevice = 1;
// hipRuntimeGetVersion's value (HIP_VERSION: major * 10000000 + minor *
// 100000 + patch) of the first ROCm 5.3 and ROCm 6.0 runtimes.
inline constexpr int kHipVersion0503 = 50300000;
inline constexpr int kHipVersion0600 = 60000000;

// Every HIP function the shim interposes, once: X(name, parameter list).
// All return hipError_t. The hooks' definitions are checked against this
// list (gpu/hip_hooks.cc), and this list against the real header.
#define RETAIN_FOR_EACH_HIP_HOOK(X)                                                               \
  X(hipMalloc, (void** ptr, size_t size))                                                         \
  X(hipExtMallocWithFlags, (void** ptr, size_t sizeBytes, unsigned int flags))                    \
  X(hipMallocManaged, (void** dev_ptr, size_t size, unsigned int flags))                          \
  X(hipMallocPitch, (void** ptr, size_t* pitch, size_t width, size_t height))                     \
  X(hipMemAllocPitch, (hipDeviceptr_t * dptr, size_t * pitch, size_t widthInBytes, size_t height, \
                       unsigned int elementSizeBytes))                                            \
  X(hipMalloc3D, (hipPitchedPtr * pitchedDevPtr, hipExtent extent))                               \
  X(hipMallocAsync, (void** dev_ptr, size_t size, hipStream_t stream))                            \
  X(hipMallocFromPoolAsync,                                                                       \
    (void** dev_ptr, size_t size, hipMemPool_t mem_pool, hipStream_t stream))                     \
  X(hipFree, (void* ptr))                                                                         \
  X(hipFreeAsync, (void* dev_ptr, hipStream_t stream))                                            \
  X(hipHostMalloc, (void** ptr, size_t size, unsigned int flags))                                 \
  X(hipHostAlloc, (void** ptr, size_t size, unsigned int flags))                                  \
  X(hipMallocHost, (void** ptr, size_t size))                                                     \
  X(hipMemAllocHost, (void** ptr, size_t size))                                                   \
  X(hipHostFree, (void* ptr))                                                                     \
  X(hipFreeHost, (void* ptr))                                                                     \
  X(hipMemCreate, (hipMemGenericAllocationHandle_t * handle, size_t size,                         \
                   const hipMemAllocationProp* prop, unsigned long long flags))                   \
  X(hipMemRelease, (hipMemGenericAllocationHandle_t handle))                                      \
  X(hipMemMap, (void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,    \
                unsigned long long flags))                                                        \
  X(hipMemUnmap, (void* ptr, size_t size))                                                        \
  X(hipMemAddressReserve,                                                                         \
    (void** ptr, size_t size, size_t alignment, void* addr, unsigned long long flags))            \
  X(hipMemAddressFree, (void* devPtr, size_t size))

// name##_fn: the type of each listed function.
#define RETAIN_DECLARE_HIP_FN(name, params) using name##_fn = hipError_t(*) params;
RETAIN_FOR_EACH_HIP_HOOK(RETAIN_DECLARE_HIP_FN)
#undef RETAIN_DECLARE_HIP_FN

// Whether `name` is one of the HIP functions the shim exports.
inline bool IsHipExportName(const char* name) {
#define RETAIN_HIP_NAME_IS(hook, params) \
  if (strcmp(name, #hook) == 0) return true;
  RETAIN_FOR_EACH_HIP_HOOK(RETAIN_HIP_NAME_IS)
#undef RETAIN_HIP_NAME_IS
  return false;
}

}  // namespace retain::shim::hip

#endif  // RETAIN_SHIM_SRC_GPU_HIP_API_H_
