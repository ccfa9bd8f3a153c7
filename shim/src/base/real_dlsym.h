// real_dlsym: the real dlsym, for the shim's own look-ups.
//
// libretain.so exports a `dlsym` hook (hooks/dlsym_hook.cc): every call to
// dlsym made inside the shim would reach that hook too (the shim is not
// linked -Bsymbolic). ShimDlsym() calls glibc's dlsym directly instead, so
// the shim's look-ups are never wrapped and never pass through the hook.
//
// The real dlsym is found with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34")
// (glibc 2.34 moved dlsym into libc.so.6), falling back to "GLIBC_2.2.5"
// (older glibc, libdl.so.2). It is resolved on first use, with the thread
// marked `resolving`, so any allocation dlvsym makes is served from the
// bootstrap buffer and never re-enters the shim's initialisation.
//
// Thread-safe, allocation-free after the first call, never blocks.
// Callable before the shim is initialised.
#ifndef RETAIN_SHIM_SRC_BASE_REAL_DLSYM_H_
#define RETAIN_SHIM_SRC_BASE_REAL_DLSYM_H_

namespace retain::shim {

using DlsymFn = void* (*)(void* handle, const char* name);

// glibc's dlsym (the next definition after libretain.so), or nullptr if it
// cannot be found (never on glibc).
DlsymFn RealDlsym();

// dlsym(handle, name) through the real dlsym. Its caller, for RTLD_NEXT, is
// libretain.so: ShimDlsym(RTLD_NEXT, name) is the definition after the shim.
// Returns nullptr (with dlerror set by glibc) when not found.
void* ShimDlsym(void* handle, const char* name);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_REAL_DLSYM_H_
