// malloc_provider: whether the process's malloc is the shim's.
//
// The dynamic linker binds every call to malloc to the first definition in
// its search order: the executable, then LD_PRELOAD's libraries in their
// order, then the rest. When another allocator comes first
// (LD_PRELOAD="libjemalloc.so.2 libretain.so", or an executable that
// defines malloc itself), the shim's malloc hooks never run: the heap is not
// recorded at all, while mappings and GPU memory still are. Said once on
// stderr at start-up (a configuration error: the fix is the order) and in
// every snapshot's header (Header.foreign_malloc_path), so that retain-diff
// says it above its figures instead of showing a heap that looks empty.
#ifndef RETAIN_SHIM_SRC_RECORD_MALLOC_PROVIDER_H_
#define RETAIN_SHIM_SRC_RECORD_MALLOC_PROVIDER_H_

namespace retain::shim {

// At start-up, in the constructor of the process's shim, once the shim's
// own code range is known (RefreshModules).
void CheckMallocProvider();

// The path of the object that defines the malloc the process calls, when it
// is not the shim's; "" when it is (or before CheckMallocProvider).
const char* ForeignMallocPath();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_MALLOC_PROVIDER_H_
