// stack_capture: see unwind/stack_capture.h.
#include "unwind/stack_capture.h"

#include <dlfcn.h>
#include <sched.h>
#include <time.h>

#include <atomic>

#include "base/config.h"
#include "base/real_dlsym.h"
#include "base/syscall_filter.h"
#include "base/thread_state.h"
#include "unwind/cfi_unwinder.h"
#include "unwind/go_runtime.h"
#include "unwind/libunwind_isolation.h"
#include "unwind/module_table.h"
#include "unwind/stack_bounds.h"
#include "unwind/stack_hash.h"
#include "unwind/stack_table.h"

namespace retain::shim {
namespace {

// libunwind's local-only entry points carry an architecture prefix.
#if defined(__x86_64__)
#define RETAIN_UNW_PREFIX "_ULx86_64_"
#elif defined(__aarch64__)
#define RETAIN_UNW_PREFIX "_ULaarch64_"
#else
#define RETAIN_UNW_PREFIX "_UL"
#endif

using BacktraceFn = int (*)(void**, int);
using SetCachingPolicyFn = int (*)(void*, int);
constexpr int kUnwCachePerThread = 2;  // UNW_CACHE_PER_THREAD

BacktraceFn g_unw_backtrace;

// Threads inside libunwind now, and forks being prepared (UnwinderLockForFork).
std::atomic<int> g_in_libunwind;
std::atomic<int> g_forks_pending;

// unw_backtrace, or -1 while a fork is being prepared (stack_capture.h).
int LibunwindBacktrace(uintptr_t* frames, int max) {
  g_in_libunwind.fetch_add(1, std::memory_order_seq_cst);
  if (g_forks_pending.load(std::memory_order_seq_cst) != 0) {
    g_in_libunwind.fetch_sub(1, std::memory_order_release);
    return -1;
  }
  g_thread.in_libunwind = 1;
  const int count = g_unw_backtrace(reinterpret_cast<void**>(frames), max);
  g_thread.in_libunwind = 0;
  g_in_libunwind.fetch_sub(1, std::memory_order_release);
  return count;
}

// How long a fork waits for the threads inside libunwind: they take
// microseconds, but one may wait for what the forking thread holds (the
// loader's lock, in a fork from a library's constructor). Past this the
// fork goes on as it did before it waited.
constexpr int64_t kForkWaitNs = 100 * 1000 * 1000;

int64_t MonotonicNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// libgcc's unwinder, for the allocations made before the constructor loads
// libunwind (other libraries' constructors, libstdc++'s emergency exception
// pool). Declared here rather than through <unwind.h>: libunwind-dev ships a
// header of the same name.
using UnwindTraceFn = int (*)(void* context, void* argument);
using UnwindBacktraceFn = int (*)(UnwindTraceFn, void*);
using UnwindGetIpFn = uintptr_t (*)(void* context);
UnwindBacktraceFn g_early_backtrace;
UnwindGetIpFn g_early_get_ip;
constexpr int kUrcNoReason = 0;
constexpr int kUrcEndOfStack = 5;

struct EarlyTrace {
  uintptr_t* frames;
  int max;
  int count;
};

int CollectEarlyFrame(void* context, void* argument) {
  auto* trace = static_cast<EarlyTrace*>(argument);
  if (trace->count == trace->max) return kUrcEndOfStack;
  uintptr_t ip = g_early_get_ip(context);
  if (ip == 0) return kUrcEndOfStack;
  trace->frames[trace->count++] = ip;
  return kUrcNoReason;
}
std::atomic<uint64_t> g_unwind_failures;
std::atomic<uint64_t> g_fp_fallbacks;
std::atomic<uint64_t> g_cfi_fallbacks;

// Frames captured beyond the kept depth: room for the shim's own frames and
// one more to know the stack was cut.
constexpr int kCaptureSlack = 12;

// A thread whose bounds could not be read (the maps unreadable just then: no
// descriptor free, say) or fit no rule of unwind/stack_bounds.h (no
// descriptor of its own) tries again at its next few captures before its
// stacks go to libunwind for good.
constexpr uint32_t kStackBoundsTries = 4;

__attribute__((noinline, cold)) void ReadStackBounds() {
  const StackBounds bounds = ReadThreadStackBounds();
  if (bounds.high == 0) {
    // 0: read again next time; 1: unknown (frame-pointer and CFI walks are
    // refused, libunwind takes the stacks).
    if (++g_thread.stack_bounds_tries >= kStackBoundsTries) g_thread.stack_high = 1;
    return;
  }
  g_thread.stack_low = bounds.low;
  g_thread.stack_high = bounds.high;
}

inline void EnsureStackBounds() {
  if (__builtin_expect(g_thread.stack_high == 0, 0)) ReadStackBounds();
}

// Walks saved frame pointers from this function's frame. Returns the frame
// count, or -1 when the walk cannot be trusted (libunwind must be used).
__attribute__((noinline)) int WalkFramePointers(uintptr_t* frames, int max) {
  EnsureStackBounds();
  auto fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const uintptr_t low = g_thread.stack_low;
  const uintptr_t high = g_thread.stack_high;
  if (fp < low || fp + 16 > high) return -1;  // e.g. a signal handler's alternate stack
  int count = 0;
  bool in_shim = true;
  while (count < max) {
    auto* frame = reinterpret_cast<const uintptr_t*>(fp);
    uintptr_t next = frame[0];
    uintptr_t ret = frame[1];
    CodeKind kind = ClassifyAddress(ret);
    if (kind == CodeKind::kUnknown) {
      // Not code: the previous frame did not keep a frame pointer. Fine if
      // that frame was a runtime's thread or process entry, else broken.
      if (count > 0 && ClassifyAddress(frames[count - 1]) == CodeKind::kNoFramePointers) break;
      TryRefreshModules();
      return -1;
    }
    bool ours = ret >= ShimCodeBegin() && ret < ShimCodeEnd();
    if (in_shim && !ours) {
      in_shim = false;
      // The allocation's caller keeps no frame pointer (libstdc++'s operator
      // new, strdup in libc): its own caller would be skipped silently.
      if (kind == CodeKind::kNoFramePointers) return -1;
    }
    frames[count++] = ret;
    if (next == 0) break;                           // outermost frame
    if (kind == CodeKind::kNoFramePointers) break;  // a runtime's entry frame: chain ends here
    if (next <= fp || next + 16 > high || (next & 7) != 0) return -1;
    fp = next;
  }
  return count;
}

// The frame in the rbp chain from `fp` (the shim's own frames all keep
// frame pointers) whose return address is the first outside the shim: the
// hook's, whose caller the walks start from. Every frame read lies in
// [low, high); null when the chain breaks or the shim's range is not known
// yet.
inline const uintptr_t* HookFrameFrom(uintptr_t fp, uintptr_t low, uintptr_t high) {
  const uintptr_t shim_begin = ShimCodeBegin();
  const uintptr_t shim_end = ShimCodeEnd();
  if (shim_begin == shim_end) return nullptr;
  for (int i = 0; i < 64; ++i) {  // the shim never nests that deep: a broken chain
    if (fp < low || fp > high - 16 || (fp & 7) != 0) return nullptr;
    const auto* frame = reinterpret_cast<const uintptr_t*>(fp);
    if (frame[1] < shim_begin || frame[1] >= shim_end) return frame;
    if (frame[0] <= fp) return nullptr;
    fp = frame[0];
  }
  return nullptr;
}

// The CFI unwinder from the hook's caller on: the shim's own frames all keep
// frame pointers (it is built with -fno-omit-frame-pointer), so they are
// passed by their rbp chain up to the first return address outside the shim,
// which gives the registers at the hook's call site. The chain is taken up
// from the hook's own frame when the guard noted it (g_thread.hook_frame, an
// ancestor of this frame while the hook runs), which skips the recorder's
// frames in between. Returns the frame count (no shim frames in it), or -1
// when another unwinder must take this stack.
int CaptureByCfi(uintptr_t* frames, int max, CfiStackHash* hash = nullptr) {
  EnsureStackBounds();
  const uintptr_t low = g_thread.stack_low;
  const uintptr_t high = g_thread.stack_high;
  if (high <= 1) return -1;  // not known (yet): libunwind needs no bounds
  auto fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (const uintptr_t hook_frame = g_thread.hook_frame; hook_frame > fp) fp = hook_frame;
  const uintptr_t* frame = HookFrameFrom(fp, low, high);
  if (frame == nullptr) return -1;  // e.g. a sigaltstack
  if (hash != nullptr) return CfiUnwindLazily(CallerOfFrame(frame), low, high, frames, max, hash);
  return CfiUnwind(CallerOfFrame(frame), low, high, frames, max);
}

int CaptureHookCaller(uintptr_t* frames, int max);

// RETAIN_UNWIND=libunwind in a Go program: libunwind's stack ended in Go
// code (Go has no .eh_frame; libunwind stops at asmcgocall). The CFI walker
// knows how to go on there (unwind/go_stack.h): its stack is taken when it
// can walk this one. Costs a second walk, only on such stacks.
__attribute__((noinline, cold)) int CaptureByLibunwindInGo(uintptr_t* frames, int max,
                                                           int cfi_max) {
  const int count = LibunwindBacktrace(frames, max);
  if (count < 0) return CaptureHookCaller(frames, max);
  if (count == 0 || FindGoModule(frames[count - 1]) == nullptr) return count;
  uintptr_t walked[kMaxDepth + kCaptureSlack];
  const int walked_count = CaptureByCfi(walked, cfi_max);
  if (walked_count <= 0) return count;
  for (int i = 0; i < walked_count; ++i) frames[i] = walked[i];
  return walked_count;
}

// In a sandbox libunwind cannot check its reads (base/syscall_filter.h):
// the stack keeps the hook's caller alone, found through the shim's own
// frames, which keep frame pointers and lie just above this one on the
// stack the thread runs on.
__attribute__((noinline, cold)) int CaptureHookCaller(uintptr_t* frames, int max) {
  if (max <= 0) return 0;
  const auto fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const uintptr_t* frame = HookFrameFrom(fp, fp, fp + 256 * 1024);  // the shim's frames are near
  if (frame == nullptr) return 0;
  frames[0] = frame[1];
  return 1;
}

// `hash`: see CfiUnwindLazily (known only for a CFI walk, whose frames may
// then be pending).
int CaptureRaw(uintptr_t* frames, int max, CfiStackHash* hash) {
  const UnwindMode mode = GetConfig().unwind;
  // CFI walks hold no shim frames: depth + 1 of them show a truncation.
  const int cfi_max = max - kCaptureSlack + 1;
  if (mode == UnwindMode::kCfi) {
    int count = CaptureByCfi(frames, cfi_max, hash);
    if (count >= 0) return count;
    g_cfi_fallbacks.fetch_add(1, std::memory_order_relaxed);
  }
  if (g_unw_backtrace == nullptr && g_early_backtrace != nullptr) {
    EarlyTrace trace{frames, max, 0};
    g_early_backtrace(CollectEarlyFrame, &trace);
    return trace.count;
  }
  if (mode == UnwindMode::kFramePointer || g_unw_backtrace == nullptr) {
    int count = WalkFramePointers(frames, max);
    if (count >= 0) return count;
    if (mode == UnwindMode::kFramePointer) {
      // Cheaper than libunwind for the usual cause, a runtime built
      // without frame pointers (libstdc++'s operator new, libc's strdup).
      g_fp_fallbacks.fetch_add(1, std::memory_order_relaxed);
      count = CaptureByCfi(frames, cfi_max);
      if (count >= 0) return count;
      g_cfi_fallbacks.fetch_add(1, std::memory_order_relaxed);
    }
    if (g_unw_backtrace == nullptr) return 0;
  }
  if (AvoidProcessVmReadv()) return CaptureHookCaller(frames, max);
  // A Go program's libunwind stacks may end in Go code: out of line, so
  // that other programs pay one predictable branch.
  if (__builtin_expect(GoModulesRegistered(), 0) && mode == UnwindMode::kLibunwind) {
    return CaptureByLibunwindInGo(frames, max, cfi_max);
  }
  const int count = LibunwindBacktrace(frames, max);
  return count >= 0 ? count : CaptureHookCaller(frames, max);
}

}  // namespace

bool LoadUnwinder() {
  // RTLD_LOCAL keeps libunwind's exported backtrace and _Unwind_* out of the
  // global scope. RTLD_NOW: no lazy binding later, inside hooks.
  void* handle = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) return false;
  // Before its first use: that is when it would open its pipe.
  if (!IsolateLibunwind(handle)) return false;
  auto backtrace = reinterpret_cast<BacktraceFn>(ShimDlsym(handle, "unw_backtrace"));
  auto set_caching = reinterpret_cast<SetCachingPolicyFn>(
      ShimDlsym(handle, RETAIN_UNW_PREFIX "set_caching_policy"));
  void* address_space = ShimDlsym(handle, RETAIN_UNW_PREFIX "local_addr_space");
  if (backtrace == nullptr) return false;
  if (set_caching != nullptr && address_space != nullptr) {
    // Per-thread caches: no lock shared between allocating threads.
    set_caching(*static_cast<void**>(address_space), kUnwCachePerThread);
  }
  g_unw_backtrace = backtrace;
  return true;
}

void LoadEarlyUnwinder() {
  auto backtrace =
      reinterpret_cast<UnwindBacktraceFn>(ShimDlsym(RTLD_DEFAULT, "_Unwind_Backtrace"));
  auto get_ip = reinterpret_cast<UnwindGetIpFn>(ShimDlsym(RTLD_DEFAULT, "_Unwind_GetIP"));
  if (backtrace != nullptr && get_ip != nullptr) {
    g_early_get_ip = get_ip;
    g_early_backtrace = backtrace;
  }
}

__attribute__((noinline)) uint32_t CaptureStackId() {
  uintptr_t frames[kMaxDepth + kCaptureSlack];
  const int depth = GetConfig().depth;
  CfiStackHash hash{false, false, 0, nullptr, 0};
  int count = CaptureRaw(frames, depth + kCaptureSlack, &hash);
  const uintptr_t begin = ShimCodeBegin();
  const uintptr_t end = ShimCodeEnd();
  if (hash.pending_ips != nullptr) {
    // A CFI walk that reused the thread's previous one left its frames in
    // the walker's memo: a stack seen before is found by its hash or key
    // alone, without them. (A CFI walk starts at the hook's caller: no shim
    // frame to drop, unless the caller is the shim's own code.)
    const uintptr_t first = CfiFirstPendingFrame(hash);
    if (first < begin || first >= end) {
      if (hash.known && count <= depth) {
        if (const uint32_t id = FindStackIdByHash(hash.value); id != 0) return id;
      } else if (hash.cut_key && count > depth) {
        // As InternStackKeyed: the thread's last stack by its key, else the
        // cut stack's hash (from the memo) in the cache.
        if (const uint32_t id = FindStackIdByKey(hash.value); id != 0) return id;
        const uint64_t cut_hash =
            TruncatedStackHashOf([&hash](int i) { return CfiPendingFrame(hash, i); }, depth);
        if (const uint32_t id = FindStackIdByHash(cut_hash); id != 0) {
          NoteStackKey(hash.value);
          return id;
        }
      }
    }
    CfiWritePendingFrames(hash, frames, count);
  }
  // Drop the shim's own frames (hook, recorder, capture).
  int skip = 0;
  while (skip < count && frames[skip] >= begin && frames[skip] < end) ++skip;
  int kept = count - skip;
  if (kept <= 0) {
    g_unwind_failures.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  bool truncated = kept > depth;
  if (truncated) kept = depth;
  // A CFI walk that reused the thread's previous one hashed only its new
  // frames (unwind/stack_hash.h), or, cut at the depth limit (the walk's
  // limit is depth + 1 frames: the last one only tells the cut), has a key
  // for the caches instead. It holds no shim frames.
  if (hash.known && skip == 0 && !truncated)
    return InternStackHashed(frames, kept, false, hash.value);
  if (hash.cut_key && skip == 0 && truncated)
    return InternStackKeyed(frames, kept, true, hash.value);
  return InternStack(frames + skip, kept, truncated);
}

void UnwinderLockForFork() {
  g_forks_pending.fetch_add(1, std::memory_order_seq_cst);
  // This thread itself inside libunwind: a handler that interrupted it
  // forks. Nothing to wait for that would ever come.
  const int own = g_thread.in_libunwind != 0 ? 1 : 0;
  const int64_t deadline = MonotonicNs() + kForkWaitNs;
  while (g_in_libunwind.load(std::memory_order_seq_cst) > own && MonotonicNs() < deadline) {
    sched_yield();
  }
}

void UnwinderUnlockForFork() { g_forks_pending.fetch_sub(1, std::memory_order_seq_cst); }

void UnwinderResetInChild() {
  g_in_libunwind.store(0, std::memory_order_relaxed);
  g_forks_pending.store(0, std::memory_order_relaxed);
}

bool StackRoomAtLeast(size_t bytes) {
  EnsureStackBounds();
  const uintptr_t low = g_thread.stack_low;
  const uintptr_t high = g_thread.stack_high;
  const auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return high > 1 && sp >= low && sp < high && sp - low >= bytes;
}

uint64_t UnwindFailures() { return g_unwind_failures.load(std::memory_order_relaxed); }
uint64_t FramePointerFallbacks() { return g_fp_fallbacks.load(std::memory_order_relaxed); }
uint64_t CfiFallbacks() { return g_cfi_fallbacks.load(std::memory_order_relaxed); }

}  // namespace retain::shim
