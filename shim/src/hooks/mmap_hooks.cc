// mmap_hooks: the mmap family and dlclose. See record/hook_shape.h for the
// shape. The mappings table is locked across each real call so its updates
// happen in the kernel's order.
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gpu/runtime_lookup.h"
#include "record/hook_shape.h"
#include "unwind/cfi_unwinder.h"
#include "unwind/module_table.h"

using namespace retain::shim;

namespace retain::shim {
namespace {

template <typename Call>
void* Map(size_t length, int prot, int flags, int fd, Call call) {
  BusyScope scope;
  uint32_t stack_id = CaptureForRecord();  // before the lock: it may be slow
  MmapTable& table = ProgramMappings();
  table.Lock();
  void* result = call();
  if (result != MAP_FAILED) RecordMapping(result, length, prot, flags, fd, stack_id);
  table.Unlock();
  return result;
}

}  // namespace
}  // namespace retain::shim

RETAIN_EXPORT void* mmap(void* address, size_t length, int prot, int flags, int fd,
                         off_t offset) noexcept {
  if (!HookReady()) {
    return reinterpret_cast<void*>(syscall(SYS_mmap, address, length, prot, flags, fd, offset));
  }
  if (PassThrough()) return g_real.mmap(address, length, prot, flags, fd, offset);
  return Map(length, prot, flags, fd,
             [&] { return g_real.mmap(address, length, prot, flags, fd, offset); });
}

RETAIN_EXPORT void* mmap64(void* address, size_t length, int prot, int flags, int fd,
                           off64_t offset) noexcept {
  if (!HookReady()) {
    return reinterpret_cast<void*>(syscall(SYS_mmap, address, length, prot, flags, fd, offset));
  }
  if (PassThrough()) return g_real.mmap64(address, length, prot, flags, fd, offset);
  return Map(length, prot, flags, fd,
             [&] { return g_real.mmap64(address, length, prot, flags, fd, offset); });
}

RETAIN_EXPORT int munmap(void* address, size_t length) noexcept {
  if (!HookReady()) return static_cast<int>(syscall(SYS_munmap, address, length));
  if (PassThrough()) return g_real.munmap(address, length);
  BusyScope scope;
  MmapTable& table = ProgramMappings();
  table.Lock();
  int result = g_real.munmap(address, length);
  if (result == 0) RecordUnmapping(address, length);
  table.Unlock();
  return result;
}

RETAIN_EXPORT void* mremap(void* old_address, size_t old_size, size_t new_size, int flags,
                           ...) noexcept {
  void* new_address = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list args;
    va_start(args, flags);
    new_address = va_arg(args, void*);
    va_end(args);
  }
  if (!HookReady()) {
    return reinterpret_cast<void*>(
        syscall(SYS_mremap, old_address, old_size, new_size, flags, new_address));
  }
  if (PassThrough()) return g_real.mremap(old_address, old_size, new_size, flags, new_address);
  BusyScope scope;
  uint32_t stack_id = CaptureForRecord();
  MmapTable& table = ProgramMappings();
  table.Lock();
  MapRecord old;
  bool known = table.Lookup(reinterpret_cast<uintptr_t>(old_address), &old);
  void* result = g_real.mremap(old_address, old_size, new_size, flags, new_address);
  // Only a mapping the program made is followed; glibc remaps its own
  // malloc chunks through an internal call we do not see anyway.
  if (result != MAP_FAILED && known) {
    if (old_size != 0 && (flags & MREMAP_DONTUNMAP) == 0) RecordUnmapping(old_address, old_size);
    int prot = static_cast<int>(old.flags & 0xff);
    int map_flags = static_cast<int>(old.flags >> 8);
    RecordMapping(result, new_size, prot, map_flags, old.kind == Kind::kMmapFile ? 0 : -1,
                  stack_id);
  }
  table.Unlock();
  return result;
}

// Modules are re-read before the real dlclose, so a library unloaded before
// the next snapshot is still in the table to symbolize its stacks. After it,
// the CFI walker's cached rules go: another library may be loaded at the
// addresses this one held.
RETAIN_EXPORT int dlclose(void* handle) noexcept {
  if (HookReady() && g_thread.busy == 0) {
    BusyScope scope;
    RefreshModules();
  }
  const uint64_t unloads = LoaderUnloadCount();
  const int result = g_real.dlclose(handle);
  const uint64_t after = LoaderUnloadCount();
  if (after != unloads || after == ~uint64_t{0}) CfiForgetRules();
  if (result == 0) NoteUnload();
  return result;
}
