// hip_device: which device a HIP allocation is on, asked of the real
// runtime right after the allocation call succeeded.
//
//  - hipMalloc and the other allocation calls: the runtime's current device
//    (hipGetDevice), which they allocate on;
//  - hipMemCreate: its allocation properties' location, when it is a device.
//    hipMemAllocationProp's layout is ROCm 5.2's up to ROCm 5.2 and CUDA's
//    from ROCm 6.0 (gpu/hip_api.h); the runtime's version
//    (hipRuntimeGetVersion) says which. For a runtime between the two, whose
//    layout the shim was not checked against, the current device.
// A device is registered (record/gpu_devices.h) the first time it is seen,
// with its name (hipDeviceGetName) and UUID (hipDeviceGetUuid, ROCm 5.1+).
//
// Every function returns a device id (0: none, when the runtime does not
// answer), runs its queries with the thread busy (what they allocate is not
// recorded) and leaves errno as it was. Thread-safe; never allocates from
// the host heap.
#ifndef RETAIN_SHIM_SRC_GPU_HIP_DEVICE_H_
#define RETAIN_SHIM_SRC_GPU_HIP_DEVICE_H_

#include <cstdint>

namespace retain::shim {

// The device of an allocation call that just succeeded.
uint8_t HipCurrentDevice();
// The device of hipMemCreate's `prop` (a hipMemAllocationProp).
uint8_t HipPropDevice(const void* prop);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_GPU_HIP_DEVICE_H_
