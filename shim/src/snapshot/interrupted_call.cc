// interrupted_call: see snapshot/interrupted_call.h.
#include "snapshot/interrupted_call.h"

#include <errno.h>
#include <stdint.h>
#include <ucontext.h>

#include "unwind/module_table.h"

namespace retain::shim {

#if defined(__x86_64__)

// The words above a libc wrapper's stack pointer hold its return address
// (glibc 2.36: at 0 when it has no frame, at 0x28 on its cancellable path).
constexpr int kReturnAddressWords = 16;

bool CalledFromShim(uintptr_t stack_pointer) {
  const uintptr_t begin = ShimCodeBegin();
  const uintptr_t end = ShimCodeEnd();
  const auto* words = reinterpret_cast<const uintptr_t*>(stack_pointer);
  for (int i = 0; i < kReturnAddressWords; ++i) {
    if (words[i] >= begin && words[i] < end) return true;
  }
  return false;
}

bool EndInterruptedSystemCall(void* ucontext, long number, uintptr_t function,
                              uintptr_t hook_frame) {
  auto* context = static_cast<ucontext_t*>(ucontext);
  greg_t& rip = context->uc_mcontext.gregs[REG_RIP];
  greg_t& rax = context->uc_mcontext.gregs[REG_RAX];
  const auto rsp = static_cast<uintptr_t>(context->uc_mcontext.gregs[REG_RSP]);
  if (rsp >= hook_frame || hook_frame - rsp >= kInterruptibleFrameBytes) return false;
  // A restart leaves rax holding the call's number again and rip on the
  // two-byte `syscall` (0f 05); so does a signal taken just before it ran.
  // After the call returned, rip is past it and rax is its result.
  if (static_cast<uintptr_t>(rip) - function >= kInterruptibleFunctionBytes) return false;
  const auto* code = reinterpret_cast<const uint8_t*>(rip);
  if (rax != number || code[0] != 0x0f || code[1] != 0x05) return false;
  if (!CalledFromShim(rsp)) return false;
  rip += 2;
  rax = -EINTR;
  return true;
}

#else

bool EndInterruptedSystemCall(void*, long, uintptr_t, uintptr_t) { return false; }

#endif

}  // namespace retain::shim
