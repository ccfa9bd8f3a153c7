// cuda_device: which device a CUDA allocation is on, asked of the real
// runtime or driver right after the allocation call succeeded (the current
// device cannot change inside a call the thread is making).
//
//  - runtime calls (cudaMalloc...): the runtime's current device,
//    cudaGetDevice; where no runtime answers, the driver's rule;
//  - driver calls (cuMemAlloc_v2...): the current context's device,
//    cuCtxGetDevice (the calls allocate in that context);
//  - cuMemCreate: its allocation properties' location, when it is a device
//    (CUmemAllocationPropHead); a host location is no device.
// A device is registered (record/gpu_devices.h) the first time it is seen,
// with its name (cuDeviceGetName) and UUID (cuDeviceGetUuid_v2, else
// cuDeviceGetUuid), which tell the ordinal's GPU apart under
// CUDA_VISIBLE_DEVICES.
//
// Every function returns a device id (0: none, when the runtime or driver
// does not answer), runs its queries with the thread busy (what they
// allocate is not recorded) and leaves errno as it was. Thread-safe; never
// allocates from the host heap; calls only the query functions above, which
// take no lock the allocation call still holds (it has returned).
#ifndef RETAIN_SHIM_SRC_GPU_CUDA_DEVICE_H_
#define RETAIN_SHIM_SRC_GPU_CUDA_DEVICE_H_

#include <cstdint>

namespace retain::shim {

// The device of a runtime allocation call that just succeeded.
uint8_t CudaRuntimeDevice();
// The device of a driver allocation call that just succeeded.
uint8_t CudaContextDevice();
// The device of cuMemCreate's `prop` (a CUmemAllocationProp), or 0 when its
// location is not a device (or prop is null).
uint8_t CudaPropDevice(const void* prop);
// True when cuMemCreate's `prop` places the memory on the host (a host or
// host NUMA location, CUDA 12.2+): such memory is pinned host memory.
bool CudaPropIsHost(const void* prop);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_GPU_CUDA_DEVICE_H_
