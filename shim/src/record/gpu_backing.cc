// gpu_backing: see record/gpu_backing.h.
#include "record/gpu_backing.h"

#include <atomic>

#include "base/large_static.h"
#include "base/spin_lock.h"
#include "base/thread_state.h"

namespace retain::shim {
namespace {

// constinit, zero-filled: hooks may run before this library's initialisers.
constinit SpinLock g_lock;
RETAIN_LARGE_STATIC constinit GpuBacking g_links[kMaxGpuBackings];
constinit size_t g_count = 0;
std::atomic<uint64_t> g_dropped;

static_assert(sizeof(ThreadState::gpu_host) / sizeof(uintptr_t) == kMaxBackingBlocks);

}  // namespace

void BeginGpuHostNotes() {
  g_thread.gpu_host_count = 0;
  g_thread.gpu_host_bytes = 0;
}

void NoteGpuHostBlock(uintptr_t address, uint64_t size) {
  ThreadState& t = g_thread;
  t.gpu_host_bytes += size;
  if (t.gpu_host_count < kMaxBackingBlocks) {
    t.gpu_host[t.gpu_host_count] = address;
    t.gpu_host_size[t.gpu_host_count] = size;
    ++t.gpu_host_count;
    return;
  }
  // Full: keep the largest blocks (the backing; small ones are bookkeeping).
  uint32_t smallest = 0;
  for (uint32_t i = 1; i < t.gpu_host_count; ++i) {
    if (t.gpu_host_size[i] < t.gpu_host_size[smallest]) smallest = i;
  }
  if (size > t.gpu_host_size[smallest]) {
    t.gpu_host[smallest] = address;
    t.gpu_host_size[smallest] = size;
  }
}

void LinkGpuBacking(uint8_t api, Kind kind, uintptr_t handle, uint64_t size) {
  ThreadState& t = g_thread;
  const uint32_t count = t.gpu_host_count;
  const uint64_t bytes = t.gpu_host_bytes;
  t.gpu_host_count = 0;
  t.gpu_host_bytes = 0;
  // Backing blocks are big; the driver's object structures taken in the
  // same call (lavapipe's ~100-byte lvp_device_memory) are not: blocks
  // under a page (or under half the allocation, for small ones) stay the
  // driver's own rows.
  const uint64_t smallest = size / 2 < 4096 ? size / 2 : 4096;
  GpuBacking link{};
  uint64_t linked = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (t.gpu_host_size[i] < smallest) continue;
    link.host[link.count++] = t.gpu_host[i];
    linked += t.gpu_host_size[i];
  }
  if (link.count == 0 || linked * 2 < size) return;  // none, or bookkeeping only
  link.handle = handle;
  link.api = api;
  link.kind = kind;
  link.host_bytes = bytes;
  SpinLockHolder hold(g_lock);
  // A handle the driver reused after a release the shim missed: replace.
  for (size_t i = 0; i < g_count; ++i) {
    if (g_links[i].api == api && g_links[i].handle == handle) {
      g_links[i] = link;
      return;
    }
  }
  if (g_count == kMaxGpuBackings) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  g_links[g_count++] = link;
}

void UnlinkGpuBacking(uint8_t api, uintptr_t handle) {
  SpinLockHolder hold(g_lock);
  for (size_t i = 0; i < g_count; ++i) {
    if (g_links[i].api == api && g_links[i].handle == handle) {
      g_links[i] = g_links[--g_count];
      return;
    }
  }
}

size_t GpuBackingCount() {
  SpinLockHolder hold(g_lock);
  return g_count;
}

size_t CopyGpuBackings(GpuBacking* out, size_t capacity) {
  SpinLockHolder hold(g_lock);
  const size_t n = g_count < capacity ? g_count : capacity;
  for (size_t i = 0; i < n; ++i) out[i] = g_links[i];
  return n;
}

uint64_t GpuBackingsDropped() { return g_dropped.load(std::memory_order_relaxed); }

void GpuBackingResetInChild() { g_lock.ResetInChild(); }

}  // namespace retain::shim
