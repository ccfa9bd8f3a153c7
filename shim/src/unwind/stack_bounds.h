// stack_bounds: where the calling thread's stack lies, for the unwinders
// (every read of a walk is inside the bounds), found without glibc's
// pthread_getattr_np.
//
// The capture that needs the bounds runs inside the hooks, and
// pthread_getattr_np cannot run there:
//  - it holds the thread's own descriptor lock while it allocates (the CPU
//    set it copies), so a thread whose first allocation is inside the
//    host's own pthread_getattr_np call (Rust's threads ask for their stack
//    as they start; so do JVMs and garbage collectors) waited on itself
//    forever;
//  - it allocates, and an allocator calls some hooks (mmap) while it holds
//    its own lock: with LD_PRELOAD="libjemalloc.so.2 libretain.so", jemalloc
//    maps its first arena from its constructor, the main thread's bounds
//    were read there through stdio, whose malloc waited for jemalloc's lock
//    forever (/bin/true never ended).
// So the bounds are read from /proc/self/maps with system calls into a
// buffer on the stack, once per thread (ReadFileInPieces: no allocation, no
// lock but the shim's descriptor table's), stopping at the line needed:
//  - the main thread's stack (the mapping that holds __libc_stack_end), as
//    pthread_getattr_np computes it: up to the loader's stack end, down to
//    where RLIMIT_STACK lets the stack grow, never below the mapping before
//    it;
//  - another thread's: from the start of the mapping that holds the
//    thread's descriptor (pthread_self()) up to the descriptor, which glibc
//    places at the top of every thread's stack, its own or one the program
//    gave it, above its frames and its static TLS (a glibc thread's guard
//    page below is a mapping of its own). Unique per live thread, like the
//    stack: the CFI walker keys its memos by the high end.
// Both are the thread's own stack whatever stack it runs on when they are
// read (a coroutine's, a signal handler's alternate one: such a stack is
// outside them, and libunwind, which needs no bounds, takes its stacks). A
// thread of neither kind (started by a raw clone, without a descriptor of
// its own) has none.
#ifndef RETAIN_SHIM_SRC_UNWIND_STACK_BOUNDS_H_
#define RETAIN_SHIM_SRC_UNWIND_STACK_BOUNDS_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// [low, high): a thread's stack, or (unwind/go_stack.h) a goroutine's.
struct StackBounds {
  uintptr_t low = 0;
  uintptr_t high = 0;  // 0: unknown
};

// One mapping of /proc/self/maps text: the one that holds `address`, and the
// end of the mapping listed before it. The text may come in pieces split
// anywhere (Feed them in order).
class MappingFinder {
 public:
  explicit MappingFinder(uintptr_t address) : address_(address) {}
  void Feed(const char* piece, size_t length);

  bool found() const { return found_; }
  uintptr_t start() const { return found_start_; }
  uintptr_t end() const { return found_end_; }
  // The end of the mapping before it (0 when it is the first).
  uintptr_t previous_end() const { return found_previous_end_; }

 private:
  enum class State { kStart, kEnd, kRest };
  void EndOfRange();

  const uintptr_t address_;
  State state_ = State::kStart;
  uintptr_t start_ = 0;
  uintptr_t end_ = 0;
  int digits_ = 0;
  uintptr_t previous_end_ = 0;
  bool found_ = false;
  uintptr_t found_start_ = 0;
  uintptr_t found_end_ = 0;
  uintptr_t found_previous_end_ = 0;
};

// The bounds of the stack of the thread whose descriptor is
// `thread_descriptor`, by the rules above, with the main thread's
// `main_stack_end` (__libc_stack_end) given and `main_thread` set on the
// main thread (thread id = process id). `stack_pointer`, where the thread
// runs now, tells the main thread from a thread that forked the process
// (it has the main thread's id in the child, and its own stack). {0, 0}
// when the maps cannot be read or no rule fits.
StackBounds StackBoundsFor(uintptr_t stack_pointer, uintptr_t thread_descriptor,
                           uintptr_t main_stack_end, bool main_thread);

// The calling thread's.
StackBounds ReadThreadStackBounds();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_STACK_BOUNDS_H_
