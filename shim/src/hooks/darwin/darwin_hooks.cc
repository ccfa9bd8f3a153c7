// darwin_hooks: the Darwin (macOS) host allocation hooks — the malloc
// family, the malloc_zone_* entry points, mmap/munmap and the Mach VM calls
// ggml-metal takes its host buffers from (vm_allocate) — recorded through
// the same recorder as on Linux (record/recorder.h), with the hook shape of
// record/hook_shape.h.
//
// NEVER COMPILED OR RUN: written without an Apple SDK or a Mac, against the
// documented APIs. See docs/macos-metal.md for what is missing before this
// can work (first of all: g_thread must not be a __thread variable on Darwin).
//
// How: dyld interposing. libretain.dylib, loaded with DYLD_INSERT_LIBRARIES,
// carries a __DATA,__interpose section of {replacement, original} pairs;
// dyld rebinds every *other* image's imports of `original` to `replacement`
// and leaves this image's own imports alone, so a replacement reaches the
// original by calling it by name (no dlsym, no bootstrap allocator).
//
// Why interposition and not malloc-zone wrapping (what Chromium's allocator
// shim and some heap profilers on macOS do: make the default zone writable
// with vm_protect and swap its function pointers):
//   - it keeps one hook shape with Linux: one replacement per exported
//     function, guarded the same way, recording the same way;
//   - zone wrapping only sees the zones it wrapped: each zone created later
//     (malloc_create_zone: CoreFoundation, drivers) must be found and wrapped
//     too, racing with threads already calling through it, and the zone
//     structs are read-only after start-up on recent macOS;
//   - zone wrapping also sees libmalloc's internal calls, which interposition
//     does not, so mixing the two would count twice.
// What interposition misses, and zone wrapping would see:
//   - calls that never cross an image boundary: libmalloc's `malloc` reaches
//     the zone through an internal call, not through the exported
//     malloc_zone_malloc (so the two hooks below never both see one block);
//     reallocf → realloc inside libmalloc is internal too (hence its own hook);
//   - code calling a zone's function pointers directly
//     (malloc_default_zone()->malloc(zone, n)): rare, not seen;
//   - malloc_zone_batch_malloc / batch_free (CoreFoundation): not hooked yet.
// Because the live table is keyed by address, a block allocated through one
// entry point and freed through another (malloc, then malloc_zone_free with
// malloc_zone_from_ptr) is still matched.
//
// Counted once: libmalloc takes its regions from the kernel with
// mach_vm_map / mach_vm_allocate — a call into libsystem_kernel, another
// image, so it *is* interposed. It only ever happens inside one of the heap
// hooks below, which hold the re-entry guard (BusyScope) across the real
// call, so the nested VM hook passes straight through: the block is counted
// as heap, its region not again as a mapping. The same guard keeps the
// shim's own allocations out (the shim's code calls the originals directly).
//
// Thread-safe; never allocates from the host heap itself; never changes what
// the original returns, nor errno.
#if !defined(__APPLE__)
#error "hooks/darwin/darwin_hooks.cc is for the Darwin build only"
#endif

#include <errno.h>
#include <mach/mach.h>
#include <mach/mach_vm.h>
#include <malloc/malloc.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "record/hook_shape.h"
#include "record/sampler.h"
#include "snapshot/triggers.h"

// One {replacement, original} pair in __DATA,__interpose, the layout dyld
// reads (<mach-o/dyld-interposing.h> has the same macro as DYLD_INTERPOSE).
// The casts are written as Apple's macro writes them: the pair must be
// static data the linker fills in (dyld reads the section before any
// initialiser runs), and that form is known to fold to a constant.
#define RETAIN_DYLD_INTERPOSE(replacement, original)                               \
  __attribute__((used)) static const struct {                                      \
    const void* replacement_fn;                                                    \
    const void* original_fn;                                                       \
  } retain_interpose_##original __attribute__((section("__DATA,__interpose"))) = { \
      (const void*)(unsigned long)&replacement, (const void*)(unsigned long)&original}

namespace retain::shim {
namespace {

void RecordAlloc(void* pointer, size_t size) {
  if (pointer == nullptr) return;
  if (ShouldRecordHeap(size)) RecordHeapAlloc(pointer, size);
  MaybeRunService();
}

// realloc, reallocf, malloc_zone_realloc: as hooks/malloc_hooks.cc's
// Reallocate (kept a copy rather than moved into a shared header so the
// Linux files stay untouched until this port has run once). The old record
// is taken out before the real call and put back if that call fails.
template <typename Call>
void* Reallocate(void* pointer, size_t size, Call call) {
  if (pointer == nullptr) {
    void* result = call();
    RecordAlloc(result, size);
    return result;
  }
  LiveRecord old;
  bool had_record = TakeHeapRecord(pointer, &old);
  void* result = call();
  int saved = errno;
  if (result != nullptr || size == 0) {
    if (had_record) CompleteHeapRecordFree(old);
    RecordAlloc(result, size);
  } else if (had_record) {
    RestoreHeapRecord(old);
  }
  errno = saved;
  return result;
}

// True when this call must go straight to the original: the shim is not
// ready (its initialisation on this thread is what allocates) or the thread
// is already inside the shim. Unlike Linux there is no bootstrap buffer to
// serve: the original is always callable.
inline bool Bypass() { return !HookReady() || PassThrough(); }

// Mach VM calls on another task's map are not this process's memory.
inline bool IsOwnTask(vm_map_t target) { return target == mach_task_self(); }

// vm_allocate regions are recorded as anonymous private read-write mappings
// (what VM_PROT_DEFAULT gives), so they land in mmap-anon — or in
// gpu-driver-host when Metal's driver takes them inside a buffer call.
constexpr int kVmProt = PROT_READ | PROT_WRITE;
constexpr int kVmFlags = MAP_PRIVATE | MAP_ANON;

template <typename Call>
kern_return_t VmAllocate(uintptr_t* address_out, uint64_t size, Call call) {
  BusyScope scope;
  uint32_t stack_id = CaptureForRecord();  // before the lock: it may be slow
  MmapTable& table = ProgramMappings();
  table.Lock();
  kern_return_t result = call();
  if (result == KERN_SUCCESS && size != 0) {
    RecordMapping(reinterpret_cast<void*>(*address_out), size, kVmProt, kVmFlags, -1, stack_id);
  }
  table.Unlock();
  return result;
}

template <typename Call>
kern_return_t VmDeallocate(uintptr_t address, uint64_t size, Call call) {
  BusyScope scope;
  MmapTable& table = ProgramMappings();
  table.Lock();
  kern_return_t result = call();
  if (result == KERN_SUCCESS && size != 0) RecordUnmapping(reinterpret_cast<void*>(address), size);
  table.Unlock();
  return result;
}

// ---- malloc family ----

void* RetainMalloc(size_t size) {
  if (Bypass()) return malloc(size);
  BusyScope scope;
  void* result = malloc(size);
  RecordAlloc(result, size);
  return result;
}

void RetainFree(void* pointer) {
  if (pointer == nullptr || Bypass()) return free(pointer);
  BusyScope scope;
  RecordHeapFree(pointer);  // before the real free: see record/hook_shape.h
  free(pointer);
}

void* RetainCalloc(size_t count, size_t size) {
  if (Bypass()) return calloc(count, size);
  size_t bytes = 0;
  __builtin_mul_overflow(count, size, &bytes);  // on overflow calloc fails: nothing recorded
  BusyScope scope;
  void* result = calloc(count, size);
  RecordAlloc(result, bytes);
  return result;
}

void* RetainRealloc(void* pointer, size_t size) {
  if (Bypass()) return realloc(pointer, size);
  BusyScope scope;
  return Reallocate(pointer, size, [&] { return realloc(pointer, size); });
}

// reallocf frees the block when it fails; Reallocate would put the record
// back, so a failure is handled here: the block is gone either way.
void* RetainReallocf(void* pointer, size_t size) {
  if (Bypass()) return reallocf(pointer, size);
  BusyScope scope;
  if (pointer == nullptr) {
    void* result = reallocf(pointer, size);
    RecordAlloc(result, size);
    return result;
  }
  LiveRecord old;
  bool had_record = TakeHeapRecord(pointer, &old);
  void* result = reallocf(pointer, size);
  int saved = errno;
  if (had_record) CompleteHeapRecordFree(old);
  RecordAlloc(result, size);
  errno = saved;
  return result;
}

int RetainPosixMemalign(void** out, size_t alignment, size_t size) {
  if (Bypass()) return posix_memalign(out, alignment, size);
  BusyScope scope;
  int error = posix_memalign(out, alignment, size);
  if (error == 0) RecordAlloc(*out, size);
  return error;
}

void* RetainAlignedAlloc(size_t alignment, size_t size) {
  if (Bypass()) return aligned_alloc(alignment, size);
  BusyScope scope;
  void* result = aligned_alloc(alignment, size);
  RecordAlloc(result, size);
  return result;
}

void* RetainValloc(size_t size) {
  if (Bypass()) return valloc(size);
  BusyScope scope;
  void* result = valloc(size);
  RecordAlloc(result, size);
  return result;
}

// ---- malloc_zone_* (Objective-C runtime, CoreFoundation, anything that
// picks a zone). Blocks from any zone go to the one heap table. ----

void* RetainZoneMalloc(malloc_zone_t* zone, size_t size) {
  if (Bypass()) return malloc_zone_malloc(zone, size);
  BusyScope scope;
  void* result = malloc_zone_malloc(zone, size);
  RecordAlloc(result, size);
  return result;
}

void* RetainZoneCalloc(malloc_zone_t* zone, size_t count, size_t size) {
  if (Bypass()) return malloc_zone_calloc(zone, count, size);
  size_t bytes = 0;
  __builtin_mul_overflow(count, size, &bytes);
  BusyScope scope;
  void* result = malloc_zone_calloc(zone, count, size);
  RecordAlloc(result, bytes);
  return result;
}

void* RetainZoneValloc(malloc_zone_t* zone, size_t size) {
  if (Bypass()) return malloc_zone_valloc(zone, size);
  BusyScope scope;
  void* result = malloc_zone_valloc(zone, size);
  RecordAlloc(result, size);
  return result;
}

void* RetainZoneMemalign(malloc_zone_t* zone, size_t alignment, size_t size) {
  if (Bypass()) return malloc_zone_memalign(zone, alignment, size);
  BusyScope scope;
  void* result = malloc_zone_memalign(zone, alignment, size);
  RecordAlloc(result, size);
  return result;
}

void* RetainZoneRealloc(malloc_zone_t* zone, void* pointer, size_t size) {
  if (Bypass()) return malloc_zone_realloc(zone, pointer, size);
  BusyScope scope;
  return Reallocate(pointer, size, [&] { return malloc_zone_realloc(zone, pointer, size); });
}

void RetainZoneFree(malloc_zone_t* zone, void* pointer) {
  if (pointer == nullptr || Bypass()) return malloc_zone_free(zone, pointer);
  BusyScope scope;
  RecordHeapFree(pointer);
  malloc_zone_free(zone, pointer);
}

// ---- mmap family ----

void* RetainMmap(void* address, size_t length, int prot, int flags, int fd, off_t offset) {
  if (Bypass()) return mmap(address, length, prot, flags, fd, offset);
  BusyScope scope;
  uint32_t stack_id = CaptureForRecord();
  MmapTable& table = ProgramMappings();
  table.Lock();
  void* result = mmap(address, length, prot, flags, fd, offset);
  if (result != MAP_FAILED) RecordMapping(result, length, prot, flags, fd, stack_id);
  table.Unlock();
  return result;
}

int RetainMunmap(void* address, size_t length) {
  if (Bypass()) return munmap(address, length);
  BusyScope scope;
  MmapTable& table = ProgramMappings();
  table.Lock();
  int result = munmap(address, length);
  if (result == 0) RecordUnmapping(address, length);
  table.Unlock();
  return result;
}

// ---- Mach VM. libsyscall's vm_allocate calls mach_vm_allocate inside the
// same image (not interposed), so one allocation reaches one hook. ----

kern_return_t RetainVmAllocate(vm_map_t target, vm_address_t* address, vm_size_t size, int flags) {
  if (!IsOwnTask(target) || Bypass()) return vm_allocate(target, address, size, flags);
  return VmAllocate(reinterpret_cast<uintptr_t*>(address), size,
                    [&] { return vm_allocate(target, address, size, flags); });
}

kern_return_t RetainVmDeallocate(vm_map_t target, vm_address_t address, vm_size_t size) {
  if (!IsOwnTask(target) || Bypass()) return vm_deallocate(target, address, size);
  return VmDeallocate(address, size, [&] { return vm_deallocate(target, address, size); });
}

kern_return_t RetainMachVmAllocate(vm_map_t target, mach_vm_address_t* address, mach_vm_size_t size,
                                   int flags) {
  if (!IsOwnTask(target) || Bypass()) return mach_vm_allocate(target, address, size, flags);
  static_assert(sizeof(mach_vm_address_t) == sizeof(uintptr_t), "64-bit Darwin only");
  return VmAllocate(reinterpret_cast<uintptr_t*>(address), size,
                    [&] { return mach_vm_allocate(target, address, size, flags); });
}

kern_return_t RetainMachVmDeallocate(vm_map_t target, mach_vm_address_t address,
                                     mach_vm_size_t size) {
  if (!IsOwnTask(target) || Bypass()) return mach_vm_deallocate(target, address, size);
  return VmDeallocate(static_cast<uintptr_t>(address), size,
                      [&] { return mach_vm_deallocate(target, address, size); });
}

}  // namespace
}  // namespace retain::shim

// Every symbol this file interposes, listed once. Deliberately absent:
// mach_vm_map / vm_map (libmalloc's region source, and IOKit's; a program
// rarely calls them for memory of its own — add them with care: they are
// how libmalloc grows, see "Counted once" above), dlclose (module refresh
// on Darwin goes through _dyld_register_func_for_remove_image, see
// darwin_init.cc), and the socket calls (not ported yet).
using namespace retain::shim;
RETAIN_DYLD_INTERPOSE(RetainMalloc, malloc);
RETAIN_DYLD_INTERPOSE(RetainFree, free);
RETAIN_DYLD_INTERPOSE(RetainCalloc, calloc);
RETAIN_DYLD_INTERPOSE(RetainRealloc, realloc);
RETAIN_DYLD_INTERPOSE(RetainReallocf, reallocf);
RETAIN_DYLD_INTERPOSE(RetainPosixMemalign, posix_memalign);
RETAIN_DYLD_INTERPOSE(RetainAlignedAlloc, aligned_alloc);
RETAIN_DYLD_INTERPOSE(RetainValloc, valloc);
RETAIN_DYLD_INTERPOSE(RetainZoneMalloc, malloc_zone_malloc);
RETAIN_DYLD_INTERPOSE(RetainZoneCalloc, malloc_zone_calloc);
RETAIN_DYLD_INTERPOSE(RetainZoneValloc, malloc_zone_valloc);
RETAIN_DYLD_INTERPOSE(RetainZoneMemalign, malloc_zone_memalign);
RETAIN_DYLD_INTERPOSE(RetainZoneRealloc, malloc_zone_realloc);
RETAIN_DYLD_INTERPOSE(RetainZoneFree, malloc_zone_free);
RETAIN_DYLD_INTERPOSE(RetainMmap, mmap);
RETAIN_DYLD_INTERPOSE(RetainMunmap, munmap);
RETAIN_DYLD_INTERPOSE(RetainVmAllocate, vm_allocate);
RETAIN_DYLD_INTERPOSE(RetainVmDeallocate, vm_deallocate);
RETAIN_DYLD_INTERPOSE(RetainMachVmAllocate, mach_vm_allocate);
RETAIN_DYLD_INTERPOSE(RetainMachVmDeallocate, mach_vm_deallocate);
