// interrupted_call: ends, from the snapshot signal's handler, a blocking
// system call that the kernel would otherwise restart, so that a
// single-threaded program blocked in read() or accept() still gets its
// signal snapshot written without a shim thread (base/threads.h says why
// such a program gets none).
//
// The shim's handler is SA_RESTART: the host's own calls (inside libc,
// made with syscall()) must resume as they would without the shim. So the
// handler decides per call, from the interrupted registers: when this
// thread is inside a hook that armed the call (hooks/interruptible_call.h),
// and the registers show the kernel rewound to that call's `syscall`
// instruction to restart it (or the thread had not yet executed it), the
// handler steps past the instruction with -EINTR as its result. The libc
// wrapper then returns -1 with EINTR to the hook, which writes the
// snapshot and makes the call again; the host sees the call's own result.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_INTERRUPTED_CALL_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_INTERRUPTED_CALL_H_

#include <cstdint>

namespace retain::shim {

// From a signal handler given `ucontext` (SA_SIGINFO): true when the
// interrupted thread was at a `syscall` instruction for system call
// `number`, within the first kInterruptibleFunctionBytes of `function` (the
// libc wrapper the hook called), on a stack pointer less than
// kInterruptibleFrameBytes below `hook_frame` (the arming hook's frame) with
// a return address into the shim among the words just above it: that call,
// not one a handler of the host's or libc itself (stdio's reads run through
// the same function) made, even were an arm left behind by a longjmp. Now
// made to return -EINTR. x86-64 only (elsewhere: false, the call
// restarts). Async-signal-safe.
inline constexpr uintptr_t kInterruptibleFunctionBytes = 512;
inline constexpr uintptr_t kInterruptibleFrameBytes = 4096;
bool EndInterruptedSystemCall(void* ucontext, long number, uintptr_t function,
                              uintptr_t hook_frame);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_INTERRUPTED_CALL_H_
