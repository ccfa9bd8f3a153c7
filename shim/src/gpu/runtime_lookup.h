// runtime_lookup: finds a GPU runtime's real function, whichever way the
// program loaded the runtime.
//
// dlsym(RTLD_NEXT) only sees libraries in the global scope. llama.cpp's
// backends (and Python extensions) pull the HIP or CUDA runtime in through a
// library opened RTLD_LOCAL, where RTLD_NEXT cannot see it. So when
// RTLD_NEXT fails, every loaded object whose file name starts with one of
// the given prefixes ("libamdhip64.so" matches .so.5 and .so.6 alike) is
// opened again with RTLD_NOLOAD — a new handle to the already-loaded copy,
// never a new load — and asked for the symbol.
//
// A failed lookup is never cached: the runtime may be loaded later.
#ifndef RETAIN_SHIM_SRC_GPU_RUNTIME_LOOKUP_H_
#define RETAIN_SHIM_SRC_GPU_RUNTIME_LOOKUP_H_

#include <atomic>

namespace retain::shim {

// The definition of `name` after libretain.so: RTLD_NEXT, then the loaded
// objects whose base name starts with one of `prefixes` (a null-terminated
// array). Never loads anything. Runs the loader with the re-entry guard
// held, so its allocations are not recorded. nullptr when not found.
void* FindRuntimeFunction(const char* const* prefixes, const char* name);

// Caches a found function in `slot`; looks it up again while it is null.
template <typename Fn>
Fn ResolveRuntimeFunction(std::atomic<Fn>& slot, const char* const* prefixes, const char* name) {
  Fn fn = slot.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  fn = reinterpret_cast<Fn>(FindRuntimeFunction(prefixes, name));
  if (fn != nullptr) slot.store(fn, std::memory_order_release);
  return fn;
}

// Bumped after every successful dlclose: a runtime's functions found before
// may be gone (unloaded, or loaded again at another address). Tables of
// found functions remember the generation they were filled in and forget
// them when it changed.
uint32_t RuntimeGeneration();
void NoteUnload();

// Whether `address` lies in libretain.so itself (a lookup that found the
// shim's own hook must not be used as the real function).
bool IsInShim(const void* address);

// True when this copy of the shim is the process's: the one in the global
// scope (preloaded, or linked), whose hooks and API the program reaches —
// not a copy dlopen()ed RTLD_LOCAL (by the Vulkan loader, as a layer, in a
// process that inherited the layer variables but not LD_PRELOAD), nor
// another build loaded beside the preloaded one. Such a copy stays inert:
// its constructor starts nothing and it writes no snapshot.
bool ThisCopyIsTheProcessShim();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_GPU_RUNTIME_LOOKUP_H_
