// cuda_api: the few CUDA driver and runtime types and constants the shim's
// CUDA hooks need, written out here so that the shim builds without the
// CUDA toolkit (and never includes its headers).
//
// Checked by hand against CUDA 13.0's /usr/local/cuda/include/cuda.h,
// cudaTypedefs.h, driver_types.h and cuda_runtime_api.h (x86-64 and aarch64,
// LP64): CUresult and cudaError_t are C enums (int-sized), CUdeviceptr and
// CUmemGenericAllocationHandle are unsigned long long, streams and the
// allocation properties are opaque pointers here. cuda.h #defines the
// versioned names (cuMemAlloc -> cuMemAlloc_v2, cuMemFree -> cuMemFree_v2,
// cuMemAllocHost -> cuMemAllocHost_v2, cuMemAllocPitch -> cuMemAllocPitch_v2,
// cuGetProcAddress -> cuGetProcAddress_v2); the shim uses the real ABI names.
//
// Header-only, no code.
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

// The driver entry points interposed, with their ABI (cudaTypedefs.h's
// PFN_*_v<version> types; the version is the CUDA version that introduced
// that ABI, which cuGetProcAddress's cudaVersion argument selects).
using CuMemAllocFn = CUresult (*)(CUdeviceptr* dptr, size_t bytesize);                  // _v2, 3020
using CuMemFreeFn = CUresult (*)(CUdeviceptr dptr);                                     // _v2, 3020
using CuMemAllocHostFn = CUresult (*)(void** pp, size_t bytesize);                      // _v2, 3020
using CuMemHostAllocFn = CUresult (*)(void** pp, size_t bytesize, unsigned int flags);  // 2020
using CuMemFreeHostFn = CUresult (*)(void* p);                                          // 2000
using CuMemAllocManagedFn = CUresult (*)(CUdeviceptr* dptr, size_t bytesize,
                                         unsigned int flags);  // 6000
using CuMemCreateFn = CUresult (*)(CUmemGenericAllocationHandle* handle, size_t size,
                                   const CUmemAllocationProp* prop,
                                   unsigned long long flags);              // 10020
using CuMemReleaseFn = CUresult (*)(CUmemGenericAllocationHandle handle);  // 10020
using CuMemMapFn = CUresult (*)(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle,
                                unsigned long long flags);        // 10020
using CuMemUnmapFn = CUresult (*)(CUdeviceptr ptr, size_t size);  // 10020
using CuMemAllocAsyncFn = CUresult (*)(CUdeviceptr* dptr, size_t bytesize,
                                       CUstream stream);                   // 11020 (+_ptsz)
using CuMemFreeAsyncFn = CUresult (*)(CUdeviceptr dptr, CUstream stream);  // 11020 (+_ptsz)
using CuMemAllocPitchFn = CUresult (*)(CUdeviceptr* dptr, size_t* pitch, size_t width_in_bytes,
                                       size_t height,
                                       unsigned int element_size_bytes);  // _v2, 3020
using CuMemAllocFromPoolAsyncFn = CUresult (*)(CUdeviceptr* dptr, size_t bytesize,
                                               CUmemoryPool pool,
                                               CUstream stream);  // 11020 (+_ptsz)
using CuGetProcAddressFn = CUresult (*)(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags);  // 11030
using CuGetProcAddressV2Fn = CUresult (*)(const char* symbol, void** pfn, int cuda_version,
                                          cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status);  // _v2, 12000

// Runtime API (cuda_runtime_api.h, driver_types.h).
using cudaError_t = int;                                      // enum cudaError
inline constexpr cudaError_t kCudartSuccess = 0;              // cudaSuccess
inline constexpr cudaError_t kCudartErrorInitialization = 3;  // cudaErrorInitializationError
using cudaStream_t = void*;                                   // struct CUstream_st*
using cudaMemPool_t = void*;                                  // struct CUmemPoolHandle_st*

using CudaMallocFn = cudaError_t (*)(void** dev_ptr, size_t size);
using CudaFreeFn = cudaError_t (*)(void* dev_ptr);
using CudaMallocHostFn = cudaError_t (*)(void** ptr, size_t size);
using CudaHostAllocFn = cudaError_t (*)(void** host, size_t size, unsigned int flags);
using CudaFreeHostFn = cudaError_t (*)(void* ptr);
using CudaMallocManagedFn = cudaError_t (*)(void** dev_ptr, size_t size, unsigned int flags);
using CudaMallocAsyncFn = cudaError_t (*)(void** dev_ptr, size_t size, cudaStream_t stream);
using CudaFreeAsyncFn = cudaError_t (*)(void* dev_ptr, cudaStream_t stream);
using CudaMallocPitchFn = cudaError_t (*)(void** dev_ptr, size_t* pitch, size_t width,
                                          size_t height);
using CudaMallocFromPoolAsyncFn = cudaError_t (*)(void** ptr, size_t size, cudaMemPool_t mem_pool,
                                                  cudaStream_t stream);

}  // namespace retain::shim::cuda

#endif  // RETAIN_SHIM_SRC_GPU_CUDA_API_H_
