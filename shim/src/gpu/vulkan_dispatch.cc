// vulkan_dispatch: see gpu/vulkan_dispatch.h.
#include "gpu/vulkan_dispatch.h"

#include "base/large_static.h"
#include "base/spin_lock.h"

namespace retain::shim {
namespace {

// Zero-filled static storage: free slots, an unlocked lock, no initialiser.
SpinLock g_lock;
RETAIN_LARGE_STATIC VulkanInstanceEntry g_instances[kMaxVulkanInstances];
RETAIN_LARGE_STATIC VulkanDeviceEntry g_devices[kMaxVulkanDevices];
PFN_vkGetInstanceProcAddr g_fallback_instance_proc_addr;  // atomic builtins only
PFN_vkGetDeviceProcAddr g_fallback_device_proc_addr;

template <typename Entry, int kCount>
Entry* FindLocked(Entry (&table)[kCount], const void* key) {
  if (key == nullptr) return nullptr;
  for (Entry& entry : table) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

template <typename Entry, int kCount>
Entry* AddLocked(Entry (&table)[kCount], const Entry& added) {
  if (added.key == nullptr) return nullptr;
  // A stale entry under the same key (an object destroyed behind the
  // layer's back) is replaced.
  Entry* slot = FindLocked(table, added.key);
  for (int i = 0; slot == nullptr && i < kCount; ++i) {
    if (table[i].key == nullptr) slot = &table[i];
  }
  if (slot == nullptr) return nullptr;
  *slot = added;
  return slot;
}

template <typename Entry, int kCount>
bool CopyOut(Entry (&table)[kCount], const void* key, Entry* out, bool remove) {
  SpinLockHolder hold(g_lock);
  Entry* entry = FindLocked(table, key);
  if (entry == nullptr) return false;
  *out = *entry;
  if (remove) *entry = Entry{};
  return true;
}

}  // namespace

bool AddVulkanInstance(const VulkanInstanceEntry& entry) {
  SpinLockHolder hold(g_lock);
  return AddLocked(g_instances, entry) != nullptr;
}

bool FindVulkanInstance(const void* key, VulkanInstanceEntry* out) {
  return CopyOut(g_instances, key, out, false);
}

bool RemoveVulkanInstance(const void* key, VulkanInstanceEntry* out) {
  return CopyOut(g_instances, key, out, true);
}

bool AddVulkanDevice(VulkanDeviceEntry* entry) {
  SpinLockHolder hold(g_lock);
  VulkanDeviceEntry* slot = AddLocked(g_devices, *entry);
  if (slot == nullptr) return false;
  slot->slot = static_cast<uint32_t>(slot - g_devices);
  entry->slot = slot->slot;
  return true;
}

bool FindVulkanDevice(const void* key, VulkanDeviceEntry* out) {
  return CopyOut(g_devices, key, out, false);
}

bool RemoveVulkanDevice(const void* key, VulkanDeviceEntry* out) {
  return CopyOut(g_devices, key, out, true);
}

void SetFallbackInstanceProcAddr(PFN_vkGetInstanceProcAddr fn) {
  __atomic_store_n(&g_fallback_instance_proc_addr, fn, __ATOMIC_RELEASE);
}
PFN_vkGetInstanceProcAddr FallbackInstanceProcAddr() {
  return __atomic_load_n(&g_fallback_instance_proc_addr, __ATOMIC_ACQUIRE);
}
void SetFallbackDeviceProcAddr(PFN_vkGetDeviceProcAddr fn) {
  __atomic_store_n(&g_fallback_device_proc_addr, fn, __ATOMIC_RELEASE);
}
PFN_vkGetDeviceProcAddr FallbackDeviceProcAddr() {
  return __atomic_load_n(&g_fallback_device_proc_addr, __ATOMIC_ACQUIRE);
}

void VulkanDispatchLockForFork() { g_lock.Lock(); }
void VulkanDispatchUnlockForFork() { g_lock.Unlock(); }
void VulkanDispatchResetInChild() { g_lock.ResetInChild(); }

}  // namespace retain::shim
