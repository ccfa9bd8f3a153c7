// large_static: RETAIN_LARGE_STATIC, for the shim's large zero-filled
// statics (tables and buffers of 4 KiB or more).
//
// The shim's .bss is 5.4 MiB, of which its ~200 small globals (flags, locks,
// counters: 17 KiB together) are a few. Where the linker interleaves them
// with the large arrays, each small one a process touches costs a page of
// its own: a short-lived process under the shim faulted in ~25 such pages,
// and a page fault is the dearest thing a process start does (12 us each on
// the development VM). Marked large, an array goes to .lbss, which the
// linker places after .bss: the small globals share a handful of pages.
// Nothing else changes (the memory is zero-filled as before, and only the
// pages touched are ever backed).
//
// x86-64 ELF only, where GCC and the linker know .lbss as NOBITS (a large
// data section of the x86-64 ABI); elsewhere the attribute is nothing.
#ifndef RETAIN_SHIM_SRC_BASE_LARGE_STATIC_H_
#define RETAIN_SHIM_SRC_BASE_LARGE_STATIC_H_

#if defined(__x86_64__) && defined(__ELF__)
#define RETAIN_LARGE_STATIC __attribute__((section(".lbss.retain")))
#else
#define RETAIN_LARGE_STATIC
#endif

#endif  // RETAIN_SHIM_SRC_BASE_LARGE_STATIC_H_
