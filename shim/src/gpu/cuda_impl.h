// cuda_impl: CUDA allocation calls (runtime and driver) recorded in the
// GPU live set, and the wrappers handed out for driver and runtime entry
// points that a program obtains as pointers (dlsym on a library handle,
// cuGetProcAddress), so calls that never pass through the PLT are seen too.
//
// Two ways in, one implementation per call:
//  - the exported hooks (gpu/cuda_hooks.cc): cudaMalloc, cuMemAlloc_v2...
//    bound through the PLT; their real function is found with
//    FindRuntimeFunction (libcudart.so*, libcuda.so*), never cached as failed;
//  - wrappers: the statically linked cudart (nvcc's default) dlopen()s
//    libcuda.so.1 and takes cuGetProcAddress from it with dlsym(handle, ...),
//    then every other entry point from cuGetProcAddress. The dlsym hook
//    (hooks/dlsym_hook.cc) and the cuGetProcAddress hooks replace each such
//    pointer by a wrapper whose real target is that pointer. Each entry
//    point has kCudaWrapperSlots wrappers, one per distinct target (a second
//    copy of the driver, the _ptsz variants of the async calls); when all
//    are taken, further targets are handed out unwrapped (not recorded).
//
// Every call runs inside a GpuCall: only the outermost intercepted CUDA call
// records (cudaMalloc reaching cuMemAlloc_v2 is one allocation), and host
// memory the runtime or driver takes meanwhile is gpu-driver-host. A call
// that fails records nothing and returns exactly what the real one returned.
//
// Kinds (proto/retain.proto): cuda-device (cudaMalloc, cudaMallocAsync,
// cudaMallocFromPoolAsync, cudaMallocPitch, cuMemAlloc_v2, cuMemAllocAsync,
// cuMemAllocFromPoolAsync, cuMemAllocPitch_v2, cuMemCreate; the pitched
// calls' size is *pitch * height, saturating), cuda-host (cudaMallocHost,
// cudaHostAlloc, cuMemAllocHost_v2, cuMemHostAlloc; flags = the call's flags
// argument, low 16 bits), cuda-managed (cudaMallocManaged, cuMemAllocManaged).
// cuMemCreate of a host location (CUDA 12.2+) is cuda-host. Each record's
// device: gpu/cuda_device.h (runtime calls the current device, driver calls
// the current context's, cuMemCreate its location).
// All in the GpuApi::kCuda table, keyed by the pointer returned, except
// cuMemCreate: keyed by its CUmemGenericAllocationHandle (the physical
// allocation), removed by cuMemRelease. cuMemMap/cuMemUnmap only map that
// allocation into an address range: they record nothing (the bytes were
// counted at cuMemCreate) and run inside a GpuCall so the driver's host
// bookkeeping is not the program's heap.
//
// Thread-safe; nothing here allocates from the host heap; errno is the real
// call's.
#ifndef RETAIN_SHIM_SRC_GPU_CUDA_IMPL_H_
#define RETAIN_SHIM_SRC_GPU_CUDA_IMPL_H_

#include "gpu/cuda_api.h"

namespace retain::shim {

// The CUDA entry points, runtime then driver, in the order of the lists in
// gpu/cuda_api.h.
enum class CudaEntry : int {
#define RETAIN_CUDART_ENTRY(entry, name, alias, impl, params, args) entry,
#define RETAIN_CUDA_DRIVER_ENTRY(entry, name, alias, proc_name, min_version, impl, params, args) \
  entry,
  RETAIN_FOR_EACH_CUDART_HOOK(RETAIN_CUDART_ENTRY)
      RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(RETAIN_CUDA_DRIVER_ENTRY)
#undef RETAIN_CUDART_ENTRY
#undef RETAIN_CUDA_DRIVER_ENTRY
          kCount,
};
inline constexpr int kCudaEntryCount = static_cast<int>(CudaEntry::kCount);
inline constexpr int kCudaWrapperSlots = 4;

// The entry point whose real function a dlsym(library handle, `name`) result
// is: the ABI names (cudaMalloc, cuMemAlloc_v2, cuGetProcAddress_v2, and the
// _ptsz variants of the async calls). -1 for any other name (including the
// 32-bit v1 ABI names cuMemAlloc, cuMemFree, cuMemAllocHost, cuMemAllocPitch).
int CudaEntryForSymbol(const char* name);

// The entry point cuGetProcAddress(`symbol`, ..., `cuda_version`, ...)
// returns: symbol is the base name ("cuMemAlloc"), and the version selects
// the ABI: cuMemAlloc/cuMemFree/cuMemAllocHost/cuMemAllocPitch from 3020 (the _v2 ABI;
// before, the 32-bit v1 ABI, not wrapped), cuGetProcAddress from 12000 the
// _v2 ABI (five arguments), from 11030 the first. An exact ABI name is
// accepted too. -1 when not a wrapped entry point.
int CudaEntryForProcName(const char* symbol, int cuda_version);

// True for the names libretain.so exports as CUDA hooks.
bool IsCudaExportName(const char* name);

// A wrapper for entry point `entry` whose real function is `real`, or
// `real` itself when it is null, lies in the shim, or every wrapper slot of
// the entry already serves another target.
void* WrapCudaTarget(int entry, void* real);

// The implementations, given the real function (first argument) and then
// the entry point's own arguments. Each exported hook and each wrapper calls
// one of these.
namespace cuda_impl {
using namespace cuda;  // NOLINT: the CUDA type names
#define RETAIN_DECLARE_CUDART_IMPL(entry, name, alias, impl, params, args) \
  cudaError_t impl(name##_fn real, RETAIN_CUDA_UNPAREN params);
#define RETAIN_DECLARE_CUDA_DRIVER_IMPL(entry, name, alias, proc_name, min_version, impl, params, \
                                        args)                                                     \
  CUresult impl(name##_fn real, RETAIN_CUDA_UNPAREN params);
RETAIN_FOR_EACH_CUDART_HOOK(RETAIN_DECLARE_CUDART_IMPL)
RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(RETAIN_DECLARE_CUDA_DRIVER_IMPL)
#undef RETAIN_DECLARE_CUDART_IMPL
#undef RETAIN_DECLARE_CUDA_DRIVER_IMPL
}  // namespace cuda_impl

// The real function behind exported hook `entry` (FindRuntimeFunction in
// libcudart.so* or libcuda.so*; cached once found, looked up again while
// not found). nullptr when the runtime or driver is not loaded.
void* CudaExportedReal(CudaEntry entry);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_GPU_CUDA_IMPL_H_
