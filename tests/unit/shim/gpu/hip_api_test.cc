// shim_hip_api_test: the HIP ABI the shim writes out by hand
// (shim/src/gpu/hip_api.h) is the one in ROCm's real header.
//
// Most of the checking happens at compile time: every row of
// RETAIN_FOR_EACH_HIP_HOOK is declared again here as an extern "C" function
// next to the real header's declaration, and a C function declared twice
// with different parameter or return types does not compile. Types and
// values are compared with static_assert. The test at run time checks that
// every hooked function is an allowed export of libretain.so and the other
// way round.
#include "gpu/hip_api.h"

#include <gtest/gtest.h>
#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>

#define RETAIN_REDECLARE_HIP(name, params) extern "C" hipError_t name params;
RETAIN_FOR_EACH_HIP_HOOK(RETAIN_REDECLARE_HIP)
#undef RETAIN_REDECLARE_HIP

namespace shim_hip = retain::shim::hip;

static_assert(sizeof(shim_hip::hipError_t) == sizeof(::hipError_t));
static_assert(static_cast<int>(shim_hip::hipSuccess) == ::hipSuccess);
static_assert(static_cast<int>(shim_hip::hipErrorInvalidValue) == ::hipErrorInvalidValue);
static_assert(static_cast<int>(shim_hip::hipErrorOutOfMemory) == ::hipErrorOutOfMemory);
static_assert(static_cast<int>(shim_hip::hipErrorInvalidDevice) == ::hipErrorInvalidDevice);

static_assert(sizeof(shim_hip::hipStream_t) == sizeof(::hipStream_t));
static_assert(sizeof(shim_hip::hipMemPool_t) == sizeof(::hipMemPool_t));
static_assert(sizeof(shim_hip::hipMemGenericAllocationHandle_t) ==
              sizeof(::hipMemGenericAllocationHandle_t));
static_assert(sizeof(shim_hip::hipDeviceptr_t) == sizeof(::hipDeviceptr_t));

static_assert(sizeof(shim_hip::hipPitchedPtr) == sizeof(::hipPitchedPtr));
static_assert(offsetof(shim_hip::hipPitchedPtr, ptr) == offsetof(::hipPitchedPtr, ptr));
static_assert(offsetof(shim_hip::hipPitchedPtr, pitch) == offsetof(::hipPitchedPtr, pitch));
static_assert(offsetof(shim_hip::hipPitchedPtr, xsize) == offsetof(::hipPitchedPtr, xsize));
static_assert(offsetof(shim_hip::hipPitchedPtr, ysize) == offsetof(::hipPitchedPtr, ysize));
static_assert(sizeof(shim_hip::hipExtent) == sizeof(::hipExtent));
static_assert(offsetof(shim_hip::hipExtent, width) == offsetof(::hipExtent, width));
static_assert(offsetof(shim_hip::hipExtent, height) == offsetof(::hipExtent, height));
static_assert(offsetof(shim_hip::hipExtent, depth) == offsetof(::hipExtent, depth));

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

// The device queries (gpu/hip_device.cc) have the real functions' types.
static_assert(std::is_same_v<shim_hip::hipDevice_t, ::hipDevice_t>);
// hipDeviceGetUuid takes the shim's hipUUID, the same 16 bytes as the header's.
static_assert(sizeof(shim_hip::hipUUID) == sizeof(::hipUUID));
static_assert(SameCall<shim_hip::hipGetDevice_fn, decltype(&::hipGetDevice)>);
static_assert(SameCall<shim_hip::hipDeviceGet_fn, decltype(&::hipDeviceGet)>);
static_assert(SameCall<shim_hip::hipDeviceGetName_fn, decltype(&::hipDeviceGetName)>);
static_assert(SameCall<shim_hip::hipRuntimeGetVersion_fn, decltype(&::hipRuntimeGetVersion)>);
// This header is ROCm 5.2's: its hipMemAllocationProp is the layout the shim
// reads below ROCm 5.3 (hipMemAllocationPropR0502Head), and the location is
// the same {type, id} pair.
static_assert(offsetof(shim_hip::hipMemAllocationPropR0502Head, location) ==
              offsetof(::hipMemAllocationProp, location));
static_assert(offsetof(shim_hip::hipMemAllocationPropR0502Head, compressionType) ==
              offsetof(::hipMemAllocationProp, compressionType));
static_assert(sizeof(shim_hip::hipMemLocation) == sizeof(::hipMemLocation));
static_assert(offsetof(shim_hip::hipMemLocation, type) == offsetof(::hipMemLocation, type));
static_assert(offsetof(shim_hip::hipMemLocation, id) == offsetof(::hipMemLocation, id));
static_assert(shim_hip::hipMemLocationTypeDevice == ::hipMemLocationTypeDevice);
static_assert(HIP_VERSION < shim_hip::kHipVersion0503,
              "a newer ROCm header: check hipMemAllocationProp's layout (gpu/hip_device.cc)");

namespace {

TEST(HipApiTest, EveryHookIsAnAllowedExportAndEveryHipExportAHook) {
  std::set<std::string> hooks;
#define RETAIN_NAME_HIP(name, params) hooks.insert(#name);
  RETAIN_FOR_EACH_HIP_HOOK(RETAIN_NAME_HIP)
#undef RETAIN_NAME_HIP
  std::ifstream list(RETAIN_HIP_EXPORTS);
  ASSERT_TRUE(list.is_open()) << RETAIN_HIP_EXPORTS;
  std::set<std::string> exported;
  std::string line;
  while (std::getline(list, line)) {
    if (!line.empty() && line[0] != '#') exported.insert(line);
  }
  EXPECT_EQ(hooks, exported);
}

}  // namespace
