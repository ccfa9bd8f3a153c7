// vulkan_hooks: libretain.so as a Vulkan layer (VK_LAYER_RETAIN_memory).
//
// Programs get Vulkan functions in four ways: the loader's exports
// (vkAllocateMemory in libvulkan), vkGetInstanceProcAddr,
// vkGetDeviceProcAddr, and Vulkan-Hpp's dynamic dispatcher (which uses the
// last two, as llama.cpp's ggml-vulkan does). Interposing the exports would
// miss the other three; a layer sits in the loader's dispatch chain, so all
// four reach it. gpu/vulkan_manifest.cc makes the loader load it.
//
// The only export is vkNegotiateLoaderLayerInterfaceVersion; it hands the
// loader this file's vkGetInstanceProcAddr / vkGetDeviceProcAddr, which are
// hidden (exporting those names from a preloaded library would capture every
// program's and the loader's own lookups). Interface version 2.
//
// Intercepted: vkCreateInstance, vkDestroyInstance (the instance's table:
// next layer's functions, its vkGetPhysicalDeviceMemoryProperties),
// vkCreateDevice (the device's table and each memory type's property flags,
// read from vkGetPhysicalDeviceMemoryProperties of its physical device),
// vkDestroyDevice, vkAllocateMemory and vkFreeMemory (the records). Each
// creation follows the loader's link chain (VkLayer*CreateInfo with
// VK_LAYER_LINK_INFO: take the next vkGet*ProcAddr, advance pLayerInfo, call
// down). Everything else is the next layer's function, returned as is.
//
// Devices: vkCreateDevice registers its physical device (record/gpu_devices.h)
// as its index in the instance's vkEnumeratePhysicalDevices order (the
// order the program sees: the loader sorts below the layers), with
// VkPhysicalDeviceProperties.deviceName and, on a Vulkan 1.1 instance (or
// one with VK_KHR_get_physical_device_properties2), the deviceUUID of
// VkPhysicalDeviceIDProperties; every allocation of that VkDevice records
// that device.
//
// Records: kind vulkan-device, size = allocationSize, flags = memory type
// index | (VkMemoryPropertyFlags & 0xff) << 8 (bit 8 device-local, bit 9
// host-visible; bits above 0x80 — RDMA_CAPABLE_NV — do not fit the 16-bit
// column and are dropped). Key in the GpuApi::kVulkan table: the
// VkDeviceMemory value XOR (device slot << 56). Handles are only unique per
// device; the slot (the device's index in vulkan_dispatch's table, 0 for the
// first live device, so the key is the handle itself in the common
// one-device program) keeps two devices' equal handles apart. Drivers that
// return pointers (Mesa, NVIDIA, AMD on 64-bit) never use the top byte.
//
// vkAllocateMemory holds a GpuCall around the real call, so the host memory
// the driver takes meanwhile (lavapipe posix_memaligns the whole block) is
// recorded as gpu-driver-host, not as the program's heap: counted once.
//
// Hooks never change what the next layer returns, never allocate from the
// host heap, and pass calls of objects missing from the tables straight
// down (gpu/vulkan_dispatch.h).
#define VK_NO_PROTOTYPES
#include <string.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan_core.h>

#include <cstdint>

#include "base/log.h"
#include "base/thread_state.h"
#include "gpu/vulkan_dispatch.h"
#include "gpu/vulkan_manifest.h"
#include "record/gpu_devices.h"
#include "record/gpu_recorder.h"
#include "record/kinds.h"
#include "record/live_table.h"

namespace retain::shim {
namespace {

template <typename Fn>
Fn As(PFN_vkVoidFunction fn) {
  return reinterpret_cast<Fn>(fn);
}

uintptr_t MemoryKey(uint32_t slot, VkDeviceMemory memory) {
  return reinterpret_cast<uintptr_t>(memory) ^ (static_cast<uintptr_t>(slot) << 56);
}

VkLayerInstanceCreateInfo* InstanceLinkInfo(const VkInstanceCreateInfo* info) {
  if (info == nullptr) return nullptr;
  for (auto* p = static_cast<const VkBaseInStructure*>(info->pNext); p != nullptr; p = p->pNext) {
    if (p->sType != VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO) continue;
    // The loader's own structure, meant to be advanced by each layer.
    auto* link = reinterpret_cast<VkLayerInstanceCreateInfo*>(const_cast<VkBaseInStructure*>(p));
    if (link->function == VK_LAYER_LINK_INFO) return link;
  }
  return nullptr;
}

VkLayerDeviceCreateInfo* DeviceLinkInfo(const VkDeviceCreateInfo* info) {
  if (info == nullptr) return nullptr;
  for (auto* p = static_cast<const VkBaseInStructure*>(info->pNext); p != nullptr; p = p->pNext) {
    if (p->sType != VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO) continue;
    auto* link = reinterpret_cast<VkLayerDeviceCreateInfo*>(const_cast<VkBaseInStructure*>(p));
    if (link->function == VK_LAYER_LINK_INFO) return link;
  }
  return nullptr;
}

// The next layer's `name` for an object missing from the tables.
PFN_vkVoidFunction FallbackInstanceFunction(VkInstance instance, const char* name) {
  PFN_vkGetInstanceProcAddr next = FallbackInstanceProcAddr();
  return next != nullptr ? next(instance, name) : nullptr;
}
PFN_vkVoidFunction FallbackDeviceFunction(VkDevice device, const char* name) {
  PFN_vkGetDeviceProcAddr next = FallbackDeviceProcAddr();
  return next != nullptr ? next(device, name) : nullptr;
}

void WarnTableFullOnce(const char* what) {
  static int warned;
  if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED) == 0) {
    LogWarning("more than %d live Vulkan %ss; allocations of the others are not recorded",
               what[0] == 'i' ? kMaxVulkanInstances : kMaxVulkanDevices, what);
  }
}

// True when the instance will have vkGetPhysicalDeviceProperties2 (core
// from Vulkan 1.1) or its KHR form enabled: only then may it be called.
bool HasProperties2(const VkInstanceCreateInfo* info, bool* khr) {
  *khr = false;
  if (info == nullptr) return false;
  for (uint32_t i = 0; i < info->enabledExtensionCount; ++i) {
    const char* name = info->ppEnabledExtensionNames[i];
    if (name != nullptr && strcmp(name, "VK_KHR_get_physical_device_properties2") == 0) {
      *khr = true;
    }
  }
  const uint32_t version =
      info->pApplicationInfo != nullptr ? info->pApplicationInfo->apiVersion : 0;
  return *khr || version >= VK_API_VERSION_1_1;
}

// The id (record/gpu_devices.h) of `physical`, a physical device of
// `instance`: registered with its enumeration index, name and UUID the
// first time. 0 when the instance's functions are missing or it does not
// enumerate `physical`. The queries are the layer's own: not the program's
// memory.
uint8_t PhysicalDeviceId(const VulkanInstanceEntry& instance, VkPhysicalDevice physical) {
  if (instance.enumerate_physical_devices == nullptr || instance.get_properties == nullptr) {
    return 0;
  }
  BusyScope busy;
  constexpr uint32_t kMaxPhysicalDevices = 64;
  VkPhysicalDevice devices[kMaxPhysicalDevices];
  uint32_t count = kMaxPhysicalDevices;
  const VkResult listed = instance.enumerate_physical_devices(instance.instance, &count, devices);
  if (listed != VK_SUCCESS && listed != VK_INCOMPLETE) return 0;
  int32_t index = -1;
  for (uint32_t i = 0; i < count && i < kMaxPhysicalDevices; ++i) {
    if (devices[i] == physical) index = static_cast<int32_t>(i);
  }
  if (index < 0) return 0;
  if (uint8_t known = FindGpuDevice(GpuApi::kVulkan, index)) return known;
  GpuDeviceInfo info{};
  info.api = GpuApi::kVulkan;
  info.index = index;
  VkPhysicalDeviceProperties properties{};
  instance.get_properties(physical, &properties);
  static_assert(sizeof(info.name) >= VK_MAX_PHYSICAL_DEVICE_NAME_SIZE);
  memcpy(info.name, properties.deviceName, VK_MAX_PHYSICAL_DEVICE_NAME_SIZE);
  info.name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE - 1] = '\0';
  if (instance.get_properties2 != nullptr && properties.apiVersion >= VK_API_VERSION_1_1) {
    VkPhysicalDeviceIDProperties ids{};
    ids.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
    VkPhysicalDeviceProperties2 properties2{};
    properties2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    properties2.pNext = &ids;
    instance.get_properties2(physical, &properties2);
    static_assert(sizeof(info.uuid) == VK_UUID_SIZE);
    memcpy(info.uuid, ids.deviceUUID, VK_UUID_SIZE);
    info.has_uuid = true;
  }
  return RegisterGpuDevice(info);
}

VKAPI_ATTR VkResult VKAPI_CALL CreateInstance(const VkInstanceCreateInfo* info,
                                              const VkAllocationCallbacks* allocator,
                                              VkInstance* instance) {
  VkLayerInstanceCreateInfo* link = InstanceLinkInfo(info);
  if (link == nullptr || link->u.pLayerInfo == nullptr) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr next = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  auto create = As<PFN_vkCreateInstance>(next(VK_NULL_HANDLE, "vkCreateInstance"));
  if (create == nullptr) return VK_ERROR_INITIALIZATION_FAILED;
  link->u.pLayerInfo = link->u.pLayerInfo->pNext;  // the next layer's link
  VkResult result = create(info, allocator, instance);
  if (result != VK_SUCCESS) return result;
  SetFallbackInstanceProcAddr(next);
  VulkanInstanceEntry entry{};
  entry.key = VulkanDispatchKey(*instance);
  entry.instance = *instance;
  entry.next_get_instance_proc_addr = next;
  entry.destroy_instance = As<PFN_vkDestroyInstance>(next(*instance, "vkDestroyInstance"));
  entry.get_memory_properties = As<PFN_vkGetPhysicalDeviceMemoryProperties>(
      next(*instance, "vkGetPhysicalDeviceMemoryProperties"));
  entry.enumerate_physical_devices =
      As<PFN_vkEnumeratePhysicalDevices>(next(*instance, "vkEnumeratePhysicalDevices"));
  entry.get_properties =
      As<PFN_vkGetPhysicalDeviceProperties>(next(*instance, "vkGetPhysicalDeviceProperties"));
  if (bool khr; HasProperties2(info, &khr)) {
    entry.get_properties2 = As<PFN_vkGetPhysicalDeviceProperties2>(
        next(*instance, khr && (info->pApplicationInfo == nullptr ||
                                info->pApplicationInfo->apiVersion < VK_API_VERSION_1_1)
                            ? "vkGetPhysicalDeviceProperties2KHR"
                            : "vkGetPhysicalDeviceProperties2"));
  }
  if (!AddVulkanInstance(entry)) WarnTableFullOnce("instance");
  return result;
}

VKAPI_ATTR void VKAPI_CALL DestroyInstance(VkInstance instance,
                                           const VkAllocationCallbacks* allocator) {
  if (instance == VK_NULL_HANDLE) return;
  VulkanInstanceEntry entry;
  PFN_vkDestroyInstance destroy = nullptr;
  if (RemoveVulkanInstance(VulkanDispatchKey(instance), &entry)) {
    destroy = entry.destroy_instance;
  } else {
    destroy = As<PFN_vkDestroyInstance>(FallbackInstanceFunction(instance, "vkDestroyInstance"));
  }
  if (destroy != nullptr) destroy(instance, allocator);
}

VKAPI_ATTR VkResult VKAPI_CALL CreateDevice(VkPhysicalDevice physical_device,
                                            const VkDeviceCreateInfo* info,
                                            const VkAllocationCallbacks* allocator,
                                            VkDevice* device) {
  VkLayerDeviceCreateInfo* link = DeviceLinkInfo(info);
  if (link == nullptr || link->u.pLayerInfo == nullptr) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr next_instance = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  PFN_vkGetDeviceProcAddr next_device = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
  // A physical device shares its instance's dispatch key.
  VulkanInstanceEntry instance{};
  bool known = FindVulkanInstance(VulkanDispatchKey(physical_device), &instance);
  auto create = As<PFN_vkCreateDevice>(
      next_instance(known ? instance.instance : VK_NULL_HANDLE, "vkCreateDevice"));
  if (create == nullptr) return VK_ERROR_INITIALIZATION_FAILED;

  VulkanDeviceEntry entry{};
  if (known && instance.get_memory_properties != nullptr) {
    VkPhysicalDeviceMemoryProperties properties{};
    {
      BusyScope busy;  // the layer's own query: not the program's memory
      instance.get_memory_properties(physical_device, &properties);
    }
    uint32_t count = properties.memoryTypeCount;
    if (count > VK_MAX_MEMORY_TYPES) count = VK_MAX_MEMORY_TYPES;
    entry.memory_type_count = count;
    for (uint32_t i = 0; i < count; ++i) {
      entry.memory_type_flags[i] =
          static_cast<uint16_t>(i | ((properties.memoryTypes[i].propertyFlags & 0xffu) << 8));
    }
  }

  if (known) entry.device_id = PhysicalDeviceId(instance, physical_device);

  link->u.pLayerInfo = link->u.pLayerInfo->pNext;  // the next layer's link
  VkResult result = create(physical_device, info, allocator, device);
  if (result != VK_SUCCESS) return result;
  SetFallbackDeviceProcAddr(next_device);
  entry.key = VulkanDispatchKey(*device);
  entry.device = *device;
  entry.next_get_device_proc_addr = next_device;
  entry.destroy_device = As<PFN_vkDestroyDevice>(next_device(*device, "vkDestroyDevice"));
  entry.allocate_memory = As<PFN_vkAllocateMemory>(next_device(*device, "vkAllocateMemory"));
  entry.free_memory = As<PFN_vkFreeMemory>(next_device(*device, "vkFreeMemory"));
  if (!AddVulkanDevice(&entry)) WarnTableFullOnce("device");
  return result;
}

VKAPI_ATTR void VKAPI_CALL DestroyDevice(VkDevice device, const VkAllocationCallbacks* allocator) {
  if (device == VK_NULL_HANDLE) return;
  VulkanDeviceEntry entry;
  PFN_vkDestroyDevice destroy = nullptr;
  if (RemoveVulkanDevice(VulkanDispatchKey(device), &entry)) {
    destroy = entry.destroy_device;
  } else {
    destroy = As<PFN_vkDestroyDevice>(FallbackDeviceFunction(device, "vkDestroyDevice"));
  }
  if (destroy != nullptr) destroy(device, allocator);
}

VKAPI_ATTR VkResult VKAPI_CALL AllocateMemory(VkDevice device, const VkMemoryAllocateInfo* info,
                                              const VkAllocationCallbacks* allocator,
                                              VkDeviceMemory* memory) {
  VulkanDeviceEntry entry;
  if (!FindVulkanDevice(VulkanDispatchKey(device), &entry) || entry.allocate_memory == nullptr) {
    auto allocate = As<PFN_vkAllocateMemory>(FallbackDeviceFunction(device, "vkAllocateMemory"));
    return allocate != nullptr ? allocate(device, info, allocator, memory)
                               : VK_ERROR_INITIALIZATION_FAILED;
  }
  GpuCall call;  // the driver's host memory taken inside is gpu-driver-host
  VkResult result = entry.allocate_memory(device, info, allocator, memory);
  if (call.records() && result == VK_SUCCESS && info != nullptr && memory != nullptr &&
      *memory != VK_NULL_HANDLE) {
    uint32_t type = info->memoryTypeIndex;
    uint16_t flags = type < entry.memory_type_count ? entry.memory_type_flags[type]
                                                    : static_cast<uint16_t>(type & 0xffu);
    RecordGpuAlloc(GpuApi::kVulkan, MemoryKey(entry.slot, *memory), info->allocationSize,
                   Kind::kVulkanDevice, flags, entry.device_id);
  }
  return result;
}

VKAPI_ATTR void VKAPI_CALL FreeMemory(VkDevice device, VkDeviceMemory memory,
                                      const VkAllocationCallbacks* allocator) {
  VulkanDeviceEntry entry;
  if (!FindVulkanDevice(VulkanDispatchKey(device), &entry) || entry.free_memory == nullptr) {
    auto free_memory = As<PFN_vkFreeMemory>(FallbackDeviceFunction(device, "vkFreeMemory"));
    if (free_memory != nullptr) free_memory(device, memory, allocator);
    return;
  }
  GpuCall call;
  // Before the real call: once the driver has freed it, another thread may
  // be handed the same handle.
  LiveRecord record;
  bool taken = memory != VK_NULL_HANDLE &&
               TakeGpuRecord(GpuApi::kVulkan, MemoryKey(entry.slot, memory), &record);
  entry.free_memory(device, memory, allocator);
  if (taken) CompleteGpuFree(GpuApi::kVulkan, record);  // vkFreeMemory cannot fail
}

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL GetDeviceProcAddr(VkDevice device, const char* name);
VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL GetInstanceProcAddr(VkInstance instance, const char* name);

// Every function the layer intercepts (device-level ones also through
// vkGetDeviceProcAddr); the rest are the next layer's. Plain code rather
// than a table of pointers: no initialiser runs before the hooks can.
PFN_vkVoidFunction Intercepted(const char* name, bool device_level_only) {
  if (name == nullptr || strncmp(name, "vk", 2) != 0) return nullptr;
  auto is = [name](const char* candidate) { return strcmp(name, candidate) == 0; };
  auto fn = [](auto* function) { return reinterpret_cast<PFN_vkVoidFunction>(function); };
  if (is("vkGetDeviceProcAddr")) return fn(&GetDeviceProcAddr);
  if (is("vkDestroyDevice")) return fn(&DestroyDevice);
  if (is("vkAllocateMemory")) return fn(&AllocateMemory);
  if (is("vkFreeMemory")) return fn(&FreeMemory);
  if (device_level_only) return nullptr;
  if (is("vkGetInstanceProcAddr")) return fn(&GetInstanceProcAddr);
  if (is("vkCreateInstance")) return fn(&CreateInstance);
  if (is("vkDestroyInstance")) return fn(&DestroyInstance);
  if (is("vkCreateDevice")) return fn(&CreateDevice);
  return nullptr;
}

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL GetInstanceProcAddr(VkInstance instance,
                                                             const char* name) {
  if (PFN_vkVoidFunction own = Intercepted(name, false); own != nullptr) return own;
  if (instance == VK_NULL_HANDLE) return nullptr;
  VulkanInstanceEntry entry;
  if (FindVulkanInstance(VulkanDispatchKey(instance), &entry)) {
    return entry.next_get_instance_proc_addr(instance, name);
  }
  return FallbackInstanceFunction(instance, name);
}

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL GetDeviceProcAddr(VkDevice device, const char* name) {
  if (PFN_vkVoidFunction own = Intercepted(name, true); own != nullptr) return own;
  if (device == VK_NULL_HANDLE) return nullptr;
  VulkanDeviceEntry entry;
  if (FindVulkanDevice(VulkanDispatchKey(device), &entry)) {
    return entry.next_get_device_proc_addr(device, name);
  }
  return FallbackDeviceFunction(device, name);
}

}  // namespace
}  // namespace retain::shim

// The layer's one export. Refuses (the loader then skips the layer) when
// this copy of the shim is not the process's (see VulkanLayerActive) or
// RETAIN_VULKAN=off.
extern "C" __attribute__((visibility("default"))) VKAPI_ATTR VkResult VKAPI_CALL
vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface* request) {
  using namespace retain::shim;
  if (request == nullptr || request->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT ||
      request->loaderLayerInterfaceVersion < 2 || !VulkanLayerActive()) {
    return VK_ERROR_INITIALIZATION_FAILED;
  }
  request->loaderLayerInterfaceVersion = 2;
  request->pfnGetInstanceProcAddr = &GetInstanceProcAddr;
  request->pfnGetDeviceProcAddr = &GetDeviceProcAddr;
  request->pfnGetPhysicalDeviceProcAddr = nullptr;  // no physical-device extensions
  return VK_SUCCESS;
}
