// cuda_api: the few CUDA driver and runtime types and constants the shim's
// CUDA hooks need, written out here so that the shim builds without the
// CUDA toolkit (and never includes its headers).
//
// Written against CUDA 13.0's cuda.h, cudaTypedefs.h, driver_types.h and
// cuda_runtime_api.h (x86-64 and aarch64, LP64), and checked against them
// by tests/unit/shim/gpu/cuda_api_test.cc where they are installed:
// CUresult and cudaError_t are C enums (int-sized), CUdeviceptr and
// CUmemGenericAllocationHandle are unsigned long long, streams and the
// allocation properties are opaque pointers here. cuda.h #defines the
// versioned names (cuMemAlloc -> cuMemAlloc_v2, cuMemFree -> cuMemFree_v2,
// cuMemAllocHost -> cuMemAllocHost_v2, cuMemAllocPitch -> cuMemAllocPitch_v2,
// cuGetProcAddress -> cuGetProcAddress_v2); the shim uses the real ABI names.
//
// Header-only, no code, no state: safe anywhere.
#ifndef RETAIN_SHIM_SRC_GPU_CUDA_API_H_
#define RETAIN_SHIM_SRC_GPU_CUDA_API_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim::cuda {

// Driver API (cuda.h).
using CUresult = int;                                    // enum cudaError_enum
inline constexpr CUresult kCudaSuccess = 0;              // CUDA_SUCCESS
inline constexpr CUresult kCudaErrorNotInitialized = 3;  // CUDA_ERROR_NOT_INITIALIZED

using CUdeviceptr = unsigned long long;                   // CUdeviceptr_v2 on 64-bit
using CUmemGenericAllocationHandle = unsigned long long;  // _v1
using CUstream = void*;                                   // struct CUstream_st*
using CUmemoryPool = void*;                               // struct CUmemPoolHandle_st*
using CUmemAllocationProp = void;                         // struct CUmemAllocationProp_st
using cuuint64_t = uint64_t;
using CUdriverProcAddressQueryResult = int;  // enum

// Runtime API (cuda_runtime_api.h, driver_types.h).
using cudaError_t = int;                                      // enum cudaError
inline constexpr cudaError_t kCudartSuccess = 0;              // cudaSuccess
inline constexpr cudaError_t kCudartErrorInitialization = 3;  // cudaErrorInitializationError
using cudaStream_t = void*;                                   // struct CUstream_st*
using cudaMemPool_t = void*;                                  // struct CUmemPoolHandle_st*

// The device queries a record's device is read with (gpu/cuda_device.cc),
// never interposed. A CUdevice is the driver's handle of a device; the
// NVIDIA driver numbers them as the device ordinals (cuDeviceGet(&d, i)
// gives d == i), which the shim relies on to name a device by its ordinal.
using CUdevice = int;
using cudaGetDevice_fn = cudaError_t (*)(int* device);
using cuCtxGetDevice_fn = CUresult (*)(CUdevice* device);
using cuDeviceGet_fn = CUresult (*)(CUdevice* device, int ordinal);
using cuDeviceGetName_fn = CUresult (*)(char* name, int length, CUdevice device);
// CUuuid is a struct of 16 bytes (char bytes[16]).
using cuDeviceGetUuid_fn = CUresult (*)(void* uuid, CUdevice device);

// The leading members of CUmemAllocationProp, the same from CUDA 10.2 to
// 13: the allocation type, the requested handle types and the location
// (CUmemLocation: a CUmemLocationType and an id, the device ordinal for a
// device location).
struct CUmemAllocationPropHead {
  int type;
  int requested_handle_types;
  int location_type;
  int location_id;
};
inline constexpr int kCuMemLocationTypeDevice = 1;       // CU_MEM_LOCATION_TYPE_DEVICE
inline constexpr int kCuMemLocationTypeHost = 2;         // CU_MEM_LOCATION_TYPE_HOST
inline constexpr int kCuMemLocationTypeHostNuma = 3;     // CU_MEM_LOCATION_TYPE_HOST_NUMA
inline constexpr int kCuMemLocationTypeHostNumaNow = 4;  // ..._HOST_NUMA_CURRENT

// Every CUDA entry point the shim interposes, once. From these two lists
// come the exported hooks (gpu/cuda_hooks.cc), the CudaEntry enum, the
// cuda_impl declarations and the entry table (gpu/cuda_impl.{h,cc}), the
// function types below, and the checks: tests/unit/shim/gpu/cuda_api_test.cc
// redeclares every row next to CUDA's own header when one is installed, and
// tests/unit/shim/hooks/export_lists_test.cc compares the names with
// tests/preload/shim_exports/cuda.txt.
//
// Runtime (libcudart.so*), all returning cudaError_t:
//   X(entry, name, alias, impl, params, args)
// Driver (libcuda.so*), under the real ABI names, all returning CUresult:
//   X(entry, name, alias, proc_name, min_version, impl, params, args)
// entry: the CudaEntry value; name: the exported ABI name; alias: another ABI
// name with the same signature that dlsym may be asked for (the _ptsz
// variants), or nullptr; proc_name, min_version: cuGetProcAddress's base
// name and the cudaVersion from which it selects this ABI (cudaTypedefs.h's
// PFN_*_v<version>; 0: every version); impl: the cuda_impl function; params,
// args: the parameter list and the same names as arguments.
#define RETAIN_FOR_EACH_CUDART_HOOK(X)                                                             \
  X(kCudaMalloc, cudaMalloc, nullptr, Malloc, (void** dev_ptr, size_t size), (dev_ptr, size))      \
  X(kCudaFree, cudaFree, nullptr, Free, (void* dev_ptr), (dev_ptr))                                \
  X(kCudaMallocHost, cudaMallocHost, nullptr, MallocHost, (void** ptr, size_t size), (ptr, size))  \
  X(kCudaHostAlloc, cudaHostAlloc, nullptr, HostAlloc,                                             \
    (void** host, size_t size, unsigned int flags), (host, size, flags))                           \
  X(kCudaFreeHost, cudaFreeHost, nullptr, FreeHost, (void* ptr), (ptr))                            \
  X(kCudaMallocManaged, cudaMallocManaged, nullptr, MallocManaged,                                 \
    (void** dev_ptr, size_t size, unsigned int flags), (dev_ptr, size, flags))                     \
  X(kCudaMallocAsync, cudaMallocAsync, "cudaMallocAsync_ptsz", MallocAsync,                        \
    (void** dev_ptr, size_t size, cudaStream_t stream), (dev_ptr, size, stream))                   \
  X(kCudaFreeAsync, cudaFreeAsync, "cudaFreeAsync_ptsz", FreeAsync,                                \
    (void* dev_ptr, cudaStream_t stream), (dev_ptr, stream))                                       \
  X(kCudaMallocPitch, cudaMallocPitch, nullptr, MallocPitch,                                       \
    (void** dev_ptr, size_t* pitch, size_t width, size_t height), (dev_ptr, pitch, width, height)) \
  X(kCudaMallocFromPoolAsync, cudaMallocFromPoolAsync, "cudaMallocFromPoolAsync_ptsz",             \
    MallocFromPoolAsync, (void** ptr, size_t size, cudaMemPool_t mem_pool, cudaStream_t stream),   \
    (ptr, size, mem_pool, stream))

#define RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(X)                                                      \
  X(kCuMemAlloc, cuMemAlloc_v2, nullptr, "cuMemAlloc", 3020, MemAlloc,                           \
    (CUdeviceptr * dptr, size_t bytesize), (dptr, bytesize))                                     \
  X(kCuMemFree, cuMemFree_v2, nullptr, "cuMemFree", 3020, MemFree, (CUdeviceptr dptr), (dptr))   \
  X(kCuMemAllocHost, cuMemAllocHost_v2, nullptr, "cuMemAllocHost", 3020, MemAllocHost,           \
    (void** pp, size_t bytesize), (pp, bytesize))                                                \
  X(kCuMemHostAlloc, cuMemHostAlloc, nullptr, "cuMemHostAlloc", 0, MemHostAlloc,                 \
    (void** pp, size_t bytesize, unsigned int flags), (pp, bytesize, flags))                     \
  X(kCuMemFreeHost, cuMemFreeHost, nullptr, "cuMemFreeHost", 0, MemFreeHost, (void* p), (p))     \
  X(kCuMemAllocManaged, cuMemAllocManaged, nullptr, "cuMemAllocManaged", 0, MemAllocManaged,     \
    (CUdeviceptr * dptr, size_t bytesize, unsigned int flags), (dptr, bytesize, flags))          \
  X(kCuMemCreate, cuMemCreate, nullptr, "cuMemCreate", 0, MemCreate,                             \
    (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop,        \
     unsigned long long flags),                                                                  \
    (handle, size, prop, flags))                                                                 \
  X(kCuMemRelease, cuMemRelease, nullptr, "cuMemRelease", 0, MemRelease,                         \
    (CUmemGenericAllocationHandle handle), (handle))                                             \
  X(kCuMemMap, cuMemMap, nullptr, "cuMemMap", 0, MemMap,                                         \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,           \
     unsigned long long flags),                                                                  \
    (ptr, size, offset, handle, flags))                                                          \
  X(kCuMemUnmap, cuMemUnmap, nullptr, "cuMemUnmap", 0, MemUnmap, (CUdeviceptr ptr, size_t size), \
    (ptr, size))                                                                                 \
  X(kCuMemAllocAsync, cuMemAllocAsync, "cuMemAllocAsync_ptsz", "cuMemAllocAsync", 0,             \
    MemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream stream),                       \
    (dptr, bytesize, stream))                                                                    \
  X(kCuMemFreeAsync, cuMemFreeAsync, "cuMemFreeAsync_ptsz", "cuMemFreeAsync", 0, MemFreeAsync,   \
    (CUdeviceptr dptr, CUstream stream), (dptr, stream))                                         \
  X(kCuMemAllocPitch, cuMemAllocPitch_v2, nullptr, "cuMemAllocPitch", 3020, MemAllocPitch,       \
    (CUdeviceptr * dptr, size_t * pitch, size_t width_in_bytes, size_t height,                   \
     unsigned int element_size_bytes),                                                           \
    (dptr, pitch, width_in_bytes, height, element_size_bytes))                                   \
  X(kCuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync_ptsz",           \
    "cuMemAllocFromPoolAsync", 0, MemAllocFromPoolAsync,                                         \
    (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream stream),                   \
    (dptr, bytesize, pool, stream))                                                              \
  X(kCuGetProcAddress, cuGetProcAddress, nullptr, "cuGetProcAddress", 11030, GetProcAddress,     \
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags),                        \
    (symbol, pfn, cuda_version, flags))                                                          \
  X(kCuGetProcAddressV2, cuGetProcAddress_v2, nullptr, "cuGetProcAddress", 12000,                \
    GetProcAddressV2,                                                                            \
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,                         \
     CUdriverProcAddressQueryResult* status),                                                    \
    (symbol, pfn, cuda_version, flags, status))

// Strips the parentheses of a list: RETAIN_CUDA_UNPAREN (a, b) is a, b.
#define RETAIN_CUDA_UNPAREN(...) __VA_ARGS__

// name##_fn: the type of each listed function.
#define RETAIN_DECLARE_CUDART_FN(entry, name, alias, impl, params, args) \
  using name##_fn = cudaError_t(*) params;
#define RETAIN_DECLARE_CUDA_DRIVER_FN(entry, name, alias, proc_name, min_version, impl, params, \
                                      args)                                                     \
  using name##_fn = CUresult(*) params;
RETAIN_FOR_EACH_CUDART_HOOK(RETAIN_DECLARE_CUDART_FN)
RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(RETAIN_DECLARE_CUDA_DRIVER_FN)
#undef RETAIN_DECLARE_CUDART_FN
#undef RETAIN_DECLARE_CUDA_DRIVER_FN

}  // namespace retain::shim::cuda

#endif  // RETAIN_SHIM_SRC_GPU_CUDA_API_H_
