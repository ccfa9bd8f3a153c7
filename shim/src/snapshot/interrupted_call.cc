// interrupted_call: see snapshot/interrupted_call.h.
#include "snapshot/interrupted_call.h"

#include <errno.h>
#include <stdint.h>
#include <ucontext.h>

namespace retain::shim {

#if defined(__x86_64__)

bool EndInterruptedSystemCall(void* ucontext, long number, uintptr_t function) {
  auto* context = static_cast<ucontext_t*>(ucontext);
  greg_t& rip = context->uc_mcontext.gregs[REG_RIP];
  greg_t& rax = context->uc_mcontext.gregs[REG_RAX];
  // A restart leaves rax holding the call's number again and rip on the
  // two-byte `syscall` (0f 05); so does a signal taken just before it ran.
  // After the call returned, rip is past it and rax is its result.
  if (static_cast<uintptr_t>(rip) - function >= kInterruptibleFunctionBytes) return false;
  const auto* code = reinterpret_cast<const uint8_t*>(rip);
  if (rax != number || code[0] != 0x0f || code[1] != 0x05) return false;
  rip += 2;
  rax = -EINTR;
  return true;
}

#else

bool EndInterruptedSystemCall(void*, long, uintptr_t) { return false; }

#endif

}  // namespace retain::shim
