// cuda_hooks: the exported CUDA hooks, runtime (libcudart.so*) and
// driver (libcuda.so*, under their real ABI names: cuda.h #defines
// cuMemAlloc to cuMemAlloc_v2). Each finds the real function
// (CudaExportedReal) and runs the shared implementation (gpu/cuda_impl.h).
//
// When the real function cannot be found (no runtime or driver loaded: only
// a program that looked the hook up with dlsym could get here) the hook
// returns cudaErrorInitializationError / CUDA_ERROR_NOT_INITIALIZED.
#include "gpu/cuda_impl.h"
#include "record/hook_shape.h"

using namespace retain::shim;
using namespace retain::shim::cuda;

namespace {

template <typename Fn>
Fn Real(CudaEntry entry) {
  return reinterpret_cast<Fn>(CudaExportedReal(entry));
}

}  // namespace

#define RETAIN_CUDART_HOOK(entry, Fn, impl, ...)          \
  Fn real = Real<Fn>(CudaEntry::entry);                   \
  if (real == nullptr) return kCudartErrorInitialization; \
  return cuda_impl::impl(real, __VA_ARGS__)

#define RETAIN_CUDA_DRIVER_HOOK(entry, Fn, impl, ...)   \
  Fn real = Real<Fn>(CudaEntry::entry);                 \
  if (real == nullptr) return kCudaErrorNotInitialized; \
  return cuda_impl::impl(real, __VA_ARGS__)

RETAIN_EXPORT cudaError_t cudaMalloc(void** dev_ptr, size_t size) {
  RETAIN_CUDART_HOOK(kCudaMalloc, CudaMallocFn, Malloc, dev_ptr, size);
}

RETAIN_EXPORT cudaError_t cudaFree(void* dev_ptr) {
  RETAIN_CUDART_HOOK(kCudaFree, CudaFreeFn, Free, dev_ptr);
}

RETAIN_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  RETAIN_CUDART_HOOK(kCudaMallocHost, CudaMallocHostFn, MallocHost, ptr, size);
}

RETAIN_EXPORT cudaError_t cudaHostAlloc(void** host, size_t size, unsigned int flags) {
  RETAIN_CUDART_HOOK(kCudaHostAlloc, CudaHostAllocFn, HostAlloc, host, size, flags);
}

RETAIN_EXPORT cudaError_t cudaFreeHost(void* ptr) {
  RETAIN_CUDART_HOOK(kCudaFreeHost, CudaFreeHostFn, FreeHost, ptr);
}

RETAIN_EXPORT cudaError_t cudaMallocManaged(void** dev_ptr, size_t size, unsigned int flags) {
  RETAIN_CUDART_HOOK(kCudaMallocManaged, CudaMallocManagedFn, MallocManaged, dev_ptr, size, flags);
}

RETAIN_EXPORT cudaError_t cudaMallocAsync(void** dev_ptr, size_t size, cudaStream_t stream) {
  RETAIN_CUDART_HOOK(kCudaMallocAsync, CudaMallocAsyncFn, MallocAsync, dev_ptr, size, stream);
}

RETAIN_EXPORT cudaError_t cudaFreeAsync(void* dev_ptr, cudaStream_t stream) {
  RETAIN_CUDART_HOOK(kCudaFreeAsync, CudaFreeAsyncFn, FreeAsync, dev_ptr, stream);
}

RETAIN_EXPORT cudaError_t cudaMallocPitch(void** dev_ptr, size_t* pitch, size_t width,
                                          size_t height) {
  RETAIN_CUDART_HOOK(kCudaMallocPitch, CudaMallocPitchFn, MallocPitch, dev_ptr, pitch, width,
                     height);
}

RETAIN_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t mem_pool,
                                                  cudaStream_t stream) {
  RETAIN_CUDART_HOOK(kCudaMallocFromPoolAsync, CudaMallocFromPoolAsyncFn, MallocFromPoolAsync, ptr,
                     size, mem_pool, stream);
}

RETAIN_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemAlloc, CuMemAllocFn, MemAlloc, dptr, bytesize);
}

RETAIN_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemFree, CuMemFreeFn, MemFree, dptr);
}

RETAIN_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemAllocHost, CuMemAllocHostFn, MemAllocHost, pp, bytesize);
}

RETAIN_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemHostAlloc, CuMemHostAllocFn, MemHostAlloc, pp, bytesize, flags);
}

RETAIN_EXPORT CUresult cuMemFreeHost(void* p) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemFreeHost, CuMemFreeHostFn, MemFreeHost, p);
}

RETAIN_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemAllocManaged, CuMemAllocManagedFn, MemAllocManaged, dptr, bytesize,
                          flags);
}

RETAIN_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                   const CUmemAllocationProp* prop, unsigned long long flags) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemCreate, CuMemCreateFn, MemCreate, handle, size, prop, flags);
}

RETAIN_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemRelease, CuMemReleaseFn, MemRelease, handle);
}

RETAIN_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemMap, CuMemMapFn, MemMap, ptr, size, offset, handle, flags);
}

RETAIN_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemUnmap, CuMemUnmapFn, MemUnmap, ptr, size);
}

RETAIN_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemAllocAsync, CuMemAllocAsyncFn, MemAllocAsync, dptr, bytesize,
                          stream);
}

RETAIN_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemFreeAsync, CuMemFreeAsyncFn, MemFreeAsync, dptr, stream);
}

RETAIN_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_in_bytes,
                                          size_t height, unsigned int element_size_bytes) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemAllocPitch, CuMemAllocPitchFn, MemAllocPitch, dptr, pitch,
                          width_in_bytes, height, element_size_bytes);
}

RETAIN_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                               CUmemoryPool pool, CUstream stream) {
  RETAIN_CUDA_DRIVER_HOOK(kCuMemAllocFromPoolAsync, CuMemAllocFromPoolAsyncFn,
                          MemAllocFromPoolAsync, dptr, bytesize, pool, stream);
}

RETAIN_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags) {
  RETAIN_CUDA_DRIVER_HOOK(kCuGetProcAddress, CuGetProcAddressFn, GetProcAddress, symbol, pfn,
                          cuda_version, flags);
}

RETAIN_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) {
  RETAIN_CUDA_DRIVER_HOOK(kCuGetProcAddressV2, CuGetProcAddressV2Fn, GetProcAddressV2, symbol, pfn,
                          cuda_version, flags, status);
}
