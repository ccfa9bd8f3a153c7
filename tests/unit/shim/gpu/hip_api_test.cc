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
