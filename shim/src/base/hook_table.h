// hook_table: every symbol libretain.so interposes, listed once.
//
// RETAIN_FOR_EACH_HOOK(X) expands X(name) per symbol. It declares the
// pointers to the real functions (typed by decltype(&::name), so the
// compiler checks each hook's signature against the system header), resolves
// them, and drives the test that every row resolves.
//
// Deliberately absent: operator new/delete (libstdc++'s reach malloc,
// aligned_alloc and free, which are hooked; interposing them too would count
// twice or need the C++ runtime in the shim) and dlopen (a wrapper would
// become the "caller" whose RUNPATH and namespace dlopen uses; modules are
// re-read at every snapshot instead).
#ifndef RETAIN_SHIM_SRC_BASE_HOOK_TABLE_H_
#define RETAIN_SHIM_SRC_BASE_HOOK_TABLE_H_

#include <dlfcn.h>
#include <fcntl.h>
#if !defined(__APPLE__)
#include <malloc.h>
#endif
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#if !defined(__APPLE__)
#include <sys/prctl.h>
#endif
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#if !defined(__APPLE__)
// glibc's _FORTIFY_SOURCE entry points (declared by its headers only when
// the including file is built with fortification): what read(), recv() and
// recvfrom() become in a fortified binary when the length is not a
// constant.
extern "C" ssize_t __read_chk(int fd, void* buffer, size_t size, size_t buffer_size);
extern "C" ssize_t __recv_chk(int fd, void* buffer, size_t size, size_t buffer_size, int flags);
extern "C" ssize_t __recvfrom_chk(int fd, void* buffer, size_t size, size_t buffer_size, int flags,
                                  struct sockaddr* address, socklen_t* length);
#endif

#if defined(__APPLE__)
// Darwin interposes with dyld tuples, not by symbol preemption, and calls the
// originals directly (hooks/darwin/darwin_hooks.cc); its list only names what
// the shared code reaches through g_real.
#include "base/hook_table_darwin.h"
#else
#define RETAIN_FOR_EACH_HOOK(X) \
  X(malloc)                     \
  X(free)                       \
  X(calloc)                     \
  X(realloc)                    \
  X(reallocarray)               \
  X(posix_memalign)             \
  X(aligned_alloc)              \
  X(memalign)                   \
  X(valloc)                     \
  X(pvalloc)                    \
  X(malloc_usable_size)         \
  X(mmap)                       \
  X(mmap64)                     \
  X(munmap)                     \
  X(mremap)                     \
  X(dlclose)                    \
  X(accept)                     \
  X(accept4)                    \
  X(read)                       \
  X(recv)                       \
  X(recvfrom)                   \
  X(recvmsg)                    \
  X(readv)                      \
  X(__read_chk)                 \
  X(__recv_chk)                 \
  X(__recvfrom_chk)             \
  X(write)                      \
  X(send)                       \
  X(sendto)                     \
  X(sendmsg)                    \
  X(writev)                     \
  X(close)                      \
  X(dup2)                       \
  X(dup3)                       \
  X(close_range)                \
  X(closefrom)                  \
  X(fcntl)                      \
  X(fcntl64)                    \
  X(pause)                      \
  X(sigsuspend)                 \
  X(sigtimedwait)               \
  X(sigwaitinfo)                \
  X(poll)                       \
  X(ppoll)                      \
  X(select)                     \
  X(pselect)                    \
  X(epoll_wait)                 \
  X(epoll_pwait)                \
  X(nanosleep)                  \
  X(clock_nanosleep)            \
  X(usleep)                     \
  X(sleep)                      \
  X(sigaction)                  \
  X(signal)                     \
  X(prctl)
#endif  // __APPLE__

namespace retain::shim {

#define RETAIN_COUNT_HOOK(name) +1
inline constexpr int kHookCount = 0 RETAIN_FOR_EACH_HOOK(RETAIN_COUNT_HOOK);
#undef RETAIN_COUNT_HOOK

struct RealFunctions {
#define RETAIN_DECLARE_REAL(name) decltype(&::name) name;
  RETAIN_FOR_EACH_HOOK(RETAIN_DECLARE_REAL)
#undef RETAIN_DECLARE_REAL
};

// The next definition of every hooked symbol after libretain.so (glibc's,
// or another allocator's if the program brings one). Valid once
// RealFunctionsReady().
extern RealFunctions g_real;

extern std::atomic<bool> g_real_ready;
inline bool RealFunctionsReady() { return g_real_ready.load(std::memory_order_acquire); }

// Resolves g_real with dlsym(RTLD_NEXT). Idempotent and thread-safe; calls
// made by dlsym itself on this thread meanwhile are served by the bootstrap
// allocator. Returns false if malloc or free could not be found.
bool ResolveRealFunctions();

// Names of hooks that did not resolve (for the hook table test), written
// into `out` comma-separated.
void UnresolvedHooks(char* out, size_t size);

// The bootstrap allocator: a static buffer for allocations made before the
// real allocator is known. Its memory is never handed to the real free.
void* BootstrapAllocate(size_t size, size_t alignment);
bool IsBootstrapMemory(const void* pointer);
size_t BootstrapAllocationSize(const void* pointer);
uint64_t BootstrapBytes();
// Gives a block of the bootstrap allocator back: a no-op for the bootstrap
// buffer (never reused), a release for the private heap (below). Any thread.
void ReleaseBootstrap(void* pointer);

// The private heap: a few KiB of static memory, beside the bootstrap buffer
// (so IsBootstrapMemory() covers it and the free hook needs no second
// check), for the allocations glibc makes on the shim's behalf inside a call
// the shim makes: the stdio stream malloc_info() writes to
// (snapshot/malloc_arenas.h). Served from the host's heap, they would be the
// first allocation of a shim thread, which makes glibc create a new arena for
// it: address space, a heap and an arena the host would not have, listed in
// the very numbers being read. A bump allocator that starts over when its
// last block is released: its memory is bounded by one call, never by how
// many calls were made. Blocks have the bootstrap allocator's header, so
// malloc_usable_size and realloc treat them as its own.
//
// One owner at a time: PrivateHeapScope takes it, or fails (another thread
// holds it, or a block of an earlier scope was never released), and while it
// is held the calling thread's malloc, calloc and realloc(nullptr, n) made
// from inside the shim (busy) are served here (hooks/malloc_hooks.cc). The
// other allocation functions still reach the real allocator: glibc's stdio
// does not call them. Never from a signal handler.
class PrivateHeapScope {
 public:
  PrivateHeapScope();
  ~PrivateHeapScope();
  PrivateHeapScope(const PrivateHeapScope&) = delete;
  PrivateHeapScope& operator=(const PrivateHeapScope&) = delete;
  // False: nothing is redirected; the caller should not make its call.
  bool ok() const { return ok_; }

 private:
  bool ok_;
};
// Zeroed, `alignment`-aligned (a power of two), or null (errno ENOMEM) when
// the private heap is full. For the hooks, on the owner's thread.
void* PrivateHeapAllocate(size_t size, size_t alignment);
// For the tests: bytes in use now and the most ever in use at once.
size_t PrivateHeapBytesInUse();
size_t PrivateHeapPeakBytes();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_HOOK_TABLE_H_
