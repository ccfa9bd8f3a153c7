// import_redirect: points one loaded object's imports of named functions at
// other functions, by rewriting that object's own GOT slots (the PLT's jump
// slots and GLOB_DAT entries). Nothing else in the process changes: the
// symbol stays what it was for every other object.
//
// Used on the shim's private libunwind only (unwind/libunwind_isolation.h), at load
// time, before anything calls into it. Not thread-safe against calls into the
// object being patched; allocates nothing; safe to call from the shim's
// constructor.
#ifndef RETAIN_SHIM_SRC_UNWIND_IMPORT_REDIRECT_H_
#define RETAIN_SHIM_SRC_UNWIND_IMPORT_REDIRECT_H_

#include <cstddef>

namespace retain::shim {

struct ImportRedirect {
  const char* name;   // the imported symbol, e.g. "pipe2"
  void* replacement;  // what the object calls from now on
  void** original;    // out: what its slot held before (null if not imported)
  int slots;          // out: how many slots were rewritten
};

// Rewrites the GOT slots of the object `handle` (from dlopen) that import
// each redirect's name. Slots in the object's RELRO segment are made
// writable for the write and read-only again after. Returns false when the
// object's dynamic section cannot be read or a slot cannot be written; the
// redirects already done stay done (each is whole: one pointer store).
bool RedirectImports(void* handle, ImportRedirect* redirects, size_t count);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_IMPORT_REDIRECT_H_
