// module_table: the loaded objects (executable, shared libraries, vdso) with
// what offline symbolization needs: path, GNU build-id, load bias and
// executable segments.
//
// Filled from dl_iterate_phdr. Modules are never dropped: one that was
// unloaded stays, marked, so stacks captured while it was loaded still
// resolve. Refreshed when a snapshot is written and before every dlclose.
// Also publishes a lock-free table of executable ranges for the
// frame-pointer walker (which needs to know whether a return address is
// code, and whether that code keeps frame pointers).
// A Go module (Go's build-id note) seen for the first time is registered
// with unwind/go_runtime.h after the refresh, for walks that cross cgo.
//
// Thread-safe. RefreshModules takes the loader's lock (dl_iterate_phdr): do
// not call it from a signal handler. Never allocates from the host heap.
#ifndef RETAIN_SHIM_SRC_UNWIND_MODULE_TABLE_H_
#define RETAIN_SHIM_SRC_UNWIND_MODULE_TABLE_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

struct ModuleSegment {
  uintptr_t start;
  uintptr_t end;
  uint64_t file_offset;
};

struct ModuleEntry {
  uint32_t id;  // 1-based, in order of discovery
  const char* path;
  uint8_t build_id[64];
  uint32_t build_id_size;
  uintptr_t load_bias;
  uint32_t segment_count;
  ModuleSegment segments[8];
  bool unloaded;
};

// Reads the loaded objects and adds new ones; marks vanished ones unloaded.
void RefreshModules();
// Same, from a hook: returns at once if another thread is refreshing or a
// refresh ran less than 100 ms ago (an unknown address may be JIT code or a
// broken frame chain, not a new library: never refresh per allocation).
void TryRefreshModules();

// Calls visit(const ModuleEntry&) for every module ever seen, under the
// table lock (visit must not call back into the table).
template <typename Visit>
void ForEachModule(Visit visit);

// The executable's build-id (empty until the first refresh).
const ModuleEntry* MainModule();

// Frame-pointer walker support: classifies a return address.
enum class CodeKind {
  kUnknown,         // not inside any known executable segment
  kFramePointers,   // code assumed to keep frame pointers
  kNoFramePointers  // a runtime known to be built without them (libc, libstdc++, ...)
};
CodeKind ClassifyAddress(uintptr_t address);

// Bounds of this shim's own code, to drop its frames from stacks.
uintptr_t ShimCodeBegin();
uintptr_t ShimCodeEnd();

// fork(): see base/arena.h.
void ModuleTableLockForFork();
void ModuleTableUnlockForFork();
void ModuleTableResetInChild();

// Implementation detail of ForEachModule.
namespace module_table_internal {
void Lock();
void Unlock();
uint32_t Count();
const ModuleEntry* Get(uint32_t index);
}  // namespace module_table_internal

template <typename Visit>
void ForEachModule(Visit visit) {
  module_table_internal::Lock();
  uint32_t count = module_table_internal::Count();
  for (uint32_t i = 0; i < count; ++i) visit(*module_table_internal::Get(i));
  module_table_internal::Unlock();
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_MODULE_TABLE_H_
