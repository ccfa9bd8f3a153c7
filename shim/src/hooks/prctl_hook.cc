// prctl_hook: prctl, for the two options that announce a seccomp filter
// (base/syscall_filter.h): PR_SET_NO_NEW_PRIVS, which an unprivileged
// process must set before it may install one (Chromium's sandbox, libseccomp,
// OpenSSH), and PR_SET_SECCOMP itself. The shim notes the filter before the
// real call (a sandbox, base/syscall_filter.h), so no system call it makes
// afterwards is one the filter may kill the process for. The result and
// errno are libc's.
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/syscall_filter.h"
#include "record/hook_shape.h"

using namespace retain::shim;

RETAIN_EXPORT int prctl(int option, ...) {
  va_list arguments;
  va_start(arguments, option);
  // prctl takes up to four more unsigned longs; reading all four is what
  // glibc's own wrapper does.
  const unsigned long a2 = va_arg(arguments, unsigned long);
  const unsigned long a3 = va_arg(arguments, unsigned long);
  const unsigned long a4 = va_arg(arguments, unsigned long);
  const unsigned long a5 = va_arg(arguments, unsigned long);
  va_end(arguments);
  if (option == PR_SET_SECCOMP || (option == PR_SET_NO_NEW_PRIVS && a2 != 0)) {
    NoteSyscallFilter(FilterLevel::kSandboxed);
  }
  if (RETAIN_UNLIKELY(!RealFunctionsReady() || g_real.prctl == nullptr)) {
    return static_cast<int>(syscall(SYS_prctl, option, a2, a3, a4, a5));
  }
  return g_real.prctl(option, a2, a3, a4, a5);
}
