// go_runtime: where the Go runtime switches stacks, in a loaded Go module (a
// cgo program, or a Go library built with -buildmode=c-shared), found once
// when the module is first seen, so that a stack walk can cross from C into
// Go (unwind/go_stack.h).
//
// A module is a Go module when it carries Go's build-id note (PT_NOTE, owner
// "Go", type 4). What a walk needs to know of it comes from the module
// file's .symtab, read once when the module is registered (the symbol table
// is not loaded in memory), never on a hook's path:
//   runtime.asmcgocall     Go calling C: switches from the goroutine's stack
//                          to the thread's (g0's) and calls the C function.
//                          Its code is decoded: where it keeps g and the
//                          goroutine's stack depth, and the return addresses
//                          of its two C calls (from a goroutine; from a
//                          thread's own stack, where it does not switch)
//   runtime.cgocallback    C calling Go (crosscall2 -> cgocallback): switches
//                          from the thread's stack to the goroutine's
//   runtime.systemstack, runtime.mcall, runtime.morestack
//                          the runtime moving from a goroutine's stack to the
//                          thread's for its own work (the Go heap's mmaps run
//                          there, through x_cgo_mmap)
//   runtime.goexit         a goroutine's outermost frame
//   runtime.mstart, runtime.rt0_go
//                          a thread's outermost Go frames
// Each by its ABI0 body ("runtime.asmcgocall.abi0") where that name exists:
// since Go 1.17 the plain name of an assembly function is its ABI wrapper.
//
// Verified: Go 1.19.8 (Debian 12's golang-go), linux/amd64, cgo programs as
// `go build` links them (externally, by gcc). Assumed, from the runtime's
// sources, and checked where the code allows:
//  - asmcgocall keeps g and the depth (g.stack.hi - the goroutine's SP) in
//    two slots of the thread's stack above the return address of its C call
//    (Go 1.19: +0x30 and +0x28 with `CALL AX`; the runtime's current source:
//    +8 and +0, the C function reached through asmcgocall_landingpad's tail
//    call). Decoded, not assumed: a layout the decoder does not recognise
//    leaves the module's cgo calls unwalked (the walk ends there, as without
//    this file) rather than misread;
//  - g starts with g.stack {lo, hi} (runtime/cgo's C code relies on it too:
//    struct G in libcgo.h); checked: the decoded code reads hi at g + 8;
//  - Go code keeps frame pointers (the default on amd64 since Go 1.7).
// A stripped Go program (go build -ldflags=-s) has no .symtab: it is not
// registered, and its stacks end where C returns into Go, as before.
//
// Thread-safe. RegisterGoModule is serialised by its caller (the module
// table's lock); readers (walks on any thread, inside hooks) see a module
// only once it is complete, and lock-free. Never allocates from the host
// heap: a module file is read through the shim's own descriptor and a
// private read-only mapping, unmapped before returning. errno is preserved.
// x86-64 only: elsewhere no module is registered.
#ifndef RETAIN_SHIM_SRC_UNWIND_GO_RUNTIME_H_
#define RETAIN_SHIM_SRC_UNWIND_GO_RUNTIME_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace retain::shim {

// A function's code, [begin, end); empty (begin == end) when unknown.
struct CodeRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool Contains(uintptr_t address) const { return address - begin < end - begin; }
  // Whether `return_address` returns into this function: its call
  // instruction (return_address - 1) lies inside.
  bool HoldsReturn(uintptr_t return_address) const { return Contains(return_address - 1); }
};

struct GoModule {
  CodeRange text;  // the module's executable segment (its Go and its C code)
  CodeRange asmcgocall;
  CodeRange cgocallback;
  CodeRange systemstack;
  CodeRange mcall;
  CodeRange morestack;
  CodeRange goexit;
  CodeRange mstart;
  CodeRange rt0_go;
  // asmcgocall's C calls, decoded (0: not): the return address of the call
  // made from a goroutine (g and depth saved), and of the call made on the
  // thread's own stack (g0 or gsignal: no switch; the depth slot then holds
  // the caller's stack pointer itself).
  uintptr_t cgo_call_return = 0;
  uintptr_t cgo_call_return_on_system_stack = 0;
  // Where those calls keep g and the depth: at the C function's CFA (the
  // stack pointer before its call pushed the return address) + these.
  uint32_t g_slot = 0;
  uint32_t depth_slot = 0;
};

// Whether the loaded object with these program headers is a Go module (Go's
// build-id note). Reads only the notes, in memory.
bool HasGoNote(const void* program_headers, int count, uintptr_t load_bias);

// Whether the main executable is a Go program (a cgo program: it loads libc
// and takes LD_PRELOAD). DetectGoProgram looks once, from the shim's
// initialisation; ProgramIsGo is then one load, async-signal-safe. A Go
// library in a C program (-buildmode=c-shared) does not count: its runtime
// leaves the asynchronous signals to the program (snapshot/signal_chain.h).
void DetectGoProgram();
bool ProgramIsGo();

// Reads what a walk needs from the module file at `path` (its .symtab;
// asmcgocall's code from memory, where the module is loaded at
// `load_bias`) into `module`, whose `text` the caller has set. False when
// the file has no symbol table or not even asmcgocall: the module is then
// not registered.
bool ReadGoModule(const char* path, uintptr_t load_bias, GoModule* module);

// Decodes asmcgocall's code, `size` bytes at `code`, which is loaded at
// `address` (the same memory, or a copy of it), filling the cgo_call_*
// fields and the slots of `module`. `landingpad`: runtime.
// asmcgocall_landingpad's code and where it is loaded, for the runtimes
// whose asmcgocall reaches C through it (nullptr: none). False (and
// nothing filled) when the code is not a layout this decoder knows.
bool DecodeAsmcgocall(const uint8_t* code, size_t size, uintptr_t address,
                      const uint8_t* landingpad, size_t landingpad_size,
                      uintptr_t landingpad_address, GoModule* module);

// Publishes a module to walks (at most kMaxGoModules; more are ignored).
// Returns false when the table is full.
constexpr int kMaxGoModules = 8;
bool RegisterGoModule(const GoModule& module);

// The registered module whose text holds `address`; nullptr if none.
const GoModule* FindGoModule(uintptr_t address);

// Whether any Go module is registered: one relaxed load, for the few places
// that would otherwise look further (a libunwind stack ending in Go code).
namespace go_runtime_internal {
extern std::atomic<int> g_module_count;
}  // namespace go_runtime_internal
inline bool GoModulesRegistered() {
  return go_runtime_internal::g_module_count.load(std::memory_order_relaxed) != 0;
}

// Unregisters every module. Tests only.
void ForgetGoModulesForTest();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_GO_RUNTIME_H_
