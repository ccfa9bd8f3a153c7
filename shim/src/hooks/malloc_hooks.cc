// malloc_hooks: the malloc family. Each replacement calls the next
// definition (g_real) and records the outcome; see record/hook_shape.h for the shape.
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "record/hook_shape.h"
#include "record/sampler.h"
#include "snapshot/triggers.h"

namespace retain::shim {
namespace {

constexpr size_t kMinAlignment = 16;

void RecordAlloc(void* pointer, size_t size) {
  if (pointer == nullptr) return;
  if (ShouldRecordHeap(size)) RecordHeapAlloc(pointer, size);
  MaybeRunService();
}

// realloc and reallocarray. The old record is taken out before the real call
// (its address may be handed to another thread the moment the call returns)
// and put back if the call fails.
template <typename Call>
void* Reallocate(void* pointer, size_t size, Call call) {
  if (pointer == nullptr) {
    void* result = call();
    RecordAlloc(result, size);
    return result;
  }
  LiveRecord old;
  bool had_record = TakeHeapRecord(pointer, &old);
  const uint64_t dropped_usable = had_record ? 0 : DroppedBlockUsableSize(pointer);
  void* result = call();
  int saved = errno;
  if (result != nullptr || size == 0) {  // moved, resized, or freed (realloc(p, 0))
    if (had_record) CompleteHeapRecordFree(old);
    ForgetDroppedHeapBytes(dropped_usable);
    RecordAlloc(result, size);
  } else if (had_record) {
    RestoreHeapRecord(old);
  }
  errno = saved;
  return result;
}

// realloc of a block the bootstrap allocator served: move it to the real
// heap (or, for the private heap's owner, within the private heap).
void* ReallocateBootstrap(void* pointer, size_t size) {
  void* result = malloc(size);
  if (result != nullptr) {
    size_t old_size = BootstrapAllocationSize(pointer);
    memcpy(result, pointer, old_size < size ? old_size : size);
    ReleaseBootstrap(pointer);
  }
  return result;
}

// Inside the shim, a thread that holds the private heap (base/hook_table.h)
// allocates there: glibc's allocations on the shim's behalf stay off the
// host's heap. Only reached on the pass-through path, never on the hot one.
inline bool PrivateHeapOwner() { return RETAIN_UNLIKELY(g_thread.private_heap != 0); }

size_t PageSize() {
  static size_t page_size = 0;
  if (page_size == 0) page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page_size;
}

}  // namespace
}  // namespace retain::shim

using namespace retain::shim;

RETAIN_EXPORT void* malloc(size_t size) noexcept {
  if (!HookReady()) return BootstrapAllocate(size, kMinAlignment);
  if (PassThrough()) {
    if (RETAIN_UNLIKELY(g_thread.malloc_probe != 0)) g_thread.malloc_probe = 2;
    return PrivateHeapOwner() ? PrivateHeapAllocate(size, kMinAlignment) : g_real.malloc(size);
  }
  BusyScope scope;
  void* result = g_real.malloc(size);
  RecordAlloc(result, size);
  return result;
}

RETAIN_EXPORT void free(void* pointer) noexcept {
  if (pointer == nullptr) return;
  if (RETAIN_UNLIKELY(IsBootstrapMemory(pointer))) return ReleaseBootstrap(pointer);
  if (!HookReady()) return;  // cannot happen: only bootstrap memory exists then
  // Sampling: most blocks were never recorded, and the filter says so
  // without a lock or a lookup.
  if (g_sample_interval != 0 && !SampledMayContain(reinterpret_cast<uintptr_t>(pointer))) {
    return g_real.free(pointer);
  }
  if (PassThrough()) return g_real.free(pointer);
  BusyScope scope;
  // glibc's free reads the block's header, just below it: its line, often
  // not in this core's cache, now arrives while the table is searched.
  __builtin_prefetch(static_cast<const char*>(pointer) - sizeof(size_t));
  RecordHeapFree(pointer);
  g_real.free(pointer);
}

// Not recorded; here so that a block of the bootstrap allocator's is
// measured by the shim, never handed to the real allocator.
RETAIN_EXPORT size_t malloc_usable_size(void* pointer) noexcept {
  if (pointer == nullptr) return 0;
  if (RETAIN_UNLIKELY(IsBootstrapMemory(pointer))) return BootstrapAllocationSize(pointer);
  if (!HookReady()) return 0;
  return g_real.malloc_usable_size(pointer);
}

RETAIN_EXPORT void* calloc(size_t count, size_t size) noexcept {
  size_t bytes = 0;
  bool overflow = __builtin_mul_overflow(count, size, &bytes);
  if (!HookReady()) return overflow ? nullptr : BootstrapAllocate(bytes, kMinAlignment);
  if (PassThrough()) {
    if (!PrivateHeapOwner()) return g_real.calloc(count, size);
    if (!overflow) return PrivateHeapAllocate(bytes, kMinAlignment);
    errno = ENOMEM;
    return nullptr;
  }
  BusyScope scope;
  void* result = g_real.calloc(count, size);
  RecordAlloc(result, bytes);
  return result;
}

RETAIN_EXPORT void* realloc(void* pointer, size_t size) noexcept {
  if (pointer != nullptr && RETAIN_UNLIKELY(IsBootstrapMemory(pointer))) {
    return ReallocateBootstrap(pointer, size);
  }
  if (!HookReady()) return BootstrapAllocate(size, kMinAlignment);
  if (PassThrough()) {
    if (pointer == nullptr && PrivateHeapOwner()) return PrivateHeapAllocate(size, kMinAlignment);
    return g_real.realloc(pointer, size);
  }
  BusyScope scope;
  return Reallocate(pointer, size, [&] { return g_real.realloc(pointer, size); });
}

RETAIN_EXPORT void* reallocarray(void* pointer, size_t count, size_t size) noexcept {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) bytes = 0;
  if (pointer != nullptr && RETAIN_UNLIKELY(IsBootstrapMemory(pointer))) {
    if (bytes == 0 && count != 0 && size != 0) {
      errno = ENOMEM;
      return nullptr;
    }
    return ReallocateBootstrap(pointer, bytes);
  }
  if (!HookReady()) return BootstrapAllocate(bytes, kMinAlignment);
  if (PassThrough()) return g_real.reallocarray(pointer, count, size);
  BusyScope scope;
  return Reallocate(pointer, bytes, [&] { return g_real.reallocarray(pointer, count, size); });
}

RETAIN_EXPORT int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  if (!HookReady()) {
    void* result = BootstrapAllocate(size, alignment);
    if (result == nullptr) return ENOMEM;
    *out = result;
    return 0;
  }
  if (PassThrough()) return g_real.posix_memalign(out, alignment, size);
  BusyScope scope;
  int error = g_real.posix_memalign(out, alignment, size);
  if (error == 0) RecordAlloc(*out, size);
  return error;
}

RETAIN_EXPORT void* aligned_alloc(size_t alignment, size_t size) noexcept {
  if (!HookReady()) return BootstrapAllocate(size, alignment);
  if (PassThrough()) return g_real.aligned_alloc(alignment, size);
  BusyScope scope;
  void* result = g_real.aligned_alloc(alignment, size);
  RecordAlloc(result, size);
  return result;
}

RETAIN_EXPORT void* memalign(size_t alignment, size_t size) noexcept {
  if (!HookReady()) return BootstrapAllocate(size, alignment);
  if (PassThrough()) return g_real.memalign(alignment, size);
  BusyScope scope;
  void* result = g_real.memalign(alignment, size);
  RecordAlloc(result, size);
  return result;
}

RETAIN_EXPORT void* valloc(size_t size) noexcept {
  if (!HookReady()) return BootstrapAllocate(size, 4096);
  if (PassThrough()) return g_real.valloc(size);
  BusyScope scope;
  void* result = g_real.valloc(size);
  RecordAlloc(result, size);
  return result;
}

RETAIN_EXPORT void* pvalloc(size_t size) noexcept {
  if (!HookReady()) return BootstrapAllocate(size, 4096);
  if (PassThrough()) return g_real.pvalloc(size);
  BusyScope scope;
  void* result = g_real.pvalloc(size);
  // pvalloc rounds the size up to whole pages (at least one): that is what
  // the program got.
  size_t page = PageSize();
  size_t rounded = size == 0 ? page : (size + page - 1) & ~(page - 1);
  RecordAlloc(result, rounded);
  return result;
}
