// hook_table_darwin: RETAIN_FOR_EACH_HOOK for the Darwin build (included by
// base/hook_table.h under __APPLE__ only; never compiled yet, see
// docs/macos-metal.md).
//
// On Linux the hooks preempt libc's symbols and reach the originals through
// g_real (dlsym(RTLD_NEXT)). On Darwin they are dyld interposing tuples
// (hooks/darwin/darwin_hooks.cc): dyld rebinds every other image's imports to
// the replacement but leaves the interposing image's own imports alone, so
// a replacement calls the original simply by calling `malloc`. g_real is
// then only what the shared code reaches through it:
//   - malloc, free: ResolveRealFunctions() requires them (its "the real
//     allocator is known" test), harmless here;
//   - read, write, close: the control endpoint (net/control_server.cc).
// net/control_server.cc also uses g_real.accept4, which Darwin lacks: porting
// it (accept + fcntl(FD_CLOEXEC)) is listed in docs/macos-metal.md.
#ifndef RETAIN_SHIM_SRC_BASE_HOOK_TABLE_DARWIN_H_
#define RETAIN_SHIM_SRC_BASE_HOOK_TABLE_DARWIN_H_

#if !defined(__APPLE__)
#error "base/hook_table_darwin.h is for the Darwin build only"
#endif

#define RETAIN_FOR_EACH_HOOK(X) \
  X(malloc)                     \
  X(free)                       \
  X(read)                       \
  X(write)                      \
  X(close)

#endif  // RETAIN_SHIM_SRC_BASE_HOOK_TABLE_DARWIN_H_
