// gpu_devices: the GPU devices the shim saw allocations on, so each GPU
// record says which device its memory is on (Snapshot.devices and
// AllocationBlock.device in proto/retain.proto).
//
// A device is an API's number for it: the CUDA or HIP device ordinal
// (cudaGetDevice, hipGetDevice, cuCtxGetDevice, an allocation property's
// location id), or a Vulkan physical device's index in its instance's
// vkEnumeratePhysicalDevices order. The first time a device is seen it gets
// an id, 1, 2, ... (kMaxGpuDevices at most; 0 is "no device"), with its
// name and UUID where the API tells them: that id is what a record keeps
// (LiveRecord::device, 6 bits) and what the snapshot's device column holds.
// Ids are never reused or removed: the registry is as small as the machine.
//
// Thread-safe. A lookup of a known device is a lock-free scan of at most
// kMaxGpuDevices entries; registering one takes a SpinLock for the copy,
// never while calling out (the caller describes the device first). Never
// allocates from the host heap, never touches errno. Not async-signal-safe.
#ifndef RETAIN_SHIM_SRC_RECORD_GPU_DEVICES_H_
#define RETAIN_SHIM_SRC_RECORD_GPU_DEVICES_H_

#include <cstddef>
#include <cstdint>

#include "record/gpu_recorder.h"

namespace retain::shim {

// Ids fit the 6 bits LiveRecord::device keeps (1..63). A process that sees
// more devices records the others with no device (id 0).
inline constexpr int kMaxGpuDevices = 63;
inline constexpr size_t kGpuDeviceNameBytes = 256;  // VK_MAX_PHYSICAL_DEVICE_NAME_SIZE

struct GpuDeviceInfo {
  uint8_t id;  // 1..kMaxGpuDevices, set by RegisterGpuDevice
  GpuApi api;
  int32_t index;  // the API's device number (see above)
  bool has_uuid;
  uint8_t uuid[16];
  char name[kGpuDeviceNameBytes];  // NUL-terminated; "" when unknown
};

// The id of device `index` of `api`, or 0 when it was never registered.
uint8_t FindGpuDevice(GpuApi api, int32_t index);

// Registers `info` (api, index, name, uuid; id is ignored) unless that
// device is known, and returns its id; 0 when the registry is full or the
// index is negative. The first registration's name and UUID stay.
uint8_t RegisterGpuDevice(const GpuDeviceInfo& info);

// The id of device `index` of `api`: FindGpuDevice, else RegisterGpuDevice
// of what describe(index, &info, context) fills in (name, uuid, has_uuid;
// it runs once per new device, with no lock held, inside a BusyScope: the
// driver's own allocations there are not the program's).
uint8_t GpuDeviceId(GpuApi api, int32_t index,
                    void (*describe)(int32_t index, GpuDeviceInfo* info, void* context),
                    void* context);

// Devices registered so far, and a copy of up to `capacity` of them (in id
// order); returns how many were copied. For the snapshot writer.
size_t GpuDeviceCount();
size_t CopyGpuDevices(GpuDeviceInfo* out, size_t capacity);

// fork(): the child keeps the devices (the ids in its inherited records stay
// meaningful) with a fresh lock.
void GpuDevicesResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_GPU_DEVICES_H_
