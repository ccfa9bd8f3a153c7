// dlsym_hook: the exported `dlsym` hook.
//
// Why: the statically linked CUDA runtime (nvcc's default) never calls the
// driver through the PLT. It dlopen()s libcuda.so.1, takes cuGetProcAddress
// (and a few others) with dlsym(handle, ...), and every other entry point
// from cuGetProcAddress. The shared runtime does the same. So dlsym on a
// library handle, for the CUDA entry points in gpu/cuda_impl.h, returns a
// wrapper around what the real dlsym found.
//
// Transparency: glibc's dlsym looks at its caller's return address (for
// RTLD_NEXT: "the next object after the caller"; for RTLD_DEFAULT: the
// caller's namespace). The hook is therefore an assembly trampoline that
// asks RetainDlsymRoute() which function should handle the call, restores
// the arguments and *jumps* to it: for every name the shim does not wrap
// that is the real dlsym, entered with the original caller's return address
// on the stack, as if the program had called it directly. (A C++ `return
// real(handle, name);` is a tail call only when the optimiser makes it one:
// not at -O0, not with a stack protector. The trampoline always is.)
//
// Routes:
//  - handle RTLD_NEXT, and every name not starting with "cu": real dlsym;
//  - a library handle and a wrapped ABI name (CudaEntryForSymbol): the real
//    dlsym is called from the shim (for a real handle the caller does not
//    matter), and a found pointer is replaced by its wrapper;
//  - RTLD_DEFAULT and a name libretain.so exports as a CUDA or HIP hook:
//    without the shim, the answer is the first definition in the global
//    scope, then in the caller's own scope (a library opened RTLD_LOCAL sees
//    its dependencies); with it, the shim's hook is found first. When no
//    definition exists after the shim nor in the caller's scope (no runtime
//    loaded), the answer is nullptr, as without the shim (dlerror then names
//    libretain.so, not the caller, as the object that asked). Looked up from the shim, so for
//    callers in another link-map namespace (dlmopen) the base namespace is
//    asked.
//
// Works before the shim is initialised (dlsym runs in other libraries'
// constructors): the route needs only the real dlsym (base/real_dlsym.h) and
// static tables; it never calls the exported dlsym again (the shim's own
// look-ups use ShimDlsym), so it cannot recurse.
#include <dlfcn.h>
#include <string.h>

#include "base/real_dlsym.h"
#include "gpu/cuda_impl.h"
#include "gpu/hip_api.h"
#include "gpu/runtime_lookup.h"

namespace retain::shim {
namespace {

void* DlsymUnavailable(void*, const char*) { return nullptr; }

// dlsym(library handle, wrapped name).
void* WrappedDlsym(void* handle, const char* name) {
  DlsymFn real = RealDlsym();
  void* found = real(handle, name);
  if (found == nullptr) return nullptr;
  return WrapCudaTarget(CudaEntryForSymbol(name), found);
}

// Whether `name` has a definition in the local scope of the object that
// contains `caller` (that object and its dependencies): what RTLD_DEFAULT
// also searches for code in a library opened RTLD_LOCAL, which RTLD_NEXT
// from the shim cannot see.
bool DefinedInCallersScope(const void* caller, const char* name) {
  Dl_info info;
  if (caller == nullptr || dladdr(caller, &info) == 0 || info.dli_fname == nullptr) return false;
  void* object = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (object == nullptr) return false;
  void* found = RealDlsym()(object, name);
  dlclose(object);
  return found != nullptr && !IsInShim(found);
}

// dlsym(RTLD_DEFAULT, name of one of the shim's CUDA or HIP hooks). Entered
// by a jump from the trampoline: the return address is the program's.
__attribute__((noinline)) void* DefaultGpuDlsym(void* handle, const char* name) {
  const void* caller = __builtin_return_address(0);
  DlsymFn real = RealDlsym();
  void* found = real(handle, name);
  if (found == nullptr || !IsInShim(found)) return found;
  // The shim's hook: a real definition must exist after the shim or in the
  // caller's own scope, else the program would have got nullptr without the
  // shim. The failed look-up sets dlerror as the program's would have.
  if (DefinedInCallersScope(caller, name)) return found;
  // Last, so a miss leaves its dlerror. Not a tail call: a jump would make
  // the program, not the shim, the object RTLD_NEXT starts after.
  void* next = real(RTLD_NEXT, name);
  return next != nullptr ? found : nullptr;
}

}  // namespace
}  // namespace retain::shim

using namespace retain::shim;

// Which function handles dlsym(handle, name); called by the trampoline only.
extern "C" __attribute__((used)) void* RetainDlsymRoute(void* handle, const char* name) {
  DlsymFn real = RealDlsym();
  if (real == nullptr) return reinterpret_cast<void*>(&DlsymUnavailable);
  if (name == nullptr || handle == RTLD_NEXT) return reinterpret_cast<void*>(real);
  // A program probing for HIP (llama.cpp's backends do) must get nullptr
  // when no HIP runtime is loaded, not the shim's hook.
  if (name[0] == 'h' && name[1] == 'i' && name[2] == 'p') {
    return handle == RTLD_DEFAULT && hip::IsHipExportName(name)
               ? reinterpret_cast<void*>(&DefaultGpuDlsym)
               : reinterpret_cast<void*>(real);
  }
  if (name[0] != 'c' || name[1] != 'u') return reinterpret_cast<void*>(real);
  if (handle == RTLD_DEFAULT) {
    return IsCudaExportName(name) ? reinterpret_cast<void*>(&DefaultGpuDlsym)
                                  : reinterpret_cast<void*>(real);
  }
  return CudaEntryForSymbol(name) >= 0 ? reinterpret_cast<void*>(&WrappedDlsym)
                                       : reinterpret_cast<void*>(real);
}

// void* dlsym(void* handle, const char* name): route, then jump (never
// call) to the chosen function with the caller's arguments and return
// address untouched.
#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  endbr64
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call RetainDlsymRoute
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  jmp *%rax
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#elif defined(__aarch64__)
// Not assembled or run on this project's machines (x86-64 only).
asm(R"(
  .text
  .globl dlsym
  .type dlsym, %function
  .p2align 4
dlsym:
  .cfi_startproc
  hint #34
  stp x29, x30, [sp, #-32]!
  .cfi_def_cfa_offset 32
  .cfi_offset 29, -32
  .cfi_offset 30, -24
  mov x29, sp
  stp x0, x1, [sp, #16]
  bl RetainDlsymRoute
  mov x16, x0
  ldp x0, x1, [sp, #16]
  ldp x29, x30, [sp], #32
  .cfi_restore 29
  .cfi_restore 30
  .cfi_def_cfa_offset 0
  br x16
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#else
#error "the dlsym trampoline is written for x86-64 and aarch64 only"
#endif
