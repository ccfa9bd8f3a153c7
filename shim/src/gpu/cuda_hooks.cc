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

// One exported hook per row of gpu/cuda_api.h's lists.
#define RETAIN_DEFINE_CUDART_HOOK(entry, name, alias, impl, params, args) \
  RETAIN_EXPORT cudaError_t name params {                                 \
    auto real = Real<name##_fn>(CudaEntry::entry);                        \
    if (real == nullptr) return kCudartErrorInitialization;               \
    return cuda_impl::impl(real, RETAIN_CUDA_UNPAREN args);               \
  }
#define RETAIN_DEFINE_CUDA_DRIVER_HOOK(entry, name, alias, proc_name, min_version, impl, params, \
                                       args)                                                     \
  RETAIN_EXPORT CUresult name params {                                                           \
    auto real = Real<name##_fn>(CudaEntry::entry);                                               \
    if (real == nullptr) return kCudaErrorNotInitialized;                                        \
    return cuda_impl::impl(real, RETAIN_CUDA_UNPAREN args);                                      \
  }
RETAIN_FOR_EACH_CUDART_HOOK(RETAIN_DEFINE_CUDART_HOOK)
RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(RETAIN_DEFINE_CUDA_DRIVER_HOOK)
#undef RETAIN_DEFINE_CUDART_HOOK
#undef RETAIN_DEFINE_CUDA_DRIVER_HOOK
