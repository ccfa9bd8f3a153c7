// go_stack: see unwind/go_stack.h.
#include "unwind/go_stack.h"

#include <errno.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>

#include "base/large_static.h"
#include "base/syscall_filter.h"

namespace retain::shim {
namespace {

// The runtime's limit on a goroutine's stack on 64-bit systems
// (runtime.maxstacksize): larger bounds are not a g's.
constexpr uintptr_t kMaxGoroutineStack = uintptr_t{1} << 30;
constexpr uintptr_t kPage = 4096;

std::atomic<uint64_t> g_kernel_reads;

// Copies `size` bytes at `address` through the kernel: false (and nothing
// faults) when they are not readable, or process_vm_readv is refused.
bool KernelRead(uintptr_t address, void* out, size_t size) {
  if (AvoidProcessVmReadv()) return false;  // base/syscall_filter.h
  g_kernel_reads.fetch_add(1, std::memory_order_relaxed);
  const int saved_errno = errno;
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};
  // getpid each time (rare: once per g, or per page of a stack reached
  // without its g): right in any child, before any initialisation.
  const long copied = syscall(SYS_process_vm_readv, syscall(SYS_getpid), &local, 1, &remote, 1, 0);
  errno = saved_errno;
  return copied == static_cast<long>(size);
}

// g structs whose first 16 bytes (g.stack) the kernel has read: readable
// for good, since the runtime never frees a g. Direct-mapped; a collision
// only costs another kernel read.
constexpr size_t kCheckedGs = 1024;
RETAIN_LARGE_STATIC std::atomic<uintptr_t> g_checked_gs[kCheckedGs];

std::atomic<uintptr_t>& CheckedSlot(uintptr_t g) {
  return g_checked_gs[((g >> 4) * 0x9e3779b97f4a7c15ull) >> 54];
}

bool GIsReadable(uintptr_t g) {
  std::atomic<uintptr_t>& slot = CheckedSlot(g);
  if (slot.load(std::memory_order_relaxed) == g) return true;
  uintptr_t stack[2];
  if (!KernelRead(g, stack, sizeof(stack))) return false;
  slot.store(g, std::memory_order_relaxed);
  return true;
}

inline uintptr_t Load(uintptr_t address) { return *reinterpret_cast<const uintptr_t*>(address); }

class GoWalker {
 public:
  GoWalker(const GoModule& module, StackBounds thread, ReturnClassifier classify, uintptr_t* frames,
           int max)
      : module_(module), thread_(thread), classify_(classify), frames_(frames), max_(max) {}

  GoWalkResult Run(GoEntry entry, UnwindRegisters at) {
    if (max_ <= 0) return result_;
    uintptr_t bp = at.bp;
    switch (entry) {
      case GoEntry::kCgoCall:
        if (!EnterGoroutine(at, &bp)) return result_;
        break;
      case GoEntry::kCgoCallOnSystemStack:
        if (!EnterCallerOnThreadStack(at, &bp)) return result_;
        break;
      case GoEntry::kGoFrame:
        // The Go function's frame lies above the C function it called.
        if (bp < at.sp) return result_;
        break;
    }
    FollowFramePointers(bp);
    return result_;
  }

 private:
  // Writes a frame; false when the buffer is full.
  bool Emit(uintptr_t ip) {
    frames_[result_.count++] = ip;
    return result_.count < max_;
  }

  // A return into the runtime's switch from a goroutine's stack to the
  // thread's: the frame pointer saved above it is the goroutine's.
  bool SwitchesToGoroutine(uintptr_t ret) const {
    return module_.systemstack.HoldsReturn(ret) || module_.mcall.HoldsReturn(ret) ||
           module_.morestack.HoldsReturn(ret);
  }

  void EnterUnboundedGoroutine(uintptr_t bp) {
    on_thread_ = false;
    unbounded_ = true;
    unbounded_from_ = bp;
  }

  bool InThread(uintptr_t address, uintptr_t size) const {
    return address >= thread_.low && address <= thread_.high && thread_.high - address >= size;
  }

  // asmcgocall switched from g's stack: g and the depth are in the thread's
  // stack at the C function's CFA + the decoded slots.
  bool EnterGoroutine(UnwindRegisters at, uintptr_t* bp) {
    const uintptr_t g_at = at.sp + module_.g_slot;
    const uintptr_t depth_at = at.sp + module_.depth_slot;
    if (!InThread(g_at, 8) || !InThread(depth_at, 8)) return false;
    const uintptr_t g = Load(g_at);
    const uintptr_t depth = Load(depth_at);
    if (g == 0 || (g & 7) != 0 || !GIsReadable(g)) return false;
    const uintptr_t low = Load(g);
    const uintptr_t high = Load(g + 8);
    if (low >= high || high - low > kMaxGoroutineStack || ((low | high) & 7) != 0) return false;
    if (depth < 8 || depth > high - low || (depth & 7) != 0) return false;
    stack_ = {low, high};
    on_thread_ = false;
    // The goroutine's SP at the call: the return address into asmcgocall's
    // caller (its ABI wrapper, or cgocall).
    const uintptr_t old_sp = high - depth;
    return EnterCaller(old_sp, bp);
  }

  // asmcgocall did not switch (g0, gsignal): the slot holds the caller's SP.
  bool EnterCallerOnThreadStack(UnwindRegisters at, uintptr_t* bp) {
    const uintptr_t slot = at.sp + module_.depth_slot;
    if (!InThread(slot, 8)) return false;
    const uintptr_t old_sp = Load(slot);
    if (old_sp < at.sp || (old_sp & 7) != 0) return false;
    return EnterCaller(old_sp, bp);
  }

  // The return address at `old_sp` (on stack_) is asmcgocall's caller's;
  // its frame pointer (*bp) lies above it.
  bool EnterCaller(uintptr_t old_sp, uintptr_t* bp) {
    if (!Readable(old_sp, 8)) return false;
    const uintptr_t ret = Load(old_sp);
    if (classify_(ret) != ReturnKind::kGo) return false;
    if (!Emit(ret)) return false;
    return *bp > old_sp;
  }

  // Whether [address, address + size) may be read: inside the stack being
  // walked; on a goroutine's stack of unknown bounds, a page the kernel has
  // read (the last two pages checked are remembered).
  bool Readable(uintptr_t address, uintptr_t size) {
    if ((address & 7) != 0) return false;
    if (!unbounded_) {
      return address >= stack_.low && address <= stack_.high && stack_.high - address >= size;
    }
    if (address == 0 || address + size < address) return false;
    for (uintptr_t page = address & ~(kPage - 1); page < address + size; page += kPage) {
      if (page == checked_pages_[0] || page == checked_pages_[1]) continue;
      uintptr_t word;
      if (!KernelRead(page, &word, sizeof(word))) return false;
      checked_pages_[1] = checked_pages_[0];
      checked_pages_[0] = page;
    }
    return true;
  }

  void FollowFramePointers(uintptr_t bp) {
    while (result_.count < max_) {
      if (!Readable(bp, 16)) return;
      const uintptr_t next = Load(bp);
      const uintptr_t ret = Load(bp + 8);
      const ReturnKind kind = classify_(ret);
      if (kind == ReturnKind::kC) {
        // C code runs on the thread's stack only: the CFI walker's part.
        if (on_thread_) {
          result_.resume = true;
          result_.resume_at = {ret, bp + 16, next};
        }
        return;
      }
      if (kind != ReturnKind::kGo || !Emit(ret)) return;
      if (module_.goexit.HoldsReturn(ret) || module_.mstart.HoldsReturn(ret) ||
          module_.rt0_go.HoldsReturn(ret)) {
        return;  // the first frame of a goroutine or of a thread
      }
      if (!on_thread_ && module_.cgocallback.HoldsReturn(ret)) {
        // cgocallbackg's caller: cgocallback's frame, on the thread's stack.
        stack_ = thread_;
        on_thread_ = true;
        unbounded_ = false;
        bp = next;
        continue;
      }
      if (on_thread_ && SwitchesToGoroutine(ret)) {
        // The function the runtime called on the thread's stack saved the
        // goroutine's frame pointer.
        EnterUnboundedGoroutine(next);
        bp = next;
        continue;
      }
      // Frames only go up a stack.
      if (next <= bp) return;
      if (unbounded_ && next - unbounded_from_ > kMaxGoroutineStack) return;
      bp = next;
    }
  }

  const GoModule& module_;
  const StackBounds thread_;
  const ReturnClassifier classify_;
  uintptr_t* const frames_;
  const int max_;
  GoWalkResult result_;
  StackBounds stack_ = thread_;  // the stack being walked
  bool on_thread_ = true;        // it is the thread's (C code may follow)
  bool unbounded_ = false;       // a goroutine's, bounds unknown: pages checked
  uintptr_t unbounded_from_ = 0;
  uintptr_t checked_pages_[2] = {0, 0};
};

}  // namespace

GoWalkResult WalkGoFrames(const GoModule& module, GoEntry entry, UnwindRegisters at,
                          StackBounds thread, ReturnClassifier classify, uintptr_t* frames,
                          int max) {
#if defined(__x86_64__)
  GoWalker walker(module, thread, classify, frames, max);
  return walker.Run(entry, at);
#else
  (void)module;
  (void)entry;
  (void)at;
  (void)thread;
  (void)classify;
  (void)frames;
  (void)max;
  return {};
#endif
}

uint64_t GoKernelReadsForTest() { return g_kernel_reads.load(std::memory_order_relaxed); }

void ForgetCheckedGsForTest() {
  for (std::atomic<uintptr_t>& slot : g_checked_gs) slot.store(0, std::memory_order_relaxed);
}

}  // namespace retain::shim
