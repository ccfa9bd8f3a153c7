// vulkan_dispatch: the Vulkan layer's per-instance and per-device state.
//
// A layer finds "its" instance or device from any dispatchable handle by the
// loader's dispatch key: the pointer stored in the handle's first word
// (*(void**)handle), the same for an instance and its physical devices, and
// for a device and its queues and command buffers. Each entry holds what the
// layer calls down to (the next layer's or the driver's functions) and, for
// a device, the flags column of each memory type.
//
// Fixed static tables (kMaxVulkanInstances, kMaxVulkanDevices) under one
// SpinLock: no host heap, no initialiser, lookups copy an entry out and
// release the lock before anyone calls down the chain. A program that holds
// more live instances or devices than the tables take still works: the
// layer then passes that object's calls through unrecorded, calling down
// through the last next-layer vkGet*ProcAddr it saw (SetFallback*).
//
// Thread-safe. Never allocates, never blocks but on the lock, never calls
// out while holding it. Not async-signal-safe.
#ifndef RETAIN_SHIM_SRC_GPU_VULKAN_DISPATCH_H_
#define RETAIN_SHIM_SRC_GPU_VULKAN_DISPATCH_H_

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan_core.h>

#include <cstdint>

namespace retain::shim {

inline constexpr int kMaxVulkanInstances = 64;
inline constexpr int kMaxVulkanDevices = 256;

// The loader's dispatch key of a dispatchable handle.
inline void* VulkanDispatchKey(const void* handle) { return *static_cast<void* const*>(handle); }

struct VulkanInstanceEntry {
  void* key;  // null: a free slot
  VkInstance instance;
  PFN_vkGetInstanceProcAddr next_get_instance_proc_addr;
  PFN_vkDestroyInstance destroy_instance;
  PFN_vkGetPhysicalDeviceMemoryProperties get_memory_properties;
  // What names a device (record/gpu_devices.h): its index in the
  // enumeration, its properties, and (null unless the instance is Vulkan
  // 1.1 or enabled VK_KHR_get_physical_device_properties2) the properties
  // that carry its UUID.
  PFN_vkEnumeratePhysicalDevices enumerate_physical_devices;
  PFN_vkGetPhysicalDeviceProperties get_properties;
  PFN_vkGetPhysicalDeviceProperties2 get_properties2;
};

struct VulkanDeviceEntry {
  void* key;  // null: a free slot
  VkDevice device;
  PFN_vkGetDeviceProcAddr next_get_device_proc_addr;
  PFN_vkDestroyDevice destroy_device;
  PFN_vkAllocateMemory allocate_memory;
  PFN_vkFreeMemory free_memory;
  // Index of the entry in the table (set by AddVulkanDevice); it tells
  // apart equal VkDeviceMemory values of different devices (gpu/vulkan_hooks.cc).
  uint32_t slot;
  // The physical device's id in record/gpu_devices.h (0: not known).
  uint8_t device_id;
  uint32_t memory_type_count;
  // Per memory type: the AllocationBlock.flags value, type index |
  // (VkMemoryPropertyFlags & 0xff) << 8.
  uint16_t memory_type_flags[VK_MAX_MEMORY_TYPES];
};

// Adds an entry (its key must be set); false when the table is full.
bool AddVulkanInstance(const VulkanInstanceEntry& entry);
// Copies the entry of `key` to *out; false when there is none.
bool FindVulkanInstance(const void* key, VulkanInstanceEntry* out);
// Removes the entry of `key`, copying it to *out first; false when none.
bool RemoveVulkanInstance(const void* key, VulkanInstanceEntry* out);

// As above for devices; AddVulkanDevice sets entry->slot.
bool AddVulkanDevice(VulkanDeviceEntry* entry);
bool FindVulkanDevice(const void* key, VulkanDeviceEntry* out);
bool RemoveVulkanDevice(const void* key, VulkanDeviceEntry* out);

// The last next-layer vkGetInstanceProcAddr / vkGetDeviceProcAddr seen at
// instance / device creation, for objects missing from the tables.
void SetFallbackInstanceProcAddr(PFN_vkGetInstanceProcAddr fn);
PFN_vkGetInstanceProcAddr FallbackInstanceProcAddr();
void SetFallbackDeviceProcAddr(PFN_vkGetDeviceProcAddr fn);
PFN_vkGetDeviceProcAddr FallbackDeviceProcAddr();

// fork(): the prepare handler takes the lock, the parent releases it, the
// child resets it (see gpu/vulkan_manifest.cc, which registers them).
void VulkanDispatchLockForFork();
void VulkanDispatchUnlockForFork();
void VulkanDispatchResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_GPU_VULKAN_DISPATCH_H_
