// cuda_api_test: the CUDA ABI the shim writes out by hand
// (shim/src/gpu/cuda_api.h) is the one in CUDA's real headers.
//
// Checked at compile time, like hip_api_test.cc: every row of
// RETAIN_FOR_EACH_CUDART_HOOK and RETAIN_FOR_EACH_CUDA_DRIVER_HOOK is
// declared again here as an extern "C" function next to the real header's
// declaration (a C function declared twice with different parameter or
// return types does not compile). __CUDA_API_VERSION_INTERNAL makes cuda.h
// declare every ABI under its own name (cuMemAlloc_v2, the first
// cuGetProcAddress, the _ptsz variants) instead of #defining the plain names
// to the newest; the plain names the headers still #define are undefined
// below so each row is compared with the function it names. Types and
// values are compared with static_assert, and so is each alias (the _ptsz
// variants) with the function it stands for.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>

#undef cuGetProcAddress
#undef cuMemAllocAsync
#undef cuMemFreeAsync
#undef cuMemAllocFromPoolAsync
#undef cudaMallocAsync
#undef cudaFreeAsync
#undef cudaMallocFromPoolAsync

#include "gpu/cuda_api.h"

#define RETAIN_REDECLARE_CUDART(entry, name, alias, impl, params, args) \
  extern "C" cudaError_t name params;
#define RETAIN_REDECLARE_CUDA_DRIVER(entry, name, alias, proc_name, min_version, impl, params, \
                                     args)                                                     \
  extern "C" CUresult name params;
RETAIN_FOR_EACH_CUDART_HOOK(RETAIN_REDECLARE_CUDART)
RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(RETAIN_REDECLARE_CUDA_DRIVER)
#undef RETAIN_REDECLARE_CUDART
#undef RETAIN_REDECLARE_CUDA_DRIVER

namespace shim_cuda = retain::shim::cuda;

static_assert(sizeof(shim_cuda::CUresult) == sizeof(::CUresult));
static_assert(shim_cuda::kCudaSuccess == ::CUDA_SUCCESS);
static_assert(shim_cuda::kCudaErrorNotInitialized == ::CUDA_ERROR_NOT_INITIALIZED);
static_assert(sizeof(shim_cuda::cudaError_t) == sizeof(::cudaError_t));
static_assert(shim_cuda::kCudartSuccess == ::cudaSuccess);
static_assert(shim_cuda::kCudartErrorInitialization == ::cudaErrorInitializationError);

static_assert(std::is_same_v<shim_cuda::CUdeviceptr, ::CUdeviceptr>);
static_assert(
    std::is_same_v<shim_cuda::CUmemGenericAllocationHandle, ::CUmemGenericAllocationHandle>);
static_assert(std::is_same_v<shim_cuda::cuuint64_t, ::cuuint64_t>);
static_assert(sizeof(shim_cuda::CUstream) == sizeof(::CUstream));
static_assert(sizeof(shim_cuda::CUmemoryPool) == sizeof(::CUmemoryPool));
static_assert(sizeof(shim_cuda::CUdriverProcAddressQueryResult) ==
              sizeof(::CUdriverProcAddressQueryResult));
static_assert(sizeof(shim_cuda::cudaStream_t) == sizeof(::cudaStream_t));
static_assert(sizeof(shim_cuda::cudaMemPool_t) == sizeof(::cudaMemPool_t));

// Each row's alias (a _ptsz variant), where it has one, is declared by the
// real header with the very type of the row's own function.
#define RETAIN_CUDA_ALIAS_SAME(name, alias_name) \
  static_assert(std::is_same_v<decltype(&::name), decltype(&::alias_name)>);
RETAIN_CUDA_ALIAS_SAME(cudaMallocAsync, cudaMallocAsync_ptsz)
RETAIN_CUDA_ALIAS_SAME(cudaFreeAsync, cudaFreeAsync_ptsz)
RETAIN_CUDA_ALIAS_SAME(cudaMallocFromPoolAsync, cudaMallocFromPoolAsync_ptsz)
RETAIN_CUDA_ALIAS_SAME(cuMemAllocAsync, cuMemAllocAsync_ptsz)
RETAIN_CUDA_ALIAS_SAME(cuMemFreeAsync, cuMemFreeAsync_ptsz)
RETAIN_CUDA_ALIAS_SAME(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz)
#undef RETAIN_CUDA_ALIAS_SAME

// The same parameters, and a result of the same size (the shim's error
// types are ints, the headers' are enums).
template <typename F>
struct Signature;
template <typename R, typename... A>
struct Signature<R (*)(A...)> {
  using Params = std::tuple<A...>;
  static constexpr size_t kResultSize = sizeof(R);
};
template <typename Ours, typename Theirs>
constexpr bool SameCall =
    std::is_same_v<typename Signature<Ours>::Params, typename Signature<Theirs>::Params>&&
        Signature<Ours>::kResultSize == Signature<Theirs>::kResultSize;

// The device queries (gpu/cuda_device.cc) have the real functions' types,
// and CUmemAllocationProp's leading members are where the shim reads them.
static_assert(std::is_same_v<shim_cuda::CUdevice, ::CUdevice>);
static_assert(SameCall<shim_cuda::cudaGetDevice_fn, decltype(&::cudaGetDevice)>);
static_assert(SameCall<shim_cuda::cuCtxGetDevice_fn, decltype(&::cuCtxGetDevice)>);
static_assert(SameCall<shim_cuda::cuDeviceGet_fn, decltype(&::cuDeviceGet)>);
static_assert(SameCall<shim_cuda::cuDeviceGetName_fn, decltype(&::cuDeviceGetName)>);
static_assert(sizeof(::CUuuid) == 16);
static_assert(offsetof(shim_cuda::CUmemAllocationPropHead, type) ==
              offsetof(::CUmemAllocationProp, type));
static_assert(offsetof(shim_cuda::CUmemAllocationPropHead, location_type) ==
              offsetof(::CUmemAllocationProp, location) + offsetof(::CUmemLocation, type));
static_assert(offsetof(shim_cuda::CUmemAllocationPropHead, location_id) ==
              offsetof(::CUmemAllocationProp, location) + offsetof(::CUmemLocation, id));
static_assert(shim_cuda::kCuMemLocationTypeDevice == ::CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(shim_cuda::kCuMemLocationTypeHost == ::CU_MEM_LOCATION_TYPE_HOST);
static_assert(shim_cuda::kCuMemLocationTypeHostNuma == ::CU_MEM_LOCATION_TYPE_HOST_NUMA);
static_assert(shim_cuda::kCuMemLocationTypeHostNumaNow == ::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT);

namespace {

TEST(CudaApiTest, AliasesAreThePtszVariantsAndProcNamesTheBaseNames) {
  int aliases = 0;
  auto check_alias = [&](const std::string& name, const char* alias) {
    if (alias == nullptr) return;
    ++aliases;
    EXPECT_EQ(std::string(alias), name + "_ptsz");
  };
#define RETAIN_CHECK_CUDART(entry, name, alias, impl, params, args) check_alias(#name, alias);
#define RETAIN_CHECK_CUDA_DRIVER(entry, name, alias, proc_name, min_version, impl, params, args) \
  check_alias(#name, alias);                                                                     \
  EXPECT_EQ(std::string(#name).rfind(proc_name, 0), 0u) << #name;
  RETAIN_FOR_EACH_CUDART_HOOK(RETAIN_CHECK_CUDART)
  RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(RETAIN_CHECK_CUDA_DRIVER)
#undef RETAIN_CHECK_CUDART
#undef RETAIN_CHECK_CUDA_DRIVER
  EXPECT_EQ(aliases, 6);  // each checked against the header by RETAIN_CUDA_ALIAS_SAME above
}

}  // namespace
