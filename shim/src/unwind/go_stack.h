// go_stack: the Go part of a stack walk, from where C code returns into Go
// code (the CFI walker, unwind/cfi_unwinder.h, finds no unwind information
// there: Go's linker writes .debug_frame only) to a goroutine's first frame,
// so that the Go function that called C, and its callers, are on the stack.
//
// Go code keeps frame pointers on amd64 (the caller's rbp at [rbp], the
// return address at [rbp + 8]), and this walk follows them, switching stacks
// where the runtime does (unwind/go_runtime.h names the functions):
//   C called by asmcgocall from a goroutine   the thread's stack holds g and
//       the depth; the goroutine's SP is g.stack.hi - depth, and holds the
//       return address into asmcgocall's caller; the frame pointer (rbp, kept
//       by the C code) is the caller's. The walk goes on on the goroutine's
//       stack, every read inside [g.stack.lo, g.stack.hi).
//   C called by asmcgocall on the thread's stack   the slot holds the caller's
//       SP: the same, on the thread's stack.
//   C called by another Go function (callCgoMmap: the Go heap's mmaps)   rbp
//       is that function's frame pointer.
//   a return into runtime.cgocallback, on a goroutine's stack   the frame
//       pointer saved there is cgocallback's, on the thread's stack: the
//       walk goes back there, to crosscall2 and to the C code that called Go.
//       At the first C return address the CFI walker takes over again
//       (`resume`).
//   a return into runtime.systemstack, mcall or morestack, on the thread's
//       stack   the runtime moved there from a goroutine's stack: the saved
//       frame pointer is the goroutine's. g is not in reach there, so its
//       stack's bounds are not known: each page of it is checked readable
//       (by the kernel: process_vm_readv) before the first read in it.
// It ends at runtime.goexit (a goroutine's first frame), runtime.mstart or
// rt0_go (a thread's), at `max` frames, or at the first frame that fails a
// check: a frame pointer outside its stack or not above the previous one, a
// return address that is neither Go code nor C code.
//
// g is read only after the kernel read it once (process_vm_readv): a g is
// never freed (the runtime keeps every g it made in allgs), so the ones
// checked are remembered in a small lock-free table and later walks read
// them directly. Where process_vm_readv is refused (a seccomp filter),
// walks end at the cgo call, as without this file.
//
// Thread-safe, lock-free; never allocates, never faults (every read is
// checked first), leaves errno alone. Called inside hooks. x86-64 only.
#ifndef RETAIN_SHIM_SRC_UNWIND_GO_STACK_H_
#define RETAIN_SHIM_SRC_UNWIND_GO_STACK_H_

#include <cstdint>

#include "unwind/cfi_unwinder.h"
#include "unwind/go_runtime.h"
#include "unwind/stack_bounds.h"  // StackBounds

namespace retain::shim {

// How a C frame's return address into a Go module is entered.
enum class GoEntry : uint8_t {
  kGoFrame,               // a Go function that called C itself
  kCgoCall,               // asmcgocall's call from a goroutine
  kCgoCallOnSystemStack,  // asmcgocall's call on the thread's own stack
};

// What a return address is, for the walk: Go code (no unwind information,
// in a Go module), C code (the CFI walker has its rule, or it ends a stack),
// or neither.
enum class ReturnKind : uint8_t { kUnknown, kC, kGo };
using ReturnClassifier = ReturnKind (*)(uintptr_t return_address);

struct GoWalkResult {
  int count = 0;  // frames written
  // The walk reached C code on the thread's stack (the caller of a callback
  // into Go): the CFI walker goes on from `resume_at` (resume_at.ip is not
  // written yet).
  bool resume = false;
  UnwindRegisters resume_at{};
};

// Walks on from `at`: a frame whose return address at.ip (already written
// by the caller) lies in `module`, entered as `entry`; at.sp is the CFA of
// the C function that returns there, at.bp rbp at that point. `thread`:
// the calling thread's stack. Writes return addresses into frames[0..max).
GoWalkResult WalkGoFrames(const GoModule& module, GoEntry entry, UnwindRegisters at,
                          StackBounds thread, ReturnClassifier classify, uintptr_t* frames,
                          int max);

// Counters for tests: g structs the kernel was asked to read, and page
// checks of goroutine stacks reached without their g.
uint64_t GoKernelReadsForTest();

// Forgets the g structs already checked. Tests only (a test's fake g lives
// on its stack).
void ForgetCheckedGsForTest();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_GO_STACK_H_
