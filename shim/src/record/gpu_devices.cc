// gpu_devices: see record/gpu_devices.h.
#include "record/gpu_devices.h"

#include <errno.h>

#include "base/large_static.h"
#include "base/spin_lock.h"
#include "base/thread_state.h"

namespace retain::shim {
namespace {

// constinit, zero-filled: hooks may run before this library's initialisers.
// Entries [0, g_count) are complete: an entry is filled under g_lock before
// g_count is raised past it (release), and never changed again.
constinit SpinLock g_lock;
RETAIN_LARGE_STATIC constinit GpuDeviceInfo g_devices[kMaxGpuDevices];
constinit uint32_t g_count = 0;

uint32_t PublishedCount() { return __atomic_load_n(&g_count, __ATOMIC_ACQUIRE); }

uint8_t FindIn(uint32_t count, GpuApi api, int32_t index) {
  for (uint32_t i = 0; i < count; ++i) {
    if (g_devices[i].api == api && g_devices[i].index == index) return g_devices[i].id;
  }
  return 0;
}

}  // namespace

uint8_t FindGpuDevice(GpuApi api, int32_t index) { return FindIn(PublishedCount(), api, index); }

uint8_t RegisterGpuDevice(const GpuDeviceInfo& info) {
  if (info.index < 0) return 0;
  SpinLockHolder hold(g_lock);
  const uint32_t count = __atomic_load_n(&g_count, __ATOMIC_RELAXED);
  if (uint8_t known = FindIn(count, info.api, info.index)) return known;
  if (count == kMaxGpuDevices) return 0;
  GpuDeviceInfo& entry = g_devices[count];
  entry = info;
  entry.id = static_cast<uint8_t>(count + 1);
  entry.name[kGpuDeviceNameBytes - 1] = '\0';
  __atomic_store_n(&g_count, count + 1, __ATOMIC_RELEASE);
  return entry.id;
}

uint8_t GpuDeviceId(GpuApi api, int32_t index,
                    void (*describe)(int32_t index, GpuDeviceInfo* info, void* context),
                    void* context) {
  if (index < 0) return 0;
  if (uint8_t known = FindGpuDevice(api, index)) return known;
  // A new device: described once, outside the lock (describe calls the
  // driver). Two threads meeting it at once both describe it; the first to
  // register wins.
  GpuDeviceInfo info{};
  info.api = api;
  info.index = index;
  if (describe != nullptr) {
    const int saved = errno;
    BusyScope busy;
    describe(index, &info, context);
    errno = saved;
  }
  return RegisterGpuDevice(info);
}

size_t GpuDeviceCount() { return PublishedCount(); }

size_t CopyGpuDevices(GpuDeviceInfo* out, size_t capacity) {
  const uint32_t count = PublishedCount();
  size_t copied = 0;
  for (uint32_t i = 0; i < count && copied < capacity; ++i) out[copied++] = g_devices[i];
  return copied;
}

void GpuDevicesResetInChild() { g_lock.ResetInChild(); }

}  // namespace retain::shim
