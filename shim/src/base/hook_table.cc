// hook_table: resolution of the real functions and the bootstrap allocator.
#include "base/hook_table.h"

#include <errno.h>
#include <string.h>

#include "base/large_static.h"
#include "base/real_dlsym.h"
#include "base/spin_lock.h"
#include "base/thread_state.h"

namespace retain::shim {

RealFunctions g_real;
std::atomic<bool> g_real_ready;

namespace {

// dlsym's own needs (an error-message buffer) are small; 256 KiB leaves room
// for early allocations on a thread that resolves.
constexpr size_t kBootstrapSize = 256 * 1024;
// The private heap follows the bootstrap buffer in the same array. glibc
// 2.36's fopencookie takes one block of about 500 bytes (its FILE); 16 KiB
// leaves room for a libc that takes more.
constexpr size_t kPrivateHeapSize = 16 * 1024;
RETAIN_LARGE_STATIC alignas(64) char g_bootstrap[kBootstrapSize + kPrivateHeapSize];
std::atomic<size_t> g_bootstrap_used;
SpinLock g_resolve_lock;

char* const g_private_heap = g_bootstrap + kBootstrapSize;
std::atomic<bool> g_private_owned;
// The owner's bump offset, the blocks not yet released (atomic: the next
// scope reads it, perhaps on another thread), and the high-water mark.
size_t g_private_used;
std::atomic<uint32_t> g_private_live;
size_t g_private_peak;

struct BootstrapHeader {
  size_t size;
  size_t padding;
};

}  // namespace

void* BootstrapAllocate(size_t size, size_t alignment) {
  if (alignment < alignof(BootstrapHeader)) alignment = alignof(BootstrapHeader);
  // Reserve room for a header right before the aligned block.
  size_t needed = size + alignment + sizeof(BootstrapHeader);
  size_t offset = g_bootstrap_used.fetch_add(needed, std::memory_order_relaxed);
  if (offset + needed > kBootstrapSize) return nullptr;
  auto base = reinterpret_cast<uintptr_t>(g_bootstrap + offset) + sizeof(BootstrapHeader);
  uintptr_t aligned = (base + alignment - 1) & ~(uintptr_t{alignment} - 1);
  reinterpret_cast<BootstrapHeader*>(aligned)[-1].size = size;
  return reinterpret_cast<void*>(aligned);  // static storage: already zero
}

bool IsBootstrapMemory(const void* pointer) {
  auto* p = static_cast<const char*>(pointer);
  return p >= g_bootstrap && p < g_bootstrap + kBootstrapSize + kPrivateHeapSize;
}

void ReleaseBootstrap(void* pointer) {
  if (static_cast<char*>(pointer) < g_private_heap) return;  // the bootstrap buffer's
  // The last block out rewinds the heap. Blocks are released by the owner's
  // thread, inside its scope (stdio frees its FILE in fclose), so the offset
  // is never rewound under an allocation; the count is atomic for the next
  // scope's check, which may run on another thread.
  if (g_private_live.fetch_sub(1, std::memory_order_acq_rel) == 1) g_private_used = 0;
}

PrivateHeapScope::PrivateHeapScope() : ok_(false) {
  if (g_private_owned.exchange(true, std::memory_order_acquire)) return;
  // A block of an earlier scope still out: its owner kept it (a FILE never
  // closed), so the heap cannot start over; refuse rather than grow.
  if (g_private_live.load(std::memory_order_acquire) != 0) {
    g_private_owned.store(false, std::memory_order_release);
    return;
  }
  g_private_used = 0;
  ok_ = true;
  ++g_thread.private_heap;
}

PrivateHeapScope::~PrivateHeapScope() {
  if (!ok_) return;
  --g_thread.private_heap;
  g_private_owned.store(false, std::memory_order_release);
}

void* PrivateHeapAllocate(size_t size, size_t alignment) {
  if (alignment < alignof(BootstrapHeader)) alignment = alignof(BootstrapHeader);
  const auto start = reinterpret_cast<uintptr_t>(g_private_heap);
  if (size > kPrivateHeapSize || alignment > kPrivateHeapSize) {
    errno = ENOMEM;
    return nullptr;
  }
  const uintptr_t at = (start + g_private_used + sizeof(BootstrapHeader) + alignment - 1) &
                       ~(uintptr_t{alignment} - 1);
  if (at - start + size > kPrivateHeapSize) {
    errno = ENOMEM;
    return nullptr;
  }
  g_private_used = at - start + size;
  if (g_private_used > g_private_peak) g_private_peak = g_private_used;
  g_private_live.fetch_add(1, std::memory_order_relaxed);
  auto* block = reinterpret_cast<char*>(at);
  reinterpret_cast<BootstrapHeader*>(block)[-1].size = size;
  memset(block, 0, size);  // calloc's, and a rewound heap holds the last call's bytes
  return block;
}

size_t PrivateHeapBytesInUse() {
  return g_private_live.load(std::memory_order_acquire) == 0 ? 0 : g_private_used;
}

size_t PrivateHeapPeakBytes() { return g_private_peak; }

size_t BootstrapAllocationSize(const void* pointer) {
  return static_cast<const BootstrapHeader*>(pointer)[-1].size;
}

uint64_t BootstrapBytes() {
  size_t used = g_bootstrap_used.load(std::memory_order_relaxed);
  return used < kBootstrapSize ? used : kBootstrapSize;
}

bool ResolveRealFunctions() {
  if (RealFunctionsReady()) return true;
  if (g_thread.resolving) return false;  // dlsym re-entered us: bootstrap serves it
  SpinLockHolder hold(g_resolve_lock);
  if (RealFunctionsReady()) return true;
  ++g_thread.resolving;
  RealFunctions real;
#define RETAIN_RESOLVE(name) \
  real.name = reinterpret_cast<decltype(&::name)>(ShimDlsym(RTLD_NEXT, #name));
  RETAIN_FOR_EACH_HOOK(RETAIN_RESOLVE)
#undef RETAIN_RESOLVE
  --g_thread.resolving;
  if (real.malloc == nullptr || real.free == nullptr) return false;
  g_real = real;
  g_real_ready.store(true, std::memory_order_release);
  return true;
}

void UnresolvedHooks(char* out, size_t size) {
  out[0] = '\0';
  // glibc has close_range and closefrom since 2.34; where it has not, their
  // hooks make the system call (hooks/fd_hooks.cc) and nothing is lost.
#define RETAIN_CHECK(name)                                                         \
  if (g_real.name == nullptr && strcmp(#name, "close_range") != 0 &&               \
      strcmp(#name, "closefrom") != 0 && strlen(out) + sizeof(#name) + 2 < size) { \
    if (out[0] != '\0') strcat(out, ",");                                          \
    strcat(out, #name);                                                            \
  }
  RETAIN_FOR_EACH_HOOK(RETAIN_CHECK)
#undef RETAIN_CHECK
}

}  // namespace retain::shim
