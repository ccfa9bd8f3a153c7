// stack_capture: the current thread's call stack as return addresses.
//
// Three methods, chosen by RETAIN_UNWIND:
//  - cfi (default): the shim's own DWARF CFI walker with a rule cache
//    (unwind/cfi_unwinder.h), from the hook's caller on. A stack it cannot walk
//    (signal frames, CFA expressions, code without unwind tables) is
//    captured with libunwind instead, whole (counted in
//    ShimHealth.cfi_fallbacks), so its stacks are libunwind's, faster.
//  - libunwind: unw_backtrace, libunwind's cached fast path (never
//    the unw_step loop, which makes a system call per frame). libunwind.so.8
//    is dlopen()ed RTLD_LOCAL by LoadUnwinder(): it exports `backtrace` and
//    the whole _Unwind_* API, and in the global scope it would replace the
//    host's C++ exception unwinder. Its memory validation is rewired to
//    need no file descriptor (unwind/libunwind_isolation.h).
//  - fp: a frame-pointer walk, validated against the thread's stack bounds
//    and the executable ranges of loaded code; where the chain is broken or
//    starts in a runtime built without frame pointers, the CFI walker and
//    then libunwind are used for that capture instead (counted in
//    ShimHealth.fp_fallbacks).
// The shim's own frames are dropped; at most RETAIN_DEPTH frames are kept.
//
// Call with the re-entry guard held. Never allocates from the host heap
// itself (libunwind may, through the guard, on a thread's first use).
#ifndef RETAIN_SHIM_SRC_UNWIND_STACK_CAPTURE_H_
#define RETAIN_SHIM_SRC_UNWIND_STACK_CAPTURE_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// dlopen()s libunwind privately. Call once, outside any hook. Returns false
// if it is missing (stacks are then captured by frame pointers only).
bool LoadUnwinder();

// Until then (allocations made before the shim's constructor ran, from
// other libraries' constructors), libgcc's unwinder is used if the process
// already has it; call from the first initialisation.
void LoadEarlyUnwinder();

// Captures and interns the caller's stack. Returns the stack id, 0 if none.
uint32_t CaptureStackId();

// fork(): libunwind keeps mutexes of its own, and one that another thread
// holds when the process forks stays held in the child forever: the child's
// first capture through libunwind then waits for it (a JVM that forks its
// subprocesses hung so, in the child's malloc before exec). The prepare
// handler waits until no other thread is inside libunwind (at most 100 ms:
// one may wait for a lock the forking thread holds); until the fork is done,
// a capture that would need libunwind keeps the allocating function alone
// instead of waiting (it may hold a lock the forking thread needs).
void UnwinderLockForFork();
void UnwinderUnlockForFork();
void UnwinderResetInChild();

// Whether the calling thread runs on its own stack with at least `bytes`
// left below the stack pointer (its bounds as the walks read them). False
// on a stack of another kind (a coroutine's, an alternate signal stack) or
// when the bounds are unknown.
bool StackRoomAtLeast(size_t bytes);

// Counters for ShimHealth.
uint64_t UnwindFailures();
uint64_t FramePointerFallbacks();
uint64_t CfiFallbacks();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_STACK_CAPTURE_H_
