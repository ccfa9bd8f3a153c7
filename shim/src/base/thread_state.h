// thread_state: the per-thread data every hook touches.
//
// All of it is `initial-exec` TLS: reaching it is one %fs-relative load, never
// a call to __tls_get_addr (which may malloc and re-enter the hooks). Only
// plain data here: a C++ thread_local with a constructor would need a TLS
// wrapper call on every access.
#ifndef RETAIN_SHIM_SRC_BASE_THREAD_STATE_H_
#define RETAIN_SHIM_SRC_BASE_THREAD_STATE_H_

#include <cstdint>

namespace retain::shim {

struct ThreadState {
  // Re-entry guard: non-zero while this thread runs shim code (a hook's
  // bookkeeping, a snapshot write, the shim's service thread). Allocation
  // calls made meanwhile pass straight through, unrecorded.
  uint32_t busy;
  // Non-zero while this thread resolves the real allocator with dlsym; its
  // allocation calls are then served from the bootstrap buffer.
  uint32_t resolving;
  // Non-zero while this thread holds the private heap (PrivateHeapScope,
  // base/hook_table.h): its malloc and calloc calls from inside the shim
  // are served there, never by the host's heap.
  uint32_t private_heap;
  // Non-zero while this thread runs the shim's first initialisation.
  uint32_t initializing;
  // Depth of intercepted GPU API calls this thread is inside (see
  // record/gpu_recorder.h): host allocations made meanwhile belong to the GPU
  // runtime or driver (Kind::kGpuDriverHost), not to the program's heap.
  uint32_t gpu_depth;
  // Host blocks recorded as Kind::kGpuDriverHost inside the outermost GPU
  // call so far (record/gpu_backing.h): up to four, the largest, by address
  // and size, and the bytes of all of them.
  uint32_t gpu_host_count;
  uintptr_t gpu_host[4];
  uint64_t gpu_host_size[4];
  uint64_t gpu_host_bytes;
  // This thread's block of birth sequence numbers (record/birth_sequence.h).
  uint32_t birth_generation;
  uint32_t birth_thread;    // the thread id the block was taken for
  const void* birth_owner;  // the BirthSequence the block came from
  uint64_t birth_next;
  uint64_t birth_end;
  uint64_t birth_base_units;  // the block's start time (BirthSequence units)
  // RETAIN_SAMPLE (record/sampler.h): bytes left before this thread's next sampling
  // point, its random generator, and whether both were started.
  int64_t sample_countdown;
  uint64_t sample_state;
  uint32_t sample_started;
  // Kernel thread id, cached (0 = not read yet). Reset in a fork child.
  uint32_t tid;
  // The request this thread works for (0: none) and the Attribution rule
  // that tied it (explicit, http-thread).
  uint32_t tag_id;
  uint32_t tag_rule;
  // Bounds of this thread's stack for the walks (unwind/stack_bounds.h;
  // stack_high 0: not read yet, 1: unknown), and the reads that found none.
  uintptr_t stack_low;
  uintptr_t stack_high;
  uint32_t stack_bounds_tries;
  // 1 + the index of this thread's slot for the CFI walker's memo of its
  // previous walk (unwind/cfi_unwinder.cc); 0 = none yet.
  uint32_t cfi_memo_slot;
  // This thread's ring of young heap records (record/nursery.h): a
  // Nursery*, 0 until its first recorded allocation, kNoNursery when it has
  // none (none was free, or the thread is exiting).
  uintptr_t nursery;
  // Snapshot signals (RETAIN_SIGNAL) this thread's handler ran for, so a
  // wait they interrupted can tell and resume (hooks/wait_hooks.cc).
  uint32_t snapshot_signals;
  // The frame (its frame-pointer address) of the function holding the
  // outermost BusyScope, 0 when none: in a hook, the stack capture starts
  // from there instead of passing every shim frame in between
  // (unwind/stack_capture.cc).
  uintptr_t hook_frame;
  // The hash (or key: InternStackKeyed) and id of the stack this thread
  // interned last (unwind/stack_table.cc): a stack that repeats it takes the
  // id without the table. id 0: none.
  uint64_t last_stack_hash;
  uint32_t last_stack_id;
  // record/malloc_provider.h: 1 while the shim calls malloc as the program
  // does; the malloc hook makes it 2 (so the shim's malloc is the process's).
  uint32_t malloc_probe;
  // 1 on the shim's own threads (base/threads.h).
  uint32_t shim_thread;
  // 1 while this thread is inside libunwind (unwind/stack_capture.cc: a
  // fork from a handler that interrupted it must not wait for itself).
  uint32_t in_libunwind;
  // hooks/interruptible_call.h: 1 + the number of the system call this
  // thread blocks in inside a hook, which the snapshot signal's handler may
  // end (0: none), the libc function that makes it, and whether the handler
  // ended it (snapshot/interrupted_call.h).
  uint32_t interruptible_call;
  uint32_t call_interrupted;
  uintptr_t interruptible_function;
  uintptr_t interruptible_frame;  // the arming hook's frame address
};

inline constexpr uintptr_t kNoNursery = 1;

extern __thread ThreadState g_thread __attribute__((tls_model("initial-exec")));

// CurrentThreadId's first call on a thread.
uint32_t FirstThreadIdCall();

// The calling thread's kernel id, cached after the first call. Inline: every
// recorded allocation asks.
inline uint32_t CurrentThreadId() {
  if (__builtin_expect(g_thread.tid != 0, 1)) return g_thread.tid;
  return FirstThreadIdCall();
}

// The re-entry guard, RAII: held by every recorded hook call (record/hook_shape.h)
// and by shim code that is not a hook, so what runs inside passes through.
class BusyScope {
 public:
  // Always inlined, so the frame address is that of the function holding the
  // scope (a hook), not the constructor's.
  __attribute__((always_inline)) BusyScope() {
    if (g_thread.busy++ == 0) {
      g_thread.hook_frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    }
  }
  __attribute__((always_inline)) ~BusyScope() {
    if (--g_thread.busy == 0) g_thread.hook_frame = 0;
  }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_THREAD_STATE_H_
